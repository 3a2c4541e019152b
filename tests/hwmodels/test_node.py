"""Heterogeneous node specs: catalog nodes load with sourced links; bad node files give located errors."""

import pytest

from hwmodels.catalog import load_device, load_system
from hwmodels.node import NodeLink, list_nodes, load_node, node_from_spec
from hwmodels.spec import SpecError
from simulator.hardware import load_node_or_device

CATALOG_NODES = {"h100-plus-systolic128", "tpu-v5e-host", "jetson-agx-orin-64gb"}


def test_catalog_lists_the_example_nodes():
    assert CATALOG_NODES <= set(list_nodes())


@pytest.mark.parametrize("name", sorted(CATALOG_NODES))
def test_every_link_number_has_a_source(name):
    node = load_node(name)
    assert node.links
    for ln in node.links:
        for f in ("bandwidth_bytes_per_s", "latency_s", "energy_j_per_byte", "bandwidth_fraction"):
            prov = ln.provenance.get(f)
            assert prov is not None and prov.source.strip() and not prov.source.startswith("default of"), (ln, f)
        assert ln.a in node.device_names and ln.b in node.device_names
    for d in node.devices:
        assert d.spec.provenance  # catalog specs carry their sources


def test_h100_node_devices_and_pcie5_numbers():
    node = load_node("H100-plus-systolic128")  # names are case-insensitive
    assert node.device_names == ("gpu", "sa", "cpu")
    assert node.device("gpu").device.name == "h100-sxm5-80gb"
    assert node.device("sa").kind == "tpu" and node.device("sa").device.systolic.rows == 128
    ln = node.link("sa", "gpu")
    assert ln is node.link("gpu", "sa")  # symmetric
    # PCIe 5.0 x16: 16 lanes x 32 GT/s x 128/130 / 8 = 63.0 GB/s; NCCL's 48 GB/s effective (0.762)
    assert ln.bandwidth_bytes_per_s == pytest.approx(16 * 32e9 * 128 / 130 / 8, rel=2e-3)
    assert ln.effective_bandwidth_bytes_per_s == pytest.approx(63e9 * 0.762)
    # a 1 MB transfer: 4.1 us + 1e6 / 48.006e9 s = 24.93 us; 5.5 pJ/bit x 8e6 bit = 44 uJ
    assert ln.transfer_time_s(1e6) == pytest.approx(4.1e-6 + 1e6 / (63e9 * 0.762))
    assert ln.transfer_energy_j(1e6) == pytest.approx(5.5e-12 * 8e6)
    assert ln.transfer_time_s(0) == 0.0


def test_systolic_design_point_peak_and_power_budget():
    d = load_device("systolic-128x128-bf16")
    assert d.compute.tensor_flops_per_s["bf16"] == pytest.approx(128 * 128 * 2 * 1.05e9, rel=1e-3)
    # TDP = idle (90 W / 8 MXUs) + array at peak x 0.232 pJ/FLOP + HBM2E 409.6 GB/s x 3.97 pJ/bit
    dyn = d.compute.tensor_flops_per_s["bf16"] * 0.232e-12 + 409.6e9 * 8 * 3.97e-12
    assert d.power.idle_w == pytest.approx(90 / 8)
    assert d.power.tdp_w == pytest.approx(90 / 8 + dyn, rel=2e-3)


def test_cpu_devices_peaks_from_cited_per_core_rates():
    x = load_device("xeon-platinum-8480")
    assert x.kind == "cpu" and x.compute.units == 56
    assert x.compute.tensor_flops_per_s["bf16"] == pytest.approx(56 * 1024 * 2.0e9, rel=1e-3)  # AMX
    assert x.level("dram").read_bandwidth_bytes_per_s == pytest.approx(8 * 4800e6 * 8)  # 8 x DDR5-4800
    a = load_device("cortex-a78ae-12c")
    assert a.compute.tensor_flops_per_s["fp32"] == pytest.approx(12 * 16 * 2.2e9)


def test_jetson_node_shares_memory():
    node = load_node("jetson-agx-orin-64gb")
    assert set(node.shared_memory) == {"gpu", "dla0", "dla1", "cpu"}
    assert node.shares_memory("gpu", "dla1")
    assert all(ln.kind == "shared-memory" for ln in node.links)
    # a hand-off is one reformat pass: read + write through the 204.8 GB/s LPDDR5
    assert node.link("dla0", "gpu").bandwidth_bytes_per_s == pytest.approx(204.8e9 / 2)


