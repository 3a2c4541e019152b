"""TOML loading: generic field introspection, collected located errors, efficiency merge, overlays."""

import copy
import dataclasses

import pytest

from hwmodels.catalog import load_device, load_system
from hwmodels.loader import (
    apply_overlay,
    device_from_dict,
    field_unit,
    load_device_file,
    load_efficiency_defaults,
    numeric_paths,
)
from hwmodels.spec import DeviceSpec, SpecError


def q(value, source="test source: hand-written"):
    return {"value": value, "source": source}


def minimal(kind="gpu", **over):
    """A small, valid device description (numbers chosen for hand-checkable results)."""
    d = {
        "name": "toy",
        "kind": kind,
        "vendor": "Acme",
        "arch": "hopper",
        "description": "toy device",
        "clock": {"boost_hz": q("1 GHz"), "sustained_hz": q("1 GHz")},
        "compute": {
            "units": q(10),
            "tensor_flops_per_s": {"bf16": q("100 TFLOP/s")},
            "vector_flops_per_s": {"fp32": q("10 TFLOP/s")},
        },
        "memory": [
            {
                "name": "hbm",
                "capacity_bytes": q("16 GiB"),
                "read_bandwidth_bytes_per_s": q("1 TB/s"),
                "write_bandwidth_bytes_per_s": q("1 TB/s"),
                "latency_s": q("500 cycles"),
                "energy_j_per_byte": q("4 pJ/bit"),
            }
        ],
        "power": {"tdp_w": q("300 W"), "idle_w": q("50 W")},
        "energy": {
            "tensor_j_per_flop": {"bf16": q("1 pJ/FLOP")},
            "vector_j_per_flop": {"fp32": q("10 pJ/FLOP")},
        },
    }
    if kind == "gpu":
        d["sm"] = {
            "registers_per_sm": q(65536),
            "shared_mem_per_sm_bytes": q("100 KiB"),
            "max_shared_mem_per_cta_bytes": q("99 KiB"),
            "l1_bytes": q("128 KiB"),
            "max_threads_per_sm": q(1536),
            "max_ctas_per_sm": q(24),
        }
    if kind == "tpu":
        d["systolic"] = {"rows": q(128), "cols": q(128), "arrays_per_core": q(4)}
    d.update(over)
    return d


def test_minimal_device_in_si_units_with_provenance():
    dev = device_from_dict(minimal(), where="toy.toml")
    assert dev.compute.tensor_flops_per_s == {"bf16": 100e12}
    assert dev.level("hbm").capacity_bytes == 16 * 2**30
    assert dev.level("hbm").latency_s == pytest.approx(500e-9)  # 500 cycles at 1 GHz
    assert dev.level("hbm").energy_j_per_byte == pytest.approx(32e-12)  # 4 pJ/bit x 8
    assert dev.sm.warp_size == 32  # dataclass default
    prov = dev.source_of("memory.hbm.latency_s")
    assert prov.source == "test source: hand-written"
    assert "converted from 500 cycles at 1 GHz" in prov.note
    # efficiency comes from the hopper defaults, with their source and a note saying so
    eff = dev.source_of("efficiency.tensor_peak_fraction")
    assert "default for arch 'hopper'" in eff.note
    # every numeric leaf has provenance
    for path, _, _ in numeric_paths(dev):
        assert dev.source_of(path) is not None, path


def test_device_efficiency_override_beats_arch_default():
    data = minimal(efficiency={"tensor_peak_fraction": q(0.5, "measured: toy.csv")})
    dev = device_from_dict(data)
    assert dev.efficiency.tensor_peak_fraction == 0.5
    assert dev.source_of("efficiency.tensor_peak_fraction").source == "measured: toy.csv"
    defaults = load_efficiency_defaults()
    assert dev.efficiency.dram_bandwidth_fraction == defaults["hopper"]["dram_bandwidth_fraction"]["value"]


def test_refs_expand_anywhere_in_a_source():
    data = minimal(refs={"ds": "Acme datasheet rev 2"})
    data["power"]["tdp_w"] = q("300 W", "derived: @ds table 3 x 1")
    dev = device_from_dict(data)
    assert dev.source_of("power.tdp_w").source == "derived: Acme datasheet rev 2 table 3 x 1"


