// commtrace's native ProcessGroup wrapper: the C++ twin of wrapper.py's
// TracedProcessGroup, for every group implemented in C++ (native_wrapper.py
// decides) when this extension is built.
//
// Why: a Python ProcessGroup is reached through pybind's trampoline (GIL,
// argument casts, Python bytecode on caches gone cold while the rank slept in
// the backend); that alone cost +15..+40 us per op on a 2-core machine, and
// 2.5-3x more on the CUDA autograd thread. Here an op costs a key built from
// its arguments, one GIL round trip to read the caller's frame (the sig names
// the call site), a hash lookup and a row appended under a mutex.
//
// Records are packed in schema.OP_RECORD layout and drained by the Python
// flush thread (Log::drain). Sigs (static op descriptions) stay in Python:
// the first call with a new key calls native_wrapper's describe once.
// Semantics mirror wrapper.py: seq per group (per (op, peer) for p2p),
// blocking CPU ops waited for here, async CPU ops timed by a GIL-free callback
// on their future (polled when they have none), CUDA ops by end events
// (DeviceEndTimer), exceptions recorded and re-thrown unchanged.
#include <cstring>

#include "log.h"
#include "call_key.h"

namespace ct {

static bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

class TracedPG : public c10d::ProcessGroup {
 public:
  // inner_obj: the real group's Python object. Kept alive with the wrapper: a
  // backend written in Python (the mpi4py backend, a user's) is a pybind
  // trampoline whose overrides live in that object; once torch's registries hold
  // only the wrapper, nothing else would keep it, and its ops would fall through
  // to ProcessGroup's defaults ("No backend type associated with device type").
  TracedPG(py::object inner_obj, std::shared_ptr<Log> log, int gid)
      : TracedPG(inner_obj.cast<c10::intrusive_ptr<c10d::ProcessGroup>>(), inner_obj, std::move(log), gid) {}

  ~TracedPG() override {
    if (inner_py_ != nullptr && python_usable()) {  // at interpreter exit: leaked on purpose
      py::gil_scoped_acquire gil;
      Py_DECREF(inner_py_);
    }
    // The inner group may die with us (DDP's Reducer holds the last reference,
    // and Python frees the Reducer with the GIL held): gloo's destructor joins
    // worker threads that may need the GIL to free a work's tensors. Drop it
    // with the GIL released, as NoGilHolder does for Python's references.
    if (inner_ && python_usable() && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      inner_.reset();
    }
  }

  const c10::intrusive_ptr<c10d::ProcessGroup>& inner() const { return inner_; }
  py::object inner_object() const { return py::reinterpret_borrow<py::object>(inner_py_); }  // under the GIL
  int gid() const { return gid_; }

  // -- the traced call ------------------------------------------------------------
  // issue() calls the inner group; make_args() builds the Python arguments the
  // sig is described from (only for a new key); blocking: the caller will wait
  // right after we return (opts.asyncOp false), so we wait here for the exact end.
  template <class Issue, class MakeArgs>
  WorkPtr traced(Key& key, const char* method, const char* op_name, bool blocking, bool p2p, int64_t peer,
                 MakeArgs&& make_args, Issue&& issue) {
    if (!python_usable() || log_->paused()) return issue();
    auto op = std::make_shared<Op>();
    op->t_call = now_ns();
    op->group = gid_;
    Log& log = *log_;
    SigInfo info;
    bool capturing = false;  // a CUDA op issued while its stream captures a graph (asked under the GIL)
    // The call site and sig under the GIL. On gloo and NCCL, whose calls only
    // enqueue the op, this runs after issuing it, while the backend works: a
    // blocking caller waits anyway, and the op starts a few microseconds
    // sooner. Backends that may block inside the call (the mpi fast path, any
    // other) are described first, so a hang there still names its op. p2p ops
    // too: their seq counts per peer, under the GIL.
    auto describe = [&] {
      py::gil_scoped_acquire gil;
      op->iteration = log.read_int_attr(log.iteration_name_);
      key.add(log.context_id());
      key.add(int64_t(pthread_self()));
      key.add(gid_);  // a sig names global ranks (root, peer): they depend on the group
      log.user_code(key.v);
      info = log.sig_for(key.v, gid_, method, make_args);
      op->sig = info.sig;
      if (!info.cpu && info.cuda >= 0) capturing = log.stream_capturing();
      if (p2p) {
        op->seq = ++p2p_seq_[std::make_pair(std::string(op_name), peer)];
        op->any_source = std::strcmp(method, "recv_anysource") == 0;
      }
    };
    bool later = issue_only_enqueues_ && !p2p && !key.sparse_tensor;
    if (later) {
      op->seq = ++seq_;
    } else {
      if (!p2p) op->seq = ++seq_;
      describe();
      if (op->sig < 0) return issue();  // could not describe it: forward untraced rather than fail
    }
    if (!log.enter(op)) return issue();
    WorkPtr work;
    try {
      work = issue();
      if (later) {
        describe();
        if (op->sig < 0) {  // could not describe it: the op runs untraced
          log.forget(op);
          return work;
        }
      }
      if (!work || (blocking && info.cpu)) {  // device ops are never waited for here
        if (work) {
          try {
            work->wait();
          } catch (...) {
            // The op failed after it was issued: record it, and hand the work back.
            // The caller's own wait() raises the error where it would untraced
            // (torch's dist.all_reduce: at work.wait(), not at the issue).
            fail_current(op, describe);
            return work;
          }
        }
        op->t_return = now_ns();
        op->t_end = op->t_return;
        log.done(op);
      } else if (!info.cpu) {
        op->t_return = now_ns();
        log.track_device(op, work, info.cuda, capturing);
      } else {
        op->t_return = now_ns();
        log.track(op, work, p2p);
      }
    } catch (...) {
      fail_current(op, describe);
      throw;
    }
    return work;
  }

