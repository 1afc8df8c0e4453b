// commtrace C++ trace writer for ProcessGroupMPI.
//
// This header is added to the PyTorch tree by commtrace's patch as
// torch/csrc/distributed/c10d/CommtraceTrace.hpp. It depends only on the C++17
// standard library (plus getpid/gethostname/pthread_atfork), so it is compiled
// and tested on its own by commtrace's test suite (tests/test_patch.py).
//
// When the environment variable COMMTRACE_DIR names a directory (commtrace run
// sets it), every process writes, next to the Python wrapper's files,
//   <COMMTRACE_DIR>/rank<R>.pid<P>.cpp.meta.jsonl  (JSON lines: header, world,
//       group, sig, error, source, end)
//   <COMMTRACE_DIR>/rank<R>.pid<P>.cpp.ops.bin     (32-byte little-endian
//       records, commtrace/trace/schema.py OP_RECORD, flags = FLAG_SOURCE_CPP)
//   <COMMTRACE_DIR>/rank<R>.pid<P>.cpp.mpi.bin     (the same record layout: one
//       per op that made MPI calls, d_return/d_end = first MPI call began /
//       last MPI call returned)
// Timing points of one op (ns of std::chrono::steady_clock, which is
// CLOCK_MONOTONIC on Linux, the clock of Python's time.monotonic_ns()):
//   enqueue    ProcessGroupMPI::enqueue queued it     (ops.bin t_call)
//   dequeue    the worker thread took it off the queue (ops.bin d_return)
//   MPI begin  its first MPI_CHECK(...) call started    (mpi.bin d_return)
//   MPI end    its last MPI_CHECK(...) call returned    (mpi.bin d_end)
//   run end    its run function returned or threw     (ops.bin d_end)
// dequeue..MPI begin is the wait for ProcessGroupMPI's global MPI lock plus
// the input copies (flatten) the op makes before its MPI call; MPI end..run
// end is the output copies after it. The patch sees no point in between.
//
// Nothing is written to disk on the threads that call ProcessGroupMPI or on
// its worker thread: they append to in-memory buffers under a mutex that no
// I/O ever holds; a flush thread swaps the buffers out every 0.5 s (and at
// exit) and writes them outside that mutex, meta lines first, so they always
// precede the records that refer to them. Ops still running 1 s after they
// were enqueued are written with status IN_FLIGHT (and again with their final
// status when they finish), like the Python writer does.
//
// After fork() the child writes nothing and takes no lock of the tracer (the
// parent's flush thread may have held one at the fork): tracing is off in it.
//
// When COMMTRACE_DIR is unset the only cost per op is enabled(): one relaxed
// atomic load and a branch (also per MPI call, in MpiCallScope).
//
// Use (what the ProcessGroupMPI patch does):
//   createProcessGroupMPI:  commtrace::registerGroup(pg.get(), worldRank,
//                               groupRank, groupSize, globalRanks);
//   ~ProcessGroupMPI:       commtrace::unregisterGroup(this);
//   MPI_CHECK(cmd):         commtrace::MpiCallScope commtraceMpiCall; (first)
//   enqueue:                if (commtrace::enabled()) {
//                             commtrace::OpDesc desc(profilingTitle);
//                             desc.addInput(sizes, "Float", nbytes, "cpu"); ...
//                             commtrace::wrapRun(entry->run,
//                                                commtrace::onEnqueue(this, desc));
//                           }
//   recvAnysource:          if (commtrace::enabled()) { OpDesc desc(title); ...
//                             commtrace::onAnySourceRecv(this, work.get(), desc);
//                           }
//   AsyncWork's isCompleted / wait, once its request completed:
//                           commtrace::onWorkDone(this, status_.MPI_SOURCE,
//                                                 status_.MPI_ERROR == MPI_SUCCESS);
// wrapRun() wraps the op's run function: the wrapper, which the worker thread
// calls right after it took the entry off the queue, stamps the dequeue time,
// runs the op (whose MPI_CHECKs stamp the MPI call) and stamps its end (or the
// failure and its message). A recv from any source is not queued: its record
// runs from the call (t_call) to the completion its caller found (d_end), with
// no dequeue (d_return NaN), and a "source" line names the global rank it
// received from (the reader shows it as the op's root).
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
#include <initializer_list>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <cerrno>
#include <fcntl.h>
#if defined(_WIN32)
#include <io.h>
#include <process.h>
#else
#include <pthread.h>
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
constexpr uint32_t kMaxGroups = 65536;  // group ids are uint16 in a record

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

