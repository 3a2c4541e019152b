"""NCCL 2.8.3 - 2.9.9 and 2.10.3 - 2.17.1 as catalog entries, chosen for a published run by the release its notes state.

The 8x A100 all_reduce rows (OCI BM.GPU4.8, horovod image pinning libnccl2 2.9.9) ran an NCCL whose
tables differ from [libraries.nccl] (v2.28.7): ring LL baseLat 3.6 + 0.47 us per NVLink step, LL128 10.0
+ 1.9 us (src/graph/tuning.cc, every tag from v2.8.3-1 to v2.17.1-1), the one-node ring LL bus bandwidth
capped at 1/4 of the ring's (all_reduce; 1/3 for the others), and ring chunks rounded up to threads x a
per-protocol granule (src/collectives/device/all_reduce.h to v2.19.4-1), and a one-node bus bandwidth
capped at 235 GB/s on compute capability 8.0 (gone from v2.18.1). To v2.9.9 the ring LL128 bus bandwidth is also
capped at ll128MaxBwPerCh[collective] x the ring graph's channels (16.9 GB/s x 12 for all_reduce on 8 A100; one
20 GB/s from v2.10.3). Cases are hand-computed from the catalog's figures.
"""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.collectives import (
    chunk_granule_ratio,
    collective_options,
    collective_time,
    compare_published,
    fabric_catalog,
    library_for_version,
    library_version_of,
    parse_version,
)
from tests.hwmodels.fabric_edit import fabrics_error_with

KIB = 2**10
MIB = 2**20
US = 1e-6
GB = 1e9


@pytest.fixture(scope="module")
def a100_legacy():
    import dataclasses

    cat = fabric_catalog()
    sysm = cat.system("dgx-a100")
    return dataclasses.replace(sysm, library=cat.library("nccl-2.9"))


def test_the_entry_states_its_range_and_the_tables_of_those_releases():
    lib = fabric_catalog().library("nccl-2.17")
    assert lib.family_name == "nccl" and lib.versions == ((2, 10, 3), (2, 17, 1))
    assert lib.base_latency_s["ll"] == pytest.approx(3.6 * US)
    assert lib.base_latency_s["ll128"] == pytest.approx(10.0 * US)
    assert lib.step_latency_s["nvlink"]["ll"] == pytest.approx(0.47 * US)
    assert lib.step_latency_s["net"]["simple"] == pytest.approx(9.6 * US)
    assert lib.ring_ll_busbw_fraction["all_reduce"] == pytest.approx(0.25)
    assert lib.ring_ll_busbw_fraction["all_gather"] == pytest.approx(1 / 3, rel=1e-6)
    assert dict(lib.ring_chunk_granule_per_thread) == {"ll": 8.0, "ll128": 30.0, "simple": 8.0}
    assert dict(lib.ring_busbw_cap) == {"nvlink3-nvswitch2": pytest.approx(235 * GB)}
    assert "v2.16.2-1" in lib.provenance["libraries.nccl-2.17.base_latency_s.ll"].source
    assert "minChunkSize" in lib.provenance["libraries.nccl-2.17.ring.chunk_granule_bytes_per_thread.ll128"].source
    assert lib.ring_ll128_channel_cap is None  # 20 GB/s per ring-graph channel from v2.10.3: not described
    old = fabric_catalog().library("nccl-2.9")
    assert old.family_name == "nccl" and old.versions == ((2, 8, 3), (2, 9, 9))
    assert dict(old.ring_ll128_channel_cap) == {"all_reduce": pytest.approx(16.9 * GB), "all_gather": pytest.approx(18.3 * GB),
                                                "reduce_scatter": pytest.approx(15.2 * GB), "broadcast": pytest.approx(18.8 * GB)}
    assert "ll128MaxBwPerCh" in old.provenance["libraries.nccl-2.9.tuner.ring_ll128_max_channel_bandwidth.all_reduce"].source
    for key in ("base_latency_s", "step_latency_s", "ring_ll_busbw_fraction", "ring_chunk_granule_per_thread",
                "ring_busbw_cap", "launch_per_device_s", "tree_tuner"):  # otherwise the tables of 2.10-2.17
        assert getattr(old, key) == getattr(lib, key), key
    # the entry of the current releases states neither: no cap, no granule
    cur = fabric_catalog().library("nccl")
    assert cur.family_name == "nccl" and cur.versions is None
    assert cur.ring_ll_busbw_fraction is None and cur.ring_chunk_granule_per_thread is None and cur.ring_busbw_cap is None
    assert cur.ring_ll128_channel_cap is None


