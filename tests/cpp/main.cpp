// Test driver for patches/commtrace_trace.h (built by tests/test_patch.py).
//
// FakePG mimics ProcessGroupMPI: enqueue() pushes a WorkEntry onto a queue
// that one worker thread runs, and the tracing calls are the ones the patch
// adds to ProcessGroupMPI.cpp (registerGroup after creation, unregisterGroup
// in the destructor; enabled() / OpDesc / wrapRun(onEnqueue) in enqueue; an
// MpiCallScope at the start of MPI_CHECK). An op's run function does what
// ProcessGroupMPI's do: copy inputs, take the global MPI lock, MPI_CHECK(the
// MPI call), copy outputs (still holding the lock).
//
// usage: commtrace_driver MODE WORLD_RANK
//   basic     a few collectives on the world group and a subgroup, one failure
//   hang      one op completes, the next blocks forever (the test SIGKILLs us)
//   stress    8 threads x 200 ops on three groups
//   names     print op / variant / dtype name mappings as JSON lines
//   lockwait  a "blocking recv" holds the global MPI lock 300 ms on the calling
//             thread (as AsyncWork::wait does) while an all_reduce is queued
//   slowio    the ops file is a FIFO nobody reads: the flush thread blocks in
//             write() while 2000 more ops are enqueued and run
//   fork      fork() while the flush thread is blocked in write(); the child
//             uses the group and exits; prints the child's exit status
//   groups    a group destroyed and re-created at the same address; then more
//             groups than a record's uint16 group id can name
//   anysource recvs from any source (ProcessGroupMPI::recvAnysource's AsyncWork)
//             on the world group and a subgroup, between collectives: completed
//             from a sender, failed, and one never completed
//   bench N   (benchmarks/bench_patch.py) N all_reduces with an empty MPI call,
//             from one thread: prints {"enqueue_ns": per op, "total_ns": per op}
//   benchblocked N   the same while the flush thread is blocked in write()
//             (slowio's FIFO; the caller reads the FIFO after "fifo PATH")
#include "commtrace_trace.h"

#include <condition_variable>
#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <deque>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

struct Tensor {  // just what the patch reads from at::Tensor
  std::vector<int64_t> sizes;
  const char* dtype;  // c10::toString(scalar_type())
  uint64_t elemSize;
  uint64_t nbytes() const {
    uint64_t n = elemSize;
    for (auto s : sizes) n *= static_cast<uint64_t>(s);
    return n;
  }
};

// ProcessGroupMPI's MPI_CHECK with the patch's one added line.
#define MPI_CHECK(cmd)                                       \
  do {                                                       \
    commtrace::MpiCallScope commtraceMpiCall;                \
    int mpiStatus = cmd;                                     \
    if (mpiStatus != 0) {                                    \
      throw std::runtime_error(                              \
          "MPI error in: ProcessGroupMPI.cpp:42, with error code: " + \
          std::to_string(mpiStatus) + "\n\"quoted\"");          \
    }                                                        \
  } while (0)

static std::mutex gGlobalMutex;  // ProcessGroupMPI::pgGlobalMutex_

static void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// A stand-in for an MPI function: takes ms, returns status.
static int fakeMpiCall(int ms, int status = 0) {
  sleepMs(ms);
  return status;
}

struct WorkEntry {
  WorkEntry(std::vector<Tensor>* srcPtr, std::vector<Tensor>* dstPtr,
            std::function<void(std::unique_ptr<WorkEntry>&)> fn)
      : src(srcPtr ? *srcPtr : std::vector<Tensor>()),
        dst(dstPtr ? *dstPtr : std::vector<Tensor>()),
        run(std::move(fn)) {}
  std::vector<Tensor> src;
  const std::vector<Tensor> dst;
  std::function<void(std::unique_ptr<WorkEntry>&)> run;
};