def test_unlinked_devices_have_no_link_and_unknown_names_are_located():
    node = load_node("tpu-v5e-host")
    assert node.link("tpu", "cpu") is not None
    with pytest.raises(SpecError, match=r"node 'tpu-v5e-host': devices.tpx: unknown device; got 'tpx'; expected one "
                                        r"of tpu, cpu; did you mean 'tpu'\?"):
        node.link("tpx", "cpu")


def test_node_from_spec_wraps_a_device_and_a_system():
    one = node_from_spec(load_device("h100-sxm5-80gb"))
    assert one.device_names == ("h100-sxm5-80gb",) and one.links == ()
    sysnode = node_from_spec(load_system("dgx-h100"), name="gpus")
    assert sysnode.device("gpus").device.name == "h100-sxm5-80gb"


def test_load_node_or_device_resolves_nodes_first_then_devices():
    assert load_node_or_device("tpu-v5e-host").device_names == ("tpu", "cpu")
    assert load_node_or_device("tpu-v5e").device_names == ("tpu-v5e",)
    with pytest.raises(SpecError, match=r"did you mean 'tpu-v5e-host' \(a node\)"):
        load_node_or_device("tpu-v5e-hst")


def test_unknown_node_name_suggests_the_closest():
    with pytest.raises(SpecError, match=r"node 'jetson-agx-orin': unknown name.*did you mean 'jetson-agx-orin-64gb'"):
        load_node("jetson-agx-orin")


def _write(tmp_path, body):
    p = tmp_path / "node.toml"
    p.write_text('schema = 1\nname = "n"\ndescription = "d"\n' + body)
    return p


LINK = ('kind = "pcie5"\nbandwidth_bytes_per_s = {{ value = "63 GB/s", source = "s" }}\n'
        'latency_s = {{ value = "4 us", source = "s" }}\n')


def test_link_to_unknown_device_names_file_link_got_and_near_match(tmp_path):
    p = _write(tmp_path, '[[devices]]\nname = "gpu"\nspec = "h100-sxm5-80gb"\n'
                         '[[devices]]\nname = "dla0"\nspec = "edge-64x64"\n'
                         '[[links]]\na = "gpu"\nb = "dla"\n' + LINK.format())
    with pytest.raises(SpecError) as e:
        load_node(p)
    assert str(e.value) == (f"{p}: links[0] (gpu-dla).b: unknown device; got 'dla'; expected one of dla0, gpu; "
                            "did you mean 'dla0'?")


def test_every_problem_of_a_node_file_is_listed(tmp_path):
    p = _write(tmp_path, '[[devices]]\nname = "gpu"\nspec = "h100-sxm5-80gb"\n'
                         '[[devices]]\nname = "gpu"\nspec = "h100-sxm5-80gb"\n'
                         '[[devices]]\nname = "acc"\nspec = "tpu-v5"\n'
                         '[[devices]]\nname = "x"\n'
                         '[[links]]\na = "gpu"\nb = "gpu"\n' + LINK.format()
                         + '[[links]]\na = "gpu"\nb = "acc"\nkind = "pcie9"\n')
    with pytest.raises(SpecError) as e:
        load_node(p)
    msg = str(e.value)
    assert e.value.count == 7
    for part in ("devices.gpu: duplicate device name; got 'gpu' twice",
                 "devices.acc.spec: hardware 'tpu-v5': unknown name",
                 "devices.x.spec: missing field",
                 "links[0] (gpu-gpu): a link from a device to itself",
                 "links[1] (gpu-acc).kind: unknown kind; got 'pcie9'",
                 "links[1] (gpu-acc).bandwidth_bytes_per_s: missing field",
                 "links[1] (gpu-acc).latency_s: missing field"):
        assert part in msg, part


def test_duplicate_link_and_bad_shared_memory(tmp_path):
    p = _write(tmp_path, 'shared_memory = ["gpu", "cpux"]\n[[devices]]\nname = "gpu"\nspec = "h100-sxm5-80gb"\n'
                         '[[devices]]\nname = "cpu"\nspec = "xeon-platinum-8480"\n'
                         '[[links]]\na = "gpu"\nb = "cpu"\n' + LINK.format()
                         + '[[links]]\na = "cpu"\nb = "gpu"\n' + LINK.format())
    with pytest.raises(SpecError) as e:
        load_node(p)
    msg = str(e.value)
    assert "links[1] (cpu-gpu): duplicate link; got a second link between 'cpu' and 'gpu'" in msg
    assert "shared_memory: unknown device; got 'cpux'; expected one of cpu, gpu; did you mean 'cpu'?" in msg


