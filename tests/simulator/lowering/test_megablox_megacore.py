"""MaxText's Megablox grouped matmul on a megacore chip: only the output-column tiles are split over the two
TensorCores (``gmm`` and ``tgmm`` grids with ``dimension_semantics=("parallel", "arbitrary", "arbitrary")``,
src/MaxText/kernels/megablox/backend.py @ 3eb77db3c), so an odd tile count leaves one core a tile more."""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels.catalog import load_device
from simulator.engines.analytical import EvalOptions
from simulator.lowering.common import LoweringContext, lower
from simulator.lowering.tpu import megacore_tile_split
from workloads.dtypes import DType
from workloads.ir import Attrs, Op, TensorSpec

BF16 = DType("bf16")
# DeepSeek-V3 on one v5p chip (train-132): 6 x 8192 tokens x top-8 = 393,216 rows over 256 experts,
# d_model 7168, expert width 2048 (w0 and w1 fused as the graph's 4096-wide up-projection)
E, ROWS, D, FF = 256, 1536, 7168, 2048
BASE = {"tokens": E * ROWS, "experts_active": E, "tile_rows": 512}


def _op(kind: str, a: tuple[int, ...], w: tuple[int, ...], out: tuple[int, ...], **attrs: int) -> Op:
    return Op(f"moe.{kind}", kind, (TensorSpec("a", a, BF16), TensorSpec("w", w, BF16)),
              (TensorSpec("y", out, BF16),), Attrs({**BASE, **attrs}), "moe")


def _ratio(op: Op, device: str) -> float:
    """Array time of ``op`` with its n tile over the time without it (the even split over the cores); an input
    gradient's read of its second call's output (the same in both) left out."""
    ctx = LoweringContext(load_device(device), EvalOptions())
    bare = dataclasses.replace(op, attrs=Attrs({k: v for k, v in op.attrs.items() if k != "tile_cols"}))
    one = dataclasses.replace(op, attrs=Attrs({k: v for k, v in op.attrs.items() if k != "column_calls"}))
    t = lower(op, ctx).compute_s - lower(one, ctx).compute_s if op.kind == "grouped_matmul_bwd_data" else 0.0
    return (lower(op, ctx).compute_s - t) / (lower(bare, ctx).compute_s - t)


def test_split_factor_by_hand():
    # 7 tiles of 1024 over 7168 columns: 4 on one core where 3.5 is the even share; Llama 4's 5120: 3 of 5
    assert megacore_tile_split(7168, 1024, 2) == pytest.approx(8 / 7)
    assert megacore_tile_split(5120, 1024, 2) == pytest.approx(6 / 5)
    assert megacore_tile_split(2048, 1024, 2) == megacore_tile_split(4096, 1024, 2) == 1.0
    assert megacore_tile_split(1024, 1024, 2) == 2.0  # one tile: the second core idle
    assert megacore_tile_split(7168, 1024, 1) == megacore_tile_split(7168, 0, 2) == 1.0


def test_deepseek_v3_expert_gemms_on_v5p():
    """Which of the six expert GEMMs of a layer have an odd tile count on v5p: the down-projection's forward
    (n = d_model), the up-projection's dlhs (n = d_model: the backward gmm keeps the forward's tn) and the
    down-projection's weight gradient (tgmm, n = d_model); the up-projection's forward and tgmm run w0 and w1
    as two calls of 2048 columns, two tiles each."""
    up = (E, ROWS, D), (E, D, 2 * FF), (E, ROWS, 2 * FF)
    down = (E, ROWS, FF), (E, FF, D), (E, ROWS, D)
    cols = {"tile_cols": 1024}
    assert _ratio(_op("grouped_matmul", *down, **cols), "tpu-v5p") == pytest.approx(8 / 7)
    assert _ratio(_op("grouped_matmul", *up, **cols, column_calls=2), "tpu-v5p") == pytest.approx(1.0)
    # dlhs of the up-projection: dy (E, rows, 2ff) against w_in, output d_model columns
    dlhs = _op("grouped_matmul_bwd_data", up[2], up[1], up[0], **cols, column_calls=2)
    assert _ratio(dlhs, "tpu-v5p") == pytest.approx(8 / 7)
    # tgmm: x^T dy per expert, n the weight's last axis
    dw_down = _op("grouped_matmul_bwd_weight", down[0], down[2], down[1], **cols)
    dw_up = _op("grouped_matmul_bwd_weight", up[0], up[2], up[1], **cols, column_calls=2)
    assert _ratio(dw_down, "tpu-v5p") == pytest.approx(8 / 7)
    assert _ratio(dw_up, "tpu-v5p") == pytest.approx(1.0)


def test_one_core_chips_split_nothing():
    # v5e and v6e have one TensorCore a chip: the same down-projection is priced as before
    down = (E, ROWS, FF), (E, FF, D), (E, ROWS, D)
    for device in ("tpu-v5e", "tpu-v6e"):
        assert _ratio(_op("grouped_matmul", *down, tile_cols=1024), device) == pytest.approx(1.0)


