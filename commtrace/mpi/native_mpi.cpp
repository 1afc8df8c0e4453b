// C++ fast path for commtrace's mpi backend (built by commtrace/mpi/fastpath.py).
//
// Why: a 1-element blocking all_reduce through the Python MPIProcessGroup costs
// ~1.3 us of Python (pybind trampoline, options read, buffer view, Work object)
// on top of MPI_Allreduce. This class is a c10d::ProcessGroup written in C++:
// Python and C++ callers reach its virtual methods without entering Python, and
// the common blocking collectives (all_reduce, broadcast) on plain CPU tensors
// call MPI directly, on the communicator the Python group owns, without the GIL.
//
// Everything else is forwarded, unchanged, to the Python group ("inner"), which
// stays the reference implementation: async ops and its worker thread, AVG,
// float16/bfloat16 (user-defined MPI ops in Python), non-contiguous tensors, every
// other collective, every error message. The fast path accepts exactly the
// (dtype, op) pairs for which commtrace/mpi/dtypes.py uses a predefined MPI type
// and op, and issues the very same MPI call (same datatype, same op, in place),
// so its results are bit-identical to the Python backend's. It runs only in the
// communicator's turn, as the Python group's own inline calls do: every collective
// reaches MPI as the same kind of call on every rank, in call order
// (runtime.CollectiveQueue; all_reduces over IALLREDUCE_ABOVE_BYTES are MPI_Iallreduce,
// left to the Python group); while the Python group has collectives queued or running,
// the call goes to it and waits there.
//
// Every op virtual of c10d::ProcessGroup is overridden with `override`: if a
// torch release changes a signature, this file fails to compile and commtrace
// falls back to the Python group instead of silently routing an op to
// c10d's dispatcher (which finds no backend registered on this group).
#include <mpi.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include "torch_compat.h"
#include CT_PY_PROCESS_GROUP_HEADER
#include <torch/csrc/utils/pybind.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/record_function.h>

#include <pybind11/chrono.h>

#include <atomic>
#include <climits>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using RedOp = c10d::ReduceOp;

// The MPI datatype commtrace/mpi/dtypes.py (_TABLE) uses to move a torch dtype,
// or MPI_DATATYPE_NULL for dtypes it does not support (the Python group then
// raises its own error). Types MPI lacks travel as same-sized integers there;
// the same choice here keeps blocking calls of the two paths matchable.
MPI_Datatype transport(at::ScalarType st) {
  switch (st) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kHalf:
    case at::kBFloat16: return MPI_UINT16_T;
    case at::kChar: return MPI_INT8_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kShort: return MPI_INT16_T;
    case at::kInt: return MPI_INT32_T;
    case at::kLong: return MPI_INT64_T;
    case at::kUInt16: return MPI_UINT16_T;
    case at::kUInt32: return MPI_UINT32_T;
    case at::kUInt64: return MPI_UINT64_T;
    case at::kBool: return MPI_C_BOOL;
    case at::kComplexFloat: return MPI_C_FLOAT_COMPLEX;
    case at::kComplexDouble: return MPI_C_DOUBLE_COMPLEX;
    case at::kComplexHalf: return MPI_UINT32_T;
    case at::kFloat8_e4m3fn:
    case at::kFloat8_e5m2:
    case at::kFloat8_e4m3fnuz:
    case at::kFloat8_e5m2fnuz:
#if CT_HAS_FLOAT8_E8M0FNU
    case at::kFloat8_e8m0fnu:
#endif
      return MPI_BYTE;
    default: return MPI_DATATYPE_NULL;
  }
}

