"""Sweep speed: vectorised hardware variants versus the per-point loop, measured side by side.

Usage::

    python benchmarks/bench_sweep.py            # the figures of docs/sweep_speed.md
    python benchmarks/bench_sweep.py --quick    # smaller sweeps (a smoke run)
    python benchmarks/bench_sweep.py --dask     # also the Dask-versus-local overhead per point

Figures (each with the per-point loop measured in the same run on a sample of the same points and
extrapolated, and the ratio):

1. GEMM-shaped ops: (op x hardware-variant) evaluations per second over a bandwidth x tensor-rate
   grid: for one unique GEMM kernel (90,000 variants), the component model alone
   (:func:`hwmodels.gpu.gemm`) and :func:`simulator.engines.vectorized.evaluate_variants` in one and
   in two processes (2 cores); for a transformer prefill whose repeated layers are costed once per
   unique op (10,000 variants), in one and two processes. Each rate is printed per wall-clock
   second and per CPU-second (of the busier worker for two processes: the rate on cores of its own).
2. A systolic sweep of ResNet-50 (SCALE-Sim topology): array shapes x dataflows x scratchpad sizes,
   :func:`simulator.sweep.systolic.systolic_network_variants` versus ``nodeperf systolic``'s
   per-design call.
3. A GPU sweep of llama-2-7b decode over HBM bandwidth x tensor rate x batch: one graph per batch,
   one vectorised call for its hardware variants, versus :func:`evaluate` per point.
4. (``--dask``) seconds per point of :func:`simulator.sweep.run_sweep` on a local Dask cluster
   versus the local pool, on the same experiment.

Timings are wall-clock (``time.perf_counter``) on a shared machine: treat them as indicative, and
compare the ratios, which are measured in the same run.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hwmodels.paths import with_overrides  # noqa: E402
from simulator.engines.analytical import EvalOptions, evaluate  # noqa: E402
from simulator.engines.vectorized import evaluate_variants  # noqa: E402
from simulator.hardware import load_hardware  # noqa: E402
from simulator.sweep.systolic import systolic_network_variants  # noqa: E402

BW = "memory.hbm.read_bandwidth_bytes_per_s"
TENSOR = "compute.tensor_flops_per_s.bf16"


def machine() -> str:
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = ", load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()) if hasattr(os, "getloadavg") else ""
    return f"{model}; {usable} usable cores ({os.cpu_count()} logical CPUs){load}; Python " \
           f"{platform.python_version()}, numpy {np.__version__}"


def _grid(spec, n_bw: int, n_fl: int) -> dict[str, np.ndarray]:
    bw0 = spec.main_memory.read_bandwidth_bytes_per_s
    fl0 = spec.compute.tensor_flops_per_s["bf16"]
    b, f = np.meshgrid(np.linspace(0.5, 2.0, n_bw) * bw0, np.linspace(0.5, 2.0, n_fl) * fl0, indexing="ij")
    return {BW: b.ravel(), TENSOR: f.ravel()}


def _per_point_s(graph, spec, cols: dict[str, np.ndarray], sample: int, opts: EvalOptions | None = None) -> float:
    """Mean seconds of evaluate(graph, with_overrides(...)) over ``sample`` evenly spaced points."""
    n = len(next(iter(cols.values())))
    idx = np.linspace(0, n - 1, min(sample, n)).astype(int)
    evaluate(graph, with_overrides(spec, {p: c[0].item() for p, c in cols.items()}), opts)  # warm caches
    t0 = time.perf_counter()
    for i in idx:
        evaluate(graph, with_overrides(spec, {p: c[i].item() for p, c in cols.items()}), opts)
    return (time.perf_counter() - t0) / len(idx)


def _timed(fn, repeats: int = 1):
    best, out = float("inf"), None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def _timed_cpu(fn, repeats: int = 1) -> tuple[float, float]:
    """(best wall-clock s, CPU s of this process) over ``repeats`` runs (the CPU time is the rate an
    idle core would give; on a shared machine the wall clock also counts time spent waiting for one)."""
    best, cpu = float("inf"), float("inf")
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    return best, cpu


def _row(label: str, vec_rate: float, loop_rate: float, unit: str, cpu_rate: float | None = None) -> None:
    cpu = f"   (per CPU-second {cpu_rate:13,.0f})" if cpu_rate is not None else ""
    print(f"  {label:58s} {vec_rate:14,.0f} {unit}   per-point loop {loop_rate:10,.0f} {unit}   "
          f"ratio {vec_rate / loop_rate:8,.0f}x{cpu}")


# -- 1. GEMM-shaped ops ------------------------------------------------------------------------------

def _chunk_job(args):
    """One process's share of the variants: builds the graph (a zoo model, or a micro-workload when
    ``kwargs`` is None) and evaluates its variants; returns the latencies and the CPU seconds spent."""
    c0 = time.process_time()
    model, kwargs, spec_name, cols = args
    from simulator.engines.vectorized import evaluate_variants as _ev
    from simulator.hardware import load_hardware as _load
    from workloads.micro import build_micro as _micro
    from workloads.zoo import build_model as _build

    g = _micro(model) if kwargs is None else _build(model, **kwargs)
    lat = _ev(g, _load(spec_name), cols).latency_s
    return lat, time.process_time() - c0


def _two_processes(model: str, kwargs: dict | None, cols: dict[str, np.ndarray]) -> tuple[float, float]:
    """(wall s, CPU s of the busier worker) to evaluate ``cols`` split over two worker processes (pool
    started and warmed first)."""
    with ProcessPoolExecutor(2) as pool:
        halves = [{p: c[i::2] for p, c in cols.items()} for i in range(2)]
        list(pool.map(_chunk_job, [(model, kwargs, "h100-sxm5-80gb", {p: c[:8] for p, c in h.items()})
                                   for h in halves]))
        t0 = time.perf_counter()
        done = list(pool.map(_chunk_job, [(model, kwargs, "h100-sxm5-80gb", h) for h in halves]))
        return time.perf_counter() - t0, max(cpu for _, cpu in done)


def _gemm_model_rate(spec, micro: str, cols: dict[str, np.ndarray], repeats: int) -> float:
    """Variants per second of the GEMM component model alone (:func:`hwmodels.gpu.gemm` on a device
    spec holding the variant arrays, as the lowering calls it), in chunks of ``CHUNK_VARIANTS``."""
    from hwmodels import gpu
    from hwmodels.paths import resolve_path
    from simulator.engines.vectorized import CHUNK_VARIANTS, _array_device
    from workloads.micro import build_micro
    from workloads.semantics import gemm_dims

    op = next(iter(build_micro(micro)))
    _, m, n, k = gemm_dims(op)
    v = len(next(iter(cols.values())))
    full = {p: resolve_path(spec, p) for p in cols}
    params = []
    for lo in range(0, v, CHUNK_VARIANTS):
        dev = _array_device(spec, {p: c[lo:lo + CHUNK_VARIANTS] for p, c in cols.items()}, full)
        params.append(gpu.gpu_params(dev, "bf16"))
    cands = gpu.tile_candidates(spec.arch)

    def run() -> None:
        for p in params:
            gpu.gemm(m, n, k, p, cands)

    run()  # warm
    t, cpu = _timed_cpu(run, repeats=repeats)
    return v / t, v / cpu


def bench_gemm(quick: bool) -> None:
    from workloads.micro import build_micro
    from workloads.zoo import build_model

    h100 = load_hardware("h100-sxm5-80gb")
    n_side = 40 if quick else 100
    cols = _grid(h100, n_side, n_side)
    v = n_side * n_side
    k_side = 40 if quick else 300  # one kernel: a larger sweep, so fixed costs (pool, graph) are amortised
    kcols = _grid(h100, k_side, k_side)
    kv = k_side * k_side
    print("\n1. GEMM-shaped ops on h100-sxm5-80gb, hardware variants over HBM bandwidth x bf16 tensor rate "
          "(0.5x - 2x each)")
    print(f"  one unique GEMM kernel, {kv:,} variants:")
    for micro in ("gemm:m=4096,n=4096,k=4096", "gemm:m=16,n=4096,k=4096", "gemm:m=2048,n=11008,k=4096"):
        g = build_micro(micro)
        evaluate_variants(g, h100, {p: c[:64] for p, c in kcols.items()})  # warm
        per = _per_point_s(g, h100, kcols, 20)
        wall_rate, cpu_rate = _gemm_model_rate(h100, micro, kcols, 3)
        _row(f"{micro}: GEMM model alone", wall_rate, 1 / per, "op-var/s", cpu_rate)
        t, cpu = _timed_cpu(lambda g=g: evaluate_variants(g, h100, kcols), repeats=3)
        _row("  evaluate_variants, 1 process", kv / t, 1 / per, "op-var/s", kv / cpu)
        t2, cpu2 = min(_two_processes(micro, None, kcols) for _ in range(2))
        _row("  evaluate_variants, 2 processes (incl. graph build)", kv / t2, 1 / per, "op-var/s", kv / cpu2)
    print(f"  whole graph, {v:,} variants:")

    model, kw = "llama-2-7b", {"phase": "prefill", "seq": 512, "batch": 1}
    g = build_model(model, **kw)
    ops = sum(1 for _ in g)
    gemms = sum(1 for op in g if op.kind == "matmul")
    evaluate_variants(g, h100, {p: c[:64] for p, c in cols.items()})
    t, cpu = _timed_cpu(lambda: evaluate_variants(g, h100, cols), repeats=2)
    per = _per_point_s(g, h100, cols, 5)
    print(f"  {model} prefill seq 512: {ops} ops ({gemms} matmuls), {v:,} variants in {t:.2f} s "
          f"(per-point loop {per * 1e3:.1f} ms/point)")
    _row("whole graph, all ops x variants, 1 process", ops * v / t, ops / per, "op-var/s", ops * v / cpu)
    _row("whole graph, matmul ops x variants, 1 process", gemms * v / t, gemms / per, "op-var/s", gemms * v / cpu)
    t2, cpu2 = _two_processes(model, kw, cols)  # each process builds the graph and takes half the variants
    _row("whole graph, all ops x variants, 2 processes (incl. graph build)", ops * v / t2, ops / per, "op-var/s",
         ops * v / cpu2)
    _row("whole graph, matmul ops x variants, 2 processes", gemms * v / t2, gemms / per, "op-var/s",
         gemms * v / cpu2)


# -- 2. systolic ---------------------------------------------------------------------------------

def bench_systolic(quick: bool) -> None:
    from hwmodels.topology import read_topology
    from simulator.cli.systolic import evaluate_topology

    topo = read_topology(REPO / "studies/topologies/resnet50.csv")
    shapes = [8, 16, 32, 64, 128, 256]
    sizes_kib = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
    if quick:
        sizes_kib = sizes_kib[:4]
    grid = np.array(np.meshgrid(shapes, shapes, [0, 1, 2], sizes_kib, sizes_kib, sizes_kib, indexing="ij"))
    rows, cols, dfi, isz, fsz, osz = (a.ravel() for a in grid)
    df = np.array(["os", "ws", "is"])[dfi]
    n = rows.shape[0]
    bw = 16.0
    print(f"\n2. Systolic sweep, ResNet-50 (SCALE-Sim topology, {len(topo.layers)} layers): {n:,} designs = "
          f"{len(shapes)} rows x {len(shapes)} cols x 3 dataflows x {len(sizes_kib)}^3 scratchpad sizes, "
          f"DRAM {bw} words/cycle")
    t, res = _timed(lambda: systolic_network_variants(topo, rows, cols, df, isz * 1024, fsz * 1024, osz * 1024, bw))
    sample = np.linspace(0, n - 1, 100).astype(int)
    t0 = time.perf_counter()
    for i in sample:
        one = evaluate_topology(topo, int(rows[i]), int(cols[i]), str(df[i]),
                                sram_words=(int(isz[i]) * 1024, int(fsz[i]) * 1024, int(osz[i]) * 1024),
                                dram_words_per_cycle=bw)
        assert int(np.sum(one.total_cycles)) == res.total_cycles[i]
    per = (time.perf_counter() - t0) / len(sample)
    print(f"  vectorised: {t:.2f} s for {n:,} designs ({t * 1e5 / n:.2f} s per 100,000); per-design loop "
          f"{per * 1e3:.2f} ms/design -> {per * n:.0f} s extrapolated; cycles identical on the 100 sampled designs")
    _row("designs per second", n / t, 1 / per, "designs/s")


# -- 3. llama decode -----------------------------------------------------------------------------

def bench_llama_decode(quick: bool) -> None:
    from workloads.zoo import build_model

    h100 = load_hardware("h100-sxm5-80gb")
    batches = [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, 256]
    n_side = 25
    if quick:
        batches, n_side = batches[:4], 10
    cols = _grid(h100, n_side, n_side)
    n = len(batches) * n_side * n_side
    print(f"\n3. GPU sweep, llama-2-7b decode (context 2048) on h100-sxm5-80gb: {n:,} points = "
          f"{len(batches)} batches x {n_side} HBM bandwidths x {n_side} bf16 tensor rates")
    t0 = time.perf_counter()
    build_s = 0.0
    lat = []
    for b in batches:
        tb = time.perf_counter()
        g = build_model("llama-2-7b", phase="decode", batch=b, context=2048)
        build_s += time.perf_counter() - tb
        lat.append(evaluate_variants(g, h100, cols).latency_s)
    t = time.perf_counter() - t0
    g = build_model("llama-2-7b", phase="decode", batch=batches[len(batches) // 2], context=2048)
    per = _per_point_s(g, h100, cols, 10)
    print(f"  vectorised: {t:.2f} s in all ({build_s:.2f} s building {len(batches)} graphs); per-point loop "
          f"{per * 1e3:.1f} ms/point -> {per * n:.0f} s extrapolated (graph build not counted)")
    _row("points per second", n / t, 1 / per, "points/s")


# -- 4. Dask ------------------------------------------------------------------------------------------

def bench_dask(quick: bool) -> None:
    from simulator.sweep import run_sweep

    exp = REPO / "studies/experiments/llm_decode_what_if.toml"
    try:
        from dask.distributed import LocalCluster
    except ImportError:
        print("\n4. skipped: dask.distributed is not installed")
        return
    with tempfile.TemporaryDirectory() as tmp:
        if quick:  # 4 batches x 2 contexts x the 128 hardware variants: 1,024 points
            text = exp.read_text().replace("batch = {pow2 = [1, 128]}", "batch = {pow2 = [1, 8]}")
            text = text.replace("context = {range = [256, 4096], step = 256}", "context = {range = [512, 1024], step = 512}")
            exp = Path(tmp) / "llm_decode_small.toml"
            exp.write_text(text)
        print(f"\n4. run_sweep overhead per point, Dask (local cluster, 2 worker processes) vs local pool (2 "
              f"workers): {exp.name}")
        t0 = time.perf_counter()
        s_local = run_sweep(exp, Path(tmp) / "local.sqlite", scheduler="local", workers=2, progress=False)
        t_local = time.perf_counter() - t0
        with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
            t0 = time.perf_counter()
            try:
                s_dask = run_sweep(exp, Path(tmp) / "dask.sqlite", scheduler=cluster.scheduler_address,
                                   progress=False)
            except Exception as exc:  # noqa: BLE001 - report the failure as a figure line, keep the others
                print(f"  local pool: {t_local:.2f} s for {s_local.computed} points; Dask run failed: "
                      f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                return
            t_dask = time.perf_counter() - t0
    n_local = getattr(s_local, "computed", None) or getattr(s_local, "points", None)
    n_dask = getattr(s_dask, "computed", None) or getattr(s_dask, "points", None)
    print(f"  local pool: {t_local:.2f} s for {n_local} points ({t_local / max(1, n_local) * 1e3:.2f} ms/point)")
    print(f"  Dask:       {t_dask:.2f} s for {n_dask} points ({t_dask / max(1, n_dask) * 1e3:.2f} ms/point)")
    print(f"  Dask overhead: {(t_dask / max(1, n_dask) - t_local / max(1, n_local)) * 1e3:+.2f} ms/point")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="smaller sweeps")
    p.add_argument("--dask", action="store_true", help="also time run_sweep on a local Dask cluster")
    p.add_argument("--only", choices=("gemm", "systolic", "llama", "dask"), help="one figure only")
    args = p.parse_args(argv)
    logging.disable(logging.WARNING)  # the per-point loop's "does not fit" warnings are not figures
    print(f"machine: {machine()}")
    parts = {"gemm": bench_gemm, "systolic": bench_systolic, "llama": bench_llama_decode}
    if args.dask or args.only == "dask":
        parts["dask"] = bench_dask
    for name, fn in parts.items():
        if args.only is None or args.only == name:
            fn(args.quick)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
