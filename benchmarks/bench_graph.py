"""Times graph construction, JSON round trips and training-step derivation for large transformers (prints figures, asserts nothing).

Targets (2-core machine): llama-2-70b prefill build <= 0.3 s, llama-3.1-405b prefill build <= 0.6 s,
llama-2-70b JSON round trip (serialise, parse, re-validate) <= 0.5 s.

Run: ``python benchmarks/bench_graph.py [--repeat N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from workloads.serialize import graph_from_json, graph_to_json  # noqa: E402
from workloads.training import training_graph  # noqa: E402
from workloads.zoo import build_model  # noqa: E402


def _time(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    """Median wall time in seconds over ``repeat`` runs, and the last result."""
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    build_model("gpt2", seq=8)  # import and registry warm-up, not timed

    rows = []
    for name, target in (("llama-2-70b", 0.3), ("llama-3.1-405b", 0.6)):
        t, g = _time(lambda n=name: build_model(n, phase="prefill", seq=4096, batch=1), args.repeat)
        rows.append((f"build {name} prefill", len(g), t, target))
    t, g = _time(lambda: build_model("llama-2-70b", phase="decode", context=4096, batch=8), args.repeat)
    rows.append(("build llama-2-70b decode", len(g), t, None))

    g70 = build_model("llama-2-70b", phase="prefill", seq=4096)

    def round_trip() -> Any:
        return graph_from_json(json.loads(json.dumps(graph_to_json(g70), separators=(",", ":"))))

    t, g2 = _time(round_trip, args.repeat)
    rows.append(("json round trip llama-2-70b", len(g2), t, 0.5))

    fwd = build_model("llama-2-7b", phase="train", seq=4096)
    t, step = _time(lambda: training_graph(fwd), args.repeat)
    rows.append(("training_graph llama-2-7b", len(step), t, None))
    t, step = _time(lambda: training_graph(fwd, recompute="full"), args.repeat)
    rows.append(("training_graph llama-2-7b full recompute", len(step), t, None))

    print(f"{'case':45s} {'ops':>6s} {'median s':>9s} {'target s':>9s}")
    for case, ops, t, target in rows:
        mark = "" if target is None else ("  ok" if t <= target else "  SLOW")
        print(f"{case:45s} {ops:6d} {t:9.4f} {'' if target is None else f'{target:9.2f}'}{mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