def test_tpu_needs_systolic_and_cpu_needs_neither():
    tpu = device_from_dict(minimal(kind="tpu"))
    assert tpu.systolic.rows == 128 and tpu.sm is None
    cpu = device_from_dict(minimal(kind="cpu"))
    assert cpu.sm is None and cpu.systolic is None
    data = minimal(kind="tpu")
    del data["systolic"]
    with pytest.raises(SpecError, match=r"systolic: missing section for kind 'tpu'"):
        device_from_dict(data)


def _cpu_section(**special):
    return {"gemm_peak_fraction": q(0.5), "dnn_peak_fraction": q(0.8), "gemm_half_m": q(8), "gemm_half_n": q(16),
            "gemm_half_k": q(4), "strided_copy_run_s": q("4 ns"), "library_call_overhead_s": q("10 us"),
            "special_function_s": {k: q(v) for k, v in special.items()}}


def test_cpu_section_with_special_functions_loads_from_a_file():
    # special_function_s is keyed by function name, not by dtype
    dev = device_from_dict(minimal(kind="cpu", cpu=_cpu_section(exp="1 ns", tanh="2.5 ns")))
    assert dev.cpu.special_function_s == {"exp": 1e-9, "tanh": 2.5e-9}
    assert dev.source_of("cpu.special_function_s.tanh").source == "test source: hand-written"
    with pytest.raises(SpecError, match=r"cpu\.special_function_s\.tanhh: unknown key; got 'tanhh'; "
                                        r"expected one of exp, tanh; did you mean 'tanh'\?"):
        device_from_dict(minimal(kind="cpu", cpu=_cpu_section(exp="1 ns", tanhh="2 ns")))


def test_broken_file_lists_every_problem_located(tmp_path):
    text = '''
name = "broken"
kind = "gpu"
vendor = "Acme"
arch = "hopper"
description = "several mistakes"

[clock]
boost_hz = { value = "1.5 GHz", source = "datasheet" }
sustained_hz = { value = "1.2 GHz" }

[compute]
units = { value = 0, source = "datasheet" }
[compute.tensor_flops_per_s]
bf16 = { value = "3 GHz", source = "datasheet" }
fp9 = { value = "10 TFLOP/s", source = "datasheet" }
[compute.vector_flops_per_s]
fp32 = { value = "10 TFLOP/s", source = "datasheet" }

[sm]
registers_per_sm = { value = 65536, source = "guide" }
shared_mem_per_sm_bytes = { value = "100 KB", source = "guide" }
max_shared_mem_per_cta_bytes = { value = "99 KiB", source = "guide" }
l1_bytes = { value = "128 KiB", source = "guide" }
max_threads_per_sm = { value = 1536, source = "guide" }
max_ctas_per_sm = { value = 24, source = "guide" }

[[memory]]
name = "hbm"
capacity_bytes = { value = "16 GiB", source = "ds" }
read_bandwith_bytes_per_s = { value = "1 TB/s", source = "ds" }
write_bandwidth_bytes_per_s = { value = "1 TB/s", source = "ds" }
latency_s = { value = 500, source = "ds" }
energy_j_per_byte = { value = "4 pJ/bit", source = "ds" }

[power]
tdp_w = { value = "300 W", source = "ds" }

[energy.tensor_j_per_flop]
fp8_e4m3 = { value = "1 pJ/FLOP", source = "derived" }
[energy.vector_j_per_flop]
fp32 = { value = "1 pJ/FLOP", source = "derived" }
'''
    path = tmp_path / "broken.toml"
    path.write_text(text)
    with pytest.raises(SpecError) as exc:
        load_device_file(path)
    msg = str(exc.value)
    lines = msg.splitlines()
    assert lines[0].startswith(f"{path}: ") and "problems" in lines[0]
    expected = [
        "clock.sustained_hz: missing source",
        "compute.units: must be positive; got 0",
        "compute.tensor_flops_per_s.bf16: wrong dimension (a frequency); got '3 GHz'",
        "compute.tensor_flops_per_s.fp9: unknown dtype; got 'fp9'",
        "sm.shared_mem_per_sm_bytes: ambiguous unit 'KB'",
        "memory.hbm.read_bandwith_bytes_per_s: unknown key; got 'read_bandwith_bytes_per_s'",
        "did you mean 'read_bandwidth_bytes_per_s'?",
        "memory.hbm.read_bandwidth_bytes_per_s: missing field",
        "memory.hbm.latency_s: bare number without a unit; got 500",
        "power.idle_w: missing field",
    ]
    for frag in expected:
        assert frag in msg, frag
    # every problem line is located in the file
    assert all(line.strip().startswith(str(path)) for line in lines[1:])
    assert len(lines) - 1 >= len(expected) - 1


