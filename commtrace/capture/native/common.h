// What every part of the native wrapper (traced_pg.cpp) uses: torch's and the
// standard headers, short type names, and the clock of the records.
#pragma once

#include <torch/extension.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include "torch_compat.h"
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

namespace py = pybind11;
using c10d::Work;
using WorkPtr = c10::intrusive_ptr<Work>;
using FuturePtr = c10::intrusive_ptr<c10::ivalue::Future>;
using Tensors = std::vector<at::Tensor>;
using TensorLists = std::vector<std::vector<at::Tensor>>;

namespace ct {

static inline int64_t now_ns() {  // CLOCK_MONOTONIC: the clock of Python's time.monotonic_ns
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

}  // namespace ct
