"""Speed of `nodeperf realtime`: costing, response-time analysis and the event loop, in-process, medians.

Usage: ``python benchmarks/bench_realtime.py [--repeat N] [--frames N]``. For the AV perception scenario
(``studies/av_perception/scenario.toml``, 7 tasks, 2 chains) on Jetson AGX Orin (GPU + DLA split), with
and without shared-DRAM contention and transfers between its engines, and on one L4, and for a 4-task
scenario of micro-workloads, it prints the time to cost every task (every object count of the
tracker), to run the analysis, and to simulate N frames, with the jobs simulated per second. Nothing
here is asserted: these machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import platform
from pathlib import Path

from _timing import median_time

ROOT = Path(__file__).resolve().parents[1]
MICRO = """
[[tasks]]
name = "camera"
model = "elementwise:numel=1048576,op=mul"
device = "gpu"
rate = "30 Hz"
jitter = "2 ms"
deadline = "5 ms"
[[tasks]]
name = "detector"
model = "gemm:m=4096,n=4096,k=4096"
device = "gpu"
after = ["camera"]
deadline = "30 ms"
[[tasks]]
name = "lidar"
model = "gemm:m=2048,n=2048,k=8192"
device = "gpu"
rate = "10 Hz"
deadline = "100 ms"
[[tasks]]
name = "planner"
model = "gemm:m=512,n=512,k=2048"
device = "gpu"
rate = "20 Hz"
after = ["detector", "lidar"]
deadline = "50 ms"
"""




def _median(fn, repeat):  # cold: the first call is timed too
    return median_time(fn, repeat, warm=False)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--frames", type=int, default=10000)
    args = p.parse_args()
    import logging
    import tempfile

    logging.disable(logging.WARNING)
    from simulator.realtime.costing import cost_scenario, memory_pools, resolve_node
    from simulator.realtime.rta import analyse
    from simulator.realtime.scenario import load_scenario
    from simulator.realtime.simulate import simulate_scenario

    with tempfile.TemporaryDirectory() as tmp:
        micro = Path(tmp) / "micro.toml"
        micro.write_text(MICRO)
        av = ROOT / "studies/av_perception/scenario.toml"
        cases = [("av-perception", av, "jetson-agx-orin-64gb", True), ("av-perception", av, "jetson-agx-orin-64gb", False),
                 ("av-perception", av, "l4", True), ("4 micro tasks", micro, "l4", True)]
        print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
              f"{args.frames} frames, median of {args.repeat}")
        print(f"{'scenario':<15} {'hardware':<22} {'shared':<6} {'cost':>8} {'analyse':>8} {'simulate':>9} {'jobs':>7} "
              f"{'jobs/s':>9}")
        for label, path, hw, shared in cases:
            scn = load_scenario(path)
            node = resolve_node(hw)
            pools = memory_pools(node) if shared else ()
            t_cost, costs = _median(lambda scn=scn, node=node, shared=shared: cost_scenario(scn, node, transfers=shared),
                                    args.repeat)
            t_an, an = _median(lambda scn=scn, costs=costs, pools=pools: analyse(scn, costs, pools), args.repeat)
            specs = {d.name: d.spec.name for d in node.devices}
            t_sim, r = _median(lambda scn=scn, costs=costs, an=an, specs=specs, hw=hw: simulate_scenario(
                scn, costs, an, node_name=hw, device_specs=specs, frames=args.frames), args.repeat)
            jobs = sum(t.stats.count for t in r.tasks)
            flag = ("on" if pools else "-") if shared else "off"
            print(f"{label:<15} {hw:<22} {flag:<6} {t_cost:>7.2f}s {t_an * 1e3:>6.1f}ms {t_sim:>8.2f}s {jobs:>7} "
                  f"{jobs / t_sim:>9.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
