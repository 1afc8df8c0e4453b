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
#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/version.h>
#include <pybind11/chrono.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <thread>
#include <unordered_map>
#include <vector>

// The interpreter's frame records (CPython 3.11-3.13 internals; the build is
// per Python version). Elsewhere, frame objects through the public API.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(COMMTRACE_PUBLIC_FRAMES_ONLY)
#define CT_INTERPRETER_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
static inline _PyInterpreterFrame* current_iframe() {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_Get()->current_frame;
#else
  return PyThreadState_Get()->cframe->current_frame;
#endif
}
static inline PyCodeObject* iframe_code(_PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* x = f->f_executable;  // not always a code object in 3.13
  return x != nullptr && PyCode_Check(x) ? reinterpret_cast<PyCodeObject*>(x) : nullptr;
#else
  return f->f_code;
#endif
}
#else
#define CT_INTERPRETER_FRAMES 0
#endif

namespace py = pybind11;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

#define CT_TORCH_2_13 (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 13))

namespace ct {

// Must equal trace/schema.py and capture/recorder.py.
constexpr uint8_t STATUS_COMPLETED = 0, STATUS_FAILED = 1, STATUS_IN_FLIGHT = 2;
constexpr uint8_t FLAG_END_OBSERVED = 0x04;
constexpr int64_t IN_FLIGHT_AFTER_NS = 1000000000;
constexpr size_t RETIRE_PER_CALL = 4;

static inline int64_t now_ns() {  // CLOCK_MONOTONIC: the clock of Python's time.monotonic_ns
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

struct Record {  // schema.OP_RECORD, little-endian, 32 bytes
  int64_t t_call;
  float d_return, d_end;
  uint32_t seq, sig, iteration;
  uint16_t group;
  uint8_t status, flags;
};
static_assert(sizeof(Record) == 32, "OP_RECORD is 32 bytes");

// One op. Shared with the future callback that stamps its end.
struct Op {
  int64_t t_call = 0, t_return = 0;
  std::atomic<int64_t> t_end{0};
  std::atomic<uint8_t> status{STATUS_COMPLETED};
  int64_t seq = 0, iteration = 0;
  std::atomic<int32_t> sig{-1};  // -1 until looked up (after issuing, on gloo and NCCL): read by the flush thread
  int32_t group = 0;
  uint8_t flags = 0;
  bool inflight_written = false;

  Record record(uint8_t st) const {
    Record r;
    r.t_call = t_call;
    r.d_return = t_return ? float(t_return - t_call) : NAN;
    int64_t e = t_end.load(std::memory_order_acquire);
    r.d_end = e ? float(e - t_call) : NAN;
    r.seq = uint32_t(seq);
    r.sig = uint32_t(sig.load());
    r.iteration = uint32_t(iteration);
    r.group = uint16_t(group);
    r.status = st;
    r.flags = flags;
    return r;
  }
};
using OpPtr = std::shared_ptr<Op>;

using EventPtr = std::shared_ptr<c10::Event>;

struct Pending {
  OpPtr op;
  WorkPtr work;
  FuturePtr fut;  // CPU work's future (its callback stamps the end); null: polled or handed to the waiter
  bool p2p;
  bool handed = false;
  bool device = false;  // a device (CUDA) op: never waited for, never called back
  EventPtr event;       // its end event, when it has one (DeviceEndTimer)
  int device_index = -1;
};

// End times of CUDA collectives from CUDA events, read lazily (the C++ twin of
// cuda_end.py, through c10's device-generic API, so this file needs no CUDA
// headers). NCCL completes a Work's future when the op is enqueued: right after
// the op, a private stream is made to wait on it (wait() on the completed
// future only adds a stream wait) and a timing event is recorded there; it
// completes when the op does. The flush thread queries it (never a host sync)
// and converts it to host time through an anchor event of known host time,
// re-recorded every few seconds. Ops whose future is not complete at return
// (gloo on CUDA), ops during graph capture or on another device than the
// current one get no event: they are polled.
// torch < 2.13 cannot say whether a stream is capturing a CUDA graph through
// the device-generic API: there, no event is ever recorded (TIMES_CUDA_OPS is
// false and native_wrapper gives groups that can see CUDA the Python wrapper).
// COMMTRACE_TEST_NO_CAPTURE_CHECK (set through CXX, never by default) lets the
// GPU tests exercise the event path on such a torch, in programs that capture
// no graphs.
template <class Guard>
static bool capturing(const Guard& impl, const c10::Stream& s) {
#ifdef COMMTRACE_TEST_NO_CAPTURE_CHECK
  return false;
#else
  if constexpr (requires { impl.isStreamCapturing(s); }) {
    return impl.isStreamCapturing(s);
  } else {
    return true;
  }
#endif
}
#ifdef COMMTRACE_TEST_NO_CAPTURE_CHECK
constexpr bool TIMES_CUDA_OPS = true;
#else
template <class Guard>  // a template: outside one, a failing requires-expression is an error, not false
constexpr bool has_capture_query = requires(const Guard& g, const c10::Stream& s) { g.isStreamCapturing(s); };
constexpr bool TIMES_CUDA_OPS = has_capture_query<c10::impl::VirtualGuardImpl>;
#endif

class DeviceEndTimer {
 public:
  static constexpr int64_t ANCHOR_EVERY_NS = 5000000000;

  EventPtr end_event(const WorkPtr& work, int index) {
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    if (impl.getDevice().index() != index) return nullptr;  // switching its stream would switch the device
    c10::Device dev(c10::DeviceType::CUDA, c10::DeviceIndex(index));
    c10::Stream cur = impl.getStream(dev);
    if (capturing(impl, cur)) return nullptr;
    FuturePtr fut = work->getFuture();
    if (!fut || !fut->completed()) return nullptr;
    Dev& d = device(index, impl);
    impl.exchangeStream(d.stream);
    try {
      fut->wait();  // only the private stream waits on the op's events
    } catch (...) {
      impl.exchangeStream(cur);
      throw;
    }
    impl.exchangeStream(cur);
    EventPtr ev = take(d);
    ev->record(d.stream);
    return ev;
  }

  // Host monotonic ns at which ev completed; 0 while it (or the first anchor) has not.
  int64_t end_ns(const EventPtr& ev, int index) {
    if (!ev->query()) return 0;
    std::lock_guard<std::mutex> g(mu_);
    Dev& d = *devices_.at(index);
    advance_anchor(d);
    if (!d.anchor) return 0;
    double ms = d.anchor->elapsedTime(*ev);
    d.free.push_back(ev);  // reused: creating an event costs microseconds
    return d.anchor_ns + int64_t(ms * 1e6);
  }

 private:
  struct Dev {
    c10::Stream stream, anchor_stream;  // anchor_stream stays idle: anchors complete at once
    std::vector<EventPtr> free;
    EventPtr anchor, next_anchor;
    int64_t anchor_ns = 0, next_anchor_ns = 0;
    Dev(c10::Stream s, c10::Stream a) : stream(s), anchor_stream(a) {}
  };

  Dev& device(int index, const c10::impl::VirtualGuardImpl& impl) {
    std::lock_guard<std::mutex> g(mu_);
    auto it = devices_.find(index);
    if (it != devices_.end()) return *it->second;
    c10::Device dev(c10::DeviceType::CUDA, c10::DeviceIndex(index));
    auto d = std::make_unique<Dev>(impl.getNewStream(dev), impl.getNewStream(dev));
    record_anchor(*d);
    Dev& ref = *d;
    devices_.emplace(index, std::move(d));
    return ref;
  }

  EventPtr take(Dev& d) {
    std::lock_guard<std::mutex> g(mu_);
    if (d.free.empty()) return std::make_shared<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    EventPtr ev = std::move(d.free.back());
    d.free.pop_back();
    return ev;
  }

  static void record_anchor(Dev& d) {  // caller holds mu_
    auto ev = std::make_shared<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    int64_t t0 = now_ns();
    ev->record(d.anchor_stream);
    d.next_anchor = ev;
    d.next_anchor_ns = (t0 + now_ns()) / 2;
  }

  static void advance_anchor(Dev& d) {  // caller holds mu_
    if (d.next_anchor && d.next_anchor->query()) {
      d.anchor = std::move(d.next_anchor);
      d.anchor_ns = d.next_anchor_ns;
      d.next_anchor = nullptr;
    }
    if (!d.next_anchor && now_ns() - d.anchor_ns > ANCHOR_EVERY_NS) record_anchor(d);
  }

  std::mutex mu_;
  std::unordered_map<int, std::unique_ptr<Dev>> devices_;
};

// What the hot path needs to know of a sig (Recorder.sig_cpu / sig_cuda).
struct SigInfo {
  int32_t sig = -1;
  bool cpu = true;   // CPU tensors: a blocking op is waited for here
  int32_t cuda = -1; // device index of a CUDA op, -1 otherwise
};

// Ops whose work has neither a future nor a working isCompleted() (gloo's
// tensor reduce-scatter) are waited for here, one after another, like
// recorder._Waiter. Collective works tolerate this second wait().
class Waiter {
 public:
  void add(Pending p) {
    std::lock_guard<std::mutex> g(mu_);
    q_.push_back(std::move(p));
    if (!started_) {
      started_ = true;
      std::thread([this] { run(); }).detach();  // lives as long as the process (the Log is never freed)
    }
    cv_.notify_one();
  }

 private:
  void run() {
    for (;;) {
      Pending p;
      {
        std::unique_lock<std::mutex> g(mu_);
        cv_.wait(g, [this] { return !q_.empty(); });
        p = std::move(q_.front());
        q_.pop_front();
      }
      try {
        p.work->wait();
      } catch (...) {
        p.op->status = STATUS_FAILED;
      }
      p.op->t_end = now_ns();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> q_;
  bool started_ = false;
};

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

  // -- any thread ---------------------------------------------------------------
  // Tracing stopped (Recorder.close: commtrace.stop, or exit): ops are forwarded
  // unrecorded, so nothing accumulates while no flush thread drains.
  void set_paused(bool paused) { paused_.store(paused, std::memory_order_relaxed); }
  bool paused() const { return paused_.load(std::memory_order_relaxed); }

  void enter(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    active_.push_back(op);
  }

  // An op that will not be recorded (it could not be described).
  void forget(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
  }

  // Blocking op finished (or failed) inside the wrapper.
  void done(const OpPtr& op) {
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    done_.push_back(op->record(op->status));
    retire_locked();
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
        op->t_end.store(now_ns(), std::memory_order_release);
        if (f.hasError()) op->status = STATUS_FAILED;
      }, /*uses_future=*/true);
    } else {
      op->flags |= FLAG_END_OBSERVED;  // end seen by polling: an upper bound
    }
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    pending_.push_back(Pending{op, std::move(work), std::move(fut), p2p});
    retire_locked();
  }

