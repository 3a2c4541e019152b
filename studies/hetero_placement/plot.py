"""Figure of the heterogeneous placement study: speedup and energy of GPU + systolic-array placement over
the GPU alone, per workload and objective, over the node's PCIe Gen5 link and an ideal link.

``python -m studies.hetero_placement`` draws it after the run (``--plot-only`` redraws it from the CSV).
"""

from __future__ import annotations

import csv
from pathlib import Path

_PANELS = (("latency", "used", "speedup", "latency speedup over the GPU alone\n(objective: latency)"),
           ("throughput", "used", "speedup", "pipelined throughput over the GPU alone\n(objective: throughput)"),
           ("energy", "used", "energy_ratio", "energy / GPU alone (objective: energy;\nunused devices power-gated)"),
           ("energy", "all", "energy_ratio", "energy / GPU alone (objective: energy;\nboth devices always powered)"))


def plot(csv_path: Path, out: Path) -> Path:
    """Draw the figure of the study's CSV at ``csv_path`` into ``out`` (PNG), creating its folder."""
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                "`python -m studies.hetero_placement` (or --out studies/hetero_placement)")
    out.parent.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(csv_path, newline="") as f:
        rows = list(csv.DictReader(f))
    workloads = list(dict.fromkeys(r["workload"] for r in rows))
    links = list(dict.fromkeys(r["link"] for r in rows))
    fig, axes = plt.subplots(1, 4, figsize=(15, 4.0), constrained_layout=True)
    width = 0.8 / max(1, len(links))
    for ax, (objective, idle, col, title) in zip(axes, _PANELS, strict=True):
        for j, link in enumerate(links):
            vals, slow = [], []
            for w in workloads:
                hit = [r for r in rows if r["workload"] == w and r["objective"] == objective and r["link"] == link
                       and r.get("idle", "used") == idle]
                vals.append(float(hit[0][col]) if hit else float("nan"))
                slow.append(float(hit[0]["latency_s"]) / float(hit[0]["gpu_latency_s"]) if hit else float("nan"))
            xs = [i + (j - (len(links) - 1) / 2) * width for i in range(len(workloads))]
            bars = ax.bar(xs, vals, width, label=f"{link} link" if link != "catalog" else "PCIe Gen5 x16 (catalog)",
                          hatch="//" if link == "ideal" else None, edgecolor="black", lw=0.4,
                          color="#4C72B0" if link == "catalog" else "#DD8452")
            for b, v, sl in zip(bars, vals, slow, strict=True):
                text = f"{v:.2f}" if objective != "energy" else f"{v:.2f}\nt{sl:.1f}x"
                ax.annotate(text, (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=5.5)
        ax.axhline(1.0, color="black", lw=0.6)
        top = max((float(r[col]) for r in rows if r["objective"] == objective and r.get("idle", "used") == idle),
                  default=1.0)
        ax.set_ylim(0, max(1.0, top) * 1.2)
        ax.set_xticks(range(len(workloads)))
        ax.set_xticklabels(workloads, rotation=30, ha="right", fontsize=7)
        ax.set_title(title, fontsize=8)
        ax.grid(True, axis="y", lw=0.3, alpha=0.6)
    axes[0].set_ylabel("ratio")
    axes[0].legend(fontsize=7, frameon=False)
    fig.suptitle("h100-plus-systolic128: H100 SXM5 + one 128x128 bf16 array card on PCIe Gen5 (exact placements; "
                 "energy panels: t = latency / GPU-alone latency)", fontsize=9)
    fig.savefig(out, dpi=200)
    plt.close(fig)
    return out
