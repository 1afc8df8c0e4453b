// The per-process log of native ops (Log): call sites and sigs under the GIL,
// active and pending ops, and the rows the flush thread drains.
#pragma once
#include "frames.h"
#include "op.h"
#include "device_end_timer.h"
#include "waiter.h"

namespace ct {

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& v) const noexcept {
    uint64_t h = 1469598103934665603ull;
    for (int64_t x : v) h = (h ^ uint64_t(x)) * 1099511628211ull;
    return size_t(h);
  }
};

// Per-process state shared by every native group of one Recorder. Never freed:
// future callbacks, the waiter thread and groups torch keeps until exit all
// point into it, and its Python references must not be dropped without the GIL.
class Log {
 public:
  Log(py::object describe, py::object is_internal, py::object recorder)
      : describe_(describe.release().ptr()), is_internal_(is_internal.release().ptr()),
        recorder_(recorder.release().ptr()) {
    iteration_name_ = PyUnicode_InternFromString("iteration");
    context_name_ = PyUnicode_InternFromString("context_id");
    // Held, not looked up per op: the Recorder mutates this dict in place and never rebinds it.
    thread_contexts_ = PyObject_GetAttrString(recorder_, "thread_context_ids");
    if (thread_contexts_ != nullptr && !PyDict_Check(thread_contexts_)) Py_CLEAR(thread_contexts_);
    if (thread_contexts_ == nullptr) PyErr_Clear();
  }

  // -- under the GIL ----------------------------------------------------------
  // The call site, as wrapper.first_user_frame: the innermost frame of user
  // code (frames of torch, commtrace and plumbing skipped). Appends (code
  // object, instruction offset) of that frame to the key, (0, -1) if none.
  void user_code(std::vector<int64_t>& key) {
#if CT_INTERPRETER_FRAMES
    // Read the interpreter's own frame records: the public API would allocate
    // a frame object per frame walked (2-3 per op), and those allocations
    // trigger the cyclic GC every few hundred ops (measured: ~2 us per op).
    for (_PyInterpreterFrame* f = current_iframe(); f != nullptr; f = f->previous) {
      PyCodeObject* code = iframe_code(f);
      if (code == nullptr || _PyFrame_IsIncomplete(f) || is_internal(code)) continue;
      key.push_back(reinterpret_cast<intptr_t>(code));
      key.push_back(_PyInterpreterFrame_LASTI(f));
      return;
    }
    key.push_back(0);
    key.push_back(-1);
#else
    PyFrameObject* f = user_frame_object();
    if (f == nullptr) {
      key.push_back(0);
      key.push_back(-1);
      return;
    }
    PyCodeObject* code = PyFrame_GetCode(f);
    key.push_back(reinterpret_cast<intptr_t>(code));
    key.push_back(PyFrame_GetLineNumber(f));
    Py_DECREF(code);
    Py_DECREF(f);
#endif
  }

  // The same frame as a frame object (new reference, or NULL): for describing
  // a call the first time its key is seen.
  PyFrameObject* user_frame_object() {
    PyFrameObject* f = PyThreadState_GetFrame(PyThreadState_Get());  // new reference or NULL
    while (f != nullptr) {
      PyCodeObject* code = PyFrame_GetCode(f);  // new reference
      bool internal = is_internal(code);
      Py_DECREF(code);
      if (!internal) return f;
      PyFrameObject* back = PyFrame_GetBack(f);
      Py_DECREF(f);
      f = back;
    }
    return nullptr;
  }

  bool is_internal(PyCodeObject* code) {
    auto it = internal_code_.find(code);
    if (it != internal_code_.end()) return it->second;
    PyObject* r = PyObject_CallOneArg(is_internal_, reinterpret_cast<PyObject*>(code));
    bool internal = r == nullptr || PyObject_IsTrue(r) == 1;
    if (r == nullptr) PyErr_Clear();
    Py_XDECREF(r);
    Py_INCREF(code);  // kept: the pointer must stay this code object's
    internal_code_.emplace(code, internal);
    return internal;
  }