def test_maxtext_graph_carries_the_tile_to_the_backward():
    """The maxtext profiles build the experts' grouped matmuls with tn = 1024 (tile_mlp_dim / tile_embed_dim of
    configs/base.yml @ 3eb77db3c), the gated up-projection as two column calls, and the derived backward ops
    keep both; a GPU stack sets neither."""
    from workloads.training import training_graph
    from workloads.zoo.transformer import build, zoo_config

    cfg = dataclasses.replace(zoo_config("mixtral-8x7b"), layers=1)
    for framework, tile in (("maxtext", 1024), ("megatron-core", None)):
        fwd = build(cfg, batch=1, seq=512, phase="train", name="m", framework=framework)
        g = training_graph(fwd)
        gmm = {op.name.split("moe.")[-1]: op for op in g.ops if op.kind.startswith("grouped_matmul")}
        assert len(gmm) >= 6 and all(op.attrs.get("tile_cols") == tile for op in gmm.values())
        calls = 2 if tile else None
        assert all(op.attrs.get("column_calls") == calls for n, op in gmm.items() if n.startswith("experts_in"))
        assert all("column_calls" not in op.attrs for n, op in gmm.items() if n.startswith("experts_out"))


def test_weight_gradient_reads_its_activations_untransposed():
    """``_gmm_bwd`` runs ``tgmm(lhs.swapaxes(0, 1), ...)`` and ``tgmm`` swaps it back (``lhs = lhs.swapaxes(0, 1)``
    before its ``pallas_call``, megablox/backend.py @ 3eb77db3c, gmm.py @ f4db8e4cc): the transposes cancel, so the
    weight gradient is the grouped contraction alone, with no extra pass of the routed rows through HBM.

    DeepSeek-V3's down projection on v5p: 393,216 routed rows over 256 experts in 512-row tiles visit
    512 x 768 + 255 x 511 = 523,521 rows (2,046 an expert, rounded up), so the same op without Megablox tiles but
    with those 523,521 rows costs exactly the same."""
    ctx = LoweringContext(load_device("tpu-v5p"), EvalOptions())
    down = (E, ROWS, FF), (E, ROWS, D), (E, FF, D)
    op = _op("grouped_matmul_bwd_weight", *down)
    plain = dataclasses.replace(op, attrs=Attrs({"tokens": 523_521, "experts_active": E}))
    got, want = lower(op, ctx), lower(plain, ctx)
    assert (got.compute_s, got.memory_s, got.dram_bytes) == (want.compute_s, want.memory_s, want.dram_bytes)
    assert "transposed" not in got.notes
    # by hand: each expert's activations (2048 x 2,046), output gradient (2,046 x 7168) and weight gradient
    # (2048 x 7168) cross HBM once in bf16 (a 2048 x 7168 block fits a core's 64 MiB of VMEM), 67,072,000 bytes
    # an expert; the 3.22 GB transposed copy of the rows (393,216 x 2048 bf16 each way) is no longer added
    assert got.dram_bytes == 256 * (2048 * 2046 * 2 + 2046 * 7168 * 2 + 2048 * 7168 * 2) == 17_170_432_000


def test_up_projection_input_gradient_of_two_calls():
    """MaxText runs the gated up-projection as two ``gmm`` calls (w0, w1; moe.py @ 3eb77db3c), each writing its own
    input gradient of the routed rows, which are then summed: one more write and one more read of a
    [rows, d_model] bf16 array. DeepSeek-V3 on v5p: 393,216 x 7168 x 2 B = 5,637,144,576 B each way, the read serial
    with the kernels, the write inside the second kernel (its memory time only)."""
    dev = load_device("tpu-v5p")
    ctx = LoweringContext(dev, EvalOptions())
    up = (E, ROWS, D), (E, D, 2 * FF), (E, ROWS, 2 * FF)
    two = _op("grouped_matmul_bwd_data", up[2], up[1], up[0], tile_cols=1024, column_calls=2)
    one = dataclasses.replace(two, attrs=Attrs({k: v for k, v in two.attrs.items() if k != "column_calls"}))
    got, base = lower(two, ctx), lower(one, ctx)
    extra = 393_216 * 7168 * 2
    t = extra / (dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction)
    assert got.compute_s - base.compute_s == pytest.approx(t)
    assert got.memory_s - base.memory_s == pytest.approx(2 * t)
    assert got.dram_bytes - base.dram_bytes == 2 * extra == 11_274_289_152
    # a GPU stack's graph (no Megablox tiles) runs one input-gradient GEMM: nothing added
    gpu = dataclasses.replace(two, attrs=Attrs({k: v for k, v in two.attrs.items() if k != "tile_rows"}))
    gpu_one = dataclasses.replace(gpu, attrs=Attrs({k: v for k, v in gpu.attrs.items() if k != "column_calls"}))
    assert lower(gpu, ctx).compute_s == lower(gpu_one, ctx).compute_s