// ProcessGroupMPI::AsyncWork as far as the patch touches it: the caller's
// wait() (or isCompleted()) finds its request completed, with the status that
// names the sender (MPI_SOURCE: its rank in the group; sourceRank()).
struct FakeAsyncWork {
  void wait(int mpiSource, int mpiError = 0) {
    std::unique_lock<std::mutex> globalLock(gGlobalMutex);
    MPI_CHECK(fakeMpiCall(2));  // MPI_Wait
    source = mpiSource;
    error = mpiError;
    // -- as in the patched AsyncWork::wait / isCompleted --
    commtrace::onWorkDone(this, source, error == 0);
  }
  int source = -1;  // status_.MPI_SOURCE
  int error = 0;    // status_.MPI_ERROR
};

class FakePG {
 public:
  // key: the address the tracer knows the group by (this, unless a test
  // wants two groups at one address).
  explicit FakePG(const void* key = nullptr)
      : key_(key ? key : this), worker_([this] { runLoop(); }) {}
  ~FakePG() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      consumeCV_.wait(lock, [&] { return queue_.empty(); });
      stop_ = true;
    }
    produceCV_.notify_all();
    worker_.join();
    // -- as in the patched ~ProcessGroupMPI (after destroy()) --
    commtrace::unregisterGroup(key_);
  }

  static std::unique_ptr<FakePG> create(int worldRank, int groupRank, int size,
                                        std::vector<int> ranks, const void* key = nullptr) {
    auto pg = std::make_unique<FakePG>(key);
    // -- as in the patched createProcessGroupMPI --
    commtrace::registerGroup(pg->key_, worldRank, groupRank, size, ranks);
    return pg;
  }

  const void* key() const { return key_; }

  // ProcessGroupMPI::recvAnysource: posts an MPI_Irecv, returns its AsyncWork.
  std::unique_ptr<FakeAsyncWork> recvAnysource(const Tensor& t) {
    auto work = std::make_unique<FakeAsyncWork>();
    // -- as in the patched ProcessGroupMPI::recvAnysource --
    if (commtrace::enabled()) {
      commtrace::OpDesc desc("mpi:recvAnySource");
      desc.addInput(t.sizes, t.dtype, t.nbytes(), "cpu");
      commtrace::onAnySourceRecv(key_, work.get(), desc);
    }
    return work;
  }

  // Returns a future-like flag the caller can wait on.
  std::shared_ptr<std::atomic<int>> enqueue(std::unique_ptr<WorkEntry> entry,
                                            const char* profilingTitle,
                                            const std::vector<Tensor>* inputTensors) {
    auto done = std::make_shared<std::atomic<int>>(0);
    // -- as in the patched ProcessGroupMPI::enqueue --
    if (commtrace::enabled()) {
      commtrace::OpDesc desc(profilingTitle);
      for (const auto& t : inputTensors ? *inputTensors : entry->src) {
        desc.addInput(t.sizes, t.dtype, t.nbytes(), "cpu");
      }
      for (const auto& t : entry->dst) {
        desc.addOutput(t.sizes, t.dtype, t.nbytes(), "cpu");
      }
      commtrace::wrapRun(entry->run, commtrace::onEnqueue(key_, desc));
    }
    std::unique_lock<std::mutex> lock(mu_);
    queue_.emplace_back(std::move(entry), done);
    lock.unlock();
    produceCV_.notify_one();
    return done;
  }

 private:
  void runLoop() {  // ProcessGroupMPI::runLoop, unchanged by the patch
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      if (queue_.empty()) {
        produceCV_.wait(lock);
        continue;
      }
      auto workTuple = std::move(queue_.front());
      queue_.pop_front();
      auto& workEntry = std::get<0>(workTuple);
      auto& done = std::get<1>(workTuple);
      lock.unlock();
      consumeCV_.notify_one();
      try {
        workEntry->run(workEntry);
        done->store(1);
      } catch (...) {
        done->store(2);
      }
      lock.lock();
    }
  }

  const void* key_;
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable produceCV_, consumeCV_;
  std::deque<std::tuple<std::unique_ptr<WorkEntry>, std::shared_ptr<std::atomic<int>>>> queue_;
  std::thread worker_;
};

