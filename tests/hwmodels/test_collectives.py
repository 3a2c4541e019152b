"""Collective cost models: hand-computed cases per algorithm, busbw definitions, properties, the
fabric catalog's loader, and validation against published nccl-tests / rccl-tests rows."""

from __future__ import annotations

import collections
import csv
import dataclasses
import math
import textwrap

import numpy as np
import pytest

from hwmodels.collectives import (
    ALGORITHMS,
    COLLECTIVES,
    DEFAULT_PUBLISHED_FILE,
    applicable_algorithms,
    bus_bandwidth_factor,
    collective_options,
    collective_time,
    compare_published,
    fabric_catalog,
    gpus_per_thread_of,
    launch_skew_s,
    library_version_of,
    load_collective_system,
    load_fabric_catalog,
    mape,
    nvls_loop_bytes,
    nvls_tree_wave_bytes,
    read_published_collectives,
    ring_channels_used,
    select_algorithm,
    torus_group_axes,
    torus_group_system,
)
from hwmodels.spec import SpecError

US = 1e-6
GIB = 2**30
H100_LINKS_BW = 18 * 25e9  # NVLink4: 18 links x 25 GB/s per direction
H100_RING_BW = H100_LINKS_BW * 0.824  # efficiency.bandwidth_fraction (NCCL SM90_NVLINK_BW 20.6 / 25)
H100_NVLS_BW = H100_LINKS_BW * 0.6875  # nvls.bandwidth_fraction
P2P_CHUNK = 512 * 1024  # NCCL_P2P_NVL_CHUNKSIZE default (src/init.cc)
NCCL_BASE = {"ll": 6.6 * US, "ll128": 14.0 * US, "simple": 8.4 * US}
NCCL_NVLINK_STEP = {"ll": 0.6 * US, "ll128": 1.9 * US, "simple": 3.4 * US}
NCCL_NET_STEP = {"ll": 2.7 * US, "ll128": 4.0 * US, "simple": 14.0 * US}
NDR_NODE_BW = 8 * 50e9 * 0.97  # 8 NICs x 400 Gb/s x CX7 fraction
H100_LL_MAX_BW = 141e9  # ll.max_bandwidth_bytes_per_s: NCCL llMaxBws Hopper-N1
H100_CHANNEL_BW = 15e9  # channel.bandwidth_bytes_per_s: NCCL's ring busBw 360 GB/s over 24 channels
H100_RING_CHANNELS = 24  # ring_channels: NCCL's '24 coll channels' on HGX H100
# a ring / tree with every channel running: min(links, 24 channels x 15 GB/s) = 360 GB/s
H100_RING_NCCL_BW = min(H100_RING_BW, H100_RING_CHANNELS * H100_CHANNEL_BW)
H100_NVLS_LOOP = 16 * 128 * 1024  # nvls_channels x NVLS chunk (per device): one loop = n x this


@pytest.fixture(scope="module")
def h100():
    return load_collective_system("dgx-h100")


@pytest.fixture(scope="module")
def mi300x():
    return load_collective_system("mi300x-8")


# ----------------------------------------------------------------------------- catalog

REQUIRED_FABRICS = (
    "nvlink2", "nvlink3-nvswitch2", "nvlink4-nvswitch3", "nvlink5-nvswitch4", "pcie3-x16", "pcie4-x16",
    "pcie5-x16", "ib-hdr", "ib-ndr", "ib-xdr", "roce-400g", "ici-v4", "ici-v5p", "ici-v5e", "ici-v6e",
    "xgmi-mi250x", "xgmi-mi300x",
)


def test_catalog_has_every_fabric_generation():
    cat = fabric_catalog()
    assert set(REQUIRED_FABRICS) <= set(cat.fabrics)
    assert cat.fabric("ici-v5p").torus_dims == 3 and cat.fabric("ici-v6e").torus_dims == 2
    assert cat.fabric("nvlink4-nvswitch3").has_nvls and not cat.fabric("nvlink3-nvswitch2").has_nvls
    assert cat.fabric("xgmi-mi300x").topology == "fully_connected"


def test_every_catalog_number_has_a_source():
    cat = fabric_catalog()
    for name, f in cat.fabrics.items():
        needed = {"link_bandwidth_bytes_per_s", "links_per_device", "efficiency.bandwidth_fraction"}
        if f.has_nvls:
            needed.add("nvls.bandwidth_fraction")
        if f.topology == "torus":
            needed |= {"torus_dims", "latency.hop_s"}
        have = {k.split(".", 2)[2] for k in f.provenance}
        assert needed <= have, (name, needed - have)
        assert all(p.source and "@" not in p.source.split()[0] for p in f.provenance.values())
    for name, lib in cat.libraries.items():
        for p in lib.protocols:
            assert f"libraries.{name}.base_latency_s.{p}" in lib.provenance
            assert f"libraries.{name}.protocol.{p}.bandwidth_fraction" in lib.provenance
            for cls in lib.step_latency_s:
                assert f"libraries.{name}.step_latency_s.{cls}.{p}" in lib.provenance
    for name, s in cat.systems.items():
        assert f"systems.{name}.devices_per_node" in s.provenance


def test_catalog_values_in_si_units():
    cat = fabric_catalog()
    f = cat.fabric("nvlink4-nvswitch3")
    assert f.link_bandwidth_bytes_per_s == 25e9 and f.links_per_device == 18
    assert f.achievable_link_bandwidth_bytes_per_s == pytest.approx(20.6e9)
    assert cat.fabric("ib-ndr").link_bandwidth_bytes_per_s == 50e9  # "400 Gbit/s"
    assert cat.fabric("efa-100g").extra_step_latency_s == pytest.approx(20e-6)
    assert cat.fabric("efa-100g").tuner_extra_step_latency_s == pytest.approx(75e-6)
    assert cat.library("nccl").step_latency_s["nvlink"]["ll"] == pytest.approx(0.6e-6)
    assert cat.system("DGX-H100").nics_per_node == 8  # case-insensitive


def _write(tmp_path, text):
    p = tmp_path / "fabrics.toml"
    p.write_text(textwrap.dedent(text))
    return p


GOOD_LIB = """
[libraries.lib]
algorithms = ["ring"]
base_latency_s.simple = { value = "1 us", source = "x" }
step_latency_s.nvlink.simple = { value = "1 us", source = "x" }
protocol.simple.bandwidth_fraction = { value = 1.0, source = "x" }
"""


def test_loader_collects_every_problem_with_locations(tmp_path):
    p = _write(tmp_path, """
        schema = 1
        [refs]
        datasheet = "vendor datasheet"
        [fabrics.f]
        class = "nvlink"
        topology = "switch"
        link_bandwidth_bytes_per_s = "25 GB/s"
        links_per_device = { value = 18, source = "@datashet" }
        efficiency.bandwidth_fraction = { value = 1.5, source = "@datasheet" }
        latency.hop_s = { value = "2 KB", source = "@datasheet" }
        bandwith = 3
        """ + GOOD_LIB + """
        [systems.s]
        library = "lib"
        intra = "g"
        devices_per_node = { value = 8, source = "x" }
        """)
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(p)
    msg = str(e.value)
    assert f"{p}:fabrics.f.link_bandwidth_bytes_per_s: number without a source" in msg
    assert "fabrics.f.links_per_device: unknown reference in source; got '@datashet'" in msg
    assert "did you mean 'datasheet'" in msg
    assert "fabrics.f.efficiency.bandwidth_fraction: fraction above 1" in msg
    assert "fabrics.f.latency.hop_s: ambiguous unit 'KB'" in msg
    assert "fabrics.f.bandwith: unknown key" in msg
    assert "systems.s.intra: unknown fabric; got 'g'" in msg


def test_loader_rejects_wrong_dimension_and_class_mismatch(tmp_path):
    p = _write(tmp_path, """
        schema = 1
        [fabrics.f]
        class = "pci"
        topology = "switch"
        link_bandwidth_bytes_per_s = { value = "2 us", source = "x" }
        links_per_device = { value = 1, source = "x" }
        efficiency.bandwidth_fraction = { value = 0.8, source = "x" }
        [fabrics.ok]
        class = "pci"
        topology = "switch"
        link_bandwidth_bytes_per_s = { value = "2 GB/s", source = "x" }
        links_per_device = { value = 1, source = "x" }
        efficiency.bandwidth_fraction = { value = 0.8, source = "x" }
        """ + GOOD_LIB + """
        [systems.s]
        library = "lib"
        intra = "ok"
        devices_per_node = { value = 8, source = "x" }
        """)
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(p)
    msg = str(e.value)
    assert "fabrics.f.link_bandwidth_bytes_per_s: wrong dimension" in msg
    assert "systems.s.intra: library 'lib' has no step latency for 'pci'" in msg


def test_unknown_names_suggest_near_matches(h100):
    with pytest.raises(SpecError, match="did you mean 'dgx-h100'"):
        load_collective_system("dgx-h10")
    with pytest.raises(ValueError, match="did you mean 'all_reduce'"):
        collective_time("allreduce", 1024, 8, h100)
    with pytest.raises(ValueError, match="did you mean 'ring'"):
        collective_time("all_reduce", 1024, 8, h100, algorithm="rign")
    with pytest.raises(ValueError, match="nvls"):
        collective_time("all_to_all", 1024, 8, h100, algorithm="nvls")
    with pytest.raises(ValueError, match="at most 8 per node"):
        collective_time("all_reduce", 1024, 16, h100, n_nodes=1)
    with pytest.raises(ValueError, match="no inter-node fabric"):
        collective_time("all_reduce", 1024, 16, load_collective_system("mi300x-8"))
    with pytest.raises(ValueError, match="positive"):
        collective_time("all_reduce", 0, 8, h100)


# ----------------------------------------------------------------------------- closed forms

@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("proto", ["ll", "ll128", "simple"])
def test_ring_all_reduce_closed_form(h100, n, proto):
    """Ring all_reduce of S bytes on n devices = base + 2(n-1) alpha + 2(n-1)/n S / B (LL capped at llMaxBw)."""
    frac = {"ll": 0.5, "ll128": 0.92, "simple": 1.0}[proto]
    s = 3 * 2**27
    bw = min(H100_RING_NCCL_BW * frac, H100_LL_MAX_BW) if proto == "ll" else H100_RING_NCCL_BW * frac
    want = NCCL_BASE[proto] + 2 * (n - 1) * NCCL_NVLINK_STEP[proto] + 2 * (n - 1) / n * s / bw
    r = collective_time("all_reduce", s, n, h100, algorithm="ring", protocol=proto)
    assert r.time_s == pytest.approx(want, rel=1e-12)
    assert (r.algorithm, r.protocol) == ("ring", proto)
    assert r.latency_s == pytest.approx(NCCL_BASE[proto] + 2 * (n - 1) * NCCL_NVLINK_STEP[proto])


@pytest.mark.parametrize("coll", ["all_gather", "reduce_scatter"])
def test_ring_gather_scatter_closed_form(h100, coll):
    s, n = 10**9, 8
    want = NCCL_BASE["simple"] + (n - 1) * NCCL_NVLINK_STEP["simple"] + (n - 1) / n * s / H100_RING_NCCL_BW
    assert collective_time(coll, s, n, h100, algorithm="ring", protocol="simple").time_s == pytest.approx(want)


def test_broadcast_and_send_recv_closed_form(h100):
    s, n = 10**9, 8
    bc = NCCL_BASE["simple"] + (n - 1) * NCCL_NVLINK_STEP["simple"] + s / H100_RING_NCCL_BW
    assert collective_time("broadcast", s, n, h100, protocol="simple").time_s == pytest.approx(bc)
    # 10**9 B over 32 channels (parts of ~30 MiB): the last 512 KiB chunk is copied out after it arrives
    p2p = NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + s / H100_RING_BW + P2P_CHUNK / H100_CHANNEL_BW
    assert collective_time("send_recv", s, n, h100, protocol="simple").time_s == pytest.approx(p2p)


def test_ll_cap_by_gpu_on_one_node_and_by_cpu_across_nodes(h100):
    """NCCL: ring LL busBw = min(llMaxBw, busBw * .5); llMaxBw is indexed by GPU type on one node and by
    CPU vendor and node count across nodes (tuning.cc llMaxBws: Intel-N2 39.0, Intel-N4 20.4 GB/s)."""
    s = 2**24
    one = collective_time("all_reduce", s, 8, h100, algorithm="ring", protocol="ll")
    assert one.time_s == pytest.approx(NCCL_BASE["ll"] + 14 * NCCL_NVLINK_STEP["ll"] + 2 * 7 / 8 * s / H100_LL_MAX_BW)
    # 16 ranks on 2 nodes of Intel hosts: the 39 GB/s cap binds before the NVLink share and the NICs
    two = collective_time("all_reduce", s, 16, h100, algorithm="ring", protocol="ll")
    d = 2 * 15 / 16 * s
    lat = NCCL_BASE["ll"] + 2 * 2 * 7 * NCCL_NVLINK_STEP["ll"] + 2 * NCCL_NET_STEP["ll"]
    assert two.time_s == pytest.approx(lat + max(7 / 8 * d / (0.5 * H100_RING_NCCL_BW), d / (0.5 * NDR_NODE_BW),
                                                 d / 39.0e9))
    # more than two nodes: 20.4 GB/s (Intel-N4); AMD hosts (aws-p5): 22.5 GB/s on two nodes
    four = collective_time("all_reduce", s, 32, h100, algorithm="ring", protocol="ll")
    assert four.time_s == pytest.approx(four.latency_s + 2 * 31 / 32 * s / 20.4e9)
    p5 = collective_time("all_reduce", s, 16, "aws-p5", algorithm="ring", protocol="ll")
    assert p5.time_s == pytest.approx(p5.latency_s + d / 22.5e9)
    # a library / fabric without the field (RCCL on MI300X) is not capped
    assert load_collective_system("mi300x-8").intra.ll_max_bandwidth_bytes_per_s is None


