"""Times `nodeperf tune` searches and compares the Bayesian search with random sampling of the same
budget against the exhaustive optimum (prints figures, asserts nothing).

Cases: gpt2 (seq 128) over 2 devices x 4 batches x 3 dtypes x 2 fusion (exhaustive, per-evaluation
cost of the analytical engine); a systolic design space for ResNet-50 (7 x 7 array sides x 3
dataflows x 4 SRAM sizes x 7 splits = 4116 designs, ``pes<=4096``): exhaustive, then bayes and random
with 40 evaluations for several seeds (cycles found relative to the optimum).

Run: ``python benchmarks/bench_tune.py [--seeds N]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from simulator.sweep.tune import parse_constraint, tune  # noqa: E402
from simulator.sweep.tune_model import ModelProblem  # noqa: E402
from simulator.sweep.tune_systolic import SystolicProblem, load_network  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8, help="seeds of the bayes/random comparison (default 8)")
    args = ap.parse_args()
    logging.getLogger("simulator").setLevel(logging.ERROR)

    problem = ModelProblem("gpt2", ["h100-sxm5-80gb", "a100-sxm4-40gb"], batch=(1, 4, 16, 64),
                           dtypes=("bf16", "fp8_e4m3", "int8"), fusion=(False, True), seq=128)
    t0 = time.perf_counter()
    res = tune(problem, [], "latency_s", "min", search="exhaustive")
    dt = time.perf_counter() - t0
    print(f"gpt2 exhaustive: {len(res.visited)} configurations, {res.evaluations} evaluated in {dt:.2f} s "
          f"({1e3 * dt / max(res.evaluations, 1):.1f} ms per configuration)")

    net = load_network(str(ROOT / "studies" / "topologies" / "resnet50.csv"))
    sides = (4, 8, 16, 32, 64, 128, 256)
    sp = SystolicProblem(net, rows=sides, cols=sides, sram_kib=(64.0, 128.0, 256.0, 512.0), dram_words_per_cycle=16)
    cons = [parse_constraint("pes<=4096", sp.metrics)]
    t0 = time.perf_counter()
    ex = tune(sp, cons, "cycles", "min", search="exhaustive")
    dt = time.perf_counter() - t0
    opt = ex.best[0].metrics["cycles"]
    print(f"resnet50 systolic exhaustive: {sp.space.size} designs, {ex.evaluations} evaluated, {ex.pruned} pruned "
          f"in {dt:.2f} s; optimum {opt:,.0f} cycles ({ex.best[0].config})")
    for method in ("random", "bayes"):
        ratios, times = [], []
        for seed in range(args.seeds):
            t0 = time.perf_counter()
            r = tune(sp, cons, "cycles", "min", search=method, trials=40, seed=seed)
            times.append(time.perf_counter() - t0)
            ratios.append(r.best[0].metrics["cycles"] / opt)
        hits = sum(x == 1.0 for x in ratios)
        print(f"  {method:6s} 40 evaluations x {args.seeds} seeds: best/optimum median {statistics.median(ratios):.3f}, "
              f"worst {max(ratios):.3f}, optimum found {hits}/{args.seeds}; {statistics.median(times):.2f} s per search")


if __name__ == "__main__":
    main()
