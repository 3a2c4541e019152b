"""The parallelism study runs on its reduced configuration and its rows obey the theory of pipeline,
data- and tensor-parallel training and of tensor-parallel decoding."""

from __future__ import annotations

import csv
import math
from collections import defaultdict

import pytest

from hwmodels.catalog import load_device
from simulator.hardware import load_hardware
from simulator.parallel.compose import _nccl_bytes
from studies._cli import load_config
from studies.parallelism import plot, run
from workloads.parallel import ParallelPlan

# GPT-3 175B (Brown et al. 2020, Table 2.1) and Megatron-LM's training setting of the study
LAYERS, HIDDEN, VOCAB = 96, 12288, 50257
# Llama-2-70B (HF config.json): parameters of the 80 decoder layers, which every decode step streams
# (q and o: h x h; k and v: h x 8 KV heads x 128; SwiGLU MLP: 3 x h x 28672)
LLAMA2_70B_LAYER_PARAMS = 80 * (2 * 8192**2 + 2 * 8192 * 1024 + 3 * 8192 * 28672)


@pytest.fixture(scope="module")
def reduced():
    cfg = load_config(run.HERE / "config.toml", reduced=True)
    return cfg, run.run(cfg)


def _by(rows, *keys):
    out = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


def test_reduced_study_writes_csvs_and_figures(reduced, tmp_path):
    cfg, res = reduced
    tr, inf = cfg["training"], cfg["inference"]
    # every cell of the grids is one row, evaluated or not
    assert len(res["training"]) == len(tr["systems"]) * len(tr["gpus"]) * len(tr["tp"]) * len(tr["pp"])
    assert len(res["inference"]) == len(inf["systems"]) * len(inf["tp"]) * len(inf["batches"])
    train_csv, infer_csv = run.write_all(res, tmp_path)
    for path, columns, rows in ((train_csv, run.TRAINING_COLUMNS, res["training"]),
                                (infer_csv, run.INFERENCE_COLUMNS, res["inference"])):
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            back = list(reader)
        assert tuple(reader.fieldnames) == columns
        assert len(back) == len(rows)
        assert [r["device"] for r in back] == [r["device"] for r in rows]
    pngs = plot.plot(tmp_path, tmp_path / "figs")
    assert [p.name for p in pngs] == [plot.TRAINING_PNG, plot.INFERENCE_PNG]
    assert all(p.stat().st_size > 10_000 for p in pngs)


def test_training_rows_obey_the_theory(reduced):
    cfg, res = reduced
    tr = cfg["training"]
    rows = res["training"]
    done = [r for r in rows if r["note"] == ""]
    # a cell whose tp x pp does not divide the GPUs is kept, with a reason and no numbers
    skipped = [r for r in rows if r["note"]]
    assert skipped and all(r["n_gpus"] % (r["tp"] * r["pp"]) for r in skipped)
    assert all(r["iteration_time_s"] is None and r["mfu"] is None for r in skipped)
    assert all(r["dp"] * r["tp"] * r["pp"] == r["n_gpus"] for r in done)
    # the reduced grid has plans on both sides of the memory limit
    assert {r["fits_in_memory"] for r in done} == {True, False}
    model_flops = []
    for r in done:
        assert 0 < r["mfu"] < 1
        shares = [r[k] for k in ("compute_share", "communication_share", "bubble_share", "optimizer_share")]
        assert all(s >= 0 for s in shares) and math.isclose(sum(shares), 1.0, rel_tol=1e-9)
        assert r["microbatches"] == tr["global_batch"] // (r["dp"] * tr["microbatch"])
        # 1F1B: no bubble without a pipeline; otherwise at most (p - 1) of m + p - 1 slots idle
        p, m = r["pp"], r["microbatches"]
        if p == 1:
            assert r["bubble_share"] == 0
        else:
            assert 0 < r["bubble_share"] <= (p - 1) / (m + p - 1)
        # a plan reported as not fitting needs more than the device holds, and one that fits does not
        cap = load_device(r["device"]).main_memory.capacity_bytes
        assert r["fits_in_memory"] == (r["memory_per_device_bytes"] <= cap)
        peak = load_device(r["device"]).compute.tensor_flops_per_s[tr["dtype"]]
        model_flops.append(r["mfu"] * r["iteration_time_s"] * r["n_gpus"] * peak)
    # the model FLOPs of an iteration do not depend on the plan or the GPU, and they are Korthikanti et
    # al. 2022's 72 B s l h^2 (1 + s / 6h + V / 12lh) up to how causal attention is counted
    assert max(model_flops) / min(model_flops) - 1 < 1e-4
    b, s = tr["global_batch"], tr["seq"]
    closed = 72 * b * s * LAYERS * HIDDEN**2 * (1 + s / (6 * HIDDEN) + VOCAB / (12 * LAYERS * HIDDEN))
    assert model_flops[0] == pytest.approx(closed, rel=0.03)
    for (_dev, _tp, _pp), same in _by(done, "device", "tp", "pp").items():
        same.sort(key=lambda r: r["n_gpus"])
        for a, b2 in zip(same, same[1:], strict=False):
            # more GPUs of the same kind (dp doubling, global batch fixed): never slower, never superlinear
            assert b2["n_gpus"] == 2 * a["n_gpus"]
            assert a["iteration_time_s"] / 2 <= b2["iteration_time_s"] <= a["iteration_time_s"]
            # without ZeRO every data-parallel replica holds the same bytes, but for NCCL's buffers, whose
            # communicators depend on the group's size and how it spans nodes (simulator/report/memory.py)
            extra = sum(sum(_nccl_bytes(ParallelPlan(tp=r["tp"], pp=r["pp"], dp=r["dp"]),
                                        load_hardware(r["system"])).values()) * sign for r, sign in ((b2, 1), (a, -1)))
            assert math.isclose(a["memory_per_device_bytes"] + extra, b2["memory_per_device_bytes"], rel_tol=1e-9)
    # the same plan on the same number of H100s is faster than on A100s
    cells = _by(done, "n_gpus", "tp", "pp")
    for same in cells.values():
        t = {r["device"]: r["iteration_time_s"] for r in same}
        if {"a100-sxm4-80gb", "h100-sxm5-80gb"} <= set(t):
            assert t["h100-sxm5-80gb"] < t["a100-sxm4-80gb"]


