// Reading the caller's frame: the interpreter's own frame records where the
// CPython version allows it (see Log::user_code).
#pragma once
#include "common.h"

// The interpreter's frame records (CPython 3.11-3.13 internals; the build is
// per Python version). Elsewhere, frame objects through the public API.
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030E0000 && !defined(COMMTRACE_PUBLIC_FRAMES_ONLY)
#define CT_INTERPRETER_FRAMES 1
#define Py_BUILD_CORE 1
#include <internal/pycore_frame.h>
#undef Py_BUILD_CORE
static inline _PyInterpreterFrame* current_iframe() {
#if PY_VERSION_HEX >= 0x030D0000
  return PyThreadState_Get()->current_frame;
#else
  return PyThreadState_Get()->cframe->current_frame;
#endif
}
static inline PyCodeObject* iframe_code(_PyInterpreterFrame* f) {
#if PY_VERSION_HEX >= 0x030D0000
  PyObject* x = f->f_executable;  // not always a code object in 3.13
  return x != nullptr && PyCode_Check(x) ? reinterpret_cast<PyCodeObject*>(x) : nullptr;
#else
  return f->f_code;
#endif
}
#else
#define CT_INTERPRETER_FRAMES 0
#endif
