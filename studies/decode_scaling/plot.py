"""Figure of the decode-scaling study: tokens/s and energy per token versus batch, one line per GPU.

``python -m studies.decode_scaling`` draws it after the run (``--plot-only`` redraws it from the CSV).
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path


def plot(csv_path: Path, out: Path) -> Path:
    """Draw the figure of the study's CSV at ``csv_path`` into ``out`` (PNG), creating its folder."""
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                "`python -m studies.decode_scaling` (or --out studies/decode_scaling)")
    out.parent.mkdir(parents=True, exist_ok=True)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series: dict[str, list[tuple[int, float, float, bool]]] = defaultdict(list)
    with open(csv_path, newline="") as f:
        for r in csv.DictReader(f):
            series[r["device"]].append((int(r["batch"]), float(r["tokens_per_s"]), float(r["energy_per_token_j"]),
                                        r["fits_in_memory"] == "True"))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.6), constrained_layout=True)
    styles = [("o", "-"), ("s", "--"), ("^", "-."), ("D", ":"), ("v", "-"), ("P", "--")]
    for i, dev in enumerate(sorted(series)):
        pts = sorted(series[dev])
        b = [p[0] for p in pts]
        mk, ls = styles[i % len(styles)]
        line, = ax1.plot(b, [p[1] for p in pts], marker=mk, ls=ls, ms=3.5, lw=1.3, label=dev)
        ax2.plot(b, [p[2] * 1e3 for p in pts], marker=mk, ls=ls, ms=3.5, lw=1.3, color=line.get_color())
        for x, y, ok in ((p[0], p[1], p[3]) for p in pts):
            if not ok:
                ax1.plot([x], [y], marker="x", ms=7, color=line.get_color())
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (sequences)")
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
    ax1.set_ylabel("decode throughput (tokens/s)")
    ax2.set_ylabel("energy per token (mJ)")
    ax1.legend(fontsize=7, frameon=False)
    fig.suptitle("llama-2-7b decode step, context 2048, bf16 (x: does not fit in memory)", fontsize=9)
    fig.savefig(out, dpi=200)
    plt.close(fig)
    return out