namespace detail {

inline void encodeRecord(const OpRecord& rec, unsigned char* out) {
  uint32_t bRet, bEnd;
  std::memcpy(&bRet, &rec.d_return, 4);
  std::memcpy(&bEnd, &rec.d_end, 4);
  putLE(out + 0, static_cast<uint64_t>(rec.t_call), 8);
  putLE(out + 8, bRet, 4);
  putLE(out + 12, bEnd, 4);
  putLE(out + 16, rec.seq, 4);
  putLE(out + 20, rec.sig, 4);
  putLE(out + 24, rec.iteration, 4);
  putLE(out + 28, rec.group, 2);
  out[30] = rec.status;
  out[31] = rec.flags;
}

// Files are plain descriptors, not stdio: no user-space buffer that a forked
// child's exit() could flush a second time, and each batch goes out in one
// write() where the OS allows.
inline int openAppend(const std::string& path) {
#if defined(_WIN32)
  return _open(path.c_str(), _O_WRONLY | _O_CREAT | _O_APPEND | _O_BINARY, 0644);
#else
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
#endif
}

// Writes all of data; false on an error (the caller stops tracing).
inline bool writeAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
#if defined(_WIN32)
    const int n = _write(fd, data.data() + done, static_cast<unsigned>(data.size() - done));
#else
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
#endif
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Set in a child process by the fork handler: the tracer belongs to the parent.
inline std::atomic<bool> gForkedChild{false};

inline void onForkChild() {
  gForkedChild.store(true, std::memory_order_relaxed);
  gEnabled.store(false, std::memory_order_relaxed);
}

inline bool inForkedChild() {
  return gForkedChild.load(std::memory_order_relaxed);
}

// MPI call stamps of the op the current thread is running (see wrapRun and
// MpiCallScope); active only inside a wrapped run function.
struct RunStamps {
  bool active = false;
  int64_t mpiBegin = 0;  // first MPI call began; 0 = none
  int64_t mpiEnd = 0;    // last MPI call returned
};

inline thread_local RunStamps tRun;

}  // namespace detail

// Stamps an MPI call made by a traced op (the patch puts one at the start of
// MPI_CHECK's block, so it covers the call and its error check). Outside a
// traced op (MPI_CHECKs on the caller's thread, or tracing off) it does nothing.
class MpiCallScope {
 public:
  MpiCallScope() {
    if (enabled() && detail::tRun.active) {
      active_ = true;
      if (detail::tRun.mpiBegin == 0) detail::tRun.mpiBegin = nowNs();
    }
  }
  ~MpiCallScope() {
    if (active_) detail::tRun.mpiEnd = nowNs();
  }
  MpiCallScope(const MpiCallScope&) = delete;
  MpiCallScope& operator=(const MpiCallScope&) = delete;

 private:
  bool active_ = false;
};

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
#if !defined(_WIN32)
      pthread_atfork(nullptr, nullptr, &detail::onForkChild);
