"""The training-at-scale study runs on its reduced configuration, and every row's days, device-hours, cost
and model FLOPs follow from its plan by hand."""

from __future__ import annotations

import csv
import math

import pytest

from hwmodels.catalog import load_device
from hwmodels.cost import load_prices
from studies._cli import load_config
from studies.training_at_scale import plot, run

# Llama 3 70B (Hugging Face config.json of meta-llama/Meta-Llama-3-70B): 80 layers, hidden 8192
LAYERS_70B = 80


@pytest.fixture(scope="module")
def reduced():
    cfg = load_config(run.HERE / "config.toml", reduced=True)
    return cfg, run.run(cfg)


def test_reduced_study_writes_csv_and_figure(reduced, tmp_path):
    cfg, rows = reduced
    assert len(rows) == len(cfg["models"]) * len(cfg["systems"]) * len(cfg["devices"]) == 1
    path = tmp_path / run.RESULTS_CSV
    run.write_csv(rows, path)
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        back = list(reader)
    assert tuple(reader.fieldnames) == run.COLUMNS and len(back) == len(rows)
    png = plot.plot(path, tmp_path / "figs" / "training_at_scale.png")
    assert png.stat().st_size > 10_000


def test_rows_follow_from_their_plan(reduced):
    cfg, rows = reduced
    prices = load_prices()
    model_tokens = {m["name"]: m["tokens"] for m in cfg["models"]}
    for r in rows:
        assert r["note"] == "" and r["feasible"] >= 1 and r["evaluated"] <= r["configurations"]
        used = r["tp"] * r["pp"] * r["dp"]
        assert r["devices_used"] == used and cfg["fill"] * r["devices"] <= used <= r["devices"]
        assert LAYERS_70B % (r["pp"] * r["interleave"]) == 0
        assert r["global_batch"] * cfg["seq"] == r["tokens_per_step"] == cfg["global_batch_tokens"]
        assert r["global_batch"] % (r["dp"] * r["microbatch"]) == 0
        assert math.isclose(r["tokens_per_s"], r["tokens_per_step"] / r["step_time_s"], rel_tol=1e-9)
        days = model_tokens[r["model"]] / r["tokens_per_s"] / 86400
        assert math.isclose(r["days"], days, rel_tol=1e-12)
        assert math.isclose(r["device_hours"], days * 24 * used, rel_tol=1e-12)
        dev = load_device("h100-sxm5-80gb")
        price = prices["h100-sxm5-80gb"].usd_per_hour
        assert r["usd_per_device_hour"] == price and math.isclose(r["cost_usd"], r["device_hours"] * price)
        assert r["memory_per_device_gib"] <= r["memory_capacity_gib"] == dev.main_memory.usable / 2**30  # 79.18
        # the model FLOPs of a step are 6 N per token (N = 70.55B parameters) plus attention's
        # 12 l h s per token (causal: half of it), so 6 N T <= MFU x peak x devices x step <= 6 N T (1 + 12 l h s / 6 N)
        flops = r["mfu"] * dev.compute.tensor_flops_per_s["bf16"] * used * r["step_time_s"]
        six_nt = 6 * 70.55e9 * r["tokens_per_step"]
        assert six_nt <= flops <= six_nt * (1 + 12 * LAYERS_70B * 8192 * cfg["seq"] / (6 * 70.55e9))
        assert r["energy_mwh"] > 0


def test_one_command_writes_under_out_not_over_the_committed_results(reduced, tmp_path, monkeypatch, capsys):
    cfg, rows = reduced
    assert run.OUT_DIR == run.HERE.parents[1] / "out" / "training_at_scale"
    committed = {p: p.read_bytes() for p in run.HERE.iterdir() if p.suffix in (".csv", ".png")}

    def reuse(given):  # main's plumbing, without searching the reduced configuration a second time
        assert given == cfg
        return rows

    monkeypatch.setattr(run, "run", reuse)
    out = tmp_path / "out"
    assert run.main(["--reduced", "--out", str(out)]) == 0
    assert (out / run.RESULTS_CSV).is_file() and (out / "training_at_scale.png").stat().st_size > 10_000
    assert all(p.read_bytes() == data for p, data in committed.items())
    assert run.main(["--plot-only", "--out", str(tmp_path / "missing")]) == 2
    assert "results.csv: no such results file" in capsys.readouterr().err


