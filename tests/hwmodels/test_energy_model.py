"""The on-die DRAM transport energy (``energy.dram_path_j_per_byte``): spec field, catalog value, engine charge."""

from __future__ import annotations

import logging
import math

import pytest

from hwmodels.spec import replace_path
from simulator.hardware import load_hardware

# (device file, die named in the derivation): the big monolithic HBM dies of three generations
WIRED = (("a100-sxm4-40gb", "826 mm^2 GA100"), ("a100-sxm4-80gb", "826 mm^2 GA100"),
         ("a100-pcie-40gb", "826 mm^2 GA100"), ("a100-pcie-80gb", "826 mm^2 GA100"),
         ("v100-sxm2-32gb", "815 mm^2 GV100"), ("v100-pcie-32gb", "815 mm^2 GV100"),
         ("h100-sxm5-80gb", "814 mm^2 GH100"), ("h100-pcie-80gb", "814 mm^2 GH100"),
         ("h200-sxm-141gb", "814 mm^2 GH100"))


@pytest.mark.parametrize(("name", "die"), WIRED)
def test_big_die_files_carry_the_sourced_dram_path_energy(name: str, die: str) -> None:
    dev = load_hardware(name)
    assert dev.energy.dram_path_j_per_byte == pytest.approx(46e-12, rel=1e-12)
    prov = dev.provenance["energy.dram_path_j_per_byte"]
    assert "BMC Bioinformatics 19 (2018)" in prov.source and die in prov.source
    assert "Keckler" in prov.note


def test_dram_path_value_is_the_wire_energy_over_one_die_side() -> None:
    """0.2 pJ/(bit mm) x sqrt(area) x 8 bit/B: GA100 826 mm^2 -> 45.98, GV100 815 -> 45.68, GH100 814 -> 45.65
    pJ/B; each file rounds to 46 pJ/B (within 1%)."""
    for area, want in ((826.0, 45.98e-12), (815.0, 45.68e-12), (814.0, 45.65e-12)):
        derived = 0.2e-12 * math.sqrt(area) * 8
        assert derived == pytest.approx(want, abs=0.01e-12)
        assert 46e-12 == pytest.approx(derived, rel=1e-2)


def test_devices_without_a_figure_give_zero_with_a_stated_source() -> None:
    dev = load_hardware("mi210")  # chiplets: no path length was derived
    assert dev.energy.dram_path_j_per_byte == 0.0
    assert dev.provenance["energy.dram_path_j_per_byte"].source.startswith("not modelled:")


def test_mi300x_prices_the_package_path_of_every_hbm_byte() -> None:
    """Infinity Cache (CDNA 3 white paper: a 2 MB data array per HBM channel) at Horowitz's 1 MB SRAM read,
    100 pJ / 8 B = 12.5 pJ/B; wires at 0.2 pJ/(bit mm) x 8 bit/B over one side of the 377 mm^2 IOD, 3/4 of a
    remote IOD's side (4 KiB stack interleave: 6 of 8 stacks hang off other IODs) and one side of the ~125 mm^2
    XCD (CAPA Table IV): 1.6 x (19.42 x 1.75 + 11.18) = 72.25 pJ/B; the remote 3/4 cross an IOD-IOD link at
    UCIe's advanced-package 0.25 pJ/bit = 1.5 pJ/B. Sum 86.25, 86.3 in the file."""
    wires = 0.2e-12 * 8 * (math.sqrt(377.0) * (1 + 3 / 4) + math.sqrt(125.0))
    assert wires == pytest.approx(72.25e-12, abs=0.01e-12)
    derived = 100e-12 / 8 + wires + 3 / 4 * 0.25e-12 * 8
    dev = load_hardware("mi300x")
    assert dev.energy.dram_path_j_per_byte == pytest.approx(derived, rel=1e-3)
    prov = dev.provenance["energy.dram_path_j_per_byte"]
    assert "Infinity Cache" in prov.source and "377 mm^2 IOD" in prov.source and "125 mm^2 XCD" in prov.source
    assert "CAPA" in prov.source


def test_b200_uses_the_side_of_a_reticle_limited_die() -> None:
    # 0.2 pJ/(bit mm) x sqrt(26 mm x 33 mm) x 8 bit/B = 46.87 pJ/B, rounded to 47 in the file
    derived = 0.2e-12 * math.sqrt(26.0 * 33.0) * 8
    dev = load_hardware("b200")
    assert dev.energy.dram_path_j_per_byte == pytest.approx(derived, rel=1e-2)
    assert "reticle" in dev.provenance["energy.dram_path_j_per_byte"].source


def test_spec_default_is_zero_for_files_that_omit_it(tmp_path) -> None:
    """A device file without the field loads with 0 J/B and the spec default recorded as its source."""
    from hwmodels.loader import load_device_file

    src = load_hardware("h100-sxm5-80gb").source_file
    text = "\n".join(ln for ln in open(src, encoding="utf-8").read().split("\n")
                     if not ln.startswith("dram_path_j_per_byte"))
    path = tmp_path / "h100-copy.toml"
    path.write_text(text, encoding="utf-8")
    dev = load_device_file(path)
    assert dev.energy.dram_path_j_per_byte == 0.0
    assert dev.provenance["energy.dram_path_j_per_byte"].source.startswith("default of EnergySpec.dram_path_j_per_byte")


def test_engine_charges_it_on_dram_bytes_only() -> None:
    """fp32 add of 2^30 elements: the dynamic energy differs by exactly dram_bytes x 46 pJ/B, time unchanged."""
    from simulator.calibration.energy_validation import load_energy_rows
    from simulator.calibration.predict import GraphCache
    from simulator.engines.analytical import evaluate

    row = next(r for r in load_energy_rows() if r.id == "energy-031")
    graph = GraphCache().get(row.measurement())
    dev = load_hardware("a100-sxm4-40gb")
    logging.disable(logging.WARNING)
    try:
        with_path = evaluate(graph, dev)
        without = evaluate(graph, replace_path(dev, "energy.dram_path_j_per_byte", 0.0))
    finally:
        logging.disable(logging.NOTSET)
    dram = sum(r.dram_bytes for r in with_path.records)
    assert dram == pytest.approx(3 * 2**30 * 4, rel=1e-12)  # two fp32 reads and one write of 2^30 elements
    diff = with_path.totals.dynamic_energy_j - without.totals.dynamic_energy_j
    assert diff == pytest.approx(dram * 46e-12, rel=1e-9)  # 0.5927 J
    assert with_path.totals.latency_s == without.totals.latency_s  # streaming add stays under the 400 W cap
    assert not any(r.power_capped for r in with_path.records)