  // Async device op returned to the caller: timed by an end event, else polled.
  void track_device(const OpPtr& op, WorkPtr work, int index) {
    Pending p{op, std::move(work), nullptr, false};
    p.device = true;
    p.device_index = index;
    if (index >= 0) {
      try {
        p.event = device_timer_.end_event(p.work, index);
      } catch (...) {
        p.event = nullptr;
      }
    }
    if (!p.event) op->flags |= FLAG_END_OBSERVED;
    std::lock_guard<std::mutex> g(mu_);
    drop_active_locked(op);
    pending_.push_back(std::move(p));
    retire_locked();
  }

  // Flush thread: finished rows plus IN_FLIGHT snapshots of ops older than 1 s
  // (all of them when final), packed as OP_RECORDs.
  py::bytes drain(bool final) {
    std::string out;
    {
      py::gil_scoped_release nogil;
      int64_t now = now_ns();
      std::lock_guard<std::mutex> g(mu_);
      std::vector<Record> recs;
      recs.swap(done_);
      std::deque<Pending> still;
      for (auto& p : pending_) {
        Op& op = *p.op;
        if (op.t_end.load() == 0 && !p.fut) poll(p, now, final);  // (device ops never have fut)
        if (op.t_end.load() != 0) {
          recs.push_back(op.record(op.status));
        } else {
          snapshot(op, now, final, recs);
          still.push_back(std::move(p));
        }
      }
      pending_.swap(still);
      for (auto& op : active_) snapshot(*op, now, final, recs);
      out.assign(reinterpret_cast<const char*>(recs.data()), recs.size() * sizeof(Record));
    }
    return py::bytes(out);
  }