def test_inference_rows_obey_the_theory(reduced):
    cfg, res = reduced
    inf = cfg["inference"]
    rows = res["inference"]
    assert all(r["note"] == "" for r in rows)
    for r in rows:
        # a request is its prefill then output_len - 1 decode steps (vLLM's TPOT)
        assert math.isclose(r["e2e_latency_s"], r["ttft_s"] + (r["output_len"] - 1) * r["tpot_s"], rel_tol=1e-9)
        assert math.isclose(r["output_tokens_per_s"], r["batch"] * r["output_len"] / r["e2e_latency_s"], rel_tol=1e-9)
        dev = load_device(r["device"])
        # a decode step streams each GPU's share of the decoder weights at least once
        assert r["tpot_s"] >= 2 * LLAMA2_70B_LAYER_PARAMS / r["tp"] / dev.main_memory.read_bandwidth_bytes_per_s
        assert r["fits_in_memory"] == (r["memory_per_device_bytes"] <= dev.main_memory.capacity_bytes)
    for (_dev, _batch), same in _by(rows, "device", "batch").items():
        t = {r["tp"]: r for r in same}
        if {4, 8} <= set(t):  # TP 8 beats TP 4 on the node: half the weights per GPU, on NVLink
            assert t[8]["tpot_s"] < t[4]["tpot_s"]
            assert t[8]["ttft_s"] < t[4]["ttft_s"]
            assert t[8]["memory_per_device_bytes"] < t[4]["memory_per_device_bytes"]
    assert {r["tp"] for r in rows} == set(inf["tp"])


def test_one_command_writes_under_out_not_over_the_committed_results(reduced, tmp_path, monkeypatch, capsys):
    cfg, res = reduced
    # the default lives in the git-ignored out/ folder, never the committed files
    assert run.OUT_DIR == run.HERE.parents[1] / "out" / "parallelism"
    committed = {p: p.read_bytes() for p in run.HERE.iterdir() if p.suffix in (".csv", ".png")}

    def reuse(given):  # main's plumbing, without predicting the reduced grids a second time
        assert given == cfg
        return res

    monkeypatch.setattr(run, "run", reuse)
    out_dir = tmp_path / "out"
    assert run.main(["--reduced", "--out", str(out_dir)]) == 0  # run, then plot
    for name in (run.TRAINING_CSV, run.INFERENCE_CSV):
        assert (out_dir / name).is_file()
    assert all((out_dir / name).stat().st_size > 10_000 for name in (plot.TRAINING_PNG, plot.INFERENCE_PNG))
    assert all(p.read_bytes() == data for p, data in committed.items())
    # a file for --out is a clear error
    f = tmp_path / "results.csv"
    f.write_text("x\n")
    assert run.main(["--reduced", "--out", str(f)]) == 2
    assert "is a file; expected the folder" in capsys.readouterr().err
    # plotting before running is a clear error, not a traceback
    assert run.main(["--plot-only", "--out", str(tmp_path / "missing")]) == 2
    assert "training.csv: no such results file" in capsys.readouterr().err


def test_committed_results_are_current(reduced, committed_csv):
    """The committed training.csv and inference.csv (and the figures drawn from them) are today's model, in
    every column, on every row the reduced configuration computes."""
    _, res = reduced
    refresh = "python -m studies.parallelism --out studies/parallelism"
    n = committed_csv(res["training"], run.HERE / run.TRAINING_CSV,
                      lambda rows, path: run.write_csv(rows, path, run.TRAINING_COLUMNS),
                      ["device", "n_gpus", "tp", "pp"], refresh=refresh)
    m = committed_csv(res["inference"], run.HERE / run.INFERENCE_CSV,
                      lambda rows, path: run.write_csv(rows, path, run.INFERENCE_COLUMNS),
                      ["device", "tp", "batch"], refresh=refresh)
    assert (n, m) == (len(res["training"]), len(res["inference"])) and m > 0