def test_a_device_file_is_not_a_node(tmp_path):
    from hwmodels.catalog import DEVICES_DIR

    with pytest.raises(SpecError, match="not a node file; got no \\[\\[devices\\]\\] table"):
        load_node(DEVICES_DIR / "t4.toml")


def test_relative_device_path_is_relative_to_the_node_file(tmp_path):
    from hwmodels.catalog import DEVICES_DIR

    (tmp_path / "acc.toml").write_text((DEVICES_DIR / "edge-64x64.toml").read_text())
    p = _write(tmp_path, '[[devices]]\nname = "acc"\nspec = "acc.toml"\n')
    assert load_node(p).device("acc").device.name == "edge-64x64"


def test_transfer_time_hand_computed():
    ln = NodeLink(a="x", b="y", kind="cxl", bandwidth_bytes_per_s=64e9, latency_s=250e-9, energy_j_per_byte=1e-12,
                  bandwidth_fraction=0.5)
    assert ln.transfer_time_s(32e9) == pytest.approx(250e-9 + 1.0)


@pytest.mark.parametrize("name", ["systolic-128x128-bf16", "xeon-platinum-8480", "cortex-a78ae-12c"])
def test_new_device_files_source_every_number(name):
    from hwmodels.loader import numeric_paths

    dev = load_device(name)
    paths = [p for p, _, _ in numeric_paths(dev)]
    assert len(paths) > 25
    unsourced = [p for p in paths if dev.source_of(p) is None or not dev.source_of(p).source.strip()]
    assert unsourced == []
    # only fields whose spec default means "not present / not modelled" may come from spec.py
    defaults = [p for p in paths if dev.source_of(p).source.startswith("default of")]
    # (and the fields whose defaults are cited in spec.py: the blocked linear-algebra pair, reference LAPACK's
    # block size and a measured host sweep rate; DeepSeek-V3's fp8 promotion interval, used by GPU lowering only)
    assert set(defaults) <= {"efficiency.framework_op_overhead_s", "efficiency.framework_conv_op_overhead_s",
                             "efficiency.framework_module_call_s", "efficiency.framework_container_call_s",
                             "efficiency.l2_tile_bandwidth_fraction", "efficiency.l2_tile_sm_port_ratio",
                             "efficiency.weight_dequant_ops_per_element", "efficiency.linalg_block_size",
                             "efficiency.linalg_sweep_row_s", "efficiency.simt_gemm_peak_fraction",
                             "efficiency.decode_attention_bandwidth_fraction",
                             "efficiency.decode_attention_fp8_bandwidth_fraction",
                             "efficiency.context_fmha_tensor_fraction",
                             "efficiency.fp8_promotion_interval", "efficiency.host_sync_s", "efficiency.library_gemm_call_s", "efficiency.outer_axis_stream_fraction",
                             "efficiency.gemv_bandwidth_fraction", "efficiency.gemv_max_rows", "efficiency.conv_rate_fraction",
                             "efficiency.dropout_stream_fraction", "efficiency.mxfp8_quantize_stream_fraction"}
    assert set(dev.energy.tensor_j_per_flop) <= set(dev.compute.tensor_flops_per_s)
    assert dev.power.idle_w < dev.power.tdp_w


def test_restrict_and_with_link():
    node = load_node("h100-plus-systolic128")
    two = node.restrict(["sa", "gpu"])
    assert two.device_names == ("gpu", "sa") and len(two.links) == 1
    assert two.link("gpu", "sa").kind == "pcie5"
    fast = two.with_link(NodeLink(a="sa", b="gpu", kind="nvlink-c2c", bandwidth_bytes_per_s=450e9, latency_s=1e-6))
    assert fast.link("gpu", "sa").kind == "nvlink-c2c" and len(fast.links) == 1
    assert node.link("gpu", "sa").kind == "pcie5"  # the original is unchanged
    with pytest.raises(SpecError, match="devices.tpu: unknown device"):
        node.restrict(["gpu", "tpu"])


def test_host_core_count_is_checked(tmp_path):
    p = _write(tmp_path, '[[devices]]\nname = "cpu"\nspec = "host:0"\n')
    with pytest.raises(SpecError) as e:
        load_node(p)
    assert str(e.value) == f"{p}: devices.cpu.spec: host: cores; got '0'; expected host:N with N a positive integer"
