"""TPU slice names follow Google's accelerator types (v4/v5p count TensorCores, v5e/v6e count chips),
accept the spellings users copy, reject sizes that are no slice shape, and take ``xN`` slices over DCN."""

from __future__ import annotations

import json

import pytest

from hwmodels.catalog import describe, load_any, load_system, parse_tpu_slice
from hwmodels.spec import SpecError


@pytest.mark.parametrize("name, canon, chips, cores, topology", [
    # Cloud TPU v5p page: 'v5p-32 specifies a v5p slice of 32 TensorCores (16 chips)'; table 2x2x1 = 8 cores, 4 chips
    ("v5p-8", "tpu-v5p-8", 4, 8, (2, 2, 1)),
    ("tpu-v5p-32", "tpu-v5p-32", 16, 32, (2, 2, 4)),
    ("V5P-128", "tpu-v5p-128", 64, 128, (4, 4, 4)),
    ("v5p-12288", "tpu-v5p-12288", 6144, 12288, (16, 16, 24)),  # 'the maximum v5p shape is 16x16x24'
    # types-topologies page: v4-128 is 128 TensorCores; 2x2x4 is 16 chips with 2 TensorCores each
    ("v4-32", "tpu-v4-32", 16, 32, (2, 2, 4)),
    ("tpu-v4-2048", "tpu-v4-2048", 1024, 2048, (8, 8, 16)),
    ("v4-8192", "tpu-v4-8192", 4096, 8192, (16, 16, 16)),
    # v5e and v6e count chips, one TensorCore each
    ("v5litepod-256", "tpu-v5e-256", 256, 256, (16, 16)),
    ("tpu-v5litepod-8", "tpu-v5e-8", 8, 8, (2, 4)),
    ("tpu-v5e-16", "tpu-v5e-16", 16, 16, (4, 4)),
    ("v6e-256", "tpu-v6e-256", 256, 256, (16, 16)),
    ("v6e-1", "tpu-v6e-1", 1, 1, (1, 1)),
])
def test_accelerator_types_hold_googles_chip_counts(name, canon, chips, cores, topology) -> None:
    sl = parse_tpu_slice(name)
    assert (sl.name, sl.chips, sl.tensorcores, sl.topology, sl.slices) == (canon, chips, cores, topology, 1)
    s = load_system(name)
    assert (s.name, s.count, s.nodes) == (canon, chips, 1)


def test_slices_over_dcn_are_nodes_of_one_slice_each() -> None:
    s = load_system("tpu-v5e-256x4")
    assert (s.count, s.nodes, s.devices_per_node, s.collectives) == (1024, 4, 256, "tpu-v5e-pod")
    s = load_system("v5p-128x2")
    assert (s.name, s.count, s.nodes, s.devices_per_node) == ("tpu-v5p-128x2", 128, 2, 64)


def test_hardware_show_states_chips_tensorcores_and_topology() -> None:
    text = describe(load_any("v5p-8"))
    assert "v5p-8: 4 chips x 2 TensorCores = 8 TensorCores" in text and "topology 2x2x1" in text
    text = describe(load_any("tpu-v5e-256x4"))
    assert "256 chips" in text and "topology 16x16" in text and "4 slices over the data-centre network" in text


def test_hardware_show_json_names_the_slice(capsys) -> None:
    from simulator.cli.main import main

    assert main(["hardware", "show", "v5p-128", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["tpu_slice"]
    assert got == {"accelerator_type": "v5p-128", "chips_per_slice": 64, "tensorcores_per_slice": 128, "slices": 1,
                   "topology": "4x4x4", "counts": "TensorCores"}


@pytest.mark.parametrize("name, needle", [
    ("tpu-v5p-7", "slice size; got v5p-7; expected a Google accelerator type of v5p (v5p-N counts TensorCores, "
                  "two per chip): N in 8, 16, 32, 64, 128"),
    ("v5p-24", "did you mean 'tpu-v5p-16' or 'tpu-v5p-32'?"),
    ("tpu-v5e-512", "N in 1, 4, 8, 16, 32, 64, 128, 256; did you mean 'tpu-v5e-256' or 'tpu-v5e-128'?"),
    ("v6e-3", "got v6e-3"),
    ("v4-9000", "got v4-9000"),
    ("tpu-v5e-256x0", "slice count; got x0; expected x1 to x4096"),
])
def test_sizes_that_are_no_slice_shape_are_refused_with_the_valid_ones(name, needle) -> None:
    with pytest.raises(SpecError) as e:
        load_system(name)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_refuses_a_bad_slice_in_one_line(capsys) -> None:
    from simulator.cli.main import main

    rc = main(["hardware", "show", "v5p-9"])
    err = capsys.readouterr().err
    assert rc == 2 and "did you mean 'tpu-v5p-8' or 'tpu-v5p-16'?" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("name, hosts", [
    # the v5p page's topology table: 2x2x1 (4 chips) on 1 host, 8x16x16 (2048 chips) on 512, 16x16x24 on 1536
    ("v5p-8", 1),
    ("v5p-4096", 512),
    ("v5p-4096x2", 1024),
    ("v5p-12288", 1536),
    # the v5e page: 'Chips per host 8'; 16x16 (256 chips) on 32 hosts; 1x1 and 2x2 are a fraction of one host
    ("v5litepod-256", 32),
    ("tpu-v5e-256x32", 1024),
    ("v5litepod-1", 1),
    ("v5litepod-4", 1),
    # the v6e page: 'Chips per host 8'
    ("v6e-256x4", 128),
    # a v4 host is 2x2x1 (the scaling book): v4-8 is 4 chips on one host, v4-8192 4096 chips on 1024
    ("v4-8", 1),
    ("v4-8192", 1024),
])
def test_tpu_slice_counts_the_hosts_of_all_its_slices(name, hosts):
    s = parse_tpu_slice(name)
    assert s.hosts == hosts
    assert f"{hosts} host" in s.summary()
