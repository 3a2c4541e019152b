"""Megatron's weight-gradient GEMMs accumulate into the main-gradient buffer: Transformer Engine's
``fuse_wgrad_accumulation`` (Megatron-Core, ``accumulate`` False on a step's first microbatch: beta = 0, else 1,
transformer_engine/pytorch/module/linear.py @ v2.9), Megatron-LM's ``wgrad_gemm_accum_fp32`` (beta = 1, C and D
fp32, megatron/fused_kernels/fused_weight_gradient_dense.cu @ d63c2541), and Megatron-LM's hook
``main_grad.add_(grad)`` where the fusion is off (fp16). Byte counts are worked by hand from the shapes."""

from __future__ import annotations

import dataclasses

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering.common import LoweringContext, lower
from simulator.lowering.gpu import MAIN_GRAD_ADD_SUFFIX, library_launches
from workloads.frameworks import (
    MAIN_GRAD_ADD_ATTR,
    MAIN_GRAD_DTYPE_ATTR,
    MAIN_GRAD_READ_ATTR,
    get_profile,
    main_grad_accumulation,
)
from workloads.ir import Attrs, GraphBuilder, Op, OpGraph
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.training import training_graph

# Qwen3-30B-A3B at EP 8 (train-059's plan): 16 local experts, d 2,048, fc1 2 x 768 wide, fc2 768 -> 2,048
LE, D, N1, N2 = 16, 2048, 1536, 768
FC1 = LE * D * N1  # 50,331,648 weights of the layer's experts_in on one GPU
FC2 = LE * N2 * D  # 25,165,824 of experts_out
# 512 sequences a step over 8 data-parallel ranks at micro-batch 1: 64 microbatches, the first overwrites
M = 512 // 8
LATER = (M - 1) / M


@pytest.fixture(scope="module")
def b200() -> LoweringContext:
    return LoweringContext(load_hardware("b200"), EvalOptions())


def _layer0(grad_dtype: str, global_batch: int = 512, fsdp: bool = False) -> dict[str, Op]:
    plan = ParallelPlan(ep=8, dp=8, microbatch=1, global_batch=global_batch, grad_reduce_dtype=grad_dtype, fsdp=fsdp)
    g = plan_graphs("qwen3-30b-a3b", plan, train=True, seq=4096, framework="megatron-core")[0].graph
    return {op.name: op for op in g if op.name.startswith(("layers.0.", "lm_head.", "embed."))}


@pytest.fixture(scope="module")
def fp32_layer() -> dict[str, Op]:
    return _layer0("fp32")


@pytest.fixture(scope="module")
def bf16_layer() -> dict[str, Op]:
    return _layer0("bf16")


def _plain(op: Op) -> Op:
    attrs = {k: v for k, v in op.attrs.items() if k not in (MAIN_GRAD_DTYPE_ATTR, MAIN_GRAD_READ_ATTR)}
    return dataclasses.replace(op, attrs=Attrs(attrs))


def test_profiles_name_their_wgrad_path() -> None:
    assert get_profile("megatron-core").wgrad_accumulation == "te-fused"
    assert get_profile("megatron-lm").wgrad_accumulation == "megatron-fused-fp32"
    assert get_profile("fsdp2").wgrad_accumulation == ""
    assert "transformer_engine.py lines 396, 567, 1158" in get_profile("megatron-core").wgrad_accumulation_source
    assert get_profile("megatron-core").describe()["wgrad_accumulation"] == "te-fused"
    assert get_profile("eager").describe()["wgrad_accumulation"] == "none"


def test_te_fused_marks_the_weight_gradient_gemms_only(bf16_layer: dict[str, Op]) -> None:
    ops = bf16_layer
    marked = sorted(n for n, op in ops.items() if MAIN_GRAD_DTYPE_ATTR in op.attrs)
    assert marked == ["layers.0.attn.out.bwd_b", "layers.0.attn.qkv.bwd_b", "layers.0.moe.experts_in.bwd_weight",
                      "layers.0.moe.experts_out.bwd_weight", "lm_head.logits.bwd_b"]
    for n in marked[:-1]:  # Transformer Engine's linears: 63 of the 64 calls accumulate
        assert ops[n].attrs[MAIN_GRAD_DTYPE_ATTR] == "bf16"
        assert ops[n].attrs[MAIN_GRAD_READ_ATTR] == pytest.approx(63 / 64)
    assert ops["lm_head.logits.bwd_b"].attrs[MAIN_GRAD_READ_ATTR] == 1.0  # apex's kernel, always beta = 1
    # the norms', the router's and the embedding's gradients are no GEMM: the graph's as they were
    assert MAIN_GRAD_DTYPE_ATTR not in ops["layers.0.moe.router.bwd"].attrs
    assert MAIN_GRAD_DTYPE_ATTR not in ops["embed.tokens.bwd"].attrs