@pytest.mark.parametrize("notes,version", [
    ("nccl-tests 2.17.6, NCCL 2.28.7 (nccl-library=22807), one MPI rank per GPU", (2, 28, 7)),
    ("NCCL version not printed, assumed 2.9.9: the horovod image pins libnccl2 2.9.9-1+cuda11.3", (2, 9, 9)),
    ("rccl-tests, RCCL 2.20.5 (ROCm 6.2.3)", None),
    ("# NCCL version 2.9.9+cuda11.0 (nccl-tests header)", (2, 9, 9)),
    ("ran on NCCL v2.9.9 with the default environment", (2, 9, 9)),
    ("Dockerfile: apt-get install libnccl2=2.9.9-1+cuda11.0 libnccl-dev=2.9.9-1+cuda11.0", (2, 9, 9)),
    ("dpkg lists libnccl2 2.9.9-1", (2, 9, 9)),
    ("NCCL 2.19.9", (2, 19, 9)),
    ("NCCL 12.9.9", (12, 9, 9)),
    ("NCCL version 2.9.99", (2, 9, 99)),
    ("RCCL 2.9.9 (ROCm 4.3)", None),
    ("RCCL version 2.9.9", None),
    ("librccl 2.9.9", None),
    ("EFA plugin aws-ofi-NCCL 1.9.2", None),
    ("OFI-NCCL 1.7.4 with NCCL 2.18.3", (2, 18, 3)),
    ("no version", None),
])
def test_a_rows_release_is_read_from_its_notes(notes, version):
    assert library_version_of({"notes": notes}) == version


def test_the_entry_whose_range_holds_the_release_is_chosen():
    cat = fabric_catalog()
    nccl, rccl = cat.library("nccl"), cat.library("rccl")
    assert library_for_version(cat, nccl, (2, 9, 9)).name == "nccl-2.9"
    assert library_for_version(cat, nccl, (2, 8, 3)).name == "nccl-2.9"
    assert library_for_version(cat, nccl, (2, 10, 3)).name == "nccl-2.17"  # v2.10.3: one LL128 cap of 20 GB/s
    assert library_for_version(cat, nccl, (2, 17, 1)).name == "nccl-2.17"
    assert library_for_version(cat, nccl, (2, 18, 1)).name == "nccl-2.19"  # v2.18.1 raised ring LL to 6.6 + 0.6 us
    assert library_for_version(cat, nccl, (2, 19, 4)).name == "nccl-2.19"
    assert library_for_version(cat, nccl, (2, 20, 3)).name == "nccl-2.20"  # the host splits chunks: no granule
    assert library_for_version(cat, nccl, (2, 20, 5)).name == "nccl-2.20"
    assert library_for_version(cat, nccl, (2, 21, 5)) is nccl  # ring LL 'busBw * .5' from v2.21.5
    assert library_for_version(cat, nccl, (2, 28, 9)) is nccl
    assert library_for_version(cat, nccl, (2, 29, 2)).name == "nccl-2.29"  # a send's LL test against its own channels
    assert library_for_version(cat, nccl, (2, 29, 7)).name == "nccl-2.29"
    assert library_for_version(cat, nccl, None) is nccl
    assert library_for_version(cat, rccl, (2, 9, 9)) is rccl  # another family
    assert parse_version("2.9.9") == (2, 9, 9) and parse_version("2.9") is None
    for other in ((2, 19, 9), (12, 9, 9), (2, 9, 99)):  # read whole by library_version_of: not nccl-2.9
        assert library_for_version(cat, nccl, other).name != "nccl-2.9"


