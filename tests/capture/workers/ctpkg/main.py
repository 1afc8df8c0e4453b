"""Run as ``-m ctpkg.main OUT_JSON``: checks relative imports and __main__."""
import json
import sys

from . import helper
from .helper import VALUE

if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump({"name": __name__, "package": __package__, "argv": sys.argv, "value": VALUE,
                   "same": helper.VALUE == VALUE}, f)