def test_energy_for_a_dtype_without_throughput_is_an_error():
    data = minimal()
    data["energy"]["tensor_j_per_flop"]["fp8_e4m3"] = q("0.5 pJ/FLOP")
    with pytest.raises(SpecError, match=r"energy.tensor_j_per_flop.fp8_e4m3: energy for a dtype without a throughput"):
        device_from_dict(data)


def test_chain_energy_is_optional_and_checked_like_the_vector_energy():
    data = minimal()
    assert device_from_dict(data).energy.chain_j_per_flop == {}  # absent: every vector FLOP at vector_j_per_flop
    data["energy"]["chain_j_per_flop"] = {"fp32": q("4 pJ/FLOP")}
    assert device_from_dict(data).energy.chain_j_per_flop == {"fp32": pytest.approx(4e-12)}
    data["energy"]["chain_j_per_flop"]["fp64"] = q("8 pJ/FLOP")
    with pytest.raises(SpecError, match=r"energy.chain_j_per_flop.fp64: energy for a dtype without a throughput; got "
                                        r"'fp64'; expected a dtype of compute.vector_flops_per_s \(fp32\)"):
        device_from_dict(data)


def test_cross_field_checks():
    data = minimal()
    data["power"]["idle_w"] = q("400 W")
    data["clock"]["sustained_hz"] = q("2 GHz")
    data["kind"] = "gpx"
    with pytest.raises(SpecError) as exc:
        device_from_dict(data)
    msg = str(exc.value)
    assert "power.idle_w: idle power not below TDP" in msg
    assert "clock.sustained_hz: sustained clock above boost" in msg
    assert "kind: unknown device kind; got 'gpx'" in msg and "did you mean 'gpu'?" in msg


def test_unknown_arch_without_efficiency_table():
    with pytest.raises(SpecError, match=r"no efficiency defaults for arch 'hoper'.*did you mean 'hopper'\?"):
        device_from_dict(minimal(arch="hoper"))


def test_unknown_ref_is_reported():
    data = minimal(refs={"ds": "Acme datasheet"})
    data["power"]["tdp_w"] = q("300 W", "@dss")
    with pytest.raises(SpecError, match=r"unknown reference in source; got '@dss'.*did you mean 'ds'\?"):
        device_from_dict(data)


def test_field_added_to_a_spec_with_a_default_loads_without_loader_changes():
    """Introspection is generic: a new defaulted field is optional in files and settable by them."""
    from hwmodels import loader, spec

    @dataclasses.dataclass(frozen=True)
    class PowerSpec2(spec.PowerSpec):
        peak_w: float = spec.spec_field("W", "short-term peak power", default=0.0)

    ctx = loader._Ctx(loader._Problems("x.toml"), {}, None)
    built = loader._build(PowerSpec2, {"tdp_w": q("700 W"), "idle_w": q("80 W"), "peak_w": q("0.9 kW")}, "power", ctx)
    assert built.peak_w == 900.0
    assert ctx.provenance["power.peak_w"].source == "test source: hand-written"
    built = loader._build(PowerSpec2, {"tdp_w": q("700 W"), "idle_w": q("80 W")}, "power", ctx)
    assert built.peak_w == 0.0
    assert "default of PowerSpec2.peak_w" in ctx.provenance["power.peak_w"].source
    assert not ctx.problems.items


def test_field_unit_resolves_through_mappings_and_entries():
    assert field_unit(DeviceSpec, "memory.hbm.latency_s") == "s"
    assert field_unit(DeviceSpec, "compute.tensor_flops_per_s.bf16") == "FLOP/s"
    assert field_unit(DeviceSpec, "efficiency.launch_overhead_s") == "s"
    assert field_unit(DeviceSpec, "links.host.bandwidth_bytes_per_s") == "B/s"


# ------------------------------------------------------------------------------------------
# overlays