def test_chunk_granule_ratio_hand_computed(a100_legacy):
    """8 ranks on 24 channels: an LL round covers 24 x 8 x 512 x 8 B = 768 KiB, an LL128 round 24 x 8 x
    640 x 30 B = 3,686,400 B. 1 MiB LL takes two rounds (1.5 MiB of chunks: x 1.5), 4 MiB LL128 two
    (7,372,800 B: x 1.7578125); 256 KiB runs on 8 of the 24 channels (NCCL's channel tuning), no rounding."""
    assert float(chunk_granule_ratio(a100_legacy, "ll", MIB, 8)) == pytest.approx(1.5)
    assert float(chunk_granule_ratio(a100_legacy, "ll128", 4 * MIB, 8)) == pytest.approx(7372800 / (4 * MIB))
    assert float(chunk_granule_ratio(a100_legacy, "ll", 256 * 1024, 8)) == 1.0
    assert float(chunk_granule_ratio(a100_legacy, "ll", 768 * 1024, 8)) == pytest.approx(1.0)
    assert float(chunk_granule_ratio("dgx-a100", "ll128", 4 * MIB, 8)) == 1.0  # NCCL 2.20+: no granule


def test_a100_one_mib_ring_ll_hand_computed(a100_legacy):
    """1 MiB all_reduce, 8 A100, NCCL 2.9.9 ring LL: 3.6 + 14 x 0.47 = 10.18 us; bus bandwidth min(24 x 10 x
    0.5, llMaxBw 87.7, min(24 x 10, 235) x 1/4) = 58.75 GB/s; 2 x 7/8 x 1 MiB / 58.75 GB/s = 31.23 us, x 1.5
    for the chunk rounding = 46.85 us; one thread driving the 8 GPUs adds 7 x 3.41 us."""
    r = collective_time("all_reduce", MIB, 8, a100_legacy, algorithm="ring", protocol="ll")
    device = (3.6 + 14 * 0.47) * US + 2 * 7 / 8 * MIB / (58.75 * GB) * 1.5
    assert float(r.time_s) == pytest.approx(device, rel=1e-9)
    one_thread = collective_time("all_reduce", MIB, 8, a100_legacy, algorithm="ring", protocol="ll", gpus_per_thread=8)
    assert float(one_thread.time_s) == pytest.approx(device + 7 * 3.41 * US, rel=1e-9)


def test_a100_four_mib_runs_ll128_as_nccl_2_9_ranks_it(a100_legacy):
    """4 MiB: NCCL 2.9.9 ranks ring LL128 (10.0 + 14 x 1.9 us + S x 7/4 / min(235 x 0.92, 16.9 x 12) GB/s) over
    ring LL (the 58.75 GB/s cap); its time 36.6 us + 36.20 us x 1.7578 = 100.23 us (one rank per GPU)."""
    opts = collective_options("all_reduce", 4 * MIB, 8, a100_legacy)
    ranked = min(opts, key=lambda k: float(opts[k].selection_time_s if opts[k].selection_time_s is not None
                                            else opts[k].time_s))
    assert ranked == ("ring", "ll128")
    auto = collective_time("all_reduce", 4 * MIB, 8, a100_legacy)
    t_bw = 2 * 7 / 8 * 4 * MIB / (16.9 * GB * 12)
    assert (auto.algorithm, auto.protocol) == ("ring", "ll128")
    assert float(auto.time_s) == pytest.approx((10.0 + 14 * 1.9) * US + t_bw * 7372800 / (4 * MIB), rel=1e-9)


def test_only_the_rows_stating_such_a_release_move():
    """The 8x A100 all_reduce rows (libnccl2 2.9.9) are priced with the entry; the H100 rows (NCCL 2.28.7,
    2.29.2) and the A100 sends (no release printed) keep [libraries.nccl]."""
    comps = {c.id: c for c in compare_published()}
    legacy = fabric_catalog().library("nccl-2.9")
    base = (legacy.base_latency_s["ll"] + 14 * legacy.step_latency_s["nvlink"]["ll"] + 7 * legacy.launch_per_device_s)
    c189 = comps["coll-189"]  # 64 B, 32.0 us: 3.6 + 14 x 0.47 + 7 x 3.41 = 34.05 us plus the bytes
    assert (c189.predicted_algorithm, c189.predicted_protocol) == ("ring", "ll")
    assert 64 / c189.predicted_busbw_bytes_per_s * 2 * 7 / 8 == pytest.approx(base, rel=0.01)
    # the 128 MiB send: 8 channels of 10 GB/s, plus the copy of the last 512 KiB chunk (52.4 us)
    assert np.isclose(comps["coll-099"].predicted_busbw_bytes_per_s, 128 * MIB / (1765.8 * US), rtol=1e-3)


