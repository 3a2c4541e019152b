"""The decode-scaling study runs on its reduced configuration and its rows obey the physics."""

from __future__ import annotations

import csv

from studies.decode_scaling import plot, run


def test_reduced_study_writes_csv_and_figure(tmp_path):
    cfg = run.load_config(reduced=True)
    rows = run.run(cfg)
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
    # at batch 128 the 80 GB parts cannot hold the cache
    assert not any(r["fits_in_memory"] for r in rows if r["batch"] == 128)
    fig = tmp_path / "fig.png"
    plot.plot(out, fig)
    assert fig.stat().st_size > 10_000


def test_scripts_write_under_out_not_over_the_committed_results(tmp_path, monkeypatch, capsys):
    repo = run.HERE.parents[1]
    # the defaults live in the git-ignored out/ folder, never the committed files
    assert run.DEFAULT_OUT == repo / "out" / "decode_scaling" / "results.csv"
    assert plot.OUT_DIR == run.OUT_DIR
    committed = {p: p.read_bytes() for p in (run.HERE / "results.csv", run.HERE / "decode_scaling.png")}
    out_dir = tmp_path / "out" / "decode_scaling"
    monkeypatch.setattr(run, "DEFAULT_OUT", out_dir / "results.csv")
    monkeypatch.setattr(plot, "OUT_DIR", out_dir)
    assert run.main(["--reduced"]) == 0
    assert plot.main([]) == 0
    assert (out_dir / "results.csv").is_file() and (out_dir / "decode_scaling.png").stat().st_size > 10_000
    assert all(p.read_bytes() == data for p, data in committed.items())
    # an explicit --out is honoured
    explicit = tmp_path / "mine.csv"
    assert run.main(["--reduced", "--out", str(explicit)]) == 0
    assert explicit.read_text() == (out_dir / "results.csv").read_text()
    # plotting before running is a clear error, not a traceback
    assert plot.main(["--csv", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: no such results file" in capsys.readouterr().err


def test_a_folder_for_out_is_one_clear_error(tmp_path, capsys):
    """``--out`` names the CSV: a folder is refused with one line and exit 2, not a traceback."""
    from studies.decode_scaling import run as decode_run

    assert decode_run.main(["--reduced", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"decode_scaling: error: --out {tmp_path}: is a folder; expected the CSV file to write "
                   f"(e.g. {tmp_path / 'results.csv'})")