// The predefined MPI op dtypes.reduce_op() picks for (op, dtype), or MPI_OP_NULL
// where the Python group must do the work: AVG (division after the sum),
// float16/bfloat16 (Python-defined MPI ops), PREMUL_SUM and every combination
// it refuses (it raises a ValueError naming op and dtype).
MPI_Op reduction(RedOp::RedOpType op, at::ScalarType st) {
  switch (st) {
    case at::kChar: case at::kByte: case at::kShort: case at::kInt: case at::kLong:
    case at::kUInt16: case at::kUInt32: case at::kUInt64:
      switch (op) {
        case RedOp::SUM: return MPI_SUM;
        case RedOp::PRODUCT: return MPI_PROD;
        case RedOp::MIN: return MPI_MIN;
        case RedOp::MAX: return MPI_MAX;
        case RedOp::BAND: return MPI_BAND;
        case RedOp::BOR: return MPI_BOR;
        case RedOp::BXOR: return MPI_BXOR;
        default: return MPI_OP_NULL;
      }
    case at::kFloat: case at::kDouble:
      switch (op) {
        case RedOp::SUM: return MPI_SUM;
        case RedOp::PRODUCT: return MPI_PROD;
        case RedOp::MIN: return MPI_MIN;
        case RedOp::MAX: return MPI_MAX;
        default: return MPI_OP_NULL;
      }
    case at::kBool:
      // gloo reduces bool as bytes holding 0/1; dtypes.py maps to the logical ops.
      switch (op) {
        case RedOp::SUM: case RedOp::MAX: case RedOp::BOR: return MPI_LOR;
        case RedOp::PRODUCT: case RedOp::MIN: case RedOp::BAND: return MPI_LAND;
        case RedOp::BXOR: return MPI_LXOR;
        default: return MPI_OP_NULL;
      }
    case at::kComplexFloat: case at::kComplexDouble:
      return op == RedOp::SUM ? MPI_SUM : MPI_OP_NULL;
    default:
      return MPI_OP_NULL;
  }
}

// A tensor MPI can read and write in place through data_ptr(): what the Python
// group's numpy view would see. Conjugate/negative views are lazy (the bits in
// memory are not the values), so they go to Python, which refuses them.
bool plain_cpu(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.layout() == at::kStrided && t.is_contiguous() &&
      !t.is_conj() && !t.is_neg() && t.numel() <= INT_MAX;
}

// MPI blocks until the peers arrive: never hold the GIL meanwhile. Callers from
// Python arrive without it (torch's bindings release it); a C++ caller might
// hold it.
class NoGIL {
 public:
  NoGIL() : state_(PyGILState_Check() ? PyEval_SaveThread() : nullptr) {}
  ~NoGIL() {
    if (state_ != nullptr) PyEval_RestoreThread(state_);
  }
  NoGIL(const NoGIL&) = delete;
  NoGIL& operator=(const NoGIL&) = delete;

 private:
  PyThreadState* state_;
};

[[noreturn]] void mpi_failed(const char* call, int rc) {
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
  TORCH_CHECK(false, "mpi backend: ", call, " failed: ", std::string(msg, len), " (error code ", rc, ")");
}

// Drops a Python reference with the GIL held (C++ may release the last
// reference to a Work or group from any thread). After interpreter shutdown
// the object is leaked: taking the GIL then is not possible.
void release_py(py::object& o) {
  if (!o) return;
  if (Py_IsInitialized()) {
    py::gil_scoped_acquire gil;
    o = py::object();
  } else {
    o.release();
  }
}

// One op's torch profiler event, as c10d::Work's constructor starts it and Work::finish
// ends it: titled like torch's ProcessGroupMPI ("mpi:all_reduce"), marked async (the op
// may end on another thread), with its input tensors (shapes under record_shapes).
// While no profiler (no RecordFunction callback) is on, it is one check and nothing else.
// The Python group's ops get theirs from Python (profiling.py), through this class while
// the fast path is in use.
class OpEvent {
 public:
  OpEvent(const char* title, const std::vector<at::Tensor>& inputs) {
    auto callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::USER_SCOPE);
    if (C10_LIKELY(!callbacks)) return;
    title_ = title;
    record_ = std::make_unique<at::RecordFunction>(std::move(*callbacks));
    if (!record_->isActive()) return;
    record_->_setAsync();
    if (record_->needsInputs()) {
      std::vector<c10::IValue> args(inputs.begin(), inputs.end());
      record_->before(title_.c_str(), c10::ArrayRef<const c10::IValue>(args.data(), args.size()));
    } else {
      record_->before(title_.c_str());
    }
    state_.emplace();  // the profiler's thread-local state, for an end on another thread
  }
  ~OpEvent() { end(); }
  OpEvent(const OpEvent&) = delete;
  OpEvent& operator=(const OpEvent&) = delete;

  void end() {
    if (!record_) return;
    if (state_) {
      at::ThreadLocalStateGuard guard(*state_);
      record_->end();
    }
    record_.reset();
  }

 private:
  std::string title_;  // the record function keeps a pointer to it
  std::unique_ptr<at::RecordFunction> record_;
  std::optional<at::ThreadLocalState> state_;
};

