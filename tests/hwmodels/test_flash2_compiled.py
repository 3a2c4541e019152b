"""FlashAttention-2's forward kernels as compiled (``hwmodels/measurements/flash2_compiled.csv``, nvcc 13.0, v2.7.4.post1):
the register table the occupancy rule reads, the main loop's tensor-core and rescale instructions against the tile
arithmetic, the output rescale priced per score (``hwmodels.gpu.flash2_rescale_ops_per_score``) and the local-memory
share of the B200's loop (docs/accuracy.md, "FlashAttention-2's compiled main loop")."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from gpu_devices import toy_gpu

from hwmodels import gpu
from hwmodels.catalog import load_device

DATA = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "flash2_compiled.csv"
ROWS = list(csv.DictReader(DATA.open()))


def _n(row: dict[str, str], key: str) -> int:
    return int(row[key])


def _key(row: dict[str, str]) -> tuple[bool, int, int, int, int]:
    return (False, _n(row, "head_dim"), _n(row, "block_m"), _n(row, "block_n"), _n(row, "warps"))


def test_table_covers_the_launched_forward_tiles_on_three_architectures():
    archs = {(r["arch"], _key(r)) for r in ROWS}
    for arch in ("sm_80", "sm_90", "sm_100"):
        assert (arch, (False, 128, 128, 64, 4)) in archs  # head dim 128 on the A100, H100, B200
        assert (arch, (False, 64, 128, 128, 4)) in archs  # head dim 64
    assert all(r["source"].startswith("nvcc 13.0") for r in ROWS)


def test_register_table_is_the_compiled_count():
    for row in ROWS:
        assert gpu.FLASH2_PTXAS_REGISTERS[_key(row)] == _n(row, "registers")
    # issue #1630's older sm_80 build of the same kernels: 255 (causal <128, 128, 64, 4>) and 180 (<128, 64, 64, 4>)
    sm80 = {(_key(r), r["causal"]): _n(r, "registers") for r in ROWS if r["arch"] == "sm_80"}
    assert sm80[((False, 128, 128, 64, 4), "1")] == 255
    assert abs(sm80[((False, 128, 64, 64, 4), "1")] - 180) <= 2


def test_shared_memory_is_the_tile_ksmemsize():
    for row in ROWS:
        tile = gpu.Flash2Tile(_n(row, "block_m"), _n(row, "block_n"), _n(row, "warps"))
        assert tile.smem_bytes(_n(row, "head_dim"), False) == _n(row, "smem_bytes")


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r['arch']}-{r['head_dim']}-{r['block_m']}x{r['block_n']}-c{r['causal']}")
def test_main_loop_mma_and_rescale_counts_match_the_tile(row):
    hd, m, n, w = (_n(row, k) for k in ("head_dim", "block_m", "block_n", "warps"))
    m_tiles = m // w // 16  # 16-row mma.sync tiles a warp owns
    # m16n8k16 HMMA a warp issues per key block: S = Q K^T (n/8 x hd/16 per tile) and O += P V (hd/8 x n/16)
    assert _n(row, "loop_hmma") == m_tiles * (n // 8 * hd // 16 + hd // 8 * n // 16)
    rows_per_thread = 2 * m_tiles
    acc_o = (m // w) * hd // 32  # O accumulators a thread holds
    # FMUL: every O accumulator rescaled, plus two per row (its max times the scale, its sum rescaled)
    assert _n(row, "loop_fmul") == acc_o + 2 * rows_per_thread
    scores = (m // w) * n // 32  # scores a thread computes per key block
    tile = gpu.Flash2Tile(m, n, w)
    assert acc_o / scores == gpu.flash2_rescale_ops_per_score(tile, hd)


def test_rescale_ops_per_score_by_hand():
    assert gpu.flash2_rescale_ops_per_score(gpu.Flash2Tile(128, 64), 128) == 2.0
    assert gpu.flash2_rescale_ops_per_score(gpu.Flash2Tile(128, 128), 64) == 0.5
    assert gpu.flash2_rescale_ops_per_score(gpu.Flash2Tile(128, 32), 128) == 4.0
    assert gpu.flash2_rescale_ops_per_score(gpu.Flash2Tile(128, 64), 80) == 1.5  # runs the head-dim-96 kernel


def test_rescale_joins_the_softmax_time_by_hand():
    p = gpu.gpu_params(toy_gpu(), "bf16")
    grid = gpu.attention_grid(1, 1, 1, 1024, 1024, 4, causal=False, backward=False, block_q=128)
    _, soft0, _, _ = gpu._attention_compute(grid, p, 128, 128, "flash2", False, p.sms)
    _, soft2, _, _ = gpu._attention_compute(grid, p, 128, 128, "flash2", False, p.sms, rescale_ops=2.0)
    # toy GPU: 1.024 TFLOP/s FP32 over 4 SMs = 128e9 FP32 instructions an SM a second
    assert soft2 - soft0 == pytest.approx(2.0 / 128e9)


def test_b200_local_memory_share_of_the_loop_is_the_same_at_both_head_dims():
    b200 = load_device("b200").sm
    threads = 128
    shares = {}
    for row in (r for r in ROWS if r["arch"] == "sm_100" and r["causal"] == "0"):
        local = (_n(row, "loop_local_load_bytes") + _n(row, "loop_local_store_bytes")) * threads
        l1_clk = local / b200.shared_mem_bytes_per_clk
        flops = 2 * _n(row, "block_m") * _n(row, "block_n") * 2 * _n(row, "head_dim")  # QK^T and PV per key block
        shares[_n(row, "head_dim")] = l1_clk / (flops / b200.warp_mma_flops_per_clk)
    assert shares[128] == pytest.approx(32 / 2048)
    assert shares[64] == pytest.approx(36 / 2048)
