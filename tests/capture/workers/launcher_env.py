"""Reads launcher variables the way trainers do, and says what it found.

usage: launcher_env.py read|nothing|master|walk

``read``: looks up LOCAL_RANK with ``in`` (as PyTorch Lightning does) and RANK
with ``os.getenv``, and prints them as JSON; ``nothing``: reads no launcher variable;
``master``: prints MASTER_ADDR and MASTER_PORT; ``walk``: walks the whole environment
for a prefix (as tqdm does when ``import torch`` imports it) and copies it (as fsspec does
when torch.distributed.checkpoint imports it) and reads no launcher variable.
"""
import json
import os
import sys

if sys.argv[1] == "read":
    local = os.environ["LOCAL_RANK"] if "LOCAL_RANK" in os.environ else None
    print(json.dumps({"LOCAL_RANK": local, "RANK": os.getenv("RANK")}), flush=True)
elif sys.argv[1] == "master":
    print(json.dumps({"MASTER_ADDR": os.environ["MASTER_ADDR"], "MASTER_PORT": os.environ["MASTER_PORT"]}), flush=True)
elif sys.argv[1] == "walk":
    found = {k: v for k, v in os.environ.items() if k.startswith("LAUNCHER_ENV_TEST_")}
    found.update((v, v) for v in os.environ.values() if v == "LAUNCHER_ENV_TEST_VALUE")
    for copy in (dict(os.environ), os.environ.copy(), {**os.environ}):
        found.update((k, v) for k, v in copy.items() if k.startswith("LAUNCHER_ENV_TEST_"))
    print(json.dumps(found), flush=True)
else:
    print(json.dumps({}), flush=True)
