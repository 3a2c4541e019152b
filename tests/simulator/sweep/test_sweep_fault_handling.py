"""Faults of a sweep become one located error or correct behaviour: a grid too large to run, filter
expressions that would hang or exhaust memory, a full disk, an unwritable or empty --out, a store whose
metadata is not JSON, Ctrl-C while planning, a Dask cluster without workers, pool workers whose parent
was killed; and a sweep killed (SIGKILL) at any point resumes to the rows of an uninterrupted run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main
from simulator.sweep import StoreError, SweepError, load_results, run_sweep
from simulator.sweep import execute as ex
from simulator.sweep.experiment import DEFAULT_MAX_POINTS, ExperimentError, load_experiment
from simulator.sweep.filters import FilterError, compile_filter

REPO = Path(__file__).resolve().parents[3]
_real_graph_key_job = ex.graph_key_job

EXP = """
schema = "nodeperf.experiment/1"
name = "faults"
metrics = ["latency_s", "energy_j"]
{top}
[workload]
model = "gpt2"
phase = "decode"
[hardware]
name = "h100-sxm5-80gb"
[axes.workload]
{axis}
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = ["2 TB/s", "4 TB/s", "8 TB/s"]
"""


def _exp(tmp_path: Path, axis: str = "batch = [1, 2]", top: str = "", name: str = "exp.toml") -> Path:
    f = tmp_path / name
    f.write_text(EXP.format(axis=axis, top=top), encoding="utf-8")
    return f


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line(rc: int, err: str, *parts: str) -> str:
    assert rc == 2, err
    assert "Traceback" not in err
    lines = err.rstrip("\n").split("\n")
    assert len(lines) == 1 and lines[0].startswith("nodeperf: error: "), err
    for p in parts:
        assert p in lines[0], (p, lines[0])
    return lines[0]


def _rows(path: Path) -> list[tuple[Any, ...]]:
    df = load_results(path).sort_values("point_key")
    return [tuple(r) for r in df.itertuples(index=False, name=None)]


# ------------------------------------------------------------------------------------------------
# grids too large


def test_a_grid_of_1e12_points_is_refused_before_anything_runs(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    # 1,000,000 batches x 1,000,000 contexts x 3 bandwidths = 3e12 points
    f = _exp(tmp_path, "batch = {range = [1, 1000000], step = 1}\ncontext = {range = [1, 1000000], step = 1}")
    out = tmp_path / "big.sqlite"
    with pytest.raises(ExperimentError) as err:
        run_sweep(f, out, scheduler="synchronous")
    msg = str(err.value)
    assert "3,000,000,000,000 points" in msg
    assert "workload.batch (1,000,000) x workload.context (1,000,000) x " \
           "hardware.memory.hbm.read_bandwidth_bytes_per_s (3)" in msg
    assert f"expected at most {DEFAULT_MAX_POINTS:,}" in msg and "--max-points" in msg and "max_points" in msg
    assert not out.exists()
    rc, _, e = _cli(capsys, "sweep", str(f), "--out", str(out))
    _one_line(rc, e, "3,000,000,000,000 points", "max_points")


def test_the_limit_is_raised_by_the_file_or_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = _exp(tmp_path, "batch = [1, 2, 4]")  # 9 points
    with pytest.raises(ExperimentError, match="9 points before filters"):
        run_sweep(f, tmp_path / "a.sqlite", scheduler="synchronous", max_points=8)
    rc, _, e = _cli(capsys, "sweep", str(f), "--out", str(tmp_path / "b.sqlite"), "--max-points", "8")
    _one_line(rc, e, "9 points before filters", "expected at most 8")
    # in the file: refused at 8, runs at 9
    f8 = _exp(tmp_path, "batch = [1, 2, 4]", top="max_points = 8", name="e8.toml")
    assert load_experiment(f8).max_points == 8
    with pytest.raises(ExperimentError, match="expected at most 8"):
        run_sweep(f8, tmp_path / "c.sqlite", scheduler="synchronous")
    assert run_sweep(f8, tmp_path / "d.sqlite", scheduler="synchronous", max_points=9).computed == 9
    bad = _exp(tmp_path, "batch = [1]", top="max_points = 0", name="e0.toml")
    with pytest.raises(ExperimentError, match=r"e0.toml:5: max_points: not a positive integer; got 0"):
        load_experiment(bad)


def test_one_axis_of_1e12_values_is_refused_before_its_values_are_made(tmp_path: Path) -> None:
    f = _exp(tmp_path, "batch = {range = [1, 1000000000000], step = 1}")
    with pytest.raises(ExperimentError, match=r"axes.workload.batch: range: 1,000,000,000,000 values.*at most "
                                              r"10,000,000 per axis"):
        load_experiment(f)
    f = _exp(tmp_path, "batch = {log = [1, 1000], n = 100000000}", name="n.toml")
    with pytest.raises(ExperimentError, match="log: n; got 100,000,000 values"):
        load_experiment(f)


# ------------------------------------------------------------------------------------------------
# filters


@pytest.mark.parametrize(("expr", "part"), [
    ("9**9**9**9", "** too large in '9**9**9**9' at column 4; got 9 ** 387420489"),
    ("'a' * 10**10", "* too long in \"'a' * 10**10\" at column 1; got 1 x 10000000000 characters"),
    ("batch * 2**5000 > 0", "too large"),
    ("().__class__", "unsupported attribute of an expression in '().__class__' at column 1"),
    ("__import__('os')", "unsupported call in \"__import__('os')\" at column 1"),
    ("[x for x in (1,)]", "unsupported expression (ListComp)"),
    ("batch[0]", "unsupported expression (Subscript)"),
    ("lambda: 1", "unsupported expression (Lambda)"),
    ("batch is None", "unsupported comparison (is / is not)"),
    ("batch << 3", "unsupported operator (LShift)"),
    ("batch >", "not an expression at column"),
    ("-" * 20_000, "expression too long"),
])
def test_filters_are_bounded_and_located(tmp_path: Path, capsys: pytest.CaptureFixture[str], expr: str,
                                         part: str) -> None:
    with pytest.raises(FilterError) as err:
        compile_filter(expr, ["workload.batch"])({"workload.batch": 2})
    assert part in str(err.value)
    # the same in an experiment (located by file and line) and in sweep show --where (one line, exit 2)
    f = _exp(tmp_path, "batch = [1, 2]", top=f"filters = [{expr!r}]".replace("\\", "\\\\"))
    with pytest.raises(ExperimentError) as err2:
        list(load_experiment(f).points())
    assert part in str(err2.value) and f"{f}:" in str(err2.value)
    store = tmp_path / "s.sqlite"
    if not store.exists():
        run_sweep(_exp(tmp_path, "batch = [1, 2]", name="ok.toml"), store, scheduler="synchronous")
    rc, _, e = _cli(capsys, "sweep", "show", str(store), f"--where={expr}")  # (an expression may start with -)
    _one_line(rc, e, "--where", part)


def test_filters_keep_what_they_supported(tmp_path: Path) -> None:
    known = ["workload.batch", "workload.context", "workload.dtype", "hardware.name"]
    env = {"workload.batch": 8, "workload.context": 512, "workload.dtype": "bf16", "hardware.name": "h100"}
    cases = {
        "batch * context <= 4096": True,
        "batch * context < 4096": False,
        "workload.batch ** 2 == 64 and not context > 512": True,
        "dtype in ('bf16', 'fp16') or batch > 100": True,
        "dtype not in ['bf16']": False,
        "1 < batch <= 8 < context": True,
        "min(batch, context) == 8 and max(batch, 3) == 8 and abs(-batch) == 8": True,
        "context // batch == 64 and context % 3 == 2 and context / batch == 64.0": True,
        "'h1' + '00' in name": True,
        "batch ** -1 == 0.125": True,
    }
    for expr, want in cases.items():
        assert compile_filter(expr, known)(env) is want, expr


def test_filters_in_an_experiment_still_select_points(tmp_path: Path) -> None:
    f = _exp(tmp_path, "batch = [1, 2, 4, 8]", top='filters = ["batch * 2 <= 8"]')
    pts = list(load_experiment(f).points())
    assert sorted({p["workload.batch"] for p in pts}) == [1, 2, 4] and len(pts) == 9


# ------------------------------------------------------------------------------------------------
# the store: full disk, unwritable or empty --out, metadata not JSON


class _FullDisk:
    """A connection on which the n-th write of results fails as SQLite does on a full disk: it rolls the
    transaction back itself and raises ``database or disk is full``."""

    writes = 0
    fail_at = 2

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._c = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def executemany(self, sql: str, data: Any) -> Any:
        if sql.startswith("INSERT INTO results"):
            type(self).writes += 1
            if type(self).writes >= type(self).fail_at:
                self._c.execute("ROLLBACK")
                raise sqlite3.OperationalError("database or disk is full")
        return self._c.executemany(sql, data)


def test_a_full_disk_is_a_located_error_and_the_sweep_resumes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = _exp(tmp_path, "context = [64, 128, 256, 512]")  # 4 tasks of 3 points
    out = tmp_path / "full.sqlite"
    real = sqlite3.connect
    _FullDisk.writes = 0
    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: _FullDisk(real(*a, **k)))
    rc, _, e = _cli(capsys, "sweep", str(f), "--out", str(out), "--workers", "1", "--commit-interval", "0")
    line = _one_line(rc, e, str(out), "cannot write finished points (database or disk is full)",
                     "run the same command to resume")
    assert "rollback" not in line
    monkeypatch.setattr(sqlite3, "connect", real)
    assert len(load_results(out)) == 3  # the first task's commit is kept
    s = run_sweep(f, out, scheduler="synchronous")
    assert (s.total, s.computed, s.reused) == (12, 9, 3)
    ref = tmp_path / "ref.sqlite"
    run_sweep(f, ref, scheduler="synchronous")
    assert _rows(out) == _rows(ref)


@pytest.mark.parametrize("out", ["/proc/nodeperf-x.sqlite", "/proc/no/such/x.sqlite"])
def test_an_unwritable_out_is_refused_before_work(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                  out: str) -> None:
    if not Path("/proc/self").exists():
        pytest.skip("needs /proc")
    f = _exp(tmp_path)
    with pytest.raises(StoreError, match=r"cannot create the results store .*expected a writable file name"):
        run_sweep(f, out, scheduler="synchronous")
    rc, _, e = _cli(capsys, "sweep", str(f), "--out", out)
    _one_line(rc, e, out, "cannot create the results store")


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a non-root POSIX user")
def test_a_read_only_folder_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc, _, e = _cli(capsys, "sweep", str(_exp(tmp_path)), "--out", str(ro / "x.sqlite"))
        _one_line(rc, e, "cannot create the results store")
    finally:
        ro.chmod(0o755)


def test_an_empty_out_names_the_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, _, e = _cli(capsys, "sweep", str(_exp(tmp_path)), "--out", "")
    line = _one_line(rc, e, "--out: an empty file name; got ''", "results.sqlite")
    assert "unknown store format" not in line


@pytest.mark.parametrize(("key", "value", "part"), [
    ("columns", "{not json", "meta.columns: not JSON (Expecting property name enclosed in double quotes)"),
    ("experiments", "[1, 2", "meta.experiments: not JSON"),
    ("columns", "[1]", "meta.columns: got a JSON list; expected a JSON object"),
])
def test_store_metadata_that_is_not_json_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str,
                                                    value: str, part: str) -> None:
    f = _exp(tmp_path)
    out = tmp_path / "m.sqlite"
    run_sweep(f, out, scheduler="synchronous")
    conn = sqlite3.connect(out)
    with conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (value, key))
    conn.close()
    for argv in (["sweep", "show", str(out)], ["sweep", str(f), "--out", str(out)]):
        rc, _, e = _cli(capsys, *argv)
        _one_line(rc, e, f"{out}: {part}")


def test_parquet_metadata_that_is_not_json_is_located(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("pyarrow")
    out = tmp_path / "r.parquet"
    run_sweep(_exp(tmp_path), out, scheduler="synchronous")
    (out / "_nodeperf_store.json").write_text('{\n  "schema": nodeperf\n}', encoding="utf-8")
    rc, _, e = _cli(capsys, "sweep", "show", str(out))
    _one_line(rc, e, f"{out / '_nodeperf_store.json'}:2:13: store metadata is not JSON")


# ------------------------------------------------------------------------------------------------
# planning: cached in the store, Ctrl-C


def test_rerunning_a_finished_store_builds_no_graph(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = _exp(tmp_path, "context = [64, 128, 256]")
    out = tmp_path / "c.sqlite"
    assert run_sweep(f, out, scheduler="synchronous").computed == 9
    conn = sqlite3.connect(out)
    assert conn.execute("SELECT count(*) FROM plan_cache").fetchone()[0] == 3  # one per distinct graph
    conn.close()

    def no_graph(item: Any) -> Any:
        raise AssertionError(f"built a graph while re-planning: {item}")

    monkeypatch.setattr(ex, "graph_key_job", no_graph)
    s = run_sweep(f, out, scheduler="synchronous")
    assert (s.total, s.computed, s.reused) == (9, 0, 9)
    # other graph code: the cache does not apply, the points are the same
    built: list[Any] = []

    def counting(item: Any) -> Any:
        built.append(item)
        return _real_graph_key_job(item)

    monkeypatch.setattr(ex, "graph_key_job", counting)
    monkeypatch.setattr(ex, "_graph_code_fingerprint", lambda: "other code")
    s = run_sweep(f, out, scheduler="synchronous")
    assert (s.computed, s.reused) == (0, 9) and len(built) == 3



def test_ctrl_c_while_planning_says_so_and_the_rerun_completes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    f = _exp(tmp_path, "context = [64, 128, 256, 512]")
    out = tmp_path / "i.sqlite"
    calls: list[Any] = []

    def interrupted(item: Any) -> Any:
        calls.append(item)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return _real_graph_key_job(item)

    monkeypatch.setattr(ex, "graph_key_job", interrupted)
    monkeypatch.setattr(ex, "COMMIT_INTERVAL_S", 0.0)
    rc, text, e = _cli(capsys, "sweep", str(f), "--out", str(out), "--workers", "1")
    assert rc == 130 and text == "" and "Traceback" not in e
    assert e.startswith("nodeperf: sweep interrupted while planning, before any point was computed (the 2 of 4 "
                        f"graphs keyed so far are cached in {out}); run the same command to continue")
    assert "finished points are in" not in e
    monkeypatch.setattr(ex, "graph_key_job", _real_graph_key_job)
    s = run_sweep(f, out, scheduler="synchronous")
    assert (s.total, s.computed, s.reused) == (12, 12, 0)


# ------------------------------------------------------------------------------------------------
# Dask without workers


def test_a_dask_cluster_without_workers_times_out_and_the_store_resumes(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    f = _exp(tmp_path, "context = [64, 128]")
    out = tmp_path / "d.sqlite"
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None, protocol="tcp",
                                  host="127.0.0.1") as cluster:
        with pytest.raises(SweepError, match=r"no Dask worker for 0.5 s \(2 task\(s\) waiting: the workers died, "
                                             r"or none joined\).*run the same command to resume"):
            run_sweep(f, out, scheduler=cluster.scheduler_address, worker_timeout_s=0.5, progress=False)
        cluster.scale(1)
        cluster.wait_for_workers(1)
        s = run_sweep(f, out, scheduler=cluster.scheduler_address, progress=False)
    assert (s.total, s.computed) == (6, 6)
    ref = tmp_path / "ref.sqlite"
    run_sweep(f, ref, scheduler="synchronous")
    assert _rows(out) == _rows(ref)


# ------------------------------------------------------------------------------------------------
# pool workers die with their parent; kill -9 at any point resumes to the uninterrupted rows


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("way", ["prctl", "watch-thread"])
def test_pool_workers_exit_when_the_sweep_is_killed(tmp_path: Path, way: str) -> None:
    script = textwrap.dedent(f"""
        import os, sys, time
        import simulator.sweep.execute as ex
        if {way == "watch-thread"!r}:
            ex.PARENT_POLL_S = 0.1
            sys.platform = "other"  # no prctl: the portable watch thread alone
        e = ex._Executor("local", 2)
        pool = e._get_pool()
        pids = sorted({{pool.submit(os.getpid).result() for _ in range(8)}})
        print(*pids, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]  # type: ignore[union-attr]
        assert pids and all(_alive(p) for p in pids)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids), f"orphaned workers {pids}"


