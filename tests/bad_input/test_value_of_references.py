"""``value_of = "NAME:dotted.path"``: a catalog figure written once and referenced where it holds again (a node's
shared-memory links, a device file of the same module). Bad references through the real CLI: one located line,
exit 2 (tests/bad_input/contract.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hwmodels.catalog import DEVICES_DIR, load_device
from hwmodels.node import NODES_DIR, load_node
from hwmodels.spec import SpecError
from tests.bad_input.contract import cli_exit, one_line

NODE = (NODES_DIR / "jetson-agx-orin-64gb.toml").read_text(encoding="utf-8")
DLA = (DEVICES_DIR / "orin-dla.toml").read_text(encoding="utf-8")
REF = 'value_of = "gpu:efficiency.dram_bandwidth_fraction"'
DLA_REF = 'value_of = "jetson-agx-orin-64gb:efficiency.dram_bandwidth_fraction"'


def test_orin_dram_fraction_is_written_once() -> None:
    gpu = load_device("jetson-agx-orin-64gb")
    frac = gpu.efficiency.dram_bandwidth_fraction
    assert frac == pytest.approx(152.8 / 204.8, abs=5e-4)  # the module's LPDDR5 read, ApxInf roofline
    dla = load_device("orin-dla")
    assert dla.efficiency.dram_bandwidth_fraction == frac
    assert "(= jetson-agx-orin-64gb:efficiency.dram_bandwidth_fraction: infinigence/ApxInf" in \
        dla.source_of("efficiency.dram_bandwidth_fraction").source
    node = load_node("jetson-agx-orin-64gb")
    assert len(node.links) == 6 and all(ln.bandwidth_fraction == frac for ln in node.links)
    assert all("(= gpu:efficiency.dram_bandwidth_fraction: infinigence/ApxInf" in ln.provenance["bandwidth_fraction"]
               .source for ln in node.links)
    # the files hold the number once: in the GPU's own file
    texts = [p.read_text(encoding="utf-8") for p in (*DEVICES_DIR.glob("*orin*.toml"), *NODES_DIR.glob("*orin*.toml"))]
    assert sum(len(re.findall(r"value = 0\.746\b", t)) for t in texts) == 1
    assert sum(t.count("value_of") for t in texts) == 8  # the DLA, the Orin Nano and the module's six links


def _node_with(tmp_path: Path, old: str, new: str) -> Path:
    assert old in NODE
    p = tmp_path / "node.toml"
    p.write_text(NODE.replace(old, new, 1), encoding="utf-8")
    return p


NODE_CASES = [
    ("unknown-device", REF, 'value_of = "gpuu:efficiency.dram_bandwidth_fraction"',
     ("links[0] (gpu-dla0).bandwidth_fraction: value_of 'gpuu:efficiency.dram_bandwidth_fraction'",
      "unknown device; got 'gpuu'", "did you mean 'gpu'?")),
    ("unknown-field", REF, 'value_of = "gpu:efficiency.dram_bandwith_fraction"',
     ("links[0] (gpu-dla0).bandwidth_fraction: value_of", "dram_bandwith_fraction", "dram_bandwidth_fraction")),
    ("no-colon", REF, 'value_of = "gpu.efficiency.dram_bandwidth_fraction"',
     ("bandwidth_fraction: value_of; got 'gpu.efficiency.dram_bandwidth_fraction'", 'expected "NAME:dotted.path"')),
    ("wrong-unit", REF, 'value_of = "gpu:memory.lpddr5.read_bandwidth_bytes_per_s"',
     ("bandwidth_fraction: value_of 'gpu:memory.lpddr5.read_bandwidth_bytes_per_s': not a number of this field's unit",
      "(unit B/s)", "expected a field in 1")),
    ("no-source", REF + ', source = "the LPDDR5 read fraction of the module\'s GPU"', REF,
     ("bandwidth_fraction: missing source",)),
    ("value-too", REF, REF + ", value = 0.7", ("bandwidth_fraction.value: unknown key", "got 'value'")),
]


@pytest.mark.parametrize(("old", "new", "parts"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES])
def test_bad_reference_in_a_node_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str,
                                      parts: tuple[str, ...]) -> None:
    path = _node_with(tmp_path, old, new)
    rc, err = cli_exit(capsys, "partition", "gemm:m=64,n=64,k=64", "--hardware", str(path))
    one_line(rc, err, "node.toml", *parts)


DEVICE_CASES = [
    ("unknown-catalog-device", 'value_of = "jetson-agx-orin-32gb:efficiency.dram_bandwidth_fraction"',
     ("efficiency.dram_bandwidth_fraction: value_of 'jetson-agx-orin-32gb:", "not a catalog device",
      "did you mean 'jetson-agx-orin-64gb'")),
    ("a-path", 'value_of = "./jetson-agx-orin-64gb.toml:efficiency.dram_bandwidth_fraction"',
     ("efficiency.dram_bandwidth_fraction: value_of", "not a catalog device; got './jetson-agx-orin-64gb.toml'")),
]


@pytest.mark.parametrize(("new", "parts"), [c[1:] for c in DEVICE_CASES], ids=[c[0] for c in DEVICE_CASES])
def test_bad_reference_in_a_device_file(tmp_path: Path, capsys: pytest.CaptureFixture[str], new: str,
                                        parts: tuple[str, ...]) -> None:
    assert DLA_REF in DLA
    path = tmp_path / "dla.toml"
    path.write_text(DLA.replace(DLA_REF, new), encoding="utf-8")
    rc, err = cli_exit(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", str(path))
    one_line(rc, err, "dla.toml", *parts)


def test_a_reference_cycle_is_refused() -> None:
    from hwmodels import loader

    loader._REFERENCE_STACK.names = ["orin-dla", "jetson-agx-orin-64gb"]
    try:
        with pytest.raises(SpecError, match=r"reference cycle; got orin-dla -> jetson-agx-orin-64gb -> orin-dla"):
            loader._catalog_device("orin-dla")
    finally:
        loader._REFERENCE_STACK.names = []


def test_no_reference_where_nothing_can_be_named() -> None:
    # the shared efficiency defaults are read without a spec to name: a reference there is one located problem
    from hwmodels.loader import device_from_dict, load_efficiency_defaults, read_toml

    defaults = load_efficiency_defaults()
    defaults = {**defaults, "ampere": {**defaults["ampere"], "dram_bandwidth_fraction": {
        "value_of": "a100-sxm4-80gb:efficiency.dram_bandwidth_fraction", "source": "x"}}}
    data = read_toml(DEVICES_DIR / "a100-sxm4-40gb.toml")  # a file that takes the Ampere default
    with pytest.raises(SpecError, match=r"\[ampere\]: efficiency\.dram_bandwidth_fraction: value_of not allowed here"):
        device_from_dict(data, where="a100.toml", efficiency_defaults=defaults)
