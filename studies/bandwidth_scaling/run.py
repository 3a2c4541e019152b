"""Run the bandwidth-scaling study: LLM prefill and decode on a GPU with its memory bandwidth and its
compute throughput scaled, written as one CSV and one figure.

Usage: ``python -m studies.bandwidth_scaling [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/bandwidth_scaling/run.py ...`` from anywhere.
``results.csv`` and ``bandwidth_scaling.png`` go to ``out/bandwidth_scaling/`` under the repository root
by default (``out/`` is not tracked). The committed results are refreshed with
``python -m studies.bandwidth_scaling --out studies/bandwidth_scaling --figures docs/figures``.

Each row is one (workload, bandwidth factor, compute factor): the catalog device with
``memory.<main>.read_bandwidth_bytes_per_s`` and ``write_bandwidth_bytes_per_s`` multiplied by the
bandwidth factor, and everything on the chip by the compute factor: ``clock.boost_hz`` and
``clock.sustained_hz`` (so the rates the GPU model derives from the clock, shared-memory bandwidth and the
special-function units, follow), every ``compute.tensor_flops_per_s.*`` and ``compute.vector_flops_per_s.*``
entry, the read/write bandwidth of the on-chip levels (L2, shared memory), and ``power.tdp_w`` and
``power.idle_w`` (energy per operation unchanged; see :func:`variant`). Variants are built with
:func:`hwmodels.paths.with_overrides` and evaluated by the analytical engine. Latencies stored in
seconds (DRAM, L2) and per-kernel overheads are not scaled.
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
COLUMNS = ("device", "model", "dtype", "workload", "phase", "batch", "seq", "context", "bandwidth_scale",
           "compute_scale", "main_memory_bandwidth_bytes_per_s", "tensor_flops_per_s", "latency_s", "speedup",
           "tokens_per_s", "energy_j", "compute_bound_share", "memory_bound_share", "latency_bound_share")


def variant(spec: Any, bandwidth_scale: float, compute_scale: float) -> Any:
    """``spec`` with its main-memory bandwidths multiplied by ``bandwidth_scale`` and everything on the chip
    by ``compute_scale``: the clocks, every tensor and vector peak, the read and write bandwidth of every
    memory level inside the chip (L2, shared memory) and the power limit and idle power (the same energy
    per operation at a higher rate needs proportionally more power; without that the power cap would
    stretch the faster chip's compute-bound kernels back to the catalog TDP)."""
    from hwmodels.paths import with_overrides

    main = spec.main_memory
    over: dict[str, float] = {}
    for level in spec.memory:
        factor = bandwidth_scale if level.name == main.name else compute_scale
        for f in ("read_bandwidth_bytes_per_s", "write_bandwidth_bytes_per_s"):
            over[f"memory.{level.name}.{f}"] = getattr(level, f) * factor
    for table in ("tensor_flops_per_s", "vector_flops_per_s"):
        for dt, rate in getattr(spec.compute, table).items():
            over[f"compute.{table}.{dt}"] = rate * compute_scale
    for f in ("boost_hz", "sustained_hz"):
        over[f"clock.{f}"] = getattr(spec.clock, f) * compute_scale
    for f in ("tdp_w", "idle_w"):  # k times the silicon at the same energy per operation: k times the power
        over[f"power.{f}"] = getattr(spec.power, f) * compute_scale
    return with_overrides(spec, over)


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (workload, bandwidth factor, compute factor); ``speedup`` is over the catalog device."""
    from simulator import evaluate
    from simulator.engines.options import options_from_settings
    from simulator.hardware import load_hardware
    from workloads.resolve import load_workload

    base = load_hardware(cfg["device"])
    opts = options_from_settings({"cuda_graphs": cfg.get("cuda_graphs", False)}, where="config")
    bar = study_progress(len(cfg["workloads"]) * len(cfg["bandwidth_scales"]) * len(cfg["compute_scales"]))
    rows = []
    for w in cfg["workloads"]:
        g = load_workload(cfg["model"], phase=w["phase"], batch=w["batch"], seq=w.get("seq"),
                          context=w.get("context"), dtype=cfg["dtype"])
        reference = evaluate(g, base, opts).latency_s
        tokens = w["batch"] * (w["seq"] if w["phase"] == "prefill" else 1)
        for bs in cfg["bandwidth_scales"]:
            for cs in cfg["compute_scales"]:
                spec = variant(base, bs, cs)
                r = evaluate(g, spec, opts)
                bar.update(1)
                bb = r.bound_breakdown
                rows.append({
                    "device": base.name, "model": cfg["model"], "dtype": cfg["dtype"], "workload": w["name"],
                    "phase": w["phase"], "batch": w["batch"], "seq": w.get("seq", ""), "context": w.get("context", ""),
                    "bandwidth_scale": float(bs), "compute_scale": float(cs),
                    "main_memory_bandwidth_bytes_per_s": spec.main_memory.read_bandwidth_bytes_per_s,
                    "tensor_flops_per_s": spec.compute.tensor_flops_per_s.get(cfg["dtype"], 0.0),
                    "latency_s": r.latency_s, "speedup": reference / r.latency_s,
                    "tokens_per_s": tokens / r.latency_s, "energy_j": r.energy_j,
                    "compute_bound_share": bb["compute"], "memory_bound_share": bb["memory"],
                    "latency_bound_share": bb["latency"],
                })
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


def plot(csv_path: Path, out: Path) -> Path:
    """Speedup versus the bandwidth factor (at compute 1x) and versus the compute factor (at bandwidth
    1x), one line per workload, drawn from the CSV at ``csv_path`` into ``out``."""
    import pandas as pd
    from matplotlib.figure import Figure

    from simulator.report.figures import save_figure

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                f"`python -m studies.{NAME}` (or --out studies/{NAME})")
    df = pd.read_csv(csv_path)
    device = df["device"].iloc[0]
    fig = Figure(figsize=(8.4, 3.6), layout="constrained")
    axes = fig.subplots(1, 2, sharey=True)
    markers = ("o", "s", "^", "D", "v")
    for ax, (axis, fixed, label) in zip(axes, (("bandwidth_scale", "compute_scale", "HBM bandwidth"),
                                               ("compute_scale", "bandwidth_scale", "on-chip compute")),
                                        strict=True):
        sub = df[df[fixed] == 1.0]
        for i, (wl, part) in enumerate(sub.groupby("workload", sort=False)):
            part = part.sort_values(axis)
            ax.plot(part[axis], part["speedup"], marker=markers[i % len(markers)], ms=4, lw=1.3, label=wl)
        xs = sorted(set(sub[axis]))
        if xs:
            ax.plot(xs, xs, color="black", lw=0.7, ls=":", label="proportional")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        ax.set_xticks(xs, [f"{x:g}x" for x in xs])
        ax.set_xlabel(f"{label} (x catalog {device})")
        ax.grid(True, which="both", lw=0.3, alpha=0.6)
        ax.set_title(f"scaling {label} only", fontsize=9)
        two = sub[sub[axis] == 2.0]
        if not two.empty:  # the what-if of the question, spelled out
            text = "at 2x:\n" + "\n".join(f"{r['workload']}: {r['speedup']:.2f}x" for _, r in two.iterrows())
            ax.text(0.97, 0.04, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=6.5,
                    bbox={"boxstyle": "round", "facecolor": "white", "edgecolor": "0.7", "linewidth": 0.5})
    axes[0].set_ylabel("speedup over the catalog device (x)")
    ys = sorted(set(df["speedup"].round(3)))
    axes[0].set_yticks([y for y in (0.5, 1, 2, 4) if min(ys) / 1.2 <= y <= max(ys) * 1.2],
                       [f"{y:g}x" for y in (0.5, 1, 2, 4) if min(ys) / 1.2 <= y <= max(ys) * 1.2])
    axes[1].legend(fontsize=7, frameon=False, loc="upper left")
    fig.suptitle(f"{df['model'].iloc[0]} {df['dtype'].iloc[0]} on {device}: what more bandwidth or compute buys",
                 fontsize=10)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "device": "device", "model": "model", "dtype": "dtype", "cuda_graphs": "bool",
    "bandwidth_scales": "num>0[]", "compute_scales": "num>0[]",
    "workloads[].name": "str", "workloads[].phase": "phase", "workloads[].batch": "int>0",
    "?workloads[].seq": "int>0", "?workloads[].context": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: [plot(out / CSV_NAME, figs / FIGURE_NAME)])


if __name__ == "__main__":
    sys.exit(main())