#endif
      return tr;
    }();
    return t;
  }

  // A ProcessGroupMPI was created: write a "group" line (and a "world" line for
  // the first group without explicit ranks). globalRanks empty = all ranks of
  // the world. Opens the files on first use (the stem needs worldRank). A
  // group created at the address of a destroyed one is a new group (new id).
  void registerGroup(const void* pg, int worldRank, int groupRank,
                     int groupSize, std::vector<int> globalRanks) {
    if (detail::inForkedChild() || !open(worldRank)) return;
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
    std::lock_guard<std::mutex> lock(mu_);
    pgs_.erase(pg);
    if (nextGroup_ >= kMaxGroups) {
      if (!warnedGroups_) {
        warnedGroups_ = true;
        std::fprintf(stderr,
                     "commtrace: more than %u process groups in this process; "
                     "the C++ layer does not trace the later ones\n",
                     static_cast<unsigned>(kMaxGroups));
      }
      return;
    }
    // Same name on every member: the ranks, plus "#k" for the k-th repeat.
    int repeat = rankSetCount_[ranksJson]++;
    std::string name = "mpi:" + ranksJson;
    if (repeat) name += "#" + std::to_string(repeat);
    if (isWorld && !worldWritten_) {
      worldWritten_ = true;
      addMetaLocked(
          "{\"type\":\"world\",\"world\":0,\"t_mono_ns\":" +
          std::to_string(nowNs()) + ",\"world_id\":null,\"rank\":" +
          std::to_string(worldRank) + ",\"world_size\":" +
          std::to_string(groupSize) + ",\"backend\":\"mpi\"}");
    }
    const uint16_t gid = static_cast<uint16_t>(nextGroup_++);
    addMetaLocked(
        "{\"type\":\"group\",\"id\":" + std::to_string(gid) +
        ",\"world\":0,\"name\":" + detail::jsonStr(name) +
        ",\"desc\":null,\"backend\":\"mpi\",\"size\":" +
        std::to_string(groupSize) + ",\"ranks\":" + ranksJson +
        ",\"rank\":" + std::to_string(groupRank) + "}");
    pgs_[pg] = PgState{gid, 0, 0};
    groupRanks_.push_back(std::move(globalRanks));  // index: gid
    gEnabled.store(true, std::memory_order_relaxed);
  }

  // A ProcessGroupMPI is being destroyed (its queue is drained): forget it.
  void unregisterGroup(const void* pg) {
    if (detail::inForkedChild()) return;
    std::lock_guard<std::mutex> lock(mu_);
    pgs_.erase(pg);
  }

  // An op is about to be queued: returns its token (0 = not traced).
  uint64_t onEnqueue(const void* pg, const OpDesc& desc) { return start(pg, desc, nullptr); }

  // A recv from any source was posted (recvAnysource: not queued; its AsyncWork
  // ``work`` completes in the caller's wait() or isCompleted(), onWorkDone).
  void onAnySourceRecv(const void* pg, const void* work, const OpDesc& desc) {
    start(pg, desc, work);
  }

  // The worker thread took the op off the queue.
  void onDequeue(uint64_t token) {
    const int64_t t = nowNs();
    if (detail::inForkedChild()) return;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_.find(token);
    if (it != pending_.end()) it->second.tDequeue = t;
  }

  // The op's run function returned (eptr == nullptr) or threw; stamps are its
  // MPI calls' (none: it made no MPI_CHECK call).
  void onFinish(uint64_t token, const detail::RunStamps& stamps,
                const std::exception_ptr* eptr = nullptr) {
    const int64_t t = nowNs();
    if (detail::inForkedChild()) return;
    std::string text;
    if (eptr != nullptr) text = describe(*eptr);
    bool writeThrough;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = pending_.find(token);
      if (it == pending_.end()) return;
      Pending p = it->second;
      pending_.erase(it);
      const uint8_t status = eptr ? kStatusFailed : kStatusCompleted;
      if (eptr != nullptr) {
        addMetaLocked("{\"type\":\"error\",\"t_call\":" + std::to_string(p.tEnqueue) +
                      ",\"group\":" + std::to_string(p.group) + ",\"seq\":" +
                      std::to_string(p.seq) + ",\"sig\":" + std::to_string(p.sig) +
                      ",\"text\":" + detail::jsonStr(text) + "}");
      }
      addRecordLocked(opsBuf_, p, p.tDequeue ? p.tDequeue : t, t, status);
      if (stamps.mpiBegin != 0) {
        addRecordLocked(mpiBuf_, p, stamps.mpiBegin, stamps.mpiEnd, status);
      }
      writeThrough = closed_;
    }
    if (writeThrough) writeOut();  // after exit processing: nobody else will
  }

  // ``work`` completed (ok) or failed; ``groupSource``: the rank it received
  // from in its group (MPI_SOURCE), written as a "source" line with its global
  // rank. A work not recorded (not a traced recv from any source): nothing.
  void onWorkDone(const void* work, int groupSource, bool ok) {
    const int64_t t = nowNs();
    if (detail::inForkedChild()) return;
    bool writeThrough;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto w = works_.find(work);
      if (w == works_.end()) return;
      auto it = pending_.find(w->second);
      works_.erase(w);
      if (it == pending_.end()) return;
      Pending p = it->second;
      pending_.erase(it);
      const std::vector<int>& ranks = groupRanks_[p.group];
      if (ok && groupSource >= 0 && static_cast<size_t>(groupSource) < ranks.size()) {
        addMetaLocked("{\"type\":\"source\",\"t_call\":" + std::to_string(p.tEnqueue) +
                      ",\"group\":" + std::to_string(p.group) + ",\"seq\":" +
                      std::to_string(p.seq) + ",\"sig\":" + std::to_string(p.sig) +
                      ",\"src\":" + std::to_string(ranks[groupSource]) + "}");
      }
      addRecordLocked(opsBuf_, p, 0, t, ok ? kStatusCompleted : kStatusFailed);
      writeThrough = closed_;
    }
    if (writeThrough) writeOut();  // after exit processing: nobody else will
  }

  // Write buffered lines and records now (the flush thread does it every 0.5 s).
  void flush() {
    if (detail::inForkedChild()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      addInFlightLocked(false);
    }
    writeOut();
  }

  // Final flush: ops still running are written as IN_FLIGHT, then "end". In a
  // forked child it returns at once, without taking any lock.
  void close(const char* how = "exit") {
    if (detail::inForkedChild()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_ || !opened_) return;
      closed_ = true;
      stop_ = true;
    }
    cv_.notify_all();
    if (flusher_.joinable() && flusher_.get_id() != std::this_thread::get_id()) {
      flusher_.join();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      addInFlightLocked(true);
      addMetaLocked("{\"type\":\"end\",\"exit_code\":null,\"how\":" + detail::jsonStr(how) +
                    ",\"t_wall_ns\":" + std::to_string(wallNs()) +
                    ",\"t_mono_ns\":" + std::to_string(nowNs()) + "}");
    }
    writeOut();
  }

  std::string metaPath() const { return stem_.empty() ? "" : stem_ + ".meta.jsonl"; }
  std::string opsPath() const { return stem_.empty() ? "" : stem_ + ".ops.bin"; }
  std::string mpiPath() const { return stem_.empty() ? "" : stem_ + ".mpi.bin"; }

 private:
  struct PgState {
    uint16_t group;
    uint32_t seq;           // its queued ops
    uint32_t anySourceSeq;  // its recvs from any source
  };
  struct Pending {
    int64_t tEnqueue = 0;
    int64_t tDequeue = 0;
    uint32_t seq = 0;
    uint32_t sig = 0;
    uint16_t group = 0;
    int64_t inflightDequeue = -1;  // tDequeue when last written IN_FLIGHT; -1 = never
  };

  // Records an op from now (its sig, seq and token; 0 = not traced). A recv
  // from any source (``work``: its AsyncWork) counts its own seqs, as the
  // Python layer does, so the collectives' seqs stay those of every member.
  uint64_t start(const void* pg, const OpDesc& desc, const void* work) {
    if (detail::inForkedChild()) return 0;
    const std::string key = desc.fieldsJson();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pgs_.find(pg);
    if (it == pgs_.end() || failed_) return 0;
    uint32_t sig;
    auto s = sigs_.find(key);
    if (s == sigs_.end()) {
      sig = static_cast<uint32_t>(sigs_.size());
      sigs_.emplace(key, sig);
      addMetaLocked("{\"type\":\"sig\",\"id\":" + std::to_string(sig) + "," + key + "}");
    } else {
      sig = s->second;
    }
    Pending p;
    p.group = it->second.group;
    p.seq = work ? ++it->second.anySourceSeq : ++it->second.seq;
    p.sig = sig;
    const uint64_t token = nextToken_++;
    p.tEnqueue = nowNs();  // last, so our own work is not counted as queue wait
    pending_.emplace(token, p);
    if (work != nullptr) works_[work] = token;
    return token;
  }

  explicit Tracer(std::string dir) : dir_(std::move(dir)) {}

  static void atExit() {
    if (Tracer* t = get()) t->close("exit");
  }

  // Opens the three files once (registerGroup: never on an op's path).
  bool open(int worldRank) {
    if (opened_.load()) return !failed_.load();  // the usual case: no ioMu_
    std::lock_guard<std::mutex> io(ioMu_);
    if (opened_.load()) return !failed_.load();
    if (failed_.load()) return false;
    const int64_t pid = processId();
    const std::string stem = dir_ + "/rank" + std::to_string(worldRank) + ".pid" +
        std::to_string(pid) + ".cpp";
    meta_ = detail::openAppend(stem + ".meta.jsonl");
    ops_ = detail::openAppend(stem + ".ops.bin");
    mpi_ = detail::openAppend(stem + ".mpi.bin");
    if (meta_ < 0 || ops_ < 0 || mpi_ < 0) {
      std::fprintf(stderr, "commtrace: cannot write %s.*; C++ tracing is off\n", stem.c_str());
      closeFilesLocked();
      failed_ = true;
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      stem_ = stem;
      addMetaLocked(
          "{\"type\":\"header\",\"format\":\"commtrace\",\"version\":" +
          std::to_string(kFormatVersion) + ",\"source\":\"cpp\",\"record_size\":" +
          std::to_string(kRecordSize) + ",\"rank\":" + std::to_string(worldRank) +
          ",\"pid\":" + std::to_string(pid) + ",\"host\":" +
          detail::jsonStr(detail::hostName()) + ",\"t_wall_ns\":" +
          std::to_string(wallNs()) + ",\"t_mono_ns\":" + std::to_string(nowNs()) +
          ",\"clock\":\"steady_clock\"}");
    }
    flusher_ = std::thread([this] { runFlusher(); });
    opened_ = true;
    return true;
  }

  void closeFilesLocked() {
    for (int* fd : {&meta_, &ops_, &mpi_}) {
      if (*fd >= 0) {
#if defined(_WIN32)
        _close(*fd);
#else
        ::close(*fd);
#endif
      }
      *fd = -1;
    }
  }

  void runFlusher() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(kFlushIntervalMs), [this] { return stop_; });
        if (stop_) return;
      }
      flush();
    }
  }

  // Takes the buffers under mu_ and writes them with only ioMu_ held (which no
  // op path takes): meta lines first, so every record's sig/group is on disk
  // before the record.
  void writeOut() {
    std::lock_guard<std::mutex> io(ioMu_);
    std::string meta, ops, mpi;
    {
      std::lock_guard<std::mutex> lock(mu_);
      meta.swap(metaBuf_);
      ops.swap(opsBuf_);
      mpi.swap(mpiBuf_);
    }
    if (failed_.load() || meta_ < 0) return;
    if (!detail::writeAll(meta_, meta) || !detail::writeAll(ops_, ops) ||
        !detail::writeAll(mpi_, mpi)) {
      std::fprintf(stderr, "commtrace: writing %s.* failed; C++ tracing is off\n", stem_.c_str());
      failed_ = true;
      gEnabled.store(false, std::memory_order_relaxed);
    }
  }

  void addMetaLocked(const std::string& line) {
    metaBuf_ += line;
    metaBuf_ += '\n';
  }

  static float offsetNs(int64_t t, int64_t from) {
    return t ? static_cast<float>(t - from) : std::numeric_limits<float>::quiet_NaN();
  }

  void addRecordLocked(std::string& buf, const Pending& p, int64_t tReturn, int64_t tEnd,
                       uint8_t status) {
    if (failed_.load(std::memory_order_relaxed)) return;  // nothing will write it
    OpRecord rec{p.tEnqueue, offsetNs(tReturn, p.tEnqueue), offsetNs(tEnd, p.tEnqueue),
                 p.seq, p.sig, 0, p.group, status, kFlagSourceCpp};
    unsigned char bytes[kRecordSize];
    detail::encodeRecord(rec, bytes);
    buf.append(reinterpret_cast<const char*>(bytes), kRecordSize);
  }

  // Ops running for more than 1 s (all of them when final) as IN_FLIGHT
  // records, once per state (queued / dequeued).
  void addInFlightLocked(bool final) {
    const int64_t now = nowNs();
    for (auto& kv : pending_) {
      Pending& p = kv.second;
      if (!final && now - p.tEnqueue <= kInFlightAfterNs) continue;
      if (!final && p.inflightDequeue == p.tDequeue) continue;  // nothing new
      addRecordLocked(opsBuf_, p, p.tDequeue, 0, kStatusInFlight);
      p.inflightDequeue = p.tDequeue;
    }
  }

  // Lock order: ioMu_ before mu_. Op paths (enqueue, worker) take mu_ only.
  std::mutex ioMu_;  // the files: open, write
  std::mutex mu_;    // everything below but the files
  std::condition_variable cv_;
  std::thread flusher_;
  bool stop_ = false;
  bool closed_ = false;
  std::atomic<bool> opened_{false};
  std::atomic<bool> failed_{false};
  bool worldWritten_ = false;
  bool warnedGroups_ = false;
  std::string dir_;
  std::string stem_;
  int meta_ = -1;  // file descriptors
  int ops_ = -1;
  int mpi_ = -1;
  std::string metaBuf_;
  std::string opsBuf_;
  std::string mpiBuf_;
  uint32_t nextGroup_ = 0;
  std::map<std::string, int> rankSetCount_;
  std::unordered_map<const void*, PgState> pgs_;
  std::unordered_map<std::string, uint32_t> sigs_;
  std::unordered_map<uint64_t, Pending> pending_;
  std::vector<std::vector<int>> groupRanks_;              // gid -> its global ranks
  std::unordered_map<const void*, uint64_t> works_;       // recv from any source -> its token
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

