"""MaxText data parallelism across TPU slices (``dcn_data_parallelism``): FSDP inside each slice, the
gradient shard all-reduced across slices over the data-centre network, pipelined across the backward scan."""

from __future__ import annotations

import pytest

from simulator.parallel.stacks import pipelined_reduce_exposed

#: maxtext-16b-2023 (zoo: 32 layers, width 5120, 32 heads of 256, ReLU MLP 32768, vocab 32768, one
#: embedding table): per layer 4 x 5120 x 8192 attention + 2 x 5120 x 32768 MLP + 2 norms of 5120
PARAMS_16B = 32 * (4 * 5120 * 8192 + 2 * 5120 * 32768 + 2 * 5120) + 32768 * 5120 + 5120
#: fabrics.dcn-v5e: 2 x 100 Gbps per 8-chip host = 25 Gbit/s per chip; xla-tpu net step latency 14 us
DCN_V5E = 25e9 / 8
NET_STEP_S = 14e-6


def test_pipelined_reduce_exposes_the_last_unit_and_the_backlog() -> None:
    assert pipelined_reduce_exposed(0.4, 4, 1.0) == pytest.approx(0.1)
    assert pipelined_reduce_exposed(0.4, 4, 0.0) == pytest.approx(0.4)  # nothing to hide behind
    assert pipelined_reduce_exposed(4.0, 4, 1.0) == pytest.approx(1.0 + (3.0 - 1.0))
    with pytest.raises(ValueError, match="units: got 0"):
        pipelined_reduce_exposed(1.0, 0, 1.0)


def _step(system: str, dp: int, shard_group: int = 0, param_dtype: str = ""):
    from simulator.hardware import load_hardware
    from simulator.parallel import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from workloads.parallel import ParallelPlan

    plan = ParallelPlan(dp=dp, fsdp=True, shard_group=shard_group, microbatch=6, global_batch=6 * dp,
                        param_dtype=param_dtype)
    return evaluate_plan("maxtext-16b-2023", load_hardware(system), plan, profile_options("maxtext-cf"), train=True,
                         seq=2048, recompute="full", dtype="bf16", framework="maxtext-cf")


def test_two_slices_gather_in_the_slice_and_all_reduce_the_bf16_shard_over_dcn() -> None:
    """train-072's plan (2x v5e-256, FSDP 256 in each slice): the all-gathers and reduce-scatters are the
    single slice's; the step adds one ring all-reduce of each chip's bf16 gradient shard between the two
    slices, 2 (s-1)/s x 2 P / 256 bytes over the chip's 25 Gbit/s DCN share plus 2 (s-1) net steps, of which
    only the last of the 33 units (32 scanned layers + the rest) is exposed."""
    one = _step("tpu-v5e-256", 256)
    two = _step("tpu-v5e-256x2", 512, shard_group=256)
    shard = 2.0 * PARAMS_16B / 256
    ar = shard / DCN_V5E + 2 * NET_STEP_S
    assert two.breakdown["fsdp_gather_s"] == pytest.approx(one.breakdown["fsdp_gather_s"], rel=1e-12)
    assert two.breakdown["dp_sync_s"] - one.breakdown["dp_sync_s"] == pytest.approx(ar, rel=1e-6)
    assert two.breakdown["dp_sync_exposed_s"] - one.breakdown["dp_sync_exposed_s"] == pytest.approx(ar / 33, rel=1e-6)
    # each slice updates its own 1/256 shard of the optimizer state, as one slice does
    assert two.breakdown["optimizer_s"] == pytest.approx(one.breakdown["optimizer_s"], rel=1e-12)
    assert two.latency_s - one.latency_s == pytest.approx(ar / 33, rel=1e-6)


def test_more_slices_move_the_ring_share_toward_twice_the_shard() -> None:
    """32 slices: 2 x 31/32 of the shard and 62 net steps."""
    one = _step("tpu-v5e-256", 256)
    many = _step("tpu-v5e-256x32", 8192, shard_group=256)
    shard = 2.0 * PARAMS_16B / 256
    ar = 2 * 31 / 32 * shard / DCN_V5E + 62 * NET_STEP_S
    assert many.breakdown["dp_sync_s"] - one.breakdown["dp_sync_s"] == pytest.approx(ar, rel=1e-6)


@pytest.mark.parametrize(("system", "dp", "group"), [("tpu-v5e-256", 256, 0), ("tpu-v5e-256x2", 512, 256)])
def test_stating_fp32_parameters_keeps_the_bf16_gradient_reduction(system: str, dp: int, group: int) -> None:
    """MaxText's default weight_dtype float32, stated as the plan's param_dtype, changes what is stored, not
    what is reduced: each weight is cast to bf16 before its dot, so its gradient is reduced in bf16 (inside
    the slice and over DCN), as with the dtype left unstated."""
    unset, fp32 = _step(system, dp, group), _step(system, dp, group, param_dtype="fp32")
    for key in ("dp_sync_s", "dp_sync_exposed_s", "fsdp_gather_s"):
        assert fp32.breakdown[key] == pytest.approx(unset.breakdown[key], rel=1e-12), key
