"""Sliding-window attention in the GPU, TPU and CPU attention rules: flash kernels skip whole key blocks
outside the band, so the pairs they compute (and their time) follow the visited blocks, hand-counted."""

from __future__ import annotations

import pytest

from hwmodels import gpu
from simulator.engines.analytical import evaluate
from simulator.hardware import load_hardware
from simulator.lowering.cpu import _flash_pairs
from simulator.lowering.tpu import SPLASH_BLOCK
from workloads.ir import GraphBuilder


def _graph(sq: int, skv: int, window: int, *, heads: int = 8, d: int = 128):
    b = GraphBuilder("swa", dtype="bf16")
    q = b.input("q", (1, heads, sq, d))
    k = b.input("k", (1, heads, skv, d))
    v = b.input("v", (1, heads, skv, d))
    b.op("attention", [q, k, v], name="core", causal=True, **({"window": window} if window else {}))
    return b.build()


def _record(g, device: str):
    return [r for r in evaluate(g, load_hardware(device)).records if r.kind == "attention"][0]


def test_gpu_grid_counts_the_visited_key_blocks() -> None:
    # 512 queries over 512 keys, window 128, blocks of 128: block 0 the causal triangle (128 x 129 / 2);
    # blocks 1..3 start one key block behind their diagonal block: rows p see keys from 128 (m - 128)
    # up to p, 128 x 128 + 128 x 129 / 2 = 24640 each. The exact band: 8256 + 384 x 128 = 57408.
    grid = gpu.attention_grid(1, 8, 8, 512, 512, 132, causal=True, window=128)
    assert grid.head_pairs == 8256 + 3 * 24640 == 82176
    full = gpu.attention_grid(1, 8, 8, 512, 512, 132, causal=True)
    assert full.head_pairs == 512 * 513 // 2
    # a window at least the sequence is plain causal attention
    assert gpu.attention_grid(1, 8, 8, 512, 512, 132, causal=True, window=512).head_pairs == full.head_pairs


def test_gpu_windowed_attention_is_faster_in_proportion() -> None:
    local = _record(_graph(8192, 8192, 1024), "h100-sxm5-80gb")
    full = _record(_graph(8192, 8192, 0), "h100-sxm5-80gb")
    # visited pairs: the first 8 query blocks (positions < 1024) are causal, 1024 x 1025 / 2; each of the other
    # 56 starts at key m - 1024 (its band start m - 1023 rounded down to a block), 128 x 1024 + 128 x 129 / 2
    visited = gpu.attention_grid(1, 8, 8, 8192, 8192, 132, causal=True, window=1024).head_pairs
    assert visited == 1024 * 1025 // 2 + 56 * (128 * 1024 + 128 * 129 // 2) == 8_327_168
    ratio = visited / (8192 * 8193 / 2)
    assert 0.2 < ratio < 0.3
    assert local.time_s < full.time_s
    assert local.time_s / full.time_s == pytest.approx(ratio, rel=0.15)


def test_tpu_splash_blocks() -> None:
    assert SPLASH_BLOCK == 512
    rec = _record(_graph(4096, 4096, 1024), "tpu-v5e")
    # blocks of 512: query blocks 0 and 1 start at key 0; block m >= 2 starts at key m - 1024 + 1 rounded
    # down to 512, i.e. m - 1024; every block runs whole key blocks up to the end of its diagonal block
    # (the splash kernel computes a partly masked tile in full and masks it after), m + 512:
    # 512 x (512 + 1024 + 6 x 1536) pairs, against 1024 x 1025 / 2 + 6 x (512 x 1024 + 512 x 513 / 2) in the band
    want = sum(512 * (m + 512 - max(0, m - 1024)) for m in range(0, 4096, 512))
    assert want == 512 * (512 + 1024 + 6 * 1536) == 5_505_024
    assert f"causal kept fraction {want / 4096 ** 2:.3f} (window 1024)" in rec.notes
    # plain causal: 8 x 9 / 2 of the 64 tiles
    full = _record(_graph(4096, 4096, 0), "tpu-v5e")
    assert f"causal kept fraction {36 / 64:.3f};" in full.notes


def test_cpu_flash_pairs_skip_key_blocks() -> None:
    # 1024 queries (blocks of 256) over 1024 keys (blocks of 512), window 128: block 0 from key 0;
    # block 256: band from key 129 -> key block 0; 512: 385 -> 0; 768: 641 -> 512
    pairs, qs, kvs = _flash_pairs(1024, 1024, True, 128)
    assert (qs, kvs) == (256, 512)
    assert pairs == sum(p + 1 for p in range(768)) + sum(p + 1 - 512 for p in range(768, 1024))
