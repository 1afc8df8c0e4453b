"""Writes what a script sees about how it was run (``semantics.py OUT_JSON ARGS...``)."""
import json
import sys

import sibling_mod  # found only if sys.path[0] is this script's folder

with open(sys.argv[1], "w") as f:
    json.dump({"name": __name__, "argv": sys.argv, "path0": sys.path[0], "sibling": sibling_mod.VALUE,
               "file": __file__, "code_file": sys._getframe().f_code.co_filename,
               "loader": [type(__loader__).__name__, getattr(__loader__, "name", None),
                          getattr(__loader__, "path", None)],
               "package": __package__, "spec": repr(__spec__), "cached": __cached__,
               "builtins": type(__builtins__).__name__, "main_is_me": sys.modules["__main__"].__dict__ is globals(),
               "globals": sorted(globals())}, f)
