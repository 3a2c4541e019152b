"""Speed of the discrete-event engine with device contention next to the analytical engine, in-process, medians.

Usage: ``python benchmarks/bench_des.py [--repeat N]``. For each graph it prints the analytical
``evaluate`` time and the ``simulate`` time at 1, 2 and 4 streams, the ratio of the two, the
predicted latencies and how many ops the shared-device model slowed (ops that ran beside others and
got less than their standalone share of SMs, bandwidth or power). Nothing here is asserted: these
machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import platform

from _timing import median_time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from simulator.engines.analytical import evaluate
    from simulator.engines.discrete_event import simulate
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload
    from workloads.training import training_graph
    from workloads.zoo import build_model

    hw = load_hardware("h100-sxm5-80gb")
    cases = [
        ("inception_v3 batch 32", build_model("inception_v3", batch=32)),
        ("resnet50 training step", training_graph(build_model("resnet50", phase="train"))),
        ("llama-2-7b decode batch 8, context 2048", load_workload("llama-2-7b", phase="decode", batch=8, context=2048)),
    ]
    print(f"machine: {platform.processor() or platform.machine()}, Python {platform.python_version()}")
    for name, graph in cases:
        t_eval, rep = median_time(lambda g=graph: evaluate(g, hw), args.repeat)
        print(f"{name} ({len(graph.ops)} ops): evaluate {t_eval * 1e3:.1f} ms, latency {rep.total_latency_s * 1e3:.3f} ms")
        for streams in (1, 2, 4):
            t_sim, res = median_time(lambda g=graph, s=streams: simulate(g, hw, streams=s), args.repeat)
            slowed = res.provenance.get("contention", {}).get("slowed_ops", 0)
            print(f"  des, {streams} stream(s): {t_sim * 1e3:.1f} ms ({t_sim / t_eval:.1f}x evaluate), "
                  f"latency {res.latency_s * 1e3:.3f} ms, ops slowed by sharing: {slowed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
