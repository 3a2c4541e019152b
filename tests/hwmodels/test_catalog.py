"""The shipped catalog: every file loads with full provenance; spot checks against cited datasheets."""

import pytest

from hwmodels.catalog import (
    describe,
    list_devices,
    list_systems,
    load_any,
    load_device,
    load_system,
    to_json,
)
from hwmodels.loader import numeric_paths
from hwmodels.spec import DeviceSpec, SpecError, SystemSpec

EXPECTED_DEVICES = {
    "v100-sxm2-32gb", "v100-pcie-32gb", "t4", "a100-sxm4-40gb", "a100-sxm4-80gb", "a100-pcie-40gb",
    "a100-pcie-80gb", "h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb", "b200", "l4", "l40s",
    "mi210", "mi250x", "mi300x",
}


def test_catalog_lists_the_required_devices_and_systems():
    assert EXPECTED_DEVICES <= set(list_devices())
    assert {"dgx-h100", "dgx-a100", "hgx-h200"} <= set(list_systems())


@pytest.mark.parametrize("name", sorted(EXPECTED_DEVICES))
def test_every_device_loads_with_provenance_for_every_number(name):
    dev = load_device(name)
    assert isinstance(dev, DeviceSpec) and dev.name == name
    paths = numeric_paths(dev)
    assert len(paths) > 40
    missing = [p for p, _, _ in paths if dev.source_of(p) is None or not dev.source_of(p).source.strip()]
    assert missing == []
    # memory levels outermost first, with the three levels the models rely on
    assert [lv.name for lv in dev.memory][1:] == ["l2", "smem"]
    assert dev.memory[0].name in ("hbm", "gddr")
    assert dev.sm is not None
    # energy per FLOP only for dtypes that have a throughput
    assert set(dev.energy.tensor_j_per_flop) <= set(dev.compute.tensor_flops_per_s)
    assert dev.power.idle_w < dev.power.tdp_w
    # no unsourced literal: sources of catalog numbers come from the files, not spec defaults,
    # except link energy, which is not modelled
    defaults = [p for p, _, _ in paths if dev.source_of(p).source.startswith("default of")]
    assert all(p.endswith("energy_j_per_byte") and p.startswith("links.") or p.startswith("sm.") for p in defaults)


@pytest.mark.parametrize("name", ["dgx-h100", "dgx-a100", "hgx-h200"])
def test_systems_load(name):
    s = load_system(name)
    assert isinstance(s, SystemSpec) and s.count == 8
    assert s.provenance["count"].source
    assert s.fabric is not None and s.provenance["fabric.bandwidth_bytes_per_s"].source


def test_h100_sxm_matches_datasheet():
    # NVIDIA H100 datasheet (SXM5): BF16 1,979 TFLOPS with sparsity -> 989.4 dense; 3.35 TB/s; 80 GB; 700 W
    h = load_device("h100-sxm5-80gb")
    assert h.compute.tensor_flops_per_s["bf16"] == pytest.approx(989.4e12)
    assert h.compute.tensor_flops_per_s["fp8_e4m3"] == pytest.approx(1978.9e12)
    assert h.level("hbm").read_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert h.level("hbm").capacity_bytes == 80e9  # the datasheet says 80 GB (decimal)
    assert h.power.tdp_w == 700.0
    assert h.compute.units == 132
    # tensor peak = SMs x 4096 FLOP/clk x sustained clock (hand check: 132 x 4096 x 1.83 GHz)
    assert h.compute.units * 4096 * h.clock.sustained_hz == pytest.approx(989.4e12, rel=1e-4)
    # MT4G: 834 cycles at 1.98 GHz
    assert h.level("hbm").latency_s == pytest.approx(834 / 1.98e9)
    assert h.link("peer").bandwidth_bytes_per_s == 450e9


def test_a100_l2_bandwidth_derivation():
    # A100 whitepaper p.35: 5120 B/clk; x 1410 MHz = 7.219 TB/s
    a = load_device("a100-sxm4-80gb")
    assert a.level("l2").read_bandwidth_bytes_per_s == pytest.approx(5120 * 1.41e9, rel=1e-3)
    assert a.level("hbm").read_bandwidth_bytes_per_s == 2039e9
    assert a.level("l2").capacity_bytes == 40 * 2**20


def test_amd_figures():
    # ROCm mi300.md: 2048 FLOPS/clk/CU x 304 CUs x 2.1 GHz = 1307.4 TFLOPS BF16; 5.3 TB/s; 192 GiB
    m = load_device("mi300x")
    assert m.compute.tensor_flops_per_s["bf16"] == pytest.approx(2048 * 304 * 2.1e9, rel=1e-4)
    assert m.level("hbm").read_bandwidth_bytes_per_s == 5.3e12
    assert m.level("hbm").capacity_bytes == 192 * 2**30
    assert m.sm.warp_size == 64
    # MI210: 1024 FLOPS/clk/CU x 104 CUs x 1.7 GHz = 181.0 TFLOPS FP16
    assert load_device("mi210").compute.tensor_flops_per_s["fp16"] == pytest.approx(181.0e12, rel=1e-3)


