"""NCCL's own device memory per communicator, by hand (simulator/report/memory.py ``nccl_communicator_bytes``).

NCCL 2.21 (tag v2.21.5-1) connects every ring and tree channel when a communicator is created. Protocol buffers:
LL 8 x 512 x 8 x 16 = 524,288 B, LL128 120 x 640 x 8 x 8 = 4,915,200 B, Simple 4,194,304 B. Over NVLink with P2P
read a rank holds, per connection pair (one to the next rank, one from the previous), the sender's Simple buffer
(4 KiB ncclSendMem + 4 MiB -> 6 MiB at CUDA_IPC_MIN 2 MiB) and the receiver's LL + LL128 (4 KiB + 5,439,488 B ->
6 MiB): 12,582,912 B. Over the network: LL128 + Simple = 9,109,504 -> 10 MiB and LL + LL128 + Simple = 9,633,792
-> 10 MiB: 20,971,520 B. NVLink SHARP: channels x 2 x (128 KiB x 8 + 2 MiB) x heads.
"""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _nccl_bytes, evaluate_plan
from simulator.report import memory as M
from workloads.parallel import ParallelPlan

MIB = 2**20
P2P_PAIR, NET_PAIR = 12_582_912, 20_971_520


def test_connection_pairs_by_hand() -> None:
    assert M.NCCL_LL_BUFFSIZE_BYTES == 524_288 and M.NCCL_LL128_BUFFSIZE_BYTES == 4_915_200
    assert M.NCCL_CONNECTION_PAIR_BYTES == {"p2p": P2P_PAIR, "net": NET_PAIR}


def test_communicator_bytes_by_hand() -> None:
    # 4 ranks of one H100 node, 24 ring channels, NVLS 16 channels: ring 24 x 12 MiB, the tree's chain as much
    # again, NVLS 24 x 2 x 3 MiB x 4 heads
    four = M.nccl_communicator_bytes(4, 4, 24, 16)
    assert four == {"ring": 301_989_888, "tree": 301_989_888, "nvls": 603_979_776}
    assert sum(four.values()) == 1_207_959_552  # 1.125 GiB
    # NCCL_NVLS_ENABLE=0 (nvls_channels 0): ring and tree only
    assert M.nccl_communicator_bytes(4, 4, 24, 0) == {"ring": 301_989_888, "tree": 301_989_888, "nvls": 0.0}
    # 2 ranks: the ring's connections are the tree's, and NVLS needs more than 2 GPUs of the node
    assert M.nccl_communicator_bytes(2, 2, 24, 16) == {"ring": 301_989_888, "tree": 0.0, "nvls": 0.0}
    # 2 ranks on two nodes: network connections
    assert M.nccl_communicator_bytes(2, 1, 24, 16) == {"ring": 24 * NET_PAIR, "tree": 0.0, "nvls": 0.0}
    # 8 ranks, one a node: ring and tree over the network, no NVLS (one GPU of the communicator a node)
    assert sum(M.nccl_communicator_bytes(8, 1, 24, 16).values()) == 2 * 24 * NET_PAIR == 1_006_632_960
    # more NVLS channels than ring channels (Blackwell's 32): every channel count becomes 32
    b200 = M.nccl_communicator_bytes(8, 8, 24, 32)
    assert b200 == {"ring": 32 * P2P_PAIR, "tree": 32 * P2P_PAIR, "nvls": 32 * 2 * 3 * MIB * 8}
    assert M.nccl_communicator_bytes(1, 1, 24, 16) == {"ring": 0.0, "tree": 0.0, "nvls": 0.0}


def test_a_plans_communicators_on_four_dgx_h100() -> None:
    # TP 4 x PP 4 x DP 2 on 32 GPUs (8 a node): the TP group is 4 GPUs of a node (NVLS), the DP group 2 GPUs of a
    # node 4 apart, each pipeline neighbour a 2-rank communicator with a GPU of another node
    hw = load_hardware("dgx-h100x4")
    plan = ParallelPlan(tp=4, pp=4, dp=2)
    got = _nccl_bytes(plan, hw)
    assert got == {"tp": 1_207_959_552, "dp": 301_989_888, "pp_send": 503_316_480, "pp_recv": 503_316_480}
    off = _nccl_bytes(ParallelPlan(tp=4, pp=4, dp=2, nccl_nvls=False), hw)
    assert off["tp"] == 603_979_776 and sum(got.values()) - sum(off.values()) == 603_979_776


def test_nccl_bytes_count_against_the_device_not_the_allocator() -> None:
    hw = load_hardware("dgx-h100")
    res = evaluate_plan("gpt2", hw, ParallelPlan(tp=2, dp=4, microbatch=1, global_batch=4), train=True, seq=256,
                        dtype="bf16", recompute="full")
    b = res.stages[0].memory_breakdown()
    # TP 2 (2 GPUs): ring only; DP 4 (4 GPUs 2 apart on one node): ring, tree and NVLS 24 x 2 x 3 MiB x 4
    assert b["nccl.tp"] == 301_989_888 and b["nccl.dp"] == 1_207_959_552
    assert b["buffers.nccl"] == b["nccl.tp"] + b["nccl.dp"]
    assert b["allocator_reserved"] == pytest.approx(b["total"] - b["buffers.cuda_context"] - b["buffers.nccl"])
    assert res.allocator_reserved_per_device_bytes == pytest.approx(b["allocator_reserved"])
    assert res.memory_per_device_bytes == pytest.approx(b["total"])