def test_expert_gemms_of_one_layer_move_the_main_gradient(b200: LoweringContext, fp32_layer: dict[str, Op],
                                                          bf16_layer: dict[str, Op]) -> None:
    """fc1's weight gradient (16 x 2048 x 1536 = 50,331,648 elements): D written in the buffer's dtype on every call,
    C read on 63 of 64 calls, where the graph wrote bf16 once: fp32 4 x (1 + 63/64) - 2 = 5.9375 bytes more an
    element, 298,844,160 bytes; bf16 2 x (1 + 63/64) - 2 = 1.96875, 99,090,432 bytes."""
    for layer, extra in ((fp32_layer, 298_844_160.0), (bf16_layer, 99_090_432.0)):
        op = layer["layers.0.moe.experts_in.bwd_weight"]
        fused, plain = lower(op, b200), lower(_plain(op), b200)
        assert fused.split_k == plain.split_k and fused.tile == plain.tile  # the same kernel, more C traffic
        assert fused.dram_bytes - plain.dram_bytes == pytest.approx(extra)
        assert fused.memory_s > plain.memory_s
        assert "main gradient" in fused.notes
    # the layer's two expert GEMMs with fp32 main gradients: (50,331,648 + 25,165,824) x 5.9375 = 448,266,240 bytes,
    # the "about 450 MB a layer" of docs/training.md
    assert (FC1 + FC2) * (4 * (1 + LATER) - 2) == pytest.approx(448_266_240.0)


def test_the_first_microbatch_writes_without_reading(fp32_layer: dict[str, Op]) -> None:
    """One microbatch a step (global batch = dp x micro-batch): every call has ``is_first_microbatch``, beta = 0."""
    one = _layer0("fp32", global_batch=8)
    assert one["layers.0.attn.qkv.bwd_b"].attrs[MAIN_GRAD_READ_ATTR] == 0.0
    assert fp32_layer["layers.0.attn.qkv.bwd_b"].attrs[MAIN_GRAD_READ_ATTR] == pytest.approx(63 / 64)


def test_megatron_fsdp_turns_the_fusion_off() -> None:
    """Megatron-Bridge v0.2.0 training/config.py lines 1259-1261: gradient_accumulation_fusion False under
    Megatron FSDP."""
    ops = _layer0("", fsdp=True)
    assert not any(MAIN_GRAD_DTYPE_ATTR in op.attrs for op in ops.values())


def _one_linear(dtype: str) -> OpGraph:
    b = GraphBuilder("one", dtype)
    x, t = b.input("x", (64, 256)), b.input("t", (64, 512))
    h = b.op("matmul", [x, b.weight("w", (256, 512))], name="fc")
    b.op("mse_loss", [h, t], name="loss")
    return training_graph(b.build({"phase": "train"}))


def test_megatron_lm_fuses_fp32_main_gradients_on_every_call() -> None:
    g = main_grad_accumulation(_one_linear("bf16"), "megatron-fused-fp32", "fp32", 8)
    (op,) = [op for op in g if op.name == "fc.bwd_b"]
    assert op.attrs[MAIN_GRAD_DTYPE_ATTR] == "fp32" and op.attrs[MAIN_GRAD_READ_ATTR] == 1.0


def test_megatron_lm_fp16_adds_the_gradient_by_a_kernel(b200: LoweringContext) -> None:
    """fp16 main gradients (no fusion): the hook reads the 256 x 512 = 131,072-element gradient (2 bytes) and the
    buffer (2), writes the buffer (2): 786,432 bytes, one more kernel and launch."""
    g = main_grad_accumulation(_one_linear("fp16"), "megatron-fused-fp32", "fp16", 8)
    (op,) = [op for op in g if op.name == "fc.bwd_b"]
    assert op.attrs[MAIN_GRAD_ADD_ATTR] == "fp16" and MAIN_GRAD_DTYPE_ATTR not in op.attrs
    plain = lower(dataclasses.replace(op, attrs=Attrs({k: v for k, v in op.attrs.items() if k != MAIN_GRAD_ADD_ATTR})),
                  b200)
    hooked = lower(op, b200)
    assert hooked.dram_bytes - plain.dram_bytes == pytest.approx(256 * 512 * (2 + 2 + 2))
    assert hooked.kernels == plain.kernels + 1 and hooked.rule == plain.rule + MAIN_GRAD_ADD_SUFFIX
    assert library_launches(hooked.rule, hooked.kernels) == library_launches(plain.rule, plain.kernels) + 1


def test_a_stack_without_the_fusion_and_bad_modes() -> None:
    g = _one_linear("bf16")
    assert main_grad_accumulation(g, "", "fp32", 8) is g
    with pytest.raises(ValueError, match=r"main_grad_accumulation: mode; got 'te-fuse'.*did you mean 'te-fused'"):
        main_grad_accumulation(g, "te-fuse", "fp32", 8)
    with pytest.raises(ValueError, match=r"microbatches; got 0"):
        main_grad_accumulation(g, "te-fused", "fp32", 0)
