"""Board variants as deployed: ``NAME@<N>w`` power limits, the 96 GB HBM2e H100, Grand Teton and DGX B200 nodes."""

from __future__ import annotations

import logging

import pytest

from hwmodels.catalog import load_device, load_system
from hwmodels.power_limits import power_limit_range
from hwmodels.spec import SpecError
from simulator.hardware import load_hardware

GEMM = "gemm:m=8192,n=8192,k=8192,dtype=bf16"


def _gemm_record(hardware: str):  # noqa: ANN202
    from simulator.engines.analytical import evaluate
    from workloads.resolve import load_workload

    logging.disable(logging.WARNING)
    try:
        (rec,) = evaluate(load_workload(GEMM), load_hardware(hardware)).records
    finally:
        logging.disable(logging.NOTSET)
    return rec


def test_power_capped_gemm_runs_at_the_limit_by_hand() -> None:
    """bf16 GEMM 8192^3 on an H100 SXM (no [dvfs] table: the first-order cap). Its dynamic energy is
    2 x 8192^3 FLOP x 0.497 pJ/FLOP = 0.54646 J of math plus the traffic the catalog prices; it would draw
    more than the budget at either limit, so time = E_dyn / (limit - idle): / (700 - 159.6) W at 700 W and
    / (500 - 159.6) W at 500 W, the same energy, 540.4 / 340.4 = 1.5875x the time."""
    full, capped = _gemm_record("h100-sxm5-80gb"), _gemm_record("h100-sxm5-80gb@500w")
    flops = 2 * 8192**3
    assert capped.flops == full.flops == flops
    assert capped.dynamic_energy_j == full.dynamic_energy_j
    assert capped.dynamic_energy_j > flops * 0.497e-12  # math plus operand traffic
    assert full.power_capped and capped.power_capped
    assert capped.time_s == pytest.approx(capped.dynamic_energy_j / (500.0 - 159.6), rel=1e-12)
    assert full.time_s == pytest.approx(full.dynamic_energy_j / (700.0 - 159.6), rel=1e-12)
    assert capped.time_s / full.time_s == pytest.approx(540.4 / 340.4, rel=1e-12)
    assert capped.energy_j / capped.time_s == pytest.approx(500.0, rel=1e-12)  # average power = the limit
    # the 96 GB board as deployed is at 500 W; at @700w it is the 80 GB board's GEMM (same die, compute-bound)
    assert _gemm_record("h100-sxm5-96gb").time_s == pytest.approx(capped.time_s, rel=1e-12)
    assert _gemm_record("h100-sxm5-96gb@700w").time_s == pytest.approx(full.time_s, rel=1e-12)


def test_power_limit_changes_only_the_limit() -> None:
    base, lim = load_hardware("h100-sxm5-80gb"), load_hardware("h100-sxm5-80gb@450w")
    assert lim.power.tdp_w == 450.0 and lim.power.idle_w == base.power.idle_w == pytest.approx(159.6)
    assert lim.compute == base.compute and lim.memory == base.memory and lim.clock == base.clock
    assert "nvidia-smi -pl 450" in lim.provenance["power.tdp_w"].source
    assert "at a 450 W power limit" in lim.description
    sysm = load_hardware("dgx-h100x2@600w")  # a cluster name in a power limit: every device of it
    assert sysm.count == 16 and sysm.device.power.tdp_w == 600.0


