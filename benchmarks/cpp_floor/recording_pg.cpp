// Prototype for benchmarks/bench_cpp_floor.py -- not part of commtrace.
// A c10d::ProcessGroup that forwards allreduce to the real group and records
// (t_call, t_return, t_end, seq, sig) into a C++ buffer: the per-op work of
// commtrace's Python wrapper with no Python on the path. With with_callsite,
// the sig key also takes the caller's Python frames (GIL taken, 3 frames read),
// as a real C++ wrapper must for calls that come from Python.
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <chrono>
#include <mutex>
#include <unordered_map>

static inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Rec { int64_t t_call, t_ret, t_end; int64_t seq; int32_t sig; int32_t status; };

class RecPG : public c10d::ProcessGroup {
 public:
  RecPG(const c10::intrusive_ptr<c10d::ProcessGroup>& inner, bool with_callsite)
      : c10d::ProcessGroup(inner->getRank(), inner->getSize()), inner_(inner), with_callsite_(with_callsite) {
    recs_.reserve(1 << 20);
  }
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    int64_t t0 = now_ns();
    // the sig key: op, shape, dtype, reduce op, async
    size_t h = 1469598103934665603ull;
    for (auto& t : tensors) {
      for (auto s : t.sizes()) h = (h ^ (size_t)s) * 1099511628211ull;
      h = (h ^ (size_t)t.scalar_type()) * 1099511628211ull;
    }
    h = (h ^ (size_t)opts.reduceOp.op_) * 1099511628211ull;
    h = (h ^ (size_t)opts.asyncOp) * 1099511628211ull;
    if (with_callsite_) {
      PyGILState_STATE st = PyGILState_Ensure();
      PyFrameObject* f = PyEval_GetFrame();  // borrowed
      Py_XINCREF(f);
      for (int i = 0; f != nullptr && i < 3; ++i) {
        PyCodeObject* code = PyFrame_GetCode(f);
        h = (h ^ (size_t)code) * 1099511628211ull;
        h = (h ^ (size_t)PyFrame_GetLineNumber(f)) * 1099511628211ull;
        Py_DECREF(code);
        PyFrameObject* back = PyFrame_GetBack(f);
        Py_DECREF(f);
        f = back;
      }
      Py_XDECREF(f);
      PyGILState_Release(st);
    }
    int32_t sig;
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = sigs_.find(h);
      sig = it == sigs_.end() ? (sigs_[h] = (int32_t)sigs_.size()) : it->second;
    }
    auto w = inner_->allreduce(tensors, opts);
    int64_t seq = ++seq_;
    if (!opts.asyncOp) {
      w->wait();
      int64_t t1 = now_ns();
      std::lock_guard<std::mutex> g(mu_);
      recs_.push_back({t0, t1, t1, seq, sig, 0});
    } else {
      std::lock_guard<std::mutex> g(mu_);
      recs_.push_back({t0, now_ns(), 0, seq, sig, 2});
    }
    return w;
  }
  int64_t count() { std::lock_guard<std::mutex> g(mu_); return (int64_t)recs_.size(); }
  const std::string getBackendName() const override { return inner_->getBackendName(); }
 private:
  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  bool with_callsite_;
  std::mutex mu_;
  std::unordered_map<size_t, int32_t> sigs_;
  std::vector<Rec> recs_;
  int64_t seq_ = 0;
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::module::import("torch.distributed");
  py::class_<RecPG, c10d::ProcessGroup, c10::intrusive_ptr<RecPG>>(m, "RecPG")
      .def(py::init<const c10::intrusive_ptr<c10d::ProcessGroup>&, bool>())
      .def("count", &RecPG::count);
}
