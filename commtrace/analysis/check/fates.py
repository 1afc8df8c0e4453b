"""How each rank and process ended (exit code, signal, exception, abrupt end), and the processes that
ended before they created a process group.

A rank is a rank *of a world* (one ``init_process_group``'s processes): a run that makes several worlds
one after another (a test suite spawning fresh ranks per test) has a rank 1 in each, a process of its
own. ``rank_fates`` keys them by (world id, rank); ``fate_of`` finds a world's rank.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...trace.rank_ranges import fmt_ranks
from ...trace.reader import world_numbers
from ...trace.schema import stem_of
from .findings import _int, _s

# -- process facts -----------------------------------------------------------------

@dataclass
class RankFate:
    rank: int
    files: list[str] = field(default_factory=list)
    complete: bool = True
    exit_code: int | None = None
    how: str | None = None
    exception: dict | None = None
    issues: list[str] = field(default_factory=list)
    damage: list[str] = field(default_factory=list)  # damaged parts of its files (reader's phrases)
    meta_damage: list[str] = field(default_factory=list)  # those of them about a meta file
    cut: bool = False                                # a file of it ends mid-line or mid-record
    lost: dict = field(default_factory=dict)         # group -> [first seq, last seq, count] of unreadable records
    worlds: list = field(default_factory=list)       # the ids of the worlds it was a rank of (none known: any)
    reason: str | None = None                        # why its test was skipped (how "skip")
    script_exit_code: int | None = None              # a signal ended it after its script had ended, with this

    @property
    def world(self):
        """Its first world's id (None: unknown)."""
        return self.worlds[0] if self.worlds else None

    def describe(self) -> str:
        if self.exception:
            return f"raised {self.exception.get('exc_type')}: {_first_line(self.exception.get('message'))}"
        if not self.complete:
            if self.meta_damage and self.how is None:
                return f"trace file damaged ({self.meta_damage[0]}): how the process ended is unknown"
            if self.cut:
                return "trace truncated (process killed or disk full?)"
            return "trace ends abruptly (killed, e.g. SIGKILL, or still running)"
        if self.how == "skip":
            return f"skipped its test: {self.reason} (torch's distributed test harness, exit code {self.exit_code})"
        if self.how == "hang":
            return f"aborted by the hang watchdog (--abort-on-hang, exit code {self.exit_code})"
        if self.how == "signal" and self.script_exit_code is not None:
            return (f"ended its script (exit code {self.script_exit_code}), then was terminated by "
                    f"{_signal_name(self.exit_code)} while commtrace finished its trace (exit code {self.exit_code})")
        if self.how == "signal":
            return f"terminated by {_signal_name(self.exit_code)} (exit code {self.exit_code})"
        if self.exit_code not in (None, 0):
            return f"exited with code {self.exit_code}"
        return ENDED_NORMALLY


ENDED_NORMALLY = "exited normally"


def _signal_name(code) -> str:
    import signal
    try:
        return signal.Signals(int(code) - 128).name
    except (TypeError, ValueError):
        return "a signal"


def _first_line(s) -> str:
    s = "" if s is None else str(s)
    line = s.strip().splitlines()[0] if s.strip() else ""
    return line.lstrip("- ")[:300]  # mp.spawn's "-- Process 1 terminated with ..."


def rank_fates(run) -> dict[tuple, RankFate]:
    """(world id, rank) -> how that rank's process ended. A process is under every world it was a
    rank of, by its rank there (one fate, several keys); one whose files name no world (a C++-layer file, a restarted
    session's) takes its process's (same host and pid), else world None: ``fate_of`` answers it
    for its rank in any world."""
    fates: dict[tuple, RankFate] = {}
    by_file: dict[str, list[str]] = {}
    for issue in run.issues:
        by_file.setdefault(stem_of(str(getattr(issue, "file", ""))), []).append(str(getattr(issue, "problem", issue)))
    worlds_of: dict = {}     # (host, pid) -> world -> its rank there, as its files name them
    for p in run.processes:
        if p.get("pid") is not None:
            for w, wr in process_world_ranks(p).items():
                worlds_of.setdefault((p.get("host"), p.get("pid")), {}).setdefault(w, wr)
    for p in run.processes:
        r = _int(p.get("rank"))
        if r is None:
            continue
        ranks = process_world_ranks(p) if p.get("pid") is None else worlds_of.get((p.get("host"), p.get("pid")), {})
        # its keys: (world, its rank in that world); a world naming no rank of it: its rank
        keys = [(w, r if wr is None else wr) for w, wr in ranks.items()] or [(None, r)]
        fate = fates.get(keys[0]) or RankFate(r, worlds=list(ranks))
        for key in keys:
            fates.setdefault(key, fate)
        _add_process(fate, p, by_file.get(stem_of(str(p.get("file", ""))), []))
    return fates


