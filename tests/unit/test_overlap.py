"""backward_overlap on a hand-made frame: hidden vs exposed gradient communication."""
import pandas as pd

from commtrace.analysis.overlap import backward_overlap


def test_hidden_until_last_bucket_launch_exposed_after():
    # rank file f0, iteration 2: backward 0..100; bucket 0 runs 20..60, bucket 1 launched at 70, ends 130.
    frame = pd.DataFrame({
        "file": pd.Categorical(["f0", "f0", "f0"]),
        "iteration": [2, 2, 2],
        "phase": pd.Categorical(["backward", "backward", "forward"]),
        "bucket": pd.array([0, 1, None], dtype="Int64"),
        "t_start_ns": [20, 70, 5],
        "t_end_ns": pd.array([60, 130, 10], dtype="Int64"),
    })
    spans = pd.DataFrame({"rank": [0], "file": ["f0"], "phase": ["backward"], "module": ["Net"],
                          "iteration": [2], "t_begin_ns": [0], "t_end_ns": [100]})
    out = backward_overlap(frame, spans).loc[2]
    assert out["backward_ns"] == 100
    assert out["grad_comm_ns"] == 40 + 60
    # compute ends at the last launch (70): bucket 0 fully hidden (40), bucket 1 fully exposed (60)
    assert out["overlapped_ns"] == 40 and out["exposed_ns"] == 60
    assert out["overlap_pct"] == 40.0


def test_no_spans_gives_empty_table():
    assert backward_overlap(pd.DataFrame({"t_start_ns": [1]}), None).empty