  // Records the exception being handled (call only inside a catch block) as the
  // op's failure; an exception of an unknown type propagates unrecorded, as before.
  template <class Describe>
  void fail_current(const OpPtr& op, Describe&& describe) {
    try {
      throw;
    } catch (py::error_already_set& e) {
      fail(op, [&] { return std::string(e.what()); }, describe);
    } catch (const std::exception&) {
      auto ex = std::current_exception();
      fail(op, [&] { return error_text(ex); }, describe);
    }
  }

  template <class Text, class Describe>
  void fail(const OpPtr& op, Text&& text, Describe&& describe) {
    int64_t t = now_ns();
    if (!op->t_return) op->t_return = t;
    op->t_end = t;
    op->status = STATUS_FAILED;
    if (op->sig < 0 && python_usable()) keeping_pending_error([&] { describe(); });  // raised before its deferred lookup
    if (op->sig < 0) {
      log_->forget(op);
      return;
    }
    if (!log_->done(op)) return;  // began in a session that has ended
    if (python_usable()) keeping_pending_error([&] { log_->report_error(*op, text()); });
  }

  // Runs ``f`` (it calls Python) under the GIL with this thread's pending Python exception set
  // aside and put back after. An exception raised in Python under the op (a dispatch mode, a
  // hook) reaches here as torch's python_error, which leaves the error pending in the
  // interpreter until the binding returns: calling Python cleared it, and the caller got
  // "SystemError: ... returned NULL without setting an exception" instead of its error.
  template <class F>
  static void keeping_pending_error(F&& f) {
    py::gil_scoped_acquire gil;
    py::error_scope pending;
    f();
  }