// The Work of a fast-path op: the MPI call returned, so it is complete and
// successful. get_future() gives a completed future holding the tensors, which
// is what DDP's reducer and torch.futures users wait on.
class DoneWork : public Work {
 public:
  DoneWork(int rank, c10d::OpType type, std::vector<at::Tensor> tensors)
      : Work(rank, type), tensors_(std::move(tensors)) {
    completed_ = true;
  }
  bool isCompleted() override { return true; }
  bool isSuccess() const override { return true; }
  bool wait(std::chrono::milliseconds /*timeout*/) override { return true; }

  // Same op kind on the very same tensor objects (this Work keeps them alive,
  // so equal TensorImpl pointers mean the same tensor, not a recycled address).
  bool holds(const std::vector<at::Tensor>& tensors, c10d::OpType type) const {
    if (type != opType_ || tensors.size() != tensors_.size()) return false;
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (tensors[i].unsafeGetTensorImpl() != tensors_[i].unsafeGetTensorImpl()) return false;
    }
    return true;
  }
  // Worth keeping for reuse without pinning much memory (cf. the Python group's
  // 4096-element buffer cache).
  bool small() const { return tensors_.size() == 1 && tensors_[0].nbytes() <= kSmallBytes; }
  static constexpr size_t kSmallBytes = 64 * 1024;
  std::vector<at::Tensor> result() override { return tensors_; }
  void synchronize() override {}
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!future_) {  // one future per work, whoever asks (as c10d's own Works)
      future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
      future_->markCompleted(c10::IValue(tensors_));
    }
    return future_;
  }

 private:
  std::vector<at::Tensor> tensors_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

// The Work of a forwarded op: the Python group's Work object, every method
// answered by its Python implementation. (torch's own trampoline holder forwards
// only wait() and get_future(); C++ callers and Python callers of this group
// also need is_completed(), source_rank() for recv_anysource, result(), ...)
class PyForwardWork : public Work {
 public:
  explicit PyForwardWork(py::object work) : work_(std::move(work)) {}
  ~PyForwardWork() override { release_py(work_); }

  bool isCompleted() override { return call<bool>("is_completed"); }
  bool isSuccess() const override { return call<bool>("is_success"); }
  int sourceRank() const override { return call<int>("source_rank"); }
  std::vector<at::Tensor> result() override { return call<std::vector<at::Tensor>>("result"); }
  void synchronize() override {
    py::gil_scoped_acquire gil;
    work_.attr("synchronize")();
  }
  std::exception_ptr exception() const override {
    py::gil_scoped_acquire gil;
    py::object e = work_.attr("exception")();
    if (e.is_none()) return nullptr;
    return std::make_exception_ptr(std::runtime_error(py::str(e).cast<std::string>()));
  }
  bool wait(std::chrono::milliseconds timeout) override {
    py::gil_scoped_acquire gil;
    py::object r = timeout == kNoTimeout ? work_.attr("wait")() : work_.attr("wait")(timeout);
    return r.is_none() || r.cast<bool>();
  }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    py::gil_scoped_acquire gil;
    return work_.attr("get_future")().cast<std::shared_ptr<torch::jit::PythonFutureWrapper>>()->fut;
  }

 private:
  template <typename R>
  R call(const char* name) const {
    py::gil_scoped_acquire gil;
    return work_.attr(name)().cast<R>();
  }
  py::object work_;
};

class NativeMPIProcessGroup : public c10d::ProcessGroup {
 public:
  // inner: the Python MPIProcessGroup; comm: its communicator's MPI handle
  // (mpi4py's Comm.handle). The inner group keeps owning the communicator.
  NativeMPIProcessGroup(py::object inner, intptr_t comm)
      : ProcessGroup(inner.attr("rank")().cast<int>(), inner.attr("size")().cast<int>()),
        py_(std::move(inner)),
        inner_(py_.cast<c10::intrusive_ptr<c10d::ProcessGroup>>()),
        comm_(reinterpret_cast<MPI_Comm>(comm)) {
    py::object queue = py_.attr("_queue");
    queued_ = queue.attr("queued");
    acquire_ = queue.attr("turn").attr("acquire");
    iallreduce_above_ = py_.attr("IALLREDUCE_ABOVE_BYTES").cast<int64_t>();
    release_ = queue.attr("turn").attr("release");
  }

  ~NativeMPIProcessGroup() override {
    for (auto& r : recent_) release_py(r.py);
    release_py(queued_);
    release_py(acquire_);
    release_py(release_);
    release_py(py_);
  }

  const py::object& inner() const { return py_; }

  // -- identity ---------------------------------------------------------------
  const std::string getBackendName() const override { return "mpi"; }

