"""The helpers at the top of tests/ (synthetic.py, tracebuilder.py) importable from every
test directory; appended, so that nothing of tests/ shadows an installed module."""
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.append(_HERE)
