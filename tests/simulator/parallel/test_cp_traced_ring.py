"""PyTorch's ring attention traced into compiled blocks: each key/value exchange is waited on where it is
issued (``_functional_collectives._maybe_wrap_tensor`` under tracing), so under the torch.compile FSDP2
profiles none of the ring's collectives hides behind its attention; eager FSDP2 overlaps them as issued."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.parallel.stacks import get_stack_profile, ring_traced
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan

#: 2 layers, 8 query heads of 16, 2 key/value heads (GQA 4)
CFG = tiny_gqa("tiny-gqa-traced", layers=2)
_COLLECTIVES = ("all_gather", "all_to_all", "reduce_scatter", "all_reduce", "send", "recv")


@pytest.mark.parametrize(("name", "traced"), [("fsdp2", False), ("fsdp2-compile", True),
                                              ("fsdp2-compile-blocks", True), ("automodel-compile", True),
                                              ("automodel", False), ("megatron-core", False)])
def test_ring_is_traced_only_under_the_compiled_fsdp2_profiles(name: str, traced: bool) -> None:
    assert ring_traced(get_stack_profile(name)) is traced


def _step(framework: str) -> tuple[dict[str, float], float, float]:
    hw = load_hardware("dgx-h100")
    res = evaluate_plan(CFG, hw, ParallelPlan(cp=4, fsdp=True, microbatch=1, global_batch=1), train=True, seq=256,
                        recompute="full", framework=framework)
    collectives = sum(r.time_s for r in res.reports[0].records if r.kind in _COLLECTIVES)
    return dict(res.breakdown), collectives, res.latency_s


@pytest.mark.parametrize(("compiled", "eager_name"), [("fsdp2-compile", "fsdp2"), ("automodel-compile", "automodel")])
def test_compiled_ring_exposes_every_exchange(compiled: str, eager_name: str) -> None:
    # torchtitan's CP rows: fsdp2-compile against eager fsdp2, the same model code (complex RoPE, repeat_kv);
    # NeMo AutoModel's likewise over its own model code
    b, collectives, latency = _step(compiled)
    assert b["cp_comm_hidden_s"] == 0.0
    # one stage, one microbatch: the communication is every collective of the stage graph (the ring's
    # gathers, re-gathers and fp32 dK/dV permutes among them) plus FSDP2's exposed part, nothing hidden
    assert collectives > 0.0
    assert b["communication_s"] == pytest.approx(collectives + b["dp_sync_exposed_s"], rel=1e-12)
    eager, eager_collectives, eager_latency = _step(eager_name)
    assert eager_collectives == pytest.approx(collectives, rel=1e-12)  # the same exchanges, priced alike
    assert eager["cp_comm_hidden_s"] > 0.0
    assert eager["communication_s"] == pytest.approx(
        collectives + eager["dp_sync_exposed_s"] - eager["cp_comm_hidden_s"], rel=1e-12)
    # the compute is the same graph's: the compiled step is longer by exactly what eager hides
    assert b["compute_s"] == pytest.approx(eager["compute_s"], rel=1e-12)
    assert latency - eager_latency == pytest.approx(eager["cp_comm_hidden_s"], rel=1e-9)