  // The base class keeps group names in its (absent) backends, so they are
  // stored here; the inner group is told too, for code that holds it.
#if CT_PG_GROUP_NAME_VIRTUAL
  const std::string& getGroupName() const override { return name_; }
  void setGroupName(const std::string& name) override {
    name_ = name;
    py::gil_scoped_acquire gil;
    py_.attr("setGroupName")(name);
  }
  const std::string& getGroupDesc() const override { return desc_; }
  void setGroupDesc(const std::string& desc) override {
    desc_ = desc;
    py::gil_scoped_acquire gil;
    py_.attr("setGroupDesc")(desc);
  }
#endif

#if CT_PG_SET_TIMEOUT_VIRTUAL
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
#endif

  // shutdown/abort free the communicator (inner group): no fast-path call may
  // use it afterwards, so it is forgotten first.
#if CT_PG_SHUTDOWN_VIRTUAL
  void shutdown() override {
    comm_.store(MPI_COMM_NULL);
    py::gil_scoped_acquire gil;
    py_.attr("shutdown")();
  }
  void abort() override {
    comm_.store(MPI_COMM_NULL);
    py::gil_scoped_acquire gil;
    py_.attr("abort")();
  }
#endif

  // While coalescing, the inner group collects the Works of the ops issued so
  // that end_coalescing returns one Work over them all: every op goes to it.
  void startCoalescing(c10::DeviceType deviceType) override {
    py::gil_scoped_acquire gil;
    py_.attr("start_coalescing")(c10::Device(deviceType));
    coalescing_.store(true);
  }
  WorkPtr endCoalescing(c10::DeviceType deviceType) override {
    coalescing_.store(false);
    return forward("end_coalescing", c10::Device(deviceType));
  }

  // -- fast path -------------------------------------------------------------------
  // C++ callers (DDP, functional collectives, torch's generic bindings) enter
  // through the virtuals; Python callers of allreduce/broadcast(tensors, opts)
  // through from_python(). Both take the fast path under the same conditions.
  WorkPtr allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) override {
    return from_cpp(tensors, opts);
  }
  WorkPtr broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) override {
    return from_cpp(tensors, opts);
  }

  // Python's entry for allreduce/broadcast(tensors, opts) (what torch.distributed's
  // Python functions and commtrace's tracer call). Runs with the GIL, which
  // execute() releases around MPI only.
  //  * Not for the fast path (or another argument form): the caller's own
  //    arguments go to the Python group's method and its Work object comes
  //    back, as if the caller had called it: no conversion of the arguments,
  //    no GIL hand-over to a C++ method and back, no C++ wrapper on the Work.
  //  * Fast path: creating and destroying the Python object of a Work costs
  //    ~0.3 us, a third of the whole call. So the last finished Work of each
  //    kind is kept with its Python object, and a blocking call on the same
  //    small tensor as the previous one (a loss, a counter, a flag: the common
  //    loop) returns that object again. A finished Work holding the same tensor
  //    is indistinguishable from a new one except by identity (`w1 is w2`);
  //    its one future is completed with the same list. The GIL guards the cache.
  template <typename Opts>
  py::object from_python(const py::object& tensors_obj, const py::object& opts_obj) {
    std::vector<at::Tensor> tensors;
    const Opts* opts = fast_form<Opts>(tensors_obj, opts_obj, tensors);
    FastCall call;
    if (opts == nullptr || !plan(tensors, *opts, call) || !claim_turn()) {
      return py_.attr(kName<Opts>)(tensors_obj, opts_obj);
    }
    {
      Turn turn(*this);
      OpEvent event(call.title, tensors);
      execute(tensors[0], call);  // releases the GIL around MPI
    }
    Recent& recent = recent_[call.type == c10d::OpType::BROADCAST ? 1 : 0];
    if (recent.work && recent.work->holds(tensors, call.type)) return recent.py;
    auto work = c10::make_intrusive<DoneWork>(rank_, call.type, tensors);
    py::object obj = py::cast(WorkPtr(work));
    if (work->small()) {
      recent.work = std::move(work);
      recent.py = obj;  // drops the previous one (GIL held)
    }
    return obj;
  }

  // For (tensors, opts) calls whose tensors are a list of Tensors and opts an
  // Opts (torch.distributed's form, the only one the fast path takes): the
  // options, used in place, with the tensors in `tensors`. Else nullptr.
  template <typename Opts>
  static const Opts* fast_form(const py::object& tensors_obj, const py::object& opts_obj,
                               std::vector<at::Tensor>& tensors) {
    if (!PyList_Check(tensors_obj.ptr())) return nullptr;
    py::detail::make_caster<Opts> opts;
    py::detail::make_caster<std::vector<at::Tensor>> list;
    if (!opts.load(opts_obj, false) || !list.load(tensors_obj, false)) return nullptr;
    tensors = py::detail::cast_op<std::vector<at::Tensor>&&>(std::move(list));
    return &py::detail::cast_op<const Opts&>(opts);  // points into opts_obj, not the caster
  }

  template <typename Opts>
  static constexpr const char* kName = std::is_same_v<Opts, c10d::BroadcastOptions> ? "broadcast" : "allreduce";

  // -- forwarded: the Python group's method of the same (Python) name -------------
  WorkPtr allreduce_coalesced(std::vector<at::Tensor>& tensors,
                              const c10d::AllreduceCoalescedOptions& opts) override {
    return forward("allreduce_coalesced", tensors, opts);
  }
  WorkPtr reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    return forward("reduce", tensors, opts);
  }
  WorkPtr allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                    const c10d::AllgatherOptions& opts) override {
    return forward("allgather", outputs, inputs, opts);
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr all_gather_single(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return forward("all_gather_single", output, input, opts);
  }
#endif
  WorkPtr _allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) override {
    return forward("_allgather_base", output, input, opts);
  }
  WorkPtr allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                              const c10d::AllgatherOptions& opts) override {
    return forward("allgather_coalesced", outputs, inputs, opts);
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr all_gather_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                      const c10d::AllgatherOptions& opts) override {
    return forward("all_gather_single_coalesced", outputs, inputs, opts);
  }
