"""CUB's sm_80 DeviceTransform kernels (cp.async into shared memory, then a one-element-per-thread loop) as tile loops.

Hand-computed cases on an A100-SXM4-80GB (108 SMs, 2048 threads per SM, 1410 MHz, 4 warp schedulers): CUB's
launch sizing at 16 KiB in flight per SM (8 resident blocks of 256 threads: 8 items per thread for one 1-byte
input, 4 for two), the issue time of a 2^28-element launch from the SASS counts, and the rows that name the kernels.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest

from hwmodels.catalog import load_device
from hwmodels.gpu import gpu_params
from hwmodels.tile_loop import (
    TILE_LOOP_KERNELS,
    tile_loop_issue_time,
    tile_loop_items_per_thread,
    tile_loop_launch_items,
    tile_loop_resident_blocks,
    tile_loop_time,
)
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.ir import UnsupportedOpError
from workloads.micro import build_micro

MUL80 = TILE_LOOP_KERNELS["cub-ldgsts@29397ba3bc:mul-int8"]
TRIAD80 = TILE_LOOP_KERNELS["cub-cgmemcpy@8cb5e8a9df:triad-int8"]


@pytest.fixture(scope="module")
def a100():
    dev = load_device("a100-sxm4-80gb")
    return dev, gpu_params(dev, "fp32")


def test_cub_sizes_a100_tiles_to_16_kib_in_flight(a100):
    _, p = a100
    # 2048 threads / 256 = 8 blocks; registers allow 65536 / (20 x 256) = 12 and 65536 / (18 x 256) = 14
    assert float(tile_loop_resident_blocks(MUL80, p)) == 8
    assert float(tile_loop_resident_blocks(TRIAD80, p)) == 8
    # one 1-byte input: 8 x 256 x k x 1 >= 16384 first at k = 8 (a 2 KiB tile); two: 8 x 256 x k x 2 first at k = 4
    assert tile_loop_items_per_thread(MUL80, 8, 1.0) == 8
    assert tile_loop_items_per_thread(TRIAD80, 8, 2.0) == 4
    # a lone block's 2048 B at 16 KiB: the 29397ba3bc loop tries up to and including 32
    assert tile_loop_items_per_thread(MUL80, 1, 1.0) == 32


def test_small_inputs_follow_each_commits_launch(a100):
    _, p = a100
    # 29397ba3bc spreads: ceil(100000 / (108 x 256 x 8)) = 1 item per thread; 8cb5e8a9df stops only when a tile
    # covers the input, so it keeps its 4
    assert float(tile_loop_launch_items(MUL80, 100_000, 8, 108, 1.0)) == 1
    assert float(tile_loop_launch_items(TRIAD80, 100_000, 8, 108, 2.0)) == 4


def test_issue_time_of_a_2_28_launch_from_the_sass_counts(a100):
    dev, p = a100
    n = 2**28
    # mul: 2^28 / 2048 = 131072 tiles, ceil(131072 / 108) = 1214 on the busiest SM; a tile is 8 warps x
    # (43.5 + 8 x 11) instructions over 4 schedulers at 1410 MHz
    mul = 1214 * 8 * (43.5 + 8 * 11) / (4 * 1.41e9)
    assert tile_loop_issue_time(n, 1.0, MUL80, p, warp_schedulers=4, warp_size=32) == pytest.approx(mul, rel=1e-9)
    # triad: 2^28 / 1024 = 262144 tiles, 2428 on the busiest SM, 8 warps x (82.5 + 4 x 13)
    triad = 2428 * 8 * (82.5 + 4 * 13) / (4 * 1.41e9)
    assert tile_loop_issue_time(n, 2.0, TRIAD80, p, warp_schedulers=4, warp_size=32) == pytest.approx(triad, rel=1e-9)
    assert dev.sm.warp_schedulers == 4 and dev.sm.warp_size == 32


def test_the_loop_is_never_faster_than_its_stream_or_its_issue(a100):
    dev, p = a100
    n = 2**28
    t = tile_loop_time(n, 1.0, 1.0, MUL80, p, warp_schedulers=4, warp_size=32,
                       smem_latency_s=dev.level("smem").latency_s)
    stream = n * 2 / (2039e9 * dev.efficiency.dram_bandwidth_fraction)
    issue = tile_loop_issue_time(n, 1.0, MUL80, p, warp_schedulers=4, warp_size=32)
    assert t >= max(stream, issue)
    assert t == pytest.approx(stream, rel=0.01)  # at the catalog's streaming figure the DRAM sets it


def test_the_option_prices_the_a100_rows_with_their_kernels(a100):
    dev, p = a100
    g = build_micro("elementwise:numel=268435456,op=scale", "int8")
    rec = evaluate(g, dev, EvalOptions(streaming_kernel="cub-ldgsts@29397ba3bc:mul-int8")).records[0]
    t = tile_loop_time(2**28, 1.0, 1.0, MUL80, p, warp_schedulers=4, warp_size=32,
                       smem_latency_s=dev.level("smem").latency_s)
    assert rec.time_s >= t
    with pytest.raises(UnsupportedOpError, match="compute capability 8.0"):
        evaluate(g, load_device("h100-sxm5-80gb"), EvalOptions(streaming_kernel="cub-ldgsts@29397ba3bc:mul-int8"))
    with pytest.raises(UnsupportedOpError, match="functor"):
        evaluate(g, dev, EvalOptions(streaming_kernel="cub-cgmemcpy@8cb5e8a9df:triad-int8"))


def test_the_a100_cub_rows_name_the_kernel_their_code_ran():
    from simulator.calibration.predict import run_options

    path = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_gpu.csv"
    rows = {r["id"]: r for r in csv.DictReader(path.open())}
    named = {i: run_options(rows[i])[0].streaming_kernel for i in ("pub-044", "pub-045")}
    assert named == {"pub-044": "cub-ldgsts@29397ba3bc:mul-int8", "pub-045": "cub-cgmemcpy@8cb5e8a9df:triad-int8"}
    # pub-044's babelstream 'mul' is b = scalar * c: the elementwise op the kernel's functor computes
    assert rows["pub-044"]["workload"] == "elementwise:numel=268435456,op=scale"
    assert math.isclose(float(rows["pub-044"]["median_s"]), 362.559e-6)