  int64_t read_int_attr(PyObject* name) {
    PyObject* v = PyObject_GetAttr(recorder_, name);
    if (v == nullptr) {
      PyErr_Clear();
      return 0;
    }
    int64_t x = PyLong_Check(v) ? PyLong_AsLongLong(v) : 0;
    if (x == -1 && PyErr_Occurred()) PyErr_Clear();
    Py_DECREF(v);
    return x;
  }

  // The annotation context id in force on the calling thread: the process-wide
  // ``context_id``, unless the thread has its own (Recorder.thread_context_ids:
  // a comm hook's bucket scope, possibly on a backend thread). That dict is
  // empty outside comm hooks: one size test more per op.
  int64_t context_id() {
    PyObject* d = thread_contexts_;
    if (d != nullptr && PyDict_GET_SIZE(d) > 0) {
      PyObject* ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
      PyObject* v = ident != nullptr ? PyDict_GetItemWithError(d, ident) : nullptr;  // borrowed
      Py_XDECREF(ident);
      int64_t x = v != nullptr && PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
      if (PyErr_Occurred()) PyErr_Clear();
      if (x >= 0) return x;
    }
    return read_int_attr(context_name_);
  }

  // Under the GIL, for a CUDA op on a torch whose C++ API cannot say whether the
  // current stream captures a CUDA graph (DeviceEndTimer): torch's own binding
  // of that query (torch.cuda.is_current_stream_capturing), a C function called
  // without a Python frame. Unknown (no binding, an error) counts as capturing:
  // the op is then polled, never given an event.
  bool stream_capturing() {
    if constexpr (CAPTURE_QUERY_IN_CPP) {
      return false;  // DeviceEndTimer asks c10 itself
    } else {
      if (capture_query_ == nullptr) {
        PyObject* c = PyImport_ImportModule("torch._C");
        capture_query_ = c != nullptr ? PyObject_GetAttrString(c, "_cuda_isCurrentStreamCapturing") : nullptr;
        Py_XDECREF(c);
        if (capture_query_ == nullptr) {
          PyErr_Clear();
          return true;
        }
      }
      PyObject* r = PyObject_CallNoArgs(capture_query_);
      if (r == nullptr) {
        PyErr_Clear();
        return true;
      }
      bool capturing = r != Py_False;
      Py_DECREF(r);
      return capturing;
    }
  }

  // Sig id of a call; interns it through Python the first time its key is seen.
  template <class MakeArgs>
  SigInfo sig_for(std::vector<int64_t>& key, int gid, const char* method, MakeArgs&& make_args) {
    auto it = sigs_.find(key);
    if (it != sigs_.end()) return it->second;
    SigInfo info;
    try {
      py::object args = make_args();
      PyFrameObject* frame = user_frame_object();
      py::object fr = frame ? py::reinterpret_steal<py::object>(reinterpret_cast<PyObject*>(frame)) : py::none();
      auto r = py::reinterpret_borrow<py::object>(describe_)(gid, method, args, (uint64_t)pthread_self(), fr)
                   .cast<std::tuple<int32_t, bool, int32_t>>();
      info = SigInfo{std::get<0>(r), std::get<1>(r), std::get<2>(r)};
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Print();  // a bug in describing must not break the user's op
      return SigInfo{};
    } catch (const std::exception& e) {  // pybind cast errors and the like: the same
      PySys_WriteStderr("commtrace: cannot describe a %s call: %.200s\n", method, e.what());
      return SigInfo{};
    }
    sigs_.emplace(key, info);
    return info;
  }

  void report_error(const Op& op, const std::string& text) {  // under the GIL
    try {
      py::reinterpret_borrow<py::object>(recorder_).attr("record_error")(
          op.t_call, op.group, op.seq, op.sig.load(), text);
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Clear();
    } catch (...) {
      // Recording the error must never replace the backend's exception, which
      // the caller re-throws right after this.
    }
  }

