"""Dotted spec paths of sweeps: reading, overriding (devices, systems, per-dtype tables), parsing, errors."""

from __future__ import annotations

import math

import pytest

from hwmodels.paths import (
    OVERRIDE_SOURCE,
    SweepPathError,
    field_unit_of,
    get_path,
    known_paths,
    parse_quantity,
    resolve_path,
    with_overrides,
)
from hwmodels.spec import Provenance
from simulator.hardware import load_hardware


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


@pytest.fixture(scope="module")
def dgx():
    return load_hardware("dgx-h100")


def test_get_path_reads_device_fields(h100):
    assert get_path(h100, "memory.hbm.read_bandwidth_bytes_per_s") == h100.main_memory.read_bandwidth_bytes_per_s
    assert get_path(h100, "compute.tensor_flops_per_s.bf16") == h100.compute.tensor_flops_per_s["bf16"]
    assert get_path(h100, "compute.units") == 132  # H100 SXM5: 132 SMs (NVIDIA H100 whitepaper)


def test_system_paths_reach_device_and_system_fields(dgx):
    assert get_path(dgx, "compute.units") == dgx.device.compute.units
    assert get_path(dgx, "device.compute.units") == dgx.device.compute.units
    assert get_path(dgx, "count") == dgx.count == 8
    assert resolve_path(dgx, "memory.hbm.latency_s") == "device.memory.hbm.latency_s"
    assert resolve_path(dgx, "count") == "count"


def test_with_overrides_parses_units_and_leaves_base_unchanged(h100):
    before = h100.main_memory.read_bandwidth_bytes_per_s
    new = with_overrides(h100, {"memory.hbm.read_bandwidth_bytes_per_s": "1 TB/s",
                                "memory.l2.read_bandwidth_bytes_per_s": "900 GB/s",
                                "compute.tensor_flops_per_s.bf16": 5e14,
                                "compute.units": 100.0,
                                "efficiency.launch_overhead_s": "3 us"})
    assert new.main_memory.read_bandwidth_bytes_per_s == 1e12
    assert new.level("l2").read_bandwidth_bytes_per_s == 9e11
    assert new.compute.tensor_flops_per_s["bf16"] == 5e14
    assert new.compute.tensor_flops_per_s["fp16"] == h100.compute.tensor_flops_per_s["fp16"]  # other keys kept
    assert new.compute.units == 100 and isinstance(new.compute.units, int)
    assert math.isclose(new.efficiency.launch_overhead_s, 3e-6)
    assert new.source_of("compute.units") == Provenance(OVERRIDE_SOURCE, "")
    assert h100.main_memory.read_bandwidth_bytes_per_s == before  # frozen base untouched
    assert h100.compute.units == 132


def test_with_overrides_on_system(dgx):
    new = with_overrides(dgx, {"count": 4, "memory.hbm.read_bandwidth_bytes_per_s": "2 TB/s",
                               "fabric.bandwidth_bytes_per_s": "100 GB/s"})
    assert new.count == 4
    assert new.device.main_memory.read_bandwidth_bytes_per_s == 2e12
    assert new.fabric.bandwidth_bytes_per_s == 1e11
    assert new.device.source_of("memory.hbm.read_bandwidth_bytes_per_s").source == OVERRIDE_SOURCE
    assert new.provenance["count"].source == OVERRIDE_SOURCE
    assert dgx.count == 8


def test_unknown_path_names_it_and_nearest(h100):
    with pytest.raises(SweepPathError) as e:
        with_overrides(h100, {"memory.hbm.read_bandwith_bytes_per_s": 1e12})
    msg = str(e.value)
    assert "h100-sxm5-80gb: memory.hbm.read_bandwith_bytes_per_s: unknown spec path" in msg
    assert "did you mean 'memory.hbm.read_bandwidth_bytes_per_s'" in msg
    with pytest.raises(SweepPathError, match="did you mean 'compute.tensor_flops_per_s.bf16'"):
        get_path(h100, "compute.tensor_flops_per_s.bf61")


def test_wrong_unit_and_bad_values_are_located(h100):
    with pytest.raises(SweepPathError) as e:
        with_overrides(h100, {"memory.hbm.read_bandwidth_bytes_per_s": "5 W"})
    msg = str(e.value)
    assert "memory.hbm.read_bandwidth_bytes_per_s" in msg and "got '5 W'" in msg and "expected a bandwidth" in msg
    with pytest.raises(SweepPathError, match="compute.units: not a whole number; got 1.5"):
        with_overrides(h100, {"compute.units": 1.5})
    with pytest.raises(SweepPathError, match="fraction above 1"):
        with_overrides(h100, {"efficiency.tensor_peak_fraction": 1.2})
    with pytest.raises(SweepPathError, match="must be positive"):
        with_overrides(h100, {"memory.hbm.read_bandwidth_bytes_per_s": 0.0})
    with pytest.raises(SweepPathError, match="not finite"):
        with_overrides(h100, {"clock.sustained_hz": float("nan")})
    with pytest.raises(SweepPathError, match="not a quantity"):
        with_overrides(h100, {"clock.sustained_hz": True})
    # zero is allowed where the spec's default 0 means "not modelled"
    assert with_overrides(h100, {"efficiency.kernel_device_time_s": 0.0}).efficiency.kernel_device_time_s == 0.0


def test_parse_quantity():
    assert parse_quantity("1 TB/s", "B/s") == 1e12
    assert parse_quantity("900 GB/s", "B/s") == 9e11
    assert parse_quantity(3.35e12, "B/s") == 3.35e12  # numbers are SI already
    assert parse_quantity("80 %", "1") == 0.8
    assert parse_quantity("50 MiB", "B") == 50 * 2**20
    with pytest.raises(SweepPathError, match="x.y: wrong dimension"):
        parse_quantity("3 GHz", "B/s", path="x.y")


def test_known_paths_and_units(h100, dgx):
    paths = known_paths(h100)
    for p in ("memory.hbm.read_bandwidth_bytes_per_s", "compute.tensor_flops_per_s.bf16", "compute.units",
              "clock.sustained_hz", "memory.l2.read_bandwidth_bytes_per_s", "efficiency.launch_overhead_s"):
        assert p in paths
    assert "name" not in paths and "provenance" not in paths
    sys_paths = known_paths(dgx)
    assert sys_paths[0] == "count" and "fabric.bandwidth_bytes_per_s" in sys_paths and "compute.units" in sys_paths
    assert field_unit_of(h100, "memory.hbm.read_bandwidth_bytes_per_s") == "B/s"
    assert field_unit_of(h100, "compute.units") == "count"
    assert field_unit_of(dgx, "count") == "count"


def test_choice_field_on_a_systolic_device():
    tpu = load_hardware("tpu-v4")
    assert "systolic.dataflow" in known_paths(tpu)
    assert with_overrides(tpu, {"systolic.dataflow": "os"}).systolic.dataflow == "os"
    with pytest.raises(SweepPathError, match="unknown dataflow; got 'wss'; expected one of os, ws, is; did you mean 'ws'"):
        with_overrides(tpu, {"systolic.dataflow": "wss"})