def test_a_bad_range_is_located(tmp_path):
    msg = fabrics_error_with(tmp_path, 'versions = { value = "2.10.3..2.17.1"', 'versions = { value = "2.17.1..2.8.3", source = "x" }')
    assert "libraries.nccl-2.17.versions: bad version range; got '2.17.1..2.8.3'" in msg


def test_the_ampere_cap_binds_the_large_ring(a100_legacy):
    """1 GiB Simple ring on 8 A100: min(12 links x 25 GB/s x 0.8, 24 x 10 GB/s, 235 GB/s) = 235 GB/s under NCCL
    2.9.9 (240 GB/s under [libraries.nccl]): 8.4 + 14 x 3.4 us + 2 x 7/8 x 1 GiB / 235 GB/s, the chunks rounded
    up to 512 threads x 8 B over 24 channels x 8 ranks (1366 rounds of 786,432 B: x 1.00049)."""
    r = collective_time("all_reduce", 2**30, 8, a100_legacy, algorithm="ring", protocol="simple")
    rounding = 1366 * 786432 / 2**30
    assert float(r.time_s) == pytest.approx((8.4 + 14 * 3.4) * US + 2 * 7 / 8 * 2**30 / (235 * GB) * rounding,
                                            rel=1e-6)
    cur = collective_time("all_reduce", 2**30, 8, "dgx-a100", algorithm="ring", protocol="simple")
    assert float(cur.time_s) == pytest.approx((8.4 + 14 * 3.4) * US + 2 * 7 / 8 * 2**30 / (240 * GB), rel=1e-6)


def test_the_ll128_cap_turns_16_mib_to_simple_as_nccl_2_9_ranks_it(a100_legacy):
    """16 MiB, 8 A100, NCCL 2.9.9: ring LL128 36.6 us + 2 x 7/8 x 16 MiB / 202.8 GB/s = 181.37 us against ring
    Simple 8.4 + 14 x 3.4 us + 2 x 7/8 x 16 MiB / 235 GB/s = 180.94 us: Simple, by 0.43 us (at 216.2 GB/s, the
    2.10-2.17 entry, LL128 172.4 us). 8 MiB stays LL128 (109.0 against 118.5 us)."""
    auto = collective_time("all_reduce", 16 * MIB, 8, a100_legacy)
    assert (auto.algorithm, auto.protocol) == ("ring", "simple")
    opts = collective_options("all_reduce", 16 * MIB, 8, a100_legacy)
    data = 2 * 7 / 8 * 16 * MIB
    assert float(opts[("ring", "ll128")].selection_time_s) == pytest.approx(36.6 * US + data / (202.8 * GB), rel=1e-9)
    assert float(opts[("ring", "simple")].selection_time_s) == pytest.approx(56.0 * US + data / (235 * GB), rel=1e-9)
    assert collective_time("all_reduce", 8 * MIB, 8, a100_legacy).protocol == "ll128"
    import dataclasses
    cat = fabric_catalog()
    later = dataclasses.replace(cat.system("dgx-a100"), library=cat.library("nccl-2.17"))
    assert collective_time("all_reduce", 16 * MIB, 8, later).protocol == "ll128"


def test_a_bad_ll128_cap_key_is_located(tmp_path):
    msg = fabrics_error_with(tmp_path, "tuner.ring_ll128_max_channel_bandwidth.broadcast",
                             'tuner.ring_ll128_max_channel_bandwidth.alltoall = { value = "18.8 GB/s", source = "x" }')
    assert "libraries.nccl-2.9.tuner.ring_ll128_max_channel_bandwidth" in msg and "alltoall" in msg


