"""Training batch norm: a reduction pass before the elementwise pass, so large operands are read twice.

The forward normalises with the batch's statistics and the backward's dx needs the batch sums of dy and
dy * x_hat, so both run a reduction over their operands before the pass that reads them again (PyTorch's
``batch_norm_collect_statistics_kernel`` / ``batch_norm_transform_input_kernel`` and
``batch_norm_backward_reduce_kernel`` / ``batch_norm_backward_elemt_kernel``). Checked by hand: the DRAM
bytes of one op alone, at inference, in training, in the backward, and for a tensor small enough to stay on
chip.
"""

from __future__ import annotations

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.lowering.gpu import batchnorm_second_read_bytes
from workloads.dtypes import DType
from workloads.ir import GraphBuilder, Role

NO_L2 = EvalOptions(l2_residency=False)


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-80gb")


def _bn(shape, dtype="fp16", training=True, backward=False):
    b = GraphBuilder("bn", dtype=dtype)
    x = b.tensor("x", shape, DType(dtype))
    scale = b.tensor("bn.weight", (shape[1],), DType(dtype), Role.WEIGHT)
    shift = b.tensor("bn.bias", (shape[1],), DType(dtype), Role.WEIGHT)
    if backward:
        dy = b.tensor("dy", shape, DType(dtype))
        b.op("batchnorm_bwd", [dy, x, scale], name="bn_bwd")
    else:
        b.op("batchnorm", [x, scale, shift], name="bn", training=training)
    return b.build()


def test_inference_streams_x_once(a100):
    n = 256 * 256 * 56 * 56  # 411 MB in fp16: larger than L2 and than the chip's 46 MB of registers and smem
    r = evaluate(_bn((256, 256, 56, 56), training=False), a100, NO_L2).records[0]
    assert r.rule == "bandwidth"
    assert r.dram_bytes == pytest.approx(2 * n * 2 + 2 * 256 * 2)  # x read, y written, scale and shift


def test_training_forward_reads_x_twice(a100):
    n = 256 * 256 * 56 * 56
    r = evaluate(_bn((256, 256, 56, 56)), a100, NO_L2).records[0]
    assert r.rule == "bandwidth-two-pass"
    # statistics pass over x, then x read again and y written (the 411 MB tensor does not fit in the 40 MiB L2)
    assert r.dram_bytes == pytest.approx(3 * n * 2 + 2 * 256 * 2)
    plain = evaluate(_bn((256, 256, 56, 56), training=False), a100, NO_L2).records[0]
    assert r.time_s > 1.4 * plain.time_s


def test_training_backward_reads_dy_and_x_twice(a100):
    n = 256 * 512 * 28 * 28
    r = evaluate(_bn((256, 512, 28, 28), backward=True), a100, NO_L2).records[0]
    # reduction pass over dy and x, then dy and x again and dx written; dgamma, dbeta written
    assert r.dram_bytes == pytest.approx(5 * n * 2 + 256 * 2 + 2 * 512 * 2)


def test_second_read_from_l2_when_it_fits():
    # an L40S holds 51.8 MB in its registers and shared memory (142 SMs x 364 KiB) and has a 96 MiB L2: a
    # 64.2 MB operand is read twice, the second time from L2
    l40s = load_hardware("l40s")
    n = 80 * 256 * 28 * 28 * 4
    g = _bn((80, 256, 28, 28), dtype="fp32")
    assert batchnorm_second_read_bytes(next(iter(g)), _params(l40s)) == n
    r = evaluate(g, l40s).records[0]
    assert r.dram_bytes == pytest.approx(2 * n + 2 * 256 * 4)
    # with the engine's L2 residency rule off, from DRAM
    assert evaluate(g, l40s, NO_L2).records[0].dram_bytes == pytest.approx(3 * n + 2 * 256 * 4)
    # on an A100 the same bytes exceed the 40 MiB L2: the second read is DRAM traffic
    a100 = load_hardware("a100-sxm4-80gb")
    assert evaluate(g, a100, NO_L2).records[0].dram_bytes == pytest.approx(3 * n + 2 * 256 * 4)


def test_a_tensor_that_stays_on_chip_is_read_once(a100):
    g = _bn((8, 64, 28, 28))  # 0.8 MB
    assert batchnorm_second_read_bytes(next(iter(g)), _params(a100)) == 0
    assert evaluate(g, a100).records[0].rule == "bandwidth"


def _params(dev):
    from hwmodels.gpu import gpu_params

    return gpu_params(dev, "fp32")