def test_energy_per_flop_is_dynamic_power_over_peak():
    h = load_device("h100-sxm5-80gb")
    expected = (h.power.tdp_w - h.power.idle_w) / h.compute.tensor_flops_per_s["bf16"]
    assert h.energy.tensor_j_per_flop["bf16"] == pytest.approx(expected, rel=5e-3)


def test_names_are_case_insensitive_and_cached():
    assert load_device("H100-SXM5-80GB") is load_device("h100-sxm5-80gb")
    assert load_system("DGX-H100") is load_system("dgx-h100")


def test_misspelt_device_name_suggests_near_matches():
    with pytest.raises(SpecError) as exc:
        load_device("h100-sxm-80gb")
    msg = str(exc.value)
    assert "unknown name; got 'h100-sxm-80gb'" in msg
    assert "did you mean 'h100-sxm5-80gb'" in msg
    with pytest.raises(SpecError, match=r"did you mean 'dgx-h100'"):
        load_system("dgx-h10")


def test_load_any_and_paths(tmp_path):
    assert isinstance(load_any("mi250x"), DeviceSpec)
    assert isinstance(load_any("hgx-h200"), SystemSpec)
    from hwmodels.catalog import DEVICES_DIR

    assert load_any(DEVICES_DIR / "l4.toml").name == "l4"
    with pytest.raises(SpecError, match="did you mean"):
        load_any("l40")
    with pytest.raises(SpecError, match="file not found"):
        load_device(tmp_path / "none.toml")


def test_describe_lists_every_field_with_human_units_and_sources():
    h = load_device("h100-sxm5-80gb")
    text = describe(h)
    assert "memory.hbm.read_bandwidth_bytes_per_s" in text and "3.35 TB/s" in text
    assert "989.4 TFLOP/s" in text and "700 W" in text
    for path, _, _ in numeric_paths(h):
        assert path in text
    assert "MT4G" in text and "datasheet" in text
    s = describe(load_system("dgx-h100"))
    assert "count 8" in s and "h100-sxm5-80gb" in s


def test_to_json_is_plain_data():
    import json

    data = to_json(load_device("t4"))
    assert json.loads(json.dumps(data))["compute"]["tensor_flops_per_s"]["fp16"] == 65e12


def test_a_prefix_suggests_the_devices_it_starts():
    from hwmodels.catalog import load_device
    from hwmodels.spec import SpecError

    with pytest.raises(SpecError, match=r"did you mean 'h100-pcie-80gb' or 'h100-sxm5-80gb' or 'h100-sxm5-96gb'\?"):
        load_device("h100")


@pytest.mark.parametrize(("device", "expected_s"), [
    # aiconfigurator's vLLM 0.24.0 cast on a B200, rows of <= 100 kB: median 2.181 us a kernel in graph replay less
    # its modelled work (834 cycles / 1.856 GHz of DRAM latency + 1.16 MB / (0.850 x 8 TB/s) of half-size bytes)
    ("b200", (2.181 - 834 / 1.856e3 - 1.16e6 / (0.850 * 8e12) * 1e6) * 1e-6),
    # 1.3 us per no-work kernel under CUDA graphs on an H100 (Hazy Research, as quoted)
    ("h100-sxm5-80gb", 1.3e-6),
    # 65,536 B per dependent SCALE kernel at 49 GB/s in graph replay (RRZE gpu-benches, A100 80 GB)
    ("a100-sxm4-80gb", 2 * 8 * 4096 / 49e9),
    # (567 - 53) us / (1025 - 100) graph nodes (NVIDIA CUDA 12.6 blog, RTX 3060)
    ("l40s", (567 - 53) / (1025 - 100) * 1e-6),
    # 3.4 us per kernel in graph replay minus the 2.9 us kernel (NVIDIA CUDA Graphs blog, V100)
    ("v100-sxm2-32gb", (3.4 - 2.9) * 1e-6),
    ("t4", (3.4 - 2.9) * 1e-6),
    # 3.865 us per dispatch in HIP graph replay (ROCm/rocm-systems #10834, W7900)
    ("mi300x", 3.865e-6),
])
def test_per_kernel_device_time_follows_its_source(device: str, expected_s: float) -> None:
    """Each GPU's kernel_device_time_s is its architecture's sourced figure, to the precision the source gives."""
    got = load_device(device).efficiency.kernel_device_time_s
    assert got == pytest.approx(expected_s, rel=0.01)
