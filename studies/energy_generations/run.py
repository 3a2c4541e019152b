"""Run the energy-generations study: each workload on each device of each family (in generation order),
energy per item (image, sequence or token), written as one CSV and one figure.

Usage: ``python -m studies.energy_generations [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/energy_generations/run.py ...`` from anywhere.
``results.csv`` and ``energy_generations.png`` go to ``out/energy_generations/`` under the repository
root by default (``out/`` is not tracked). The committed results are refreshed with
``python -m studies.energy_generations --out studies/energy_generations --figures docs/figures``.

Energy is the analytical engine's: dynamic energy per FLOP (by dtype) and per byte moved at each memory
level, plus the idle (static) power over the time, each op's average power held to the TDP (the power
cap stretches an op that would exceed it). ``energy_per_item_j`` is the report's energy over the items
it produced: ``batch`` images or sequences, or ``batch`` tokens for a decode step.
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
COLUMNS = ("family", "generation", "device", "dtype", "workload", "model", "per", "batch", "latency_s", "energy_j",
           "dynamic_energy_j", "static_energy_j", "energy_per_item_j", "items_per_s", "avg_power_w", "tdp_w",
           "power_capped_ops", "memory_required_bytes", "memory_capacity_bytes", "fits_in_memory")


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (family, device, workload), devices in the configuration's (generation) order."""
    from simulator import evaluate
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    bar = study_progress(sum(len(f["devices"]) for f in cfg["families"]) * len(cfg["workloads"]))
    rows = []
    for fam in cfg["families"]:
        for gen, name in enumerate(fam["devices"], 1):
            dev = load_hardware(name)
            for w in cfg["workloads"]:
                g = load_workload(w["model"], phase=w.get("phase"), batch=w["batch"], seq=w.get("seq"),
                                  context=w.get("context"), dtype=fam["dtype"])
                r = evaluate(g, dev)
                bar.update(1)
                items = w["batch"]
                rows.append({
                    "family": fam["name"], "generation": gen, "device": dev.name, "dtype": fam["dtype"],
                    "workload": w["name"], "model": w["model"], "per": w["per"], "batch": w["batch"],
                    "latency_s": r.latency_s, "energy_j": r.energy_j, "dynamic_energy_j": r.totals.dynamic_energy_j,
                    "static_energy_j": r.totals.static_energy_j, "energy_per_item_j": r.energy_j / items,
                    "items_per_s": items / r.latency_s, "avg_power_w": r.totals.avg_power_w, "tdp_w": dev.power.tdp_w,
                    "power_capped_ops": sum(1 for x in r.records if x.power_capped),
                    "memory_required_bytes": r.memory.required_bytes,
                    "memory_capacity_bytes": r.memory.capacity_bytes, "fits_in_memory": r.memory.fits,
                })
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


def plot(csv_path: Path, out: Path) -> Path:
    """One panel per workload: energy per item of every device, families side by side in generation
    order, split into dynamic and static energy; hatched where the work does not fit in memory."""
    import pandas as pd
    from matplotlib.figure import Figure

    from simulator.report.figures import axis_label, save_figure

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                f"`python -m studies.{NAME}` (or --out studies/{NAME})")
    df = pd.read_csv(csv_path)
    workloads = list(dict.fromkeys(df["workload"]))
    families = list(dict.fromkeys(df["family"]))
    colors = {f: c for f, c in zip(families, ("#2ca02c", "#1f77b4", "#ff7f0e", "#9467bd"), strict=False)}
    fig = Figure(figsize=(max(6.0, 4.2 * len(workloads)), 4.2), layout="constrained")
    axes = fig.subplots(1, len(workloads), squeeze=False)[0]
    for ax, wl in zip(axes, workloads, strict=True):
        part = df[df["workload"] == wl]
        per = part["per"].iloc[0]
        label, scale = axis_label("energy_per_item_j", part["energy_per_item_j"])
        x, ticks, names = 0.0, [], []
        for fam in families:
            sub = part[part["family"] == fam].sort_values("generation")
            for _, r in sub.iterrows():
                batch = float(r["batch"])
                dyn, st = r["dynamic_energy_j"] / batch / scale, r["static_energy_j"] / batch / scale
                hatch = None if bool(r["fits_in_memory"]) else "xxx"
                ax.bar(x, dyn, width=0.75, color=colors[fam], hatch=hatch, edgecolor="white", linewidth=0.3)
                ax.bar(x, st, bottom=dyn, width=0.75, color=colors[fam], alpha=0.45, hatch=hatch, edgecolor="white",
                       linewidth=0.3)
                ax.annotate(f"{dyn + st:.3g}", (x, dyn + st), ha="center", va="bottom", fontsize=6,
                            xytext=(0, 1), textcoords="offset points")
                ticks.append(x)
                names.append(str(r["device"]))
                x += 1
            x += 0.6
        ax.set_xticks(ticks, names, rotation=40, ha="right", fontsize=7)
        ax.set_ylabel(label.replace("energy per item", f"energy per {per}"))
        ax.set_title(wl, fontsize=8.5)
        ax.grid(True, axis="y", lw=0.3, alpha=0.6)
    from matplotlib.patches import Patch

    handles = [Patch(color=colors[f], label=f"{f}: dynamic") for f in families]
    handles += [Patch(color=colors[f], alpha=0.45, label=f"{f}: static (idle power x time)") for f in families]
    if not df["fits_in_memory"].astype(bool).all():
        handles.append(Patch(facecolor="white", edgecolor="black", hatch="xxx", label="does not fit in memory"))
    fig.legend(handles=handles, fontsize=7, frameon=False, loc="outside lower center", ncol=min(5, len(handles)))
    fig.suptitle("Energy per inference and per generated token across accelerator generations", fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "families[].name": "str", "families[].dtype": "dtype", "families[].devices": "device[]",
    "workloads[].name": "str", "workloads[].model": "model", "workloads[].batch": "int>0",
    "workloads[].per": "str", "?workloads[].phase": "phase", "?workloads[].seq": "int>0",
    "?workloads[].context": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: [plot(out / CSV_NAME, figs / FIGURE_NAME)])


if __name__ == "__main__":
    sys.exit(main())