def test_a_recipe_the_tuner_refuses_is_located(tmp_path, capsys):
    text = (run.HERE / "config.toml").read_text().replace('framework = "fsdp2"', 'framework = "fsdp3"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    assert run.main(["--config", str(bad), "--reduced", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "recipes[] 'fsdp2-2d': --framework: unknown profile 'fsdp3'" in err


def test_committed_results_are_current(reduced, committed_csv):
    """The committed results.csv (and the figure drawn from it) is today's model on every row the reduced
    configuration computes."""
    _, rows = reduced
    n = committed_csv(rows, run.HERE / run.RESULTS_CSV, run.write_csv, ["model", "system", "devices"],
                      refresh="python -m studies.training_at_scale --out studies/training_at_scale")
    assert n == len(rows) == 1


def test_committed_figure_redraws_from_the_csv_with_no_text_overlapping(tmp_path):
    """``--plot-only`` redraws the figure from ``results.csv`` alone; no two of its texts (titles, axis and tick
    labels, legends, the plan table's cells) overlap once drawn: the plan labels once sat beside the points and
    collided where the lines run close."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Text

    closed = plt.close
    kept = []
    plt.close = kept.append  # keep the figure the plot would close, to measure its texts
    try:
        png = plot.plot(run.HERE / run.RESULTS_CSV, tmp_path / "training_at_scale.png")
    finally:
        plt.close = closed
    assert png.stat().st_size > 10_000 and len(kept) == 1
    fig = kept[0]
    fig.canvas.draw()  # lay out at the figure's own dpi before measuring
    renderer = fig.canvas.get_renderer()
    texts: list[Text] = [fig._suptitle] if fig._suptitle else []
    for ax in fig.axes:  # what the figure itself places: titles, labels beside points, legends, table cells
        texts += [ax.title, *ax.texts, *(ax.get_legend().get_texts() if ax.get_legend() else ())]
        texts += [c.get_text() for tab in ax.tables for c in tab.get_celld().values()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in dict.fromkeys(texts)
             if t.get_visible() and t.get_text().strip()]
    cells = [b for b in boxes if b[0].endswith("%")]
    assert len(cells) == 36  # one plan cell per point: 2 models x 3 systems x 6 cluster sizes
    clashes = [(a, b) for i, (a, ba) in enumerate(boxes) for b, bb in boxes[i + 1:] if ba.overlaps(bb)]
    assert clashes == [], clashes[:5]
    closed(fig)


def test_readme_findings_table_matches_the_committed_results():
    """Every cell of the README's findings table (days, cost, MFU and plan of a model, cluster and system) is the
    committed results.csv's row, rounded as printed: the table once kept figures of three re-runs before
    (the 405B on 512 H100s printed a 3D plan at 49.5% MFU where the results hold FSDP2 at 43.4%)."""
    import re

    with open(run.HERE / run.RESULTS_CSV, newline="") as f:
        rows = {(r["model"], r["system"], int(r["devices"])): r for r in csv.DictReader(f)}
    text = (run.HERE / "README.md").read_text()
    head = "| model, devices | H100: days, cost, MFU, plan | B200: days, cost, MFU, plan | TPU v5p: days, cost, MFU, plan |"
    assert head in text
    lines = text.split(head, 1)[1].strip().splitlines()[1:]  # past the |---| line
    models = {"70B": "llama-3-70b", "405B": "llama-3.1-405b"}
    checked = 0
    for line in lines:
        if not line.startswith("| "):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        size, devices = cells[0].split(", ")
        for system, cell in zip(("H100", "B200", "TPU v5p"), cells[1:], strict=True):
            r = rows[(models[size], system, int(devices.replace(",", "")))]
            m = re.match(r"([\d,.]+) d, \$([\d.]+)M, ([\d.]+)%, (.*)$", cell)
            assert m, cell
            days, cost, mfu, plan = m.groups()
            decimals = len(days.split(".")[1]) if "." in days else 0
            assert float(days.replace(",", "")) == pytest.approx(float(r["days"]), abs=0.51 * 10 ** -decimals), cell
            assert float(cost) == pytest.approx(float(r["cost_usd"]) / 1e6, rel=0.006), cell
            assert float(mfu) == pytest.approx(100 * float(r["mfu"]), abs=0.051), cell
            words = plan.split()
            assert f"tp{r['tp']}" in words and r["recompute"] in words, cell
            if r["framework"] == "megatron-core":
                assert {f"pp{r['pp']}", f"v{r['interleave']}", f"dp{r['dp']}"} <= set(words), cell
            else:
                assert f"fsdp{r['dp']}" in words and ("FSDP2" in words) == (r["framework"] == "fsdp2"), cell
            checked += 1
    assert checked == 15
