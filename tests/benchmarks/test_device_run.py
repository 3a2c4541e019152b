"""The one-command GPU measurement script (benchmarks/device/run.py): a CPU dry run covers every code path."""

from __future__ import annotations

import csv
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEVICE = ROOT / "benchmarks" / "device"


def _module(name: str):
    sys.path.insert(0, str(DEVICE))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(DEVICE))


def test_dry_run_writes_measurements_that_load(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from simulator.calibration.measurements import MeasurementSet

    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(DEVICE / "run.py"), "--out", str(out), "--dry-run"], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    ms = MeasurementSet.load(out / "kernels.csv")
    cases = _module("_cases")
    want = ({s.workload for s in cases.DRY_TENSOR_GEMMS + cases.DRY_FP32_GEMMS}
            | {w for b in cases.DRY_STREAM_BYTES for w in cases.stream_workloads(b, 4)}
            | {cases.LAUNCH_WORKLOAD, "benchmarks/device/tiny_layer.json"})
    assert {m.workload for m in ms} == want
    assert all(m.median_s > 0 and m.source.startswith("measured: benchmarks/device/run.py") for m in ms)
    layer = [m for m in ms if m.category == "e2e_layer"]
    assert sorted(bool(m.train) for m in layer) == [False, True]
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["parts"]["fp8"].startswith("skipped: fp8 GEMMs need a CUDA GPU")
    assert meta["parts"]["power"].startswith("skipped: board power needs a GPU")
    assert meta["parts"]["gemm"] == meta["parts"]["layer"] == "ran"
    with open(out / "layer_kernels.csv") as f:
        kernels = list(csv.DictReader(f))
    assert {k["phase"] for k in kernels} == {"forward", "train"}
    assert any("mm" in k["kernel"] for k in kernels)
    assert not (out / "power.csv").exists()
    with open(out / "gemm_timing.csv") as f:
        timing = list(csv.DictReader(f))
    # the CPU has no CUDA graph: the flushed timer and the profiler for each case
    assert {(t["workload"], t["dtype"], t["method"]) for t in timing} == {
        (s.workload, dt, m) for s, dt in cases.DRY_TIMING_GEMMS for m in ("flush_events", "profiler")}
    assert all(float(t["median_s"]) > 0 for t in timing)
    assert sorted(t["kernels"] for t in timing if t["method"] == "profiler") == ["aten::bmm x 1", "aten::mm x 1"]
    assert meta["parts"]["gemm_timing"] == "ran"


def test_unknown_part_exits_2(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, str(DEVICE / "run.py"), "--out", str(tmp_path), "--parts", "gemm,nccl"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "--parts: unknown nccl; expected some of gemm," in r.stderr


def test_power_row_averages_settled_samples_and_loads(tmp_path: Path) -> None:
    power = _module("_power")
    # 2 s loop of 400 executions; samples at 0.5 s (dropped, settling), 1.0, 1.5 and 2.0 s
    loop = power.Loop(executions=400, wall_s=2.0, t0=10.0,
                      samples=((10.5, 100.0, 1.0e9), (11.0, 600.0, 1.98e9), (11.5, 640.0, 1.96e9),
                               (12.0, 620.0, 1.92e9)))
    row = power.power_row(loop, rid="power-001", kind="gemm", workload="gemm:m=8192,n=8192,k=8192",
                          dtype="bf16", device="h100-sxm5-80gb", framework="torch eager")
    assert float(row["power_w"]) == pytest.approx(620.0)          # (600 + 640 + 620) / 3
    assert float(row["latency_s"]) == pytest.approx(0.005)        # 2.0 s / 400
    assert float(row["energy_j"]) == pytest.approx(3.1)           # 620 W x 5 ms
    assert "mean 1953 MHz, min 1920 MHz" in row["notes"]
    from simulator.calibration.energy_validation import ENERGY_COLUMNS, load_energy_rows

    path = tmp_path / "power.csv"
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ENERGY_COLUMNS)
        w.writeheader()
        w.writerow({c: row.get(c, "") for c in ENERGY_COLUMNS})
    (loaded,) = load_energy_rows(path)
    assert loaded.power_w == pytest.approx(620.0)
    assert power.power_row(power.Loop(10, 0.5, 0.0, ((0.2, 300.0, 1e9),)), rid="x", kind="gemm", workload="w",
                           dtype="bf16", device="d", framework="f") is None


def test_timing_operands_follow_the_layout_bits() -> None:
    torch = pytest.importorskip("torch")
    timing, cases = _module("_gemm_timing"), _module("_cases")
    # B stored (n, k) and read transposed (bit 2), batched: C is [b, m, n]; TF32 is allowed only inside the call
    before = torch.backends.cuda.matmul.allow_tf32
    c = timing.operands(torch, cases.GemmShape(4, 3, 5, b=2, transpose=2), "tf32", "cpu")()
    assert tuple(c.shape) == (2, 4, 3) and c.dtype == torch.float32
    assert torch.backends.cuda.matmul.allow_tf32 == before
    c = timing.operands(torch, cases.GemmShape(4, 3, 5, transpose=1), "bf16", "cpu")()
    assert tuple(c.shape) == (4, 3) and c.dtype == torch.bfloat16
    # the published rows' layouts: OpenXLA's rhs row-major [k, n] (N-major), triton #2339's b = randn(N, K).T
    xla = {s.transpose for s, dt in cases.TIMING_GEMMS if dt == "bf16"}
    assert xla == {0} and {s.transpose for s, dt in cases.TIMING_GEMMS if dt == "fp16"} == {2}
    assert ("gemm:m=2048,n=512,k=512,transpose=2", "fp16") in {(s.workload, dt) for s, dt in cases.TIMING_GEMMS}
    assert timing.FLUSH_BYTES == 256_000_000  # do_bench's int(256e6) int8 cache
