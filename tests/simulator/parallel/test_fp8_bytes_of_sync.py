"""Bytes of a step's data-parallel synchronisation in fp8: Megatron-Core's distributed optimizer all-gathers
Transformer Engine's fp8 parameters (``fp8_param``) from a ``torch.uint8`` buffer, 1 byte each
(megatron/core/distributed/distributed_data_parallel.py ``_allocate_buffers_for_parameters``); a graph in
``fp8_e4m3`` keeps 1-byte gradients, which FSDP2 accumulates and reduces in float32."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import (
    _accumulation_s,
    _collective_times,
    _fp8_weight_numel,
    _gathered_weight_bytes,
    _grad_buffer_divisor,
    _pipelined_reduce_scale,
    evaluate_plan,
    stage_graphs,
)
from tests.simulator.parallel.tiny_gqa import tiny_gqa
from workloads.parallel import ParallelPlan

#: 4 layers, d 128, 8 query heads of 16, 2 key/value heads, SwiGLU 256, untied head, vocabulary 512
CFG = tiny_gqa("tiny-fp8-sync", layers=4)
#: a layer's linear weights (q and o 128 x 128, k and v 128 x 32, SwiGLU 3 x 128 x 256) and all its parameters
LINEAR = 2 * 128 * 128 + 2 * 128 * 32 + 3 * 128 * 256
LAYER = LINEAR + 2 * 128
#: bf16 bytes of every parameter: embedding, 4 layers, final norm, head
BF16 = 2 * (512 * 128 + 4 * LAYER + 128 + 128 * 512)


def test_fp8_parameters_are_gathered_one_byte_each() -> None:
    plan = ParallelPlan(dp=8, microbatch=1, global_batch=8, zero_stage=1, fp8_param=True)
    g = stage_graphs(CFG, plan, seq=256, train=True, recompute="full", fp8_linears="current")[0].graph
    assert g.weight_bytes == BF16 and _fp8_weight_numel(g) == 4 * LINEAR
    assert _gathered_weight_bytes(g, plan) == BF16 - 4 * LINEAR  # 1 byte, not 2, for each fp8 linear weight
    assert _gathered_weight_bytes(g, dataclasses.replace(plan, fp8_param=False)) == BF16
    hw = load_hardware("dgx-h100")
    for fp8, want in ((True, BF16 - 4 * LINEAR), (False, BF16)):
        res = evaluate_plan(CFG, hw, dataclasses.replace(plan, fp8_param=fp8), train=True, seq=256,
                            recompute="full", fp8_linears="current")
        ag = _collective_times([("all_gather", float(want))], 8, hw, 1, pad_to=_grad_buffer_divisor(plan))
        gather = res.breakdown["communication_s"] - res.breakdown["dp_sync_exposed_s"]
        assert gather == pytest.approx(ag[("all_gather", float(want))], rel=1e-9)


def test_fp8_graph_gradients_are_one_byte_each() -> None:
    # FSDP2's float32 reduce_dtype over 1-byte gradients: 4x the bytes; the first of 8 backwards reads 1 and writes
    # 4 bytes a parameter, each later one reads 4 + 1 and writes 4: (5 + 7 x 9) / 8 = 8.5 bytes a parameter
    from simulator.engines.analytical import spec_of

    plan = ParallelPlan(pp=2, dp=8, microbatch=1, global_batch=64, fsdp=True)
    graphs = stage_graphs(CFG, plan, seq=256, train=True, recompute="full", dtype="fp8_e4m3")
    assert _pipelined_reduce_scale("fsdp2", graphs) == 4.0
    assert _pipelined_reduce_scale("", graphs) == 4.0
    hw = load_hardware("dgx-h100x2")
    dev = spec_of(hw)[0]
    rate = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    acc = _accumulation_s([[(sg, None)] for sg in graphs], plan, hw, 8, 4.0)
    for s, sg in enumerate(graphs):
        assert sg.graph.params == sg.graph.weight_bytes  # 1 byte a parameter
        assert acc[s][0] == pytest.approx(sg.graph.params * 8.5 / rate, rel=1e-12)


def test_stated_grad_reduce_dtype_prices_the_reduction() -> None:
    # Megatron-Core's grad_reduce_in_fp32: the main-gradient buffer reduced is float32, 4 bytes a bf16 gradient;
    # grad_reduce_in_fp32=False: the parameters' 2 bytes
    hw = load_hardware("dgx-h100")
    base = ParallelPlan(dp=8, microbatch=1, global_batch=8, zero_stage=1)
    sync = {}
    for dtype in ("fp32", "bf16"):
        res = evaluate_plan(CFG, hw, dataclasses.replace(base, grad_reduce_dtype=dtype), train=True, seq=256,
                            recompute="full")
        sync[dtype] = res.breakdown["dp_sync_s"]
    coll = _collective_times([("reduce_scatter", 2.0 * BF16), ("reduce_scatter", float(BF16))], 8, hw, 1,
                             pad_to=_grad_buffer_divisor(base))
    assert sync["fp32"] == pytest.approx(coll[("reduce_scatter", 2.0 * BF16)], rel=1e-9)
    assert sync["bf16"] == pytest.approx(coll[("reduce_scatter", float(BF16))], rel=1e-9)
    assert sync["fp32"] > sync["bf16"]
