"""Experiment files: axis forms (hand-computed values), products, zips, filters, and located errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.sweep import ExperimentError, load_experiment, parse_experiment

REPO = Path(__file__).resolve().parents[3]

BASE = """
schema = "nodeperf.experiment/1"
name = "t"
[workload]
model = "gpt2"
phase = "decode"
[hardware]
name = "h100-sxm5-80gb"
"""


def _exp(tmp_path: Path, body: str, base: str = BASE, top: str = "") -> object:
    """An experiment file: top-level keys ``top``, then ``base`` tables, then ``body`` tables."""
    f = tmp_path / "exp.toml"
    f.write_text(top + base + body, encoding="utf-8")
    return load_experiment(f)


def _err(tmp_path: Path, body: str, base: str = BASE, top: str = "") -> str:
    with pytest.raises(ExperimentError) as info:
        _exp(tmp_path, body, base, top)
    return str(info.value)


def test_axis_forms_give_hand_computed_values(tmp_path: Path) -> None:
    exp = _exp(tmp_path, """
[axes.workload]
batch = {pow2 = [3, 40]}
context = {range = [100, 400], step = 150}
seq = {range = [1, 10], n = 4}
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = {log = ["1 TB/s", "8 TB/s"], n = 4}
"compute.tensor_flops_per_s.bf16" = ["500 TFLOP/s", 1e15]
""")
    by = {a.name: a.values for a in exp.axes}
    assert by["workload.batch"] == (4, 8, 16, 32)  # powers of two inside [3, 40]
    assert by["workload.context"] == (100, 250, 400)
    assert by["workload.seq"] == (1, 4, 7, 10)  # 1 + 9 i / 3
    assert by["hardware.memory.hbm.read_bandwidth_bytes_per_s"] == (1e12, 2e12, 4e12, 8e12)  # ratio 2
    assert by["hardware.compute.tensor_flops_per_s.bf16"] == (5e14, 1e15)
    assert exp.size == 4 * 3 * 4 * 4 * 2
    pts = list(exp.points())
    assert len(pts) == exp.size and len({tuple(p.values()) for p in pts}) == exp.size
    # product order: the last axis varies fastest
    assert pts[0]["hardware.compute.tensor_flops_per_s.bf16"] == 5e14
    assert pts[1]["hardware.compute.tensor_flops_per_s.bf16"] == 1e15


def test_zip_and_filters(tmp_path: Path) -> None:
    exp = _exp(tmp_path, """
[axes.workload]
batch = [1, 2, 4]
context = [512, 1024, 2048]
[axes.hardware]
"compute.tensor_flops_per_s.bf16" = ["500 TFLOP/s", "1 PFLOP/s"]
""", top='zip = [["workload.batch", "workload.context"]]\n'
        'filters = ["workload.batch * workload.context <= 2048", "bf16 > 6e14"]\n')
    assert exp.size == 3 * 2
    pts = list(exp.points())
    # zipped pairs (1, 512), (2, 1024), (4, 2048): products 512, 2048, 8192; only 1e15 passes the second filter
    assert [(p["workload.batch"], p["workload.context"]) for p in pts] == [(1, 512), (2, 1024)]
    assert {p["hardware.compute.tensor_flops_per_s.bf16"] for p in pts} == {1e15}


def test_combine_zip_needs_equal_lengths(tmp_path: Path) -> None:
    msg = _err(tmp_path, """
[axes.workload]
batch = [1, 2, 4]
context = [512, 1024]
""", top='combine = "zip"\n')
    assert "zipped axes of different lengths" in msg and "workload.batch: 3" in msg


def test_shipped_experiments_have_the_promised_sizes() -> None:
    llm = load_experiment(REPO / "studies/experiments/llm_decode_what_if.toml")
    assert llm.size >= 10_000 and llm.kind == "model"
    sysa = load_experiment(REPO / "studies/experiments/systolic_resnet50.toml")
    layers = sum(1 for line in (REPO / "studies/topologies/resnet50.csv").read_text().splitlines()[1:] if line.strip())
    assert sysa.kind == "systolic" and sysa.fixed["systolic"]["per_layer"] is True
    assert sysa.size * layers >= 100_000
    assert {a.key for a in sysa.axes} == {"rows", "cols", "dataflow", "sram_bytes", "dram_words_per_cycle"}


def test_unknown_spec_path_is_located_with_a_near_match(tmp_path: Path) -> None:
    msg = _err(tmp_path, """