  // -- ops ----------------------------------------------------------------------------
#define CT_PYARGS(...) [&]() -> py::object { return py::make_tuple(__VA_ARGS__); }

  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    Key k(M_allreduce); k.tensors(ts); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "allreduce", "all_reduce", !compat::async_op(o), false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->allreduce(ts, o); });
  }
  WorkPtr allreduce_coalesced(Tensors& ts, const c10d::AllreduceCoalescedOptions& o) override {
    Key k(M_allreduce_coalesced); k.tensors(ts); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "allreduce_coalesced", "all_reduce", !compat::async_op(o), false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->allreduce_coalesced(ts, o); });
  }
  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    Key k(M_broadcast); k.tensors(ts); k.add(o.rootRank); k.add(o.rootTensor); k.add(compat::async_op(o));
    return traced(k, "broadcast", "broadcast", !compat::async_op(o), false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->broadcast(ts, o); });
  }
  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    Key k(M_reduce); k.tensors(ts); k.redop(o.reduceOp); k.add(o.rootRank); k.add(o.rootTensor); k.add(compat::async_op(o));
    return traced(k, "reduce", "reduce", !compat::async_op(o), false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->reduce(ts, o); });
  }
  WorkPtr allgather(TensorLists& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather); k.lists(out); k.tensors(in); k.add(compat::async_op(o));
    return traced(k, "allgather", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather(out, in, o); });
  }
  WorkPtr allgather_coalesced(TensorLists& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather_coalesced); k.lists(out); k.tensors(in); k.add(compat::async_op(o));
    return traced(k, "allgather_coalesced", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather_coalesced(out, in, o); });
  }
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    Key k(M__allgather_base); k.tensor(out); k.tensor(in); k.add(compat::async_op(o));
    return traced(k, "_allgather_base", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->_allgather_base(out, in, o); });
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather_into_tensor_coalesced); k.tensors(out); k.tensors(in); k.add(compat::async_op(o));
    return traced(k, "allgather_into_tensor_coalesced", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather_into_tensor_coalesced(out, in, o); });
  }
  WorkPtr gather(TensorLists& out, Tensors& in, const c10d::GatherOptions& o) override {
    Key k(M_gather); k.lists(out); k.tensors(in); k.add(o.rootRank); k.add(compat::async_op(o));
    return traced(k, "gather", "gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->gather(out, in, o); });
  }
#if CT_PG_GATHER_SINGLE
  // gather_into_tensor is not overridden: torch's own calls this one.
  WorkPtr gather_single(at::Tensor& out, at::Tensor& in, const c10d::GatherOptions& o) override {
    Key k(M_gather_single); k.tensor(out); k.tensor(in); k.add(o.rootRank); k.add(compat::async_op(o));
    return traced(k, "gather_single", "gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->gather_single(out, in, o); });
  }
#else
  // torch 2.14 binds ProcessGroup.gather_single (and gather_into_tensor) in Python only, to the
  // group's backend: no virtual to override, so the binding below traces the call and the inner
  // group's own binding issues it (else the op ran on the mirrored backend, unrecorded, and the
  // mpi fast path, which has no backend, failed).
  // The inner group's Work object goes back to the caller as it came (a Python Work, the mpi
  // backend's, lives only as long as its Python object: a C++ handle alone waited forever).
  // Called with the GIL.
  py::object gather_single_from_python(const char* method, at::Tensor& out, at::Tensor& in,
                                       const c10d::GatherOptions& o) {
    Key k(M_gather_single); k.tensor(out); k.tensor(in); k.add(o.rootRank); k.add(compat::async_op(o));
    k.add(int64_t(std::strcmp(method, "gather_single") != 0));   // the variant the caller used
    py::object work;
    {
      py::gil_scoped_release nogil;
      traced(k, method, "gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o), [&] {
        py::gil_scoped_acquire gil;
        work = inner_object().attr(method)(out, in, o);
        return work.cast<WorkPtr>();
      });
    }
    return work;
  }
#endif
  WorkPtr scatter(Tensors& out, TensorLists& in, const c10d::ScatterOptions& o) override {
    Key k(M_scatter); k.tensors(out); k.lists(in); k.add(o.rootRank); k.add(compat::async_op(o));
    return traced(k, "scatter", "scatter", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->scatter(out, in, o); });
  }
  WorkPtr reduce_scatter(Tensors& out, TensorLists& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter); k.tensors(out); k.lists(in); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "reduce_scatter", "reduce_scatter", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->reduce_scatter(out, in, o); });
  }
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M__reduce_scatter_base); k.tensor(out); k.tensor(in); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "_reduce_scatter_base", "reduce_scatter", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->_reduce_scatter_base(out, in, o); });
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& out, Tensors& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_tensor_coalesced); k.tensors(out); k.tensors(in); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "reduce_scatter_tensor_coalesced", "reduce_scatter", !compat::async_op(o), false, 0,
                  CT_PYARGS(out, in, o), [&] { return inner_->reduce_scatter_tensor_coalesced(out, in, o); });
  }
  WorkPtr alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions& o) override {
    Key k(M_alltoall); k.tensors(out); k.tensors(in); k.add(compat::async_op(o));
    return traced(k, "alltoall", "all_to_all", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->alltoall(out, in, o); });
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outs, std::vector<int64_t>& ins,
                        const c10d::AllToAllOptions& o) override {
    Key k(M_alltoall_base); k.tensor(out); k.tensor(in); k.ints(outs); k.ints(ins); k.add(compat::async_op(o));
    return traced(k, "alltoall_base", "all_to_all", !compat::async_op(o), false, 0, CT_PYARGS(out, in, outs, ins, o),
                  [&] { return inner_->alltoall_base(out, in, outs, ins, o); });
  }