  // Watchdog: ops not finished yet, as (row list, where), rows in the
  // Recorder's layout [t_call, t_return, t_end, seq, sig, iteration, group, status, flags].
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

  // In a forked child: rows and ops belong to the parent; the mutex may have
  // been held by a parent thread that does not exist here.
  void after_fork_in_child() {
    new (&mu_) std::mutex();
    done_.clear();
    new std::deque<Pending>(std::move(pending_));  // leaked: their CUDA events belong to the parent
    pending_.clear();
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

  // Small async ops finished since: move them out so their tensors are freed
  // promptly (bounded work per call). Caller holds mu_.
  void retire_locked() {
    for (size_t n = 0; n < RETIRE_PER_CALL && !pending_.empty(); ++n) {
      Pending& p = pending_.front();
      if (p.op->t_end.load(std::memory_order_acquire) == 0) {
        if (p.fut || p.event || !p.work->isCompleted()) break;  // callback / flush thread will stamp it
        p.op->t_end = now_ns();
      }
      done_.push_back(p.op->record(p.op->status));
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
      p.op->t_end = now;
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

 private:
  std::unordered_map<std::vector<int64_t>, SigInfo, KeyHash> sigs_;  // GIL
  std::unordered_map<PyCodeObject*, bool> internal_code_;             // GIL
  std::atomic<bool> paused_{false};
  std::mutex mu_;
  std::vector<Record> done_;
  std::deque<Pending> pending_;
  std::vector<OpPtr> active_;
  Waiter waiter_;
  DeviceEndTimer device_timer_;
};

static bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// -- call keys: what makes two calls the same sig (wrapper.call_key) -----------
struct Key {
  std::vector<int64_t> v;
  explicit Key(int method) { v.reserve(24); v.push_back(method); }
  void add(int64_t x) { v.push_back(x); }
  void tensor(const at::Tensor& t) {
    if (!t.defined()) { add(-1); return; }
    add(t.dim());
    for (auto s : t.sizes()) add(s);
    add(int64_t(t.scalar_type()));
    add(int64_t(t.device().type()));
  }
  void tensors(const Tensors& ts) { add(int64_t(ts.size())); for (auto& t : ts) tensor(t); }
  void lists(const TensorLists& ls) { add(int64_t(ls.size())); for (auto& l : ls) tensors(l); }
  void ints(const std::vector<int64_t>& xs) { add(int64_t(xs.size())); for (auto x : xs) add(x); }
  void redop(const c10d::ReduceOp& op) { add(int64_t(op.op_)); }
};

// Method ids in the key: the Python name is what the sig's variant shows.
enum Method : int {
  M_allreduce, M_allreduce_coalesced, M_broadcast, M_reduce, M_allgather, M_allgather_coalesced,
  M__allgather_base, M_all_gather_single, M_allgather_into_tensor_coalesced, M_all_gather_single_coalesced,
  M_gather, M_scatter, M_reduce_scatter, M__reduce_scatter_base, M_reduce_scatter_single,
  M_reduce_scatter_tensor_coalesced, M_reduce_scatter_single_coalesced, M_alltoall, M_alltoall_base,
  M_all_to_all_single, M_barrier, M_monitored_barrier, M_send, M_recv, M_recv_anysource,
};

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
  }

  const c10::intrusive_ptr<c10d::ProcessGroup>& inner() const { return inner_; }
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
    // The call site and sig under the GIL. On gloo and NCCL, whose calls only
    // enqueue the op, this runs after issuing it, while the backend works: a
    // blocking caller waits anyway, and the op starts a few microseconds
    // sooner. Backends that may block inside the call (the mpi fast path, any
    // other) are described first, so a hang there still names its op. p2p ops
    // too: their seq counts per peer, under the GIL.
    auto describe = [&] {
      py::gil_scoped_acquire gil;
      op->iteration = log.read_int_attr(log.iteration_name_);
      key.add(log.read_int_attr(log.context_name_));
      key.add(int64_t(pthread_self()));
      log.user_code(key.v);
      info = log.sig_for(key.v, gid_, method, make_args);
      op->sig = info.sig;
      if (p2p) op->seq = ++p2p_seq_[std::make_pair(std::string(op_name), peer)];
    };
    bool later = issue_only_enqueues_ && !p2p;
    if (later) {
      op->seq = ++seq_;
    } else {
      if (!p2p) op->seq = ++seq_;
      describe();
      if (op->sig < 0) return issue();  // could not describe it: forward untraced rather than fail
    }
    log.enter(op);
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
        if (work) work->wait();
        op->t_return = now_ns();
        op->t_end = op->t_return;
        log.done(op);
      } else if (!info.cpu) {
        op->t_return = now_ns();
        log.track_device(op, work, info.cuda);
      } else {
        op->t_return = now_ns();
        log.track(op, work, p2p);
      }
    } catch (py::error_already_set& e) {
      fail(op, [&] { return std::string(e.what()); }, describe);
      throw;
    } catch (const c10::DistBackendError& e) {
      fail(op, [&] { return std::string("DistBackendError: ") + e.what_without_backtrace(); }, describe);
      throw;
    } catch (const c10::Error& e) {
      fail(op, [&] { return std::string("RuntimeError: ") + e.what_without_backtrace(); }, describe);
      throw;
    } catch (const std::exception& e) {
      fail(op, [&] { return std::string("RuntimeError: ") + e.what(); }, describe);
      throw;
    }
    return work;
  }

  template <class Text, class Describe>
  void fail(const OpPtr& op, Text&& text, Describe&& describe) {
    int64_t t = now_ns();
    if (!op->t_return) op->t_return = t;
    op->t_end = t;
    op->status = STATUS_FAILED;
    if (op->sig < 0 && python_usable()) describe();  // raised before its deferred lookup
    if (op->sig < 0) {
      log_->forget(op);
      return;
    }
    log_->done(op);
    if (python_usable()) {
      py::gil_scoped_acquire gil;
      log_->report_error(*op, text());
    }
  }

  // -- ops ----------------------------------------------------------------------------
