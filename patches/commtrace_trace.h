// commtrace C++ trace writer for ProcessGroupMPI.
//
// This header is added to the PyTorch tree by commtrace's patch as
// torch/csrc/distributed/c10d/CommtraceTrace.hpp. It depends only on the C++17
// standard library (plus getpid/gethostname), so it is compiled and tested on
// its own by commtrace's test suite (tests/test_patch.py).
//
// When the environment variable COMMTRACE_DIR names a directory (commtrace run
// sets it), every process writes, next to the Python wrapper's files,
//   <COMMTRACE_DIR>/rank<R>.pid<P>.cpp.meta.jsonl  (JSON lines: header, world,
//       group, sig, error, end)
//   <COMMTRACE_DIR>/rank<R>.pid<P>.cpp.ops.bin     (32-byte little-endian
//       records, commtrace/trace/schema.py OP_RECORD, flags = FLAG_SOURCE_CPP)
// with one record per op: t_call = enqueue time, d_return = dequeue - enqueue,
// d_end = MPI finished - enqueue (ns of std::chrono::steady_clock, which is
// CLOCK_MONOTONIC on Linux, the clock of Python's time.monotonic_ns()).
//
// Records are buffered in memory and written by a flush thread every 0.5 s and
// at exit; ops still running 1 s after they were enqueued are written with
// status IN_FLIGHT (and again with their final status when they finish), like
// the Python writer does. Meta lines (sig, group, error) are written and
// flushed at once, so they always precede the records that refer to them.
//
// When COMMTRACE_DIR is unset the only cost per op is enabled(): one relaxed
// atomic load and a branch.
//
// Use (what the ProcessGroupMPI patch does):
//   createProcessGroupMPI:  commtrace::registerGroup(pg.get(), worldRank,
//                               groupRank, groupSize, globalRanks);
//   enqueue:                if (commtrace::enabled()) {
//                             commtrace::OpDesc desc(profilingTitle);
//                             desc.addInput(sizes, "Float", nbytes, "cpu"); ...
//                             commtrace::wrapRun(entry->run,
//                                                commtrace::onEnqueue(this, desc));
//                           }
// wrapRun() wraps the op's run function: the wrapper, which the worker thread
// calls right after it took the entry off the queue, stamps the dequeue time,
// runs the MPI call and stamps its end (or the failure and its message).
#pragma once

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#if defined(_WIN32)
#include <process.h>
#else
#include <unistd.h>
#endif

namespace commtrace {

// --- record layout (see commtrace/trace/schema.py) ---
// OpRecord, kFormatName, kFormatVersion, kRecordSize, kStatus*, kFlag*: generated
// from schema.py into commtrace_record.h, which the patch adds next to this file.
}  // namespace commtrace
#include "commtrace_record.h"
namespace commtrace {
// --- end record layout ---

constexpr const char* kEnvDir = "COMMTRACE_DIR";
constexpr int64_t kFlushIntervalMs = 500;
constexpr int64_t kInFlightAfterNs = 1000000000;  // 1 s
constexpr size_t kMaxErrorText = 4000;

inline int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline int64_t wallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline int64_t processId() {
#if defined(_WIN32)
  return static_cast<int64_t>(_getpid());
#else
  return static_cast<int64_t>(getpid());
#endif
}

// Set once tracing is on; the per-op check. Constant-initialised (no guard).
inline std::atomic<bool> gEnabled{false};

inline bool enabled() {
  return gEnabled.load(std::memory_order_relaxed);
}

namespace detail {

inline std::string hostName() {
#if defined(_WIN32)
  const char* h = std::getenv("COMPUTERNAME");
  return h ? h : "";
#else
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) {
    return "";
  }
  return buf;
#endif
}

inline std::string jsonStr(const std::string& s) {
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char esc[8];
          std::snprintf(esc, sizeof(esc), "\\u%04x", c);
          out += esc;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out.push_back('"');
  return out;
}

inline std::string jsonShapes(const std::vector<std::vector<int64_t>>& shapes) {
  std::string out = "[";
  for (size_t i = 0; i < shapes.size(); ++i) {
    if (i) out += ",";
    out += "[";
    for (size_t j = 0; j < shapes[i].size(); ++j) {
      if (j) out += ",";
      out += std::to_string(shapes[i][j]);
    }
    out += "]";
  }
  return out + "]";
}

inline void putLE(unsigned char* p, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) {
    p[i] = static_cast<unsigned char>(v >> (8 * i));
  }
}

}  // namespace detail