#endif
  WorkPtr allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllgatherOptions& opts) override {
    return forward("allgather_into_tensor_coalesced", outputs, inputs, opts);
  }
  WorkPtr gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                 const c10d::GatherOptions& opts) override {
    return forward("gather", outputs, inputs, opts);
  }
#if CT_PG_GATHER_SINGLE
  WorkPtr gather_single(at::Tensor& output, at::Tensor& input, const c10d::GatherOptions& opts) override {
    return forward("gather_single", output, input, opts);
  }
#endif
  WorkPtr scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                  const c10d::ScatterOptions& opts) override {
    return forward("scatter", outputs, inputs, opts);
  }
  WorkPtr reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                         const c10d::ReduceScatterOptions& opts) override {
    return forward("reduce_scatter", outputs, inputs, opts);
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr reduce_scatter_single(at::Tensor& output, at::Tensor& input,
                                const c10d::ReduceScatterOptions& opts) override {
    return forward("reduce_scatter_single", output, input, opts);
  }
#endif
  WorkPtr _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                               const c10d::ReduceScatterOptions& opts) override {
    return forward("_reduce_scatter_base", output, input, opts);
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr reduce_scatter_single_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return forward("reduce_scatter_single_coalesced", outputs, inputs, opts);
  }
#endif
  WorkPtr reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::ReduceScatterOptions& opts) override {
    return forward("reduce_scatter_tensor_coalesced", outputs, inputs, opts);
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr all_to_all_single(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                            std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override {
    return forward("all_to_all_single", output, input, outputSplits, inputSplits, opts);
  }
#endif
  WorkPtr alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplits,
                        std::vector<int64_t>& inputSplits, const c10d::AllToAllOptions& opts) override {
    return forward("alltoall_base", output, input, outputSplits, inputSplits, opts);
  }
  WorkPtr alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                   const c10d::AllToAllOptions& opts) override {
    return forward("alltoall", outputs, inputs, opts);
  }
  WorkPtr barrier(const c10d::BarrierOptions& opts) override { return forward("barrier", opts); }
  WorkPtr send(std::vector<at::Tensor>& tensors, int dstRank, int tag) override {
    return forward("send", tensors, dstRank, tag);
  }
  WorkPtr recv(std::vector<at::Tensor>& tensors, int srcRank, int tag) override {
    return forward("recv", tensors, srcRank, tag);
  }
  WorkPtr recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    return forward("recv_anysource", tensors, tag);
  }

  // Not implemented by the Python group: the inner group answers as it does
  // today (c10d's base implementation: gloo-only / unsupported errors).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    inner_->monitoredBarrier(opts, waitAllRanks);
  }
