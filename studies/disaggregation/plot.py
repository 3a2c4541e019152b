"""The disaggregation figure: a map of prompt length x (TTFT, TPOT) SLO pair coloured by the winner,
each cell labelled with the goodput ratio (best disaggregated split over colocated) and the split."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def plot(csv_path: Path, out: Path, cfg: dict[str, Any]) -> Path:
    """Blue: colocated replicas give more goodput per GPU; orange: a prefill/decode split does (the darker,
    the larger the ratio, log2 scale clipped at 4x); grey: neither meets the SLO at the lowest load."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    import pandas as pd

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of `python -m "
                                f"studies.disaggregation` (or --out studies/disaggregation)")
    df = pd.read_csv(csv_path)
    lens = sorted(df["prompt_len"].unique())
    pairs = sorted({(a, b) for a, b in zip(df["ttft_slo_s"], df["tpot_slo_s"], strict=True)})
    grid = np.full((len(pairs), len(lens)), np.nan)
    fig, ax = plt.subplots(figsize=(1.5 + 1.35 * len(lens), 1.2 + 0.62 * len(pairs)))
    for _, r in df.iterrows():
        i, j = pairs.index((r["ttft_slo_s"], r["tpot_slo_s"])), lens.index(r["prompt_len"])
        ratio = float(r["ratio"]) if str(r["ratio"]) not in ("", "nan") else math.nan
        if r["winner"] == "neither":
            text = "none\nmeets"
        else:
            grid[i, j] = max(-2.0, min(2.0, math.log2(ratio))) if ratio > 0 and math.isfinite(ratio) else (
                2.0 if ratio == math.inf else -2.0)
            shown = "inf" if ratio == math.inf else f"{ratio:.2f}x"
            text = f"{shown}\n{r['best_split']}\n{r['colocated_rps_per_gpu']:.3g} / {r['disaggregated_rps_per_gpu']:.3g}"
        ax.text(j, i, text, ha="center", va="center", fontsize=6)
    cmap = plt.get_cmap("coolwarm").with_extremes(bad="lightgrey")
    im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, vmin=-2, vmax=2, aspect="auto")
    ax.set_xticks(range(len(lens)), [str(x) for x in lens])
    ax.set_yticks(range(len(pairs)), [f"TTFT {a:g} s, TPOT {b * 1e3:g} ms" for a, b in pairs], fontsize=7)
    ax.set_xlabel(f"prompt length (tokens; {cfg['output_len']} output tokens)")
    bar = fig.colorbar(im, ax=ax, fraction=0.04)
    bar.set_label("log2(disaggregated / colocated goodput)", fontsize=7)
    n = max(d.get("replicas", 0) + d.get("prefill", 0) + d.get("decode", 0) for d in cfg["deployments"])
    ax.set_title(f"{cfg['model']} on {n} GPUs of {cfg['system']}: disaggregated prefill/decode vs {n} colocated "
                 f"replicas (red: disaggregated wins, blue: colocated)\ncell: goodput ratio, best split, goodput per GPU colocated / disaggregated (req/s; "
                 f">= {cfg['attainment']:.0%} of requests within both bounds)", fontsize=7)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