@pytest.mark.parametrize("n,size,channels", [
    (8, 2**17, 2),  # min(nChannelsMin 4, ceil(128 KiB / 64 KiB)) = 2
    (8, 2**25, 4),  # 4 channels: parts of 8 MiB <= 16 MiB
    (8, 2**28, 16),  # 4 -> 8 -> 16 channels until a part is <= 16 MiB
    (8, 2**30, 32),  # 32 (p2pnChannelsPerPeer): parts of 32 MiB, no further doubling
    (2, 2**25, 16),  # 2 ranks: nChannelsMin = 16 (16 x 2 <= 32 p2p channels)
])
def test_send_recv_channel_ramp_closed_form(h100, n, size, channels):
    """NCCL's p2p split (enqueue.cc): a send uses `channels` channels of 15 GB/s, capped by the NVLink pair."""
    r = collective_time("send_recv", size, n, h100, protocol="simple")
    bw = min(channels * H100_CHANNEL_BW, H100_RING_BW)
    last = min(size / channels, P2P_CHUNK)  # the last chunk of a channel's part, copied out after it arrives
    assert r.time_s == pytest.approx(NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + size / bw
                                     + last / H100_CHANNEL_BW)
    # dgx-a100 ramps the same way over 10 GB/s channels, capped by its 12 x 20 GB/s NVLink3 pair
    a100 = collective_time("send_recv", size, n, "dgx-a100", protocol="simple")
    bw = min(channels * 10e9, 12 * 25e9 * 0.8)
    assert a100.time_s == pytest.approx(NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + size / bw + last / 10e9)
    # a system without NCCL's p2p channel counts (pcie4-8gpu) keeps the link-bound send
    pcie = collective_time("send_recv", size, n, "pcie4-8gpu", protocol="simple")
    assert pcie.time_s == pytest.approx(NCCL_BASE["simple"] + 5.7 * US + size / (31.5e9 * 0.762))


def test_tree_all_reduce_closed_form(h100):
    s, n = 10**8, 8
    want = NCCL_BASE["simple"] + 2 * (n - 1) * NCCL_NVLINK_STEP["simple"] + 2 * s / H100_RING_NCCL_BW
    assert collective_time("all_reduce", s, n, h100, algorithm="tree", protocol="simple").time_s == pytest.approx(want)
    # two nodes: chain inside, one exchange of S across the 8 NICs; log2(2) = 1 inter step each way
    want2 = NCCL_BASE["simple"] + 2 * (7 * NCCL_NVLINK_STEP["simple"] + NCCL_NET_STEP["simple"]) + max(
        2 * s / H100_RING_NCCL_BW, s / NDR_NODE_BW)
    r = collective_time("all_reduce", s, 16, h100, algorithm="tree", protocol="simple")
    assert r.n_nodes == 2 and r.time_s == pytest.approx(want2)


@pytest.mark.parametrize("n", [2, 4, 6, 8])
def test_nvls_closed_form(h100, n):
    """NVLS all_reduce moves S(n+1)/n per direction; reduce_scatter sends S; all_gather receives S; plus one
    loop of nvls_channels x n x 128 KiB (NCCL's chunk at 8 GiB) that the reduce/multicast pipeline does not overlap."""
    s = 2**33
    loop = H100_NVLS_LOOP * n
    ar = collective_time("all_reduce", s, n, h100, algorithm="nvls")
    assert ar.time_s == pytest.approx(23 * US + (s + loop) * (n + 1) / n / H100_NVLS_BW)
    assert ar.protocol == "simple"
    for coll in ("reduce_scatter", "all_gather"):
        assert collective_time(coll, s, n, h100, algorithm="nvls").time_s == pytest.approx(
            23 * US + (s + loop) / H100_NVLS_BW)


def test_nvls_only_on_switch_with_sharp_in_one_node(h100):
    assert "nvls" in applicable_algorithms("all_reduce", 8, h100)
    assert "nvls" not in applicable_algorithms("all_reduce", 16, h100)
    assert "nvls" not in applicable_algorithms("all_reduce", 8, "dgx-a100")
    assert "nvls" not in applicable_algorithms("all_reduce", 8, "mi300x-8")
    assert applicable_algorithms("all_to_all", 8, h100) == ("direct",)


def test_multi_node_ring_uses_every_nic_in_parallel(h100):
    """16 ranks on 2 nodes: 28 NVLink steps + 2 network steps; D = 2(n-1)/n S split over links and NICs."""
    s, n, g = 2**32, 16, 8
    d = 2 * (n - 1) / n * s
    lat = NCCL_BASE["simple"] + 2 * 2 * (g - 1) * NCCL_NVLINK_STEP["simple"] + 2 * NCCL_NET_STEP["simple"]
    want = lat + max((g - 1) / g * d / H100_RING_BW, d / NDR_NODE_BW)
    r = collective_time("all_reduce", s, n, h100, algorithm="ring", protocol="simple")
    assert r.time_s == pytest.approx(want)
    # bus bandwidth of a NIC-bound ring equals the node's NIC bandwidth (8 x 48.5 GB/s)
    assert r.busbw_bytes_per_s == pytest.approx(NDR_NODE_BW, rel=0.01)


def test_hierarchical_closed_form(h100):
    """Intra reduce-scatter (NVLS here) + inter ring of S/g per GPU-NIC + intra all-gather, pipelined.

    The NVLS tree across 4 nodes also fills its network pipeline: 2 x log2(4) = 4 network stages in series,
    3 waves beyond the steady state, each 16 NVLS channels x a 64 KiB chunk (NCCL's default cap from four
    nodes; 16 GiB is too large for the chunk to shrink) over one GPU's NIC (48.5 GB/s): 64.9 us."""
    s, n, g, nodes = 2**34, 32, 8, 4
    t_inter = 2 * (nodes - 1) / nodes * s / NDR_NODE_BW
    t_nvls = s * (g + 1) / g / H100_NVLS_BW
    t_ring = 2 * (g - 1) / g * s / H100_RING_BW
    lat_n = 2 * (nodes - 1) * NCCL_NET_STEP["simple"]
    fill = 3 * 16 * 65536 / (NDR_NODE_BW / g)
    via_nvls = NCCL_BASE["simple"] + lat_n + 23 * US + max(t_nvls, t_inter) + fill
    via_ring = NCCL_BASE["simple"] + lat_n + 2 * (g - 1) * NCCL_NVLINK_STEP["simple"] + max(t_ring, t_inter)
    r = collective_time("all_reduce", s, n, h100, algorithm="hierarchical")
    assert r.time_s == pytest.approx(min(via_nvls, via_ring))


def test_direct_all_to_all_closed_form(h100):
    s, n = 2**32, 8
    # 512 MiB a peer: channels doubled to 32 a peer (parts of 16 MiB), all 32 p2p channels busy (480 GB/s > the
    # NVLink pair's 370.8); the last 512 KiB chunk of a part is copied out after it arrives
    want = (NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + (n - 1) / n * s / H100_RING_BW
            + P2P_CHUNK / H100_CHANNEL_BW)
    assert collective_time("all_to_all", s, n, h100, protocol="simple").time_s == pytest.approx(want)
    # across 2 nodes the off-node half leaves through the GPU's own NIC (one per GPU)
    want2 = NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + NCCL_NET_STEP["simple"] + max(
        7 / 16 * s / H100_RING_BW, 8 / 16 * s / (NDR_NODE_BW / 8))
    assert collective_time("all_to_all", s, 16, h100, protocol="simple").time_s == pytest.approx(want2)


def test_all_to_all_p2p_channels_and_protocol():
    """One node: every all-to-all round (one peer) gets the channels of an S/n send, the rounds start at
    reverseBits(r) of the 32 p2p channels (disjoint), so a rank's sends run on (n-1) x 32/n channels of 22.5 GB/s
    on a DGX B200, below its 721.8 GB/s NVLink rate; sends of at most 32 x 16 KiB a peer run LL (NCCL 2.28.9
    addP2pToPlan), larger ones Simple."""
    b200 = "dgx-b200"
    ch_bw = 22.5e9
    for n in (2, 4, 8):
        s = 2.0**29  # 512 MiB: S/n a peer, 32/n channels each (parts of 16 MiB are not split further)
        want = (NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + (n - 1) / n * s / ((n - 1) * 32 / n * ch_bw)
                + P2P_CHUNK / ch_bw)  # the last 512 KiB chunk of a channel's part, copied out after it arrives
        r = collective_time("all_to_all", s, n, b200)
        assert (r.algorithm, r.protocol) == ("direct", "simple")
        assert r.time_s == pytest.approx(want)  # = base + step + S / (32 x 22.5 GB/s) + 23.3 us, whatever n
    # 8 GiB on 8 GPUs: 1 GiB a peer, parts above 16 MiB double its channels to 32 a peer, so all 32 channels
    # carry sends and the NVLink rate binds (0.802 x 18 x 50 GB/s)
    s = 2.0**33
    want = (NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + 7 / 8 * s / min(32 * ch_bw, 0.802 * 18 * 50e9)
            + P2P_CHUNK / ch_bw)
    assert collective_time("all_to_all", s, 8, b200).time_s == pytest.approx(want)
    # the protocol by size, not by time: 512 KiB a peer is LL (4 MiB on 8 GPUs), the next size Simple
    r = collective_time("all_to_all", np.array([2.0**22, 2.0**23]), 8, b200)
    assert list(r.protocol) == ["ll", "simple"]
    h = collective_time("all_to_all", np.array([2.0**22, 2.0**23]), 8, "dgx-h100")
    assert list(h.protocol) == ["ll", "simple"]
    # LL carries half a line's bytes; one node caps it at NCCL's Blackwell llMaxBw 282 GB/s (below 28 x 22.5 / 2)
    ll = NCCL_BASE["ll"] + NCCL_NVLINK_STEP["ll"] + 7 / 8 * 2**22 / min(282e9, 28 * ch_bw * 0.5)
    assert r.time_s[0] == pytest.approx(ll)


def test_fully_connected_uses_one_link_per_peer(mi300x):
    """MI300X: 7 xGMI links, one per peer, 48 GB/s achievable each (RCCL); 4 ranks reach 3 links."""
    link = 64e9 * 0.75
    s = 2**33
    for n, links in ((8, 7), (4, 3), (2, 1)):
        r = collective_time("all_reduce", s, n, mi300x, algorithm="ring", protocol="simple")
        want = 17 * US + 2 * (n - 1) * 3.6 * US + 2 * (n - 1) / n * s / (links * link)
        assert r.time_s == pytest.approx(want)
    assert collective_time("send_recv", s, 8, mi300x, protocol="simple").time_s == pytest.approx(
        17 * US + 3.6 * US + s / link)


def test_torus_rings_step_per_dimension():
    tpu = load_collective_system("tpu-v5p-pod")
    r = collective_time("all_reduce", 2**30, 64, tpu, algorithm="ring")  # 4 x 4 x 4: 3 dims x 3 steps per pass
    assert r.latency_s == pytest.approx(2 * 3 * 3 * 1 * US)
    # fabrics.toml ici-v5p: efficiency.bandwidth_fraction 0.9 (the scaling book's 9e10 B/s one-way per link)
    assert r.time_s == pytest.approx(r.latency_s + 2 * 63 / 64 * 2**30 / (6 * 100e9 * 0.9))
    # the farthest of 63 peers is 3 x 2 hops away: 5 extra hops of 1 us on top of the step
    a2a = collective_time("all_to_all", 2**30, 64, tpu)
    assert a2a.latency_s == pytest.approx(1 * US + 5 * US)


@pytest.mark.parametrize(("shape", "n", "stride", "wrap", "axes"), [
    ((4, 4, 4), 4, 1, (True,) * 3, ((4, 2),)),               # v5p-128, tp 4: one axis, both links
    ((4, 4, 8), 8, 1, (True,) * 3, ((8, 2),)),               # JAX's mesh rule: the axis of 8, not 4 x 2
    ((4, 4, 8), 16, 8, (True,) * 3, ((4, 2), (4, 2))),       # the fsdp group takes the two axes left
    ((8, 8, 8), 16, 1, (True,) * 3, ((8, 2), (2, 1))),       # no whole axes multiply to 16: fill order
    ((16, 16), 16, 1, (True, True), ((16, 2),)),             # v5e-256, tp 16
    ((4, 4), 16, 1, (False, False), ((4, 1), (4, 1))),       # v5e-16: no wraparound, one link per axis
])
def test_torus_group_axes_follow_jax_mesh_assignment(shape, n, stride, wrap, axes):
    assert torus_group_axes(shape, n, stride, wrap) == axes


