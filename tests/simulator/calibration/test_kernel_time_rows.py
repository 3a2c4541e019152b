"""Rows that time the kernels alone (a profiler's kernel records) carry no host launch floor.

OpenXLA's matmul table (the 34 rows pub-115..148) stores CUPTI kernel-activity durations
(``CuptiKernelTracer`` in xla/service/gpu/model/hlo_op_profiler.cc enables ``CUPTI_ACTIVITY_KIND_KERNEL`` and keeps
``end - start`` of every kernel record; the rows' notes: "GPU kernel time only, no launch overhead"), so the host's
launch rate (``efficiency.launch_overhead_s``, 5 us) does not enter what they measured. ``EvalOptions.kernel_time_only``
prices such a row at its kernels' device time: the modelled work plus ``efficiency.kernel_device_time_s``.
Worked by hand on the H100 SXM below (docs/accuracy.md, "Kernel-time rows: no host launch in a profiler's kernel
record").
"""

from __future__ import annotations

import pytest

import workloads  # noqa: F401  (installs the semantics registry)
from hwmodels.catalog import load_device
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, default_predict, run_options
from simulator.calibration.validation import DEFAULT_DATASET, known_devices
from simulator.engines.analytical import EvalOptions, evaluate, host_floor_s
from workloads.micro import build_micro

XLA_TABLE = [f"pub-{i:03d}" for i in range(115, 149)]
SMS = 132
CLOCK_HZ = 1980e6  # the catalog's cycle-to-second basis for MT4G's latencies
L2_BYTES_PER_S = 4529 * 2**30  # MT4G H100 SXM L2 read, the Hopper tile rate
PORT_RATIO = 2.040  # efficiency.l2_tile_sm_port_ratio: RRZE gpu-l2-cache's all-SM plateau (9.92 TB/s) over it
RATE_SM = 989.4e12 * 0.78 / SMS  # dense bf16 tensor peak x tensor_peak_fraction, per SM
DRAM_LATENCY_S = 834 / CLOCK_HZ
L2_LATENCY_S = 219 / CLOCK_HZ
DEVICE_TIME_S = 1.3e-6  # efficiency.kernel_device_time_s (Hopper)
LAUNCH_S = 5e-6  # efficiency.launch_overhead_s


@pytest.fixture(scope="module")
def rows():
    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    return {m.id: m for m in ms}


def _opts(m) -> EvalOptions:
    return run_options({"id": m.id, "source": m.source, "notes": m.notes, "metric_reported": m.metric_reported,
                        "dtype": m.dtype})[0]


def test_only_the_profiled_table_rows_switch(rows):
    """The 34 OpenXLA table rows state CUPTI kernel time; the do_bench rows (event pairs) and mamf-finder (a timed
    loop) do not, and keep the floor."""
    switched = sorted(rid for rid, m in rows.items() if _opts(m).kernel_time_only)
    assert switched == XLA_TABLE
    for rid in ("pub-001", "pub-007", "pub-010"):
        assert not _opts(rows[rid]).kernel_time_only


def test_host_floor_is_zero_for_kernel_records():
    eff = load_device("h100-sxm5-80gb").efficiency
    assert host_floor_s("gemm", 1, LAUNCH_S, eff, EvalOptions()) == pytest.approx(LAUNCH_S)
    assert host_floor_s("gemm", 1, LAUNCH_S, eff, EvalOptions(kernel_time_only=True)) == 0.0
    assert host_floor_s("gemm", 0, LAUNCH_S, eff, EvalOptions()) == 0.0


def test_256_cube_bf16_kernel_time_by_hand(rows):
    """pub-115, 256^3 bf16 (5.20 us measured): 16 CTAs of 64 x 64 x 64 on 132 SMs, each loading its A and B panels
    over K and writing its C tile at one SM's L2 intake; one DRAM latency of prologue and one round of edges; the
    1.3 us device time. 3.12 us in all, where the 5 us launch floor used to stand."""
    per_cta = (64 + 64) * 256 * 2 + 64 * 64 * 2  # 73,728 B
    share = SMS / L2_BYTES_PER_S  # s per byte at one SM's share of the tile rate
    memory = max(16 * per_cta / L2_BYTES_PER_S, per_cta * share / PORT_RATIO)  # the port: 0.981 us
    compute = 2 * 64 * 64 * 256 / RATE_SM  # 0.359 us of main loop
    c_store = 64 * 64 * 2 * share + L2_LATENCY_S
    first_load = (64 + 64) * 64 * 2 * share / PORT_RATIO
    last_math = 2 * 64 * 64 * 64 / RATE_SM
    kernel = max(compute, memory) + DRAM_LATENCY_S + c_store + min(first_load, last_math)
    assert memory == pytest.approx(0.981e-6, rel=1e-3) and kernel == pytest.approx(1.825e-6, rel=1e-3)
    m = rows["pub-115"]
    dev = load_device(m.device)
    g = build_micro("gemm:m=256,n=256,k=256", "bf16")
    on = evaluate(g, dev, EvalOptions(kernel_time_only=True)).records[0]
    off = evaluate(g, dev, EvalOptions()).records[0]
    assert on.time_s == pytest.approx(kernel + DEVICE_TIME_S, rel=1e-6)
    assert on.time_s == pytest.approx(3.125e-6, rel=1e-3)
    assert off.time_s == pytest.approx(LAUNCH_S)  # the host floor it used to take
    assert default_predict(GraphCache().get(m), dev, m) == pytest.approx(on.time_s, rel=1e-9)


def test_long_kernels_do_not_move(rows):
    """A kernel longer than the launch floor is priced the same either way (pub-119, 4096^3 bf16)."""
    m = rows["pub-119"]
    dev = load_device(m.device)
    g = GraphCache().get(m)
    assert default_predict(g, dev, m) == pytest.approx(evaluate(g, dev, EvalOptions()).latency_s, rel=1e-9)
