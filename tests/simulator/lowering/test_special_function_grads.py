"""Gradients of transcendental elementwise ops on a GPU: the FP32 instructions and MUFU ops of eager
PyTorch's backward formulas (hwmodels.gpu.ELEMENTWISE_BWD_INSTRUCTIONS, tools/autograd/derivatives.yaml)."""

from __future__ import annotations

import pytest

from hwmodels import gpu
from simulator.engines.analytical import EvalOptions
from simulator.hardware import load_hardware
from simulator.lowering import LoweringContext, gpu_vector_flops, lower, sfu_ops
from workloads.dtypes import DType
from workloads.ir import Attrs, Op, TensorSpec

N = 1 << 20


def _grad(fn: str) -> Op:
    """The gradient of unary ``fn`` over N fp16 elements as training graphs emit it: ``elementwise_bwd``
    reading ``dy`` and the op's input, writing ``dx``."""
    t = lambda name: TensorSpec(name, (N,), DType.FP16)  # noqa: E731
    return Op(f"{fn}.bwd", "elementwise_bwd", (t("dy"), t("x")), (t("dx"),), Attrs({"op": fn}))


def test_gradient_counts_by_hand():
    # gelu_backward: erf (1 MUFU + 19) + exp (1 MUFU + 6) + 6 FMUL/FFMA = 2 MUFU + 31 FP32 per element
    gelu = _grad("gelu")
    assert gpu_vector_flops(gelu) == 2 * 31 * N and sfu_ops(gelu) == 2 * N
    # sin' = cos: the precise cos polynomial (12) and one FMUL, no MUFU
    sin = _grad("sin")
    assert gpu_vector_flops(sin) == 2 * 13 * N and sfu_ops(sin) == 0.0
    # exp' reuses the saved output: one FMUL and no special function (was charged one MUFU)
    exp = _grad("exp")
    assert gpu_vector_flops(exp) == 2 * N and sfu_ops(exp) == 0.0
    # silu_backward recomputes the sigmoid: exp + IEEE division (2 MUFU + 12) + 4
    assert (gpu_vector_flops(_grad("silu")), sfu_ops(_grad("silu"))) == (2 * 16 * N, 2 * N)
    assert gpu.ELEMENTWISE_BWD_INSTRUCTIONS["tanh"] == (0, 2)


def test_ops_outside_the_gradient_table_keep_their_semantic_count():
    # abs' = sign(x) * dy: the semantic backward count, no special function
    ab = _grad("abs")
    assert gpu_vector_flops(ab) == float(ab.flops) and sfu_ops(ab) == 0.0


def test_gelu_gradient_time_on_an_a100_by_hand():
    # 1 Mi fp16 elements: FMA pipe 2 x 31 x N FLOP at 19.5 TFLOP/s x vector_fraction, SFU 2 N at
    # 16 per SM per clock x 108 SMs x 1.41 GHz; the two pipes overlap
    a100 = load_hardware("a100-sxm4-40gb")
    ctx = LoweringContext(a100, EvalOptions())
    p = ctx.params("fp32")
    kc = lower(_grad("gelu"), ctx)
    fma_s = 2 * 31 * N / (19.5e12 * p.vector_fraction)
    sfu_s = 2 * N / (16 * 108 * 1.41e9)
    assert kc.compute_s == pytest.approx(max(fma_s, sfu_s), rel=1e-9)