// c10d op name for a ProcessGroupMPI profiling title ("mpi:all_reduce" ->
// "all_reduce"). Unknown titles keep their text without the "mpi:" prefix.
inline std::string opName(const std::string& title) {
  static const std::map<std::string, std::string> kOps = {
      {"mpi:all_reduce", "all_reduce"},
      {"mpi:broadcast", "broadcast"},
      {"mpi:reduce", "reduce"},
      {"mpi:all_gather", "all_gather"},
      {"mpi:_allgather_base", "all_gather"},
      {"mpi:gather", "gather"},
      {"mpi:scatter", "scatter"},
      {"mpi:reduce_scatter", "reduce_scatter"},
      {"mpi:_reduce_scatter_base", "reduce_scatter"},
      {"mpi:all_to_all", "all_to_all"},
      {"mpi:barrier", "barrier"},
      {"mpi:send", "send"},
      {"mpi:recv", "recv"},
      {"mpi:recvAnySource", "recv"},
  };
  auto it = kOps.find(title);
  if (it != kOps.end()) {
    return it->second;
  }
  return title.compare(0, 4, "mpi:") == 0 ? title.substr(4) : title;
}

// The concrete variant recorded in the sig: the profiling title itself, except
// that recvAnySource is called "recv_anysource".
inline std::string variantName(const std::string& title) {
  return title == "mpi:recvAnySource" ? std::string("recv_anysource") : title;
}