// An op's run function shaped like ProcessGroupMPI's: copy in, global lock,
// MPI_CHECK(MPI call), copy out under the lock.
static std::function<void(std::unique_ptr<WorkEntry>&)> mpiOp(int mpiMs, int copyInMs = 0,
                                                              int copyOutMs = 0) {
  return [=](std::unique_ptr<WorkEntry>&) {
    sleepMs(copyInMs);
    std::unique_lock<std::mutex> globalLock(gGlobalMutex);
    MPI_CHECK(fakeMpiCall(mpiMs));
    sleepMs(copyOutMs);
  };
}

static void waitFor(const std::shared_ptr<std::atomic<int>>& d) {
  while (d->load() == 0) sleepMs(1);
}

static std::shared_ptr<std::atomic<int>> collective(FakePG& pg, const char* title,
                                                    std::vector<Tensor> in,
                                                    std::vector<Tensor> out, int ms,
                                                    int copyInMs = 0, int copyOutMs = 0) {
  auto e = std::make_unique<WorkEntry>(&in, &out, mpiOp(ms, copyInMs, copyOutMs));
  return pg.enqueue(std::move(e), title, in.empty() ? nullptr : &in);
}

static int modeBasic(int worldRank) {
  auto world = FakePG::create(worldRank, worldRank, 4, {});
  Tensor f44{{4, 4}, "Float", 4};
  // Two all_reduces back to back: the second waits ~40 ms in the queue.
  auto a = collective(*world, "mpi:all_reduce", {f44}, {f44}, 40);
  auto b = collective(*world, "mpi:all_reduce", {f44}, {f44}, 5);
  waitFor(a);
  waitFor(b);
  waitFor(collective(*world, "mpi:broadcast", {Tensor{{10}, "Long", 8}},
                     {Tensor{{10}, "Long", 8}}, 1));
  waitFor(collective(*world, "mpi:barrier", {}, {}, 1));
  // flattens its output: 20 ms copy-in, 10 ms MPI, 30 ms copy-out
  waitFor(collective(*world, "mpi:_allgather_base", {Tensor{{3}, "BFloat16", 2}},
                     {Tensor{{12}, "BFloat16", 2}}, 10, 20, 30));
  {  // a failing MPI call
    std::vector<Tensor> in{f44};
    auto e = std::make_unique<WorkEntry>(&in, &in, [](std::unique_ptr<WorkEntry>&) {
      std::unique_lock<std::mutex> globalLock(gGlobalMutex);
      MPI_CHECK(fakeMpiCall(0, 15));
    });
    auto d = world->enqueue(std::move(e), "mpi:all_reduce", &in);
    waitFor(d);
    if (d->load() != 2) return 3;  // the exception must still reach the caller
  }
  if (worldRank == 0 || worldRank == 2) {
    int groupRank = worldRank == 0 ? 0 : 1;
    auto sub = FakePG::create(worldRank, groupRank, 2, {0, 2});
    waitFor(collective(*sub, "mpi:all_reduce", {f44}, {f44}, 1));
    auto sub2 = FakePG::create(worldRank, groupRank, 2, {0, 2});  // same ranks again
    waitFor(collective(*sub2, "mpi:reduce_scatter", {Tensor{{8}, "Float", 4}},
                       {Tensor{{4}, "Float", 4}}, 1));
  }
  std::printf("enabled=%d\n", commtrace::enabled() ? 1 : 0);
  return 0;
}

static int modeHang(int worldRank) {
  auto world = FakePG::create(worldRank, worldRank, 2, {});
  Tensor f{{16}, "Float", 4};
  waitFor(collective(*world, "mpi:all_reduce", {f}, {f}, 1));
  collective(*world, "mpi:broadcast", {f}, {f}, 1000000);  // blocks "in MPI"
  collective(*world, "mpi:barrier", {}, {}, 1);              // stuck in the queue
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) sleepMs(1000);
}

