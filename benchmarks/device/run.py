"""Measure what the GPU model most needs on one GPU, in one command, and write measurement files.

    python benchmarks/device/run.py --out DIR [--device cuda] [--device-name h200-sxm-141gb] [--parts ...]
    python benchmarks/device/run.py --out DIR --dry-run     # tiny shapes on the CPU, every code path

Writes into DIR:

* ``kernels.csv``: one row per timed case in the measurement schema of
  ``simulator.calibration.measurements`` (tensor-core GEMMs bf16/fp16/fp8 from a GEMV to 16384^3,
  fp32 GEMMs with TF32 off at eager training shapes and layouts, the launch floor, streaming ops
  from 1 MiB to 4 GiB, the one-layer transformer's forward and training step), ready for
  ``nodeperf validate DIR/kernels.csv`` and ``nodeperf calibrate --hardware NAME DIR/kernels.csv``;
* ``power.csv``: board power, achieved SM clock and energy per execution over back-to-back loops of
  at least 5 s (after 1 s of settling), in the energy schema of
  ``simulator.calibration.energy_validation`` (``nodeperf validate --dataset energy DIR/power.csv``);
* ``layer_kernels.csv``: every kernel of the eager layer's forward and training step, with its mean time;
* ``gemm_timing.csv``: the small GEMMs of the published H100 rows timed by ``do_bench``'s flushed event pair,
  CUDA-graph replay and the profiler's kernel records, with the kernels each call launched;
* ``metadata.json``: GPU, driver, clocks, power limits, library versions, the idle power, the empty
  kernel's launch figures, and every part that was skipped with the reason.

A part whose library is missing (torch, fp8 support, NVML/nvidia-smi) is skipped with the reason; the
rest still runs. Estimated length on an H100/H200 (not yet run on one): about two and a half minutes, 84 timed
cases of ~0.3 s, 11 power windows of 6 s and 15 GEMM timing cases of about a second (the limit is ten).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _cases  # noqa: E402
import _gemm_timing  # noqa: E402
import _layer  # noqa: E402
import _meta  # noqa: E402
import _power  # noqa: E402

PARTS = ("gemm", "fp8", "fp32", "launch", "stream", "layer", "power", "gemm_timing")
logger = logging.getLogger("device-run")


@dataclasses.dataclass
class Run:
    """Settings and what the run has gathered so far."""

    out: Path
    device: str
    dry: bool
    device_name: str | None
    torch: Any = None
    rows: list[Any] = dataclasses.field(default_factory=list)      # Measurement records
    power: list[dict[str, str]] = dataclasses.field(default_factory=list)
    layer: list[dict[str, str]] = dataclasses.field(default_factory=list)
    timing: list[dict[str, str]] = dataclasses.field(default_factory=list)
    parts: dict[str, str] = dataclasses.field(default_factory=dict)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def policy(self) -> Any:
        from simulator.calibration.harness import TimingPolicy

        return (TimingPolicy(warmup_s=0.0, budget_s=0.005, min_reps=2, max_reps=5) if self.dry
                else TimingPolicy(warmup_s=0.05, budget_s=0.2, min_reps=5, max_reps=200))

    @property
    def loop_s(self) -> float:
        return 0.2 if self.dry else 6.0

    def measure(self, cases: list[Any], part: str) -> None:
        """Time ``cases`` with the project's harness; skipped cases are noted under the part."""
        from simulator.calibration.harness import run_cases

        ms, skipped = run_cases(cases, device=self.device, device_name=self.device_name, backend="torch",
                                policy=self.policy)
        self.rows.extend(dataclasses.replace(m, source=f"measured: benchmarks/device/run.py ({part} part)")
                         for m in ms)
        if skipped:
            self.parts[part] = f"ran; skipped {len(skipped)}: " + "; ".join(f"{c.label}: {r}" for c, r in skipped)


def part_gemm(run: Run) -> None:
    from simulator.calibration.harness import Case

    shapes = _cases.DRY_TENSOR_GEMMS if run.dry else _cases.TENSOR_GEMMS
    dtypes = ("fp32",) if run.dry else ("bf16", "fp16")  # the CPU has no portable half-precision loop
    run.measure([Case(s.workload, dt, "gemm") for dt in dtypes for s in shapes], "gemm")