def fates_by_rank(processes: list[dict]) -> dict[int, RankFate]:
    """Rank (as the processes' summaries name it: the report's rank keys) -> how its processes
    ended, from the summaries alone (no reader issues: the report's banner)."""
    fates: dict[int, RankFate] = {}
    for p in processes:
        r = _int(p.get("rank"))
        if r is not None:
            _add_process(fates.setdefault(r, RankFate(r)), p, [])
    return fates


def process_worlds(p: dict) -> list[str]:
    """The ids of the worlds a process (a reader summary) was a rank of, in order."""
    ws = p.get("worlds")
    return [str(w) for w in ws if w is not None] if isinstance(ws, list) else []


def process_world_ranks(p: dict) -> dict:
    """World id -> the process's rank in it (None: not said), in the order it joined them."""
    ranks = p.get("world_ranks")
    ranks = ranks if isinstance(ranks, list) else []
    out: dict = {}
    for i, w in enumerate(process_worlds(p)):
        out.setdefault(w, _int(ranks[i]) if i < len(ranks) else None)
    return out


def run_worlds(run) -> set[str]:
    """The worlds the run's processes were ranks of (each one's first); labels name it when several."""
    return {ws[0] for p in run.processes if (ws := process_worlds(p))}


def fate_of(fates: dict, world, rank: int) -> RankFate | None:
    """The fate of ``rank`` of ``world`` (``rank_fates``), else of that rank's process of unknown world."""
    return fates.get((world, rank)) or fates.get((None, rank))


def distinct_fates(fates: dict) -> list[RankFate]:
    """Each fate once (a process under several worlds has several keys), by world then rank."""
    order: dict = {}
    for w, _ in fates:
        order.setdefault(w, len(order))
    unique = {id(f): f for f in fates.values()}
    return sorted(unique.values(), key=lambda f: (order[f.world], f.rank))


def world_restarts(processes: list) -> dict:
    """World id -> which torchrun restart made it (``TORCHELASTIC_RESTART_COUNT``; 0 or None: the first
    attempt, or not torchrun)."""
    restart: dict = {}
    for p in processes:
        env = p.get("launch_env") if isinstance(p.get("launch_env"), dict) else {}
        for w in process_worlds(p):
            restart.setdefault(w, _int(env.get("TORCHELASTIC_RESTART_COUNT")))
    return restart


def world_names(processes: list, ids) -> dict:
    """World id -> its name for each of ``ids`` (labels name the world when there are several):
    "w0", "w1", ... (``world_numbers``); a world of a torchrun restart adds it: "w1 (torchrun
    restart 1)" (``TORCHELASTIC_RESTART_COUNT``)."""
    numbers, restart = world_numbers(processes), world_restarts(processes)
    names = {}
    for w in ids:
        n = numbers.get(w)
        name = str(w) if n is None else f"w{n}"
        names[w] = f"{name} (torchrun restart {restart[w]})" if restart.get(w) else name
    return names


def run_world_names(run, fates: dict, facts) -> dict:
    """``world_names`` of the worlds the run's ranks and groups belong to."""
    return world_names(run.processes, {w for w, _ in fates if w is not None} | {w for w, _ in facts.groups})


