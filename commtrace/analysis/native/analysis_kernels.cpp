// commtrace's analysis kernels: compiled twins of the numpy code of analysis/intervals.py
// (interval sets), steps.py / step_table.py (ops located in steps, sums per step, DDP
// gradient tails), partitioned/partition_map.py (per-instance extremes, first-seen codes) and
// partitioned/merge.py (order statistics: exact percentiles and per-rank medians).
//
// Why: the per-rank step figures and the per-partition instance tables were a dozen numpy
// passes per operation (sorts, searchsorted, repeat, ufunc.at, gathers over 100,000-op
// arrays bigger than L2); each operation here is one pass over sorted boundaries or rows.
// The numpy code stays the reference and the fallback (COMMTRACE_NATIVE=0, or nothing
// compiled): every function here must give exactly what its numpy twin gives
// (tests/analysis/test_analysis_kernels.py).
//
// Plain CPython C API over numpy buffers (the buffer protocol): no torch or pybind11
// headers (compile time), no numpy C API. Output arrays are allocated by the caller with
// room for the largest possible result; set operations return how many intervals they
// wrote. A *set* is as in intervals.py: sorted by start, disjoint, non-touching, no empty
// interval.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

namespace {

using i64 = int64_t;

// One buffer argument of T (int64, int32 or int8 numpy arrays); released when it goes out of scope.
template <typename T>
struct Array {
  Py_buffer view{};
  bool held = false;
  T* p = nullptr;
  Py_ssize_t n = 0;
  ~Array() {
    if (held) PyBuffer_Release(&view);
  }
  static bool format_ok(const char* f) {
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    if (std::is_floating_point<T>::value) return strcmp(f, sizeof(T) == 8 ? "d" : "f") == 0;
    if (std::is_same<T, bool>::value) return strcmp(f, "?") == 0;
    if (sizeof(T) == 8) return strcmp(f, "q") == 0 || strcmp(f, "l") == 0;
    if (sizeof(T) == 4) return strcmp(f, "i") == 0;
    return strcmp(f, std::is_signed<T>::value ? "b" : "B") == 0;
  }
  bool get(PyObject* obj, bool writable, const char* what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &view, flags) != 0) return false;
    held = true;
    if (view.itemsize != sizeof(T) || !format_ok(view.format ? view.format : "B") || view.ndim > 1) {
      PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-d %s%d array", what,
                   std::is_floating_point<T>::value ? "float" : "int", int(8 * sizeof(T)));
      return false;
    }
    p = static_cast<T*>(view.buf);
    n = view.len / Py_ssize_t(sizeof(T));
    return true;
  }
};
using Buf = Array<i64>;

// One buffer argument of signed integers of any width (int8, int16, int32 or int64): a narrow
// column read as it is held, without an int64 copy of it.
struct Ints {
  Py_buffer view{};
  bool held = false;
  const char* p = nullptr;
  Py_ssize_t n = 0;
  ~Ints() {
    if (held) PyBuffer_Release(&view);
  }
  bool get(PyObject* obj, const char* what) {
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) != 0) return false;
    held = true;
    const char* f = view.format ? view.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') ++f;
    const Py_ssize_t k = view.itemsize;
    const bool ok = (k == 1 && !strcmp(f, "b")) || (k == 2 && !strcmp(f, "h")) || (k == 4 && !strcmp(f, "i")) ||
                    (k == 8 && (!strcmp(f, "q") || !strcmp(f, "l")));
    if (!ok || view.ndim > 1) {
      PyErr_Format(PyExc_TypeError, "%s: expected a contiguous 1-d signed integer array", what);
      return false;
    }
    p = static_cast<const char*>(view.buf);
    n = view.len / k;
    return true;
  }
  i64 operator[](Py_ssize_t i) const {
    switch (view.itemsize) {
      case 1: return reinterpret_cast<const int8_t*>(p)[i];
      case 2: return reinterpret_cast<const int16_t*>(p)[i];
      case 4: return reinterpret_cast<const int32_t*>(p)[i];
      default: return reinterpret_cast<const i64*>(p)[i];
    }
  }
};

template <typename A, typename B>
bool same_length(const A& a, const B& b, const char* what) {
  if (a.n == b.n) return true;
  PyErr_Format(PyExc_ValueError, "%s: starts and ends differ in length", what);
  return false;
}

template <typename A>
bool room(const A& out, Py_ssize_t need, const char* what) {
  if (out.n >= need) return true;
  PyErr_Format(PyExc_ValueError, "%s: output arrays too small", what);
  return false;
}

// Appends [s, e) to a set being built in (os, oe, m), merging it into the last
// interval when it overlaps or touches it. Intervals arrive sorted by start.
struct SetBuilder {
  i64* os;
  i64* oe;
  Py_ssize_t m = 0;
  void add(i64 s, i64 e) {
    if (e <= s) return;                       // empty intervals are dropped
    if (m > 0 && s <= oe[m - 1]) {
      if (e > oe[m - 1]) oe[m - 1] = e;
      return;
    }
    os[m] = s;
    oe[m] = e;
    ++m;
  }
};

// A walk over a sorted array for values that mostly grow: where() is numpy's
// searchsorted (side "right" when Right, else "left") of one value, found by
// galloping forward from the previous answer (a value or two of work for dense
// growing values), or by binary search below it when a value falls back.
template <bool Right>
struct Walk {
  const i64* s;
  Py_ssize_t n;
  Py_ssize_t k = 0;
  i64 last = 0;
  bool started = false;
  Walk(const i64* s_, Py_ssize_t n_) : s(s_), n(n_) {}
  void restart() {
    k = 0;
    started = false;
  }
  static bool before(i64 x, i64 t) { return Right ? x <= t : x < t; }
  static const i64* bound(const i64* b, const i64* e, i64 t) {
    return Right ? std::upper_bound(b, e, t) : std::lower_bound(b, e, t);
  }
  Py_ssize_t where(i64 t) {
    if (started && t < last) {
      k = bound(s, s + k, t) - s;
    } else if (k < n && before(s[k], t)) {
      Py_ssize_t lo = k, step = 1, hi = k + 1;        // s[lo] lies before t; the answer is in (lo, hi]
      while (hi < n && before(s[hi], t)) {
        lo = hi;
        step <<= 1;
        hi = lo + step;
      }
      k = bound(s + lo + 1, s + std::min(hi, n), t) - s;
    }
    started = true;
    last = t;
    return k;
  }
};