static int modeStress(int worldRank) {
  auto world = FakePG::create(worldRank, 0, 1, {});
  auto g1 = FakePG::create(worldRank, 0, 1, {worldRank});
  auto g2 = FakePG::create(worldRank, 0, 1, {worldRank});
  FakePG* pgs[3] = {world.get(), g1.get(), g2.get()};
  const char* titles[4] = {"mpi:all_reduce", "mpi:broadcast", "mpi:barrier", "mpi:all_to_all"};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<std::shared_ptr<std::atomic<int>>> ds;
      for (int i = 0; i < 200; ++i) {
        Tensor x{{int64_t(1 + (i % 5))}, (i % 2) ? "Float" : "Double", (i % 2) ? 4u : 8u};
        const char* title = titles[(t + i) % 4];
        bool noTensor = std::string(title) == "mpi:barrier";
        ds.push_back(collective(*pgs[(t + i) % 3], title, noTensor ? std::vector<Tensor>{} : std::vector<Tensor>{x},
                                noTensor ? std::vector<Tensor>{} : std::vector<Tensor>{x}, 0));
      }
      for (auto& d : ds) waitFor(d);
    });
  }
  for (auto& th : threads) th.join();
  return 0;
}

static int modeLockWait(int worldRank) {
  auto world = FakePG::create(worldRank, worldRank, 2, {});
  Tensor f{{256}, "Float", 4};
  waitFor(collective(*world, "mpi:all_reduce", {f}, {f}, 5));  // no contention
  std::atomic<bool> holding{false};
  std::thread recv([&] {  // AsyncWork::wait of a blocking recv: MPI_Wait under the lock
    std::unique_lock<std::mutex> globalLock(gGlobalMutex);
    holding = true;
    MPI_CHECK(fakeMpiCall(300));  // not a queued op: its MpiCallScope stamps nothing
  });
  while (!holding) sleepMs(1);
  waitFor(collective(*world, "mpi:all_reduce", {f}, {f}, 5));
  recv.join();
  return 0;
}

// rank<R>.pid<P>.cpp.ops.bin, where the tracer will write.
static std::string opsPath(const char* dir, int worldRank) {
  return std::string(dir) + "/rank" + std::to_string(worldRank) + ".pid" +
      std::to_string(getpid()) + ".cpp.ops.bin";
}

// Makes the ops file a FIFO with a read end nobody reads (call it before the
// first group is created, which opens the file); returns the read end.
static int makeFifo(const std::string& fifo) {
  if (mkfifo(fifo.c_str(), 0600) != 0) std::exit(5);
  return open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
}

// Runs ops until the flush thread is blocked writing into the full pipe.
static void blockTheFlusher(FakePG& pg, int fd) {
  Tensor f{{4}, "Float", 4};
  const int capacity = fcntl(fd, F_GETPIPE_SZ);
  std::vector<std::shared_ptr<std::atomic<int>>> ds;
  for (int i = 0; i < 2 * capacity / 32 + 100; ++i) {
    ds.push_back(collective(pg, "mpi:all_reduce", {f}, {f}, 0));
  }
  for (auto& d : ds) waitFor(d);
  for (int waited = 0; waited < 20000; waited += 10) {  // until the pipe is full
    int queued = 0;
    ioctl(fd, FIONREAD, &queued);
    if (queued >= capacity) return;
    sleepMs(10);
  }
  std::fprintf(stderr, "the pipe never filled\n");
  std::exit(4);
}

static int modeSlowIo(int worldRank) {
  const char* dir = std::getenv("COMMTRACE_DIR");
  const std::string fifo = opsPath(dir, worldRank);
  const int fd = makeFifo(fifo);
  auto world = FakePG::create(worldRank, worldRank, 1, {});
  blockTheFlusher(*world, fd);
  std::printf("flusher_blocked\n");
  std::fflush(stdout);
  // The flush thread is stuck in write(): ops must still be queued and run.
  Tensor f{{4}, "Float", 4};
  std::vector<std::shared_ptr<std::atomic<int>>> ds;
  int64_t worst = 0;
  for (int i = 0; i < 2000; ++i) {
    const int64_t t0 = commtrace::nowNs();
    ds.push_back(collective(*world, "mpi:broadcast", {f}, {f}, 0));
    worst = std::max(worst, commtrace::nowNs() - t0);
  }
  for (auto& d : ds) waitFor(d);
  std::printf("ops_done worst_enqueue_us=%lld\n", static_cast<long long>(worst / 1000));
  std::printf("fifo %s\n", fifo.c_str());
  std::fflush(stdout);
  return 0;  // exit: the final flush waits for the test to read the FIFO
}