def test_overlay_by_dotted_path_leaves_the_base_untouched():
    base = load_device("h100-sxm5-80gb")
    snapshot = copy.deepcopy(base)
    new = apply_overlay(
        base,
        {
            "efficiency.tensor_peak_fraction": 0.7,
            "memory.hbm.read_bandwidth_bytes_per_s": "3.0 TB/s",
            "compute.tensor_flops_per_s.bf16": {"value": "900 TFLOP/s", "source": "measured: gemm.csv"},
        },
        source="measured: calibration run 1",
    )
    assert new.efficiency.tensor_peak_fraction == 0.7
    assert new.level("hbm").read_bandwidth_bytes_per_s == 3.0e12
    assert new.compute.tensor_flops_per_s["bf16"] == 900e12
    assert new.source_of("efficiency.tensor_peak_fraction").source == "measured: calibration run 1"
    assert new.source_of("compute.tensor_flops_per_s.bf16").source == "measured: gemm.csv"
    # base unchanged, including its provenance
    assert base == snapshot
    assert base.provenance == snapshot.provenance
    assert base.level("hbm").read_bandwidth_bytes_per_s == 3.35e12
    assert "calibration" not in base.source_of("efficiency.tensor_peak_fraction").source


def test_overlay_file_and_unknown_path_with_near_match(tmp_path):
    base = load_device("a100-sxm4-80gb")
    good = tmp_path / "ok.toml"
    good.write_text('source = "measured: runs/a100.csv"\n[values]\n"efficiency.launch_overhead_s" = "4 us"\n')
    new = apply_overlay(base, good)
    assert new.efficiency.launch_overhead_s == pytest.approx(4e-6)
    assert new.source_of("efficiency.launch_overhead_s").note == f"overlay {good}"
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'source = "sweep"\n[values]\n"efficiency.tensor_peak_fractoin" = 0.7\n"memory.hbm.latency_s" = "3 GHz"\n'
    )
    with pytest.raises(SpecError) as exc:
        apply_overlay(base, bad)
    msg = str(exc.value)
    assert "efficiency.tensor_peak_fractoin" in msg and "did you mean 'tensor_peak_fraction'?" in msg
    assert "memory.hbm.latency_s: wrong dimension (a frequency)" in msg


def test_overlay_needs_a_source_and_valid_values():
    base = load_device("t4")
    with pytest.raises(SpecError, match="missing source"):
        apply_overlay(base, {"power.tdp_w": "75 W"})
    with pytest.raises(SpecError, match="fraction above 1"):
        apply_overlay(base, {"efficiency.dram_bandwidth_fraction": 1.2}, source="sweep")


def test_overlay_on_a_system_reaches_the_device():
    sysm = load_system("dgx-h100")
    new = apply_overlay(sysm, {"device.memory.hbm.read_bandwidth_bytes_per_s": "3 TB/s", "count": 4}, source="what-if")
    assert new.count == 4 and new.device.level("hbm").read_bandwidth_bytes_per_s == 3e12
    assert new.device.source_of("memory.hbm.read_bandwidth_bytes_per_s").source == "what-if"
    assert new.provenance["count"].source == "what-if"
    assert sysm.count == 8 and sysm.device.level("hbm").read_bandwidth_bytes_per_s == 3.35e12


def test_calibration_overlay_file_applies_through_the_plain_loader(tmp_path):
    base = load_device("t4")
    ov = tmp_path / "t4.toml"
    ov.write_text(
        'schema = "nodeperf.calibration/1"\nsource = "measured: calibrated on runs/t4.csv"\n'
        '[values]\n"efficiency.tensor_peak_fraction" = 0.5\n"efficiency.launch_overhead_s" = "3.5e-06 s"\n'
        '[calibration]\ndevice = "t4"\n[calibration.bounds]\n"efficiency.tensor_peak_fraction" = [0.01, 1.0]\n'
    )
    new = apply_overlay(base, ov)
    assert new.efficiency.tensor_peak_fraction == 0.5
    assert new.efficiency.launch_overhead_s == pytest.approx(3.5e-6)
    assert new.source_of("efficiency.tensor_peak_fraction").source == "measured: calibrated on runs/t4.csv"
    assert base.efficiency.tensor_peak_fraction != 0.5
    bad = tmp_path / "bad.toml"
    bad.write_text('source = "x"\ncalibration = 3\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n')
    with pytest.raises(SpecError, match="calibration: not a table"):
        apply_overlay(base, bad)
    typo = tmp_path / "typo.toml"
    typo.write_text('source = "x"\n[values]\n"efficiency.tensor_peak_fraction" = 0.5\n[calibraton]\ndevice = "t4"\n')
    with pytest.raises(SpecError, match="did you mean 'calibration'"):
        apply_overlay(base, typo)
