"""Run the precision-scaling study: every workload at each precision on each GPU, the time of each op kind,
and its speedup over the baseline precision, written as one CSV and one figure.

Usage: ``python -m studies.precision_scaling [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/precision_scaling/run.py ...`` from anywhere.
``results.csv`` and ``precision_scaling.png`` go to ``out/precision_scaling/`` under the repository
root by default (``out/`` is not tracked). The committed results are refreshed with
``python -m studies.precision_scaling --out studies/precision_scaling --figures docs/figures``.

One row per (device, workload, precision, op kind), plus a ``(total)`` row per (device, workload,
precision): the summed ``time_s``, FLOPs and DRAM bytes of the kind's ops in the analytical engine's
report, and ``speedup`` = the kind's time at the baseline precision over its time at this one.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, rows_step, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = HERE.name
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
CSV_NAME = "results.csv"
FIGURE_NAME = f"{NAME}.png"
TOTAL = "(total)"
COLUMNS = ("device", "workload", "model", "precision", "kind", "ops", "time_s", "share", "flops", "dram_bytes",
           "speedup", "tensor_flops_per_s", "warnings")


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (device, workload, precision, op kind) and a ``(total)`` row per report."""
    from simulator import evaluate
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    if cfg["baseline"] not in cfg["precisions"]:
        raise ValueError(f"config.toml: baseline: got {cfg['baseline']!r}; expected one of the precisions "
                         f"{', '.join(cfg['precisions'])}")
    bar = study_progress(len(cfg["devices"]) * len(cfg["workloads"]) * len(cfg["precisions"]))
    rows: list[dict[str, Any]] = []
    for name in cfg["devices"]:
        dev = load_hardware(name)
        for w in cfg["workloads"]:
            times: dict[str, dict[str, float]] = {}
            per_precision: list[tuple[str, dict[str, dict[str, float]], Any]] = []
            for dt in cfg["precisions"]:
                g = load_workload(w["model"], phase=w.get("phase"), batch=w.get("batch"), seq=w.get("seq"), dtype=dt)
                r = evaluate(g, dev)
                bar.update(1)
                kinds = {k: dict(v) for k, v in r.breakdown("kind").items()}
                kinds[TOTAL] = {"ops": len(r.records), "time_s": r.latency_s, "flops": r.totals.flops,
                                "dram_bytes": r.totals.dram_bytes, "share": 1.0}
                times[dt] = {k: v["time_s"] for k, v in kinds.items()}
                per_precision.append((dt, kinds, r))
            base = times[cfg["baseline"]]
            for dt, kinds, r in per_precision:
                for kind, v in kinds.items():
                    rows.append({
                        "device": dev.name, "workload": w["name"], "model": w["model"], "precision": dt, "kind": kind,
                        "ops": int(v["ops"]), "time_s": v["time_s"], "share": v["share"], "flops": v["flops"],
                        "dram_bytes": v["dram_bytes"],
                        "speedup": base[kind] / v["time_s"] if v["time_s"] > 0 and kind in base else "",
                        "tensor_flops_per_s": dev.compute.tensor_flops_per_s.get(dt, ""),
                        "warnings": len(r.warnings),
                    })
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


def plot(csv_path: Path, out: Path, top: int = 5) -> Path:
    """Speedup over the baseline per op kind: one panel per (device, workload), one bar per precision,
    the ``top`` kinds by baseline time and the total."""
    import pandas as pd
    from matplotlib.figure import Figure

    from simulator.report.figures import save_figure

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                f"`python -m studies.{NAME}` (or --out studies/{NAME})")
    df = pd.read_csv(csv_path)
    devices = list(dict.fromkeys(df["device"]))
    workloads = list(dict.fromkeys(df["workload"]))
    precisions = list(dict.fromkeys(df["precision"]))
    speed = df.dropna(subset=["speedup"])
    baseline = next(p for p in precisions if (speed[speed["precision"] == p]["speedup"] == 1.0).all())
    shown = [p for p in precisions if p != baseline]
    fig = Figure(figsize=(3.3 * len(workloads), 2.5 * len(devices) + 0.6), layout="constrained")
    axes = fig.subplots(len(devices), len(workloads), squeeze=False, sharey=True)
    colors = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728")
    ymax = float(speed["speedup"].max())
    for i, dev in enumerate(devices):
        for j, wl in enumerate(workloads):
            ax = axes[i][j]
            part = speed[(speed["device"] == dev) & (speed["workload"] == wl)]
            base = part[part["precision"] == baseline].sort_values("time_s", ascending=False)
            kinds = [k for k in base["kind"] if k != TOTAL][:top] + [TOTAL]
            width = 0.8 / max(1, len(shown))
            for n, p in enumerate(shown):
                sub = part[part["precision"] == p].set_index("kind")
                vals = [float(sub["speedup"].get(k, float("nan"))) for k in kinds]
                xs = [x + (n - (len(shown) - 1) / 2) * width for x in range(len(kinds))]
                bars = ax.bar(xs, vals, width=width, color=colors[n % len(colors)], label=f"{p} vs {baseline}")
                for b, v in zip(bars, vals, strict=True):
                    if v == v:
                        ax.annotate(f"{v:.1f}", (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom",
                                    fontsize=5.5, xytext=(0, 1), textcoords="offset points")
            ax.set_yscale("log", base=2)
            ax.set_ylim(0.8, ymax * 2)
            ticks = [2.0 ** e for e in range(0, 12) if 2.0 ** e <= ymax * 2]
            ax.set_yticks(ticks, [f"{t:g}" for t in ticks])
            ax.axhline(1.0, color="black", lw=0.6)
            ax.set_xticks(range(len(kinds)), kinds, rotation=35, ha="right", fontsize=7)
            ax.grid(True, axis="y", lw=0.3, alpha=0.6)
            if i == 0:
                ax.set_title(wl, fontsize=8.5)
            if j == 0:
                ax.set_ylabel(f"{dev}\nspeedup over {baseline} (x)", fontsize=8)
    axes[0][-1].legend(fontsize=7, frameon=False, loc="upper right")
    fig.suptitle("Speedup per op kind from lower precision (tensors and arithmetic in one dtype)", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "devices": "device[]", "precisions": "dtype[]", "baseline": "dtype",
    "workloads[].name": "str", "workloads[].model": "model", "?workloads[].phase": "phase",
    "?workloads[].batch": "int>0", "?workloads[].seq": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: [plot(out / CSV_NAME, figs / FIGURE_NAME)])


if __name__ == "__main__":
    sys.exit(main())
