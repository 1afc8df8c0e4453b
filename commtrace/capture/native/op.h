// One traced op while it runs (Op), its packed row in the trace (Record), an
// async op waiting for its end (Pending) and what the hot path knows of a sig.
#pragma once
#include "common.h"
#include "commtrace_record.h"  // generated from trace/schema.py

namespace ct {

// The record layout and its codes are schema.py's (through the generated
// header); rows are copied out as bytes, so the host must be little-endian.
using Record = commtrace::OpRecord;
constexpr uint8_t STATUS_COMPLETED = commtrace::kStatusCompleted, STATUS_FAILED = commtrace::kStatusFailed,
                  STATUS_IN_FLIGHT = commtrace::kStatusInFlight;
constexpr uint8_t FLAG_END_OBSERVED = commtrace::kFlagEndObserved;
constexpr int64_t IN_FLIGHT_AFTER_NS = 1000000000;
constexpr size_t RETIRE_PER_CALL = 4;
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "op records are little-endian");

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
  bool any_source = false;  // recv_anysource: its sender (Work::sourceRank) is recorded once it completed
  int64_t session = 0;  // the Log's session when it entered (Log::enter): its records go to that session's files
  // Why an async op failed (set before t_end is stored, read after it is seen):
  // the flush thread records it as an error line under the GIL.
  std::string error;

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

// What the hot path needs to know of a sig (Recorder.sig_cpu / sig_cuda).
struct SigInfo {
  int32_t sig = -1;
  bool cpu = true;   // CPU tensors: a blocking op is waited for here
  int32_t cuda = -1; // device index of a CUDA op, -1 otherwise
};

}  // namespace ct
