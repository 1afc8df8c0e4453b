#!/bin/sh
# Trace examples/bucket_sweep.py at three DDP bucket caps, then compare the runs:
# fewer, larger gradient all_reduces per step as the cap grows (same bytes).
#
#   sh examples/bucket_sweep.sh              # from the repository root
#   PYTHON=.venv/bin/python sh examples/bucket_sweep.sh
set -e
PYTHON=${PYTHON:-python}
OUT=${OUT:-commtrace-out}
HERE=$(dirname "$0")
for cap in 0.25 1 25; do
    rm -rf "$OUT/sweep-$cap"
    "$PYTHON" -m commtrace run -o "$OUT/sweep-$cap" "$HERE/bucket_sweep.py" --bucket-cap-mb "$cap"
done
"$PYTHON" -m commtrace compare "$OUT/sweep-25" "$OUT/sweep-1" "$OUT/sweep-0.25" --html "$OUT/sweep.html"
echo "commtrace: the comparison as a page: $OUT/sweep.html (step time and exposed communication per run)"