def _results(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            return int(conn.execute("SELECT count(*) FROM results").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _planned(db: Path) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.05)
        try:
            return int(conn.execute("SELECT count(*) FROM plan_cache").fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize(("when", "workers"), [("planning", "1"), ("first rows", "1"), ("half", "1"),
                                               ("first rows", "2")])
def test_sigkill_at_any_point_then_resume_equals_an_uninterrupted_run(tmp_path: Path, when: str,
                                                                      workers: str) -> None:
    # 16 graphs (contexts 32, 96, ..., 992) x 3 bandwidths = 48 points, one task per graph
    f = _exp(tmp_path, "context = {range = [32, 992], step = 64}")
    out = tmp_path / "k.sqlite"
    cmd = [sys.executable, "-m", "simulator.cli", "sweep", str(f), "--out", str(out), "--workers", workers,
           "--commit-interval", "0", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    ready = {"planning": lambda: _planned(out) > 0,
             "first rows": lambda: _results(out) > 0,
             "half": lambda: _results(out) >= 24}[when]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=env,
                            cwd=REPO)
    try:
        deadline = time.monotonic() + 120
        while not ready() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.killpg(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    if out.exists():
        conn = sqlite3.connect(out)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("48 points: ")
    ref = tmp_path / "ref.sqlite"
    run_sweep(f, ref, scheduler="synchronous")
    assert _rows(out) == _rows(ref)
