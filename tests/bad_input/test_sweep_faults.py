"""Faults of the sweep area (issue section 3): a grid of 10^12 points, unbounded filter expressions,
output stores that cannot be written, a store whose metadata is corrupt.

Each case runs ``nodeperf`` in a subprocess with a timeout (an unbounded ``9**9**9**9`` runs inside
one C call, where no in-process alarm can stop it) and checks the corpus contract: exit code 2, no
traceback, one located line naming the input, within the timeout.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bad_input.contract import PREFIX

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 20

BASE = """schema = "nodeperf.experiment/1"
name = "tiny"
{filters}

[workload]
model = "gemm:m=64,n=64,k=64"

[hardware]
name = "h100-sxm5-80gb"

[axes.workload]
{axes}
"""
SMALL_AXES = 'batch = [1, 2]'
# six axes of 100 values each: 10^12 points
HUGE_AXES = "\n".join(f'{k} = {{range = [1, 1000000], step = 1}}' for k in ("batch", "seq"))  # 10^6 x 10^6


def nodeperf(cwd: Path, *argv: str) -> tuple[int, str]:
    """Exit code and stderr of ``nodeperf argv`` in a subprocess (a timeout is reported as a hang)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        got = subprocess.run([sys.executable, "-m", "simulator.cli", *argv], capture_output=True, text=True,
                             timeout=TIMEOUT_S, env=env, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: no answer within {TIMEOUT_S} s")
    return got.returncode, got.stderr


def located(rc: int, err: str, *where: str) -> None:
    assert "Traceback" not in err, err
    assert rc == 2, f"exit code {rc}: {err}"
    lines = err.rstrip("\n").split("\n")
    assert lines[0].startswith(PREFIX) and len(lines) == 1, err
    assert all(w in lines[0] for w in where), err


def experiment(tmp_path: Path, *, axes: str = SMALL_AXES, filters: str = "") -> Path:
    p = tmp_path / "x.toml"
    p.write_text(BASE.format(axes=axes, filters=filters), encoding="utf-8")
    return p


def test_grid_of_10_to_the_12_points_is_counted_and_refused(tmp_path: Path) -> None:
    rc, err = nodeperf(tmp_path, "sweep", str(experiment(tmp_path, axes=HUGE_AXES)), "--out", "r.sqlite")
    located(rc, err, "x.toml", "1,000,000,000,000 points", "workload.batch (1,000,000)")


@pytest.mark.parametrize("expr", ["9**9**9**9", "'a' * 10**10"], ids=["power-tower", "string-product"])
def test_unbounded_filter_expression_is_refused(tmp_path: Path, expr: str) -> None:
    filters = f'filters = ["{expr}"]'.replace("'", "\\u0027") if "'" in expr else f'filters = ["{expr}"]'
    rc, err = nodeperf(tmp_path, "sweep", str(experiment(tmp_path, filters=filters)), "--out", "r.sqlite")
    located(rc, err, "filters")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished two-point store."""
    d = tmp_path_factory.mktemp("store")
    rc, err = nodeperf(d, "sweep", str(experiment(d)), "--out", "r.sqlite", "--no-progress")
    assert rc == 0, err
    return d / "r.sqlite"


def test_unbounded_where_expression_is_refused(store: Path) -> None:
    rc, err = nodeperf(store.parent, "sweep", "show", str(store), "--where", "9**9**9**9")
    located(rc, err, "--where")


def test_empty_out_is_refused(tmp_path: Path) -> None:
    rc, err = nodeperf(tmp_path, "sweep", str(experiment(tmp_path)), "--out", "")
    located(rc, err, "--out", "''")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_out_in_a_read_only_folder_is_refused(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, err = nodeperf(tmp_path, "sweep", str(experiment(tmp_path)), "--out", str(ro / "r.sqlite"))
    finally:
        ro.chmod(0o700)
    located(rc, err, "--out")


def test_out_under_proc_is_refused(tmp_path: Path) -> None:
    rc, err = nodeperf(tmp_path, "sweep", str(experiment(tmp_path)), "--out", "/proc/x.sqlite")
    located(rc, err, "/proc/x.sqlite")


def test_store_whose_metadata_is_not_json_is_located(store: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(store.read_bytes())
    with sqlite3.connect(bad) as con:
        tables = [r[0] for r in con.execute("select name from sqlite_master where type = 'table'")]
        meta = next(t for t in tables if "meta" in t)
        cols = [r[1] for r in con.execute(f"pragma table_info({meta})")]
        con.execute(f"update {meta} set {cols[-1]} = '{{not json'")
    rc, err = nodeperf(tmp_path, "sweep", "show", str(bad))
    located(rc, err, "bad.sqlite")
