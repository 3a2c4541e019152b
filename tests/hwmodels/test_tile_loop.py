"""CUB's bulk-copy DeviceTransform as a tile loop: its bytes in flight per SM and the time Little's law gives it.

Hand-computed cases: CUB's launch sizing on a B200 (16 resident blocks of 128 threads; 24 items per thread for a
1-byte input at 48 KiB in flight, 8 for two 2-byte inputs at 64 KiB), mean-value analysis on small networks, a
one-tile kernel (one round trip: latency + memory + issue), and the two Little's-law asymptotes.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from hwmodels.catalog import load_device
from hwmodels.gpu import gpu_params
from hwmodels.tile_loop import (
    ITEMS_PER_THREAD_NO_INPUT,
    TILE_LOOP_KERNELS,
    shared_memory_throughput,
    tile_loop_issue_time,
    tile_loop_items_per_thread,
    tile_loop_launch_items,
    tile_loop_resident_blocks,
    tile_loop_time,
)
from simulator.engines.analytical import EvalOptions, evaluate
from workloads.ir import UnsupportedOpError
from workloads.micro import build_micro

MUL = TILE_LOOP_KERNELS["cub-ublkcp@b52534bf04:mul-int8"]
ADD = TILE_LOOP_KERNELS["cub-ublkcp@92bbfbd128:add-fp16"]
DIV = TILE_LOOP_KERNELS["cub-ublkcp@92bbfbd128:div-fp16"]


@pytest.fixture(scope="module")
def b200():
    dev = load_device("b200")
    return dev, gpu_params(dev, "fp32")


def test_one_customer_on_one_sm_is_one_round_trip():
    assert shared_memory_throughput(2.0, 3.0, 5.0, 1, 1) == pytest.approx(1.0 / 10.0)


def test_two_customers_at_one_centre_saturate_it():
    # sms = 1, no delay, no memory: R_i = D (1 + q / 2), X = 2 / R_i, q = X R_i = 2 -> R_i = 2 D, X = 1 / D
    assert shared_memory_throughput(1.0, 0.0, 0.0, 2, 1) == pytest.approx(1.0)


def test_throughput_stays_under_both_littles_law_bounds():
    issue, memory, z, sms = 1.0, 0.8 / 100, 6.0, 100  # the shared DRAM takes 0.8 per SM's tile when all are busy
    for n in (1, 4, 16, 64):
        x = shared_memory_throughput(issue, memory, z, n, sms)
        assert x <= min(1.0 / issue, 1.0 / (sms * memory), n / (z + issue + memory)) + 1e-12
    assert shared_memory_throughput(issue, memory, z, 400, sms) == pytest.approx(1.0 / issue, rel=2e-2)


def test_cub_sizes_b200_tiles_to_its_bytes_in_flight(b200):
    _, p = b200
    # 2048 threads / 128 = 16 blocks; 65536 registers / (32 x 128) = 16; 32 blocks per SM allowed
    assert float(tile_loop_resident_blocks(MUL, p)) == 16
    assert float(tile_loop_resident_blocks(ADD, p)) == 16
    # 1-byte input, 48 KiB: 16 x 128 x k x 1 >= 49152 first at k = 24 (a 3072-byte tile, 49152 B per SM)
    assert tile_loop_items_per_thread(MUL, 16, 1.0) == 24
    # two 2-byte inputs, 64 KiB: 16 x 128 x k x 4 >= 65536 first at k = 8
    assert tile_loop_items_per_thread(ADD, 16, 4.0) == 8
    # a 4-byte input at 48 KiB would need 6; the loop stops at its largest tried value
    assert tile_loop_items_per_thread(MUL, 1, 1.0) == 31


def test_one_tile_takes_one_round_trip(b200):
    dev, p = b200
    # 128 int8 elements: one item per thread, one block, one customer on one SM
    t = tile_loop_time(128, 1.0, 1.0, MUL, p, warp_schedulers=4, warp_size=32)
    memory = 128 * 2 / (8e12 * dev.efficiency.dram_bandwidth_fraction)  # alone: the whole chip's rate
    issue = 4 * (53.5 + 1 * 12) / (4 * 1.856e9)
    latency = 834 / 1.856e9
    assert t == pytest.approx(latency + memory + issue, rel=1e-9)
    # each iteration's store waits for its shared-memory load: one 19.6 ns load latency per item per thread
    t_smem = tile_loop_time(128, 1.0, 1.0, MUL, p, warp_schedulers=4, warp_size=32, smem_latency_s=19.6e-9)
    assert t_smem == pytest.approx(latency + 19.6e-9 + memory + issue, rel=1e-9)


def test_a_large_kernel_sits_between_the_busier_centre_and_the_sum(b200):
    dev, p = b200
    n = 2**28
    t = tile_loop_time(n, 1.0, 1.0, MUL, p, warp_schedulers=4, warp_size=32)
    tiles = math.ceil(math.ceil(n / 3072) / 148)  # 591 tiles on the busiest SM
    memory = 3072 * 2 / (8e12 * dev.efficiency.dram_bandwidth_fraction)  # one tile at the chip's rate
    issue = 4 * (53.5 + 24 * 12) / (4 * 1.856e9)  # 184 ns: the int8 loop is issue-bound
    assert issue > 148 * memory
    latency = 834 / 1.856e9
    # above both Little's-law bounds on the time (the busier centre; 16 tiles over one round trip), and below the
    # pessimistic bound in which each tile queues behind the SM's other 15 at issue and all 2368 at the DRAM
    assert tiles * max(issue, (latency + memory + issue) / 16) < t
    assert t < tiles * (latency + 16 * issue + 2368 * memory) / 16
    # the division's 25 instructions per element make it slower than the add's 14 on the same bytes
    t_add = tile_loop_time(n, 4.0, 2.0, ADD, p, warp_schedulers=4, warp_size=32)
    t_div = tile_loop_time(n, 4.0, 2.0, DIV, p, warp_schedulers=4, warp_size=32)
    assert t_div > t_add


def test_more_bandwidth_or_clock_is_never_slower(b200):
    _, p = b200
    base = tile_loop_time(2**26, 4.0, 2.0, DIV, p, warp_schedulers=4, warp_size=32)
    faster = [dataclasses.replace(p, dram_fraction=p.dram_fraction * 1.2),
              dataclasses.replace(p, clock_hz=p.clock_hz * 1.2),
              dataclasses.replace(p, dram_latency_s=p.dram_latency_s * 0.5)]
    for q in faster:
        assert tile_loop_time(2**26, 4.0, 2.0, DIV, q, warp_schedulers=4, warp_size=32) < base
    # hardware variants broadcast (a sweep's arrays): each variant as if alone
    fractions = np.array([0.7, 0.85, 1.0])
    swept = tile_loop_time(2**26, 4.0, 2.0, DIV, dataclasses.replace(p, dram_fraction=fractions), warp_schedulers=4,
                           warp_size=32)
    alone = [tile_loop_time(2**26, 4.0, 2.0, DIV, dataclasses.replace(p, dram_fraction=f), warp_schedulers=4,
                            warp_size=32) for f in fractions]
    assert swept == pytest.approx(alone, rel=1e-9) and swept[0] > swept[1] > swept[2]


def test_the_option_prices_elementwise_ops_as_the_tile_loop(b200):
    dev, p = b200
    g = build_micro("elementwise:numel=268435456,op=scale", "int8")
    plain = evaluate(g, dev).records[0]
    loop = evaluate(g, dev, EvalOptions(streaming_kernel="cub-ublkcp@b52534bf04:mul-int8")).records[0]
    assert plain.rule == "bandwidth" and loop.rule == "tile-loop"
    t = tile_loop_time(2**28, 1.0, 1.0, MUL, p, warp_schedulers=4, warp_size=32,
                       smem_latency_s=dev.level("smem").latency_s)
    assert loop.time_s == pytest.approx(t + dev.efficiency.kernel_device_time_s, rel=1e-9)  # + the B200's 1.56 us
    assert loop.time_s > 1.2 * plain.time_s


def test_a_kernel_for_another_architecture_is_refused():
    g = build_micro("elementwise:numel=1048576,op=scale", "int8")
    with pytest.raises(UnsupportedOpError, match="compute capability 10.0"):
        evaluate(g, load_device("h100-sxm5-80gb"), EvalOptions(streaming_kernel="cub-ublkcp@b52534bf04:mul-int8"))
    with pytest.raises(ValueError, match="options.streaming_kernel: unknown tile-loop kernel"):
        EvalOptions(streaming_kernel="cub-ublkcp@0000:mul-int8")


def test_the_cub_rows_name_the_kernel_their_code_ran():
    import csv
    from pathlib import Path

    from simulator.calibration.predict import run_options

    path = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_gpu.csv"
    rows = {r["id"]: r for r in csv.DictReader(path.open())}
    named = {i: run_options(rows[i])[0].streaming_kernel for i in ("pub-095", "pub-096", "pub-097", "pub-098")}
    assert named == {"pub-095": "cub-ublkcp@b52534bf04:mul-int8", "pub-096": "cub-ublkcp@92bbfbd128:add-fp16",
                     "pub-097": "cub-ublkcp@92bbfbd128:div-fp16", "pub-098": ""}  # the H200 kernel was not read


@pytest.mark.parametrize(("k", "numel", "loaded", "stored", "field", "values"), [
    (MUL, 2**28, 1.0, 1.0, "max_threads_per_sm", [2048.0, 1024.0]),  # 16 and 8 resident blocks
    (MUL, 2**28, 1.0, 1.0, "sms", [148.0, 20.0]),
    (MUL, 3_000_000, 1.0, 1.0, "sms", [148.0, 20.0]),  # 977 tiles: 7 on the busiest of 148 SMs, 49 on one of 20
    (ADD, 3_000_000, 4.0, 2.0, "sms", [148.0, 20.0]),
    (ADD, 3_000_000, 4.0, 2.0, "max_threads_per_sm", [2048.0, 1024.0]),
])
def test_each_hardware_variant_is_timed_as_if_alone(b200, k, numel, loaded, stored, field, values):
    _, p = b200
    swept = tile_loop_time(numel, loaded, stored, k, dataclasses.replace(p, **{field: np.array(values)}),
                           warp_schedulers=4, warp_size=32)
    alone = [tile_loop_time(numel, loaded, stored, k, dataclasses.replace(p, **{field: v}), warp_schedulers=4,
                            warp_size=32) for v in values]
    assert swept == pytest.approx(alone, rel=1e-9)
    assert alone[0] != pytest.approx(alone[1], rel=1e-5)  # the variants differ


def test_small_inputs_follow_each_commits_launch(b200):
    _, p = b200
    # 606208 = 148 x 128 x 16 x 2 elements. At 92bbfbd128 spread_out_items_per_thread lowers the 8 items the bytes in
    # flight ask for to ceil(606208 / (148 x 128 x 16)) = 2; at b52534bf04 the sizing loop stops early only once one
    # tile covers the input, so the int8 kernel keeps its 24 (and 1 for 100 elements, one tile of 128)
    assert float(tile_loop_launch_items(ADD, 606208, 16.0, 148.0, 4.0)) == 2
    assert float(tile_loop_launch_items(MUL, 606208, 16.0, 148.0, 1.0)) == 24
    assert float(tile_loop_launch_items(MUL, 100, 16.0, 148.0, 1.0)) == 1
    assert float(tile_loop_launch_items(MUL, 1000, 16.0, 148.0, 1.0)) == 8  # the first tile >= 1000: 128 x 8
    assert not MUL.spreads_small_inputs and ADD.spreads_small_inputs and DIV.spreads_small_inputs


def test_no_input_takes_cubs_no_input_items_and_no_block_is_an_error(b200):
    _, p = b200
    assert tile_loop_items_per_thread(ADD, 16, 0.0) == ITEMS_PER_THREAD_NO_INPUT == 2
    # 96 registers x 128 threads: 65536 / 12288 = 5 blocks; 600 registers hold none
    assert float(tile_loop_resident_blocks(dataclasses.replace(MUL, registers_per_thread=96), p)) == 5
    with pytest.raises(ValueError, match="resident blocks per SM; got 0; expected at least 1"):
        tile_loop_time(2**20, 1.0, 1.0, dataclasses.replace(MUL, registers_per_thread=600), p, warp_schedulers=4,
                       warp_size=32)
    with pytest.raises(ValueError, match="resident blocks per SM; got 0"):
        tile_loop_time(2**20, 1.0, 1.0, MUL, dataclasses.replace(p, max_threads_per_sm=np.array([2048.0, 64.0])),
                       warp_schedulers=4, warp_size=32)


def test_a_kernel_must_fit_the_op():
    b200 = load_device("b200")
    opts = EvalOptions(streaming_kernel="cub-ublkcp@b52534bf04:mul-int8")
    with pytest.raises(UnsupportedOpError, match=r"op 'scale' .*dtype; got 'fp16'; expected 'int8'"):
        evaluate(build_micro("elementwise:numel=1048576,op=scale", "fp16"), b200, opts)
    with pytest.raises(UnsupportedOpError, match=r"op 'add' .*functor; got op='add'; expected 'scale'"):
        evaluate(build_micro("elementwise:numel=1048576,op=add", "int8"), b200, opts)
    # an SM that holds no block of the kernel: located, not one customer
    small = dataclasses.replace(b200, sm=dataclasses.replace(b200.sm, max_threads_per_sm=64))
    with pytest.raises(UnsupportedOpError, match=r"op 'scale' .*resident blocks per SM; got 0"):
        evaluate(build_micro("elementwise:numel=1048576,op=scale", "int8"), small, opts)


def test_only_the_issue_time_is_the_clocked_compute_term(b200):
    """The busiest SM's issue time is the compute term (a lowered clock stretches it); the loop's latency and DRAM
    parts sit in the memory term; at the reference clock the kernel still takes the loop's time."""
    dev, p = b200
    g = build_micro("elementwise:numel=268435456,op=div", "fp16")
    rec = evaluate(g, dev, EvalOptions(streaming_kernel="cub-ublkcp@92bbfbd128:div-fp16")).records[0]
    t = tile_loop_time(2**28, 4.0, 2.0, DIV, p, warp_schedulers=4, warp_size=32,
                       smem_latency_s=dev.level("smem").latency_s)
    issue = tile_loop_issue_time(2**28, 4.0, DIV, p, warp_schedulers=4, warp_size=32)
    # 8 items per thread: 4 warps x (58.5 + 8 x 25) / (4 x 1.856 GHz) = 139.3 ns a tile; 2^28 / 1024 = 262144
    # tiles, 1772 on the busiest of 148 SMs
    assert issue == pytest.approx(1772 * 4 * (58.5 + 8 * 25) / (4 * 1.856e9), rel=1e-9)
    assert rec.compute_s == pytest.approx(issue, rel=1e-9)
    assert issue < rec.memory_s < t  # the loop less the engine's fixed latency
    assert rec.time_s == pytest.approx(t + dev.efficiency.kernel_device_time_s, rel=1e-9)
