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

// An exception as Python names it: "Type: message". torch's bindings raise these c10
// errors as Python exceptions of their own (a non-contiguous all_to_all_single input:
// ValueError), every other c10::Error and std::exception as RuntimeError. One rule for
// every failure the native wrapper records (at the call, at a wait, by a future or a poll).
static inline std::string error_text(std::exception_ptr ex) {
  auto named = [](const char* type, const c10::Error& e) {
    return std::string(type) + ": " + e.what_without_backtrace();
  };
  try {
    std::rethrow_exception(ex);
  } catch (const c10::DistBackendError& e) {
    return named("DistBackendError", e);
  } catch (const c10::DistNetworkError& e) {
    return named("DistNetworkError", e);
  } catch (const c10::DistStoreError& e) {
    return named("DistStoreError", e);
  } catch (const c10::DistError& e) {
    return named("DistError", e);
  } catch (const c10::ValueError& e) {
    return named("ValueError", e);
  } catch (const c10::TypeError& e) {
    return named("TypeError", e);
  } catch (const c10::IndexError& e) {
    return named("IndexError", e);
  } catch (const c10::NotImplementedError& e) {
    return named("NotImplementedError", e);
  } catch (const c10::Error& e) {
    return named("RuntimeError", e);
  } catch (const std::exception& e) {
    return std::string("RuntimeError: ") + e.what();
  } catch (...) {
    return "RuntimeError: unknown error";
  }
}

}  // namespace ct