#if CT_PG_SET_SEQUENCE_NUMBER
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
#endif
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
#if CT_PG_SPLIT_GROUP_DEVICES  // older signatures differ: the base implementation answers there
  c10::intrusive_ptr<ProcessGroup> splitGroup(const std::vector<int>& ranks,
                                              const std::optional<std::chrono::milliseconds>& timeout,
                                              const std::optional<c10::intrusive_ptr<c10d::Backend::Options>>& opts,
                                              const std::optional<std::string>& name,
                                              const std::optional<std::string>& groupDesc,
                                              const std::optional<std::vector<c10::Device>>& devices) override {
    return inner_->splitGroup(ranks, timeout, opts, name, groupDesc, devices);
  }
  c10::intrusive_ptr<ProcessGroup> mergeRemoteGroup(const c10::intrusive_ptr<c10d::Store>& store,
                                                    const MergeOptions& opts, const int& size) override {
    return inner_->mergeRemoteGroup(store, opts, size);
  }
#endif

 private:
  // The communicator for a fast-path call, or MPI_COMM_NULL: none while
  // coalescing (the inner group must see those ops) or after shutdown.
  MPI_Comm fast_comm() const {
    return coalescing_.load(std::memory_order_relaxed) ? MPI_COMM_NULL : comm_.load(std::memory_order_relaxed);
  }

  // One fast-path MPI call, decided by plan() and run by execute().
  struct FastCall {
    const char* name = nullptr;  // the Python group's method, for the other path
    const char* title = nullptr;  // its profiler event's (torch's ProcessGroupMPI's)
    c10d::OpType type = c10d::OpType::UNKNOWN;
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Datatype datatype = MPI_DATATYPE_NULL;
    MPI_Op op = MPI_OP_NULL;  // all_reduce only
    int root = 0;             // broadcast only
  };

  // Whether a call takes the fast path (sets `call` either way). Blocking only:
  // an async op must overlap with the caller, which the Python group's queue
  // worker does (runtime.CollectiveQueue).
  bool plan(const std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts, FastCall& call) const {
    call.name = "allreduce";
    call.title = "mpi:all_reduce";
    call.type = c10d::OpType::ALLREDUCE;
    if (ct::compat::async_op(opts) || tensors.size() != 1 || opts.sparseIndices.has_value() || !plain_cpu(tensors[0])) return false;
    // Large ones are MPI_Iallreduce on every rank (the Python group's rule): not here.
    if (static_cast<int64_t>(tensors[0].nbytes()) > iallreduce_above_) return false;
    call.op = reduction(opts.reduceOp.op_, tensors[0].scalar_type());
    call.datatype = transport(tensors[0].scalar_type());
    call.comm = fast_comm();
    return call.op != MPI_OP_NULL && call.comm != MPI_COMM_NULL;
  }
  bool plan(const std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts, FastCall& call) const {
    call.name = "broadcast";
    call.title = "mpi:broadcast";
    call.type = c10d::OpType::BROADCAST;
    // An out-of-range root is the Python group's to refuse (with its message).
    if (ct::compat::async_op(opts) || tensors.size() != 1 || opts.rootTensor != 0 || opts.rootRank < 0 || opts.rootRank >= size_ ||
        !plain_cpu(tensors[0])) {
      return false;
    }
    call.root = static_cast<int>(opts.rootRank);
    call.datatype = transport(tensors[0].scalar_type());
    call.comm = fast_comm();
    return call.datatype != MPI_DATATYPE_NULL && call.comm != MPI_COMM_NULL;
  }

  // The MPI call itself, in place on t, without the GIL.
  static void execute(const at::Tensor& t, const FastCall& call) {
    int rc;
    {
      NoGIL nogil;
      rc = call.type == c10d::OpType::ALLREDUCE
          ? MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), call.datatype, call.op, call.comm)
          : MPI_Bcast(t.data_ptr(), static_cast<int>(t.numel()), call.datatype, call.root, call.comm);
    }
    if (rc != MPI_SUCCESS) mpi_failed(call.type == c10d::OpType::ALLREDUCE ? "Allreduce" : "Bcast", rc);
  }

  template <typename Opts>
  WorkPtr from_cpp(std::vector<at::Tensor>& tensors, const Opts& opts) {
    FastCall call;
    if (!plan(tensors, opts, call)) return forward(call.name, tensors, opts);
    py::gil_scoped_acquire gil;
    if (!claim_turn()) return forward(call.name, tensors, opts);
    {
      Turn turn(*this);
      OpEvent event(call.title, tensors);
      execute(tensors[0], call);  // releases the GIL around MPI
    }
    return c10::make_intrusive<DoneWork>(rank_, call.type, tensors);
  }

  // Calls the Python group's method `name` and wraps the Work it returns.
  // Tensors cross as the same tensors (no copies): the Python code writes
  // results into them in place, as when it is called directly.
  template <typename... Args>
  WorkPtr forward(const char* name, Args&&... args) {
    py::gil_scoped_acquire gil;
    py::object work = py_.attr(name)(std::forward<Args>(args)...);
    TORCH_CHECK(!work.is_none(), "mpi backend: ", name, " returned no Work");
    return c10::make_intrusive<PyForwardWork>(std::move(work));
  }

  // The previous finished Work returned to Python for allreduce [0] and
  // broadcast [1], and its Python object (see from_python; GIL-guarded).
  struct Recent {
    c10::intrusive_ptr<DoneWork> work;
    py::object py;
  };
  Recent recent_[2];

  // The communicator's turn (GIL held), as CollectiveQueue.claim() takes it: when
  // nothing is queued or being issued, take its lock without waiting.
  bool claim_turn() const {
    if (PyObject_Length(queued_.ptr()) != 0) return false;
    PyObject* r = PyObject_CallOneArg(acquire_.ptr(), Py_False);
    if (r == nullptr) throw py::error_already_set();
    const bool ok = r == Py_True;
    Py_DECREF(r);
    return ok;
  }
  // Gives the turn back when the fast-path call is over (or failed); GIL held.
  class Turn {
   public:
    explicit Turn(const NativeMPIProcessGroup& g) : g_(g) {}
    ~Turn() {
      PyObject* r = PyObject_CallNoArgs(g_.release_.ptr());
      if (r == nullptr) PyErr_Clear(); else Py_DECREF(r);
    }
    Turn(const Turn&) = delete;
    Turn& operator=(const Turn&) = delete;

   private:
    const NativeMPIProcessGroup& g_;
  };

  py::object py_;
  py::object queued_;   // the Python group's runtime.CollectiveQueue: its deque, turn.acquire/release
  py::object acquire_;
  py::object release_;
  int64_t iallreduce_above_ = 0;   // MPIProcessGroup.IALLREDUCE_ABOVE_BYTES
  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  std::atomic<MPI_Comm> comm_;
  std::atomic<bool> coalescing_{false};
  std::string name_;
  std::string desc_;
};

