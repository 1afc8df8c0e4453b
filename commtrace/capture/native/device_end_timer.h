// End times of CUDA ops from CUDA events (DeviceEndTimer).
#pragma once
#include "op.h"

namespace ct {

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

}  // namespace ct
