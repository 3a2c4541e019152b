"""Speed of parallel predictions: a 3D-parallel GPT-3 175B training step on 1,024 A100s (closed-form
and discrete-event schedules) and a Llama-2-70B tensor-parallel decode step, in-process.

Usage: ``python benchmarks/bench_parallel.py [--repeat N]``. Prints the machine (CPU, cores, load
average: these machines are shared, so read the figures with the load), then one line per case
with the median and best wall time of ``N`` calls after one warm-up call, the median CPU time of the process
per call (what a call costs when the load exceeds the cores and the wall time counts waits), and the goal it
is held to (issue targets, not asserted in tests). What is kept between calls: the stage graphs of a (model,
plan, shape) with what each graph keeps (digest, engine walk, peak memory;
:func:`simulator.parallel.compose.clear_stage_graph_cache`), and the cost of each distinct kernel with
its record values under one spec and set of options
(:func:`simulator.engines.analytical.clear_kernel_cost_cache`). The first case is also timed with the
kernel costs cleared before each call (a new spec or options), and with both cleared (a first call). The last lines print what the two schedule engines predict for the GPT-3 step, side by
side.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path


def _time(fn: Callable[[], object], repeat: int) -> tuple[float, float, float, object]:
    """(median wall, best wall, median CPU seconds of this process, last result) of ``repeat`` calls after a
    warm one. The CPU seconds are what a call costs whatever else the machine runs: on a shared machine whose
    load exceeds its cores, the wall time also counts the time the call waited for a core."""
    out = fn()  # warm: catalog, zoo and import caches
    times, cpu = [], []
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        out = fn()
        cpu.append(time.process_time() - c)
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), statistics.median(cpu), out


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    from simulator.engines.analytical import clear_kernel_cost_cache
    from simulator.engines.discrete_event import simulate
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import clear_stage_graph_cache, evaluate_plan
    from workloads.parallel import ParallelPlan, plan_graphs

    a100s = load_hardware("dgx-a100x128")
    dgx = load_hardware("dgx-h100")
    plan3d = ParallelPlan(tp=8, pp=16, dp=8, microbatch=1, global_batch=1536, sequence_parallel=True)
    gpt3 = {"train": True, "seq": 2048, "recompute": "selective"}
    v5p = load_hardware("tpu-v5p-2048")
    plan_tpu = ParallelPlan(tp=16, dp=64, fsdp=True, microbatch=4, global_batch=256)

    def decode_graph_des() -> object:
        g = plan_graphs("llama-2-70b", ParallelPlan(tp=8), phase="decode", context=4096, batch=16)[0].graph
        return simulate(g, dgx)

    cases: list[tuple[str, float | None, Callable[[], object]]] = [
        ("GPT-3 175B training step, 1,024 A100s (tp 8, pp 16, dp 8, 192 microbatches), closed-form schedule",
         0.050, lambda: evaluate_plan("gpt3-175b", a100s, plan3d, **gpt3)),
        ("the same step, kept kernel costs cleared before each call", 0.050,
         lambda: (clear_kernel_cost_cache(), evaluate_plan("gpt3-175b", a100s, plan3d, **gpt3))[1]),
        ("the same step, kernel costs and stage graphs cleared before each call (a first call)", None,
         lambda: (clear_kernel_cost_cache(), clear_stage_graph_cache(),
                  evaluate_plan("gpt3-175b", a100s, plan3d, **gpt3))[2]),
        ("the same step through the discrete-event pipeline engine (links, DP stream)", 5.0,
         lambda: evaluate_plan("gpt3-175b", a100s, plan3d, engine="des", **gpt3)),
        ("Llama-2-70B training step, 1,024 TPU v5p chips (tpu-v5p-2048: tp 16, dp 64 FSDP, MaxText, full remat)",
         0.050, lambda: evaluate_plan("llama-2-70b", v5p, plan_tpu, train=True, seq=4096, recompute="full",
                                      framework="maxtext")),
        ("Llama-2-70B decode step (batch 16, context 4096), TP 8 on dgx-h100, op-level discrete-event engine",
         1.0, decode_graph_des),
        ("the same decode step through evaluate_plan(engine='des')", 1.0,
         lambda: evaluate_plan("llama-2-70b", dgx, ParallelPlan(tp=8), phase="decode", context=4096, batch=16,
                               engine="des")),
    ]
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"machine: {_cpu()}, {os.cpu_count()} logical cores, Python {platform.python_version()}, "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    outs = []
    for name, goal, fn in cases:
        med, best, cpu, out = _time(fn, args.repeat)
        outs.append(out)
        target = "no goal" if goal is None else f"goal <= {goal * 1e3:.0f} ms: {'meets' if med <= goal else 'misses'}"
        print(f"{name}: median {med * 1e3:.1f} ms, best {best * 1e3:.1f} ms, CPU {cpu * 1e3:.1f} ms a call "
              f"({target})")
    closed, des = outs[0], outs[3]  # the GPT-3 step, closed form and DES
    print(f"GPT-3 step: closed form {closed.latency_s:.4f} s (bubble {closed.breakdown['bubble_s']:.4f} s, "
          f"DP sync exposed {closed.breakdown['dp_sync_exposed_s']:.4f} s); discrete-event {des.latency_s:.4f} s "
          f"(bubble {des.breakdown['bubble_s']:.4f} s, DP sync exposed {des.breakdown['dp_sync_exposed_s']:.4f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
