"""Expert tensor parallelism (``ParallelPlan.etp``): Megatron-Core's expert groups over tp x dp ranks."""

from __future__ import annotations

import dataclasses

import pytest

from workloads.parallel import ParallelPlan, PlanError, plan_graphs
from workloads.zoo.transformer import zoo_config


def _moe():  # noqa: ANN202
    """Two Qwen3-MoE-like layers: 8 experts of width 32, top 2."""
    return dataclasses.replace(zoo_config("qwen3-30b-a3b"), name="moe-tiny", vocab=256, d_model=64, layers=2, heads=4,
                               kv_heads=2, head_dim=16, d_ff=32, experts=8, top_k=2)


def _moe_ops(plan: ParallelPlan) -> dict:
    (stage,) = plan_graphs(_moe(), plan, train=True, seq=32)
    return {op.name.removeprefix("layers.1.moe."): op for op in stage.graph.ops
            if op.group == "layers.1.moe" and op.name.startswith("layers.1.moe.")}


def test_etp_one_folds_the_tensor_parallel_ranks_into_the_expert_layer() -> None:
    """tp 2 x dp 4 with ep 8 (etp 1): whole experts (one a rank), each rank's 32 / 2 sequence-parallel tokens
    dispatched over 8 consecutive ranks (stride 1), no tensor-parallel gather or reduction around the experts."""
    ops = _moe_ops(ParallelPlan(tp=2, dp=4, ep=8, etp=1, sequence_parallel=True))
    a2a = ops["dispatch_all_to_all"]
    assert (a2a.attrs["group_size"], a2a.attrs["stride"]) == (8, 1)
    assert ops["tokens"].outputs[0].shape == (16, 64)  # microbatch 1 x 32 tokens / tp 2
    assert ops["experts_in"].inputs[1].shape == (1, 64, 2 * 32)  # one expert a rank, its whole width
    assert not any(op.kind in ("all_gather", "reduce_scatter") for op in ops.values())
    # the default (etp = tp) splits each expert's width over tp and takes ep from dp: stride tp
    ops = _moe_ops(ParallelPlan(tp=2, dp=4, ep=4, sequence_parallel=True))
    assert (ops["dispatch_all_to_all"].attrs["group_size"], ops["dispatch_all_to_all"].attrs["stride"]) == (4, 2)
    assert ops["experts_in"].inputs[1].shape == (2, 64, 32)  # 2 experts a rank, half of each width


@pytest.mark.parametrize("plan, parts", [
    (dict(tp=2, dp=4, ep=8, sequence_parallel=True), ("ep 8 does not divide dp 4", "with etp 1 (--etp 1)")),
    (dict(tp=2, dp=4, ep=3, etp=1, sequence_parallel=True), ("ep 3 does not divide experts=8",)),
    (dict(tp=2, dp=2, ep=8, etp=1, sequence_parallel=True), ("ep 8 does not divide tp x dp 4",)),
    (dict(tp=4, dp=2, ep=8, etp=2, sequence_parallel=True), ("etp: got 2 with tp 4", "expected 1 or tp")),
    (dict(tp=2, dp=4, ep=8, etp=1), ("etp: 1 with tp 2 and no sequence_parallel",)),
])
def test_bad_expert_plans_are_refused(plan: dict, parts: tuple[str, ...]) -> None:
    with pytest.raises(PlanError) as exc:
        plan_graphs(_moe(), ParallelPlan(**plan), train=True, seq=32)
    assert all(p in str(exc.value) for p in parts), str(exc.value)