#if CT_PG_SINGLE_TENSOR_VIRTUALS
  WorkPtr all_gather_single(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    Key k(M_all_gather_single); k.tensor(out); k.tensor(in); k.add(compat::async_op(o));
    return traced(k, "all_gather_single", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->all_gather_single(out, in, o); });
  }
  WorkPtr all_gather_single_coalesced(Tensors& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_all_gather_single_coalesced); k.tensors(out); k.tensors(in); k.add(compat::async_op(o));
    return traced(k, "all_gather_single_coalesced", "all_gather", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->all_gather_single_coalesced(out, in, o); });
  }
  WorkPtr reduce_scatter_single(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_single); k.tensor(out); k.tensor(in); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "reduce_scatter_single", "reduce_scatter", !compat::async_op(o), false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->reduce_scatter_single(out, in, o); });
  }
  WorkPtr reduce_scatter_single_coalesced(Tensors& out, Tensors& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_single_coalesced); k.tensors(out); k.tensors(in); k.redop(o.reduceOp); k.add(compat::async_op(o));
    return traced(k, "reduce_scatter_single_coalesced", "reduce_scatter", !compat::async_op(o), false, 0,
                  CT_PYARGS(out, in, o), [&] { return inner_->reduce_scatter_single_coalesced(out, in, o); });
  }
  WorkPtr all_to_all_single(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outs, std::vector<int64_t>& ins,
                            const c10d::AllToAllOptions& o) override {
    Key k(M_all_to_all_single); k.tensor(out); k.tensor(in); k.ints(outs); k.ints(ins); k.add(compat::async_op(o));
    return traced(k, "all_to_all_single", "all_to_all", !compat::async_op(o), false, 0, CT_PYARGS(out, in, outs, ins, o),
                  [&] { return inner_->all_to_all_single(out, in, outs, ins, o); });
  }
#endif
  WorkPtr barrier(const c10d::BarrierOptions& o) override {
    Key k(M_barrier); k.add(compat::async_op(o)); k.ints(o.device_ids);
    return traced(k, "barrier", "barrier", !compat::async_op(o), false, 0, CT_PYARGS(o),
                  [&] { return inner_->barrier(o); });
  }
  void monitoredBarrier(const c10d::BarrierOptions& o, bool wait_all_ranks) override {
    Key k(M_monitored_barrier); k.add(wait_all_ranks);
    traced(k, "monitored_barrier", "barrier", true, false, 0, CT_PYARGS(o, wait_all_ranks), [&] {
      inner_->monitoredBarrier(o, wait_all_ranks);
      return WorkPtr();
    });
  }
  WorkPtr send(Tensors& ts, int dst, int tag) override {
    Key k(M_send); k.tensors(ts); k.add(dst); k.add(tag);
    return traced(k, "send", "send", false, true, dst, CT_PYARGS(ts, dst, tag),
                  [&] { return inner_->send(ts, dst, tag); });
  }
  WorkPtr recv(Tensors& ts, int src, int tag) override {
    Key k(M_recv); k.tensors(ts); k.add(src); k.add(tag);
    return traced(k, "recv", "recv", false, true, src, CT_PYARGS(ts, src, tag),
                  [&] { return inner_->recv(ts, src, tag); });
  }
  WorkPtr recvAnysource(Tensors& ts, int tag) override {
    // wrapper.py counts anysource receives per (recv, tag): the peer is unknown at the call.
    Key k(M_recv_anysource); k.tensors(ts); k.add(tag);
    return traced(k, "recv_anysource", "recv", false, true, tag, CT_PYARGS(ts, tag),
                  [&] { return inner_->recvAnysource(ts, tag); });
  }
