"""The public API (``import nodeperf``), DataFrame writers, ``nodeperf --version`` and saved graphs as MODEL."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import fields
from importlib import metadata

import pytest

import nodeperf as npf
from simulator.cli import main

LAYERS = ("simulator", "workloads", "hwmodels")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


# --- nodeperf: the public API ------------------------------------------------------------------------

def test_every_public_name_resolves_to_its_layer_object():
    from nodeperf import _EXPORTS

    assert len(set(npf.__all__)) == len(npf.__all__)
    for name in npf.__all__:
        value = getattr(npf, name)
        assert value is not None, name
        if name != "__version__":
            module, attr = _EXPORTS[name]
            assert value is getattr(sys.modules[module], attr)
            assert module.split(".")[0] in LAYERS or module == "nodeperf.errors"
    assert set(npf.__all__) <= set(dir(npf))
    for required in ("load_workload", "build_model", "list_models", "OpGraph", "GraphBuilder", "load_graph",
                     "save_graph", "load_device", "load_system", "list_devices", "list_systems", "DeviceSpec",
                     "SystemSpec", "SpecError", "load_hardware", "known_devices", "evaluate", "simulate",
                     "EvalOptions", "CostReport", "OpCost", "Measurement", "MeasurementSet", "Calibrator",
                     "ErrorSummary", "validate_published", "GraphError", "UnsupportedOpError", "__version__"):
        assert required in npf.__all__, required


def test_unknown_name_is_an_attribute_error_with_a_near_match():
    with pytest.raises(AttributeError, match=r"nodeperf: evalute: no such name; .*did you mean 'evaluate'\?"):
        npf.evalute  # noqa: B018
    assert not hasattr(npf, "no_such_thing")


def test_version_is_the_installed_distributions():
    assert npf.__version__ == metadata.version("nodeperf")


@pytest.mark.parametrize("module", ["nodeperf.suggest", "nodeperf", "nodeperf.errors"])
def test_importing_the_api_package_loads_no_layer(module):
    code = (f"import sys, {module}\n"
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & {set(LAYERS)!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_the_parallel_plan_and_tune_apis_are_exported():
    from simulator.parallel.compose import evaluate_plan, generate_request
    from simulator.sweep.tune_model import ModelProblem
    from workloads.parallel import ParallelPlan

    assert (npf.ParallelPlan, npf.evaluate_plan, npf.generate_request) == (ParallelPlan, evaluate_plan,
                                                                           generate_request)
    assert npf.ModelProblem is ModelProblem
    # docs/parallel.md's entry point through the public names only: a plan in the options of evaluate
    # is the same step as evaluate_plan's
    g = npf.load_workload("llama-2-7b", phase="decode", batch=8, context=2048)
    dgx, plan = npf.load_hardware("dgx-h100"), npf.ParallelPlan(tp=2)
    via_options = npf.evaluate(g, dgx, npf.EvalOptions(plan=plan))
    direct = npf.evaluate_plan("llama-2-7b", dgx, plan, npf.EvalOptions(plan=plan), phase="decode", batch=8,
                               seq=1, context=2048)
    assert via_options.latency_s == direct.to_cost_report().latency_s > 0


# --- errors: one root exception, one root warning ------------------------------------------------------

#: Every located error class of the layers, by module (they subclass NodeperfError and their built-in).
ERROR_CLASSES = {
    "hwmodels.spec": ["SpecError"], "hwmodels.units": ["UnitError"], "hwmodels.topology": ["TopologyError"],
    "hwmodels.systolic": ["SystolicError", "SystolicEnergyError"],
    "workloads.ir": ["GraphError", "UnsupportedOpError"], "workloads.parallel": ["PlanError"],
    "workloads.frameworks": ["FrameworkError"], "workloads.hf": ["HFConfigError"],
    "simulator.hardware": ["CalibrationError"], "simulator.calibration.measurements": ["MeasurementError"],
    "simulator.sweep.experiment": ["ExperimentError"], "simulator.sweep.execute": ["SweepError"],
    "simulator.sweep.store": ["StoreError"], "simulator.sweep.tune": ["TuneError"], "simulator.sweep.filters": ["FilterError"],
    "simulator.sweep.systolic": ["SystolicSweepError"], "simulator.engines.vectorized": ["VariantError"],
    "hwmodels.paths": ["SweepPathError"], "simulator.realtime.scenario": ["ScenarioError"],
    "simulator.realtime.partition": ["PartitionError"], "simulator.report.figures": ["FigureError"],
    "simulator.cli.output": ["OutputError"], "simulator.cli.plot": ["PlotArgError"],
    "simulator.cli.systolic": ["SystolicArgError"], "simulator.serving.config": ["ServingError"],
}


def test_every_located_error_is_a_nodeperf_error_and_keeps_its_builtin_base():
    import importlib

    builtin = {"UnsupportedOpError": NotImplementedError}
    for module, names in ERROR_CLASSES.items():
        for name in names:
            cls = getattr(importlib.import_module(module), name)
            assert issubclass(cls, npf.NodeperfError), f"{module}.{name}"
            assert issubclass(cls, builtin.get(name, ValueError)), f"{module}.{name}"
    assert npf.NodeperfError.__module__ == "nodeperf.errors" and issubclass(npf.NodeperfWarning, UserWarning)


def test_the_error_list_names_every_error_class_of_the_layers():
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    found = set()
    for layer in LAYERS:
        for path in (root / layer).rglob("*.py"):
            for node in ast.parse(path.read_text(encoding="utf-8")).body:
                if isinstance(node, ast.ClassDef) and node.name.endswith("Error"):
                    module = ".".join(path.relative_to(root).with_suffix("").parts)
                    found.add(f"{module}.{node.name}")
    assert found == {f"{m}.{n}" for m, ns in ERROR_CLASSES.items() for n in ns}


def test_the_cli_reports_any_nodeperf_error_as_one_line(monkeypatch, capsys):
    import simulator.cli.models as models

    class Odd(npf.NodeperfError):  # neither a ValueError nor any other built-in the CLI names
        pass

    def boom(args):
        raise Odd("somewhere.toml: field: bad; got 1; expected 2")

    monkeypatch.setattr(models, "run", boom)
    rc, out, err = run(capsys, "models")
    assert (rc, out, err) == (2, "", "nodeperf: error: somewhere.toml: field: bad; got 1; expected 2\n")


def test_every_package_is_typed():
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    for pkg in ("nodeperf", *LAYERS):
        assert (root / pkg / "py.typed").is_file(), pkg


# --- start-up: a command imports what it uses -----------------------------------------------------------

def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_version_and_help_import_no_engine_and_no_command_module():
    for argv in (["--version"], ["--help"]):
        mods = _modules_after(f"import contextlib, io\nfrom simulator.cli import main\n"
                              f"with contextlib.redirect_stdout(io.StringIO()):\n"
                              f"    try:\n        main({argv!r})\n    except SystemExit:\n        pass")
        assert not {m for m in mods if m.split(".")[0] in ("workloads", "hwmodels", "numpy", "networkx", "simpy")}
        assert not {m for m in mods if m.startswith("simulator.") and m not in (
            "simulator.cli", "simulator.cli.main", "simulator.version", "simulator.lazy")}, argv
        assert "importlib.metadata" not in mods


def test_import_simulator_loads_no_engine_until_a_name_is_used():
    mods = _modules_after("import simulator")
    assert {m for m in mods if m.split(".")[0] in ("simulator", "workloads", "hwmodels")} == {"simulator",
                                                                                        "simulator.lazy"}
    mods = _modules_after("import simulator\nsimulator.evaluate")
    assert "simulator.engines.analytical" in mods and "simulator.engines.discrete_event" not in mods
    assert "networkx" not in mods and "simpy" not in mods


def test_the_cli_lists_each_command_with_its_modules_help():
    from simulator.cli.main import COMMAND_HELP, COMMAND_MODULES, build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert {c.dest: c.help for c in sub._choices_actions} == COMMAND_HELP
    assert list(COMMAND_HELP) == list(COMMAND_MODULES)
    lazy = next(a for a in build_parser(commands=["predict"])._actions if a.dest == "command")
    assert {c.dest: c.help for c in lazy._choices_actions} == COMMAND_HELP


@pytest.mark.parametrize("argv, command", [(["predict", "x"], "predict"), (["-v", "graph", "--json"], "graph"),
                                           (["--version"], None), ([], None), (["--", "models"], "models"),
                                           (["-v", "--help"], None)])
def test_the_chosen_command_is_the_first_argument_that_is_not_an_option(argv, command):
    from simulator.cli.main import chosen_command

    assert chosen_command(argv) == command


def test_documented_example_runs():
    g = npf.load_workload("llama-2-7b", phase="decode", batch=8, context=2048)
    r = npf.evaluate(g, npf.load_hardware("h100-sxm5-80gb"))
    assert isinstance(g, npf.OpGraph) and isinstance(r, npf.CostReport)
    assert r.latency_s > 0 and r.fits_in_memory


# --- DataFrames --------------------------------------------------------------------------------------

def test_cost_report_dataframe_has_one_row_per_record():
    pytest.importorskip("pandas")
    r = npf.evaluate(npf.load_workload("bert-base", batch=2, seq=128), npf.load_hardware("a100-sxm4-80gb"))
    df = r.to_dataframe()
    names = [f.name for f in fields(npf.OpCost)]
    assert list(df.columns) == names and len(df) == len(r.records)
    for i in (0, len(r.records) // 2, len(r.records) - 1):
        assert df.iloc[i].to_dict() == r.records[i].to_json()
    assert df["time_s"].sum() == pytest.approx(r.latency_s, rel=1e-12)
    assert df["energy_j"].sum() == pytest.approx(r.energy_j, rel=1e-12)
    assert (df.attrs["model"], df.attrs["hardware"]) == (r.model, r.hardware)
    assert df.attrs["totals"] == r.totals.to_json() and df.attrs["memory"] == r.memory.to_json()
    assert df.attrs["warnings"] == list(r.warnings) and df.attrs["provenance"]["engine"] == r.provenance["engine"]


def test_measurement_set_dataframe_has_the_csv_columns_and_values():
    pd = pytest.importorskip("pandas")
    from simulator.calibration.measurements import COLUMNS
    from simulator.calibration.validation import DEFAULT_DATASET

    ms = npf.MeasurementSet.load(DEFAULT_DATASET, check_workloads=False)
    df = ms.to_dataframe()
    assert list(df.columns) == list(COLUMNS) and len(df) == len(ms)
    assert df.attrs["source"] == ms.source
    for i, m in enumerate(ms):
        row = df.iloc[i]
        for c in COLUMNS:
            want, got = getattr(m, c), row[c]
            if want is None:
                assert pd.isna(got), (m.id, c)
            else:
                assert got == want, (m.id, c)
    assert df["median_s"].tolist() == ms.median_s.tolist()


def test_dataframes_without_pandas_say_how_to_install_it(monkeypatch):
    r = npf.evaluate(npf.load_workload("gemm:m=64,n=64,k=64"), npf.load_hardware("h100-sxm5-80gb"))
    ms = npf.MeasurementSet((npf.Measurement("a", "gemm:m=64,n=64,k=64", "h100-sxm5-80gb", "bf16", 1e-5),))
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` now fails
    for obj in (r, ms):
        with pytest.raises(ImportError, match=r"to_dataframe needs pandas; install it with: "
                                              r"pip install 'nodeperf\[pandas\]'"):
            obj.to_dataframe()


# --- nodeperf --version ------------------------------------------------------------------------------

def test_cli_version(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    out, err = capsys.readouterr()
    assert out == f"nodeperf {metadata.version('nodeperf')}\n" and err == ""


# --- saved graphs as MODEL ---------------------------------------------------------------------------

DECODE = ("--phase", "decode", "--batch", "2", "--context", "512")


@pytest.fixture(scope="module")
def saved_decode(tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "g.json"
    assert main(["graph", "llama-2-7b", *DECODE, "--save", str(path), "--json"]) == 0
    return path


def test_predict_on_a_saved_graph_equals_the_zoo_model(saved_decode, capsys):
    run(capsys)  # drop the fixture's output
    rc, direct, _ = run(capsys, "predict", "llama-2-7b", *DECODE, "--hardware", "h100-sxm5-80gb", "--json")
    assert rc == 0
    rc, saved, _ = run(capsys, "predict", str(saved_decode), "--hardware", "h100-sxm5-80gb", "--json")
    assert rc == 0
    a, b = json.loads(direct), json.loads(saved)
    assert b["totals"] == a["totals"] and b["memory"] == a["memory"] and b["ops"] == a["ops"]
    assert b["provenance"]["graph_sha256"] == a["provenance"]["graph_sha256"]
    # the table and the graph summary read it too
    rc, table, _ = run(capsys, "predict", str(saved_decode), "--hardware", "h100-sxm5-80gb", "--top", "3")
    assert rc == 0 and table.startswith("llama-2-7b (phase decode, batch 2, seq 1, context 512, dtype bf16)")
    rc, g_direct, _ = run(capsys, "graph", "llama-2-7b", *DECODE, "--json")
    rc2, g_saved, _ = run(capsys, "graph", str(saved_decode), "--json")
    assert rc == rc2 == 0 and json.loads(g_saved) == json.loads(g_direct)


@pytest.mark.parametrize("option, value", [("--batch", "8"), ("--seq", "16"), ("--phase", "prefill"),
                                           ("--context", "1024"), ("--dtype", "fp16")])
def test_options_a_saved_graph_cannot_honour_are_located_errors(saved_decode, capsys, option, value):
    run(capsys)
    rc, out, err = run(capsys, "predict", str(saved_decode), "--hardware", "h100-sxm5-80gb", option, value)
    assert rc == 2 and out == ""
    name = option[2:]
    assert err == (f"nodeperf: error: {saved_decode}: {option}: a saved graph has fixed shapes; got {value}; "
                   f"expected no {option} (re-save with the {name} you want)\n")


def test_bad_saved_graphs_are_located_errors(saved_decode, tmp_path, capsys):
    run(capsys)
    truncated = tmp_path / "truncated.json"
    truncated.write_text(saved_decode.read_text()[:5000])
    rc, _, err = run(capsys, "predict", str(truncated), "--hardware", "h100-sxm5-80gb")
    assert rc == 2 and err.startswith(f"nodeperf: error: {truncated}:1:") and "invalid JSON" in err
    data = json.loads(saved_decode.read_text())
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**data, "version": 2}))
    rc, _, err = run(capsys, "graph", str(newer))
    assert rc == 2 and err == (f"nodeperf: error: {newer}: version: unsupported graph version; got 2; expected 1 "
                               "(save it again with this version of nodeperf)\n")
    dangling = tmp_path / "dangling.json"
    ops = [dict(data["ops"][0], inputs=["no-such-tensor"]), *data["ops"][1:]]
    dangling.write_text(json.dumps({**data, "ops": ops}))
    rc, _, err = run(capsys, "graph", str(dangling))
    assert rc == 2 and err.startswith(f"nodeperf: error: {dangling}: ops[0] ({data['ops'][0]['name']}): "
                                      "unknown tensor or field 'no-such-tensor'")
    reshaped = tmp_path / "reshaped.json"  # an output shape the op's semantics do not infer
    out = data["ops"][0]["outputs"][0]
    tensors = [dict(t, shape=[*t["shape"], 3]) if t["name"] == out else t for t in data["tensors"]]
    reshaped.write_text(json.dumps({**data, "tensors": tensors}))
    rc, _, err = run(capsys, "predict", str(reshaped), "--hardware", "h100-sxm5-80gb")
    assert rc == 2 and err.startswith(f"nodeperf: error: {reshaped}: ") and err.count("\n") == 1
    # a training step cannot be derived from a graph without a loss, nor from a training step
    rc, _, err = run(capsys, "graph", str(saved_decode), "--train")
    assert rc == 2 and f"{saved_decode}: --train: " in err and "no loss op" in err


def test_train_applies_to_a_saved_forward_graph(tmp_path, capsys):
    fwd = tmp_path / "fwd.json"
    assert main(["graph", "resnet18", "--phase", "train", "--seq", "64", "--save", str(fwd)]) == 0
    run(capsys)
    rc, direct, _ = run(capsys, "graph", "resnet18", "--train", "--seq", "64", "--optimizer", "sgd", "--json")
    rc2, saved, _ = run(capsys, "graph", str(fwd), "--train", "--optimizer", "sgd", "--json")
    assert rc == rc2 == 0 and json.loads(saved) == json.loads(direct)
    step = tmp_path / "step.json"
    assert main(["graph", str(fwd), "--train", "--save", str(step)]) == 0
    run(capsys)
    rc, _, err = run(capsys, "graph", str(step), "--train")
    assert rc == 2 and "already a training step" in err
    assert npf.load_graph(step).meta["phase"] == "train_step"