[axes.hardware]
memory.hbm.read_bandwdth_bytes_per_s = ["1 TB/s"]
""")
    assert "exp.toml:11: axes.hardware.memory.hbm.read_bandwdth_bytes_per_s" in msg
    assert "did you mean" in msg and "memory.hbm.read_bandwidth_bytes_per_s" in msg


def test_unknown_catalog_name_and_axis_key(tmp_path: Path) -> None:
    base = BASE.replace('name = "h100-sxm5-80gb"', 'name = "h100-sxm6"')
    msg = _err(tmp_path, "\n[axes.workload]\nbatchsize = [1, 2]\n", base)
    assert "2 problems" in msg
    assert "hardware.name" in msg and "h100-sxm6" in msg
    assert "axes.workload.batchsize: unknown key" in msg and "did you mean 'batch'" in msg


def test_empty_axis_and_wrong_unit_range(tmp_path: Path) -> None:
    msg = _err(tmp_path, """
[axes.workload]
batch = []
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = {log = ["1 TFLOP/s", "8 TB/s"], n = 4}
""")
    assert "axes.workload.batch: empty axis" in msg
    assert "axes.hardware.memory.hbm.read_bandwidth_bytes_per_s: log[0]" in msg and "TFLOP/s" in msg


def test_bad_values_are_refused_before_anything_runs(tmp_path: Path) -> None:
    msg = _err(tmp_path, """
[axes.workload]
dtype = ["bf16", "bf61"]
context = {range = [10, 5], step = 1}
[axes.hardware]
"efficiency.tensor_peak_fraction" = [0.5, 1.5]
[axes.options]
engine = ["analytical", "dse"]
""", top='metrics = ["latency_s", "cycles", "latncy_s"]\n')
    assert "unknown model metric (a systolic metric); got 'cycles'" in msg
    assert "got 'latncy_s'" in msg and "did you mean 'latency_s'" in msg
    assert "unknown dtype; got 'bf61'" in msg and "did you mean 'bf16'" in msg
    assert "axes.options.engine: value 2: unknown value; got 'dse'" in msg and "did you mean 'des'" in msg
    assert "axes.workload.dtype: value 2" not in msg and "axes.workload.dtype: unknown dtype" in msg
    assert "empty range" in msg
    assert "fraction above 1" in msg


def test_unknown_model_and_filter_name(tmp_path: Path) -> None:
    base = BASE.replace('model = "gpt2"', 'model = "gtp2"')
    msg = _err(tmp_path, "\n[axes.workload]\nbatch = [1, 2]\n", top='filters = ["workload.bach > 1"]\n')
    assert "filters: unknown name" in msg and "did you mean 'workload.batch'" in msg
    msg = _err(tmp_path, "\n[axes.workload]\nbatch = [1, 2]\n", base)
    assert "workload.model" in msg and "gtp2" in msg and "did you mean 'gpt2'" in msg


def test_systolic_experiment_checks(tmp_path: Path) -> None:
    topo = REPO / "tests/hwmodels/data/parity_gemm.csv"
    msg = _err(tmp_path, f"""
[workload]
topology = "{topo}"
[systolic]
rows = 8
ifmap_sram_bytes = "4 KiB"
[axes.systolic]
dataflow = ["os", "xs"]
""", base="")
    assert "systolic.cols: missing" in msg
    assert "got 'xs'" in msg
    assert "scratchpad sizes incomplete" in msg
    exp = parse_experiment({"workload": {"topology": str(topo)}, "systolic": {"rows": 8, "cols": 8},
                            "axes": {"systolic": {"sram_bytes": {"pow2": ["1 KiB", "4 KiB"]}, "dataflow": ["os"]}}})
    assert exp.kind == "systolic"
    assert next(a for a in exp.axes if a.key == "sram_bytes").values == (1024.0, 2048.0, 4096.0)
    assert "latency_s" not in exp.metrics  # no clock given


def test_unknown_top_level_and_schema(tmp_path: Path) -> None:
    msg = _err(tmp_path, 'schema = "nodeperf.experiment/9"\nmetric = ["latency_s"]\n', base="")
    assert "unknown experiment schema" in msg
    assert "metric: unknown key" in msg and "did you mean 'metrics'" in msg


def test_missing_file_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        load_experiment(tmp_path / "nope.toml")
    f = tmp_path / "bad.toml"
    f.write_text("[workload\nmodel=1", encoding="utf-8")
    with pytest.raises(ExperimentError, match="invalid TOML"):
        load_experiment(f)


def test_a_filter_that_cannot_be_evaluated_is_a_located_error(tmp_path: Path) -> None:
    exp = _exp(tmp_path, "\n[axes.workload]\nbatch = [1, 2]\n",
               top='filters = ["workload.batch / (workload.batch - 2) > 0"]\n')
    with pytest.raises(ExperimentError, match=r"filters: cannot evaluate .* at workload.batch = 2 \(/: division by zero in .* at column 1"):
        list(exp.points())
