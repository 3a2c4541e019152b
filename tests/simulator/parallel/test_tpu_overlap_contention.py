"""What an overlapped FSDP collective costs the TPU TensorCore's compute beside it (simulator/parallel/stacks.py):
its HBM traffic shared with the compute's memory-bound ops, and a reduce-scatter's additions on the vector unit;
by hand, and in a MaxText step."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.parallel.stacks import (
    COLLECTIVE_HBM_PASSES,
    hbm_contention_s,
    profile_options,
    vpu_reduce_s,
)
from workloads.parallel import ParallelPlan


def test_overlap_window_shares_hbm_by_hand():
    """A 1 ms memory-bound fusion, a 4 ms GEMM reading 1 ms of HBM and a 1 ms GEMM near the ridge (0.9 ms of HBM),
    half of each overlapped by a collective streaming 40% of the HBM rate: each keeps 60% of the bandwidth."""
    ops = [(1e-3, 1e-3), (4e-3, 1e-3), (1e-3, 0.9e-3)]
    # fusion: 1 / 0.6 - 1 = 0.6667 ms; GEMM: 1 / 0.6 = 1.667 < 4 ms, unslowed; near-ridge GEMM: 1.5 - 1 = 0.5 ms
    assert hbm_contention_s(ops, [(0.5, 0.4)]) == pytest.approx(0.5 * (1e-3 / 0.6 - 1e-3 + 0.9e-3 / 0.6 - 1e-3))
    # a collective wanting 70%: max-min fairness leaves every op half (fusion +1 ms, near-ridge GEMM +0.8 ms)
    assert hbm_contention_s(ops, [(0.5, 0.7)]) == pytest.approx(0.5 * (1e-3 + 0.8e-3))
    # nothing overlapped, or nothing streamed: nothing lost
    assert hbm_contention_s(ops, [(0.0, 0.7), (0.5, 0.0)]) == 0.0


def test_reduce_scatter_additions_on_the_vector_unit_by_hand():
    """One 64B MaxText layer's bf16 gradient (1.007e9 values) reduce-scattered over a v5e-256: 255/256 of the
    values are added once each at the v5e VPU's 6.16 TFLOP/s (8 x 128 lanes x 4 ALUs x 1.503 GHz)."""
    assert vpu_reduce_s(1.007e9, 256, 6.16e12) == pytest.approx(1.007e9 * 255 / 256 / 6.16e12)
    assert vpu_reduce_s(1.007e9, 256, 6.16e12) == pytest.approx(1.628e-4, rel=1e-3)
    assert vpu_reduce_s(1.007e9, 1, 6.16e12) == 0.0
    with pytest.raises(ValueError, match="vector_flops_per_s"):
        vpu_reduce_s(1e9, 4, 0.0)


def test_collective_hbm_passes_count_the_ring():
    # an all-gather writes what it receives and reads what it sends; a reduce-scatter also reads its own partials
    assert COLLECTIVE_HBM_PASSES == {"all_gather": 2.0, "reduce_scatter": 3.0}


def test_maxtext_step_pays_the_overlap_on_its_tensorcore():
    """Llama 2 7B on a v6e-8, FSDP 8: with its reductions overlapped (maxtext-sc, a SparseCore offload) the step adds
    the breakdown's HBM contention and VPU additions to its tail; the VPU part is the 6.74e9 bf16 gradient values x
    7/8 at the v6e catalog's vector rate, for the hidden share of the collectives; maxtext-serial,
    whose collectives overlap nothing, pays neither."""
    hw = load_hardware("tpu-v6e-8")
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    res = {p: evaluate_plan("llama-2-7b", hw, plan, profile_options(p), train=True, seq=2048, recompute="full",
                            dtype="bf16", framework=p) for p in ("maxtext-sc", "maxtext-serial")}
    res["maxtext"] = res["maxtext-sc"]
    a, b = res["maxtext"].breakdown, res["maxtext-serial"].breakdown
    dev = hw.device
    vec = dev.compute.vector_flops_per_s["fp32"] * dev.efficiency.vector_peak_fraction
    assert vec == pytest.approx(7.17e12 * dev.efficiency.vector_peak_fraction)
    # only the hidden share of the collectives adds its sums to the TensorCore (the exposed part is in the tail)
    busy = a["fsdp_gather_s"] + a["dp_sync_s"]
    hidden = (busy - a["dp_sync_exposed_s"]) / busy
    assert hidden == pytest.approx(0.89, abs=0.01)
    assert a["fsdp_vpu_reduce_s"] == pytest.approx(6.738e9 * 7 / 8 / vec * hidden, rel=0.01)
    assert 0.0 < a["fsdp_hbm_contention_s"] < a["compute_s"]
    assert "fsdp_hbm_contention_s" not in b and "fsdp_vpu_reduce_s" not in b
    assert res["maxtext-serial"].latency_s - res["maxtext"].latency_s == pytest.approx(
        b["dp_sync_exposed_s"] - a["dp_sync_exposed_s"] - a["fsdp_hbm_contention_s"] - a["fsdp_vpu_reduce_s"],
        rel=1e-9)


def test_compute_ops_leave_out_the_composition_s_communication_kinds():
    from simulator.parallel import stacks
    from simulator.parallel.compose import COMMUNICATION_KINDS

    assert stacks._COMMUNICATION_KINDS == COMMUNICATION_KINDS


def test_maxtext_runs_its_gradient_reductions_serial_as_libtpu_defaults():
    """The same step under maxtext (XLA:TPU's defaults: all-gathers asynchronous, no reduce-scatter or all-reduce
    asynchronous): every reduction exposed, the all-gathers hidden but the first (one of 2 x 33 units: 32 layers and
    the rest); the reductions overlap nothing, so they add no VPU sums and no HBM contention of their own."""
    hw = load_hardware("tpu-v6e-8")
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    res = {p: evaluate_plan("llama-2-7b", hw, plan, profile_options(p), train=True, seq=2048, recompute="full",
                            dtype="bf16", framework=p) for p in ("maxtext", "maxtext-sc")}
    a, sc = res["maxtext"].breakdown, res["maxtext-sc"].breakdown
    assert a["dp_sync_s"] == sc["dp_sync_s"] and a["fsdp_gather_s"] == sc["fsdp_gather_s"]
    assert a["dp_sync_exposed_s"] == pytest.approx(a["dp_sync_s"] + a["fsdp_gather_s"] / 2 / 33, rel=1e-9)
    assert a.get("fsdp_vpu_reduce_s", 0.0) == 0.0
    # only the gathers' hidden seconds share the HBM: their window, at the gathers' demand alone
    assert 0.0 < a["fsdp_hbm_contention_s"] < sc["fsdp_hbm_contention_s"]
    assert res["maxtext"].latency_s - res["maxtext-sc"].latency_s == pytest.approx(
        a["dp_sync_exposed_s"] - sc["dp_sync_exposed_s"] + a["fsdp_hbm_contention_s"] - sc["fsdp_hbm_contention_s"]
        - sc["fsdp_vpu_reduce_s"], rel=1e-9)