def rank_label(ranks, world=None, worlds: dict | None = None) -> str:
    """"rank 0-3", or with several ``worlds`` (``world_names``) "rank 0-3 of world w1" (as group
    labels name it)."""
    label = f"rank {fmt_ranks(ranks)}"
    worlds = worlds or {}
    return f"{label} of world {worlds.get(world, world)}" if len(worlds) > 1 and world is not None else label


def _add_process(fate: RankFate, p: dict, issues: list[str]) -> RankFate:
    """``fate`` with what process ``p`` (a reader summary; a rank may have several) says of its end."""
    end = p.get("end") if isinstance(p.get("end"), dict) else None
    fate.files.append(str(p.get("file")))
    fate.complete = fate.complete and bool(p.get("complete", True))
    if end is not None:
        ec = _int(end.get("exit_code"))
        if ec is not None and ec != 0 or fate.exit_code is None:
            fate.exit_code = ec
        fate.how = _s(end.get("how")) or fate.how
        fate.reason = _s(end.get("reason")) or fate.reason
        fate.script_exit_code = _int(end.get("script_exit_code")) if fate.how == "signal" else None
    fate.exception = (p.get("exception") if isinstance(p.get("exception"), dict) else None) or fate.exception
    fate.issues.extend(issues)
    fate.damage.extend(str(d) for d in p.get("damage") or [])
    fate.meta_damage.extend(str(d) for d in p.get("meta_damage") or [])
    fate.cut = fate.cut or bool(p.get("cut"))
    for g, span in (p.get("lost") or {}).items():
        if isinstance(span, list) and len(span) == 3:
            fate.lost[str(g)] = span
    return fate


# -- processes that never had a rank ---------------------------------------------------

@dataclass
class EarlyProcess:
    """A process that ended before it created any process group (``Run.unranked``)."""
    label: str           # "rank 1" (launcher's rank), "mp.spawn process 1", or "pid 123 (train.py)"
    rank: int | None     # the launcher's rank, when it gave one to this very process
    fate: RankFate
    spawn_index: int | None = None   # its mp.spawn index, when it is named by that

    @property
    def identified(self) -> bool:
        """Named by a rank or an mp.spawn index (not just a pid): it was meant to create a group."""
        return self.numbered() is not None

    def numbered(self) -> tuple[str, int] | None:
        """("rank", 3) / ("mp.spawn process", 1): how processes named alike fold into one
        line ("rank 0-1023 raised ..."); None for a process named by pid."""
        if self.rank is not None:
            return "rank", self.rank
        return None if self.spawn_index is None else ("mp.spawn process", self.spawn_index)


def _launch_rank(p: dict) -> int | None:
    env = p.get("launch_env") if isinstance(p.get("launch_env"), dict) else {}
    for name in ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"):
        v = env.get(name)
        if isinstance(v, str) and v.strip().isdigit():
            return int(v)
    return None


def early_processes(run) -> list[EarlyProcess]:
    """Every rank-less process, with who it was; one whose parent is a traced process of the same
    launcher rank is that rank's helper (a subprocess inheriting its variables), not the rank."""
    unranked = [p for p in getattr(run, "unranked", None) or [] if isinstance(p, dict)]
    every = [p for p in list(run.processes) + unranked if isinstance(p, dict)]
    by_pid = {(p.get("host"), p.get("pid")): p for p in every}
    out = []
    for p in unranked:
        parent = by_pid.get((p.get("host"), p.get("ppid")))
        rank = _launch_rank(p)
        if rank is not None and parent is not None and (_launch_rank(parent) == rank or _int(parent.get("rank")) == rank):
            rank = None
        spawn = _int(p.get("spawn_index"))
        if rank is not None:
            label = f"rank {rank}"
        elif spawn is not None:
            label = f"mp.spawn process {spawn}"
        else:
            cmd = p.get("command") if isinstance(p.get("command"), list) else p.get("argv")
            what = " ".join(str(c) for c in cmd[:3]) if isinstance(cmd, list) and cmd else "?"
            label = f"pid {p.get('pid')} ({what[:80]})"
        fate = _add_process(RankFate(-1 if rank is None else rank), p, [])
        out.append(EarlyProcess(label, rank, fate, spawn if rank is None else None))
    return out