std::string library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(buf, &len) != MPI_SUCCESS) return "";
  return std::string(buf, len);
}

int thread_level() {
  int initialized = 0, finalized = 0, level = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  MPI_Query_thread(&level);
  return level;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  py::module::import("torch.distributed");  // registers ProcessGroup, Work and the Options types
  m.doc() = "commtrace's C++ fast path for the mpi backend (see commtrace/mpi/fastpath.py)";

  py::class_<NativeMPIProcessGroup, c10d::ProcessGroup, c10::intrusive_ptr<NativeMPIProcessGroup>> cls(
      m, "NativeMPIProcessGroup");
  cls.def(py::init<py::object, intptr_t>(), py::arg("inner"), py::arg("comm_handle"))
      // No C++ backend is registered on this group: the Python group answers for it
      // (MPIProcessGroup._get_backend; torch 2.15's batch_isend_irecv asks).
      .def("_get_backend", [](NativeMPIProcessGroup& self, const c10::Device& device) {
        return self.inner().attr("_get_backend")(device);
      }, py::arg("device"))
      // Python callers of allreduce/broadcast(tensors, opts): fast path or the
      // Python group (from_python); other argument forms: the loop below.
      .def("allreduce", &NativeMPIProcessGroup::from_python<c10d::AllreduceOptions>, py::arg("tensors"),
           py::arg("opts"))
      .def("broadcast", &NativeMPIProcessGroup::from_python<c10d::BroadcastOptions>, py::arg("tensors"),
           py::arg("opts"))
      // The Python group's public aliases of _start/_end_coalescing: through the
      // C++ methods, which must know that coalescing is on (see startCoalescing).
      .def("start_coalescing",
           [](NativeMPIProcessGroup& self, const std::optional<c10::Device>& device) {
             self.startCoalescing(device ? device->type() : c10::kCPU);
           },
           py::arg("device") = py::none())
      .def("end_coalescing",
           [](NativeMPIProcessGroup& self, const std::optional<c10::Device>& device) {
             return self.endCoalescing(device ? device->type() : c10::kCPU);
           },
           py::arg("device") = py::none())
      .def_property_readonly("inner", &NativeMPIProcessGroup::inner,
                             "The Python MPIProcessGroup that owns the communicator and does every "
                             "op the fast path does not.")
      // Attributes the C++ class lacks (comm, the Python alias method names)
      // come from the inner group, so the object can stand in for it.
      .def("__getattr__",
           [](const NativeMPIProcessGroup& self, const std::string& name) -> py::object {
             if (name.size() > 4 && name.compare(0, 2, "__") == 0) throw py::attribute_error(name);
             return self.inner().attr(name.c_str());
           })
      .def("__repr__", [](const NativeMPIProcessGroup& self) {
        return "<commtrace NativeMPIProcessGroup over " + py::repr(self.inner()).cast<std::string>() + ">";
      });

#if !CT_PG_GROUP_NAME_VIRTUAL
  // Before torch 2.6 the base class's name and description are not virtual and live
  // in its backends (none here): c10d sets and reads them from Python, so these
  // bindings hand them to the inner group, which keeps them.
  cls.def("_set_group_name", [](NativeMPIProcessGroup& self, const std::string& name) {
       self.inner().attr("_set_group_name")(name);
     })
      .def("_set_group_desc", [](NativeMPIProcessGroup& self, const std::string& desc) {
        self.inner().attr("_set_group_desc")(desc);
      })
      .def_property_readonly("group_name",
                             [](const NativeMPIProcessGroup& self) { return self.inner().attr("group_name"); })
      .def_property_readonly("group_desc",
                             [](const NativeMPIProcessGroup& self) { return self.inner().attr("group_desc"); });
#endif

#ifndef COMMTRACE_MPI_LIBRARY
#error "build through commtrace/mpi/fastpath.py: it defines COMMTRACE_MPI_LIBRARY"
#endif
  m.def("built_for", [] { return std::string(COMMTRACE_MPI_LIBRARY); },
        "The MPI library version (first line) this module was built for.");
  // Registered so that wait() -- called right after every blocking call by
  // torch's Python API -- skips Work.wait's binding (GIL release, timeout
  // conversion): 0.16 instead of 0.2 us. The work is complete: any timeout is moot.
  py::class_<DoneWork, Work, c10::intrusive_ptr<DoneWork>>(m, "DoneWork")
      .def("wait", [](DoneWork&) { return true; })
      .def("wait", [](DoneWork&, const py::object& /*timeout*/) { return true; }, py::arg("timeout"));

  // Python callers of every other op (and of allreduce/broadcast in other
  // argument forms) reach the Python group's method directly and get its Work
  // object: the behaviour of the Python backend, without passing through the
  // C++ method (GIL released by torch's binding, taken back to call Python)
  // and without a C++ wrapper around its Work. C++ callers use the virtuals.
  // _start/_end_coalescing are not listed: the C++ methods track coalescing.
  for (const char* name :
       {"allreduce", "broadcast", "allreduce_coalesced", "reduce", "allgather", "all_gather_single",
        "_allgather_base", "allgather_coalesced", "all_gather_single_coalesced", "allgather_into_tensor_coalesced",
        "gather", "gather_single", "scatter", "reduce_scatter", "reduce_scatter_single", "_reduce_scatter_base",
        "reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced", "all_to_all_single", "alltoall_base",
        "alltoall", "barrier", "send", "recv", "recv_anysource"}) {
    cls.def(name, [name](const NativeMPIProcessGroup& self, const py::args& args, const py::kwargs& kwargs) {
      return self.inner().attr(name)(*args, **kwargs);
    });
  }

  py::class_<OpEvent>(m, "OpEvent", "A profiler event of the Python group's op (profiling.py).")
      .def(py::init([](const std::string& title, const std::vector<at::Tensor>& inputs) {
             return std::make_unique<OpEvent>(title.c_str(), inputs);
           }),
           py::arg("title"), py::arg("inputs"))
      .def("end", &OpEvent::end);

  m.def("library_version", &library_version, "MPI_Get_library_version of the MPI this module calls.");
  m.def("thread_level", &thread_level, "MPI_Query_thread, or -1 when MPI is not (or no longer) initialized.");
  m.def("comm_world_handle", [] { return reinterpret_cast<intptr_t>(MPI_COMM_WORLD); },
        "MPI_COMM_WORLD's handle as an integer (compare with mpi4py's COMM_WORLD.handle).");
  m.def("header_version", [] {
#if defined(OMPI_MAJOR_VERSION)
    return std::string("Open MPI v") + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) +
        "." + std::to_string(OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
    return std::string("MPICH Version: ") + MPICH_VERSION;
#else
    return std::string("unknown MPI");
#endif
  }, "The MPI implementation and version of the mpi.h this module was compiled with.");
}
