"""The torch < 2.13 path of the hook, exercised on the installed torch.

``legacy_adopt.py PORT OUT RUN_DIR``: a one-rank gloo world made without
commtrace, a subgroup registered by torch itself, then
``Installer.as_traced`` (what the hook runs after torch < 2.13's helper
has registered a group): the wrapper must take the group's place in every torch
registry, and ops on it must be traced. Writes what it found to OUT (JSON).
"""
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from commtrace.capture.hook import Installer
from commtrace.capture.recorder import Recorder
from commtrace.capture.native_wrapper import traced_types


def main():
    port, out, run_dir = sys.argv[1], sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    inner = dist.new_group([0])
    name = c10d._world.pg_names[inner]
    rec = Recorder(run_dir, "legacy", "none", ["legacy_adopt.py"])
    # The world was made untraced here, so state it as the hook would have.
    rec.add_world({"world_id": "legacy", "rank": 0, "world_size": 1, "backend": "gloo"})
    traced = Installer(rec).as_traced(inner)
    w = c10d._world
    res = {
        "wrapped": isinstance(traced, traced_types()) and traced.inner is inner,
        "again_same": Installer(rec).as_traced(traced) is traced,
        "in_pg_map": traced in w.pg_map and inner not in w.pg_map,
        "name": w.pg_names.get(traced) == name,
        "tags": any(traced in v for v in w.tags_to_pg.values()) and not any(inner in v for v in w.tags_to_pg.values()),
        "by_name": c10d._resolve_process_group(name) is traced,
        "ranks": dist.get_process_group_ranks(traced),
        "backend": dist.get_backend(traced),
    }
    t = torch.ones(3)
    dist.all_reduce(t, group=traced)
    dist.broadcast(t, 0, group=traced)
    res["value"] = t.tolist()
    dist.destroy_process_group(traced)
    res["destroyed"] = traced not in w.pg_map
    dist.destroy_process_group()
    rec.close()
    with open(out, "w") as f:
        json.dump(res, f)
    time.sleep(0.05)  # see Recorder.EXIT_SETTLE_S


if __name__ == "__main__":
    main()
