"""FSDP2 under ``torch.distributed.pipelining``: each stage's gradients are reduce-scattered after its last backward
of the step, in FSDP2's float32 ``reduce_dtype``, with the compute stream waiting on them
(``_PipelineStageBase._post_backward`` -> ``_root_post_backward_final_callback``; NeMo AutoModel's
``patched_backward_maybe_with_nosync`` @ cb97654), so the whole reduce-scatter is exposed; the once-a-step
all-gather moves each parameter once (not the optimizer's updated copies as well)."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import (
    _collective_times,
    _pipelined_reduce_scale,
    evaluate_plan,
    stage_graphs,
)
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.ir import Role
from workloads.parallel import ParallelPlan

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-pp-reduce", layers=4)
#: parameters of a layer: q and o 128 x 128, k and v 128 x 32, SwiGLU 3 x 128 x 256, two RMSNorms of 128
LAYER = 2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 256 + 2 * 128
#: bf16 parameter bytes of the two stages: embedding + 2 layers; 2 layers + final norm + head
STAGE_BYTES = (2 * (512 * 128 + 2 * LAYER), 2 * (2 * LAYER + 128 + 128 * 512))


def _plan() -> ParallelPlan:
    return ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64, fsdp=True)  # 8 microbatches a rank


def test_reduce_dtype_scale_of_the_fsdp2_stacks() -> None:
    graphs = stage_graphs(CFG, _plan(), seq=256, train=True, recompute="full")
    assert _pipelined_reduce_scale("fsdp2", graphs) == 2.0  # float32 reduce of bf16 gradients
    assert _pipelined_reduce_scale("", graphs) == 2.0  # no profile: PyTorch FSDP2 as torchtitan sets it
    # each gradient once; the weight role twice (the parameter and the optimizer's updated copy), weight_bytes once
    for sg, want in zip(graphs, STAGE_BYTES, strict=True):
        assert sg.graph.role_bytes(Role.GRADIENT) == want
        assert sg.graph.weight_bytes == want
        assert sg.graph.role_bytes(Role.WEIGHT) == 2 * want


@pytest.mark.parametrize("framework", ["", "fsdp2"])
def test_pipelined_fsdp_tail_is_the_fp32_reduce_scatter_in_full(framework: str) -> None:
    hw = load_hardware("dgx-h100x2")
    res = evaluate_plan(CFG, hw, _plan(), train=True, seq=256, recompute="full", framework=framework)
    coll = _collective_times([k for b in STAGE_BYTES for k in (("reduce_scatter", 2.0 * b), ("all_gather", b))],
                             8, hw, 1)
    rs = [coll[("reduce_scatter", 2.0 * b)] for b in STAGE_BYTES]
    ag = [coll[("all_gather", b)] for b in STAGE_BYTES]
    assert res.breakdown["dp_sync_exposed_s"] == res.breakdown["dp_sync_s"]  # nothing left to hide it behind
    assert res.breakdown["dp_sync_s"] in rs
    s = rs.index(res.breakdown["dp_sync_s"])
    # the step's tail: the whole reduce-scatter, one all-gather of the bf16 parameters, the stage's update
    assert res.latency_s - res.pipeline.step_s == pytest.approx(rs[s] + ag[s] + res.breakdown["optimizer_s"])
    assert rs[s] > 0.0 and ag[s] > 0.0


def test_each_backward_adds_its_gradients_to_the_fp32_accumulators() -> None:
    # FSDP2 without gradient sync: the first of the step's 8 backwards casts its bf16 gradient to float32 (read 2,
    # write 4 bytes a parameter), each later one adds into it (read 4 + 2, write 4): (6 + 7 x 10) / 8 = 9.5 bytes
    # a parameter and microbatch; in the parameters' dtype autograd keeps the first and adds in place: 7 x 6 / 8
    from simulator.engines.analytical import spec_of
    from simulator.parallel.compose import _accumulation_s

    hw = load_hardware("dgx-h100x2")
    dev = spec_of(hw)[0]
    rate = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    graphs = stage_graphs(CFG, _plan(), seq=256, train=True, recompute="full")
    per_stage = [[(sg, None)] for sg in graphs]
    fp32 = _accumulation_s(per_stage, _plan(), hw, 8, 2.0)
    same = _accumulation_s(per_stage, _plan(), hw, 8, 1.0)
    for s, b in enumerate(STAGE_BYTES):
        assert fp32[s][0] == pytest.approx(b / 2 * 9.5 / rate, rel=1e-12)
        assert same[s][0] == pytest.approx(b / 2 * 5.25 / rate, rel=1e-12)
