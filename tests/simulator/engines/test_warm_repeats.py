"""A benchmark loop over the same tensors without an L2 flush (``EvalOptions.warm_repeats``): operands that fit in
L2 are read from there, GEMMs included, and on a power-limited board the DRAM energy saved buys compute time."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device
from simulator.calibration.predict import run_options
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.engines.walk import working_set_bytes
from workloads.resolve import load_workload

ROOT = Path(__file__).resolve().parents[3]
MIB = 2**20
TILE = gpu.TileCandidate(128, 256, 64, stages=2, warps_m=2, warps_n=2, threads=128)


def test_gemm_dram_bytes_less_the_operands_already_in_l2():
    # A + B = 2 MiB fit in a 4 MiB L2: compulsory A + B + C (0.5 MiB); with 1.5 MiB of them resident
    # 0.5 MiB of A and B plus C; more resident than A + B: C alone
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,))
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 4 * MIB)[0] == 2.5 * MIB
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,), l2_resident_bytes=1.5 * MIB)
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 4 * MIB)[0] == 1.0 * MIB
    g = gpu.gemm_launch(512, 512, 1024, (TILE,), (1,), l2_resident_bytes=3 * MIB)
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 4 * MIB)[0] == 0.5 * MIB
    # A and B do not fit (1 MiB L2): the waves stream their panels whatever is resident (4.5 MiB, as cold)
    g = gpu.gemm_launch(1024, 512, 1024, (TILE,), (1,), l2_resident_bytes=3 * MIB)
    assert gpu.gemm_dram_bytes(g, 4.0, 2.0, 1 * MIB)[0] == 4.5 * MIB


def test_working_set_is_every_distinct_tensor_once():
    # 2048^3 fp16: A, B and C of 8 MiB each
    assert working_set_bytes(load_workload("gemm:m=2048,n=2048,k=2048", dtype="fp16")) == 3 * 8 * MIB
    assert working_set_bytes(load_workload("gemm:m=2048,n=2048,k=2048", dtype="fp32")) == 3 * 16 * MIB


def _gemm(dims: str, dtype: str, warm: bool):
    dev = load_device("l4")
    return evaluate(load_workload(dims, dtype=dtype), dev, EvalOptions(warm_repeats=warm)).records[0], dev


def test_l4_2048_gemm_loop_reads_its_operands_from_l2_and_runs_faster_under_the_limit():
    cold, dev = _gemm("gemm:m=2048,n=2048,k=2048", "fp16", False)
    warm, _ = _gemm("gemm:m=2048,n=2048,k=2048", "fp16", True)
    # 24 MiB of A, B and C fit in the L4's 48 MB L2: DRAM carries C (8 MiB) only
    assert (cold.dram_bytes, warm.dram_bytes) == (24 * MIB, 8 * MIB)
    assert cold.power_capped and warm.power_capped and cold.tile == warm.tile
    # constant-energy cap: the time falls by the DRAM energy of A and B over the dynamic budget,
    # 16 MiB x 6.5 pJ/bit x 8 / (72 W - 16.42 W) = 15.70 us
    saved = 16 * MIB * dev.main_memory.energy_j_per_byte / (dev.power.tdp_w - dev.power.idle_w)
    assert saved == pytest.approx(15.70e-6, rel=1e-3)
    assert cold.time_s - warm.time_s == pytest.approx(saved, rel=1e-6)


def test_loop_over_tensors_larger_than_l2_is_priced_cold():
    # 8192^3 fp16 (384 MiB) and 2560^3 fp32 (75 MiB): over the L4's 48 MB L2 whether MB means 10^6 or 2^20
    # bytes (2048^3 fp32, 48 MiB, sits on that boundary), so unchanged, bit for bit
    for dims, dtype in (("gemm:m=8192,n=8192,k=8192", "fp16"), ("gemm:m=2560,n=2560,k=2560", "fp32")):
        cold, _ = _gemm(dims, dtype, False)
        warm, _ = _gemm(dims, dtype, True)
        assert (warm.time_s, warm.dram_bytes) == (cold.time_s, cold.dram_bytes)


def test_rows_that_state_the_loop_switch_it_on():
    with open(ROOT / "hwmodels" / "measurements" / "published_gpu.csv", encoding="utf-8") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    for rid in ("pub-100", "pub-104", "pub-105", "pub-107"):
        assert run_options(rows[rid])[0].warm_repeats, rid
    assert not run_options(rows["pub-001"])[0].warm_repeats
    assert not EvalOptions().warm_repeats  # one cold run unless stated


def test_discrete_event_engine_prices_the_loop_the_same():
    import simulator

    # two streams: the event simulation's own walk, not its one-stream shortcut through evaluate
    g, dev = load_workload("gemm:m=2048,n=2048,k=2048", dtype="fp16"), load_device("l4")
    warm, cold = EvalOptions(warm_repeats=True), EvalOptions()
    des_warm = simulator.simulate(g, dev, warm, streams=2).totals.latency_s
    assert des_warm == pytest.approx(evaluate(g, dev, warm).totals.latency_s, rel=1e-9)
    assert des_warm < simulator.simulate(g, dev, cold, streams=2).totals.latency_s


def test_a_graph_over_l2_is_priced_cold_in_every_op():
    # GPT-2 on the L4 (a working set of hundreds of MB against 48 MB of L2): the request changes nothing, not
    # even the GEMMs fed by the previous kernel's outputs (which the walk holds as resident either way)
    from simulator.engines.walk import working_set_bytes

    g, dev = load_workload("gpt2"), load_device("l4")
    assert working_set_bytes(g) > 48e6
    cold, warm = evaluate(g, dev, EvalOptions()), evaluate(g, dev, EvalOptions(warm_repeats=True))
    assert [r.time_s for r in warm.records] == [r.time_s for r in cold.records]
    # and a warm request with L2 residency switched off is a cold run too
    g1 = load_workload("gemm:m=2048,n=2048,k=2048", dtype="fp16")
    off = EvalOptions(warm_repeats=True, l2_residency=False)
    assert evaluate(g1, dev, off).totals.latency_s == evaluate(g1, dev, EvalOptions(l2_residency=False)).totals.latency_s


def test_a_warm_loop_without_l2_residency_is_refused_as_a_setting():
    from simulator.engines.options import options_from_settings

    with pytest.raises(ValueError, match=r"^options\.warm_repeats: got true with l2_residency false; expected "):
        options_from_settings({"warm_repeats": True, "l2_residency": False})
    assert options_from_settings({"warm_repeats": True}).warm_repeats
