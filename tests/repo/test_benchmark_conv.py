"""benchmarks/suites/conv.py in miniature: the measuring child runs in this process on a batch of 2 and 64
digits, through the same `child` entry that the suite's fresh process runs, and what its records claim is
checked: every case present, with torch's values, a goal and both clocks."""
from __future__ import annotations

import pytest

from benchmarks.suites import conv as suite


@pytest.fixture(scope="module")
def measured(reference_picotorch):
    return suite.child(reference_picotorch, ["2", "1", "64"])


def test_every_case_is_measured_against_torch_with_torchs_values(measured):
    records = suite.records(measured)
    wanted = [f"{name}: {kind}" for name in suite.CASES for kind in ("forward", "forward+backward")]
    assert [r["case"] for r in records] == wanted + ["digits CNN: one training epoch"]
    for r in records:
        assert r["suite"] == "conv" and r["ours_s"] > 0 and r["baseline_s"] > 0, r
        assert r["same_values"] is True, f"{r['case']}: picotorch's result is not torch's"
        assert r["target_ratio"] == suite.GOALS["epoch" if "epoch" in r["case"] else r["case"].rsplit(": ", 1)[1]]
        assert r["cpu_ratio"] > 0, r


def test_the_epoch_starts_from_the_same_weights_on_the_same_batches(measured):
    ours, theirs = (float(v) for v in measured["digits CNN: one training epoch"]["first_epoch_loss"].split("/"))
    assert abs(ours - theirs) <= 1e-3 * max(1.0, abs(theirs)), (ours, theirs)