#undef CT_PYARGS

  // -- everything else reaches the real group ----------------------------------------
  // (torch_compat.h: where a release's base class does not declare one of these
  // virtual, the wrapper keeps the base's own behaviour for it.)
  const std::string getBackendName() const override { return inner_->getBackendName(); }
  void startCoalescing(c10::DeviceType d) override { inner_->startCoalescing(d); }
  WorkPtr endCoalescing(c10::DeviceType d) override { return inner_->endCoalescing(d); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
#if CT_PG_SET_SEQUENCE_NUMBER
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
#endif
#if CT_PG_SET_TIMEOUT_VIRTUAL
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
#endif
#if CT_PG_SHUTDOWN_VIRTUAL
  void shutdown() override { inner_->shutdown(); }
  void abort() override { inner_->abort(); }
#endif
#if CT_PG_GROUP_NAME_VIRTUAL
  const std::string& getGroupName() const override { return inner_->getGroupName(); }
  void setGroupName(const std::string& name) override { inner_->setGroupName(name); }
  const std::string& getGroupDesc() const override { return inner_->getGroupDesc(); }
  void setGroupDesc(const std::string& desc) override { inner_->setGroupDesc(desc); }
#endif

 private:
  TracedPG(const c10::intrusive_ptr<c10d::ProcessGroup>& inner, py::object inner_obj, std::shared_ptr<Log> log,
           int gid)
      : c10d::ProcessGroup(inner->getRank(), inner->getSize()), inner_(inner),
        inner_py_(inner_obj.release().ptr()), log_(std::move(log)), gid_(gid),
        issue_only_enqueues_(inner->getBackendName() == "gloo" || inner->getBackendName() == "nccl") {}

  c10::intrusive_ptr<c10d::ProcessGroup> inner_;
  PyObject* inner_py_;  // strong reference, dropped with the GIL in the destructor
  std::shared_ptr<Log> log_;
  int gid_;
  std::atomic<int64_t> seq_{0};
  bool issue_only_enqueues_;  // gloo, NCCL: the op's sig is looked up after issuing it
  std::map<std::pair<std::string, int64_t>, int64_t> p2p_seq_;  // under the GIL
};

// pybind holder that drops its reference with the GIL released, as torch's own
// ProcessGroup holder does: the last reference to a group may run gloo's
// destructor, which joins worker threads that need the GIL to free tensors.
// Holding it there deadlocks destroy_process_group().
template <typename T>
class NoGilHolder {
 public:
  NoGilHolder() = default;
  explicit NoGilHolder(T* p) : p_(c10::intrusive_ptr<T>::unsafe_steal_from_new(p)) {}
  NoGilHolder(const NoGilHolder&) = default;
  NoGilHolder& operator=(const NoGilHolder&) = default;
  ~NoGilHolder() {
    if (p_ && PyGILState_Check()) {
      py::gil_scoped_release nogil;
      p_.reset();
    }
  }
  T* get() const noexcept { return p_.get(); }

 private:
  c10::intrusive_ptr<T> p_;  // the only member: the same layout as torch's holder
};

}  // namespace ct