// Adds intervals given in any order to a set: sorted by start first (intervals with
// equal starts always end up in one piece, so any order of ties gives the same set).
void add_unsorted(SetBuilder& out, std::initializer_list<std::pair<const Buf*, const Buf*>> lists) {
  std::vector<std::pair<i64, i64>> v;
  for (const auto& [s, e] : lists)
    for (Py_ssize_t i = 0; i < s->n; ++i)
      if (e->p[i] > s->p[i]) v.emplace_back(s->p[i], e->p[i]);
  std::sort(v.begin(), v.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  for (const auto& x : v) out.add(x.first, x.second);
}

bool sorted(const Buf& s) {
  for (Py_ssize_t i = 1; i < s.n; ++i)
    if (s.p[i] < s.p[i - 1]) return false;
  return true;
}

// union(starts, ends, out_starts, out_ends) -> count: the set covering [starts[i], ends[i]).
// Sorted starts (the usual case: ops in start order) are one pass; others are sorted first.
PyObject* union_(PyObject*, PyObject* args) {
  PyObject *s_, *e_, *os_, *oe_;
  if (!PyArg_ParseTuple(args, "OOOO", &s_, &e_, &os_, &oe_)) return nullptr;
  Buf s, e, os, oe;
  if (!s.get(s_, false, "union") || !e.get(e_, false, "union") || !os.get(os_, true, "union") ||
      !oe.get(oe_, true, "union") || !same_length(s, e, "union") || !room(os, s.n, "union") ||
      !room(oe, s.n, "union"))
    return nullptr;
  SetBuilder out{os.p, oe.p};
  Py_BEGIN_ALLOW_THREADS
  if (sorted(s)) {
    for (Py_ssize_t i = 0; i < s.n; ++i) out.add(s.p[i], e.p[i]);
  } else {
    add_unsorted(out, {{&s, &e}});
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromSsize_t(out.m);
}

// union2(a_starts, a_ends, b_starts, b_ends, out_starts, out_ends) -> count: the set covering
// both lists. Each sorted by start (ends in any order): one merge, no sort; else sorted first.
PyObject* union2(PyObject*, PyObject* args) {
  PyObject *as_, *ae_, *bs_, *be_, *os_, *oe_;
  if (!PyArg_ParseTuple(args, "OOOOOO", &as_, &ae_, &bs_, &be_, &os_, &oe_)) return nullptr;
  Buf as, ae, bs, be, os, oe;
  if (!as.get(as_, false, "union2") || !ae.get(ae_, false, "union2") || !bs.get(bs_, false, "union2") ||
      !be.get(be_, false, "union2") || !os.get(os_, true, "union2") || !oe.get(oe_, true, "union2") ||
      !same_length(as, ae, "union2") || !same_length(bs, be, "union2") || !room(os, as.n + bs.n, "union2") ||
      !room(oe, as.n + bs.n, "union2"))
    return nullptr;
  SetBuilder out{os.p, oe.p};
  Py_BEGIN_ALLOW_THREADS
  if (sorted(as) && sorted(bs)) {
    Py_ssize_t i = 0, j = 0;
    while (i < as.n || j < bs.n) {
      if (j >= bs.n || (i < as.n && as.p[i] <= bs.p[j])) {
        out.add(as.p[i], ae.p[i]);
        ++i;
      } else {
        out.add(bs.p[j], be.p[j]);
        ++j;
      }
    }
  } else {
    add_unsorted(out, {{&as, &ae}, {&bs, &be}});
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromSsize_t(out.m);
}

// The four buffers of two sets and the two of the result, checked.
struct TwoSets {
  Buf as, ae, bs, be, os, oe;
  // Both results have at most len(a) + len(b) pieces.
  bool parse(PyObject* args, const char* what) {
    PyObject *as_, *ae_, *bs_, *be_, *os_, *oe_;
    if (!PyArg_ParseTuple(args, "OOOOOO", &as_, &ae_, &bs_, &be_, &os_, &oe_)) return false;
    return as.get(as_, false, what) && ae.get(ae_, false, what) && bs.get(bs_, false, what) &&
           be.get(be_, false, what) && os.get(os_, true, what) && oe.get(oe_, true, what) &&
           same_length(as, ae, what) && same_length(bs, be, what) && room(os, as.n + bs.n, what) &&
           room(oe, as.n + bs.n, what);
  }
};

// intersect(a..., b..., out...) -> count: a ∩ b of two sets, one merge.
PyObject* intersect(PyObject*, PyObject* args) {
  TwoSets t;
  if (!t.parse(args, "intersect")) return nullptr;
  Py_ssize_t m = 0;
  Py_BEGIN_ALLOW_THREADS
  Py_ssize_t i = 0, j = 0;
  const i64 *as = t.as.p, *ae = t.ae.p, *bs = t.bs.p, *be = t.be.p;
  while (i < t.as.n && j < t.bs.n) {
    const i64 lo = std::max(as[i], bs[j]), hi = std::min(ae[i], be[j]);
    if (lo < hi) {
      t.os.p[m] = lo;
      t.oe.p[m] = hi;
      ++m;
    }
    if (ae[i] < be[j]) ++i; else ++j;
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromSsize_t(m);
}

// subtract(a..., b..., out...) -> count: a minus b of two sets, one merge.
PyObject* subtract(PyObject*, PyObject* args) {
  TwoSets t;
  if (!t.parse(args, "subtract")) return nullptr;
  Py_ssize_t m = 0;
  Py_BEGIN_ALLOW_THREADS
  Py_ssize_t j = 0;
  const i64 *bs = t.bs.p, *be = t.be.p;
  const Py_ssize_t nb = t.bs.n;
  for (Py_ssize_t i = 0; i < t.as.n; ++i) {
    i64 cur = t.as.p[i];
    const i64 e = t.ae.p[i];
    while (j < nb && be[j] <= cur) ++j;          // b's pieces ending before this one's rest
    while (j < nb && bs[j] < e) {                 // b's pieces cutting into it
      if (bs[j] > cur) {
        t.os.p[m] = cur;
        t.oe.p[m] = bs[j];
        ++m;
      }
      cur = be[j];
      if (cur >= e) break;                        // the piece may cut the next one of a too
      ++j;
    }
    if (cur < e) {
      t.os.p[m] = cur;
      t.oe.p[m] = e;
      ++m;
    }
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromSsize_t(m);
}

// How much of a set lies before each time of a sequence (Walk: times in order cost
// one pass over the set).
struct Coverage {
  const i64* e;
  std::vector<i64> cum;   // cum[k]: length of the first k pieces
  Walk<true> walk;        // k: the pieces starting at or before t
  Coverage(const i64* s_, const i64* e_, Py_ssize_t n_) : e(e_), cum(n_ + 1, 0), walk(s_, n_) {
    for (Py_ssize_t i = 0; i < n_; ++i) cum[i + 1] = cum[i] + (e[i] - s_[i]);
  }
  i64 before(i64 t) {
    const Py_ssize_t k = walk.where(t);
    if (k == 0) return 0;
    return cum[k] - std::max<i64>(e[k - 1] - t, 0);
  }
};

// covered_before(starts, ends, times, out): out[i] = length of the set before times[i].
PyObject* covered_before(PyObject*, PyObject* args) {
  PyObject *s_, *e_, *t_, *o_;
  if (!PyArg_ParseTuple(args, "OOOO", &s_, &e_, &t_, &o_)) return nullptr;
  Buf s, e, t, o;
  if (!s.get(s_, false, "covered_before") || !e.get(e_, false, "covered_before") ||
      !t.get(t_, false, "covered_before") || !o.get(o_, true, "covered_before") ||
      !same_length(s, e, "covered_before") || !room(o, t.n, "covered_before"))
    return nullptr;
  Py_BEGIN_ALLOW_THREADS
  Coverage c(s.p, e.p, s.n);
  for (Py_ssize_t i = 0; i < t.n; ++i) o.p[i] = c.before(t.p[i]);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// length_within(starts, ends, lo, hi, out): out[i] = length of the set inside
// [lo[i], max(hi[i], lo[i])). Two walks, one per end, each in order for sorted windows.
PyObject* length_within(PyObject*, PyObject* args) {
  PyObject *s_, *e_, *lo_, *hi_, *o_;
  if (!PyArg_ParseTuple(args, "OOOOO", &s_, &e_, &lo_, &hi_, &o_)) return nullptr;
  Buf s, e, lo, hi, o;
  if (!s.get(s_, false, "length_within") || !e.get(e_, false, "length_within") ||
      !lo.get(lo_, false, "length_within") || !hi.get(hi_, false, "length_within") ||
      !o.get(o_, true, "length_within") || !same_length(s, e, "length_within") ||
      !same_length(lo, hi, "length_within") || !room(o, lo.n, "length_within"))
    return nullptr;
  Py_BEGIN_ALLOW_THREADS
  Coverage c(s.p, e.p, s.n);
  for (Py_ssize_t i = 0; i < lo.n; ++i) o.p[i] = -c.before(lo.p[i]);
  c.walk.restart();
  for (Py_ssize_t i = 0; i < lo.n; ++i) o.p[i] += c.before(std::max(hi.p[i], lo.p[i]));
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// searchsorted(sorted, values, out, right): numpy's searchsorted (side "right" when right,
// else "left") for values that mostly grow (op starts in order): one walk, a binary
// search only where a value falls below the previous one.
PyObject* searchsorted(PyObject*, PyObject* args) {
  PyObject *a_, *v_, *o_;
  int right;
  if (!PyArg_ParseTuple(args, "OOOp", &a_, &v_, &o_, &right)) return nullptr;
  Buf a, v, o;
  if (!a.get(a_, false, "searchsorted") || !v.get(v_, false, "searchsorted") || !o.get(o_, true, "searchsorted") ||
      !room(o, v.n, "searchsorted"))
    return nullptr;
  Py_BEGIN_ALLOW_THREADS
  if (right) {
    Walk<true> w(a.p, a.n);
    for (Py_ssize_t i = 0; i < v.n; ++i) o.p[i] = w.where(v.p[i]);
  } else {
    Walk<false> w(a.p, a.n);
    for (Py_ssize_t i = 0; i < v.n; ++i) o.p[i] = w.where(v.p[i]);
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// locate(begins, ends, numbers, times, step_out, where_out, in_step, before, between, after):
// steps.locate_ops for one rank. begins: its steps' begins (sorted), ends, numbers (int64);
// times: its ops' starts; per op the number of the last step beginning at or before it
// when the op starts inside it (else 0; int32) and where it lies (int8; the codes given).
PyObject* locate(PyObject*, PyObject* args) {
  PyObject *b_, *e_, *num_, *t_, *step_, *where_;
  int in_step, before, between, after;
  if (!PyArg_ParseTuple(args, "OOOOOOiiii", &b_, &e_, &num_, &t_, &step_, &where_, &in_step, &before, &between,
                        &after))
    return nullptr;
  Buf b, e, num, t;
  Array<int32_t> step;
  Array<int8_t> where;
  if (!b.get(b_, false, "locate") || !e.get(e_, false, "locate") || !num.get(num_, false, "locate") ||
      !t.get(t_, false, "locate") || !step.get(step_, true, "locate") || !where.get(where_, true, "locate") ||
      !same_length(b, e, "locate") || !same_length(b, num, "locate") || !room(step, t.n, "locate") ||
      !room(where, t.n, "locate"))
    return nullptr;
  if (b.n == 0) return PyErr_Format(PyExc_ValueError, "locate: no steps");
  Py_BEGIN_ALLOW_THREADS
  Walk<true> w(b.p, b.n);
  const i64 last_end = e.p[e.n - 1];
  for (Py_ssize_t i = 0; i < t.n; ++i) {
    const i64 x = t.p[i];
    const Py_ssize_t k = w.where(x) - 1;
    const bool inside = k >= 0 && x <= e.p[k];
    step.p[i] = inside ? int32_t(num.p[k]) : 0;
    where.p[i] = int8_t(inside ? in_step : k < 0 ? before : x > last_end ? after : between);
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// last_in_window(begins, ends, times, out): per window i (begins sorted) the latest of
// ``times`` inside [begins[i], ends[i]] of the last window beginning at or before it (out
// keeps its value where none): step_table's DDP gradient tails, without np.maximum.at.
PyObject* last_in_window(PyObject*, PyObject* args) {
  PyObject *b_, *e_, *t_, *o_;
  if (!PyArg_ParseTuple(args, "OOOO", &b_, &e_, &t_, &o_)) return nullptr;
  Buf b, e, t, o;
  if (!b.get(b_, false, "last_in_window") || !e.get(e_, false, "last_in_window") ||
      !t.get(t_, false, "last_in_window") || !o.get(o_, true, "last_in_window") ||
      !same_length(b, e, "last_in_window") || !same_length(b, o, "last_in_window"))
    return nullptr;
  Py_BEGIN_ALLOW_THREADS
  Walk<true> w(b.p, b.n);
  for (Py_ssize_t i = 0; i < t.n; ++i) {
    const i64 x = t.p[i];
    const Py_ssize_t k = w.where(x) - 1;
    if (k >= 0 && x <= e.p[k] && x > o.p[k]) o.p[k] = x;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// sums_by_row(row_of, codes, weights, counts, sums): for each i with r = row_of[codes[i]] >= 0,
// counts[r] += 1 and sums[r] += weights[i] (float64, added in index order as np.bincount does).
PyObject* sums_by_row(PyObject*, PyObject* args) {
  PyObject *lut_, *c_, *w_, *n_, *s_;
  if (!PyArg_ParseTuple(args, "OOOOO", &lut_, &c_, &w_, &n_, &s_)) return nullptr;
  Buf lut, n;
  Array<int32_t> c;
  Buf w;
  Array<double> s;
  if (!lut.get(lut_, false, "sums_by_row") || !c.get(c_, false, "sums_by_row") || !w.get(w_, false, "sums_by_row") ||
      !n.get(n_, true, "sums_by_row") || !s.get(s_, true, "sums_by_row") || !same_length(c, w, "sums_by_row") ||
      !same_length(n, s, "sums_by_row"))
    return nullptr;
  for (Py_ssize_t i = 0; i < c.n; ++i)
    if (c.p[i] < 0 || c.p[i] >= lut.n) return PyErr_Format(PyExc_IndexError, "sums_by_row: code out of range");
  for (Py_ssize_t i = 0; i < lut.n; ++i)
    if (lut.p[i] >= n.n) return PyErr_Format(PyExc_IndexError, "sums_by_row: row out of range");
  Py_BEGIN_ALLOW_THREADS
  for (Py_ssize_t i = 0; i < c.n; ++i) {
    const i64 r = lut.p[c.p[i]];
    if (r < 0) continue;
    n.p[r] += 1;
    s.p[r] += double(w.p[i]);
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// instance_extremes(inst, t, rank, dur, size, end, first, last, slowest, size_max, end_max):
// per instance k (inst[i] in [0, len(first))) its first row (earliest t, then lowest rank;
// the latest row among equals, as numpy's fancy assignment leaves it), its last row (latest
// t, then highest rank; the latest row among equals), and folded into what the outputs hold:
// the largest duration ignoring NaN (np.fmax.at), the largest size and end (np.maximum.at).
PyObject* instance_extremes(PyObject*, PyObject* args) {
  PyObject *inst_, *t_, *r_, *d_, *s_, *e_, *first_, *last_, *slow_, *smax_, *emax_;
  if (!PyArg_ParseTuple(args, "OOOOOOOOOOO", &inst_, &t_, &r_, &d_, &s_, &e_, &first_, &last_, &slow_, &smax_,
                        &emax_))
    return nullptr;
  const char* w = "instance_extremes";
  Buf inst, t, r, s, e, first, last, smax, emax;
  Array<double> d, slow;
  if (!inst.get(inst_, false, w) || !t.get(t_, false, w) || !r.get(r_, false, w) || !d.get(d_, false, w) ||
      !s.get(s_, false, w) || !e.get(e_, false, w) || !first.get(first_, true, w) || !last.get(last_, true, w) ||
      !slow.get(slow_, true, w) || !smax.get(smax_, true, w) || !emax.get(emax_, true, w) ||
      !same_length(inst, t, w) || !same_length(inst, r, w) || !same_length(inst, d, w) ||
      !same_length(inst, s, w) || !same_length(inst, e, w) || !same_length(first, last, w) ||
      !same_length(first, slow, w) || !same_length(first, smax, w) || !same_length(first, emax, w))
    return nullptr;
  const Py_ssize_t k = first.n;
  for (Py_ssize_t i = 0; i < inst.n; ++i)
    if (inst.p[i] < 0 || inst.p[i] >= k) return PyErr_Format(PyExc_IndexError, "%s: instance out of range", w);
  Py_BEGIN_ALLOW_THREADS
  std::vector<i64> ft(k, 0), fr(k, 0), lt(k, 0), lr(k, 0);
  std::vector<char> seen(k, 0);
  for (Py_ssize_t i = 0; i < inst.n; ++i) {
    const i64 j = inst.p[i], x = t.p[i], y = r.p[i];
    if (!seen[j]) {
      seen[j] = 1;
      ft[j] = lt[j] = x;
      fr[j] = lr[j] = y;
      first.p[j] = last.p[j] = i;
    } else {
      if (x < ft[j] || (x == ft[j] && y <= fr[j])) { ft[j] = x; fr[j] = y; first.p[j] = i; }
      if (x > lt[j] || (x == lt[j] && y >= lr[j])) { lt[j] = x; lr[j] = y; last.p[j] = i; }
    }
    const double v = d.p[i];
    if (!std::isnan(v) && (std::isnan(slow.p[j]) || v > slow.p[j])) slow.p[j] = v;
    if (s.p[i] > smax.p[j]) smax.p[j] = s.p[i];
    if (e.p[i] > emax.p[j]) emax.p[j] = e.p[i];
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// step_bounds(key, kind, b, e, lo, span, keys_out, begin_out, end_out, micro_out) -> count:
// steps.find_steps' per-step figures from the compute spans. ``kind`` per span: 1 an
// optimizer span of a step (step > 0), 2 a backward pass, 3 a forward with autograd on,
// 0 anything else; ``key`` = (process, step) in [lo, lo + span). The steps are the keys
// of optimizer spans, in key order; per step: the first begin of its optimizer, backward
// and training-forward spans, the last end of its optimizer spans, its backward passes.
PyObject* step_bounds(PyObject*, PyObject* args) {
  PyObject *k_, *kd_, *b_, *e_, *ko_, *bo_, *eo_, *mo_;
  long long lo, span;
  if (!PyArg_ParseTuple(args, "OOOOLLOOOO", &k_, &kd_, &b_, &e_, &lo, &span, &ko_, &bo_, &eo_, &mo_)) return nullptr;
  const char* w = "step_bounds";
  Buf key, b, e, ko, bo, eo, mo;
  Array<int8_t> kind;
  if (!key.get(k_, false, w) || !kind.get(kd_, false, w) || !b.get(b_, false, w) || !e.get(e_, false, w) ||
      !ko.get(ko_, true, w) || !bo.get(bo_, true, w) || !eo.get(eo_, true, w) || !mo.get(mo_, true, w) ||
      !same_length(key, kind, w) || !same_length(key, b, w) || !same_length(key, e, w) ||
      !same_length(ko, bo, w) || !same_length(ko, eo, w) || !same_length(ko, mo, w))
    return nullptr;
  if (span < 0) return PyErr_Format(PyExc_ValueError, "%s: negative range", w);
  Py_ssize_t opt = 0;
  for (Py_ssize_t i = 0; i < key.n; ++i) {
    if (kind.p[i] == 0) continue;
    if (key.p[i] < lo || key.p[i] - lo >= span) return PyErr_Format(PyExc_ValueError, "%s: key out of range", w);
    opt += kind.p[i] == 1;
  }
  if (!room(ko, opt, w)) return nullptr;
  i64 count = 0;
  Py_BEGIN_ALLOW_THREADS
  constexpr i64 kMax = std::numeric_limits<i64>::max(), kMin = std::numeric_limits<i64>::min();
  std::vector<i64> begin(size_t(span), kMax), end(size_t(span), kMin), micro(size_t(span), 0);
  std::vector<char> has(size_t(span), 0);
  for (Py_ssize_t i = 0; i < key.n; ++i) {
    if (kind.p[i] != 1) continue;
    const size_t j = size_t(key.p[i] - lo);
    has[j] = 1;
    begin[j] = std::min(begin[j], b.p[i]);
    end[j] = std::max(end[j], e.p[i]);
  }
  for (Py_ssize_t i = 0; i < key.n; ++i) {
    if (kind.p[i] < 2) continue;
    const size_t j = size_t(key.p[i] - lo);
    if (!has[j]) continue;                 // no optimizer step: no step
    begin[j] = std::min(begin[j], b.p[i]);
    micro[j] += kind.p[i] == 2;
  }
  for (size_t j = 0; j < size_t(span); ++j) {
    if (!has[j]) continue;
    ko.p[count] = lo + i64(j);
    bo.p[count] = begin[j];
    eo.p[count] = end[j];
    mo.p[count] = micro[j];
    ++count;
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(count);
}

// first_seen_codes(keys, lo, span, out) -> count: pd.factorize's codes of keys in [lo, lo + span)
// (distinct keys numbered in order of first appearance), by a table over the range.
PyObject* first_seen_codes(PyObject*, PyObject* args) {
  PyObject *k_, *o_;
  long long lo, span;
  if (!PyArg_ParseTuple(args, "OLLO", &k_, &lo, &span, &o_)) return nullptr;
  Buf keys, out;
  if (!keys.get(k_, false, "first_seen_codes") || !out.get(o_, true, "first_seen_codes") ||
      !same_length(keys, out, "first_seen_codes"))
    return nullptr;
  if (span < 0) return PyErr_Format(PyExc_ValueError, "first_seen_codes: negative range");
  for (Py_ssize_t i = 0; i < keys.n; ++i)
    if (keys.p[i] < lo || keys.p[i] - lo >= span)
      return PyErr_Format(PyExc_ValueError, "first_seen_codes: key out of range");
  i64 next = 0;
  Py_BEGIN_ALLOW_THREADS
  std::vector<i64> code(size_t(span), -1);
  for (Py_ssize_t i = 0; i < keys.n; ++i) {
    i64& c = code[size_t(keys.p[i] - lo)];
    if (c < 0) c = next++;
    out.p[i] = c;
  }
  Py_END_ALLOW_THREADS
  return PyLong_FromLongLong(next);
}

// cell_figures(cell, dur, nbytes, ops, dur_sum, known, bytes_sum, bounds, values, exact32):
// rank_map's summary cells of one rank (cell and nbytes: integers of any width). Per cell c (cell[i] in [0, len(ops))): ops, the
// summed durations (NaN counted as 0.0), the known durations and the summed bytes, in float64
// added in row order as np.bincount adds them (the outputs start at zero); ``values`` gets the
// known durations of cell 0, then cell 1, ... each in row order, cell c's from bounds[c] to
// bounds[c + 1]; exact32[c] = 1 when float32 holds each of them exactly.
PyObject* cell_figures(PyObject*, PyObject* args) {
  PyObject *c_, *d_, *b_, *ops_, *ds_, *kn_, *bs_, *bd_, *v_, *x_;
  if (!PyArg_ParseTuple(args, "OOOOOOOOOO", &c_, &d_, &b_, &ops_, &ds_, &kn_, &bs_, &bd_, &v_, &x_)) return nullptr;
  const char* w = "cell_figures";
  Ints cell, nbytes;
  Buf bounds;
  Array<double> dur, ops, dsum, known, bsum, values;
  Array<int8_t> exact32;
  if (!cell.get(c_, w) || !dur.get(d_, false, w) || !nbytes.get(b_, w) || !ops.get(ops_, true, w) ||
      !dsum.get(ds_, true, w) || !known.get(kn_, true, w) || !bsum.get(bs_, true, w) || !bounds.get(bd_, true, w) ||
      !values.get(v_, true, w) || !exact32.get(x_, true, w) || !same_length(cell, dur, w) ||
      !same_length(cell, nbytes, w) || !same_length(ops, dsum, w) || !same_length(ops, known, w) ||
      !same_length(ops, bsum, w) || !same_length(ops, exact32, w) || !room(bounds, ops.n + 1, w) ||
      !room(values, cell.n, w))
    return nullptr;
  const Py_ssize_t n = ops.n;
  for (Py_ssize_t i = 0; i < cell.n; ++i)
    if (cell[i] < 0 || cell[i] >= n) return PyErr_Format(PyExc_IndexError, "%s: cell out of range", w);
  Py_BEGIN_ALLOW_THREADS
  std::vector<Py_ssize_t> fill(n, 0);
  for (Py_ssize_t c = 0; c < n; ++c) exact32.p[c] = 1;
  for (Py_ssize_t i = 0; i < cell.n; ++i) {
    const i64 c = cell[i];
    const double v = dur.p[i];
    const bool is_known = !std::isnan(v);
    ops.p[c] += 1.0;
    dsum.p[c] += is_known ? v : 0.0;
    known.p[c] += is_known ? 1.0 : 0.0;
    bsum.p[c] += double(nbytes[i]);
    if (is_known) ++fill[c];
  }
  bounds.p[0] = 0;
  for (Py_ssize_t c = 0; c < n; ++c) bounds.p[c + 1] = bounds.p[c] + fill[c];
  for (Py_ssize_t c = 0; c < n; ++c) fill[c] = bounds.p[c];
  for (Py_ssize_t i = 0; i < cell.n; ++i) {
    const double v = dur.p[i];
    if (std::isnan(v)) continue;
    const i64 c = cell[i];
    values.p[fill[c]++] = v;
    if (exact32.p[c] && !(std::fabs(v) <= double(FLT_MAX) && double(float(v)) == v)) exact32.p[c] = 0;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// file_columns(records, itemsize, off_d_return, off_d_end, off_seq, t, si, gi, s_op, s_size,
//              s_p2p, s_send, s_root, g_wg, g_n, c_lut, n_groups, rank, at, out...): partition_map's
// per-op columns of one file's slice, written at rows [at, at + len(t)) of the partition's
// columns (t, end, dur, rank, seq, wg, op, size, n, cell, src, dst). records: the slice's raw
// bytes (schema.OP_RECORD, its field offsets given); t: aligned starts; si, gi: sig and group
// index per record; s_* per sig, g_* per group, c_lut per (sig * n_groups + group).
PyObject* file_columns(PyObject*, PyObject* args) {
  PyObject *rec_, *t_, *si_, *gi_, *sop_, *ssz_, *sp2p_, *ssend_, *sroot_, *gwg_, *gn_, *clut_;
  Py_ssize_t itemsize, o_ret, o_end, o_seq, n_groups, at;
  long long rank;
  PyObject* outs[12];
  if (!PyArg_ParseTuple(args, "OnnnnOOOOOOOOOOOnLnOOOOOOOOOOOO", &rec_, &itemsize, &o_ret, &o_end, &o_seq, &t_, &si_,
                        &gi_, &sop_, &ssz_, &sp2p_, &ssend_, &sroot_, &gwg_, &gn_, &clut_, &n_groups, &rank, &at,
                        &outs[0], &outs[1], &outs[2], &outs[3], &outs[4], &outs[5], &outs[6], &outs[7], &outs[8],
                        &outs[9], &outs[10], &outs[11]))
    return nullptr;
  const char* w = "file_columns";
  Array<uint8_t> rec;
  Buf t, si, gi, sop, ssz, sroot, gwg, gn, clut;
  Array<int8_t> sp2p, ssend;
  Buf o_t, o_end_, o_rank, o_seq_, o_wg, o_op, o_size, o_n, o_cell, o_src, o_dst;
  Array<double> o_dur;
  if (!rec.get(rec_, false, w) || !t.get(t_, false, w) || !si.get(si_, false, w) || !gi.get(gi_, false, w) ||
      !sop.get(sop_, false, w) || !ssz.get(ssz_, false, w) || !sp2p.get(sp2p_, false, w) ||
      !ssend.get(ssend_, false, w) || !sroot.get(sroot_, false, w) || !gwg.get(gwg_, false, w) ||
      !gn.get(gn_, false, w) || !clut.get(clut_, false, w) || !o_t.get(outs[0], true, w) ||
      !o_end_.get(outs[1], true, w) || !o_dur.get(outs[2], true, w) || !o_rank.get(outs[3], true, w) ||
      !o_seq_.get(outs[4], true, w) || !o_wg.get(outs[5], true, w) || !o_op.get(outs[6], true, w) ||
      !o_size.get(outs[7], true, w) || !o_n.get(outs[8], true, w) || !o_cell.get(outs[9], true, w) ||
      !o_src.get(outs[10], true, w) || !o_dst.get(outs[11], true, w))
    return nullptr;
  const Py_ssize_t m = t.n;
  if (si.n != m || gi.n != m || rec.n != m * itemsize || itemsize < 1 || o_ret < 0 || o_end < 0 || o_seq < 0 ||
      o_ret + 4 > itemsize || o_end + 4 > itemsize || o_seq + 4 > itemsize)
    return PyErr_Format(PyExc_ValueError, "%s: records, times and indexes do not match", w);
  const Py_ssize_t ns = sop.n, ng = gwg.n;
  if (ssz.n != ns || sp2p.n != ns || ssend.n != ns || sroot.n != ns || gn.n != ng || n_groups != ng ||
      clut.n < ns * ng)
    return PyErr_Format(PyExc_ValueError, "%s: lookup tables do not match", w);
  const Buf* cols[] = {&o_t, &o_end_, &o_rank, &o_seq_, &o_wg, &o_op, &o_size, &o_n, &o_cell, &o_src, &o_dst};
  for (const Buf* c : cols)
    if (c->n != o_dur.n) return PyErr_Format(PyExc_ValueError, "%s: output columns differ in length", w);
  if (at < 0 || at + m > o_dur.n) return PyErr_Format(PyExc_ValueError, "%s: rows beyond the columns", w);
  for (Py_ssize_t i = 0; i < m; ++i)
    if (si.p[i] < 0 || si.p[i] >= ns || gi.p[i] < 0 || gi.p[i] >= ng)
      return PyErr_Format(PyExc_IndexError, "%s: sig or group index out of range", w);
  Py_BEGIN_ALLOW_THREADS
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Py_ssize_t i = 0; i < m; ++i) {
    const uint8_t* r = rec.p + i * itemsize;
    float f_ret, f_end;
    uint32_t seq;
    std::memcpy(&f_ret, r + o_ret, 4);
    std::memcpy(&f_end, r + o_end, 4);
    std::memcpy(&seq, r + o_seq, 4);
    const i64 x = t.p[i], s = si.p[i], g = gi.p[i], row = at + i;
    const double d_end = f_end, d_ret = f_ret;
    const bool known = !std::isnan(d_end);
    const i64 d_int = known ? i64(d_end) : 0;
    const i64 ret = std::isnan(d_ret) ? x : i64(d_ret) + x;
    o_t.p[row] = x;
    o_end_.p[row] = std::max(known ? d_int + x : ret, x);
    o_dur.p[row] = known ? double(d_int) : nan;
    o_rank.p[row] = rank;
    o_seq_.p[row] = i64(seq);
    o_wg.p[row] = gwg.p[g];
    o_op.p[row] = sop.p[s];
    o_size.p[row] = ssz.p[s];
    o_n.p[row] = gn.p[g];
    o_cell.p[row] = clut.p[s * ng + g];
    const bool p2p = sp2p.p[s] != 0, send = ssend.p[s] != 0;
    o_src.p[row] = p2p ? (send ? rank : sroot.p[s]) : -1;
    o_dst.p[row] = p2p ? (send ? sroot.p[s] : rank) : -1;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// op_times(d_return, d_end, t, ret, ret_unknown, end, dur): rank_ops' times of each op from
// its start t and its float32 offsets (NaN: unknown): return (t when unknown), end (the known
// end, else the return, else t; never before t) and duration (NaN when the end is unknown).
PyObject* op_times(PyObject*, PyObject* args) {
  PyObject *dr_, *de_, *t_, *r_, *ru_, *e_, *d_;
  if (!PyArg_ParseTuple(args, "OOOOOOO", &dr_, &de_, &t_, &r_, &ru_, &e_, &d_)) return nullptr;
  const char* w = "op_times";
  Array<float> dr, de;
  Buf t, ret, end;
  Array<bool> ru;
  Array<double> dur;
  if (!dr.get(dr_, false, w) || !de.get(de_, false, w) || !t.get(t_, false, w) || !ret.get(r_, true, w) ||
      !ru.get(ru_, true, w) || !end.get(e_, true, w) || !dur.get(d_, true, w) || !same_length(dr, t, w) ||
      !same_length(de, t, w) || !same_length(ret, t, w) || !same_length(ru, t, w) || !same_length(end, t, w) ||
      !same_length(dur, t, w))
    return nullptr;
  Py_BEGIN_ALLOW_THREADS
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (Py_ssize_t i = 0; i < t.n; ++i) {
    const i64 x = t.p[i];
    const bool ret_ok = !std::isnan(dr.p[i]), end_ok = !std::isnan(de.p[i]);
    const i64 r = ret_ok ? i64(dr.p[i]) + x : x;
    const i64 d_end = end_ok ? i64(de.p[i]) : 0;
    ret.p[i] = r;
    ru.p[i] = !ret_ok;
    end.p[i] = std::max(end_ok ? d_end + x : r, x);
    dur.p[i] = end_ok ? double(d_end) : nan;
  }
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

// order_stats(pieces, ks, out, floats) -> bool: out[j] = the ks[j]-th smallest (from 0) value
// of the pieces' concatenation, as np.partition would place it, without concatenating. pieces:
// 1-d arrays of one item size (4 or 8 bytes) -- signed integers, or (floats) floats none of
// which has its sign bit set (then they order as their bits; False, nothing written, where one
// has it: the caller partitions with numpy). out: that item size. A radix selection: a pass
// for the range, a pass counting the values in buckets of it, a pass gathering the
// buckets that hold a k, and nth_element in those only (at most 65,536 buckets, fewer for fewer values).
template <typename U>
bool order_stats_in(const std::vector<std::pair<const U*, Py_ssize_t>>& pieces, const i64* ks, Py_ssize_t nk,
                    U* out, bool floats) {
  const U top = U(1) << (8 * sizeof(U) - 1);
  const U flip = floats ? U(0) : top;             // signed integers order as their bits with the sign flipped
  U lo = std::numeric_limits<U>::max(), hi = 0;
  for (const auto& [p, n] : pieces)
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (floats && (p[i] & top)) return false;
      const U k = p[i] ^ flip;
      lo = std::min(lo, k);
      hi = std::max(hi, k);
    }
  Py_ssize_t total = 0;
  for (const auto& piece : pieces) total += piece.second;
  const U buckets = U(1) << std::min(16, std::max(6, int(std::log2(double(total + 1))) - 4));   // ~16 values a bucket
  int shift = 0;
  while (((hi - lo) >> shift) >= buckets) ++shift;
  std::vector<Py_ssize_t> cum(((hi - lo) >> shift) + 2, 0);
  for (const auto& [p, n] : pieces)
    for (Py_ssize_t i = 0; i < n; ++i) ++cum[(((p[i] ^ flip) - lo) >> shift) + 1];
  for (size_t b = 1; b < cum.size(); ++b) cum[b] += cum[b - 1];   // cum[b]: values in the buckets before b
  std::vector<int16_t> slot(cum.size() - 1, -1);
  std::vector<std::vector<U>> held;
  std::vector<std::pair<size_t, Py_ssize_t>> at(nk);            // per k: (its bucket's slot, rank in it)
  for (Py_ssize_t j = 0; j < nk; ++j) {
    const size_t b = std::upper_bound(cum.begin(), cum.end(), ks[j]) - cum.begin() - 1;
    if (slot[b] < 0) {
      slot[b] = int16_t(held.size());
      held.emplace_back();
      held.back().reserve(cum[b + 1] - cum[b]);
    }
    at[j] = {size_t(slot[b]), ks[j] - cum[b]};
  }
  for (const auto& [p, n] : pieces)
    for (Py_ssize_t i = 0; i < n; ++i) {
      const U k = p[i] ^ flip;
      const int16_t s = slot[(k - lo) >> shift];
      if (s >= 0) held[s].push_back(k);
    }
  for (Py_ssize_t j = 0; j < nk; ++j) {
    auto& v = held[at[j].first];
    std::nth_element(v.begin(), v.begin() + at[j].second, v.end());
    out[j] = v[at[j].second] ^ flip;
  }
  return true;
}

PyObject* order_stats(PyObject*, PyObject* args) {
  PyObject *pieces_, *ks_, *out_;
  int floats;
  if (!PyArg_ParseTuple(args, "OOOp", &pieces_, &ks_, &out_, &floats)) return nullptr;
  const char* w = "order_stats";
  PyObject* seq = PySequence_Fast(pieces_, "order_stats: pieces must be a sequence");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t np_ = PySequence_Fast_GET_SIZE(seq);
  std::vector<Py_buffer> views(np_);
  Py_ssize_t held = 0, item = 0, total = 0;
  auto release = [&]() {
    for (Py_ssize_t i = 0; i < held; ++i) PyBuffer_Release(&views[i]);
    Py_DECREF(seq);
  };
  for (; held < np_; ++held) {
    if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, held), &views[held], PyBUF_C_CONTIGUOUS) != 0) {
      release();
      return nullptr;
    }
    const Py_ssize_t size = views[held].itemsize;
    if ((size != 4 && size != 8) || (item && size != item)) {
      ++held;
      release();
      return PyErr_Format(PyExc_TypeError, "%s: pieces of 4-byte or of 8-byte items, all alike", w);
    }
    item = size;
    total += views[held].len / size;
  }
  Buf ks;
  Py_buffer out{};
  if (!ks.get(ks_, false, w)) {
    release();
    return nullptr;
  }
  if (PyObject_GetBuffer(out_, &out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) != 0) {
    release();
    return nullptr;
  }
  bool bad = (item && out.itemsize != item) || out.len / std::max<Py_ssize_t>(out.itemsize, 1) < ks.n ||
             ks.n > 32767;   // slots of int16
  for (Py_ssize_t j = 0; j < ks.n; ++j) bad = bad || ks.p[j] < 0 || ks.p[j] >= total;
  if (bad) {
    PyBuffer_Release(&out);
    release();
    return PyErr_Format(PyExc_ValueError, "%s: ranks beyond the values, or an output of another item size", w);
  }
  bool ok = true;
  Py_BEGIN_ALLOW_THREADS
  if (item == 4) {
    std::vector<std::pair<const uint32_t*, Py_ssize_t>> p;
    for (const auto& v : views) p.emplace_back(static_cast<const uint32_t*>(v.buf), v.len / 4);
    ok = order_stats_in(p, ks.p, ks.n, static_cast<uint32_t*>(out.buf), floats);
  } else if (item == 8) {
    std::vector<std::pair<const uint64_t*, Py_ssize_t>> p;
    for (const auto& v : views) p.emplace_back(static_cast<const uint64_t*>(v.buf), v.len / 8);
    ok = order_stats_in(p, ks.p, ks.n, static_cast<uint64_t*>(out.buf), floats);
  }
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&out);
  release();
  return PyBool_FromLong(ok);
}

PyMethodDef methods[] = {
    {"order_stats", order_stats, METH_VARARGS, "order_stats(pieces, ks, out, floats) -> bool"},
    {"op_times", op_times, METH_VARARGS, "op_times(d_return, d_end, t, ret, ret_unknown, end, dur)"},
    {"file_columns", file_columns, METH_VARARGS, "file_columns(records, itemsize, ...): partition_map's columns of one file"},
    {"cell_figures", cell_figures, METH_VARARGS,
     "cell_figures(cell, dur, nbytes, ops, dur_sum, known, bytes_sum, bounds, values, exact32)"},
    {"instance_extremes", instance_extremes, METH_VARARGS,
     "instance_extremes(inst, t, rank, dur, size, end, first, last, slowest, size_max, end_max)"},
    {"step_bounds", step_bounds, METH_VARARGS,
     "step_bounds(key, kind, begins, ends, lo, span, keys, step_begins, step_ends, micro) -> count"},
    {"first_seen_codes", first_seen_codes, METH_VARARGS, "first_seen_codes(keys, lo, span, out) -> count"},
    {"last_in_window", last_in_window, METH_VARARGS, "last_in_window(begins, ends, times, out)"},
    {"sums_by_row", sums_by_row, METH_VARARGS, "sums_by_row(row_of, codes, weights, counts, sums)"},
    {"locate", locate, METH_VARARGS, "locate(begins, ends, numbers, times, step_out, where_out, in_step, before, between, after)"},
    {"searchsorted", searchsorted, METH_VARARGS, "searchsorted(sorted, values, out, right)"},
    {"union", union_, METH_VARARGS, "union(starts, ends, out_starts, out_ends) -> count"},
    {"union2", union2, METH_VARARGS, "union2(a_starts, a_ends, b_starts, b_ends, out_starts, out_ends) -> count"},
    {"intersect", intersect, METH_VARARGS, "intersect(a_starts, a_ends, b_starts, b_ends, out_starts, out_ends) -> count"},
    {"subtract", subtract, METH_VARARGS, "subtract(a_starts, a_ends, b_starts, b_ends, out_starts, out_ends) -> count"},
    {"covered_before", covered_before, METH_VARARGS, "covered_before(starts, ends, times, out)"},
    {"length_within", length_within, METH_VARARGS, "length_within(starts, ends, lo, hi, out)"},
    {nullptr, nullptr, 0, nullptr}};

#define CT_STR2(x) #x
#define CT_STR(x) CT_STR2(x)
#define CT_CAT2(a, b) a##b
#define CT_CAT(a, b) CT_CAT2(a, b)

PyModuleDef module = {PyModuleDef_HEAD_INIT, CT_STR(TORCH_EXTENSION_NAME),
                      "commtrace's analysis kernels (compiled twins of its numpy code)", -1, methods};

}  // namespace

PyMODINIT_FUNC CT_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&module); }