#define CT_PYARGS(...) [&]() -> py::object { return py::make_tuple(__VA_ARGS__); }

  WorkPtr allreduce(Tensors& ts, const c10d::AllreduceOptions& o) override {
    Key k(M_allreduce); k.tensors(ts); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "allreduce", "all_reduce", !o.asyncOp, false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->allreduce(ts, o); });
  }
  WorkPtr allreduce_coalesced(Tensors& ts, const c10d::AllreduceCoalescedOptions& o) override {
    Key k(M_allreduce_coalesced); k.tensors(ts); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "allreduce_coalesced", "all_reduce", !o.asyncOp, false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->allreduce_coalesced(ts, o); });
  }
  WorkPtr broadcast(Tensors& ts, const c10d::BroadcastOptions& o) override {
    Key k(M_broadcast); k.tensors(ts); k.add(o.rootRank); k.add(o.rootTensor); k.add(o.asyncOp);
    return traced(k, "broadcast", "broadcast", !o.asyncOp, false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->broadcast(ts, o); });
  }
  WorkPtr reduce(Tensors& ts, const c10d::ReduceOptions& o) override {
    Key k(M_reduce); k.tensors(ts); k.redop(o.reduceOp); k.add(o.rootRank); k.add(o.rootTensor); k.add(o.asyncOp);
    return traced(k, "reduce", "reduce", !o.asyncOp, false, 0, CT_PYARGS(ts, o),
                  [&] { return inner_->reduce(ts, o); });
  }
  WorkPtr allgather(TensorLists& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather); k.lists(out); k.tensors(in); k.add(o.asyncOp);
    return traced(k, "allgather", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather(out, in, o); });
  }
  WorkPtr allgather_coalesced(TensorLists& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather_coalesced); k.lists(out); k.tensors(in); k.add(o.asyncOp);
    return traced(k, "allgather_coalesced", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather_coalesced(out, in, o); });
  }
  WorkPtr _allgather_base(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    Key k(M__allgather_base); k.tensor(out); k.tensor(in); k.add(o.asyncOp);
    return traced(k, "_allgather_base", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->_allgather_base(out, in, o); });
  }
  WorkPtr allgather_into_tensor_coalesced(Tensors& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_allgather_into_tensor_coalesced); k.tensors(out); k.tensors(in); k.add(o.asyncOp);
    return traced(k, "allgather_into_tensor_coalesced", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->allgather_into_tensor_coalesced(out, in, o); });
  }
  WorkPtr gather(TensorLists& out, Tensors& in, const c10d::GatherOptions& o) override {
    Key k(M_gather); k.lists(out); k.tensors(in); k.add(o.rootRank); k.add(o.asyncOp);
    return traced(k, "gather", "gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->gather(out, in, o); });
  }
  WorkPtr scatter(Tensors& out, TensorLists& in, const c10d::ScatterOptions& o) override {
    Key k(M_scatter); k.tensors(out); k.lists(in); k.add(o.rootRank); k.add(o.asyncOp);
    return traced(k, "scatter", "scatter", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->scatter(out, in, o); });
  }
  WorkPtr reduce_scatter(Tensors& out, TensorLists& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter); k.tensors(out); k.lists(in); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "reduce_scatter", "reduce_scatter", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->reduce_scatter(out, in, o); });
  }
  WorkPtr _reduce_scatter_base(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M__reduce_scatter_base); k.tensor(out); k.tensor(in); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "_reduce_scatter_base", "reduce_scatter", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->_reduce_scatter_base(out, in, o); });
  }
  WorkPtr reduce_scatter_tensor_coalesced(Tensors& out, Tensors& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_tensor_coalesced); k.tensors(out); k.tensors(in); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "reduce_scatter_tensor_coalesced", "reduce_scatter", !o.asyncOp, false, 0,
                  CT_PYARGS(out, in, o), [&] { return inner_->reduce_scatter_tensor_coalesced(out, in, o); });
  }
  WorkPtr alltoall(Tensors& out, Tensors& in, const c10d::AllToAllOptions& o) override {
    Key k(M_alltoall); k.tensors(out); k.tensors(in); k.add(o.asyncOp);
    return traced(k, "alltoall", "all_to_all", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->alltoall(out, in, o); });
  }
  WorkPtr alltoall_base(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outs, std::vector<int64_t>& ins,
                        const c10d::AllToAllOptions& o) override {
    Key k(M_alltoall_base); k.tensor(out); k.tensor(in); k.ints(outs); k.ints(ins); k.add(o.asyncOp);
    return traced(k, "alltoall_base", "all_to_all", !o.asyncOp, false, 0, CT_PYARGS(out, in, outs, ins, o),
                  [&] { return inner_->alltoall_base(out, in, outs, ins, o); });
  }
