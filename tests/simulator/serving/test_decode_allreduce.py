"""The tensor-parallel all-reduces of a serving decode step: how many, of what size, priced by which rule.

These pin the accounting docs/serving.md ("The decode step under load", all-reduce paragraph) compares with
the engines' own all-reduce kernels: Llama 3 70B on 4 H100s carries one all-reduce after the vocab-parallel
embedding and two a layer (attention output, MLP down projection), each of ``batch x hidden x 2`` bytes,
priced as NCCL's tuner would run them (ring, LL protocol at these sizes)."""

from __future__ import annotations

import pytest


def _decode_step(framework: str, model: str, system: str, tp: int, batch: int):  # noqa: ANN202
    from simulator.parallel.compose import evaluate_plan
    from simulator.serving.config import ServeConfig
    from simulator.serving.setup import _hardware, _options
    from workloads.parallel import ParallelPlan

    opts, _profile = _options(ServeConfig(framework=framework), None)
    return evaluate_plan(model, _hardware(system), ParallelPlan(tp=tp), opts, phase="prefill", seq=1, batch=batch,
                         dtype="bf16")


@pytest.mark.parametrize(("tp", "batch"), [(4, 16), (4, 40), (8, 64)])
def test_70b_decode_step_carries_161_allreduces_of_the_batch_activations(tp: int, batch: int) -> None:
    from hwmodels.collectives import select_algorithm

    res = _decode_step("vllm-v0", "llama-3-70b", "dgx-h100", tp, batch)
    recs = [r for rep in res.reports for r in rep.records if r.kind == "all_reduce"]
    names = [r.name for r in recs]
    assert len(recs) == 1 + 2 * 80  # embedding + (attention out, MLP down) x 80 layers
    assert names[0] == "embed.tokens_all_reduce" and names[-1] == "layers.79.mlp.down_all_reduce"
    size = batch * 8192 * 2  # bf16 activations of the batch, hidden 8192
    want = float(select_algorithm("all_reduce", size, tp, "dgx-h100").time_s)
    assert {r.rule for r in recs} == {"ring-ll-all_reduce"}  # NCCL ring, LL protocol below 1 MiB
    for r in recs:
        assert float(r.time_s) == pytest.approx(want, rel=1e-9)
    # the all-reduces are part of the step's latency (TP ranks run in lock step; nothing overlaps them)
    assert float(res.latency_s) > len(recs) * want


def test_decode_allreduce_price_grows_with_the_padded_batch_not_below_the_floor() -> None:
    """At 16-256 KiB on 4 H100s the price is the NCCL LL floor (one size-independent figure); past it it grows."""
    from hwmodels.collectives import select_algorithm

    t = [float(select_algorithm("all_reduce", b * 8192 * 2, 4, "dgx-h100").time_s) for b in (1, 8, 16, 40, 64)]
    assert t[1] == pytest.approx(t[0], rel=1e-9) and t[2] == pytest.approx(t[0], rel=1e-9)
    assert t[2] < t[3] < t[4]