static int modeFork(int worldRank) {
  const char* dir = std::getenv("COMMTRACE_DIR");
  const std::string fifo = opsPath(dir, worldRank);
  const int fd = makeFifo(fifo);
  auto world = FakePG::create(worldRank, worldRank, 1, {});
  blockTheFlusher(*world, fd);
  std::fflush(stdout);
  const pid_t child = fork();
  if (child == 0) {
    // The parent's flush thread is blocked in write() with the tracer's I/O
    // lock held. Use the group (nothing may be recorded or buffered), then
    // exit through atexit (the tracer's close()).
    Tensor f{{4}, "Float", 4};
    for (int i = 0; i < 1000; ++i) collective(*world, "mpi:all_reduce", {f}, {f}, 0);
    commtrace::registerGroup(&child, worldRank, 0, 1, {worldRank});
    // Past the patch's enabled() guard: the tracer itself refuses, lock-free.
    commtrace::OpDesc desc("mpi:all_reduce");
    const uint64_t token = commtrace::onEnqueue(world->key(), desc);
    std::printf("child_enabled=%d child_token=%llu\n", commtrace::enabled() ? 1 : 0,
                static_cast<unsigned long long>(token));
    std::fflush(stdout);
    std::exit(0);
  }
  int status = 0;
  const char* result = "hung";
  for (int waited = 0; waited < 20000; waited += 10) {
    if (waitpid(child, &status, WNOHANG) == child) {
      result = WIFEXITED(status) && WEXITSTATUS(status) == 0 ? "exited" : "failed";
      break;
    }
    sleepMs(10);
  }
  if (std::string(result) == "hung") {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  std::printf("child_pid=%d child=%s\n", static_cast<int>(child), result);
  std::printf("fifo %s\n", fifo.c_str());
  std::fflush(stdout);
  return 0;
}

static int modeGroups(int worldRank) {
  static char key;  // one address for two groups, one after the other
  Tensor f{{4}, "Float", 4};
  for (int round = 0; round < 2; ++round) {
    auto pg = FakePG::create(worldRank, 0, 2, {0, 1}, &key);
    waitFor(collective(*pg, "mpi:all_reduce", {f}, {f}, 0));
    waitFor(collective(*pg, "mpi:all_reduce", {f}, {f}, 0));
  }  // destroyed: unregistered
  {
    FakePG unregistered(&key);  // never registered: its ops are not traced
    waitFor(collective(unregistered, "mpi:barrier", {}, {}, 0));
  }
  // More groups than a uint16 id can name: ids are never reused; the later
  // groups are not traced.
  std::vector<char> keys(commtrace::kMaxGroups + 10);
  for (size_t i = 0; i < keys.size(); ++i) {
    commtrace::registerGroup(&keys[i], worldRank, 0, 1, {worldRank});
    if (i + 1 < keys.size()) commtrace::unregisterGroup(&keys[i]);
  }
  FakePG last(&keys.back());
  waitFor(collective(last, "mpi:barrier", {}, {}, 0));
  return 0;
}

// N all_reduces whose MPI call does nothing: the per-op cost of enqueue (the
// calling thread) and of the whole op (worker included), as JSON.
static void benchOps(FakePG& pg, int n) {
  Tensor f{{256}, "Float", 4};
  std::vector<std::shared_ptr<std::atomic<int>>> ds;
  ds.reserve(static_cast<size_t>(n));
  const int64_t t0 = commtrace::nowNs();
  for (int i = 0; i < n; ++i) ds.push_back(collective(pg, "mpi:all_reduce", {f}, {f}, 0));
  const int64_t t1 = commtrace::nowNs();
  while (ds.back()->load() == 0) std::this_thread::yield();  // one worker: in order
  const int64_t t2 = commtrace::nowNs();
  std::printf("{\"enqueue_ns\": %.1f, \"total_ns\": %.1f}\n", double(t1 - t0) / n, double(t2 - t0) / n);
  std::fflush(stdout);
}

static int modeBench(int worldRank, int n, bool blocked) {
  const char* dir = std::getenv("COMMTRACE_DIR");
  std::string fifo;
  int fd = -1;
  if (blocked) {
    if (dir == nullptr) return 2;
    fifo = opsPath(dir, worldRank);
    fd = makeFifo(fifo);
  }
  auto world = FakePG::create(worldRank, worldRank, 1, {});
  if (blocked) blockTheFlusher(*world, fd);
  benchOps(*world, 1000);  // warm-up (sig interned, allocator warm)
  benchOps(*world, n);
  if (blocked) {
    std::printf("fifo %s\n", fifo.c_str());
    std::fflush(stdout);
  }
  return 0;
}

static int modeNames() {
  const char* titles[] = {"mpi:all_reduce", "mpi:broadcast", "mpi:reduce", "mpi:all_gather",
                          "mpi:_allgather_base", "mpi:gather", "mpi:scatter",
                          "mpi:reduce_scatter", "mpi:_reduce_scatter_base", "mpi:all_to_all",
                          "mpi:barrier", "mpi:send", "mpi:recv", "mpi:recvAnySource", "mpi:new_op"};
  for (const char* t : titles) {
    std::printf("{\"title\":%s,\"op\":%s,\"variant\":%s}\n", commtrace::detail::jsonStr(t).c_str(),
                commtrace::detail::jsonStr(commtrace::opName(t)).c_str(),
                commtrace::detail::jsonStr(commtrace::variantName(t)).c_str());
  }
  const char* dtypes[] = {"Float", "Double", "Half", "BFloat16", "Long", "Int", "Short",
                          "Char", "Byte", "Bool", "ComplexFloat", "ComplexDouble", "UInt16",
                          "Float8_e4m3fn", "SomethingNew"};
  for (const char* d : dtypes) {
    std::printf("{\"c10\":%s,\"dtype\":%s}\n", commtrace::detail::jsonStr(d).c_str(),
                commtrace::detail::jsonStr(commtrace::dtypeName(d)).c_str());
  }
  return 0;
}

static int modeAnySource(int worldRank) {
  auto world = FakePG::create(worldRank, worldRank, 4, {});
  auto sub = FakePG::create(worldRank, 0, 3, {worldRank, 2, 3});
  Tensor f8{{8}, "Float", 4};
  waitFor(collective(*world, "mpi:all_reduce", {f8}, {f8}, 1));
  world->recvAnysource(f8)->wait(2);             // from global rank 2
  waitFor(collective(*world, "mpi:all_reduce", {f8}, {f8}, 1));
  sub->recvAnysource(f8)->wait(2);               // group rank 2: global rank 3
  sub->recvAnysource(f8)->wait(1, 15);           // failed (MPI_ERR_TRUNCATE)
  waitFor(collective(*sub, "mpi:barrier", {}, {}, 1));
  FakeAsyncWork* never = world->recvAnysource(f8).release();  // in flight at exit
  (void)never;
  return 0;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "basic";
  int worldRank = argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "basic") return modeBasic(worldRank);
  if (mode == "hang") return modeHang(worldRank);
  if (mode == "stress") return modeStress(worldRank);
  if (mode == "names") return modeNames();
  if (mode == "lockwait") return modeLockWait(worldRank);
  if (mode == "slowio") return modeSlowIo(worldRank);
  if (mode == "fork") return modeFork(worldRank);
  if (mode == "groups") return modeGroups(worldRank);
  if (mode == "anysource") return modeAnySource(worldRank);
  if (mode == "bench" || mode == "benchblocked") {
    return modeBench(worldRank, argc > 3 ? std::atoi(argv[3]) : 20000, mode == "benchblocked");
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