// torch's Python dtype name for c10::toString(ScalarType) ("Float" ->
// "float32"). Unknown names are lower-cased.
inline std::string dtypeName(const std::string& c10Name) {
  static const std::map<std::string, std::string> kTypes = {
      {"Byte", "uint8"},          {"Char", "int8"},
      {"Short", "int16"},         {"Int", "int32"},
      {"Long", "int64"},          {"Half", "float16"},
      {"Float", "float32"},       {"Double", "float64"},
      {"ComplexHalf", "complex32"}, {"ComplexFloat", "complex64"},
      {"ComplexDouble", "complex128"}, {"Bool", "bool"},
      {"QInt8", "qint8"},         {"QUInt8", "quint8"},
      {"QInt32", "qint32"},       {"BFloat16", "bfloat16"},
      {"QUInt4x2", "quint4x2"},   {"QUInt2x4", "quint2x4"},
      {"UInt16", "uint16"},       {"UInt32", "uint32"},
      {"UInt64", "uint64"},       {"Float8_e5m2", "float8_e5m2"},
      {"Float8_e4m3fn", "float8_e4m3fn"},
      {"Float8_e5m2fnuz", "float8_e5m2fnuz"},
      {"Float8_e4m3fnuz", "float8_e4m3fnuz"},
      {"Float8_e8m0fnu", "float8_e8m0fnu"},
  };
  auto it = kTypes.find(c10Name);
  if (it != kTypes.end()) {
    return it->second;
  }
  std::string out = c10Name;
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// Static description of one op (becomes a "sig" meta line, interned).
struct OpDesc {
  explicit OpDesc(const char* profilingTitle)
      : title(profilingTitle ? profilingTitle : "mpi:unknown") {}

  void addInput(std::vector<int64_t> shape, const char* c10Dtype,
                uint64_t nbytes, const std::string& dev = std::string()) {
    shapes.push_back(std::move(shape));
    noteDtype(c10Dtype);
    bytes += nbytes;
    if (device.empty()) device = dev;
  }

  void addOutput(std::vector<int64_t> shape, const char* c10Dtype,
                 uint64_t nbytes, const std::string& dev = std::string()) {
    outShapes.push_back(std::move(shape));
    if (shapes.empty()) noteDtype(c10Dtype);
    outBytes += nbytes;
    if (device.empty()) device = dev;
  }

  // The JSON fields of the sig line (without type and id); also the intern key.
  std::string fieldsJson() const {
    std::string s = "\"op\":" + detail::jsonStr(opName(title));
    s += ",\"variant\":" + detail::jsonStr(variantName(title));
    s += ",\"shapes\":" + detail::jsonShapes(shapes);
    s += ",\"out_shapes\":" + detail::jsonShapes(outShapes);
    s += ",\"dtype\":" + (dtype.empty() ? std::string("null") : detail::jsonStr(dtype));
    s += ",\"bytes\":" + std::to_string(bytes);
    s += ",\"out_bytes\":" + std::to_string(outBytes);
    s += ",\"async\":true";
    if (!device.empty()) s += ",\"device\":" + detail::jsonStr(device);
    return s;
  }

  std::string title;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<int64_t>> outShapes;
  std::string dtype;
  std::string device;
  uint64_t bytes = 0;
  uint64_t outBytes = 0;

 private:
  void noteDtype(const char* c10Dtype) {
    std::string d = dtypeName(c10Dtype ? c10Dtype : "");
    if (dtype.empty()) {
      dtype = d;
    } else if (dtype != d) {
      dtype = "mixed";
    }
  }
};

// Text of an exception (c10::Error and MPI_CHECK failures derive from
// std::exception), truncated to kMaxErrorText characters.
inline std::string describe(const std::exception_ptr& eptr) {
  std::string text;
  try {
    if (eptr) std::rethrow_exception(eptr);
    text = "unknown error";
  } catch (const std::exception& e) {
    text = e.what();
  } catch (...) {
    text = "unknown (non-std) exception";
  }
  if (text.size() > kMaxErrorText) text.resize(kMaxErrorText);
  return text;
}

class Tracer {
 public:
  // The process's tracer, created on the first call when COMMTRACE_DIR is set;
  // nullptr when it is not (decided once).
  static Tracer* get() {
    static Tracer* t = []() -> Tracer* {
      const char* dir = std::getenv(kEnvDir);
      if (dir == nullptr || dir[0] == '\0') return nullptr;
      Tracer* tr = new Tracer(dir);  // leaked on purpose: used until exit
      std::atexit(&Tracer::atExit);
      return tr;
    }();
    return t;
  }

  // A ProcessGroupMPI was created: write a "group" line (and a "world" line for
  // the first group without explicit ranks). globalRanks empty = all ranks of
  // the world. Opens the files on first use (the stem needs worldRank).
  void registerGroup(const void* pg, int worldRank, int groupRank,
                     int groupSize, std::vector<int> globalRanks) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!openLocked(worldRank)) return;
    const bool isWorld = globalRanks.empty();
    if (isWorld) {
      for (int r = 0; r < groupSize; ++r) globalRanks.push_back(r);
    }
    std::string ranksJson = "[";
    for (size_t i = 0; i < globalRanks.size(); ++i) {
      if (i) ranksJson += ",";
      ranksJson += std::to_string(globalRanks[i]);
    }
    ranksJson += "]";
    // Same name on every member: the ranks, plus "#k" for the k-th repeat.
    int repeat = rankSetCount_[ranksJson]++;
    std::string name = "mpi:" + ranksJson;
    if (repeat) name += "#" + std::to_string(repeat);
    if (isWorld && !worldWritten_) {
      worldWritten_ = true;
      writeMetaLocked(
          "{\"type\":\"world\",\"world\":0,\"t_mono_ns\":" +
          std::to_string(nowNs()) + ",\"world_id\":null,\"rank\":" +
          std::to_string(worldRank) + ",\"world_size\":" +
          std::to_string(groupSize) + ",\"backend\":\"mpi\"}");
    }
    const uint16_t gid = static_cast<uint16_t>(groups_.size() & 0xFFFF);
    groups_.push_back(name);
    writeMetaLocked(
        "{\"type\":\"group\",\"id\":" + std::to_string(gid) +
        ",\"world\":0,\"name\":" + detail::jsonStr(name) +
        ",\"desc\":null,\"backend\":\"mpi\",\"size\":" +
        std::to_string(groupSize) + ",\"ranks\":" + ranksJson +
        ",\"rank\":" + std::to_string(groupRank) + "}");
    pgs_[pg] = PgState{gid, 0};
    gEnabled.store(true, std::memory_order_relaxed);
  }

  // An op is about to be queued: returns its token (0 = not traced).
  uint64_t onEnqueue(const void* pg, const OpDesc& desc) {
    const std::string key = desc.fieldsJson();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pgs_.find(pg);
    if (it == pgs_.end() || ops_ == nullptr) return 0;
    uint32_t sig;
    auto s = sigs_.find(key);
    if (s == sigs_.end()) {
      sig = static_cast<uint32_t>(sigs_.size());
      sigs_.emplace(key, sig);
      writeMetaLocked("{\"type\":\"sig\",\"id\":" + std::to_string(sig) + "," + key + "}");
    } else {
      sig = s->second;
    }
    Pending p;
    p.group = it->second.group;
    p.seq = ++it->second.seq;
    p.sig = sig;
    const uint64_t token = nextToken_++;
    p.tEnqueue = nowNs();  // last, so our own work is not counted as queue wait
    pending_.emplace(token, p);
    return token;
  }

  // The worker thread took the op off the queue.
  void onDequeue(uint64_t token) {
    const int64_t t = nowNs();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(token);
    if (it != pending_.end()) it->second.tDequeue = t;
  }

  // The MPI call returned (eptr == nullptr) or threw.
  void onFinish(uint64_t token, const std::exception_ptr* eptr = nullptr) {
    const int64_t t = nowNs();
    std::string text;
    if (eptr != nullptr) text = describe(*eptr);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(token);
    if (it == pending_.end()) return;
    Pending p = it->second;
    pending_.erase(it);
    const uint8_t status = eptr ? kStatusFailed : kStatusCompleted;
    if (eptr != nullptr) {
      writeMetaLocked("{\"type\":\"error\",\"t_call\":" + std::to_string(p.tEnqueue) +
                      ",\"group\":" + std::to_string(p.group) + ",\"seq\":" +
                      std::to_string(p.seq) + ",\"sig\":" + std::to_string(p.sig) +
                      ",\"text\":" + detail::jsonStr(text) + "}");
    }
    appendRecordLocked(p, p.tDequeue ? p.tDequeue : t, t, status);
    if (closed_) flushLocked(false);  // after exit processing: write through
  }

  // Write buffered records now (the flush thread calls this every 0.5 s).
  void flush() {
    std::lock_guard<std::mutex> lock(mu_);
    flushLocked(false);
  }

  // Final flush: ops still running are written as IN_FLIGHT, then "end".
  void close(const char* how = "exit") {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ || ops_ == nullptr || ownerPid_ != processId()) return;
      closed_ = true;
      stop_ = true;
    }
    cv_.notify_all();
    if (flusher_.joinable() && flusher_.get_id() != std::this_thread::get_id()) {
      flusher_.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    flushLocked(true);
    writeMetaLocked("{\"type\":\"end\",\"exit_code\":null,\"how\":" + detail::jsonStr(how) +
                    ",\"t_wall_ns\":" + std::to_string(wallNs()) +
                    ",\"t_mono_ns\":" + std::to_string(nowNs()) + "}");
  }

  std::string metaPath() const { return stem_.empty() ? "" : stem_ + ".meta.jsonl"; }
  std::string opsPath() const { return stem_.empty() ? "" : stem_ + ".ops.bin"; }

 private:
  struct PgState {
    uint16_t group;
    uint32_t seq;
  };
  struct Pending {
    int64_t tEnqueue = 0;
    int64_t tDequeue = 0;
    uint32_t seq = 0;
    uint32_t sig = 0;
    uint16_t group = 0;
    int64_t inflightDequeue = -1;  // tDequeue when last written IN_FLIGHT; -1 = never
  };

  explicit Tracer(std::string dir) : dir_(std::move(dir)) {}

  static void atExit() {
    if (Tracer* t = get()) t->close("exit");
  }

  bool openLocked(int worldRank) {
    if (ops_ != nullptr) return true;
    if (failed_) return false;
    ownerPid_ = processId();
    stem_ = dir_ + "/rank" + std::to_string(worldRank) + ".pid" +
        std::to_string(ownerPid_) + ".cpp";
    meta_ = std::fopen((stem_ + ".meta.jsonl").c_str(), "ab");
    ops_ = std::fopen((stem_ + ".ops.bin").c_str(), "ab");
    if (meta_ == nullptr || ops_ == nullptr) {
      std::fprintf(stderr, "commtrace: cannot write %s.*; C++ tracing is off\n", stem_.c_str());
      if (meta_) std::fclose(meta_);
      if (ops_) std::fclose(ops_);
      meta_ = ops_ = nullptr;
      failed_ = true;
      return false;
    }
    const int64_t mono = nowNs();
    writeMetaLocked(
        "{\"type\":\"header\",\"format\":\"commtrace\",\"version\":" +
        std::to_string(kFormatVersion) + ",\"source\":\"cpp\",\"record_size\":" +
        std::to_string(kRecordSize) + ",\"rank\":" + std::to_string(worldRank) +
        ",\"pid\":" + std::to_string(ownerPid_) + ",\"host\":" +
        detail::jsonStr(detail::hostName()) + ",\"t_wall_ns\":" +
        std::to_string(wallNs()) + ",\"t_mono_ns\":" + std::to_string(mono) +
        ",\"clock\":\"steady_clock\"}");
    flusher_ = std::thread([this] { runFlusher(); });
    return true;
  }

  void runFlusher() {
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      cv_.wait_for(lock, std::chrono::milliseconds(kFlushIntervalMs), [this] { return stop_; });
      if (stop_) break;
      flushLocked(false);
    }
  }

  void writeMetaLocked(const std::string& line) {
    if (meta_ == nullptr) return;
    std::string l = line + "\n";
    std::fwrite(l.data(), 1, l.size(), meta_);
    std::fflush(meta_);
  }

  void appendRecordLocked(const Pending& p, int64_t tDequeue, int64_t tEnd, uint8_t status) {
    unsigned char r[kRecordSize];
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float dRet = tDequeue ? static_cast<float>(tDequeue - p.tEnqueue) : nan;
    const float dEnd = tEnd ? static_cast<float>(tEnd - p.tEnqueue) : nan;
    uint32_t bRet, bEnd;
    std::memcpy(&bRet, &dRet, 4);
    std::memcpy(&bEnd, &dEnd, 4);
    detail::putLE(r + 0, static_cast<uint64_t>(p.tEnqueue), 8);
    detail::putLE(r + 8, bRet, 4);
    detail::putLE(r + 12, bEnd, 4);
    detail::putLE(r + 16, p.seq, 4);
    detail::putLE(r + 20, p.sig, 4);
    detail::putLE(r + 24, 0, 4);  // iteration: unknown in C++
    detail::putLE(r + 28, p.group, 2);
    r[30] = status;
    r[31] = kFlagSourceCpp;
    buf_.insert(buf_.end(), r, r + kRecordSize);
  }

  void flushLocked(bool final) {
    if (ops_ == nullptr || ownerPid_ != processId()) return;  // not ours after fork()
    const int64_t now = nowNs();
    for (auto& kv : pending_) {
      Pending& p = kv.second;
      if (!final && now - p.tEnqueue <= kInFlightAfterNs) continue;
      if (!final && p.inflightDequeue == p.tDequeue) continue;  // nothing new
      appendRecordLocked(p, p.tDequeue, 0, kStatusInFlight);
      p.inflightDequeue = p.tDequeue;
    }
    if (!buf_.empty()) {
      std::fwrite(buf_.data(), 1, buf_.size(), ops_);
      buf_.clear();
    }
    std::fflush(ops_);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::thread flusher_;
  bool stop_ = false;
  bool closed_ = false;
  bool failed_ = false;
  bool worldWritten_ = false;
  std::string dir_;
  std::string stem_;
  int64_t ownerPid_ = 0;
  std::FILE* meta_ = nullptr;
  std::FILE* ops_ = nullptr;
  std::vector<unsigned char> buf_;
  std::vector<std::string> groups_;
  std::map<std::string, int> rankSetCount_;
  std::unordered_map<const void*, PgState> pgs_;
  std::unordered_map<std::string, uint32_t> sigs_;
  std::unordered_map<uint64_t, Pending> pending_;
  uint64_t nextToken_ = 1;
};

