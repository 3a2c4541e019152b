"""`nodeperf predict`: table, exactly-one-JSON-object output, CSV, infeasible memory and user errors."""

from __future__ import annotations

import csv
import json

import pytest

from simulator.cli import main

REQUIRED = ("model", "hardware", "latency_s", "energy_j", "avg_power_w", "flops", "memory_required_bytes",
            "fits_in_memory", "bound_breakdown", "ops")


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_llama_decode_table(capsys):
    rc, out, _ = run(capsys, "predict", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--phase", "decode",
                     "--batch", "1", "--context", "2048", "--top", "5")
    assert rc == 0
    assert "llama-2-7b" in out and "h100-sxm5-80gb" in out
    assert "layers.*.mlp" in out and "TB/s" in out
    assert "Totals: latency" in out and "Memory: fits on h100-sxm5-80gb" in out
    # decode of a 7B model streams ~13 GB of bf16 weights: a few milliseconds, memory-bound
    line = next(ln for ln in out.splitlines() if ln.startswith("Bound:"))
    assert float(line.split("memory ")[1].split("%")[0]) > 50


def test_json_is_exactly_one_object(capsys):
    rc, out, _ = run(capsys, "predict", "gemm:m=4096,n=4096,k=4096", "--hardware", "h100-sxm5-80gb", "--json")
    assert rc == 0
    d = json.loads(out)  # the whole stdout is one JSON document
    for key in REQUIRED:
        assert key in d
    assert d["flops"] == 2 * 4096**3 and d["fits_in_memory"] is True
    op = d["ops"][0]
    assert op["rule"] == "gemm" and op["bound"] == "compute" and op["tile"]
    # the same command twice gives the same bytes
    _, out2, _ = run(capsys, "predict", "gemm:m=4096,n=4096,k=4096", "--hardware", "h100-sxm5-80gb", "--json")
    assert out2 == out


def test_csv_file(capsys, tmp_path):
    path = tmp_path / "ops.csv"
    rc, out, _ = run(capsys, "predict", "softmax:rows=4096,cols=4096", "--hardware", "a100-sxm4-80gb",
                     "--csv", str(path))
    assert rc == 0 and "wrote 1 rows" in out
    rows = list(csv.DictReader(path.open()))
    assert len(rows) == 1 and rows[0]["kind"] == "softmax" and rows[0]["bound"] == "memory"


def test_infeasible_memory_is_reported(capsys):
    rc, out, _ = run(capsys, "predict", "llama-2-70b", "--hardware", "h100-sxm5-80gb", "--phase", "decode",
                     "--context", "1024", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["fits_in_memory"] is False and d["latency_s"] > 0
    assert d["memory"]["message"].startswith("does not fit on h100-sxm5-80gb: needs 1")
    assert d["memory_required_bytes"] > 128 * 2**30


def test_unknown_hardware_is_one_line_exit_2(capsys):
    rc, out, err = run(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", "h100-sxm")
    assert rc == 2 and out == ""
    assert err.startswith("nodeperf: error: hardware 'h100-sxm': unknown name") and "did you mean" in err
    assert len(err.strip().splitlines()) == 1


def test_bad_model_is_one_line_exit_2(capsys):
    rc, _, err = run(capsys, "predict", "gemm:m=64,n=64", "--hardware", "h100-sxm5-80gb")
    assert rc == 2 and "missing k" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("flag", ["--fusion", "--cuda-graphs", "--no-power-cap"])
def test_options_are_recorded(capsys, flag):
    rc, out, _ = run(capsys, "predict", "layernorm:rows=64,cols=4096", "--hardware", "l4", "--json", flag)
    assert rc == 0
    opts = json.loads(out)["provenance"]["options"]
    key = {"--fusion": "fusion", "--cuda-graphs": "cuda_graphs", "--no-power-cap": "power_cap"}[flag]
    assert opts[key] is (flag != "--no-power-cap")


def test_predict_applies_a_calibration_overlay(tmp_path, capsys):
    """--calibration changes the fitted field, and the report records which overlay was applied."""
    import json

    from simulator.cli import main

    overlay = tmp_path / "cal.toml"
    overlay.write_text('schema = "nodeperf.calibration/1"\nsource = "test overlay"\n[values]\n"memory.hbm.read_bandwidth_bytes_per_s" = "1.675 TB/s"\n')
    args = ["predict", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--phase", "decode", "--context", "2048", "--json"]
    assert main(args) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(args + ["--calibration", str(overlay)]) == 0
    half = json.loads(capsys.readouterr().out)
    assert half["provenance"]["calibration_id"].startswith("cal.toml:sha256:")
    assert base["provenance"]["calibration_id"] == ""
    # decode is weight-streaming: half the HBM bandwidth makes it much slower (but launches do not scale)
    assert 1.5 * base["latency_s"] < half["latency_s"] < 2.0 * base["latency_s"]


def test_phase_train_says_it_is_the_forward_pass_alone(capsys):
    """``--phase train`` is the forward pass in training mode, not the step: a note says so, and the whole step
    (``--train``) is the larger figure (a backward of about twice the forward's GEMM work plus the update)."""
    rc, fwd, err = run(capsys, "predict", "bert-base", "--hardware", "a100-sxm4-80gb", "--phase", "train", "--json")
    assert rc == 0 and "--phase train prices the forward pass of a training step alone" in err
    rc, step, err = run(capsys, "predict", "bert-base", "--hardware", "a100-sxm4-80gb", "--train", "--json")
    assert rc == 0 and "--phase train" not in err
    assert json.loads(step)["latency_s"] > 2.5 * json.loads(fwd)["latency_s"]
    assert json.loads(step)["flops"] > 2.9 * json.loads(fwd)["flops"]