_V29 = 'versions = { value = "2.8.3..2.9.9"'


def _v29_line() -> str:
    from hwmodels.collectives import DEFAULT_FABRICS_FILE
    return next(line for line in DEFAULT_FABRICS_FILE.read_text().splitlines() if line.startswith(_V29))


@pytest.mark.parametrize("old,new,expected", [
    ("[libraries.nccl]\n", "[libraries.nccl]\ntuner.ring_busbw_cap = 5",
     "libraries.nccl.tuner.ring_busbw_cap: not a table; got 5; expected tuner.ring_busbw_cap.<fabric>"),
    ("[libraries.nccl]\n", "[libraries.nccl]\ntuner.ring_ll_busbw_fraction = 0.25",
     "libraries.nccl.tuner.ring_ll_busbw_fraction: not a table; got 0.25"),
    ("[libraries.nccl]\n", "[libraries.nccl]\nring = 3", "libraries.nccl.ring: not a table; got 3"),
    ("[libraries.rccl]", '[libraries.rccl]\nversions = { value = "2.20.5..2.20.5", source = "x" }',
     "libraries.rccl.versions: a range without a family never matches; got versions but no family"),
    (_V29, 'versions = { value = "2.8.3..2.10.3", source = "x" }',
     "libraries.nccl-2.17.versions: overlaps another entry of family 'nccl'; got 2.10.3..2.17.1 against "
     "libraries.nccl-2.9 (2.8.3..2.10.3)"),
])
def test_bad_version_entry_fields_are_located(tmp_path, old, new, expected):
    assert expected in fabrics_error_with(tmp_path, old, new)


def test_a_misspelt_cap_fabric_is_located_against_the_declared_fabrics(tmp_path):
    msg = fabrics_error_with(tmp_path, _V29, _v29_line() + '\ntuner.ring_busbw_cap.nvlink3-nvswitch = '
                                                        '{ value = "235 GB/s", source = "x" }')
    assert "libraries.nccl-2.9.tuner.ring_busbw_cap.nvlink3-nvswitch: unknown key; got 'nvlink3-nvswitch'" in msg
    assert "did you mean 'nvlink3-nvswitch2'?" in msg


def test_releases_2_18_to_2_20_keep_the_ll_factor_and_2_18_to_2_19_the_granule():
    """NCCL v2.18.1-1 to v2.20.5-1 (src/graph/tuning.cc) keep the ring LL factor 1/4 (all_reduce) or 1/3 with
    the current latency tables and no Ampere cap; the ring chunk granule holds to v2.19.4-1."""
    cat = fabric_catalog()
    cur, e19, e20 = cat.library("nccl"), cat.library("nccl-2.19"), cat.library("nccl-2.20")
    assert e19.versions == ((2, 18, 1), (2, 19, 4)) and e20.versions == ((2, 20, 3), (2, 20, 5))
    for lib in (e19, e20):
        assert lib.family_name == "nccl" and lib.ring_busbw_cap is None
        assert lib.ring_ll_busbw_fraction["all_reduce"] == pytest.approx(0.25)
        assert lib.ring_ll_busbw_fraction["broadcast"] == pytest.approx(1 / 3, rel=1e-6)
        assert lib.base_latency_s == cur.base_latency_s and lib.step_latency_s == cur.step_latency_s
        assert "v2.20.5-1 (line 181)" in lib.provenance[f"libraries.{lib.name}.tuner.ring_ll_busbw_fraction.all_reduce"].source
    assert dict(e19.ring_chunk_granule_per_thread) == {"ll": 8.0, "ll128": 30.0, "simple": 8.0}
    assert e20.ring_chunk_granule_per_thread is None


