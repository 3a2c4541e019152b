"""Planning of a sweep (listing and keying its points): the same plan and rows serially, on a process
pool and from the store's cache; progress while planning; a sweep interrupted while planning resumes to
the rows of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main
from simulator.sweep import execute as ex
from simulator.sweep import load_results, run_sweep
from simulator.sweep.experiment import load_experiment

_real_graph_key_job = ex.graph_key_job

# 3 batches x 3 contexts = 9 workloads, 8 after the filter, 2 of them refused (gpt2 holds 1,024 positions: context 2048
# with batch 4 is filtered out, the other two batches fail as points), x 2 options x 2 bandwidths
EXP = """
schema = "nodeperf.experiment/1"
name = "planning"
metrics = ["latency_s", "energy_j"]
filters = ["not (workload.batch == 4 and workload.context == 2048)"]
[workload]
model = "gpt2"
phase = "decode"
[hardware]
name = "h100-sxm5-80gb"
[axes.workload]
batch = [1, 2, 4]
context = [64, 512, 2048]
[axes.options]
fusion = [true, false]
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = ["2 TB/s", "8 TB/s"]
"""


def _exp(tmp_path: Path) -> Path:
    f = tmp_path / "plan.toml"
    f.write_text(EXP, encoding="utf-8")
    return f


def _rows(path: Path) -> list[tuple[Any, ...]]:
    df = load_results(path).sort_values("point_key")
    df = df.astype(object).where(df.notna(), None)  # NaN (a failed point's metrics) compares equal as None
    return [tuple(r) for r in df.itertuples(index=False, name=None)]


def test_pool_planning_equals_serial_planning(tmp_path: Path) -> None:
    exp = load_experiment(_exp(tmp_path))
    serial = ex.plan_sweep(exp, progress=False)
    assert exp.size == 36 and serial.filtered == 4 and len(serial.rows) == 32
    assert len(serial.errors) == 8  # context 2048, batches 1 and 2, x 2 options x 2 bandwidths
    assert all("2048" in e["error"] for e in serial.errors)
    ex._graph.cache_clear()
    pool = ex._Executor("local", 2)
    try:
        parallel = ex.plan_sweep(exp, ex._Planner(exp, pool, None, False), progress=False)
    finally:
        pool.close()
    assert list(parallel.rows.items()) == list(serial.rows.items())  # same keys, same order
    assert parallel.tasks == serial.tasks and parallel.errors == serial.errors
    assert parallel.filtered == serial.filtered


def test_dask_planning_equals_serial_planning(tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    exp = load_experiment(_exp(tmp_path))
    serial = ex.plan_sweep(exp, progress=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  protocol="tcp", host="127.0.0.1") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        dask = ex._Executor(cluster.scheduler_address, 2, client)
        planner = ex._Planner(exp, dask, None, False)
        parallel = ex.plan_sweep(exp, planner, progress=False)
    assert planner.keyed == 8  # every distinct workload keyed on the cluster
    assert list(parallel.rows.items()) == list(serial.rows.items())
    assert parallel.tasks == serial.tasks and parallel.errors == serial.errors


def test_pool_sweep_rows_equal_the_synchronous_rows(tmp_path: Path) -> None:
    f = _exp(tmp_path)
    a, b = tmp_path / "pool.sqlite", tmp_path / "sync.sqlite"
    sa = run_sweep(f, a, scheduler="local", workers=2, progress=False)
    sb = run_sweep(f, b, scheduler="synchronous", progress=False)
    assert (sa.total, sa.computed, sa.errors) == (sb.total, sb.computed, sb.errors) == (32, 32, 8)
    assert _rows(a) == _rows(b)


def test_planning_shows_progress(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    exp = load_experiment(_exp(tmp_path))
    ex.plan_sweep(exp, progress=True)
    err = capsys.readouterr().err
    assert "planning: keying points" in err and "32/32" in err  # the points that pass the filters


def test_settings_memo_keeps_int_and_float_apart(tmp_path: Path) -> None:
    exp = load_experiment(_exp(tmp_path))
    s = ex._Settings(exp, {"model": "gpt2"}, {}, "h100-sxm5-80gb")
    one, one_f = s.workload({"workload.batch": 1, "workload.context": 64}), \
        s.workload({"workload.batch": 1.0, "workload.context": 64})
    assert one[1] == '{"batch":1,"context":64,"model":"gpt2"}'
    assert one_f[1] == '{"batch":1.0,"context":64,"model":"gpt2"}'


def test_interrupted_planning_resumes_to_the_uninterrupted_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    f = _exp(tmp_path)
    out = tmp_path / "i.sqlite"
    calls: list[Any] = []

    def interrupted(item: Any) -> Any:
        calls.append(item)
        if len(calls) == 4:
            raise KeyboardInterrupt
        return _real_graph_key_job(item)

    monkeypatch.setattr(ex, "graph_key_job", interrupted)
    monkeypatch.setattr(ex, "COMMIT_INTERVAL_S", 0.0)
    rc = main(["sweep", str(f), "--out", str(out), "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 130 and err.startswith("nodeperf: sweep interrupted while planning, before any point was "
                                        f"computed (the 3 of 8 graphs keyed so far are cached in {out})")
    assert "finished points are in" not in err
    assert out.stat().st_size > 0
    monkeypatch.setattr(ex, "graph_key_job", _real_graph_key_job)
    s = run_sweep(f, out, scheduler="synchronous", progress=False)
    assert (s.total, s.computed, s.reused) == (32, 32, 0)
    ref = tmp_path / "ref.sqlite"
    run_sweep(f, ref, scheduler="synchronous", progress=False)
    assert _rows(out) == _rows(ref)
