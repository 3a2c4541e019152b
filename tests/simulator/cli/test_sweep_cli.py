"""`nodeperf sweep` and `nodeperf sweep show`: output, exit code 2 on bad input, and a SIGKILL mid-sweep that a
second run completes with no row lost and none duplicated."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_capture import run_cli

from simulator.sweep import load_results, run_sweep

EXP = """
schema = "nodeperf.experiment/1"
name = "cli"
metrics = ["latency_s", "energy_j"]
[workload]
model = "gpt2"
phase = "decode"
[hardware]
name = "h100-sxm5-80gb"
[axes.workload]
{workload_axis}
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = ["2 TB/s", "4 TB/s", "8 TB/s"]
"""


def _exp(tmp_path: Path, axis: str = "batch = [1, 2]") -> Path:
    f = tmp_path / "exp.toml"
    f.write_text(EXP.format(workload_axis=axis), encoding="utf-8")
    return f


def test_run_then_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.sqlite"
    rc, text, err = run_cli(capsys, ["sweep", str(_exp(tmp_path)), "--out", str(out), "--workers", "1"])
    assert rc == 0, err
    assert text.startswith("6 points: 6 computed, 0 reused")
    assert err == ""  # no progress bar when standard error is not a terminal
    rc, text, _ = run_cli(capsys, ["sweep", str(_exp(tmp_path)), "--out", str(out)])
    assert rc == 0 and "0 computed, 6 reused" in text
    rc, text, _ = run_cli(capsys, ["sweep", "show", str(out), "--top", "2"])
    lines = text.splitlines()
    assert "6 rows (model points; experiments: cli); 6 selected; showing 2" in lines[0]
    head = lines[2].strip().split("  ")
    head = [h.strip() for h in head if h.strip()]
    assert head[:2] == ["batch", "read_bandwidth (TB/s)"]  # bytes_per_s in TB/s, named in the header
    assert head[2].startswith("latency (") and head[3].startswith("energy (")
    df = load_results(out).sort_values("latency_s")
    row = lines[4].split()
    # hand-checked: the fastest row has the widest bus, 8e12 B/s -> 8 TB/s
    assert df["hardware.memory.hbm.read_bandwidth_bytes_per_s"].iloc[0] == 8e12 and row[1] == "8"
    scale = {"(s)": 1.0, "(ms)": 1e-3, "(us)": 1e-6, "(ns)": 1e-9}[head[2].split()[1]]
    assert row[2] == f"{df['latency_s'].iloc[0] / scale:.4g}"  # the fastest row first, in the header's unit
    assert "e+" not in text and "e-" not in text  # no raw exponents in the table
    rc, text, _ = run_cli(capsys, ["sweep", "show", str(out), "--where", "batch == 2", "--pareto", "latency_s,energy_j"])
    assert rc == 0 and "Pareto front of latency_s,energy_j" in text
    front = [ln.split() for ln in text.splitlines()[4:]]
    assert front and all(r[0] == "2" for r in front)
    csv_file = tmp_path / "sel.csv"
    rc, _, _ = run_cli(capsys, ["sweep", "show", str(out), "--sort", "max:latency_s", "--top", "1", "--csv", str(csv_file)])
    assert rc == 0
    head, first = csv_file.read_text().splitlines()[:2]
    assert float(first.split(",")[head.split(",").index("latency_s")]) == pytest.approx(df["latency_s"].max())


@pytest.mark.parametrize("argv, message", [
    (["sweep", "{exp}"], "--out: missing"),
    (["sweep", "{exp}", "--out", "{out}", "--top", "3"], "--top: an option of `nodeperf sweep show`"),
    (["sweep", "show", "{out}", "--workers", "2"], "--workers: an option of running a sweep"),
    (["sweep", "show", "{missing}"], "no such results store"),
    (["sweep", "show", "{out}", "--where", "bach == 1"], "did you mean 'workload.batch'"),
    (["sweep", "show", "{out}", "--pareto", "latency_s"], "two or more"),
    (["sweep", "show", "{out}", "--sort", "latncy_s"], "did you mean 'latency_s'"),
    (["sweep", "show", "{out}", "--sort", "energy"], "sweep show: --sort: metric; got 'energy'"),  # was "pareto: metric"
    (["sweep", "{exp}", "--out", "{out}", "--scheduler", "tcp//x:1"], "unknown scheduler"),
    (["sweep", "{exp}", "--out", "{tmp}/r.txt"], "unknown store format"),
    (["sweep", "{bad}", "--out", "{out}"], "exp_bad.toml:13: axes.hardware.memory.hbm.read_bandwidth_bytes_per_s"),
])
def test_bad_input_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    out = tmp_path / "r.sqlite"
    exp = _exp(tmp_path)
    run_sweep(exp, out, scheduler="synchronous")
    before = out.read_bytes()
    bad = tmp_path / "exp_bad.toml"
    bad.write_text(EXP.format(workload_axis="batch = [1]").replace('"8 TB/s"', '"8 TFLOP/s"'), encoding="utf-8")
    subst = {"exp": str(exp), "out": str(out), "missing": str(tmp_path / "none.sqlite"), "tmp": str(tmp_path),
             "bad": str(bad)}
    rc, _, err = run_cli(capsys, [a.format(**subst) for a in argv])
    assert rc == 2
    assert err.startswith("nodeperf: error: ") and "Traceback" not in err
    assert message in err
    assert out.read_bytes() == before  # the store is never touched by a failed command


def _count(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            return int(conn.execute("SELECT count(*) FROM results").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:  # not created yet, or locked by a commit in progress
        return 0


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    # 32 graphs (contexts 16, 48, ..., 1008) x 3 hardware variants; one commit per finished task
    exp = _exp(tmp_path, "context = {range = [16, 1008], step = 32}")
    out = tmp_path / "k.sqlite"
    cmd = [sys.executable, "-m", "simulator.cli", "sweep", str(exp), "--out", str(out), "--workers", "1",
           "--commit-interval", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while _count(out) == 0 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode() if proc.stderr else ""
    at_kill = _count(out)
    assert 0 < at_kill < 96  # killed mid-sweep, with some rows in
    conn = sqlite3.connect(out)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"96 points: {96 - at_kill} computed, {at_kill} reused" in done.stdout
    conn = sqlite3.connect(out)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        n, distinct = conn.execute("SELECT count(*), count(DISTINCT point_key) FROM results").fetchone()
        pairs = set(conn.execute('SELECT "workload.context", "hardware.memory.hbm.read_bandwidth_bytes_per_s" '
                                 "FROM results"))
    finally:
        conn.close()
    assert n == distinct == 96
    assert pairs == {(c, bw) for c in range(16, 1009, 32) for bw in (2e12, 4e12, 8e12)}
    # the same rows as a sweep never interrupted
    ref = tmp_path / "ref.sqlite"
    run_sweep(exp, ref, scheduler="synchronous")
    a = load_results(out).set_index("point_key").sort_index()
    b = load_results(ref).set_index("point_key").sort_index()
    assert list(a.index) == list(b.index)
    assert (a["latency_s"] == b["latency_s"]).all() and (a["provenance_sha256"] == b["provenance_sha256"]).all()


def test_progress_bar_when_asked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, text, err = run_cli(capsys, ["sweep", str(_exp(tmp_path)), "--out", str(tmp_path / "p.sqlite"), "--progress",
                            "--workers", "1"])
    assert rc == 0 and text.startswith("6 points: 6 computed")
    assert "cli: 100%" in err and "6/6" in err and "pt/s" in err  # tqdm: done, count, rate


def test_show_columns_in_human_units() -> None:
    from simulator.cli.sweep import column_scale, column_unit

    assert column_unit("latency_s") == ("latency", "s")
    assert column_unit("memory_bytes") == ("memory", "B")
    assert column_unit("hardware.compute.peak_flops_per_s") == ("hardware.compute.peak", "FLOP/s")
    assert column_unit("workload.batch") == ("workload.batch", None)
    assert column_unit("hardware.compute.tensor_flops_per_s.bf16") == ("hardware.compute.tensor.bf16", "FLOP/s")
    # hand-checked: 47839649792 B / 2**30 = 44.554 GiB; 8e12 FLOP/s = 8 TFLOP/s; the largest value picks the scale
    assert column_scale("B", [47839649792.0]) == (2.0**30, "GiB")
    assert f"{47839649792 / 2.0**30:.4g}" == "44.55"
    assert column_scale("FLOP/s", [8e12, 4e12]) == (1e12, "TFLOP/s")
    assert column_scale("s", [0.00123, 0.0042]) == (1e-3, "ms")
    assert column_scale("s", [0.5, 0.00123]) == (1e-3, "ms")  # 500 ms and 1.23 ms
    assert column_scale("s", [1.5, 0.00123]) == (1.0, "s")
    assert column_scale("B/s", [float("nan")]) == (1.0, "B/s")


def test_where_on_a_metric_leaves_out_the_rows_of_failed_points(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """A store with an error row: ``--where 'latency_s < 1'`` keeps the rows that have a latency under 1 s and
    leaves out the failed point's empty one (it had failed the whole command: 'cannot compare None with 1')."""
    out = tmp_path / "r.sqlite"
    exp = tmp_path / "e.toml"
    exp.write_text('metrics = ["latency_s"]\n[workload]\nmodel = "gpt2"\nphase = "decode"\n[hardware]\n'
                   'name = "dgx-h100"\n[axes.options]\ntp = [1, 5]\n', encoding="utf-8")
    run_sweep(exp, out, scheduler="synchronous")
    df = load_results(out)
    assert df["error"].notna().sum() == 1 and df["latency_s"].isna().sum() == 1  # tp 5 divides no head count
    rc, text, err = run_cli(capsys, ["sweep", "show", str(out), "--where", "latency_s < 1", "--csv", "-"])
    assert rc == 0, err
    rows = text.splitlines()[1:]
    assert len(rows) == 1 and rows[0].split(",")[0] == "1"  # the tp 1 row
    rc, text, err = run_cli(capsys, ["sweep", "show", str(out), "--where", "error != None", "--csv", "-"])
    assert rc == 0 and len(text.splitlines()) == 2
