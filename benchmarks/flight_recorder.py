"""Turn torch's c10d Flight Recorder off and on inside one process (benchmarks only).

Why this exists: the Flight Recorder that gloo records into is one object per
process, ``c10d::FlightRecorder<c10::Event>::get()`` (a function-local static in
torch/csrc/distributed/c10d/FlightRecorder.hpp). Its constructor reads
``TORCH_FR_BUFFER_SIZE`` (else ``TORCH_NCCL_TRACE_BUFFER_SIZE``, default 2000)
once, when the first gloo group is built (``ProcessGroupGloo``'s constructor
calls ``record_pg_ranks`` on it), and sets ``enabled_ = max_entries_ > 0``.
Groups made later share that object: setting the variable between two groups
changes nothing, so "Flight Recorder off" and "default" cannot be two groups of
one process. Every gloo op calls ``recordWithResetEnabled`` from
``ProcessGroupGloo::enqueue``, which returns at once when ``enabled_`` is false
-- exactly what ``TORCH_FR_BUFFER_SIZE=0`` gives per op.

So a side-by-side benchmark flips ``enabled_`` between blocks. The object is
reached through libtorch_cpu.so's (non-dynamic) symbol table: the address of
the static ``instance`` pointer is its symbol value plus the library's load
bias (taken from an exported symbol). ``enabled_`` is the struct's first
member; the next fields are checked against the environment before anything
is written (``max_entries_`` must equal the configured size and ``enabled_``
must agree with it), so a torch whose layout differs is reported as not
available instead of being written to. Only a recorder that starts enabled
(its buffer allocated) is ever switched.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import struct

INSTANCE = b"_ZZN4c10d14FlightRecorderIN3c105EventEE3getEvE8instance"
ANCHOR = b"_ZN4c10d40allow_inflight_collective_as_graph_inputEv"   # exported: gives the load bias
DEFAULT_ENTRIES = 2000
# Offsets in FlightRecorder<c10::Event> (x86-64 libstdc++): bool enabled_, bool capture_cpp_stack_,
# std::mutex mutex_ (40 B at 8), std::vector<Entry> entries_ (24 B at 48), size_t max_entries_ at 72.
ENABLED_AT, MAX_ENTRIES_AT = 0, 72


class Unavailable(RuntimeError):
    pass


def _symbols(path: str, names: set[bytes]) -> dict[bytes, int]:
    """Symbol values of ``names`` from the ELF64 little-endian .symtab and .dynsym of ``path``."""
    out: dict[bytes, int] = {}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        if m[:4] != b"\x7fELF" or m[4] != 2 or m[5] != 1:
            raise Unavailable(f"{path}: not a 64-bit little-endian ELF file")
        shoff, = struct.unpack_from("<Q", m, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", m, 0x3A)
        sections = [struct.unpack_from("<IIQQQQIIQQ", m, shoff + i * shentsize) for i in range(shnum)]
        for sh in sections:
            if sh[1] not in (2, 11):  # SHT_SYMTAB, SHT_DYNSYM
                continue
            strtab = sections[sh[6]]
            str_off, str_size = strtab[4], strtab[5]
            wanted = {}
            for name in names:   # a name's offset in the string table, then the symbol naming it
                i = m.find(b"\0" + name + b"\0", str_off, str_off + str_size)
                if i >= 0:
                    wanted[i + 1 - str_off] = name
            if not wanted:
                continue
            for st_name, _info, _other, _shndx, value, _size in struct.iter_unpack("<IBBHQQ", m[sh[4]:sh[4] + sh[5]]):
                if st_name in wanted and value:
                    out.setdefault(wanted[st_name], value)
    return out


class FlightRecorderSwitch:
    """``off()`` / ``on()`` the process's gloo Flight Recorder; ``enabled`` reads it.
    Construct after the first gloo group exists (the recorder is made then)."""

    def __init__(self):
        import torch

        from commtrace import torch_compat
        if not torch_compat.has_flight_recorder():
            raise Unavailable("this torch has no Flight Recorder for gloo (c10d._dump_fr_trace_json)")
        lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")
        if not os.path.exists(lib):
            raise Unavailable(f"{lib} not found")
        syms = _symbols(lib, {INSTANCE, ANCHOR})
        if INSTANCE not in syms or ANCHOR not in syms:
            raise Unavailable("libtorch_cpu.so has no symbol table entry for the Flight Recorder (stripped?)")
        handle = ctypes.CDLL(lib, mode=os.RTLD_NOLOAD | os.RTLD_GLOBAL)
        anchor = ctypes.cast(getattr(handle, ANCHOR.decode()), ctypes.c_void_p).value
        bias = anchor - syms[ANCHOR]
        obj = ctypes.c_void_p.from_address(bias + syms[INSTANCE]).value
        if not obj:
            raise Unavailable("the Flight Recorder does not exist yet (make a gloo group first)")
        self._enabled = ctypes.c_bool.from_address(obj + ENABLED_AT)
        max_entries = ctypes.c_size_t.from_address(obj + MAX_ENTRIES_AT).value
        want = _configured_entries()
        if max_entries != want or self._enabled.value != (want > 0):
            raise Unavailable(f"unexpected Flight Recorder layout (max_entries {max_entries}, expected {want})")
        if not self._enabled.value:
            raise Unavailable("the Flight Recorder is off in this process (TORCH_FR_BUFFER_SIZE=0)")

    @property
    def enabled(self) -> bool:
        return bool(self._enabled.value)

    def off(self) -> None:
        self._enabled.value = False

    def on(self) -> None:
        self._enabled.value = True


def _configured_entries() -> int:
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"):
        v = os.environ.get(name)
        if v is not None and v.strip():
            try:
                return int(v)
            except ValueError:
                break
    return DEFAULT_ENTRIES


def fr_entries() -> int:
    """Entries in this process's Flight Recorder dump (ops recorded and still in the ring)."""
    import json

    import torch
    return len(json.loads(torch._C._distributed_c10d._dump_fr_trace_json(True, False)).get("entries", []))
