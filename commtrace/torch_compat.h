// Differences between the torch releases commtrace supports (2.4 to 2.15), in
// one place, for every C++ extension that includes torch headers. The Python
// twin is torch_compat.py. Code elsewhere asks for a feature by its name here,
// never for a version; C++17 only (torch's cpp_extension compiles with
// -std=c++17 up to 2.12).
//
// Feature macros are 0 or 1. Where a header can tell (a member that exists or
// not), a trait below detects it instead of a version test. Where it cannot --
// a virtual a class may override only if its base declares it -- the macro
// names the first release whose headers declare it (read from each release's
// ProcessGroup.hpp / Types.hpp / ScalarType.h).
#pragma once

#include <c10/core/Stream.h>
#include <torch/version.h>

#include <type_traits>
#include <utility>

#define CT_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

// ProcessGroup::getGroupName/setGroupName/getGroupDesc/setGroupDesc are virtual.
#define CT_PG_GROUP_NAME_VIRTUAL CT_TORCH_AT_LEAST(2, 6)
// ProcessGroup::shutdown() and abort() are virtual.
#define CT_PG_SHUTDOWN_VIRTUAL CT_TORCH_AT_LEAST(2, 7)
// ProcessGroup::setTimeout(ms) is virtual.
#define CT_PG_SET_TIMEOUT_VIRTUAL CT_TORCH_AT_LEAST(2, 9)
// ProcessGroup::setSequenceNumberForGroup() exists (removed in 2.14; the getter stays).
#define CT_PG_SET_SEQUENCE_NUMBER (!CT_TORCH_AT_LEAST(2, 14))
// ProcessGroup has the single-tensor virtuals all_gather_single(_coalesced),
// reduce_scatter_single(_coalesced) and all_to_all_single, to which torch's
// Python bindings of _allgather_base & co. dispatch.
#define CT_PG_SINGLE_TENSOR_VIRTUALS CT_TORCH_AT_LEAST(2, 13)
// ProcessGroup::splitGroup takes the devices argument (its signature since 2.13;
// 2.9-2.12 had one without it, older releases none).
#define CT_PG_SPLIT_GROUP_DEVICES CT_TORCH_AT_LEAST(2, 13)
// ProcessGroup::gather_single (and its deprecated alias gather_into_tensor, whose
// base implementation calls it) are virtual.
#define CT_PG_GATHER_SINGLE CT_TORCH_AT_LEAST(2, 15)
// at::kFloat8_e8m0fnu exists.
#define CT_HAS_FLOAT8_E8M0FNU CT_TORCH_AT_LEAST(2, 7)

// Where PyProcessGroup.hpp (the pybind trampoline of ProcessGroup/Work) lives.
#if __has_include(<torch/csrc/distributed/c10d/py/PyProcessGroup.hpp>)
#define CT_PY_PROCESS_GROUP_HEADER <torch/csrc/distributed/c10d/py/PyProcessGroup.hpp>
#else
#define CT_PY_PROCESS_GROUP_HEADER <torch/csrc/distributed/c10d/PyProcessGroup.hpp>
#endif

namespace ct {
namespace compat {

// Options::asyncOp: every Options type has it from 2.8; before, only Broadcast,
// Allgather, Scatter and ReduceScatter did. Where an Options type lacks it, the
// caller's intent is unknown and the op is treated as asynchronous (timed by its
// future), which is exact either way.
template <class O, class = void>
struct has_async_op : std::false_type {};
template <class O>
struct has_async_op<O, std::void_t<decltype(std::declval<const O&>().asyncOp)>> : std::true_type {};

template <class O>
inline bool async_op(const O& o) {
  if constexpr (has_async_op<O>::value) {
    return o.asyncOp;
  } else {
    return true;
  }
}

// DeviceGuardImplInterface::isStreamCapturing(stream) (2.12): whether a stream
// is capturing a CUDA graph, asked through c10's device-generic API. Older
// releases have no C++ query outside CUDA headers; their callers ask torch's
// Python binding instead (see Log::current_stream_capturing).
template <class Guard, class = void>
struct has_capture_query : std::false_type {};
template <class Guard>
struct has_capture_query<Guard, std::void_t<decltype(std::declval<const Guard&>().isStreamCapturing(
                                    std::declval<const c10::Stream&>()))>> : std::true_type {};

}  // namespace compat
}  // namespace ct
