"""benchmarks/suites/compile.py in miniature: every case runs on tiny inputs, in this process, through the same
`child` entry that the suite's fresh processes run, and what its records claim is checked. The GPU case's code
path (torch eager and torch.compile beside picotorch's fused and eager runs) runs on the emulator, with
torch.compile's `eager` backend: Inductor's C++ compile would take a minute here, and its times would mean
nothing."""
from __future__ import annotations

import pytest

from benchmarks.suites import compile as suite
from course.cuda.status import emulator_available

pytestmark = pytest.mark.skipif(not emulator_available(),
                                reason="no g++ here: the CUDA emulator cannot run (not counted as passed)")

N = 4096
FLOAT32_BYTES = 4


@pytest.fixture(scope="module")
def pt(reference_picotorch):
    return reference_picotorch


def test_the_chain_case_runs_in_miniature_with_its_gpu_code_path(pt):
    measured = suite.child(pt, ["chain", "emu", str(N), "1", "eager"])
    records = suite.chain_records(measured)
    label = f"chain of {suite.CHAIN_OPS} elementwise ops, 2^12 float32, emulator"
    assert [r["case"] for r in records] == [f"{label}: fused vs unfused", f"{label}: fused kernel",
                                            f"{label}: eager picotorch", f"{label}: torch.compile (eager)"]
    assert all(r["suite"] == "compile" and r["ours_s"] > 0 and r["baseline_s"] > 0 for r in records), records
    assert sum(measured["captured_ops"].values()) == suite.CHAIN_OPS and measured["fused_ops"] == {"fused": 1}

    fused_vs_unfused = records[0]
    assert fused_vs_unfused["fused_equals_torch"] and fused_vs_unfused["eager_equals_torch"], fused_vs_unfused
    assert records[-1]["compile_equals_torch"], records[-1]
    assert fused_vs_unfused["fused_launches"] == 1 < suite.CHAIN_OPS <= fused_vs_unfused["unfused_launches"]
    # the fused kernel stores each result once and reads both inputs; eager picotorch stores every op's result
    assert fused_vs_unfused["fused_store_bytes"] == N * FLOAT32_BYTES
    assert fused_vs_unfused["unfused_store_bytes"] >= suite.CHAIN_OPS * N * FLOAT32_BYTES
    assert 2 * N * FLOAT32_BYTES <= fused_vs_unfused["fused_load_bytes"] < fused_vs_unfused["unfused_load_bytes"]


def test_the_chain_and_sum_case_runs_in_miniature(pt):
    measured = suite.child(pt, ["chain_sum", "emu", str(N), "1"])
    (record,) = suite.chain_sum_records(measured)
    assert record["one_kernel_equals_torch"] and record["chain_then_sum_equals_torch"], record
    assert measured["one_kernel_ops"] == {"fused": 1} and measured["chain_then_sum_ops"] == {"fused": 1, "sum": 1}
    assert (record["one_kernel_launches"], record["chain_then_sum_launches"]) == (1, 2), record
    # one kernel stores a sum per row; the other stores the chain's every element, then the sums
    rows = N // suite.ROW
    assert record["one_kernel_store_bytes"] == rows * FLOAT32_BYTES, record
    assert record["chain_then_sum_store_bytes"] == (N + rows) * FLOAT32_BYTES, record
    assert record["one_kernel_load_bytes"] < record["chain_then_sum_load_bytes"], record


def test_the_mlp_case_runs_in_miniature_and_its_losses_are_torchs(pt):
    sides = {side: suite.child(pt, ["mlp", side, "1", "2"]) for side in suite.MLP_SIDES}
    assert sides["torch eager"]["losses"][0] > sides["torch eager"]["losses"][2], "SGD must lower the loss"
    compiled_vs_eager, compiled_vs_torch = suite.mlp_records(sides)
    assert compiled_vs_eager["same_losses_compiled_eager"] and compiled_vs_eager["same_losses_compiled_torch"], sides
    # one graph (no break: the step would run eagerly), replayed without a recompile
    assert (compiled_vs_eager["graphs"], compiled_vs_eager["recompiles"]) == (1, 0), compiled_vs_eager
    # the loss is cross_entropy's operators, forward and backward, inside that graph
    op_counts = sides["picotorch compiled"]["op_counts"]
    assert all(op_counts.get(op) == 1 for op in ("log_softmax", "nll_loss", "nll_loss_backward")), op_counts
    assert compiled_vs_eager["baseline"] == "eager picotorch" and compiled_vs_torch["baseline"] == "torch eager"
    assert all(r["ours_s"] > 0 and r["baseline_s"] > 0 for r in (compiled_vs_eager, compiled_vs_torch))


def test_losses_that_differ_beyond_float32_tolerance_are_not_the_same():
    losses = [2.5, 2.4, 2.3]
    assert suite.same_losses(losses, [v * (1 + 1e-7) for v in losses])
    assert not suite.same_losses(losses, [2.5, 2.4, 2.3001])
