"""Analysis: pure functions over the op frame (no rendering, no rich).

``run_info`` loads and sanity-checks a run, ``match`` pairs the same collective
across ranks, ``summary``/``figures``/``timeline``/``compare`` compute the tables the
renderers draw, and ``partitioned.analyse`` ties them together: the one report, for a run
held whole (one partition) and for one too big for memory alike.
"""
