"""Run the heterogeneous placement study: GPU + systolic-array placement versus the GPU alone, as CSV and figure.

Usage: ``python -m studies.hetero_placement [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/hetero_placement/run.py ...`` from anywhere. ``results.csv`` and
``hetero_placement.png`` go to ``out/hetero_placement/`` under the repository root by default (``out/`` is
not tracked); the committed ones are refreshed with ``python -m studies.hetero_placement --out
studies/hetero_placement --figures docs/figures``.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, rows_step, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
CSV_NAME = "results.csv"
FIGURE_NAME = "hetero_placement.png"
COLUMNS = ("workload", "model", "objective", "idle", "link", "ops", "ops_on_accelerator", "flops_share_on_accelerator",
           "transfers", "transfer_bytes", "gpu_latency_s", "gpu_energy_j", "latency_s", "energy_j",
           "gpu_throughput_per_s", "throughput_per_s", "speedup", "energy_ratio", "method", "exact")


def _ideal(node: Any, a: str, b: str) -> Any:
    """``node`` with the a-b link replaced by an ideal one (an upper bound on what any link allows)."""
    from hwmodels.node import NodeLink

    return node.with_link(NodeLink(a=a, b=b, kind="ideal", bandwidth_bytes_per_s=math.inf, latency_s=0.0,
                                   energy_j_per_byte=0.0, source="ideal link: infinite bandwidth, no latency"))


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (workload, objective, link)."""
    from hwmodels.node import load_node
    from simulator.realtime.partition import cost_table, partition
    from workloads.resolve import load_workload

    base = load_node(cfg["node"]).restrict(cfg["devices"])
    gpu, acc = cfg["devices"]
    nodes = {"catalog": base, "ideal": _ideal(base, gpu, acc)}
    bar = study_progress(len(cfg["workloads"]))
    rows = []
    for w in cfg["workloads"]:
        g = load_workload(w["model"], batch=w.get("batch"), seq=w.get("seq"), phase=w.get("phase"),
                          context=w.get("context"), dtype=w.get("dtype"))
        costs = cost_table(g, base)  # the same op costs for both links
        flops = {op.name: float(op.flops) for op in g}
        total_flops = sum(flops.values()) or 1.0
        cases = [(o, i) for o in cfg["objectives"] for i in (cfg.get("idle_policies", ["used"]) if o == "energy"
                                                               else ["used"])]
        for objective, idle in cases:
            for link in cfg["links"]:
                r = partition(g, nodes[link], objective, costs=costs, idle=idle)
                on_acc = [op for op, d in r.placement.items() if d == acc]
                single = r.single_device[gpu]
                thr = r.throughput_per_s if objective == "throughput" else 1.0 / r.latency_s
                gpu_thr = 1.0 / single["latency_s"]
                rows.append({
                    "workload": w["label"], "model": g.name, "objective": objective, "idle": idle, "link": link,
                    "ops": len(g), "ops_on_accelerator": len(on_acc),
                    "flops_share_on_accelerator": sum(flops[o] for o in on_acc) / total_flops,
                    "transfers": len(r.transfers), "transfer_bytes": float(sum(t.nbytes for t in r.transfers)),
                    "gpu_latency_s": single["latency_s"], "gpu_energy_j": single["energy_j"],
                    "latency_s": r.latency_s, "energy_j": r.energy_j, "gpu_throughput_per_s": gpu_thr,
                    "throughput_per_s": thr,
                    "speedup": (thr / gpu_thr) if objective == "throughput" else single["latency_s"] / r.latency_s,
                    "energy_ratio": r.energy_j / single["energy_j"], "method": r.method, "exact": r.exact,
                })
        bar.update(1)
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "node": "node", "devices": "member[]", "objectives": "objective[]", "links": "{catalog|ideal}[]", "?idle_policies": "idle[]",
    "workloads[].label": "str", "workloads[].model": "model", "?workloads[].phase": "phase",
    "?workloads[].batch": "int>0", "?workloads[].seq": "int>0", "?workloads[].context": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    from studies.hetero_placement.plot import plot

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: [plot(out / CSV_NAME, figs / FIGURE_NAME)])


if __name__ == "__main__":
    sys.exit(main())
