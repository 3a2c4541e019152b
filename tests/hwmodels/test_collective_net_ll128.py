"""NCCL's LL128 protocol across nodes where its enable rule keeps it (aws-p5 over EFA).

NCCL v2.22.3 keeps LL128 across nodes on Hopper when each GPU reaches its NIC through PCIe
switches (src/graph/tuning.cc: ``typeInter <= PATH_PXB || (minCompCap >= 90 && typeInter <=
PATH_PXN)``); on p5 every GPU sits with its four EFA cards behind one PCIe switch
(aws-ofi-nccl topology/p5.48xl-topo.xml) and the plugin leaves ``NCCL_PROTO`` unset on P5 + RDMA
(src/platform-aws.c, v1.9.2-aws): the catalog states it as the node's ``gpu_nic_path`` (PIX) under the
library's ``ll128.max_gpu_nic_path`` (PXB). Cases are hand-computed from the catalog's figures.
"""

from __future__ import annotations

import pytest

from hwmodels.collectives import (
    applicable_algorithms,
    collective_options,
    collective_time,
    fabric_catalog,
)

MIB = 2**20
US = 1e-6


def test_p5_keeps_ll128_as_a_fact_of_its_node():
    cat = fabric_catalog()
    # the decision is the node's GPU-to-NIC path (PIX on p5) under NCCL's rule (at most PXB), not the fabric's
    assert cat.system("aws-p5").gpu_nic_path == "pix" and cat.fabric("efa-100g").ll128 is False
    p5 = collective_options("all_reduce", 4 * MIB, 16, "aws-p5", n_nodes=2)
    assert {("ring", "ll128"), ("tree", "ll128")} <= set(p5)
    assert "hierarchical" in applicable_algorithms("all_reduce", 16, "aws-p5", n_nodes=2)


def test_tree_ll128_across_two_p5_nodes_hand_computed():
    """4 MiB all_reduce, 16 H100 on 2 p5 nodes, tree LL128.

    latency: baseLat LL128 14.0 + 20 rendezvous once (one channel's 256 KiB of the 16 exceeds the plugin's 8 KiB
    eager limit; only the collective's first inter-node step waits for the control message) + 2 x (7 NVLink
    steps x 1.9 + 1 EFA step x (NET LL128 4.0 + 20 plugin)) = 108.6 us. bytes:
    the chain inside a node moves 2 S over 16 ring channels x 15 GB/s x 0.92 (LL128's 120/128 line) =
    220.8 GB/s: 2 x 4 MiB / 220.8 GB/s = 37.99 us; the two nodes exchange S over 32 x 12.5 GB/s x 0.96 x
    0.92 = 353.3 GB/s (11.9 us), which hides behind it. Total 146.6 us (measured 170.0 us, coll-177).
    """
    r = collective_options("all_reduce", 4 * MIB, 16, "aws-p5", n_nodes=2)[("tree", "ll128")]
    assert float(r.latency_s) == pytest.approx(108.6 * US, rel=1e-9)
    chain = 2 * 4 * MIB / (16 * 15e9 * 0.92)
    assert float(r.time_s) == pytest.approx(108.6 * US + chain, rel=1e-6)


def test_p5_mid_sizes_rank_ll128_first():
    """With the plugin's 75 us on every inter-node step of NCCL's estimate (one step per direction for
    LL128, twice for Simple), the tree and ring LL128 now outrank the NVLS tree from 1 to 32 MiB; from
    64 MiB the NVLS tree (hierarchical/simple) stays first."""
    sizes = [MIB, 4 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 256 * MIB]
    r = collective_time("all_reduce", sizes, 16, "aws-p5", n_nodes=2)
    got = list(zip(r.algorithm, r.protocol, strict=True))
    assert got == [("tree", "ll128"), ("tree", "ll128"), ("ring", "ll128"), ("ring", "ll128"),
                   ("hierarchical", "simple"), ("hierarchical", "simple")]
    # 8 B and 1 KiB keep the tree LL (60.4 us of latency, as before)
    small = collective_time("all_reduce", 1024.0, 16, "aws-p5")
    assert (small.algorithm, small.protocol) == ("tree", "ll")