def test_sourced_range_and_its_edges() -> None:
    lo, lo_src, hi, hi_src = power_limit_range(load_device("h100-sxm5-80gb"))
    assert (lo, hi) == (200.0, 700.0) and "Min Power Limit : 200.00 W" in lo_src and "700.00 W" in hi_src
    assert load_hardware("h100-sxm5-80gb@200w").power.tdp_w == 200.0
    assert load_hardware("h100-sxm5-80gb@700w").power.tdp_w == 700.0
    with pytest.raises(SpecError, match=r"h100-sxm5-80gb@701w: power limit: above the board's maximum; got 701 W"):
        load_hardware("h100-sxm5-80gb@701w")
    with pytest.raises(SpecError, match=r"below the board's minimum; got 199 W; expected at least 200 W"):
        load_hardware("h100-sxm5-80gb@199w")
    # no table: up to the device's own limit and above its idle power (A10: 150 W, idle 0.228 x 150 = 34.2 W)
    assert load_hardware("a10@60w").power.tdp_w == 60.0
    with pytest.raises(SpecError, match=r"a10@151w: power limit: above the board's maximum; got 151 W; expected at most 150 W"):
        load_hardware("a10@151w")
    with pytest.raises(SpecError, match=r"a10@34w: .* expected at least 34.2 W"):
        load_hardware("a10@34w")
    # L4 and L40S: the range their nvidia-smi logs state (40-72 W, 100-350 W), not idle..TDP
    assert power_limit_range(load_device("l4"))[::2] == (40.0, 72.0)
    assert power_limit_range(load_device("l40s"))[::2] == (100.0, 350.0)
    assert load_hardware("l4@40w").power.tdp_w == 40.0
    with pytest.raises(SpecError, match=r"l4@39w: power limit: below the board's minimum; got 39 W; expected at least 40 W "
                                        r"\(thamada/nvidia-smi .*Min Power Limit : 40.00 W"):
        load_hardware("l4@39w")
    with pytest.raises(SpecError, match=r"l4@73w: power limit: above the board's maximum; got 73 W; expected at most 72 W"):
        load_hardware("l4@73w")
    with pytest.raises(SpecError, match=r"l40s@99w: .* expected at least 100 W"):
        load_hardware("l40s@99w")
    with pytest.raises(SpecError, match=r"tpu-v5e@100w: power limit: a board power limit is set on GPUs only"):
        load_hardware("tpu-v5e@100w")
    # devices with shipped nvpmodel modes keep their modes only
    with pytest.raises(SpecError, match=r"unknown mode; got '20w'; expected one of 7w, 15w"):
        load_hardware("jetson-orin-nano@20w")


def test_h100_96gb_hbm2e_board_as_deployed() -> None:
    d, ref = load_device("h100-sxm5-96gb"), load_device("h100-sxm5-80gb")
    hbm = d.level("hbm")
    assert hbm.capacity_bytes == 96e9 and hbm.read_bandwidth_bytes_per_s == 2.4e12
    assert d.power.tdp_w == 500.0 and d.power.idle_w == ref.power.idle_w == pytest.approx(159.6)
    assert "default 500W power limit" in d.provenance["power.tdp_w"].source
    assert "96GB HBM2e" in d.provenance["memory.hbm.capacity_bytes"].source
    # same GH100 die: compute, clocks, caches and energies are the 80 GB board's
    assert d.compute == ref.compute and d.clock == ref.clock and d.sm == ref.sm and d.energy == ref.energy
    assert d.level("l2") == ref.level("l2")
    assert power_limit_range(d)[2] == 700.0 and load_hardware("h100-sxm5-96gb@700w").power.tdp_w == 700.0


def test_grand_teton_and_dgx_b200_systems() -> None:
    gt = load_system("grand-teton-h100-96gbx16")
    assert (gt.count, gt.nodes, gt.device.name, gt.collectives) == (128, 16, "h100-sxm5-96gb", "dgx-h100")
    assert gt.device.power.tdp_w == 500.0
    b = load_system("dgx-b200")
    assert (b.count, b.nodes, b.device.name, b.collectives) == (8, 1, "b200", "dgx-b200")
    assert b.fabric.bandwidth_bytes_per_s == 900e9
    assert "8x ConnectX-7 IB NDR 400Gb/s" in b.provenance["count"].source
    b4 = load_system("dgx-b200x4")
    assert (b4.count, b4.nodes) == (32, 4) and "ConnectX-7" in b4.provenance["nodes"].source
    from hwmodels.collectives import fabric_catalog

    c = fabric_catalog().systems["dgx-b200"]
    assert (c.devices_per_node, c.nics_per_node) == (8, 8)
    assert c.inter is not None and c.inter.name == "ib-ndr" and c.inter.link_bandwidth_bytes_per_s == pytest.approx(50e9)
    assert c.intra.name == "nvlink5-nvswitch4"
