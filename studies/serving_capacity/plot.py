"""The serving-capacity figures: p99 TTFT and TPOT against load (one column per model), and capacity
against the deployment's price per hour with its Pareto front (one panel per model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_STYLE = {"vllm": "-", "sarathi": "--", "orca": ":", "static": "-."}


def _read(path: Path) -> Any:
    import pandas as pd

    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such results file; expected the CSV of `python -m "
                                f"studies.serving_capacity` (or --out studies/serving_capacity)")
    return pd.read_csv(path)


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_load(csv_path: Path, out: Path, cfg: dict[str, Any]) -> Path:
    """p99 TTFT (top) and p99 TPOT (bottom) against the offered rate, one column per model, one colour per
    deployment (the ``curve`` ones) and one line style per scheduler; the SLO bounds dashed."""
    from simulator.serving import parse_slo

    plt = _pyplot()
    df = _read(csv_path)
    curves = [d["name"] for d in cfg["deployments"] if d["curve"]]
    df = df[df["deployment"].isin(curves)]
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(2, max(1, len(models)), figsize=(5.2 * max(1, len(models)), 7.0), squeeze=False)
    bounds = {m: b for m, _s, b in (parse_slo(s) for s in cfg["slo"])}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, model in enumerate(models):
        part = df[df["model"] == model]
        for k, dep in enumerate(dict.fromkeys(part["deployment"])):
            for sched, g in part[part["deployment"] == dep].groupby("scheduler", sort=True):
                g = g.sort_values("rate_rps")
                for i, metric in enumerate(("ttft", "tpot")):
                    axes[i][j].plot(g["rate_rps"], g[f"{metric}_p99_s"] * 1e3, marker="o", ms=3,
                                    ls=_STYLE.get(str(sched), "-"), color=colors[k % len(colors)],
                                    label=f"{dep} {sched}")
        for i, metric in enumerate(("ttft", "tpot")):
            ax = axes[i][j]
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("offered load (requests/s, Poisson)")
            ax.set_ylabel(f"p99 {metric.upper()} (ms)")
            if metric in bounds:
                ax.axhline(bounds[metric] * 1e3, color="grey", ls="--", lw=0.8)
            ax.set_title(f"{model}: p99 {metric.upper()} vs load", fontsize=9)
            ax.grid(True, which="both", lw=0.3, alpha=0.5)
        axes[0][j].legend(fontsize=6.5, ncol=1)
    fig.suptitle(f"Serving under Poisson load ({cfg['duration_s']:g} s of arrivals, lengths {cfg['lengths']});\n"
                 f"dashed grey: SLO {' and '.join(cfg['slo'])}; solid: vllm, dashed: sarathi", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def plot_frontier(csv_path: Path, out: Path, cfg: dict[str, Any]) -> Path:
    """Capacity under the SLO against the deployment's price per hour, one panel per model, each point a
    (deployment, scheduler) labelled with its requests per dollar; the Pareto front as a line."""
    plt = _pyplot()
    df = _read(csv_path)
    models = list(dict.fromkeys(df["model"]))
    fig, axes = plt.subplots(1, max(1, len(models)), figsize=(5.6 * max(1, len(models)), 4.6), squeeze=False)
    for j, model in enumerate(models):
        ax = axes[0][j]
        part = df[df["model"] == model]
        for sched, g in part.groupby("scheduler", sort=True):
            ax.scatter(g["usd_per_hour"], g["capacity_rps"], marker="o" if sched == "vllm" else "s", s=22,
                       label=str(sched))
            for _, r in g.iterrows():
                ax.annotate(f"{r['deployment']}\n{r['requests_per_usd']:,.0f} req/$", (r["usd_per_hour"],
                            r["capacity_rps"]), fontsize=5.5, xytext=(3, 2), textcoords="offset points")
        front = part[part["on_frontier"].astype(bool)].sort_values("usd_per_hour")
        ax.plot(front["usd_per_hour"], front["capacity_rps"], color="black", lw=0.8, label="Pareto front")
        ax.set_xscale("log")
        ax.set_xlabel("deployment price (USD/h, cloud on-demand)")
        ax.set_ylabel("capacity under the SLO (requests/s)")
        ax.set_title(f"{model}: capacity vs price", fontsize=9)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        ax.legend(fontsize=7)
    quotes = sorted(set(zip(df["device"], df["usd_per_device_hour"], df["price_date"], strict=True)))
    dates = "; ".join(f"{d} {p:g} USD/h ({when})" for d, p, when in quotes)
    fig.suptitle(f"Capacity per dollar under the SLO {' and '.join(cfg['slo'])}; labels: requests per dollar\n"
                 f"prices per device-hour, on demand (hwmodels/catalog/prices.toml): {dates}", fontsize=6.5)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out
