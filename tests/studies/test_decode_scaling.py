"""The decode-scaling study runs on its reduced configuration and its rows obey the physics."""

from __future__ import annotations

import csv

import pytest

from studies._cli import load_config
from studies.decode_scaling import plot, run


@pytest.fixture(scope="module")
def cfg():
    return load_config(run.HERE / "config.toml", reduced=True)


@pytest.fixture(scope="module")
def rows(cfg):
    return run.run(cfg)


def test_reduced_study_writes_csv_and_figure(tmp_path, cfg, rows):
    assert len(rows) == len(cfg["devices"]) * len(cfg["batches"])
    out = tmp_path / "results.csv"
    run.write_csv(rows, out)
    with open(out, newline="") as f:
        back = list(csv.DictReader(f))
    assert [r["device"] for r in back] == [r["device"] for r in rows]
    for dev in cfg["devices"]:
        mine = sorted((r for r in rows if r["device"] == dev), key=lambda r: r["batch"])
        # throughput never falls and energy per token never rises with batch
        assert all(a["tokens_per_s"] <= b["tokens_per_s"] for a, b in zip(mine, mine[1:], strict=False))
        assert all(a["energy_per_token_j"] >= b["energy_per_token_j"] for a, b in zip(mine, mine[1:], strict=False))
        # a decode step streams every weight once: never faster than weights / peak HBM bandwidth
        from hwmodels.catalog import load_device

        bw = load_device(dev).main_memory.read_bandwidth_bytes_per_s
        assert all(r["latency_s"] >= r["weight_bytes"] / bw for r in mine)
        # KV cache grows linearly with batch: 2 * 32 layers * 4096 * 2 bytes * 2048 tokens per sequence
        assert all(r["kv_cache_bytes"] == r["batch"] * 2 * 32 * 4096 * 2 * 2048 for r in mine)
    # at batch 128 the 80 GB parts cannot hold the cache; the B200 can: 13.5 GB of weights + 137.4 GB of cache
    assert not any(r["fits_in_memory"] for r in rows if r["batch"] == 128 and r["device"] != "b200")
    (b200,) = [r for r in rows if r["batch"] == 128 and r["device"] == "b200"]
    assert b200["fits_in_memory"] and b200["weight_bytes"] + b200["kv_cache_bytes"] == 150_915_784_704
    fig = tmp_path / "fig.png"
    plot.plot(out, fig)
    assert fig.stat().st_size > 10_000


def test_one_command_writes_under_out_not_over_the_committed_results(tmp_path, monkeypatch, capsys, cfg, rows):
    repo = run.HERE.parents[1]
    # the default lives in the git-ignored out/ folder, never the committed files
    assert run.OUT_DIR == repo / "out" / "decode_scaling"
    committed = {p: p.read_bytes() for p in (run.HERE / "results.csv", run.HERE / "decode_scaling.png")}
    monkeypatch.setattr(run, "run", lambda given: rows if given == cfg else pytest.fail(f"config {given}"))
    out_dir = tmp_path / "out"
    assert run.main(["--reduced", "--out", str(out_dir)]) == 0  # run, then plot
    assert capsys.readouterr().out.splitlines() == [f"{len(rows)} rows -> {out_dir / 'results.csv'}",
                                                    f"figure -> {out_dir / 'decode_scaling.png'}"]
    assert (out_dir / "decode_scaling.png").stat().st_size > 10_000
    assert all(p.read_bytes() == data for p, data in committed.items())
    # --plot-only redraws from the CSV; plotting before running is a clear error, not a traceback
    figs = tmp_path / "figs"
    assert run.main(["--plot-only", "--out", str(out_dir), "--figures", str(figs)]) == 0
    assert (figs / "decode_scaling.png").is_file()
    assert run.main(["--plot-only", "--out", str(tmp_path / "missing")]) == 2
    assert "missing/results.csv: no such results file" in capsys.readouterr().err


def test_a_file_for_out_is_one_clear_error(tmp_path, capsys):
    """``--out`` names the folder: a file is refused with one line and exit 2, not a traceback."""
    f = tmp_path / "results.csv"
    f.write_text("x\n")
    assert run.main(["--reduced", "--out", str(f)]) == 2
    assert capsys.readouterr().err.strip() == (f"decode_scaling: error: --out {f}: is a file; expected the folder "
                                               "to write results.csv into")


def test_committed_results_are_current(rows, committed_csv):
    """The committed results.csv (and the figure drawn from it) is today's model on every row the reduced
    configuration computes."""
    n = committed_csv(rows, run.HERE / "results.csv", run.write_csv, ["device", "batch"],
                      refresh="python -m studies.decode_scaling --out studies/decode_scaling")
    assert n == 9  # A100, H100 and B200 (its 1.56 us measured per-kernel device time) at 3 batches
