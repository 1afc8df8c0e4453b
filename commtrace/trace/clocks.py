"""How one process's CLOCK_MONOTONIC maps onto its world's rank 0 clock, and how well
(docs/trace-format.md, "Clocks", states the rules).

Methods: ``reference`` (rank 0 itself), ``same-host`` (shares rank 0's clock: exactly 0),
the ping-pong methods of its ``clock`` lines (a line through them weighted by 1/rtt^2,
held constant outside the measured range), ``wall-clock`` (another host, nothing
measured: header wall clocks, error unknown) and ``unaligned`` (no rank 0).
The bound: a ping with round trip ``rtt`` bounds its measurement's error by ``rtt/2``
whatever the path's asymmetry, and the line passes within ``|residual|`` of it; with
linear drift the error between two measurements stays within the larger of theirs.
Past the last one it grows by ``MAX_DRIFT_PPM`` (crystal oscillators drift +-50 ppm).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .schema import int_or_none

# Measured offsets this small on one host are ping-pong noise around the exact 0.
SAME_HOST_NOISE_NS = 1_000_000
_MIN_RTT_NS = 1_000  # weights: a round trip under 1 us is no more exact than that
_LIMIT = 1 << 62     # trace files are untrusted: larger values are not times
MAX_DRIFT_PPM = 100


@dataclass
class ProcessClock:
    methods: tuple             # how the offset was found: one name, or the measurement methods it combines
    uncertainty_ns: int | None = 0     # bound on the offset's error; None: unknown
    rtt_ns: int | None = None          # lowest round trip among the measurements used
    residual_ns: int | None = None     # largest distance of a measurement from the line
    measurements: int = 0
    drift_ppm: float | None = None     # slope of the line (None: fewer than two times)
    span_ns: int = 0                   # first to last measurement
    beyond_ns: int = 0                 # last measurement to the process's last known time
    _a: float = 0.0                    # line: offset(t) = _a + _b * (clip(t, _t0, _t1) - _t0)
    _b: float = 0.0
    _t0: int = 0
    _t1: int = 0

    def offset(self, t: np.ndarray) -> np.ndarray:
        """Offset (ns, float) to add to each local monotonic time in ``t``."""
        t = np.asarray(t)
        if not self._b:
            return np.full(len(t), self._a)
        x = np.clip(t.astype(np.float64), self._t0, self._t1) - self._t0
        return self._a + self._b * x

    def describe(self) -> dict:
        return {"methods": list(self.methods), "uncertainty_ns": self.uncertainty_ns, "rtt_ns": self.rtt_ns,
                "residual_ns": self.residual_ns, "measurements": self.measurements,
                "drift_ppm": self.drift_ppm, "span_ns": self.span_ns, "beyond_ns": self.beyond_ns}


def fit(pt, ref, world_id=None) -> ProcessClock:
    """The clock of process ``pt`` (a reader ``ProcessTrace``) on ``ref``'s (the
    rank 0 process of its world ``world_id``; None if unknown)."""
    if ref is pt:
        return ProcessClock(("reference",))
    lines = usable_lines(pt, ref, world_id)
    same_host = ref is not None and ref.header.get("host") == pt.header.get("host")
    if any(c.get("method") == "same-host" for c in lines) or (
            same_host and all(abs(c["offset_ns"]) < SAME_HOST_NOISE_NS for c in lines)):
        return ProcessClock(("same-host",))  # exact 0 beats a measured +-1 us
    if lines:
        return _fit_lines(lines, _last_time(pt))
    if ref is None:
        return ProcessClock(("unaligned",), uncertainty_ns=None)
    return _wall_clock(pt, ref)


def usable_lines(pt, ref, world_id) -> list[dict]:
    """``pt``'s ``clock`` lines that measured offsets to ``ref``'s clock: those of this world, and
    MPI lines (to COMM_WORLD rank 0) unless ``ref``'s own show it was another MPI rank."""
    lines = [c for c in pt.clocks if int_or_none(c.get("rtt_ns")) is not None and 0 <= c["rtt_ns"] < _LIMIT
             and abs(c["offset_ns"]) < _LIMIT and abs(c["t_mono_ns"]) < _LIMIT]
    ref_is_mpi_root = ref is None or not any(
        c.get("world_id") is None and (c.get("offset_ns") or c.get("rtt_ns")) for c in ref.clocks)
    return [c for c in lines if (c["world_id"] == world_id if c.get("world_id") is not None else ref_is_mpi_root)]


def _last_time(pt) -> int | None:
    """The process's last known monotonic time: its end line or its last op call."""
    times = [t for t in ((pt.end or {}).get("t_mono_ns"),) if int_or_none(t) is not None and abs(t) < _LIMIT]
    if pt.records is not None and len(pt.records):
        times.append(int(pt.records["t_call"].max()))
    elif getattr(pt, "last_call_ns", None) is not None:     # read in pieces (reader.read_process)
        times.append(pt.last_call_ns)
    return max(times) if times else None


def _fit_lines(lines: list[dict], t_last: int | None = None) -> ProcessClock:
    t = np.array([c["t_mono_ns"] for c in lines], dtype=np.int64)
    y = np.array([c["offset_ns"] for c in lines], dtype=np.float64)
    rtt = np.array([c["rtt_ns"] for c in lines], dtype=np.float64)
    t0, t1 = int(t.min()), int(t.max())
    x = (t - t0).astype(np.float64)
    w = 1.0 / np.maximum(rtt, _MIN_RTT_NS) ** 2
    if t1 > t0:
        xm, ym = np.average(x, weights=w), np.average(y, weights=w)
        b = float(np.sum(w * (x - xm) * (y - ym)) / np.sum(w * (x - xm) ** 2))
        a = ym - b * xm
    else:
        a, b = float(np.average(y, weights=w)), 0.0
    resid = np.abs(y - (a + b * x))
    methods = tuple(sorted({str(c.get("method") or "pingpong") for c in lines}))
    beyond = max(0, t_last - t1) if t_last is not None else 0
    bound = _bound(t, rtt / 2 + resid) + beyond * MAX_DRIFT_PPM * 1e-6
    return ProcessClock(
        methods, uncertainty_ns=_ceil(bound) + 1,  # +1: integer rounding
        rtt_ns=int(rtt.min()), residual_ns=_ceil(resid.max()), measurements=len(lines),
        drift_ppm=b * 1e6 if t1 > t0 else None, span_ns=t1 - t0, beyond_ns=beyond,
        _a=float(a), _b=b, _t0=t0, _t1=t1)


def _ceil(v: float) -> int:
    return int(np.ceil(v - 1e-3))  # not up a whole ns for float noise


def _bound(t: np.ndarray, b: np.ndarray) -> float:
    """Worst, over [min t, max t], of the best bound from measurements on both sides."""
    b = b[np.argsort(t, kind="stable")]
    if len(b) == 1:
        return float(b[0])
    left = np.minimum.accumulate(b)                # best bound at or before each measurement
    right = np.minimum.accumulate(b[::-1])[::-1]   # best bound at or after it
    return float(np.max(np.maximum(left[:-1], right[1:])))


def _wall_clock(pt, ref) -> ProcessClock:
    try:
        off = (pt.header["t_wall_ns"] - pt.header["t_mono_ns"]) - (ref.header["t_wall_ns"] - ref.header["t_mono_ns"])
    except (KeyError, TypeError):
        off = 0
    return ProcessClock(("wall-clock",), uncertainty_ns=None, _a=float(off))

