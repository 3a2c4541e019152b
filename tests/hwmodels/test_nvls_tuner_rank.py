"""NCCL ranks a one-node NVLS all_reduce by the estimate its tuner prints (``nvls_tuner`` of a system).

waynehacking8/nccl-collectives-bench results/scaling_attributed/g{2,4,6}_auto.log (NCCL 2.29.2, H100 SXM on
NVSwitch): NVLS Simple AllReduce '25.0/ 102.0', '25.0/ 160.0', '25.0/ 216.0' (latency us / algBw GB/s) at
2 / 4 / 6 GPUs beside Ring Simple '15.2/ 360.0', '28.8/ 240.0', '42.4/ 216.0'; the log's choice at
256 MiB - 8 GiB is Ring at 2 and 4 GPUs, NVLS at 6. Cases are hand-computed from those printed figures.
"""

from __future__ import annotations

import pytest
from fabric_edit import fabrics_error_with

from hwmodels.collectives import (
    collective_options,
    compare_published,
    load_collective_system,
)

US = 1e-6
_ALGBW4 = 'nvls_tuner.all_reduce_algbw.4 = { value = "160.0 GB/s", source = "@h100nvls: 4 GPUs" }'
_LAT = 'nvls_tuner.all_reduce_latency_s = { value = "25.0 us"'


def test_catalog_carries_the_printed_estimates() -> None:
    h100 = load_collective_system("dgx-h100")
    assert dict(h100.nvls_tuner_algbw) == {2: 102.0e9, 4: 160.0e9, 6: 216.0e9}
    assert h100.nvls_tuner_latency_s == pytest.approx(25.0 * US)
    assert "g4_auto.log" in h100.provenance["systems.dgx-h100.nvls_tuner.all_reduce_algbw.4"].source
    # systems whose logs print no NVLS estimate rank NVLS by its modelled time
    assert load_collective_system("aws-p5").nvls_tuner_algbw is None
    assert load_collective_system("hgx-b200").nvls_tuner_algbw is None


def test_ring_crosses_nvls_where_nccls_estimates_say() -> None:
    # 4 GPUs: 25 + S / 160 GB/s against 28.8 + S / 240 GB/s; they cross at 3.8 us / (1/160 - 1/240) GB/s
    crossing = 3.8 * US / (1 / 160e9 - 1 / 240e9)
    assert crossing == pytest.approx(1.824e6, rel=1e-3)
    h100 = load_collective_system("dgx-h100")
    opts = collective_options("all_reduce", [crossing / 2, crossing * 2], 4, h100)
    nvls, ring = opts[("nvls", "simple")].selection_time_s, opts[("ring", "simple")].selection_time_s
    assert nvls[0] < ring[0] and ring[1] < nvls[1]


def test_the_4gpu_plateau_rows_are_ring_as_nccl_logged() -> None:
    comps = {c.id: c for c in compare_published()}
    # coll-029..031 / coll-040..042: 4x H100 all_reduce 256 MiB - 8 GiB (NCCL 2.29.2): Ring Simple, within 3 %
    for cid in ("coll-029", "coll-030", "coll-031", "coll-040", "coll-041", "coll-042"):
        assert (comps[cid].predicted_algorithm, comps[cid].predicted_protocol) == ("ring", "simple"), cid
        assert abs(comps[cid].error) <= 0.03, cid
    # 6 GPUs stay NVLS, 2 GPUs Ring
    assert comps["coll-034"].predicted_algorithm == "nvls" and comps["coll-028"].predicted_algorithm == "ring"


def test_a_rank_key_that_is_not_a_count_is_located(tmp_path) -> None:
    msg = fabrics_error_with(tmp_path, _ALGBW4, 'nvls_tuner.all_reduce_algbw.four = { value = "160 GB/s", source = "x" }')
    assert msg == (f"{tmp_path / 'fabrics.toml'}:systems.dgx-h100.nvls_tuner.all_reduce_algbw.four: not a rank "
                   "count; got 'four'; expected a whole number >= 2 (e.g. all_reduce_algbw.4)")


def test_an_estimate_without_its_latency_is_located(tmp_path) -> None:
    msg = fabrics_error_with(tmp_path, _LAT, "")
    assert msg == (f"{tmp_path / 'fabrics.toml'}:systems.dgx-h100.nvls_tuner.all_reduce_latency_s: missing value; "
                   'got nothing; expected { value = ..., source = "..." }')


def test_an_unsourced_estimate_is_located(tmp_path) -> None:
    msg = fabrics_error_with(tmp_path, _ALGBW4, 'nvls_tuner.all_reduce_algbw.4 = "160 GB/s"')
    assert "systems.dgx-h100.nvls_tuner.all_reduce_algbw.4: number without a source; got '160 GB/s'" in msg


def test_a_rank_count_beyond_one_node_is_located(tmp_path) -> None:
    # dgx-h100 holds 8 GPUs a node; the tuner's figures are single-node estimates
    msg = fabrics_error_with(tmp_path, _ALGBW4, 'nvls_tuner.all_reduce_algbw.16 = { value = "160 GB/s", source = "x" }')
    assert msg == (f"{tmp_path / 'fabrics.toml'}:systems.dgx-h100.nvls_tuner.all_reduce_algbw.16: more ranks than "
                   "one node holds; got 16; expected at most devices_per_node = 8")


def test_an_estimate_on_a_system_without_nvls_is_located(tmp_path) -> None:
    msg = fabrics_error_with(tmp_path, 'nvls_channels = { value = 16, source = "@h100tune', "")
    assert msg == (f"{tmp_path / 'fabrics.toml'}:systems.dgx-h100.nvls_tuner: given for a system without NVLS; got "
                   'no nvls_channels; expected nvls_channels = { value = N, source = "..." } beside it')