def part_fp32(run: Run) -> None:
    from simulator.calibration.harness import Case

    shapes = _cases.DRY_FP32_GEMMS if run.dry else _cases.FP32_GEMMS
    run.measure([Case(s.workload, "fp32", "gemm") for s in shapes], "fp32")


def part_stream(run: Run) -> None:
    from simulator.calibration.harness import Case

    sizes = _cases.DRY_STREAM_BYTES if run.dry else _cases.STREAM_BYTES
    dt, nbytes = ("fp32", 4) if run.dry else ("bf16", 2)
    cases = [Case(w, dt, "copy" if w.startswith("copy") else "elementwise")
             for b in sizes for w in _cases.stream_workloads(b, nbytes)]
    run.measure(cases, "stream")


def part_launch(run: Run) -> None:
    from simulator.calibration.harness import Case

    run.measure([Case(_cases.LAUNCH_WORKLOAD, "fp32", "launch")], "launch")
    torch = run.torch
    if not run.device.startswith("cuda"):
        run.parts["launch"] = "ran the one-element add; the empty kernel (torch.cuda._sleep(0)) needs a GPU"
        return
    run.extra["empty_kernel"] = empty_kernel(torch)


def empty_kernel(torch: Any, launches: int = 2000) -> dict[str, float | str]:
    """An empty kernel (``torch.cuda._sleep(0)``): its device time alone and back-to-back launch rate."""
    for _ in range(100):
        torch.cuda._sleep(0)
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    single = []
    for _ in range(200):
        start.record()
        torch.cuda._sleep(0)
        stop.record()
        stop.synchronize()
        single.append(start.elapsed_time(stop) * 1e-3)
    t0 = time.perf_counter()
    for _ in range(launches):
        torch.cuda._sleep(0)
    torch.cuda.synchronize()
    wall = time.perf_counter() - t0
    single.sort()
    return {"event_time_median_s": single[len(single) // 2], "back_to_back_per_launch_s": wall / launches,
            "launches": float(launches), "method": "torch.cuda._sleep(0); CUDA events around one launch; "
                                                   "wall time of back-to-back launches / launches"}


def part_fp8(run: Run) -> None:
    torch = run.torch
    if not run.device.startswith("cuda"):
        raise _Skip("fp8 GEMMs need a CUDA GPU (cuBLASLt scaled matmul)")
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        raise _Skip(f"torch {torch.__version__} has no torch._scaled_mm / float8_e4m3fn")
    major, minor = torch.cuda.get_device_capability(torch.device(run.device))
    if (major, minor) < (8, 9):
        raise _Skip(f"fp8 tensor cores need compute capability 8.9 or newer; got {major}.{minor}")
    for s in (_cases.DRY_FP8_GEMMS if run.dry else _cases.FP8_GEMMS):
        run.rows.append(time_fp8(run, s))


def fp8_runner(torch: Any, device: str, s: Any) -> Any:
    """A closure running one fp8 e4m3 GEMM (A row-major, B stored (n, k)) with bf16 output."""
    a = torch.randn(s.m, s.k, device=device).to(torch.float8_e4m3fn)
    b = torch.randn(s.n, s.k, device=device).to(torch.float8_e4m3fn).t()
    one = torch.ones((), device=device)
    return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def time_fp8(run: Run, s: Any) -> Any:
    import numpy as np

    from simulator.calibration.harness import environment, time_runner
    from simulator.calibration.measurements import Measurement

    torch = run.torch
    fn = fp8_runner(torch, run.device, s)

    def events() -> tuple[Any, Any]:
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    t = time_runner(fn, torch.cuda.synchronize, run.policy, events)
    env = environment(run.device, "torch")
    q1, med, q3 = np.percentile(t, [25, 50, 75])
    return Measurement(id="", workload=dataclasses.replace(s, transpose=2).workload, device=run.device_name or "",
                       dtype="fp8_e4m3", median_s=float(med), category="gemm", min_s=float(t.min()),
                       repetitions=int(t.size), iqr_s=float(q3 - q1), framework="torch",
                       framework_version=env["framework_version"], driver_version=env["driver_version"],
                       date=env["date"], host=env["host"],
                       source="measured: benchmarks/device/run.py (fp8 part: torch._scaled_mm, bf16 output)")


class _Skip(Exception):
    """A part that cannot run here, with the reason."""


def part_layer(run: Run) -> None:
    from simulator.calibration.executor import compile_graph
    from simulator.calibration.harness import Case
    from workloads.resolve import load_workload

    cfg, batch, seq, dt = _layer.layer_cases(run.dry)
    cfg = cfg.relative_to(ROOT).as_posix()  # main() runs from the repository root
    cases = [Case(cfg, dt, "e2e_layer", batch=batch, seq=seq, phase="forward"),
             Case(cfg, dt, "e2e_layer", batch=batch, seq=seq, train=True)]
    run.measure(cases, "layer")
    for case in cases:
        graph = load_workload(case.workload, batch=batch, seq=seq, phase=case.phase, train=case.train, dtype=dt)
        runner = compile_graph(graph, device=run.device, backend="torch")
        grad = run.torch.no_grad() if runner.needs_autograd else run.torch.inference_mode()
        with grad:
            run.layer.extend(_layer.kernel_rows(run.torch, runner, run.device, "train" if case.train else "forward"))
        del runner


def part_gemm_timing(run: Run) -> None:
    """The small GEMMs of the published H100 rows by ``do_bench``'s flushed event pair, CUDA-graph replay and the
    profiler's kernel records, with the kernels each call launched (``_gemm_timing``)."""
    cases = list(_cases.DRY_TIMING_GEMMS if run.dry else _cases.TIMING_GEMMS)
    calls, flush = (3, 1 << 16) if run.dry else (_gemm_timing.CALLS, _gemm_timing.FLUSH_BYTES)
    run.timing.extend(_gemm_timing.rows(run.torch, cases, run.device, calls, flush))


def _power_cases(run: Run) -> list[tuple[str, str, str, Any]]:
    """(kind, workload, dtype, runner) of each power loop."""
    from simulator.calibration.executor import compile_graph
    from workloads.resolve import load_workload

    if run.dry:
        spec = [("gemm", "gemm:m=64,n=64,k=64", "fp32")]
    else:
        spec = [("gemm", f"gemm:m={s},n={s},k={s}", "bf16") for s in (4096, 8192, 16384)]
        spec += [("gemm", "gemm:m=8192,n=8192,k=8192", dt) for dt in ("fp16", "fp32", "tf32")]
        spec += [("copy", "copy:bytes=1073741824", "bf16"), ("elementwise", "elementwise:numel=536870912,op=add",
                                                             "bf16")]
    out = [(k, w, dt, compile_graph(load_workload(w, dtype=dt), device=run.device, backend="torch"))
           for k, w, dt in spec]
    if not run.dry and "fp8" not in run.parts:  # the fp8 part ran: its GEMMs are supported here
        for s in (8192, 16384):
            shape = _cases.GemmShape(s, s, s, transpose=2)
            out.append(("gemm", shape.workload, "fp8_e4m3", fp8_runner(run.torch, run.device, shape)))
    return out


def part_power(run: Run) -> None:
    from simulator.calibration.harness import _execution_mode

    if not run.device.startswith("cuda"):
        raise _Skip("board power needs a GPU (NVML or nvidia-smi)")
    sampler = _power.Sampler(index=int(run.device.split(":")[1]) if ":" in run.device else 0)
    why = sampler.available()
    if why:
        raise _Skip(why)
    run.extra["power_sampler"] = sampler.backend
    sampler.start()
    time.sleep(run.loop_s)
    idle = [s for s in sampler.stop() if s[0] >= 0]
    run.extra["idle_power_w"] = sum(s[1] for s in idle) / len(idle) if idle else None
    for i, (kind, w, dt, runner) in enumerate(_power_cases(run)):
        with _execution_mode(run.torch, run.device, dt, getattr(runner, "needs_autograd", False)):
            loop = _power.run_loop(runner, run.torch.cuda.synchronize, sampler, run.loop_s)
        row = _power.power_row(loop, rid=f"power-{i + 1:03d}", kind=kind, workload=w, dtype=dt,
                               device=run.device_name or "", framework=f"torch {run.torch.__version__} eager")
        if row is None:
            run.parts["power"] = f"ran; {w} {dt}: no sample after settling"
        else:
            run.power.append(row)


def write_outputs(run: Run, meta: dict[str, Any]) -> None:
    from simulator.calibration.energy_validation import ENERGY_COLUMNS
    from simulator.calibration.measurements import MeasurementSet

    run.out.mkdir(parents=True, exist_ok=True)
    rows = tuple(dataclasses.replace(m, id=f"device-{k + 1:03d}") for k, m in enumerate(run.rows))
    MeasurementSet(rows, "benchmarks/device/run.py").to_csv(run.out / "kernels.csv")
    if run.power:
        with open(run.out / "power.csv", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=ENERGY_COLUMNS)
            w.writeheader()
            w.writerows({c: r.get(c, "") for c in ENERGY_COLUMNS} for r in run.power)
    for name, rows_ in (("layer_kernels.csv", run.layer), ("gemm_timing.csv", run.timing)):
        if rows_:
            with open(run.out / name, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=list(rows_[0]))
                w.writeheader()
                w.writerows(rows_)
    meta.update(parts=run.parts, **run.extra)
    (run.out / "metadata.json").write_text(json.dumps(meta, indent=2, sort_keys=True, default=str) + "\n")


def run_parts(run: Run, parts: list[str]) -> None:
    """Run each part; a missing library or an unsupported feature skips that part with the reason."""
    fns = {"gemm": part_gemm, "fp8": part_fp8, "fp32": part_fp32, "launch": part_launch, "stream": part_stream,
           "layer": part_layer, "power": part_power, "gemm_timing": part_gemm_timing}
    for name in parts:
        t0 = time.perf_counter()
        try:
            fns[name](run)
            run.parts.setdefault(name, "ran")
        except _Skip as exc:
            run.parts[name] = f"skipped: {exc}"
        except (ImportError, RuntimeError, NotImplementedError, OSError) as exc:  # a library or the device refused
            run.parts[name] = f"skipped: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        except Exception as exc:  # noqa: BLE001 - one run on a lent GPU: a failing part must not lose the others
            logger.exception("%s failed", name)
            run.parts[name] = f"failed: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        logger.info("%s: %s (%.1f s)", name, run.parts[name], time.perf_counter() - t0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the CSVs and metadata.json")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (default cuda)")
    ap.add_argument("--device-name", help="catalog device name (default: detected from the GPU)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU: every code path, seconds")
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        print(f"--parts: unknown {', '.join(bad)}; expected some of {', '.join(PARTS)}", file=sys.stderr)
        return 2
    device = "cpu" if args.dry_run else args.device
    args.out = args.out.resolve()
    os.chdir(ROOT)  # workloads name files relative to the repository root
    run = Run(out=args.out, device=device, dry=args.dry_run, device_name=args.device_name)
    try:
        import torch

        run.torch = torch
    except ImportError:
        run.parts = {p: "skipped: torch is not installed" for p in parts}
        parts = []
    if parts and device.startswith("cuda") and not run.torch.cuda.is_available():
        print(f"--device {device}: torch {run.torch.__version__} sees no CUDA GPU; use --dry-run on a CPU",
              file=sys.stderr)
        return 2
    if parts and device.startswith("cuda") and run.device_name is None:
        from simulator.calibration.harness import detect_device_name

        run.device_name = detect_device_name(device)
    meta = _meta.collect(device, run.torch, run.device_name)
    run_parts(run, parts)
    write_outputs(run, meta)
    print(f"wrote {len(run.rows)} timings, {len(run.power)} power loops, {len(run.layer)} kernel rows to {run.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
