// Fatal signals end the trace before the process dies (capture/fatal_signals.py says when it
// is armed; docs/faults.md what it guarantees). Plain CPython API: no torch.
//
// The handler does only what a signal handler may: it puts the disposition it replaced back,
// writes the signal's number to a pipe that a Python thread reads (that thread closes the
// trace and answers on a second pipe), waits for the answer at most a bounded time, and lets
// the signal go on to the disposition it replaced: a signal that was sent (abort, raise,
// kill) is sent again, a fault happens again when its instruction runs again. So the
// process dies as it would have (same signal, same core dump; faulthandler's traceback,
// a program's own handler), a bounded time later. A crashing thread that holds the GIL
// lends it to the closing thread meanwhile (os.abort, a fault in C code called with the
// GIL held), and takes it back only if the close answered.
#include <Python.h>

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

namespace {

constexpr int kSignals = 65;
struct sigaction g_replaced[kSignals];  // what each of ours replaced (set once per process)
bool g_ours[kSignals];                  // inherited by a forked child, as the dispositions are
std::atomic<int> g_wake{-1}, g_answer{-1}, g_wait_ms{0};
std::atomic<pid_t> g_pid{0};            // the process the pipes are for (a forked child: not it)
std::atomic<bool> g_used{false};        // one close per process, on the first fatal signal

bool python_usable() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsInitialized() && !Py_IsFinalizing();
#else
  return Py_IsInitialized() && !_Py_IsFinalizing();
#endif
}

// This thread holds the GIL: its own thread state is the one running.
bool holds_gil() {
  PyThreadState* mine = PyGILState_GetThisThreadState();
#if PY_VERSION_HEX >= 0x030D0000
  return mine != nullptr && mine == PyThreadState_GetUnchecked();
#else
  return mine != nullptr && mine == _PyThreadState_UncheckedGet();
#endif
}

long long now_ms() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

// Whether ``fd`` became readable within ``ms`` (poll, clock_gettime: async-signal-safe).
bool answered(int fd, int ms) {
  long long deadline = now_ms() + ms;
  for (;;) {
    long long left = deadline - now_ms();
    if (left < 0) return false;
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, int(left));
    if (r > 0) return true;
    if (r == 0 || errno != EINTR) return false;
  }
}

void on_fatal(int sig, siginfo_t* info, void*) {
  int saved_errno = errno;
  sigaction(sig, &g_replaced[sig], nullptr);  // from here on the signal is theirs again
  int wake = g_wake.load(), answer = g_answer.load();
  if (g_pid.load() == getpid() && wake >= 0 && python_usable() && !g_used.exchange(true)) {
    PyThreadState* lent = holds_gil() ? PyEval_SaveThread() : nullptr;
    unsigned char b = (unsigned char)sig;
    bool closed = write(wake, &b, 1) == 1 && answered(answer, g_wait_ms.load());
    if (lent != nullptr && closed) PyEval_RestoreThread(lent);  // not after a timeout: it may never come
  }
  // Sent (si_code <= 0: abort, raise, kill): again, pending until this handler returns.
  // A fault (si_code > 0) recurs by itself, with its own siginfo, when the instruction runs again.
  if (info == nullptr || info->si_code <= 0) raise(sig);
  errno = saved_errno;
}

// arm(wake_fd, answer_fd, wait_ms, signals): the handler writes to wake_fd and waits for
// answer_fd; installed (once per process, inherited by forked children) for each signal not
// ignored. Returns the signals it handles.
PyObject* arm(PyObject*, PyObject* args) {
  int wake, answer, wait_ms;
  PyObject* signals;
  if (!PyArg_ParseTuple(args, "iiiO", &wake, &answer, &wait_ms, &signals)) return nullptr;
  PyObject* seq = PySequence_Fast(signals, "signals must be a sequence");
  if (seq == nullptr) return nullptr;
  PyObject* out = PyList_New(0);
  for (Py_ssize_t i = 0; out != nullptr && i < PySequence_Fast_GET_SIZE(seq); ++i) {
    long sig = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if (sig <= 0 || sig >= kSignals) {
      if (!PyErr_Occurred()) PyErr_Format(PyExc_ValueError, "bad signal number %ld", sig);
      Py_CLEAR(out);
      break;
    }
    if (!g_ours[sig]) {
      struct sigaction now;
      if (sigaction(int(sig), nullptr, &now) != 0 || now.sa_handler == SIG_IGN) continue;
      struct sigaction act {};
      act.sa_sigaction = on_fatal;
      act.sa_flags = SA_SIGINFO | SA_ONSTACK;  // faulthandler's alternate stack, if any: a stack overflow
      sigemptyset(&act.sa_mask);
      g_replaced[sig] = now;
      if (sigaction(int(sig), &act, nullptr) != 0) continue;
      g_ours[sig] = true;
    }
    PyObject* n = PyLong_FromLong(sig);
    if (n == nullptr || PyList_Append(out, n) != 0) Py_CLEAR(out);
    Py_XDECREF(n);
  }
  Py_DECREF(seq);
  if (out == nullptr) return nullptr;
  g_pid.store(0);  // no handler uses the pipes while they change
  g_wake.store(wake);
  g_answer.store(answer);
  g_wait_ms.store(wait_ms);
  g_used.store(false);
  g_pid.store(getpid());
  return out;
}

PyMethodDef methods[] = {
    {"arm", arm, METH_VARARGS, "arm(wake_fd, answer_fd, wait_ms, signals) -> the signals handled"},
    {nullptr, nullptr, 0, nullptr},
};

#define CT_STR2(x) #x
#define CT_STR(x) CT_STR2(x)
#define CT_CAT2(a, b) a##b
#define CT_CAT(a, b) CT_CAT2(a, b)

PyModuleDef module = {PyModuleDef_HEAD_INIT, CT_STR(TORCH_EXTENSION_NAME), "commtrace's fatal-signal handler", -1,
                      methods};

}  // namespace

PyMODINIT_FUNC CT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
