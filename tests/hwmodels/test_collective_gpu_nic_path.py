"""LL128 across nodes as a fact of the node and the library (``gpu_nic_path``, ``ll128.max_gpu_nic_path``).

NCCL keeps LL128 across nodes, by default, when the graph's GPU-to-NIC path is at most PXB (every
version read from v2.8.4 to v2.29.2, src/graph/tuning.cc; Hopper and later also up to PXN from
v2.17). A DGX A100 reaches its NICs at PXB (nvidia-smi topo -m, rapidsai/ucx-py#749), an HGX/DGX
H100 at PIX (NVIDIA/nccl#1264; DGX H100 User Guide, one ConnectX-7 per GPU), a p5.48xlarge at PIX
(aws-ofi-nccl topology/p5.48xl-topo.xml). RCCL keeps LL128 off on MI300X nodes (its rule needs the
topology model's ``ll128Enabled``, which the 8x MI300X model does not set). Cases are hand-computed.
"""

from __future__ import annotations

import dataclasses

import pytest

from hwmodels.collectives import (
    GPU_NIC_PATHS,
    collective_options,
    collective_time,
    fabric_catalog,
    load_fabric_catalog,
    net_ll128,
)
from hwmodels.spec import SpecError

MIB = 2**20
US = 1e-6


def test_catalog_states_each_node_and_library():
    cat = fabric_catalog()
    assert cat.library("nccl").ll128_max_gpu_nic_path == "pxb"
    assert cat.library("rccl").ll128_max_gpu_nic_path is None
    got = {name: cat.system(name).gpu_nic_path for name in ("dgx-a100", "dgx-h100", "aws-p5")}
    assert got == {"dgx-a100": "pxb", "dgx-h100": "pix", "aws-p5": "pix"}
    assert [net_ll128(cat.system(n)) for n in ("dgx-a100", "dgx-h100", "aws-p5")] == [True, True, True]
    # not described (DGX B200), RCCL (MI300X over NDR), one node only (no NICs)
    assert [net_ll128(cat.system(n)) for n in ("dgx-b200", "azure-nd-mi300x-v5", "hgx-b200")] == [False] * 3
    # the NIC fabrics themselves carry no flag any more: the decision is the node's
    assert not any(cat.fabric(f).ll128 for f in ("ib-hdr", "ib-ndr", "efa-100g"))
    assert "DGX H100 User Guide" in cat.system("dgx-h100").provenance["systems.dgx-h100.gpu_nic_path"].source


def test_path_order_follows_nccl_path_types():
    # NCCL v2.29.2 src/graph/topo.h: PIX 4 < PXB 5 < P2C 6 < PXN 7 < PHB 8 < SYS 9
    assert GPU_NIC_PATHS == ("pix", "pxb", "p2c", "pxn", "phb", "sys")


# PXN is not modelled (NCCL 2.17+ keeps LL128 up to PXN on compute capability 90+): the catalog refuses it
@pytest.mark.parametrize("path,offered", [("pix", True), ("pxb", True), ("phb", False), ("sys", False)])
def test_ll128_across_nodes_follows_the_path(path, offered):
    node = dataclasses.replace(fabric_catalog().system("dgx-h100"), gpu_nic_path=path)
    across = collective_options("all_reduce", 4 * MIB, 16, node, n_nodes=2)
    assert (("tree", "ll128") in across) is offered and (("ring", "ll128") in across) is offered
    # inside one node the NVLink rule alone decides
    assert ("ring", "ll128") in collective_options("all_reduce", 4 * MIB, 8, node)


def test_rccl_offers_no_ll128_across_nodes():
    opts = collective_options("all_reduce", 4 * MIB, 16, "azure-nd-mi300x-v5", n_nodes=2)
    assert sorted(opts) == [("hierarchical", "simple"), ("ring", "ll"), ("ring", "simple"), ("tree", "ll"),
                            ("tree", "simple")]


def test_tree_ll128_across_two_dgx_h100_nodes_hand_computed():
    """4 MiB all_reduce, 16 H100 on 2 DGX H100 nodes (NDR, no plugin latency), tree LL128.

    latency: baseLat LL128 14.0 + 2 x (7 NVLink steps x 1.9 + 1 NET step x 4.0) = 48.6 us. Bytes: the
    chain inside a node moves 2 S over 24 ring channels x 15 GB/s x 0.92 = 331.2 GB/s (25.33 us); the
    two nodes exchange S over 8 x 50 GB/s x 0.97 x 0.92 = 357 GB/s (11.7 us), hidden behind it.
    Total 73.93 us, where the Simple tree it replaces took 107.3 us."""
    opts = collective_options("all_reduce", 4 * MIB, 16, "dgx-h100", n_nodes=2)
    r = opts[("tree", "ll128")]
    assert float(r.latency_s) == pytest.approx(48.6 * US, rel=1e-9)
    assert float(r.time_s) == pytest.approx(48.6 * US + 2 * 4 * MIB / (24 * 15e9 * 0.92), rel=1e-9)
    best = collective_time("all_reduce", 4 * MIB, 16, "dgx-h100", n_nodes=2)
    assert (best.algorithm, best.protocol) == ("tree", "ll128")
    assert float(best.time_s) == pytest.approx(73.93 * US, rel=1e-3)


def _catalog_with(tmp_path, old: str, new: str):
    text = load_fabric_catalog().path
    src = open(text, encoding="utf-8").read()
    assert old in src
    bad = tmp_path / "fabrics.toml"
    bad.write_text(src.replace(old, new, 1), encoding="utf-8")
    return bad


def test_unknown_path_is_one_located_error(tmp_path):
    bad = _catalog_with(tmp_path, '\ngpu_nic_path = { value = "pxb"', '\ngpu_nic_path = { value = "pbx"')
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(bad)
    msg = str(e.value)
    assert msg.count("\n") == 0 and "systems.dgx-a100.gpu_nic_path: unknown value" in msg and "'pbx'" in msg and "did you mean" in msg


def test_path_without_source_is_refused(tmp_path):
    bad = _catalog_with(tmp_path, 'll128.max_gpu_nic_path = { value = "pxb", source = "@nccl_ll128_rule",',
                        'll128.max_gpu_nic_path = { value = "pxb", source = "",')
    with pytest.raises(SpecError, match=r"libraries\.nccl\.ll128\.max_gpu_nic_path: missing source"):
        load_fabric_catalog(bad)


def test_path_on_a_node_without_nics_is_refused(tmp_path):
    bad = _catalog_with(tmp_path, 'intra = "nvlink5-nvswitch4"\ndevices_per_node',
                        'intra = "nvlink5-nvswitch4"\ngpu_nic_path = { value = "pix", source = "x" }\ndevices_per_node')
    with pytest.raises(SpecError, match=r"systems\.hgx-b200\.gpu_nic_path: a GPU-to-NIC path without an inter-node"):
        load_fabric_catalog(bad)


def test_a_pxn_node_path_is_refused_as_not_modelled(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text()
    old = 'gpu_nic_path = { value = "pix", source = "@dgxh100_nic"'
    assert text.count(old) == 1
    path = tmp_path / "fabrics.toml"
    path.write_text(text.replace(old, 'gpu_nic_path = { value = "pxn", source = "@dgxh100_nic"'))
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(path)
    assert str(e.value).startswith(f"{path}:systems.dgx-h100.gpu_nic_path: a PXN path is not modelled; got 'pxn'; "
                                   "expected one of pix, pxb, p2c, phb, sys (NCCL's LL128 rule for PXN depends on")