  // A completed recv from any source: its sender (Work::sourceRank, gloo's set by its wait();
  // a Python backend's asks Python) as a source line.
  void report_source(const Op& op, const WorkPtr& work) {  // under the GIL
    try {
      py::reinterpret_borrow<py::object>(recorder_).attr("record_source")(
          op.t_call, op.group, op.seq, op.sig.load(), work->sourceRank());
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Clear();
    } catch (...) {
    }
  }

  // -- any thread ---------------------------------------------------------------
  // Tracing stopped (Recorder.close: commtrace.stop, or exit): ops are forwarded
  // unrecorded, so nothing accumulates while no flush thread drains.
  void set_paused(bool paused) { paused_.store(paused, std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }

  // An op about to be issued; false: tracing stopped since the caller checked
  // paused() (the op is forwarded unrecorded, as any op issued while stopped).
  bool enter(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    if (paused()) return false;
    op->session = session_;
    active_.push_back(op);
    return true;
  }

  // An op that will not be recorded (it could not be described).
  void forget(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
  }

  // Blocking op finished (or failed) inside the wrapper; false: not recorded,
  // its session ended while it ran (end_session).
  bool done(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    if (op->session != session_) return false;
    done_.push_back(op->record(op->status));
    retire_locked();
    return true;
  }

  // Async op returned to the caller: its end comes later.
  void track(const OpPtr& op, WorkPtr work, bool p2p) {
    FuturePtr fut;
    try {
      fut = work->getFuture();
    } catch (...) {
    }
    if (fut) {
      // GIL-free, on the thread that completes the work; already-completed
      // futures run it right here.
      fut->addCallback([op](c10::ivalue::Future& f) {
        if (f.hasError()) {
          op->error = error_text(f.exception_ptr());
          op->status = STATUS_FAILED;
        }
        op->t_end.store(now_ns(), std::memory_order_release);
      }, /*uses_future=*/true);
    } else {
      op->flags |= FLAG_END_OBSERVED;  // end seen by polling: an upper bound
    }
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    if (op->session != session_) return;  // its session ended while it was being issued
    pending_.push_back(Pending{op, std::move(work), std::move(fut), p2p});
    retire_locked();
  }

  // Async device op returned to the caller: timed by an end event, else polled.
  void track_device(const OpPtr& op, WorkPtr work, int index, bool capturing_in_python) {
    Pending p{op, std::move(work), nullptr, false};
    p.device = true;
    p.device_index = index;
    if (index >= 0) {
      try {
        p.event = device_timer_.end_event(p.work, index, capturing_in_python);
      } catch (...) {
        p.event = nullptr;
      }
    }
    if (!p.event) op->flags |= FLAG_END_OBSERVED;
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    if (op->session != session_) return;
    pending_.push_back(std::move(p));
    retire_locked();
  }

  // Flush thread: finished rows plus IN_FLIGHT snapshots of ops older than 1 s
  // (all of them when final), packed as OP_RECORDs.
  py::bytes drain(bool final) {
    std::string out;
    std::vector<OpPtr> failed;  // async ops that failed with a message: error lines, under the GIL
    std::vector<std::pair<OpPtr, WorkPtr>> sourced;  // completed recvs from any source: source lines, too
    {
      py::gil_scoped_release nogil;
      int64_t now = now_ns();
      std::lock_guard<std::mutex> g(mu_);
      std::vector<Record> recs;
      recs.swap(done_);
      std::deque<Pending> still;
      for (auto& p : pending_) {
        Op& op = *p.op;
        if (op.t_end.load() == 0) {
          if (!p.fut) {
            poll(p, now, final);  // (device ops never have fut)
          } else if (final && p.fut->completed()) {
            // Its waiters went on (a future completes before it runs its callbacks):
            // ended by now, although the callback has not stamped it yet.
            int64_t zero = 0;
            op.t_end.compare_exchange_strong(zero, now);
            op.flags |= FLAG_END_OBSERVED;
          }
        }
        if (op.t_end.load() != 0) {
          recs.push_back(op.record(op.status));
          note_lines_locked(p);
        } else {
          snapshot(op, now, final, recs);
          still.push_back(std::move(p));
        }
      }
      pending_.swap(still);
      for (auto& op : active_) snapshot(*op, now, final, recs);
      out.assign(reinterpret_cast<const char*>(recs.data()), recs.size() * sizeof(Record));
      failed.swap(failed_);
      sourced.swap(sourced_);
    }
    for (auto& op : failed) report_error(*op, op->error);
    for (auto& [op, work] : sourced) report_source(*op, work);
    if (!sourced.empty()) {
      py::gil_scoped_release nogil;  // their works released as pending ones are: without the GIL
      sourced.clear();
    }
    return py::bytes(out);
  }

  // Recorder.close, after the final drain: the session's ops still running were
  // written IN_FLIGHT in its files, and none of its ops reaches a later session's
  // (commtrace.start() again): done() and track() drop them when they end.
  void end_session() {
    py::gil_scoped_release nogil;
    std::deque<Pending> ended;  // their works, released after the mutex
    std::vector<std::pair<OpPtr, WorkPtr>> sourced;  // the same
    std::lock_guard<std::mutex> g(mu_);
    ended.swap(pending_);
    sourced.swap(sourced_);
    active_.clear();
    done_.clear();  // ended after the final drain: written IN_FLIGHT there
    failed_.clear();
    ++session_;
  }

  // Watchdog: ops not finished yet, as (row list, where), rows in the
  // layout of the Python rows (capture/completion.py): [t_call, t_return, t_end, seq, sig, iteration, group, status, flags].
  py::list unfinished() {
    std::vector<std::pair<Record, const char*>> rows;
    {
      py::gil_scoped_release nogil;
      std::lock_guard<std::mutex> g(mu_);
      for (auto& op : active_)
        if (op->sig >= 0) rows.emplace_back(op->record(STATUS_IN_FLIGHT), "in_backend_call");
      for (auto& p : pending_)
        if (p.op->t_end.load() == 0) rows.emplace_back(p.op->record(STATUS_IN_FLIGHT), "async_pending");
    }
    py::list out;
    for (auto& [r, where] : rows) {
      py::list row;
      row.append(r.t_call);
      row.append(std::isnan(r.d_return) ? 0 : r.t_call + int64_t(r.d_return));
      row.append(0);
      row.append(r.seq);
      row.append(r.sig);
      row.append(r.iteration);
      row.append(r.group);
      row.append(r.status);
      row.append(r.flags);
      out.append(py::make_tuple(row, where));
    }
    return out;
  }

  // Ops entered but not described yet (on gloo and NCCL their thread looks the sig up
  // after issuing them, under the GIL): a drain writes nothing of them.
  size_t undescribed() {
    py::gil_scoped_release nogil;
    std::lock_guard<std::mutex> g(mu_);
    size_t n = 0;
    for (auto& op : active_) n += op->sig.load() < 0;
    return n;
  }

  // In a forked child: rows and ops belong to the parent; the mutex may have
  // been held by a parent thread that does not exist here.
  void after_fork_in_child() {
    new (&mu_) std::mutex();
    done_.clear();
    failed_.clear();  // the parent's ops
    new std::deque<Pending>(std::move(pending_));  // leaked: their CUDA events belong to the parent
    pending_.clear();
    new std::vector<std::pair<OpPtr, WorkPtr>>(std::move(sourced_));  // leaked: the parent's works
    sourced_.clear();
    active_.clear();
    new (&waiter_) Waiter();
    new (&device_timer_) DeviceEndTimer();
  }

 private:
  void drop_active_locked(const OpPtr& op) {
    for (size_t i = active_.size(); i-- > 0;) {
      if (active_[i] == op) {
        active_[i] = std::move(active_.back());
        active_.pop_back();
        break;
      }
    }
  }

  // The end of a work seen finished by polling. One that finished by throwing (gloo's p2p
  // work whose wait() raised: its peer died) failed; its end alone read as completed.
  static void stamp_polled_end(Op& op, Work& work, int64_t t) {
    try {
      if (auto ex = work.exception()) {
        op.error = error_text(ex);
        op.status = STATUS_FAILED;
      }
    } catch (...) {
    }
    op.t_end = t;  // after error and status: a reader that sees the end sees them
  }

  // Small async ops finished since: move them out so their tensors are freed
  // promptly (bounded work per call). Caller holds mu_.
  // An async op that failed with a message, or a recv from any source that completed (its sender is
  // known once it did): the next drain writes its error / source line.
  void note_lines_locked(const Pending& p) {
    if (p.op->status == STATUS_FAILED && !p.op->error.empty()) failed_.push_back(p.op);
    else if (p.op->any_source && p.op->status != STATUS_FAILED) sourced_.emplace_back(p.op, p.work);
  }

  void retire_locked() {
    for (size_t n = 0; n < RETIRE_PER_CALL && !pending_.empty(); ++n) {
      Pending& p = pending_.front();
      if (p.op->t_end.load(std::memory_order_acquire) == 0) {
        if (p.fut || p.event || !p.work->isCompleted()) break;  // callback / flush thread will stamp it
        stamp_polled_end(*p.op, *p.work, now_ns());
      }
      done_.push_back(p.op->record(p.op->status));
      note_lines_locked(p);
      pending_.pop_front();
    }
  }

  void poll(Pending& p, int64_t now, bool final) {
    if (p.event) {
      int64_t t = 0;
      try {
        t = device_timer_.end_ns(p.event, p.device_index);
      } catch (...) {
      }
      if (t != 0) {
        p.op->t_end = std::max(t, p.op->t_call);  // the anchor's error must not put the end first
        return;
      }
      if (!final) return;
      p.event = nullptr;  // exiting: fall back to polling
      p.op->flags |= FLAG_END_OBSERVED;
    }
    bool completed = false;
    try {
      completed = p.work->isCompleted();
    } catch (...) {
    }
    if (completed) {
      stamp_polled_end(*p.op, *p.work, now);
      return;
    }
    // Never waited for: a second wait() on gloo's p2p work blocks on the next
    // transfer; a device op's wait() would order streams.
    if (p.p2p || p.device || p.handed) return;
    p.handed = true;
    if (final) {  // exiting: a short bounded wait instead of the thread
      try {
        if (p.work->wait(std::chrono::milliseconds(200))) p.op->t_end = now_ns();
      } catch (...) {
      }
      return;
    }
    waiter_.add(p);
  }

  static void snapshot(Op& op, int64_t now, bool final, std::vector<Record>& recs) {
    if (op.sig < 0) return;  // its thread has not looked its sig up yet (just issued)
    if (op.inflight_written && !final) return;
    if (final || now - op.t_call > IN_FLIGHT_AFTER_NS) {
      recs.push_back(op.record(STATUS_IN_FLIGHT));
      op.inflight_written = true;
    }
  }

 public:
  PyObject* describe_;
  PyObject* is_internal_;
  PyObject* recorder_;
  PyObject* iteration_name_;
  PyObject* context_name_;
  PyObject* thread_contexts_;  // Recorder.thread_context_ids (NULL: an older Recorder without it)
  PyObject* capture_query_ = nullptr;  // torch._C._cuda_isCurrentStreamCapturing, looked up once (stream_capturing)

 private:
  std::unordered_map<std::vector<int64_t>, SigInfo, KeyHash> sigs_;  // GIL
  std::unordered_map<PyCodeObject*, bool> internal_code_;             // GIL
  std::atomic<bool> paused_{false};
  std::mutex mu_;
  int64_t session_ = 0;  // guarded by mu_: sessions ended (end_session)
  std::vector<Record> done_;
  std::deque<Pending> pending_;
  std::vector<OpPtr> active_;
  Waiter waiter_;
  std::vector<OpPtr> failed_;  // guarded by mu_ (note_lines_locked, drain)
  std::vector<std::pair<OpPtr, WorkPtr>> sourced_;  // guarded by mu_ (note_lines_locked, drain)
  DeviceEndTimer device_timer_;
};

}  // namespace ct