def test_one_mib_ring_ll_on_one_h100_node_under_nccl_2_19():
    """8x H100, 1 MiB all_reduce, ring LL under NCCL 2.19: 6.6 + 14 x 0.6 us + 2 x 7/8 x 1 MiB at 1/4 x 24 channels x
    15 GB/s = 90 GB/s, the chunks rounded up to 512 threads x 8 B over 24 channels x 8 ranks (2 rounds of 786,432 B:
    x 1.5) = 45.58 us; NCCL 2.20 drops the rounding (35.39 us)."""
    import dataclasses
    cat = fabric_catalog()
    sysm = cat.system("dgx-h100")
    assert sysm.ring_channels == 24 and sysm.intra.channel_bandwidth_bytes_per_s == pytest.approx(15 * GB)
    data = 2 * 7 / 8 * MIB / (0.25 * 24 * 15 * GB)
    for name, rounding in (("nccl-2.19", 1.5), ("nccl-2.20", 1.0)):
        r = collective_time("all_reduce", MIB, 8, dataclasses.replace(sysm, library=cat.library(name)),
                            algorithm="ring", protocol="ll")
        assert float(r.time_s) == pytest.approx((6.6 + 14 * 0.6) * US + data * rounding, rel=1e-9), name


def test_the_four_node_nvls_tree_chunk_cap_is_a_field_of_the_current_entry_only():
    """src/enqueue.cc 'maxChunkSize = comm->nNodes >= 4 ? 65536 : chunkSize' (v2.22.3-1, v2.28.7-1), absent at
    v2.18.1-1 to v2.20.5-1: 64 KiB on [libraries.nccl], none on the 2.18-2.20 entries."""
    cat = fabric_catalog()
    assert cat.library("nccl").nvls_tree_many_nodes_chunk_bytes == 65536
    assert "v2.28.7-1 line 2063" in cat.library("nccl").provenance["libraries.nccl.tuner.nvls_tree_many_nodes_chunk_bytes"].source
    assert cat.library("nccl-2.19").nvls_tree_many_nodes_chunk_bytes is None
    assert cat.library("nccl-2.20").nvls_tree_many_nodes_chunk_bytes is None


def test_nccl_2_29_takes_a_send_as_ll_against_its_own_channels():
    """NCCL 2.28.9 runs a send LL up to p2pnChannelsPerPeer (32) x 16 KiB = 512 KiB; 2.29.2 up to its own channel
    count x 16 KiB, the channels counted in the 512 KiB Simple chunk (parts of at least 64 KiB): one channel below
    64 KiB, so LL only to 16 KiB (src/enqueue.cc addP2pToPlan). Every other field is [libraries.nccl]'s."""
    import dataclasses
    cat = fabric_catalog()
    cur, e29 = cat.library("nccl"), cat.library("nccl-2.29")
    assert e29.family_name == "nccl" and e29.versions == ((2, 29, 2), (2, 29, 7))
    assert (cur.p2p_ll_threshold_of, e29.p2p_ll_threshold_of) == ("channels_per_peer", "send_channels")
    for f in dataclasses.fields(cur):
        if f.name not in ("name", "description", "family", "versions", "provenance", "p2p_ll_threshold_of",
                          "p2p_ll_step_bytes"):
            assert getattr(e29, f.name) == getattr(cur, f.name), f.name
    sysm = cat.system("dgx-b200")
    sizes = np.array([2.0 * 16 * KIB, 2.0 * 32 * KIB, 2.0 * 512 * KIB, 2.0 * 1024 * KIB])  # 2 GPUs: S/2 a peer
    r28 = collective_time("all_to_all", sizes, 2, sysm)
    r29 = collective_time("all_to_all", sizes, 2, dataclasses.replace(sysm, library=e29))
    assert list(r28.protocol) == ["ll", "ll", "ll", "simple"]
    assert list(r29.protocol) == ["ll", "simple", "simple", "simple"]
    # a Simple send of 32 KiB a peer: one channel of 22.5 GB/s, and the 32 KiB is also the last chunk's copy
    assert float(r29.time_s[1]) == pytest.approx((8.4 + 3.4) * US + 2 * 32 * KIB / (22.5 * GB))



def test_a_misspelt_p2p_ll_rule_is_located(tmp_path):
    msg = fabrics_error_with(tmp_path, 'p2p.ll_threshold_of = { value = "send_channels"',
                             'p2p.ll_threshold_of = { value = "send_chanels", source = "x" }')
    assert "libraries.nccl-2.29.p2p.ll_threshold_of: unknown value; got 'send_chanels'" in msg
    assert "did you mean 'send_channels'" in msg