// ---- the calls the patch makes ---------------------------------------------

// Registers a process group (call it for every ProcessGroupMPI created);
// turns tracing on when COMMTRACE_DIR is set.
inline void registerGroup(const void* pg, int worldRank, int groupRank,
                          int groupSize, const std::vector<int>& globalRanks) {
  if (Tracer* t = Tracer::get()) {
    t->registerGroup(pg, worldRank, groupRank, groupSize, globalRanks);
  }
}

inline uint64_t onEnqueue(const void* pg, const OpDesc& desc) {
  Tracer* t = Tracer::get();
  return t ? t->onEnqueue(pg, desc) : 0;
}

// Wraps an op's run function so that the worker thread stamps the dequeue
// time, the end of the MPI call, and failures. token 0 leaves run unchanged.
template <class... Args>
void wrapRun(std::function<void(Args...)>& run, uint64_t token) {
  Tracer* t = Tracer::get();
  if (token == 0 || t == nullptr) return;
  std::function<void(Args...)> inner = std::move(run);
  run = [t, token, inner = std::move(inner)](Args... args) {
    t->onDequeue(token);
    try {
      inner(std::forward<Args>(args)...);
    } catch (...) {
      std::exception_ptr eptr = std::current_exception();
      t->onFinish(token, &eptr);
      throw;
    }
    t->onFinish(token);
  };
}

}  // namespace commtrace
