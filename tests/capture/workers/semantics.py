"""Writes what a script sees about how it was run (``semantics.py OUT_JSON ARGS...``)."""
import json
import sys

import sibling_mod  # found only if sys.path[0] is this script's folder

with open(sys.argv[1], "w") as f:
    json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "sibling": sibling_mod.VALUE}, f)
