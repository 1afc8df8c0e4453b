// Test driver for patches/commtrace_trace.h (built by tests/test_patch.py).
//
// FakePG mimics ProcessGroupMPI: enqueue() pushes a WorkEntry onto a queue
// that one worker thread runs, and the tracing calls are the ones the patch
// adds to ProcessGroupMPI.cpp (registerGroup after creation; enabled() /
// OpDesc / wrapRun(onEnqueue) in enqueue).
//
// usage: commtrace_driver MODE WORLD_RANK
//   basic     a few collectives on the world group and a subgroup, one failure
//   hang      one op completes, the next blocks forever (the test SIGKILLs us)
//   stress    8 threads x 200 ops on three groups
//   names     print op / variant / dtype name mappings as JSON lines
#include "commtrace_trace.h"

#include <condition_variable>
#include <cstdio>
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

class FakePG {
 public:
  FakePG() : worker_([this] { runLoop(); }) {}
  ~FakePG() {
    {
      std::unique_lock<std::mutex> lock(mu_);
      consumeCV_.wait(lock, [&] { return queue_.empty(); });
      stop_ = true;
    }
    produceCV_.notify_all();
    worker_.join();
  }

  static std::unique_ptr<FakePG> create(int worldRank, int groupRank, int size,
                                        std::vector<int> ranks) {
    auto pg = std::make_unique<FakePG>();
    // -- as in the patched createProcessGroupMPI --
    commtrace::registerGroup(pg.get(), worldRank, groupRank, size, ranks);
    return pg;
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
      commtrace::wrapRun(entry->run, commtrace::onEnqueue(this, desc));
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

  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable produceCV_, consumeCV_;
  std::deque<std::tuple<std::unique_ptr<WorkEntry>, std::shared_ptr<std::atomic<int>>>> queue_;
  std::thread worker_;
};

static void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

static std::function<void(std::unique_ptr<WorkEntry>&)> sleeper(int ms) {
  return [ms](std::unique_ptr<WorkEntry>&) { sleepMs(ms); };
}

static void waitFor(const std::shared_ptr<std::atomic<int>>& d) {
  while (d->load() == 0) sleepMs(1);
}

static std::shared_ptr<std::atomic<int>> collective(FakePG& pg, const char* title,
                                                    std::vector<Tensor> in,
                                                    std::vector<Tensor> out, int ms) {
  auto e = std::make_unique<WorkEntry>(&in, &out, sleeper(ms));
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
  waitFor(collective(*world, "mpi:_allgather_base", {Tensor{{3}, "BFloat16", 2}},
                     {Tensor{{12}, "BFloat16", 2}}, 1));
  {  // a failing MPI call
    std::vector<Tensor> in{f44};
    auto e = std::make_unique<WorkEntry>(&in, &in, [](std::unique_ptr<WorkEntry>&) {
      throw std::runtime_error("MPI error in: ProcessGroupMPI.cpp:42, with error code: 15\n\"quoted\"");
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

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "basic";
  int worldRank = argc > 2 ? std::atoi(argv[2]) : 0;
  if (mode == "basic") return modeBasic(worldRank);
  if (mode == "hang") return modeHang(worldRank);
  if (mode == "stress") return modeStress(worldRank);
  if (mode == "names") return modeNames();
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}