PYBIND11_DECLARE_HOLDER_TYPE(T, ct::NoGilHolder<T>, true);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "commtrace's native ProcessGroup wrapper (see capture/native_wrapper.py)";
  py::module::import("torch.distributed");
  py::class_<ct::Log, std::shared_ptr<ct::Log>>(m, "Log")
      .def(py::init([](py::object describe, py::object is_internal, py::object recorder) {
        // Never freed (see Log): the shared_ptr's deleter does nothing.
        return std::shared_ptr<ct::Log>(new ct::Log(describe, is_internal, recorder), [](ct::Log*) {});
      }))
      .def("drain", &ct::Log::drain, py::arg("final") = false)
      .def("set_paused", &ct::Log::set_paused)
      .def("end_session", &ct::Log::end_session)
      .def("unfinished", &ct::Log::unfinished)
      .def("undescribed", &ct::Log::undescribed)
      .def("after_fork_in_child", &ct::Log::after_fork_in_child);
  auto traced = py::class_<ct::TracedPG, c10d::ProcessGroup, ct::NoGilHolder<ct::TracedPG>>(m, "TracedPG", py::dynamic_attr());
  traced
      .def(py::init<py::object, std::shared_ptr<ct::Log>, int>())
      .def_property_readonly("inner", &ct::TracedPG::inner)
      // The inner group's own answer (the backend mirrored here, or what a group with
      // no C++ backend answers: the mpi fast path's), as wrapper.py's _get_backend.
      .def("_get_backend", [](ct::TracedPG& self, const c10::Device& device) {
        return self.inner_object().attr("_get_backend")(device);
      }, py::arg("device"))
      .def_property_readonly("gid", &ct::TracedPG::gid)
      // torch binds these Python names to differently named virtuals (2.13:
      // _allgather_base -> all_gather_single, ...). Binding them to the
      // same-named virtual records the variant the caller used, as the Python
      // wrapper does. Signatures and defaults are torch's.
      .def("_allgather_base",
           [](ct::TracedPG& self, at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
             return self._allgather_base(output, input, opts);
           },
           py::arg("output"), py::arg("input"), py::arg("opts") = c10d::AllgatherOptions(),
           py::call_guard<py::gil_scoped_release>())
      .def("_reduce_scatter_base",
           [](ct::TracedPG& self, at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
             return self._reduce_scatter_base(output, input, opts);
           },
           py::arg("outputTensor"), py::arg("inputTensor"), py::arg("opts") = c10d::ReduceScatterOptions(),
           py::call_guard<py::gil_scoped_release>())
      .def("allgather_into_tensor_coalesced",
           [](ct::TracedPG& self, std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
              const c10d::AllgatherOptions& opts) { return self.allgather_into_tensor_coalesced(outputs, inputs, opts); },
           py::arg("outputs"), py::arg("inputs"), py::arg("opts") = c10d::AllgatherOptions(),
           py::call_guard<py::gil_scoped_release>())
      .def("reduce_scatter_tensor_coalesced",
           [](ct::TracedPG& self, std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
              const c10d::ReduceScatterOptions& opts) { return self.reduce_scatter_tensor_coalesced(outputs, inputs, opts); },
           py::arg("outputs"), py::arg("inputs"), py::arg("opts") = c10d::ReduceScatterOptions(),
           py::call_guard<py::gil_scoped_release>())
      .def("alltoall_base",
           [](ct::TracedPG& self, at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_split_sizes,
              std::vector<int64_t> input_split_sizes, const c10d::AllToAllOptions& opts) {
             return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
           },
           py::arg("output"), py::arg("input"), py::arg("output_split_sizes"), py::arg("input_split_sizes"),
           py::arg("opts") = c10d::AllToAllOptions(), py::call_guard<py::gil_scoped_release>())
      .def("alltoall_base",
           [](ct::TracedPG& self, at::Tensor& output, at::Tensor& input, std::vector<int64_t> output_split_sizes,
              std::vector<int64_t> input_split_sizes, std::optional<std::chrono::milliseconds> timeout) {
             c10d::AllToAllOptions opts;
             if (timeout) opts.timeout = *timeout;
             return self.alltoall_base(output, input, output_split_sizes, input_split_sizes, opts);
           },
           py::arg("output"), py::arg("input"), py::arg("output_split_sizes"), py::arg("input_split_sizes"),
           py::arg("timeout") = std::nullopt, py::call_guard<py::gil_scoped_release>());
#if !CT_PG_GATHER_SINGLE
  for (const char* name : {"gather_single", "gather_into_tensor"}) {
    if (py::hasattr(py::module::import("torch.distributed").attr("ProcessGroup"), name)) {
      traced.def(name, [name](ct::TracedPG& self, at::Tensor& output, at::Tensor& input, const c10d::GatherOptions& opts) {
        return self.gather_single_from_python(name, output, input, opts);
      }, py::arg("output"), py::arg("input"), py::arg("opts") = c10d::GatherOptions());
    }
  }
#endif
#if !CT_PG_GROUP_NAME_VIRTUAL
  // Before torch 2.6 the base class's name and description are not virtual and live
  // in its backends, and an inner group with no C++ backend (the mpi fast path) lends
  // none: c10d and functional collectives set and read them from Python, so these
  // bindings hand them to the inner group, as the overrides above do from 2.6.
  traced.def("_set_group_name", [](ct::TracedPG& self, const std::string& name) {
          self.inner_object().attr("_set_group_name")(name);
        })
      .def("_set_group_desc", [](ct::TracedPG& self, const std::string& desc) {
        self.inner_object().attr("_set_group_desc")(desc);
      })
      .def_property_readonly("group_name", [](ct::TracedPG& self) { return self.inner_object().attr("group_name"); })
      .def_property_readonly("group_desc", [](ct::TracedPG& self) { return self.inner_object().attr("group_desc"); });
#endif
}
