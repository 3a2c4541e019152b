"""The figure of the training-at-scale study: days to train and cost versus cluster size, one column per
model, one line per system, and under them a table of each point's best plan and MFU.

``python -m studies.training_at_scale`` draws it after the run (``--plot-only`` redraws it from the CSV).
"""

from __future__ import annotations

import csv
from pathlib import Path

DPI = 200
_STYLE = {"H100": ("#76b900", "o"), "B200": ("#2f6f00", "s"), "TPU v5p": ("#4285f4", "^")}


def _read(csv_path: Path) -> list[dict[str, str]]:
    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                "`python -m studies.training_at_scale` (or --out studies/training_at_scale)")
    with open(csv_path, newline="") as f:
        return list(csv.DictReader(f))


def _label(r: dict[str, str]) -> str:
    """``tp8 pp14 v3 dp128 sel`` / ``tp8 fsdp256 full``: the plan in a few characters."""
    rc = {"selective": "sel", "selective-op": "sel-op", "save_qkv_proj": "qkv", "minimal": "min"}.get(
        r["recompute"], r["recompute"])
    if r["sharding"] == "fsdp":
        return f"tp{r['tp']} fsdp{r['dp']} mb{r['microbatch']} {rc}"
    v = f" v{r['interleave']}" if r["interleave"] not in ("", "1") else ""
    return f"tp{r['tp']} pp{r['pp']}{v} dp{r['dp']} {rc}"


def _cell(r: dict[str, str]) -> str:
    """A table cell: the plan (:func:`_label`) and its MFU; empty for a point without a plan."""
    return f"{_label(r)}, {100 * float(r['mfu']):.0f}%" if r.get("days") else ""


def _plan_table(ax: object, mine: list[dict[str, str]]) -> None:
    """The best plan and MFU of every point as a table (device counts down, systems across): labels beside
    the points collided where the lines run close on the log axes."""
    systems = list(dict.fromkeys(r["system"] for r in mine))
    sizes = sorted({int(r["devices"]) for r in mine})
    by = {(int(r["devices"]), r["system"]): r for r in mine}
    text = [[_cell(by[n, s]) if (n, s) in by else "" for s in systems] for n in sizes]
    ax.axis("off")
    table = ax.table(cellText=text, rowLabels=[f"{n:,}" for n in sizes], colLabels=systems, loc="center",
                     cellLoc="left", colLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(6)
    table.auto_set_column_width(list(range(len(systems))))
    for (i, j), cell in table.get_celld().items():
        if i == 0 and j >= 0:
            cell.get_text().set_color(_STYLE.get(systems[j], ("k", "o"))[0])
    ax.set_title("best plan (tp, pp, virtual stages, dp or FSDP degree, microbatch, recompute), MFU", fontsize=7)


def _panels(axes: list[list[object]], j: int, mine: list[dict[str, str]], model: str) -> None:
    """Column ``j``: days and cost per system over the cluster size, and the plan table under them."""
    for system in dict.fromkeys(r["system"] for r in mine):
        pts = sorted((int(r["devices"]), r) for r in mine if r["system"] == system and r["days"])
        if not pts:
            continue
        color, marker = _STYLE.get(system, ("k", "o"))
        xs = [n for n, _ in pts]
        for i, key in enumerate(("days", "cost_usd")):
            ys = [float(r[key]) if r[key] else float("nan") for _, r in pts]
            axes[i][j].plot(xs, ys, marker=marker, color=color, label=system)
    tokens = float(mine[0]["token_budget"]) / 1e12 if mine else 0
    axes[0][j].set_title(f"{model}: {tokens:g}T tokens, seq 8,192, 16M-token batch", fontsize=9)
    axes[0][j].set_ylabel("days to train")
    axes[1][j].set_ylabel("cost (USD, on-demand device-hours)")
    axes[1][j].set_xlabel("devices (GPUs or TPU chips)")
    sizes = sorted({int(r["devices"]) for r in mine})
    for i in (0, 1):
        ax = axes[i][j]
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.margins(x=0.08, y=0.12)
        ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    _plan_table(axes[2][j], mine)


def plot(csv_path: Path, out: Path) -> Path:
    """Three rows (days to train, cost in USD, the plan table) by one column per model, log-log over the
    cluster size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = _read(csv_path)
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(3, len(models), figsize=(6.2 * len(models), 9.6), squeeze=False,
                             constrained_layout=True, height_ratios=(1.0, 1.0, 0.62))
    for j, model in enumerate(models):
        _panels(axes, j, [r for r in rows if r["model"] == model], model)
    prices = sorted({f"{r['system']}: \\${float(r['usd_per_device_hour']):.2f}/h ({r['price_source']})"
                     for r in rows if r["usd_per_device_hour"]})
    fig.suptitle("Best plan per point (nodeperf tune, exhaustive, bf16); on-demand prices:\n" + "\n".join(prices),
                 fontsize=7)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=DPI)
    plt.close(fig)
    return out
