"""A sweep on a Dask distributed cluster (an in-process LocalCluster reached by its tcp:// address) stores
the same rows as the embedded local run."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.sweep import load_results, run_sweep

distributed = pytest.importorskip("distributed")

EXP = """
name = "dask"
metrics = ["latency_s", "energy_j", "memory_bytes"]
[workload]
phase = "decode"
context = 128
[hardware]
name = "a100-sxm4-80gb"
[axes.workload]
model = ["gpt2", "opt-1.3b"]
batch = [1, 8]
[axes.hardware]
memory.hbm.read_bandwidth_bytes_per_s = {log = ["1 TB/s", "4 TB/s"], n = 3}
"""


def test_dask_cluster_matches_local_run(tmp_path: Path) -> None:
    exp = tmp_path / "d.toml"
    exp.write_text(EXP, encoding="utf-8")
    local = tmp_path / "local.sqlite"
    s_local = run_sweep(exp, local, scheduler="synchronous")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  protocol="tcp", host="127.0.0.1") as cluster:
        assert cluster.scheduler_address.startswith("tcp://")
        remote = tmp_path / "dask.sqlite"
        s = run_sweep(exp, remote, scheduler=cluster.scheduler_address, progress=False)
        assert (s.total, s.computed, s.reused, s.errors) == (12, 12, 0, 0) == (s_local.total, s_local.computed, 0, 0)
        assert s.workers == 2 and s.scheduler == cluster.scheduler_address
        assert run_sweep(exp, remote, scheduler=cluster.scheduler_address).computed == 0  # resumes there too
    a = load_results(local).set_index("point_key").sort_index()
    b = load_results(remote).set_index("point_key").sort_index()
    assert list(a.index) == list(b.index) and len(a) == 12
    for col in ("workload.model", "workload.batch", "hardware.memory.hbm.read_bandwidth_bytes_per_s",
                "latency_s", "energy_j", "memory_bytes", "provenance_sha256"):
        assert (a[col] == b[col]).all(), col
