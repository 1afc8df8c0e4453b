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
// Ops during graph capture get no event: recording one would add work to the
// graph being captured. Whether the caller's stream is capturing comes from
// c10's device-generic query where the torch release has it
// (compat::has_capture_query, 2.13+); on older releases the caller asked
// torch's Python binding under the GIL it already held (Log::stream_capturing)
// and passes the answer in.
constexpr bool CAPTURE_QUERY_IN_CPP = compat::has_capture_query<c10::impl::VirtualGuardImpl>::value;

template <class Guard>
static bool capturing(const Guard& impl, const c10::Stream& s, bool asked_in_python) {
  if constexpr (compat::has_capture_query<Guard>::value) {
    return impl.isStreamCapturing(s);
  } else {
    return asked_in_python;
  }
}

class DeviceEndTimer {
 public:
  static constexpr int64_t ANCHOR_EVERY_NS = 5000000000;

  EventPtr end_event(const WorkPtr& work, int index, bool capturing_in_python) {
    c10::impl::VirtualGuardImpl impl(c10::DeviceType::CUDA);
    if (impl.getDevice().index() != index) return nullptr;  // switching its stream would switch the device
    c10::Device dev(c10::DeviceType::CUDA, c10::DeviceIndex(index));
    c10::Stream cur = impl.getStream(dev);
    if (capturing(impl, cur, capturing_in_python)) return nullptr;
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
