"""Run as ``-m ctpkg.main [ARGS...] OUT.json``: checks relative imports, __main__ and argv."""
import json
import sys

from . import helper
from .helper import VALUE

if __name__ == "__main__":
    with open(sys.argv[-1], "w") as f:
        json.dump({"name": __name__, "package": __package__, "argv": sys.argv, "value": VALUE,
                   "same": helper.VALUE == VALUE}, f)
