"""Figures of the parallelism study: training MFU versus GPU count and over (tp, pp), and inference
TTFT / TPOT versus tensor parallelism.

``python -m studies.parallelism`` draws them after the run (``--plot-only`` redraws them from the CSVs).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Any

TRAINING_CSV, INFERENCE_CSV = "training.csv", "inference.csv"
TRAINING_PNG, INFERENCE_PNG = "training.png", "inference.png"
DPI = 300


def _read(csv_path: Path) -> list[dict[str, str]]:
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                "`python -m studies.parallelism` (or --out studies/parallelism)")
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _num(r: dict[str, str], key: str) -> float | None:
    return float(r[key]) if r[key] not in ("", None) else None


def plot_training(csv_path: Path, out: Path) -> None:
    """Three panels: MFU of the best plan that fits versus GPU count, one line per GPU kind; MFU over
    (tp, pp) at the largest GPU count, one heatmap per GPU kind, plans that do not fit hatched."""
    rows = _read(csv_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    from matplotlib.colors import Normalize
    from matplotlib.patches import Patch, Rectangle

    ok = [r for r in rows if _num(r, "mfu") is not None]
    devices = sorted({r["device"] for r in rows})
    counts = sorted({int(r["n_gpus"]) for r in rows})
    tps = sorted({int(r["tp"]) for r in rows})
    pps = sorted({int(r["pp"]) for r in rows})
    top = counts[-1]
    fig = plt.figure(figsize=(12.5, 4.3), constrained_layout=True)
    gs = fig.add_gridspec(1, 4, width_ratios=[1.25, 1, 1, 0.06])
    ax = fig.add_subplot(gs[0, 0])
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":")]
    for i, dev in enumerate(devices):
        mk, ls = styles[i % len(styles)]
        best_fit, best_any = [], []
        for n in counts:
            cand = [r for r in ok if r["device"] == dev and int(r["n_gpus"]) == n]
            fits = [r for r in cand if r["fits_in_memory"] == "True"]
            if fits:
                best_fit.append((n, max(fits, key=lambda r: float(r["mfu"]))))
            if cand:
                best_any.append((n, max(cand, key=lambda r: float(r["mfu"]))))
        line, = ax.plot([n for n, _ in best_fit], [100 * float(r["mfu"]) for _, r in best_fit], marker=mk, ls=ls,
                        ms=4, lw=1.4, label=f"{dev}: best plan that fits")
        ax.plot([n for n, _ in best_any], [100 * float(r["mfu"]) for _, r in best_any], marker=mk, ls=":", ms=3,
                lw=0.9, alpha=0.55, mfc="none", color=line.get_color(), label=f"{dev}: best plan ignoring memory",
                zorder=4)
        for n, r in best_fit:
            others = [float(o["mfu"]) for o in ok if o["device"] != dev and int(o["n_gpus"]) == n
                      and o["fits_in_memory"] == "True"]
            above = float(r["mfu"]) >= max(others, default=0.0)  # label the upper line above, the lower below
            ax.annotate(f"{r['tp']}/{r['pp']}/{r['dp']}", (n, 100 * float(r["mfu"])), textcoords="offset points",
                        xytext=(0, 6 if above else -11), ha="center", fontsize=6.5, color=line.get_color(),
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.85}, zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.minorticks_off()
    ax.set_xlim(counts[0] / 1.35, counts[-1] * 1.35)
    ax.set_xlabel("GPUs")
    ax.set_ylabel("MFU (% of bf16 dense peak)")
    ax.set_title("best plan per GPU count (labels: tp/pp/dp)", fontsize=9)
    ax.grid(True, lw=0.3, alpha=0.6)
    ax.legend(fontsize=6.5, frameon=False, loc="lower left")
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo - 0.06 * (hi - lo), hi + 0.06 * (hi - lo))

    vals = [100 * float(r["mfu"]) for r in ok if int(r["n_gpus"]) == top]
    norm = Normalize(vmin=min(vals, default=0.0), vmax=max(vals, default=1.0))
    cmap = plt.get_cmap("viridis")
    for j, dev in enumerate(devices[:2]):
        hx = fig.add_subplot(gs[0, 1 + j])
        cells = {(int(r["tp"]), int(r["pp"])): r for r in rows if r["device"] == dev and int(r["n_gpus"]) == top}
        for yi, tp in enumerate(tps):
            for xi, pp in enumerate(pps):
                r = cells.get((tp, pp))
                mfu = _num(r, "mfu") if r else None
                if mfu is None:
                    hx.add_patch(Rectangle((xi - 0.5, yi - 0.5), 1, 1, facecolor="0.85", edgecolor="white"))
                    hx.text(xi, yi, "n/a", ha="center", va="center", fontsize=7, color="0.35")
                    continue
                fits = r["fits_in_memory"] == "True"
                hx.add_patch(Rectangle((xi - 0.5, yi - 0.5), 1, 1, facecolor=cmap(norm(100 * mfu)),
                                       edgecolor="white", alpha=1.0 if fits else 0.45))
                if not fits:
                    hx.add_patch(Rectangle((xi - 0.5, yi - 0.5), 1, 1, facecolor="none", edgecolor="0.25",
                                           hatch="////", lw=0))
                shade = cmap(norm(100 * mfu))
                dark = 0.299 * shade[0] + 0.587 * shade[1] + 0.114 * shade[2] < 0.5 and fits
                hx.text(xi, yi, f"{100 * mfu:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if dark else "black", fontweight="bold" if fits else "normal")
        hx.set_xlim(-0.5, len(pps) - 0.5)
        hx.set_ylim(-0.5, len(tps) - 0.5)
        hx.set_xticks(range(len(pps)), [str(p) for p in pps])
        hx.set_yticks(range(len(tps)), [str(t) for t in tps])
        hx.set_xlabel("pipeline-parallel degree pp")
        hx.set_ylabel("tensor-parallel degree tp")
        hx.set_title(f"MFU (%) at {top} x {dev}", fontsize=9)
        hx.set_aspect("auto")
    cax = fig.add_subplot(gs[0, 3])
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, cax=cax, label="MFU (%)")
    fig.legend(handles=[Patch(facecolor="white", edgecolor="0.25", hatch="////", label="does not fit in memory"),
                        Patch(facecolor="0.85", label="n/a: dp does not divide the global batch, or tp x pp > GPUs")],
               loc="outside lower right", ncol=2, fontsize=7, frameon=False)
    r0 = rows[0] if rows else dict.fromkeys(("seq", "global_batch", "microbatch", "dtype", "recompute"), "?")
    fig.suptitle(f"{r0.get('model', '')} training: sequence {r0['seq']}, global batch {r0['global_batch']}, microbatch "
                 f"{r0['microbatch']}, {r0['dtype']}, {r0['recompute']} recomputation, sequence parallelism where "
                 "tp > 1; dp = GPUs / (tp x pp)", fontsize=9)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def plot_inference(csv_path: Path, out: Path) -> None:
    """Two panels: TTFT and TPOT versus tensor-parallel degree, one line per (GPU, batch); requests
    that do not fit in memory are crossed."""
    rows = [r for r in _read(csv_path) if _num(r, "ttft_s") is not None]
    out.parent.mkdir(parents=True, exist_ok=True)
    plt = _pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

    series: dict[tuple[str, int], list[tuple[int, float, float, bool]]] = defaultdict(list)
    for r in rows:
        series[(r["device"], int(r["batch"]))].append((int(r["tp"]), float(r["ttft_s"]), float(r["tpot_s"]),
                                                       r["fits_in_memory"] == "True"))
    devices = sorted({d for d, _ in series})
    batches = sorted({b for _, b in series})
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    dash = ["-", "--", ":", "-."]
    marks = ["o", "s", "^", "D"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 4.2), constrained_layout=True)
    for (dev, b), pts in sorted(series.items()):
        pts.sort()
        c, ls, mk = colors[devices.index(dev) % len(colors)], dash[batches.index(b) % 4], marks[batches.index(b) % 4]
        for ax, k, scale in ((ax1, 1, 1e3), (ax2, 2, 1e3)):
            ax.plot([p[0] for p in pts], [p[k] * scale for p in pts], color=c, ls=ls, marker=mk, ms=4, lw=1.3)
            bad = [p for p in pts if not p[3]]
            ax.plot([p[0] for p in bad], [p[k] * scale for p in bad], ls="none", marker="x", ms=9, mew=1.8,
                    color="crimson")
    tps = sorted({p[0] for pts in series.values() for p in pts})
    plain = FuncFormatter(lambda y, _: f"{y:g}")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        lo, hi = ax.get_ylim()
        # several decades: label 1, 2, 5 x 10^k; within about a decade: finer steps
        subs = (1.0, 2.0, 5.0) if hi / lo >= 20 else (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.yaxis.set_major_formatter(plain)
        ax.set_xticks(tps, [str(t) for t in tps])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("tensor-parallel degree tp (GPUs)")
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
    ax1.set_ylabel("time to first token, TTFT (ms)")
    ax2.set_ylabel("time per output token, TPOT (ms)")
    handles = [Line2D([], [], color=colors[i % len(colors)], lw=1.6, label=d) for i, d in enumerate(devices)]
    handles += [Line2D([], [], color="0.3", ls=dash[i % 4], marker=marks[i % 4], ms=4, label=f"batch {b}")
                for i, b in enumerate(batches)]
    handles.append(Line2D([], [], ls="none", marker="x", ms=8, mew=1.8, color="crimson",
                          label="does not fit in memory"))
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), fontsize=7.5, frameon=False)
    r0 = rows[0] if rows else dict.fromkeys(("model", "input_len", "output_len", "dtype"), "?")
    fig.suptitle(f"{r0['model']} generation on one 8-GPU node: input {r0['input_len']} tokens, output "
                 f"{r0['output_len']} tokens, {r0['dtype']}", fontsize=9)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)


def plot(results: Path, out_dir: Path) -> tuple[Path, Path]:
    """Both figures of the study's CSVs in folder ``results`` into folder ``out_dir`` (PNG)."""
    for name in (TRAINING_CSV, INFERENCE_CSV):  # fail before drawing anything
        _read(results / name)
    paths = out_dir / TRAINING_PNG, out_dir / INFERENCE_PNG
    plot_training(results / TRAINING_CSV, paths[0])
    plot_inference(results / INFERENCE_CSV, paths[1])
    return paths
