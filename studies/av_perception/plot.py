"""Figures of the AV perception study: end-to-end latency CDFs with the deadline marked, and the
deadline-miss rate of every task and chain versus power mode, for each placement.

``python -m studies.av_perception`` draws them after the run (``--plot-only`` redraws them from the CSVs).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

FIGURES = ("av_response_cdf.png", "av_miss_rate.png")


def _read(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file; expected the CSVs of "
                                "`python -m studies.av_perception` (or --out studies/av_perception)")
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _watts(mode: str) -> float:
    return float(mode.rstrip("wW"))


def plot(results: Path, out: Path) -> tuple[Path, Path]:
    """Draw both figures from the CSVs in folder ``results`` into folder ``out`` (created)."""
    rows = _read(results / "results.csv")
    cdf = _read(results / "cdf.csv")
    out.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    placements = list(dict.fromkeys(r["placement"] for r in rows))
    modes = sorted(dict.fromkeys(r["power_mode"] for r in rows), key=_watts)
    chains = list(dict.fromkeys(r["name"] for r in rows if r["kind"] == "chain"))
    deadline = {(r["kind"], r["name"]): float(r["deadline_s"]) for r in rows}
    bound = {(r["placement"], r["power_mode"], r["kind"], r["name"]): float(r["wcrt_bound_s"]) for r in rows}
    curves: dict[tuple[str, str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for r in cdf:
        curves[(r["placement"], r["power_mode"], r["kind"], r["name"])].append(
            (float(r["percentile"]), float(r["response_s"])))
    colours = plt.get_cmap("viridis")

    # 1. CDFs of the chains' end-to-end latency, one panel per (chain, placement)
    fig, axes = plt.subplots(len(chains), len(placements), figsize=(4.2 * len(placements), 3.0 * len(chains)),
                             squeeze=False, constrained_layout=True, sharex=True)
    for ci, chain in enumerate(chains):
        for pi, pl in enumerate(placements):
            ax = axes[ci][pi]
            for mi, mode in enumerate(modes):
                pts = sorted(curves.get((pl, mode, "chain", chain), []))
                if not pts:
                    continue
                col = colours(mi / max(1, len(modes) - 1))
                ax.plot([v * 1e3 for _, v in pts], [p / 100 for p, _ in pts], color=col, lw=1.4, label=mode.upper())
                b = bound[(pl, mode, "chain", chain)]
                if b == b and b != float("inf"):
                    ax.axvline(b * 1e3, color=col, lw=0.8, ls=":")
            ax.axvline(deadline[("chain", chain)] * 1e3, color="crimson", lw=1.2, ls="--", label="deadline")
            ax.set_xscale("log")
            ax.set_ylim(0, 1.02)
            ax.grid(True, which="both", lw=0.3, alpha=0.6)
            ax.set_title(f"{chain}, {pl}", fontsize=9)
            if ci == len(chains) - 1:
                ax.set_xlabel("end-to-end latency (ms, log)")
            if pi == 0:
                ax.set_ylabel("fraction of frames")
    axes[0][0].legend(fontsize=7, frameon=False, loc="lower right")
    fig.suptitle("AV perception on Jetson AGX Orin 64GB: chain latency CDF per power mode "
                 "(dotted: worst-case bound)", fontsize=9)
    cdf_png = out / FIGURES[0]
    fig.savefig(cdf_png, dpi=200)
    plt.close(fig)

    # 2. deadline-miss rate versus power mode, one panel per placement
    names = list(dict.fromkeys((r["kind"], r["name"]) for r in rows))
    fig, axes = plt.subplots(1, len(placements), figsize=(4.4 * len(placements), 3.4), squeeze=False,
                             constrained_layout=True, sharey=True)
    markers = "osD^v<>Ph*"
    for pi, pl in enumerate(placements):
        ax = axes[0][pi]
        for ni, (kind, name) in enumerate(names):
            pts = sorted((_watts(r["power_mode"]), float(r["miss_rate"]) * 100) for r in rows
                         if r["placement"] == pl and r["kind"] == kind and r["name"] == name)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[ni % len(markers)], ms=4, lw=1.2,
                    ls="--" if kind == "chain" else "-", label=f"{name} ({kind})")
        ax.set_yscale("symlog", linthresh=0.1)  # linear below 0.1%: zero stays visible, 0.5% and 100% both read
        ax.set_ylim(-0.02, 200)
        ax.set_xticks([_watts(m) for m in modes])
        ax.set_xlabel("power mode (W)")
        ax.set_title(pl, fontsize=9)
        ax.grid(True, lw=0.3, alpha=0.6)
    axes[0][0].set_ylabel("deadline misses (% of jobs, symlog)")
    axes[0][-1].legend(fontsize=6.5, frameon=False, loc="upper right")
    fig.suptitle("AV perception on Jetson AGX Orin 64GB: deadline-miss rate vs power mode", fontsize=9)
    miss_png = out / FIGURES[1]
    fig.savefig(miss_png, dpi=200)
    plt.close(fig)
    return cdf_png, miss_png