// A ProcessGroupMPI is destroyed (after its queue drained).
inline void unregisterGroup(const void* pg) {
  if (!enabled()) return;
  if (Tracer* t = Tracer::get()) t->unregisterGroup(pg);
}

inline uint64_t onEnqueue(const void* pg, const OpDesc& desc) {
  Tracer* t = Tracer::get();
  return t ? t->onEnqueue(pg, desc) : 0;
}

// recvAnysource posted its MPI_Irecv and made ``work`` (its AsyncWork).
inline void onAnySourceRecv(const void* pg, const void* work, const OpDesc& desc) {
  if (Tracer* t = Tracer::get()) t->onAnySourceRecv(pg, work, desc);
}

// An AsyncWork's request completed (isCompleted / wait): ``groupSource`` is
// its status's MPI_SOURCE (AsyncWork::sourceRank()).
inline void onWorkDone(const void* work, int groupSource, bool ok) {
  if (!enabled()) return;
  if (Tracer* t = Tracer::get()) t->onWorkDone(work, groupSource, ok);
}

// Wraps an op's run function so that the worker thread stamps the dequeue
// time, the MPI calls (MpiCallScope), the end of the run, and failures.
// token 0 leaves run unchanged.
template <class... Args>
void wrapRun(std::function<void(Args...)>& run, uint64_t token) {
  Tracer* t = Tracer::get();
  if (token == 0 || t == nullptr) return;
  std::function<void(Args...)> inner = std::move(run);
  run = [t, token, inner = std::move(inner)](Args... args) {
    const detail::RunStamps outer = detail::tRun;
    detail::tRun = detail::RunStamps{true, 0, 0};
    t->onDequeue(token);
    try {
      inner(std::forward<Args>(args)...);
    } catch (...) {
      std::exception_ptr eptr = std::current_exception();
      const detail::RunStamps mine = detail::tRun;
      detail::tRun = outer;
      t->onFinish(token, mine, &eptr);
      throw;
    }
    const detail::RunStamps mine = detail::tRun;
    detail::tRun = outer;
    t->onFinish(token, mine);
  };
}

}  // namespace commtrace