#if CT_TORCH_2_13
  WorkPtr all_gather_single(at::Tensor& out, at::Tensor& in, const c10d::AllgatherOptions& o) override {
    Key k(M_all_gather_single); k.tensor(out); k.tensor(in); k.add(o.asyncOp);
    return traced(k, "all_gather_single", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->all_gather_single(out, in, o); });
  }
  WorkPtr all_gather_single_coalesced(Tensors& out, Tensors& in, const c10d::AllgatherOptions& o) override {
    Key k(M_all_gather_single_coalesced); k.tensors(out); k.tensors(in); k.add(o.asyncOp);
    return traced(k, "all_gather_single_coalesced", "all_gather", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->all_gather_single_coalesced(out, in, o); });
  }
  WorkPtr reduce_scatter_single(at::Tensor& out, at::Tensor& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_single); k.tensor(out); k.tensor(in); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "reduce_scatter_single", "reduce_scatter", !o.asyncOp, false, 0, CT_PYARGS(out, in, o),
                  [&] { return inner_->reduce_scatter_single(out, in, o); });
  }
  WorkPtr reduce_scatter_single_coalesced(Tensors& out, Tensors& in, const c10d::ReduceScatterOptions& o) override {
    Key k(M_reduce_scatter_single_coalesced); k.tensors(out); k.tensors(in); k.redop(o.reduceOp); k.add(o.asyncOp);
    return traced(k, "reduce_scatter_single_coalesced", "reduce_scatter", !o.asyncOp, false, 0,
                  CT_PYARGS(out, in, o), [&] { return inner_->reduce_scatter_single_coalesced(out, in, o); });
  }
  WorkPtr all_to_all_single(at::Tensor& out, at::Tensor& in, std::vector<int64_t>& outs, std::vector<int64_t>& ins,
                            const c10d::AllToAllOptions& o) override {
    Key k(M_all_to_all_single); k.tensor(out); k.tensor(in); k.ints(outs); k.ints(ins); k.add(o.asyncOp);
    return traced(k, "all_to_all_single", "all_to_all", !o.asyncOp, false, 0, CT_PYARGS(out, in, outs, ins, o),
                  [&] { return inner_->all_to_all_single(out, in, outs, ins, o); });
  }