def test_torus_group_system_narrows_the_ring_to_the_group_axes():
    tpu = load_collective_system("tpu-v5p-pod")
    one = torus_group_system(tpu, (4, 4, 4), 4, 1, (True,) * 3)
    assert (one.intra.links_per_device, one.intra.torus_dims) == (2, 1)
    r = collective_time("all_gather", 2**30, 4, one, algorithm="ring")
    # scaling book: AllGather = bytes / (bidirectional ICI bandwidth x axes): 3/4 GiB over 2 x 90 GB/s
    assert r.time_s == pytest.approx(r.latency_s + 3 / 4 * 2**30 / (2 * 100e9 * 0.9))
    assert r.latency_s == pytest.approx(3 * US)  # a 4-ring over one axis: 3 steps of 1 us
    assert torus_group_system(tpu, (4, 4, 4), 64, 1, (True,) * 3).intra.links_per_device == 6
    assert torus_group_system(tpu, (4, 4, 4), 1, 1, (True,) * 3) is tpu


# ----------------------------------------------------------------------------- busbw

@pytest.mark.parametrize("coll,factor", [
    ("all_reduce", 2 * 7 / 8), ("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("all_to_all", 7 / 8),
    ("broadcast", 1.0), ("send_recv", 1.0)])
def test_busbw_definition(h100, coll, factor):
    assert bus_bandwidth_factor(coll, 8) == pytest.approx(factor)
    r = collective_time(coll, 123456789, 8, h100)
    assert r.algbw_bytes_per_s == pytest.approx(123456789 / r.time_s)
    assert r.busbw_bytes_per_s == pytest.approx(r.algbw_bytes_per_s * factor)


def test_ring_busbw_tends_to_the_achievable_link_bandwidth(h100):
    """busbw is independent of n for rings: it approaches links x bandwidth x fraction for every n."""
    for n in (2, 4, 8):
        r = collective_time("all_reduce", 2**40, n, h100, algorithm="ring", protocol="simple")
        assert r.busbw_bytes_per_s == pytest.approx(H100_RING_NCCL_BW, rel=1e-3)
    # NCCL's own figure: the 4x H100 tuning table prints Ring/Simple AllReduce algBw 240 = 360 x 4/6 GB/s
    assert H100_RING_NCCL_BW == pytest.approx(360e9)


# nvbandwidth SUM lines (GB/s) of a 4-GPU GB200 tray: oracle-quickstart/oci-gpu-quickstarts @ 140fc621,
# nvidia/GB200/README-GB200.md lines 785-799 (12 ordered pairs for the pair tests, 4 devices for all_to_one /
# one_to_all); ND H100 v5 'Device to Device read' 672 GB/s: Azure/AI-benchmarking-guide @ 8fd0c6e1,
# Azure_Results/ND_H100_v5_results.md line 60 (device_to_device_bidirectional_memcpy_read_sm, both directions).
GB200_NVBW_SUM = {"read_sm": 9428.13, "write_sm": 8606.87, "bidir_read_sm_total": 16163.45,
                  "all_to_one_write_sm": 2873.89, "one_to_all_write_sm": 2925.66}
H100_NVBW_BIDIR_READ_SM = 672.0


def test_nvlink_sm_copy_fractions_from_nvbandwidth():
    """docs/collectives.md 'NVLink 5's copy rate from nvbandwidth': the whole-GPU SM copy over NVLink 5 reaches
    NCCL's 40.1 GB/s a link, and the one test run on both generations gives NVLink 4 and 5 the same share."""
    cat = fabric_catalog()
    nv5, nv4 = cat.fabric("nvlink5-nvswitch4"), cat.fabric("nvlink4-nvswitch3")
    nv5_gpu = nv5.links_per_device * nv5.link_bandwidth_bytes_per_s  # 900 GB/s per direction
    nv4_gpu = nv4.links_per_device * nv4.link_bandwidth_bytes_per_s  # 450 GB/s
    assert (nv5_gpu, nv4_gpu) == (pytest.approx(900e9), pytest.approx(450e9))
    pair = {k: GB200_NVBW_SUM[k] * 1e9 / 12 for k in ("read_sm", "write_sm", "bidir_read_sm_total")}
    write_sm = pair["write_sm"] / nv5_gpu
    assert write_sm == pytest.approx(0.7969, abs=1e-4)  # 717.2 GB/s a pair, 39.85 GB/s a link
    assert pair["read_sm"] / nv5_gpu == pytest.approx(0.8730, abs=1e-4)  # 785.7 GB/s
    into_one = GB200_NVBW_SUM["all_to_one_write_sm"] * 1e9 / 4 / nv5_gpu
    out_of_one = GB200_NVBW_SUM["one_to_all_write_sm"] * 1e9 / 4 / nv5_gpu
    assert (into_one, out_of_one) == (pytest.approx(0.7983, abs=1e-4), pytest.approx(0.8127, abs=1e-4))
    # the catalog's NVLink 5 share (NCCL's SM100_NVLINK_BW 40.1 / 50) is the measured SM write rate within 1 %
    assert nv5.bandwidth_fraction == pytest.approx(0.802)
    for measured in (write_sm, into_one, out_of_one):
        assert abs(nv5.bandwidth_fraction - measured) < 0.012
    # both directions at once, two SM copies (one per GPU, each reading its peer): same share on both generations
    gb200_bidir = pair["bidir_read_sm_total"] / (2 * nv5_gpu)
    h100_bidir = H100_NVBW_BIDIR_READ_SM * 1e9 / (2 * nv4_gpu)
    assert (gb200_bidir, h100_bidir) == (pytest.approx(0.7483, abs=1e-4), pytest.approx(0.7467, abs=1e-4))
    # so NVLink 5 is not priced above its measured share relative to NVLink 4 (0.802 / 0.824 = 0.973 <= 1.002)
    assert nv5.bandwidth_fraction / nv4.bandwidth_fraction <= gb200_bidir / h100_bidir


# ----------------------------------------------------------------------------- properties

SIZES = np.logspace(3, 33, 31, base=2.0)  # 8 B .. 8 GiB


@pytest.mark.parametrize("system,n", [("dgx-h100", 8), ("dgx-h100", 32), ("aws-p5", 16), ("mi300x-8", 8),
                                      ("dgx-a100", 16), ("pcie4-8gpu", 8), ("tpu-v5e-pod", 16)])
@pytest.mark.parametrize("coll", COLLECTIVES)
def test_curves_are_monotone_and_broadcast(system, n, coll):
    r = collective_time(coll, SIZES, n, system)
    assert r.time_s.shape == SIZES.shape and r.algorithm.shape == SIZES.shape
    if system == "aws-p5" or (system == "mi300x-8" and coll == "all_reduce"):
        # the choice is not made by the time (EFA's tuner latency, RCCL's MSCCL schedules):
        # test_choice_not_by_time_can_make_a_larger_message_faster
        return
    # non-strict: NCCL doubles a send's channels with its size, so two sizes can take equal time
    if coll in ("all_to_all", "send_recv") and system == "dgx-h100" and n == 8:
        # NCCL picks a send's protocol by its size (LL to 32 x 16 KiB a peer), so the step from LL to Simple can
        # make the next size faster (test_all_to_all_p2p_channels_and_protocol); within a protocol it is monotone
        same = r.protocol[1:] == r.protocol[:-1]
        assert np.all(np.diff(r.time_s)[same] >= 0)
        return
    assert np.all(np.diff(r.time_s) >= 0), "a larger message is never faster"
    assert r.time_s[-1] > r.time_s[0]
    assert np.all(np.diff(r.busbw_bytes_per_s) >= -1e-9 * r.busbw_bytes_per_s[1:]), "busbw never falls with size"
    assert set(r.algorithm) <= set(ALGORITHMS)


@pytest.mark.parametrize("system,n", [("dgx-h100", 8), ("dgx-h100", 16), ("aws-p5", 32), ("azure-nd-mi300x-v5", 16)])
@pytest.mark.parametrize("coll", ["all_reduce", "all_gather", "reduce_scatter"])
def test_chosen_algorithm_is_the_argmin(system, n, coll):
    best = select_algorithm(coll, SIZES, n, system)
    options = collective_options(coll, SIZES, n, system)
    times = np.stack([o.time_s for o in options.values()])
    ranks = np.stack([o.time_s if o.selection_time_s is None else o.selection_time_s for o in options.values()])
    pick = ranks.argmin(axis=0)
    assert np.array_equal(best.time_s, np.take_along_axis(times, pick[None], axis=0)[0])
    names = np.array([a for a, _ in options])[pick]
    assert list(best.algorithm) == list(names)
    fastest = times.min(axis=0)
    if (system, n, coll) == ("dgx-h100", 8, "all_reduce"):
        # one node: NCCL ranks ring and tree by its own estimate (every channel for the ring, its tree
        # bandwidth x treeCorrectionFactor), so at 8-512 KiB it runs the ring LL on few channels
        differ = best.time_s != fastest
        assert set(best.algorithm[differ]) == {"ring"} and set(best.protocol[differ]) == {"ll"}
        assert SIZES[differ].min() == 2**13 and SIZES[differ].max() == 2**19
        assert np.all(best.time_s[differ] <= 1.45 * fastest[differ])
    elif system != "aws-p5":  # the time is what the tuner ranks by
        assert np.array_equal(best.time_s, fastest)


def test_choice_not_by_time_can_make_a_larger_message_faster():
    """Measured: RCCL on 8 MI300X takes 23.21 us for a 512 B all_reduce and 13.67 us for 1 KiB
    (hisohara/ai-scripts rccl-tests table, rows coll-059..061): 512 B (128 floats) is no multiple of the
    MSCCL all-pairs schedule's 256 chunks, so the ring runs it. The model: ring LL 12 + 14 x 0.8 = 23.2 us,
    all-pairs LL 12 + 2 x 0.8 = 13.6 us plus 2 x 7/8 x 1 KiB over 7 links x 48 GB/s x 0.5."""
    r = collective_time("all_reduce", np.array([512.0, 1024.0]), 8, "mi300x-8")
    assert list(r.algorithm) == ["ring", "allpairs"]
    assert r.time_s[0] == pytest.approx(23.2e-6 + 2 * 7 / 8 * 512 / 168e9, rel=1e-6)
    assert r.time_s[1] == pytest.approx(13.6e-6 + 2 * 7 / 8 * 1024 / 168e9, rel=1e-6)
    # Simple from 512 KiB, the tuner again above 16 MiB (the algorithm files' maxBytes)
    r = collective_time("all_reduce", np.array([2.0**19, 2.0**24, 2.0**25]), 8, "mi300x-8")
    assert list(r.algorithm) == ["allpairs", "allpairs", "ring"] and list(r.protocol)[:2] == ["simple", "simple"]
    with pytest.raises(ValueError, match="allpairs"):
        collective_time("all_reduce", 512, 8, "mi300x-8", algorithm="allpairs")
    assert "allpairs" not in applicable_algorithms("all_reduce", 4, "mi300x-8")  # the schedules are for 8 GPUs


def test_efa_tuner_latency_steers_the_choice_but_is_not_paid():
    """aws-ofi-nccl reports 75 us to NCCL's tuner (added to every inter-node step, twice for Simple) while
    its own model prices an EFA step at 20 us. 16 H100 over 2 p5 nodes, 1 KiB all_reduce: tree LL, NCCL's
    estimate 6.6 + 2 (7 x 0.6 + (2.7 + 20 + 75)) us is what ranks it; the time uses 20 us: 60.4 us plus
    the bytes (measured 65.74 us, coll-091)."""
    opts = collective_options("all_reduce", 1024.0, 16, "aws-p5")
    tree = opts[("tree", "ll")]
    assert tree.selection_time_s - tree.time_s == pytest.approx(2 * 75e-6)
    assert opts[("ring", "simple")].selection_time_s - opts[("ring", "simple")].time_s == pytest.approx(2 * 150e-6)
    r = collective_time("all_reduce", 1024.0, 16, "aws-p5")
    assert (r.algorithm, r.protocol) == ("tree", "ll")
    assert r.latency_s == pytest.approx(6.6e-6 + 2 * (7 * 0.6e-6 + 22.7e-6))


def test_efa_rendezvous_above_the_plugin_eager_limit():
    """aws-ofi-nccl (RDMA protocol, v1.9.2-aws) sends a message of at most 8 KiB at once; a larger one waits for the
    receiver's control message, 20 us (the plugin's own small-message figure). NCCL's net proxy posts receives
    up to 8 steps ahead from the collective's start and the plugin sends the control message when a receive is
    posted, so only the first inter-node step waits: once per collective.
    2 p5 nodes, 16 H100: the 1 KiB all_reduce (tree LL, 16 B on the wire per channel) keeps 60.4 us of latency;
    the 1 MiB one (tree LL128, 16 channels of 64 KiB) pays it once: 14.0 + 20 + 2 (7 x 1.9 + 4.0 + 20) = 108.6 us
    (128.6 when it was paid on both inter-node steps).
    NCCL's tuner does not see it: the ranking is unchanged."""
    small = collective_time("all_reduce", 1024.0, 16, "aws-p5")
    assert small.latency_s == pytest.approx(6.6e-6 + 2 * (7 * 0.6e-6 + 22.7e-6))
    r = collective_time("all_reduce", float(2**20), 16, "aws-p5")
    assert (r.algorithm, r.protocol) == ("tree", "ll128")
    assert r.latency_s == pytest.approx(14.0e-6 + 20e-6 + 2 * (7 * 1.9e-6 + 4.0e-6 + 20e-6))
    opts = collective_options("all_reduce", float(2**20), 16, "aws-p5")
    tree = opts[("tree", "ll128")]
    assert tree.selection_time_s - tree.time_s == pytest.approx(2 * 75e-6 - 20e-6)  # tuner: 2 x 75 us, not 20 once
    cat = fabric_catalog()
    assert cat.fabric("efa-100g").eager_max_bytes == 8192
    assert cat.fabric("ib-ndr").eager_max_bytes is None  # no rendezvous on InfiniBand (NCCL's own IB transport)


def test_nvls_tree_network_fill_on_p5():
    """NCCL's NVLS-tree chunk rule from the plugin's 512 KiB (NCCL_NVLS_CHUNKSIZE / NCCL_NVLSTREE_MAX_CHUNKSIZE on
    p5): with 16 NVLS channels x 8 heads, 64 MiB is under 32 x 128 x 512 KiB and 16 x 128 x 256 KiB (chunk 128
    KiB) but not under 4 x 128 x 128 KiB; 1 GiB keeps 256 KiB, 8 GiB 512 KiB. A wave is 16 chunks per head GPU.
    On 2 nodes a chunk crosses the network up and back down: one wave beyond the steady state, 2 MiB over the
    GPU's four EFA cards (48 GB/s) = 43.69 us at 64 MiB."""
    waves = nvls_tree_wave_bytes("aws-p5", [2.0**26, 2.0**30, 2.0**33], 2, 8)
    assert list(waves) == [16 * 131072, 16 * 262144, 16 * 524288]
    assert nvls_tree_wave_bytes("mi300x-8", 2.0**26, 2, 8) is None  # no NVLS
    p5 = collective_options("all_reduce", 2.0**26, 16, "aws-p5")[("hierarchical", "simple")]
    nic = 32 * 12.5e9 * 0.96 / 8
    sysm = load_collective_system("aws-p5")
    no_fill = dataclasses.replace(sysm, nvls_tree_chunk_bytes=0.0)  # a zero chunk: no wave
    t0 = collective_options("all_reduce", 2.0**26, 16, no_fill)[("hierarchical", "simple")].time_s
    assert float(p5.time_s) - float(t0) == pytest.approx(16 * 131072 / nic, rel=1e-9)


def test_tuner_switches_from_latency_to_bandwidth_algorithms(h100):
    r = select_algorithm("all_reduce", SIZES, 8, h100)
    assert (r.algorithm[0], r.protocol[0]) == ("ring", "ll")  # 8 B: lowest latency
    assert r.algorithm[-1] == "nvls"  # 8 GiB: in-switch reduction
    multi = select_algorithm("all_reduce", SIZES, 32, h100)
    assert multi.algorithm[-1] == "hierarchical"


@pytest.mark.parametrize("coll", COLLECTIVES)
def test_more_bandwidth_is_never_slower(h100, coll):
    base = collective_time(coll, SIZES, 16, h100)
    for fabric in ("intra", "inter"):
        f = getattr(h100, fabric)
        faster = dataclasses.replace(h100, **{fabric: dataclasses.replace(
            f, link_bandwidth_bytes_per_s=f.link_bandwidth_bytes_per_s * 1.5)})
        assert np.all(collective_time(coll, SIZES, 16, faster).time_s <= base.time_s)


def test_fabric_numbers_may_be_arrays(h100):
    """A sweep over link bandwidths in one call: the result broadcasts over the hardware axis."""
    bws = np.array([10e9, 25e9, 50e9])
    intra = dataclasses.replace(h100.intra, link_bandwidth_bytes_per_s=bws)
    r = collective_time("all_gather", GIB, 8, dataclasses.replace(h100, intra=intra), algorithm="ring",
                        protocol="simple")
    each = [collective_time("all_gather", GIB, 8, dataclasses.replace(
        h100, intra=dataclasses.replace(h100.intra, link_bandwidth_bytes_per_s=b)), algorithm="ring",
        protocol="simple").time_s for b in bws]
    assert np.allclose(r.time_s, each)


def test_scalar_in_scalar_out(h100):
    r = collective_time("all_reduce", 4096, 8, h100)
    assert isinstance(r.time_s, float) and isinstance(r.algorithm, str) and isinstance(r.busbw_bytes_per_s, float)


# ----------------------------------------------------------------------------- published data

def test_published_collectives_schema():
    rows = read_published_collectives()
    assert len(rows) >= 25
    ids = [r["id"] for r in rows]
    assert len(set(ids)) == len(ids)
    cat = fabric_catalog()
    for r in rows:
        assert r["collective"] in COLLECTIVES, r["id"]
        n, nodes = int(r["n_gpus"]), int(r["n_nodes"])
        assert n >= 2 and nodes >= 1 and n % nodes == 0
        assert r["source"].strip() and r["hardware"].strip() and r["in_score"] in ("0", "1")
        assert r["algorithm"] in ("auto", *ALGORITHMS)
        if r["in_score"] == "1":
            assert r["system"] in cat.systems, r["id"]
        else:
            assert "not scored" in r["notes"].lower(), r["id"]
        size, t = float(r["size_bytes"]), float(r["time_us"])
        # the printed GB/s agree with the printed time to the printed precision
        alg = size / (t * 1e-6) / 1e9
        assert abs(alg - float(r["algbw_GBps"])) <= 0.006 + 0.002 * alg, r["id"]
        bus = alg * bus_bandwidth_factor(r["collective"], n)
        assert abs(bus - float(r["busbw_GBps"])) <= 0.006 + 0.002 * bus, r["id"]


def test_published_rows_cover_small_and_plateau_sizes():
    rows = [r for r in read_published_collectives() if r["in_score"] == "1"]
    sizes = [float(r["size_bytes"]) for r in rows]
    assert sum(s <= 64 * 1024 for s in sizes) >= 8 and sum(s >= GIB for s in sizes) >= 20
    assert {r["collective"] for r in rows} >= {"all_reduce", "all_gather", "reduce_scatter", "all_to_all"}
    assert any(int(r["n_nodes"]) > 1 for r in rows)


def _regime(size: float) -> str:
    return "latency (<1 MiB)" if size < 2**20 else "mid (1-256 MiB)" if size < 2**28 else "bandwidth (>=256 MiB)"


def test_validation_against_published_measurements():
    """Unfitted prediction vs every scored published row; the MAPE asserted is the one achieved.

    The NVLS fraction comes from a maintainer's statement about 8x H100 (algbw ~275 GB/s), which
    the 8-GPU all_reduce plateau rows also measure; all other fractions come from library sources
    (NCCL/RCCL topology constants, SimAI) and no row was used to set them.
    """
    every = [c for c in compare_published() if c.in_score]
    rows = {r["id"]: r for r in read_published_collectives()}
    assert len(every) == sum(r["in_score"] == "1" for r in rows.values())
    # the 212 scored rows of coll-001..262; the aiconfigurator B200 / GB200 tables (coll-263..) have their own test
    comps = [c for c in every if int(c.id.split("-")[1]) <= 262]
    assert len(comps) == 212
    by_group = collections.defaultdict(list)
    by_regime = collections.defaultdict(list)
    for c in comps:
        by_group[(c.system, c.collective, f"{c.n_devices}x{c.n_nodes}")].append(c)
        by_regime[_regime(c.size_bytes)].append(c)
    lines = [f"{'group':48s} {'rows':>4s} {'MAPE %':>7s}  worst"]
    for key, cs in sorted(by_group.items()):
        worst = max(cs, key=lambda c: abs(c.error))
        lines.append(f"{' '.join(key):48s} {len(cs):4d} {mape(cs):7.1f}  {worst.id} ({100 * worst.error:+.0f}%)")
    for key, cs in sorted(by_regime.items()):
        lines.append(f"{key:48s} {len(cs):4d} {mape(cs):7.1f}")
    lines.append(f"{'overall':48s} {len(comps):4d} {mape(comps):7.1f}")
    print("\n" + "\n".join(lines))

    # 196 scored rows. The 166 of coll-001..204: the 150 of an earlier revision (13.27 %) and 16 rows of an
    # 8x A100 all_reduce sweep (coll-189..204), held out: no constant was changed when they were added
    first = [c for c in comps if int(c.id.split("-")[1]) <= 204]
    first_regime = collections.defaultdict(list)
    for c in first:
        first_regime[_regime(c.size_bytes)].append(c)
    assert len(first) == 166
    # (13.03 / 5.98 / 16.86 / 20.35 % before the launch skew was re-derived with the tables of #123's NCCL and the
    # 8x A100 rows were priced with their NCCL 2.9.9: [libraries."nccl-2.17"], now "nccl-2.9"; 11.25 / 5.81 / 14.98 /
    # 14.42 % with those alone, before the EFA plugin's rendezvous, the NVLS tree's network fill and NCCL 2.8-2.9's ring
    # LL128 channel cap)
    # (9.85 / 5.60 / 12.09 / 14.45 % before the plugin's rendezvous was charged once per collective, not per
    # inter-node step: p5 1-8 MiB tree LL128 rows +0..+2 % -> +10..+17 %)
    # (10.25 / 5.64 / 13.14 / 13.80 % before the all-to-all ran on NCCL's p2p channels with the last chunk's copy)
    assert mape(first) <= 9.4  # achieved 9.39 % (13.09 % before NCCL's printed NVLS estimate, 13.71 % before LL128 across EFA on p5)
    assert mape(first_regime["bandwidth (>=256 MiB)"]) <= 5.45  # achieved 5.43 % over 66 rows (6.11 % before NCCL's printed NVLS estimate)
    assert mape(first_regime["mid (1-256 MiB)"]) <= 11.45  # achieved 11.44 % over 76 rows (18.21 % before LL128 across EFA on p5)
    assert mape(first_regime["latency (<1 MiB)"]) <= 13.85  # achieved 13.80 % over 24 rows (20.81 before NCCL's tree estimate)
    # all 212: with the 30 rows of two further systems (coll-205..234: Azure ND MI300X v5 one-thread -g 8, GB200
    # NVL72 one rack) and the rest of the 8x MI300X AAC8 table (coll-247..262), added unfitted: no constant was
    # changed when they were added (docs/collectives.md); then RCCL's one-thread launch cost and MSCCL's
    # one-process rule, and NCCL's Blackwell NVLS efficiency (30.76 / 9.17 / 19.22 / 78.27 % before)
    # (13.82 / 7.77 / 16.50 / 17.95 % before the re-derived launch skew and the NCCL 2.8-2.17 entry; 12.43 / 7.62 /
    # 14.81 / 15.32 % with those alone, before the EFA plugin's rendezvous, the NVLS tree's network fill and NCCL
    # 2.8-2.9's ring LL128 channel cap)
    # (11.33 / 7.43 / 12.20 / 15.33 % before the plugin's rendezvous was charged once per collective)
    # (11.65 / 7.47 / 13.15 / 15.04 % before the all-to-all's p2p channels and the last chunk's copy)
    assert mape(comps) <= 11.0  # achieved 10.97 %
    assert mape(by_regime["bandwidth (>=256 MiB)"]) <= 7.3  # achieved 7.28 % over 74 rows
    assert mape(by_regime["mid (1-256 MiB)"]) <= 11.65  # achieved 11.61 % over 84 rows
    assert mape(by_regime["latency (<1 MiB)"]) <= 15.05  # achieved 15.04 % over 54 rows
    # every system x band (the target is 15 %; met where the comment says so)
    by_system_band = collections.defaultdict(list)
    for c in comps:
        by_system_band[(c.system, _regime(c.size_bytes))].append(c)
    achieved = {  # MAPE %, rows: met 15 % or not
        # 4-GPU one-thread rows: 3 x 3.41 us of launch skew (3 x 2.55 before its re-derivation: 25.4 / 12.1 / 5.0)
        ("dgx-h100", "latency (<1 MiB)"): 12.9,  # 12 rows, met (all_reduce / reduce_scatter +11..+24 %, all_gather -10..+11 %)
        # the last 512 KiB chunk of a p2p channel's part copied out after it arrives: all_to_all 32-128 MiB +20..+38 %
        # -> -1..+12 %, the sends 2-4 points slower (32-128 MiB -26..-28 % -> -29..-30 %)
        ("dgx-h100", "mid (1-256 MiB)"): 9.6,  # 51 rows, met (12.2 before the last chunk's copy, 14.1 before)
        ("dgx-h100", "bandwidth (>=256 MiB)"): 4.7,  # 50 rows, met (5.0 before the last chunk's copy, 5.2 before NCCL's printed NVLS estimate, 6.8 before)
        # the whole AAC8 table since coll-247..262 (6.1 / 11.6 / 5.6 % on the 4 / 8 / 6 rows before)
        ("mi300x-8", "latency (<1 MiB)"): 7.05,  # 17 rows, met (32.8 before RCCL's MSCCL all-pairs schedule)
        ("mi300x-8", "mid (1-256 MiB)"): 11.6,  # 8 rows, met
        ("mi300x-8", "bandwidth (>=256 MiB)"): 5.75,  # 9 rows, met
        # the plugin's rendezvous once per collective (33.0 / 9.2 / 11.0 when it was charged on every inter-node step)
        ("aws-p5", "latency (<1 MiB)"): 29.1,  # 4 rows, not met (32.8 before the plugin's rendezvous, 49.7 before the 75 us became tuner-only)
        ("aws-p5", "mid (1-256 MiB)"): 19.2,  # 8 rows, not met (1-8 MiB tree LL128 +10..+17 %, 64 MiB +37 %); 35.3 before the plugin's rendezvous, 48.2 before NCCL's LL128 across EFA
        ("aws-p5", "bandwidth (>=256 MiB)"): 11.7,  # 4 rows, met (13.0 before the NVLS tree's network fill, 14.5 before the plugin's rendezvous)
        # the all_reduce rows (OCI BM.GPU4.8, one thread, 8 GPUs, NCCL 2.9.9) priced with [libraries."nccl-2.9"]:
        # its latency tables, ring LL factor 1/4, chunk granule, 235 GB/s Ampere bus bandwidth and ring LL128 cap
        # of 16.9 GB/s per ring-graph channel (7.1 / 32.1 / 8.5 before; mid 15.9 before the LL128 cap)
        ("dgx-a100", "latency (<1 MiB)"): 9.0,  # 4 all_reduce rows, met (64 KiB -22 %)
        # the sends pay the last chunk's copy too (14.75 / 7.05 before; the 128 MiB send -29.3 -> -31.4 %)
        ("dgx-a100", "mid (1-256 MiB)"): 14.96,  # 8 all_reduce + 1 send_recv rows, met (2, 8, 32 MiB +22, +19, +20 %; the send -31 %)
        ("dgx-a100", "bandwidth (>=256 MiB)"): 7.21,  # 4 all_reduce + 2 send_recv rows, met (20.0 on the 2 sends)
        # one thread drove the 8 GPUs (-g 8): RCCL 2.20.5 leaves MSCCL off and pays 7 x 2.92 us of launch
        # (AMD guide 58708); 214.3 / 41.8 before, 127.9 / 22.2 with the MSCCL rule alone
        ("azure-nd-mi300x-v5", "latency (<1 MiB)"): 22.75,  # 17 rows, not met (+5..+49 %, 128-256 KiB worst)
        ("azure-nd-mi300x-v5", "mid (1-256 MiB)"): 13.2,  # 8 rows, met (4-8 MiB -25 / -33 %)
        # NVLS on NVLink 5 at NCCL's Blackwell nvlsEfficiency 0.74 x 40.1 / 50 (53.2 at the H100 fraction)
        ("gb200-nvl72", "bandwidth (>=256 MiB)"): 32.5,  # 5 rows, not met (+52 % at 512 MiB .. +19 % at 4 GiB)
    }
    assert set(by_system_band) == set(achieved)
    for key, figure in achieved.items():
        assert mape(by_system_band[key]) <= figure + 0.05, key
    # GiB sizes: no row of 1 GiB or more moved away from its measurement (MAPE 3.90 % with the A100 rows, 4.23
    # before; 5.76 % with the four GB200 NVL72 rows of 1-8 GiB and two more MI300X rows, 7.49 at the H100 NVLS fraction)
    assert mape([c for c in first if c.size_bytes >= GIB]) <= 3.95
    assert mape([c for c in comps if c.size_bytes >= GIB]) <= 5.8
    # the 4-GPU single-thread small-message rows: within 17 % (100-164 % over before the launch skew, 45 % before
    # its re-derivation)
    for c in comps:
        if c.gpus_per_thread == 4 and c.size_bytes <= 2**16:
            assert abs(c.error) <= 0.17, c.id
    # held out: the one-thread 8x A100 floor (coll-189, 64 B, 32.0 us on an OCI host) is NCCL 2.9.9's ring LL
    # 3.6 + 14 x 0.47 us plus 7 x 3.41 us of launch skew (derived on a DGX-A100 host), 34.1 us: within 7 %
    assert abs(next(c for c in comps if c.id == "coll-189").error) <= 0.07
    # the A100 sends ramp over 8 / 16 / 32 channels: 128 MiB no longer 2x over-predicted
    assert abs(next(c for c in comps if c.id == "coll-099").error) <= 0.32  # -31.4 %
    # the send of a 32 MiB message runs on 4 of 32 p2p channels: under-, no longer 4x over-predicted
    assert abs(next(c for c in comps if c.id == "coll-021").error) <= 0.31  # -30.4 %
    # the plateau of every 8-GPU single-node collective except send_recv within 10 %
    for c in comps:
        if c.n_devices == 8 and c.n_nodes == 1 and c.size_bytes >= 8 * GIB and c.collective != "send_recv":
            assert abs(c.error) <= 0.10, c.id
    # the tuner's choice agrees with what the sources say NCCL ran (Ring at 2 GPUs, NVLS at 6)
    pick = {c.id: c.predicted_algorithm for c in comps}
    assert pick["coll-028"] == "ring" and pick["coll-034"] == "nvls"


def test_unscored_rows_are_reported_but_not_predicted():
    """Rows whose NIC rate (or host) is not stated carry no system (coll-067..089, the 80-GPU run coll-157..174)."""
    rows = read_published_collectives()
    unscored = [r for r in rows if r["in_score"] == "0"]
    assert unscored and all(not r["system"] for r in unscored)
    assert {c.id for c in compare_published()}.isdisjoint(r["id"] for r in unscored)


def test_added_system_tables_read_as_printed():
    """Rows of the Azure ND MI300X v5, GB200 NVL72 and 8x MI300X AAC8 tables hold the printed size, time and busbw
    (out-of-place), whole tables: every size each source printed (8 B .. 128 MiB, 512 MiB .. 8 GiB, 8 B .. 8 GiB)."""
    rows = {r["id"]: r for r in read_published_collectives()}
    printed = {  # ROCm/rccl issue #1562 (8x MI300X VF, -g 8); coreweave/nccl-tests README 'GB200' / 'Single Rack'
        "coll-205": ("azure-nd-mi300x-v5", 8, 8, "45.92", "0.00"),
        "coll-220": ("azure-nd-mi300x-v5", 8, 262144, "68.55", "6.69"),
        "coll-229": ("azure-nd-mi300x-v5", 8, 134217728, "801.4", "293.07"),
        "coll-230": ("gb200-nvl72", 72, 536870912, "1806.7", "586.06"),
        "coll-234": ("gb200-nvl72", 72, 8589934592, "20299", "834.57"),
        "coll-262": ("mi300x-8", 8, 4294967296, "23841", "315.26"),  # hisohara/ai-scripts AAC8 table
    }
    for rid, (system, n, size, t, bus) in printed.items():
        r = rows[rid]
        assert (r["system"], int(r["n_gpus"]), int(r["size_bytes"]), r["time_us"], r["busbw_GBps"]) == \
            (system, n, size, t, bus), rid
    azure = [r for r in rows.values() if r["system"] == "azure-nd-mi300x-v5"]
    assert sorted(int(r["size_bytes"]) for r in azure) == [8 << k for k in range(25)]
    nvl72 = [r for r in rows.values() if r["system"] == "gb200-nvl72" and r["n_gpus"] == "72"]
    assert sorted(int(r["size_bytes"]) for r in nvl72) == [512 * 2**20 << k for k in range(5)]
    aac8 = [r for r in rows.values() if r["system"] == "mi300x-8" and r["algorithm"] == "auto"]
    assert sorted(int(r["size_bytes"]) for r in aac8) == [8 << k for k in range(31)]  # 8 B .. 8 GiB, whole
    # the one-thread launch is read from the notes: -g 8 for the Azure rows, one rank per GPU for the rack
    assert {gpus_per_thread_of(r) for r in azure} == {8} and {gpus_per_thread_of(r) for r in nvl72} == {1}


def test_dgx_b200_channel_plan_is_nccls():
    """A DGX B200's channels as NCCL prints them (NVIDIA/nccl#1646: 32 ring, 32 p2p, 32 per peer); one channel's
    ring bandwidth is NCCL's 16 x 45 GB/s ring graph (SM100_NVLINK_BW 40.1 x 18 = 721.8, sm100SpeedArrayIntra 90,
    doubled once by ncclTopoDupChannels) spread over the 32: 22.5 GB/s."""
    sysm = load_collective_system("dgx-b200")
    assert (sysm.ring_channels, sysm.p2p_channels, sysm.p2p_channels_per_peer) == (32, 32, 32)
    assert sysm.intra.channel_bandwidth_bytes_per_s == pytest.approx(16 * 45e9 / 32)
    assert 16 * 45.0 <= 18 * 40.1  # the graph fits the 18 links NCCL's topology gives a B200
    # ring LL on 8 GPUs drops a channel below 512 threads x 8 B x 8 ranks = 32 KiB a channel: 64 KiB runs on 2
    assert float(ring_channels_used(sysm, "ring", "ll", 65536, 8)) == 2.0
    assert float(ring_channels_used(sysm, "ring", "ll", 2**30, 8)) == 32.0


def test_aiconfigurator_blackwell_tables_held_out():
    """coll-263..682: aiconfigurator's nccl-tests tables (@ 095f58a51, collector/network/collect_nccl.py: out-of-place
    time, -t n threads of one GPU, half) for 2 / 4 / 8 B200s at NCCL 2.28.9 and 2 / 4 GB200s of one tray at 2.29.2,
    every size of 512 B .. 512 MiB, scored unfitted. The model prices NVLink 5 too fast in every band
    (docs/collectives.md, 'NVLink 5 against aiconfigurator's B200 and GB200 tables'); the figures are the ones
    achieved, recorded so that a change to them is seen."""
    rows = {r["id"]: r for r in read_published_collectives()}
    new = [r for r in rows.values() if 263 <= int(r["id"].split("-")[1]) <= 682]
    assert len(new) == 420 and all(r["in_score"] == "1" for r in new)
    sizes = sorted({int(r["size_bytes"]) for r in new})
    assert sizes == [512 << k for k in range(21)]  # 256 .. 268,435,456 half elements
    assert collections.Counter(r["system"] for r in new) == {"dgx-b200": 252, "gb200-nvl72": 168}
    # as the parquet holds them: latency (ms) x 1000, message_size (elements) x 2 bytes
    assert (rows["coll-449"]["collective"], rows["coll-449"]["n_gpus"], rows["coll-449"]["size_bytes"],
            rows["coll-449"]["time_us"]) == ("all_to_all", "8", "134217728", "246.20")
    assert (rows["coll-368"]["collective"], rows["coll-368"]["size_bytes"], rows["coll-368"]["time_us"]) == \
        ("all_reduce", "512", "25.92")
    assert {library_version_of(r) for r in new} == {(2, 28, 9), (2, 29, 2)}
    assert {gpus_per_thread_of(r) for r in new} == {1}
    comps = {c.id: c for c in compare_published() if c.id in {r["id"] for r in new}}
    # 8x B200 all_to_all at 128 MiB: measured 477.0 GB/s of busbw, priced at 530 (+11 %): NCCL's 28 p2p channels
    # of 22.5 GB/s and the last 512 KiB chunk's copy (673 GB/s, +41 %, at the NVLink rate before; +24 % with the
    # channels alone)
    c = comps["coll-449"]
    assert c.measured_busbw_bytes_per_s == pytest.approx(477.0e9, rel=1e-3)
    assert c.error == pytest.approx(0.111, abs=0.005)
    band = collections.defaultdict(list)
    for c in comps.values():
        band[(c.system, _regime(c.size_bytes))].append(c)
    achieved = {  # MAPE %, all over-predictions (bias within 3.5 points of the MAPE)
        # dgx-b200 with NCCL's printed channel plan (32 ring / p2p channels of 22.5 GB/s): 50.2 / 49.9 / 42.0 without;
        # with the all-to-all on NCCL's p2p channels, its p2p protocol rule (2.28.9 on the B200 rows, 2.29.2 on the
        # GB200 rows) and the last chunk's copy: 45.0 / 49.8 / 41.8 and 50.4 / 52.0 / 49.1 before (43.9 / 41.7 / 28.1
        # and 48.8 / 42.0 / 31.6 with the channels alone; GB200 48.8 / 38.9 / 30.4 with 2.28's protocol rule)
        # dgx-b200's one-node NVLS on NCCL 2.28.9's 24 channels (NVLS_NCHANNELS_SM100_NVL): 37.1 / 26.8 before, the
        # NVLS then had no loop (no channel count)
        ("dgx-b200", "latency (<1 MiB)"): 43.9, ("dgx-b200", "mid (1-256 MiB)"): 35.65,
        ("dgx-b200", "bandwidth (>=256 MiB)"): 26.45, ("gb200-nvl72", "latency (<1 MiB)"): 40.4,
        ("gb200-nvl72", "mid (1-256 MiB)"): 35.9, ("gb200-nvl72", "bandwidth (>=256 MiB)"): 30.4,
    }
    assert set(band) == set(achieved)
    for key, figure in achieved.items():
        assert mape(band[key]) == pytest.approx(figure, abs=0.05), key
        assert mape(band[key]) - 100 * float(np.mean([c.error for c in band[key]])) <= 3.5, key


def test_blackwell_one_node_nvls_runs_24_channels():
    """NCCL 2.27.3+ gives a Blackwell communicator whose ranks share one host NVLS_NCHANNELS_SM100_NVL = 24 NVLS
    channels (src/transport/nvls.cc @ v2.28.9-1, lines 150 and 194), 32 across hosts. On 8 B200s of one DGX B200 a
    512 MiB all_reduce's NVLS chunk is 64 KiB (512 MiB < 64 x 24 x 8 x 128 KiB = 1.5 GiB, >= 8 x 24 x 8 x 64 KiB =
    96 MiB), so one loop is 24 x 8 x 64 KiB = 12 MiB (32 channels: 16 MiB). Time: 23 us + (512 + 12) MiB x 9/8 /
    (18 x 50 GB/s x 0.5935) = 1180.2 us, busbw 796.1 GB/s (coll-388 measures 685.3; 814.3 without the loop)."""
    from hwmodels.collectives import collective_time, load_collective_system, nvls_loop_bytes

    b200 = load_collective_system("dgx-b200")
    assert (b200.nvls_channels_one_node, b200.nvls_channels) == (24, None)
    assert nvls_loop_bytes(b200, 512 << 20, 8) == pytest.approx(12 << 20)
    assert nvls_loop_bytes(b200, 512 << 20, 8, n_nodes=2) is None  # no multi-node count given for this node
    hgx = load_collective_system("hgx-b200")
    assert nvls_loop_bytes(hgx, 512 << 20, 8) == pytest.approx(12 << 20)
    assert nvls_loop_bytes(hgx, 512 << 20, 8, n_nodes=2) == pytest.approx(16 << 20)
    assert nvls_loop_bytes("dgx-h100", 512 << 20, 8) == pytest.approx(16 * 8 * 64 * 1024)  # Hopper: 16 either way
    r = collective_time("all_reduce", 512 << 20, 8, b200)
    hand = 23e-6 + (512 + 12) * 2**20 * 9 / 8 / (18 * 50e9 * 0.5935)
    assert r.algorithm == "nvls"
    assert r.time_s == pytest.approx(hand, rel=1e-9)
    assert r.time_s == pytest.approx(1180.2e-6, abs=0.1e-6)
    assert r.busbw_bytes_per_s == pytest.approx(796.1e9, rel=1e-4)


def test_ring_cta_traffic_ratio_counts_the_kernels_operations():
    """Loads plus stores of a channel's CTA per byte sent, counted from NCCL v2.28.9's ring kernels (out of place,
    unregistered buffers): all_gather / reduce_scatter 3n - 1 per n - 1 chunks sent, all_reduce 6n - 4 per 2(n - 1).
    The last receive, which sends nothing, is why 2 ranks cost more per byte sent than 8."""
    from hwmodels.collectives import ring_cta_traffic_ratio

    assert ring_cta_traffic_ratio("all_gather", 2) == pytest.approx(5.0)  # 3 + 2 for one chunk sent
    assert ring_cta_traffic_ratio("reduce_scatter", 4) == pytest.approx(11 / 3)  # 2 + 3 + 3 + 3
    assert ring_cta_traffic_ratio("all_gather", 8) == pytest.approx(23 / 7)
    assert ring_cta_traffic_ratio("all_reduce", 2) == pytest.approx(8 / 2)  # 2 + 4 + 2
    assert ring_cta_traffic_ratio("all_reduce", 4) == pytest.approx(20 / 6)  # 2 + 2x3 + 4 + 2x3 + 2
    assert ring_cta_traffic_ratio("all_reduce", 8) == pytest.approx(44 / 14)
    assert ring_cta_traffic_ratio("broadcast", 8) is None and ring_cta_traffic_ratio("all_gather", 1) is None


def test_ring_cta_rate_caps_the_ring_when_given(tmp_path):
    """``channel.cta_bytes_per_s`` is not in the catalog (no source found; docs/collectives.md, '2 and 4 ranks on
    NVSwitch'), so no prediction uses it. Given one (60 GB/s here, a test value, not a figure), a 2-rank all_gather of
    512 MiB on a DGX B200 sends at 32 channels x 60 / 5 = 384 GB/s: 11.8 us + 256 MiB / 384 GB/s = 710.85 us (busbw
    377.6 GB/s); 8 ranks at 32 x 60 x 7/23 = 584.3 GB/s, under NCCL's 720 GB/s ring, so the 2-rank ring is 0.657 of the
    8-rank one where the link share alone makes them equal."""
    from hwmodels.collectives import (
        DEFAULT_FABRICS_FILE,
        collective_time,
        load_collective_system,
        load_fabric_catalog,
    )

    assert all(f.cta_bytes_per_s is None for f in load_fabric_catalog().fabrics.values())
    b200 = load_collective_system("dgx-b200")
    given = dataclasses.replace(b200, intra=dataclasses.replace(b200.intra, cta_bytes_per_s=60e9))
    size = 512 << 20
    two = collective_time("all_gather", size, 2, given)
    assert (two.algorithm, two.protocol) == ("ring", "simple")
    assert two.time_s == pytest.approx(two.latency_s + size / 2 / (32 * 60e9 / 5), rel=1e-9)
    assert two.time_s == pytest.approx(710.85e-6, abs=0.01e-6)
    assert two.busbw_bytes_per_s == pytest.approx(377.6e9, rel=1e-3)
    eight = collective_time("all_gather", size, 8, given)
    assert eight.time_s == pytest.approx(eight.latency_s + size * 7 / 8 / (32 * 60e9 * 7 / 23), rel=1e-9)
    base = collective_time("all_gather", size, 2, b200)
    assert base.busbw_bytes_per_s == pytest.approx(697.9e9, rel=1e-3)  # the link share alone, as the catalog has it
    # the catalog field reads with its unit, and a wrong dimension is one located error
    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    line = 'channel.bandwidth_bytes_per_s = { value = "22.5 GB/s"'
    assert text.count(line) == 1
    path = tmp_path / "fabrics.toml"
    path.write_text(text.replace(line, 'channel.cta_bytes_per_s = { value = "60 GB/s", source = "test" }\n' + line),
                    encoding="utf-8")
    assert load_fabric_catalog(path).fabric("nvlink5-nvswitch4").cta_bytes_per_s == pytest.approx(60e9)
    path.write_text(text.replace(line, 'channel.cta_bytes_per_s = { value = "60 us", source = "test" }\n' + line),
                    encoding="utf-8")
    with pytest.raises(SpecError, match="channel.cta_bytes_per_s"):
        load_fabric_catalog(path)


def test_csv_is_plain_utf8_with_the_documented_columns():
    with open(DEFAULT_PUBLISHED_FILE, newline="", encoding="utf-8") as fh:
        header = next(csv.reader(fh))
    assert header[:3] == ["id", "collective", "n_gpus"]
    assert math.isfinite(len(header))


def test_a_pair_across_nodes_uses_one_gpus_nic_share() -> None:
    """A pipeline send between two nodes goes through the sending GPU's own NIC (one 400 Gb/s NDR port
    of a DGX H100's eight), not all eight of its node: a group with g members per node drives g / 8 of
    the node's NICs."""
    from hwmodels.collectives import collective_time, load_collective_system

    sysm = load_collective_system("dgx-h100")
    size = 1 << 30
    pair = collective_time("send_recv", size, 2, sysm, n_nodes=2)
    nic = sysm.inter.link_bandwidth_bytes_per_s * sysm.inter.bandwidth_fraction * \
        sysm.library.protocol_bandwidth_fraction[pair.protocol] * sysm.nics_per_node / sysm.devices_per_node
    assert float(pair.time_s - pair.latency_s) == pytest.approx(size / nic, rel=1e-9)
    # eight members per node (a whole node each side) drive all eight NICs: 8x the pair's bandwidth
    full = collective_time("all_reduce", size, 16, sysm, n_nodes=2, algorithm="ring")
    one = collective_time("all_reduce", size, 2, sysm, n_nodes=2, algorithm="ring")
    assert float(one.time_s) > float(full.time_s)


# ----------------------------------------------------------------------------- one thread, several GPUs

NCCL_LAUNCH_PER_DEVICE = 3.41 * US  # launch.per_device_s (nccl-tests#123 less NCCL <= 2.17's ring LL: 477.86 / 140 us)
RCCL_LAUNCH_PER_DEVICE = 2.92 * US  # launch.per_device_s (AMD MI300X acceptance guide 58708, -g 8)


def test_launch_field_is_read_with_its_source(h100):
    lib = h100.library
    assert lib.launch_per_device_s == pytest.approx(NCCL_LAUNCH_PER_DEVICE)
    assert "nccl-tests issue #123" in lib.provenance["libraries.nccl.launch.per_device_s"].source
    rccl = load_collective_system("mi300x-8").library
    assert rccl.launch_per_device_s == pytest.approx(RCCL_LAUNCH_PER_DEVICE)
    assert "58708" in rccl.provenance["libraries.rccl.launch.per_device_s"].source


def test_rccl_launch_constant_reproduces_its_source():
    """AMD's MI300X acceptance guide (publication 58708, rccl-tests -g 8, RCCL of ROCm 6.2) prints
    34.13 .. 55.70 us for 8 B - 64 KiB; RCCL runs them as ring LL there (MSCCL off: the 8 ranks share one
    process), 12.0 + 14 x 0.8 = 23.2 us plus the bytes; the median over the sizes of (floor - that) / 7
    is the catalog's 2.92 us; the model with it lands within 10 us of every floor but the 55.70 outlier
    (within 5 us from 16 B; 8 B, the first size printed, 34.13 us, is 9.5 us under)."""
    floors = np.array([34.13, 38.73, 39.48, 39.18, 39.36, 41.24, 44.23, 45.84, 44.60, 45.01, 43.72, 55.70,
                       44.39, 44.35]) * US
    sizes = 2.0 ** np.arange(3, 17)
    r = select_algorithm("all_reduce", sizes, 8, "mi300x-8", gpus_per_thread=8)
    assert set(r.algorithm) == {"ring"} and set(r.protocol) == {"ll"}
    device = r.time_s - 7 * RCCL_LAUNCH_PER_DEVICE
    assert device[0] == pytest.approx(23.2 * US + 2 * 7 / 8 * 8 / 168e9, rel=1e-6)
    assert float(np.median((floors - device) / 7)) == pytest.approx(RCCL_LAUNCH_PER_DEVICE, abs=0.01 * US)
    off = np.abs(r.time_s - floors)
    assert np.all(off[floors < 50 * US] < 10 * US) and off.max() > 10 * US  # 8 B: 9.5 us; 16 KiB (55.70 us): 11.6


def test_msccl_allpairs_needs_one_process_per_rank():
    """RCCL 2.20.5 (mscclCommCompatible) leaves MSCCL off when two ranks share a process: with one
    thread driving the 8 GPUs the 1 KiB all_reduce goes to the tuner (ring LL), with one rank per
    process to the all-pairs schedule (13.6 us)."""
    assert load_collective_system("mi300x-8").library.allpairs["max_ranks_per_process"] == 1
    one = collective_time("all_reduce", 1024.0, 8, "mi300x-8")
    shared = collective_time("all_reduce", 1024.0, 8, "mi300x-8", gpus_per_thread=8)
    assert str(one.algorithm) == "allpairs" and str(shared.algorithm) == "ring"
    assert float(shared.time_s) == pytest.approx(23.2 * US + 2 * 7 / 8 * 1024 / 168e9 + 7 * RCCL_LAUNCH_PER_DEVICE,
                                                 rel=1e-6)
    with pytest.raises(ValueError, match="allpairs"):
        collective_time("all_reduce", 1024.0, 8, "mi300x-8", gpus_per_thread=8, algorithm="allpairs")


def test_launch_constant_reproduces_its_source():
    """nccl-tests#123 (2022-12-14; one thread, N A100s, ring LL, 8-128 B): the device latency of the NCCL of
    that date, 3.6 + 2(N-1) x 0.47 us (every release from 2.8.3 to 2.17.1), plus (N-1) x launch.per_device_s
    lands within 0.4 us of every published floor from 4 GPUs and 2.1 us at 2 and 3 (the least-squares slope
    through the origin is 477.86 / 140 = 3.4133 us)."""
    floors = {2: 10.0, 3: 13.76, 4: 16.88, 5: 20.8, 6: 25.2, 7: 29.5, 8: 33.7}
    legacy = fabric_catalog().library("nccl-2.17")
    base, step = legacy.base_latency_s["ll"], legacy.step_latency_s["nvlink"]["ll"]
    assert (base, step) == (pytest.approx(3.6 * US), pytest.approx(0.47 * US))
    excess = {n: t * US - (base + 2 * (n - 1) * step) for n, t in floors.items()}
    slope = sum(e * (n - 1) for n, e in excess.items()) / sum((n - 1) ** 2 for n in floors)
    assert slope == pytest.approx(477.86 / 140 * US, rel=1e-6)
    assert NCCL_LAUNCH_PER_DEVICE == pytest.approx(slope, abs=0.005 * US)
    for n, e in excess.items():
        assert abs(e - (n - 1) * NCCL_LAUNCH_PER_DEVICE) <= (2.1 if n <= 3 else 0.4) * US, n


def test_launch_skew_closed_form(h100):
    """One thread driving 4 GPUs: an 8 B all_reduce takes ring LL 6.6 + 6 x 0.6 us plus 3 x 3.41 us."""
    # one channel carries an 8 B message (NCCL drops channels below 512 threads x 8 B x 4 ranks): 15 x 0.5 GB/s
    device = NCCL_BASE["ll"] + 6 * NCCL_NVLINK_STEP["ll"] + 8 * 3 / 4 * 2 / (H100_CHANNEL_BW * 0.5)
    one = collective_time("all_reduce", 8, 4, h100)
    assert (one.algorithm, one.protocol) == ("ring", "ll")
    assert one.time_s == pytest.approx(device, rel=1e-9)
    four = collective_time("all_reduce", 8, 4, h100, gpus_per_thread=4)
    assert four.time_s == pytest.approx(device + 3 * NCCL_LAUNCH_PER_DEVICE, rel=1e-9)
    assert four.latency_s == pytest.approx(one.latency_s + 3 * NCCL_LAUNCH_PER_DEVICE, rel=1e-9)
    assert launch_skew_s(h100, 4) == pytest.approx(3 * NCCL_LAUNCH_PER_DEVICE)
    assert launch_skew_s(h100, 1) == 0.0 and launch_skew_s("mi300x-8", 8) == pytest.approx(7 * RCCL_LAUNCH_PER_DEVICE)
    # the skew is a constant: it shifts a 1 GiB all_reduce by the same 10.23 us
    big1 = collective_time("all_reduce", GIB, 4, h100)
    big4 = collective_time("all_reduce", GIB, 4, h100, gpus_per_thread=4)
    assert big4.time_s - big1.time_s == pytest.approx(3 * NCCL_LAUNCH_PER_DEVICE, rel=1e-6)
    assert big4.algorithm == big1.algorithm == "ring"  # NCCL's choice at 4 GPUs (its printed NVLS estimate loses)


def test_launch_skew_keeps_curves_monotone(h100):
    sizes = np.logspace(0, 33, 34, base=2)
    for (algo, proto), r in collective_options("all_gather", sizes, 4, h100, gpus_per_thread=4).items():
        assert np.all(np.diff(r.time_s) >= 0), (algo, proto)
        assert np.all(np.diff(r.busbw_bytes_per_s) >= 0), (algo, proto)
        assert np.all(r.time_s > 3 * NCCL_LAUNCH_PER_DEVICE)
    auto = select_algorithm("all_reduce", sizes, 4, h100, gpus_per_thread=4)
    assert np.all(np.diff(auto.busbw_bytes_per_s) >= 0)


def test_a100_send_ramps_over_channels():
    """dgx-a100: 8 ranks start from 4 channels per peer; a 128 MiB send doubles to 8 channels (parts of
    16 MiB = 32 x 512 KiB chunks), 256 MiB to 16, 1 GiB to 32; 10 GB/s per channel, capped by the 240 GB/s
    of 12 NVLink3 links x 20 GB/s."""
    a100 = load_collective_system("dgx-a100")
    link = 12 * 25e9 * 0.8
    for size, channels in ((128 * 2**20, 8), (256 * 2**20, 16), (GIB, 32)):
        r = collective_time("send_recv", size, 8, a100)
        bw = min(link, channels * 10e9)
        last = P2P_CHUNK / 10e9  # the last 512 KiB chunk of a channel's part, copied out after it arrives
        assert r.time_s == pytest.approx(NCCL_BASE["simple"] + NCCL_NVLINK_STEP["simple"] + size / bw + last,
                                         rel=1e-9), size


def test_launch_skew_rejects_bad_thread_counts(h100):
    for bad in (0, -1, 2.5, "4"):
        with pytest.raises(ValueError, match="gpus_per_thread"):
            collective_time("all_reduce", 1024, 4, h100, gpus_per_thread=bad)
    with pytest.raises(ValueError, match="at most 4"):
        collective_time("all_reduce", 1024, 4, h100, gpus_per_thread=8)


@pytest.mark.parametrize("notes, expected", [
    ("nccl-tests 2.18.3, one process driving 4 GPUs (nThread 1 nGpus 4, 50 iters)", 4),
    ("./build/sendrecv_perf -b 128M -e 1G -f 2 -g 8 (one process, 8 GPUs)", 8),
    ("rccl-tests develop:a7809b3, mpirun -np 8, float sum, 20 iters", 1),
    ("one MPI rank per GPU, 20 iters; NCCL_IB_GID_INDEX=3", 1),
])
def test_gpus_per_thread_read_from_the_notes(notes, expected):
    assert gpus_per_thread_of({"notes": notes}) == expected


def test_published_single_thread_runs_are_the_ones_flagged():
    comps = {c.id: c for c in compare_published()}
    assert comps["coll-035"].gpus_per_thread == 4 and comps["coll-026"].gpus_per_thread == 2
    assert comps["coll-099"].gpus_per_thread == 8
    assert all(comps[f"coll-{i}"].gpus_per_thread == 8 for i in range(189, 205))  # "-g 8", one process
    assert comps["coll-001"].gpus_per_thread == 1 and comps["coll-090"].gpus_per_thread == 1
    assert comps["coll-059"].gpus_per_thread == 1


def test_collectives_summary_matches_an_independent_count():
    """The summary the multi-device validation prints: bands partition the rows; MAPE and bias
    recomputed here from the signed errors."""
    from simulator.parallel.validation import collectives_summary

    comps = [c for c in compare_published() if c.in_score]
    summ = collectives_summary(comps, worst=3)
    assert summ["n"] == len(comps) == 632  # 212 + the 420 rows of aiconfigurator's B200 / GB200 tables
    assert summ["mape"] == pytest.approx(mape(comps), rel=1e-12)
    assert sum(b["n"] for b in summ["bands"].values()) == 632
    assert sum(b["n"] for b in summ["by_collective"].values()) == 632
    small = [c for c in comps if c.size_bytes < 2**20]
    ratio = np.exp(np.mean([np.log(c.predicted_busbw_bytes_per_s / c.measured_busbw_bytes_per_s) for c in small]))
    assert summ["bands"]["latency (<1 MiB)"]["bias"] == pytest.approx(100 * (ratio - 1), rel=1e-9)
    assert [w["id"] for w in summ["worst"]] == [c.id for c in sorted(comps, key=lambda c: -abs(c.error))[:3]]


def test_launch_field_errors_are_located(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace('launch.per_device_s = { value = "3.41 us"', 'launch.per_devise_s = { value = "3.41 us"', 1))
    with pytest.raises(SpecError, match=r"libraries\.nccl\.launch\.per_devise_s: unknown key.*did you mean 'per_device_s'"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace('launch.per_device_s = { value = "3.41 us"', 'launch.per_device_s = { value = "3.41 GB"', 1))
    with pytest.raises(SpecError, match=r"libraries\.nccl\.launch\.per_device_s: wrong dimension"):
        load_fabric_catalog(bad)


def test_launch_cost_may_be_an_array(h100):
    lib = dataclasses.replace(h100.library, launch_per_device_s=np.array([1.0, 2.0, 3.0]) * US)
    sysm = dataclasses.replace(h100, library=lib)
    r = collective_time("all_reduce", 8, 4, sysm, algorithm="ring", protocol="ll", gpus_per_thread=4)
    base = collective_time("all_reduce", 8, 4, h100, algorithm="ring", protocol="ll").time_s
    np.testing.assert_allclose(r.time_s, base + 3 * np.array([1.0, 2.0, 3.0]) * US, rtol=1e-12)


def test_an_unknown_key_of_a_sourced_number_is_located(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace('launch.per_device_s = { value = "3.41 us"', 'launch.per_device_s = { nte = "x", value = "3.41 us"', 1))
    with pytest.raises(SpecError) as e:
        load_fabric_catalog(bad)
    assert ("libraries.nccl.launch.per_device_s.nte: unknown key; got 'nte'; expected one of note, source, value; "
            "did you mean 'note'?") in str(e.value), str(e.value)


# ----------------------------------------------------------------------------- NCCL's per-size choices

@pytest.mark.parametrize("algo,proto,n,size,channels", [
    ("ring", "simple", 8, 2**20, 24),  # 1 MiB / (512 threads x 64 B) = 32 -> all 24 channels
    ("ring", "simple", 8, 2**18, 8),  # 256 KiB / 32 KiB
    ("ring", "simple", 8, 2**16, 2),
    ("ring", "simple", 8, 1024, 1),  # never below one channel
    ("ring", "ll", 8, 2**18, 8),  # ring LL: 512 threads x 8 B x 8 ranks = 32 KiB per channel
    ("ring", "ll", 4, 2**18, 16),  # 4 ranks: 16 KiB per channel
    ("tree", "ll", 8, 2**18, 24),  # tree LL: no rank factor, 4 KiB per channel
    ("ring", "ll128", 8, 2**16, 12),  # LL128: 640 threads x 8 B = 5 KiB per channel
])
def test_ring_channels_follow_nccls_thread_threshold(h100, algo, proto, n, size, channels):
    """src/enqueue.cc topoGetAlgoInfo (v2.28.7): nc drops while nBytes < nc * nt * threadThreshold."""
    assert ring_channels_used(h100, algo, proto, size, n) == channels
    # systems without NCCL's channel counts (RCCL on MI300X) are not described
    assert ring_channels_used("mi300x-8", algo, proto, size, n) is None


def test_small_message_runs_on_few_channels_closed_form(h100):
    """8-rank ring all_gather of 64 KiB, Simple: 2 channels (64 KiB / 32 KiB) of 15 GB/s carry 7/8 S."""
    s = 2**16
    r = collective_time("all_gather", s, 8, h100, algorithm="ring", protocol="simple")
    assert r.time_s == pytest.approx(NCCL_BASE["simple"] + 7 * NCCL_NVLINK_STEP["simple"] + 7 / 8 * s / (2 * 15e9))
    # 48 KiB: 1.5 channels in the model (NCCL runs 1; the continuous count keeps time from falling with size)
    r2 = collective_time("all_gather", 3 * 2**14, 8, h100, algorithm="ring", protocol="simple")
    assert r2.time_s == pytest.approx(r2.latency_s + 7 / 8 * 3 * 2**14 / (1.5 * 15e9))
    assert r2.time_s == pytest.approx(r.time_s)  # flat between one and 24 channels: S / nc is constant


@pytest.mark.parametrize("size,loop", [
    (2**22, 16 * 8 * 16384),  # 4 MiB < 2 x 128 x 32 KiB: 16 KiB chunks, 2 MiB loops
    (2**25, 16 * 8 * 32768),  # 32 MiB < 8 x 128 x 64 KiB: 32 KiB chunks
    (2**28, 16 * 8 * 65536),  # 256 MiB < 64 x 128 x 128 KiB: 64 KiB chunks
    (2**30, 16 * 8 * 131072),  # 1 GiB: NCCL_NVLS_CHUNKSIZE 128 KiB, 16 MiB loops
])
def test_nvls_loop_follows_nccls_chunk_rule(h100, size, loop):
    """src/enqueue.cc calcCollChunking (NVLS, v2.28.7) on 8 GPUs with 16 NVLS channels."""
    assert nvls_loop_bytes(h100, size, 8) == loop
    r = collective_time("all_reduce", size, 8, h100, algorithm="nvls")
    assert r.time_s == pytest.approx(23 * US + (size + min(loop, size)) * 9 / 8 / H100_NVLS_BW)
    assert nvls_loop_bytes("dgx-a100", size, 8) is None


def test_nccl_offers_only_ring_to_gather_and_scatter_across_nodes(h100):
    """tuning.cc: all_gather / reduce_scatter across nodes run Ring (NVLS needs CollNet there; the NVLS-tree
    family is all_reduce only), so the hierarchical model is not offered for them."""
    for coll in ("all_gather", "reduce_scatter"):
        assert applicable_algorithms(coll, 16, h100) == ("ring",)
        assert applicable_algorithms(coll, 8, h100) == ("ring", "nvls")
    assert "hierarchical" in applicable_algorithms("all_reduce", 16, h100)


def test_latencies_match_nccls_printed_tuning_table(h100):
    """@h100tune (NCCL 2.29.2, 4x H100, NCCL_DEBUG_SUBSYS=TUNING) prints latency/bandwidth per algorithm:
    AllReduce Ring LL 10.2, LL128 25.4, Simple 28.8 us; AllGather Ring LL 8.4, LL128 19.7, Simple 18.6 us;
    and RING SIMPLE on channels 0..23 for 256 MiB - 1 GiB all_reduce."""
    printed = {("all_reduce", "ll"): 10.2, ("all_reduce", "ll128"): 25.4, ("all_reduce", "simple"): 28.8,
               ("all_gather", "ll"): 8.4, ("all_gather", "ll128"): 19.7, ("all_gather", "simple"): 18.6}
    for (coll, proto), us in printed.items():
        r = collective_time(coll, 2**28, 4, h100, algorithm="ring", protocol=proto)
        assert r.latency_s == pytest.approx(us * US, abs=0.05 * US), (coll, proto)
    assert ring_channels_used(h100, "ring", "simple", 2**28, 4) == 24


def test_tree_estimate_matches_nccls_printed_tuning_table(h100):
    """@h100tune prints NCCL's own AllReduce estimate on 4 H100: Tree LL / LL128 / Simple algBw 43.6 / 128.8 /
    165.6 GB/s, Ring LL / LL128 / Simple 94.0 / 220.8 / 240.0 GB/s. The catalog gives, on the 24 x 15 GB/s
    graph: tree 0.5 x min(360 x 0.92, 24 x 38.7) = 165.6; LL 0.5 x min(331.2 / 3.8, 141) = 43.6; LL128
    0.5 x min(331.2 x 7 / 9, 24 x 36.7) = 128.8; ring 4/6 x (141, 331.2, 360). The estimate's bandwidth is
    read where treeCorrectionFactor is 1 (64 B for LL and LL128, 512 MiB for Simple) or the ring runs
    every channel."""
    printed = {("tree", "ll", 64.0): 43.6, ("tree", "ll128", 64.0): 128.8, ("tree", "simple", 2.0**29): 165.6,
               ("ring", "ll", 2.0**28): 94.0, ("ring", "ll128", 2.0**28): 220.8, ("ring", "simple", 2.0**28): 240.0}
    for (algo, proto, size), gbs in printed.items():
        o = collective_options("all_reduce", size, 4, h100)[(algo, proto)]
        assert size / (o.selection_time_s - o.latency_s) == pytest.approx(gbs * 1e9, rel=2e-3), (algo, proto)
    # at 64 KiB treeCorrectionFactor[LL] is 0.6: the tree's estimate 10.2 + 64 KiB / (43.6 x 0.6) us
    tree = collective_options("all_reduce", 2.0**16, 4, h100)[("tree", "ll")]
    assert tree.selection_time_s == pytest.approx(10.2 * US + 2.0**16 / (43.6e9 * 0.6), rel=2e-3)


def test_nccl_runs_the_ring_where_its_estimate_ranks_it_first(h100):
    """4x H100, 64 KiB all_reduce: NCCL ranks Ring LL (10.2 + 0.7 us) before Tree LL (10.2 + 2.5 us) by its
    estimate, then runs the ring on 65536 / (512 threads x 32 B) = 4 channels: 10.2 us + 1.5 x 64 KiB /
    (4 x 15 GB/s x 0.5); the model's tree would take less (11.3 us), which is not what NCCL runs."""
    r = collective_time("all_reduce", 2.0**16, 4, h100)
    assert (r.algorithm, r.protocol) == ("ring", "ll")
    assert r.time_s == pytest.approx(10.2 * US + 1.5 * 2.0**16 / (4 * 15e9 * 0.5), rel=1e-3)
    assert collective_time("all_reduce", 2.0**16, 4, h100, algorithm="tree").time_s < r.time_s
    # systems without NCCL's tree estimate or RCCL's tuning model (a PCIe node) still rank by the time
    opts = collective_options("all_reduce", 2.0**16, 8, "pcie4-8gpu")
    assert all(o.selection_time_s is None for (algo, _), o in opts.items() if algo in ("ring", "tree"))


def test_rccl_ranks_by_its_tuning_model_on_mi300x():
    """RCCL 2.20.5 on 8 MI300X (tuning_model_5): ring LL at 23.2 us + S / (336 GB/s x 0.41 x 8/14), ring Simple at
    67.4 us + S / (336 GB/s x 8/14), tree LL at 23.2 us + S / (336 x 0.41 x 0.5 x treeCorrectionFactor), Tree Simple
    never on a single gfx94 node. Simple overtakes LL at 44.2 us / (1/78.72 - 1/192 GB/s) = 5.89 MB: with one
    thread driving the 8 GPUs (MSCCL off) 4 MiB runs ring LL and 8 MiB ring Simple (the model's times tie there:
    131.0 vs 131.5 us); the tree never ranks first."""
    sizes = np.array([8.0, 2.0**16, 2.0**22, 2.0**23, 2.0**27])
    r = collective_time("all_reduce", sizes, 8, "azure-nd-mi300x-v5", gpus_per_thread=8)
    assert list(zip(r.algorithm, r.protocol, strict=True)) == [("ring", "ll")] * 3 + [("ring", "simple")] * 2
    opts = collective_options("all_reduce", 2.0**23, 8, "azure-nd-mi300x-v5", gpus_per_thread=8)
    skew = 7 * RCCL_LAUNCH_PER_DEVICE
    ring_ll = opts[("ring", "ll")].selection_time_s - skew
    assert ring_ll == pytest.approx(23.2 * US + 2.0**23 / (336e9 * 0.41 * 8 / 14), rel=1e-6)
    simple = opts[("ring", "simple")].selection_time_s - skew
    assert simple == pytest.approx(67.4 * US + 2.0**23 / (336e9 * 8 / 14), rel=1e-6)
    assert float(opts[("ring", "ll")].time_s) < float(opts[("ring", "simple")].time_s)  # the time alone would keep LL
    assert np.isinf(opts[("tree", "simple")].selection_time_s)
    tree_ll = opts[("tree", "ll")].selection_time_s - skew  # log2(8 MiB >> 6) = 17: factor 0.4
    assert tree_ll == pytest.approx(23.2 * US + 2.0**23 / (336e9 * 0.41 * 0.5 * 0.4), rel=1e-6)


def test_tree_estimate_field_errors_are_located(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace("tuner.tree.correction.ll = { value = [1.0,", "tuner.tree.correction.ll = { value = [1.5,", 1))
    with pytest.raises(SpecError, match=r"libraries\.nccl\.tuner\.tree\.correction\.ll: bad factor list; got \[1\.5"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace("tree.max_channel_bandwidth_bytes_per_s = { value = \"38.7 GB/s\"",
                                "tree.max_channel_bandwidth_bytes_per_s = { value = \"38.7 us\"", 1))
    with pytest.raises(SpecError, match=r"fabrics\.nvlink4-nvswitch3\.tree\.max_channel_bandwidth_bytes_per_s"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace("tuner.tree.protocol_fraction.ll =", "tuner.tree.protocol_fractions.ll =", 1))
    with pytest.raises(SpecError, match=r"libraries\.nccl\.tuner\.tree\.protocol_fractions: unknown key.*did you mean"):
        load_fabric_catalog(bad)


def test_tuner_choice_matches_nccl_where_its_logs_say():
    """waynehacking8/nccl-collectives-bench results/scaling_attributed (NCCL 2.29.2, NCCL_DEBUG=INFO):
    2 and 4 GPUs 'Algo RING proto SIMPLE', 6 GPUs 'Algo NVLS proto SIMPLE channel{Lo..Hi}={0..15}' at
    256 MiB - 8 GiB. NCCL ranks NVLS by the estimate it prints (latency 25.0 us, algBw 102 / 160 / 216 GB/s
    at 2 / 4 / 6 GPUs) against Ring Simple (15.2 / 28.8 / 42.4 us, algBw 360 / 240 / 216 GB/s)."""
    sizes = np.array([2.0**28, 2.0**30, 2.0**33])
    for n in (2, 4):
        assert set(select_algorithm("all_reduce", sizes, n, "dgx-h100").algorithm) == {"ring"}
        assert set(select_algorithm("all_reduce", sizes, n, "dgx-h100").protocol) == {"simple"}
    assert set(select_algorithm("all_reduce", sizes, 6, "dgx-h100").algorithm) == {"nvls"}
    assert load_collective_system("dgx-h100").nvls_channels == 16
    four = collective_options("all_reduce", 2.0**28, 4, "dgx-h100")
    ring, nvls = four[("ring", "simple")], four[("nvls", "simple")]
    # the modelled NVLS is 2 % faster, yet NCCL's own estimate ranks it behind Ring: 25 us + S / 160 GB/s
    assert nvls.time_s < ring.time_s < 1.03 * nvls.time_s
    assert nvls.selection_time_s == pytest.approx(25.0 * US + 2.0**28 / 160e9, rel=1e-9)
    assert ring.selection_time_s == pytest.approx(28.8 * US + 2.0**28 / 240e9, rel=1e-6)
    # equal algBw at 6 GPUs (216 GB/s): NVLS's 25 us against Ring's 42.4 us decides
    six = collective_options("all_reduce", 2.0**30, 6, "dgx-h100")
    assert six[("ring", "simple")].selection_time_s - six[("nvls", "simple")].selection_time_s == pytest.approx(
        17.4 * US, rel=1e-6)
    # 8 GPUs: not printed, so NVLS is ranked by its modelled time (and wins, as the 8-GPU rows' 481 GB/s say)
    assert collective_options("all_reduce", 2.0**30, 8, "dgx-h100")[("nvls", "simple")].selection_time_s is None
    assert select_algorithm("all_reduce", 2.0**30, 8, "dgx-h100").algorithm == "nvls"


def test_tuner_fields_errors_are_located(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace("tuner.max_threads.ll128 =", "tuner.max_thread.ll128 ="))
    with pytest.raises(SpecError, match=r"libraries\.nccl\.tuner\.max_thread: unknown key.*did you mean 'max_threads'"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace('cpu_vendor = "intel"', 'cpu_vendor = "intle"'))
    with pytest.raises(SpecError, match=r"systems\.dgx-h100\.cpu_vendor: unknown cpu_vendor; got 'intle'.*did you mean"):
        load_fabric_catalog(bad)


def test_allpairs_and_tuner_latency_field_errors_are_located(tmp_path):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace("msccl.allpairs.max_bytes =", "msccl.allpairs.max_byte =", 1))
    with pytest.raises(SpecError, match=r"libraries\.rccl\.msccl\.allpairs\.max_byte: unknown key.*did you mean 'max_bytes'"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace('algorithms = ["ring", "tree", "hierarchical", "direct", "allpairs"]',
                                'algorithms = ["ring", "tree", "hierarchical", "direct"]', 1))
    with pytest.raises(SpecError, match=r"libraries\.rccl\.msccl\.allpairs: described but not used"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace('latency.tuner_extra_step_s = { value = "75 us"', 'latency.tuner_extra_step_s = { value = "75 GB"', 1))
    with pytest.raises(SpecError, match=r"fabrics\.efa-100g\.latency\.tuner_extra_step_s: wrong dimension"):
        load_fabric_catalog(bad)
    bad.write_text(text.replace('latency.tuner_extra_step_s = {', 'latency.tuner_extra_stp_s = {', 1))
    with pytest.raises(SpecError, match=r"efa-100g\.latency\.tuner_extra_stp_s: unknown key.*did you mean 'tuner_extra_step_s'"):
        load_fabric_catalog(bad)


@pytest.mark.parametrize("old,new,match", [
    ("rccl_tuner.ring_ratio.ll =", "rccl_tuner.ring_ratios.ll =",
     r"fabrics\.xgmi-mi300x\.rccl_tuner\.ring_ratios: unknown key.*did you mean"),
    ("rccl_tuner.tree_correction.ll =", "rccl_tuner.tree_correction.simple =",
     r"fabrics\.xgmi-mi300x\.rccl_tuner\.tree_correction: protocols differ"),
    ('rendezvous.eager_max_bytes = { value = "8 KiB"', 'rendezvous.eager_max_bytes = { value = "8 us"',
     r"fabrics\.efa-100g\.rendezvous\.eager_max_bytes"),
])
def test_rccl_tuner_and_rendezvous_field_errors_are_located(tmp_path, old, new, match):
    from hwmodels.collectives import DEFAULT_FABRICS_FILE

    text = DEFAULT_FABRICS_FILE.read_text(encoding="utf-8")
    assert old in text
    bad = tmp_path / "fabrics.toml"
    bad.write_text(text.replace(old, new, 1))
    with pytest.raises(SpecError, match=match):
        load_fabric_catalog(bad)