#endif
  WorkPtr barrier(const c10d::BarrierOptions& o) override {
    Key k(M_barrier); k.add(o.asyncOp); k.ints(o.device_ids);
    return traced(k, "barrier", "barrier", !o.asyncOp, false, 0, CT_PYARGS(o),
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
  const std::string getBackendName() const override { return inner_->getBackendName(); }
  void setTimeout(std::chrono::milliseconds timeout) override { inner_->setTimeout(timeout); }
  void startCoalescing(c10::DeviceType d) override { inner_->startCoalescing(d); }
  WorkPtr endCoalescing(c10::DeviceType d) override { return inner_->endCoalescing(d); }
  void setSequenceNumberForGroup() override { inner_->setSequenceNumberForGroup(); }
  uint64_t getSequenceNumberForGroup() override { return inner_->getSequenceNumberForGroup(); }
  void shutdown() override { inner_->shutdown(); }
  void abort() override { inner_->abort(); }
  const std::string& getGroupName() const override { return inner_->getGroupName(); }
  void setGroupName(const std::string& name) override { inner_->setGroupName(name); }
  const std::string& getGroupDesc() const override { return inner_->getGroupDesc(); }
  void setGroupDesc(const std::string& desc) override { inner_->setGroupDesc(desc); }

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
  m.attr("TIMES_CUDA_OPS") = ct::TIMES_CUDA_OPS;
  py::class_<ct::Log, std::shared_ptr<ct::Log>>(m, "Log")
      .def(py::init([](py::object describe, py::object is_internal, py::object recorder) {
        // Never freed (see Log): the shared_ptr's deleter does nothing.
        return std::shared_ptr<ct::Log>(new ct::Log(describe, is_internal, recorder), [](ct::Log*) {});
      }))
      .def("drain", &ct::Log::drain, py::arg("final") = false)
      .def("set_paused", &ct::Log::set_paused)
      .def("unfinished", &ct::Log::unfinished)
      .def("after_fork_in_child", &ct::Log::after_fork_in_child);
  py::class_<ct::TracedPG, c10d::ProcessGroup, ct::NoGilHolder<ct::TracedPG>>(m, "TracedPG", py::dynamic_attr())
      .def(py::init<py::object, std::shared_ptr<ct::Log>, int>())
      .def_property_readonly("inner", &ct::TracedPG::inner)
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
}
