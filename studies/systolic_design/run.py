"""Run the systolic-design study: ResNet-50 and BERT-Base on every (array shape, dataflow, scratchpad size)
of the configuration, written as one CSV and three figures.

Usage: ``python -m studies.systolic_design [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/systolic_design/run.py ...`` from anywhere.
``results.csv`` and the figures go to ``out/systolic_design/`` under the repository root by default
(``out/`` is not tracked). The committed results are refreshed with
``python -m studies.systolic_design --out studies/systolic_design --figures docs/figures``.

Layers: every convolution and matrix product of the zoo graph in its GEMM view
(:func:`simulator.sweep.systolic.network_layers`), plus the two GEMMs of each fused attention op, which
that function leaves to the vector unit: ``Q K^T`` (``M = s``, ``N = s_kv``, ``K = d``) and ``P V``
(``M = s``, ``N = d``, ``K = s_kv``), each run ``batch x heads`` times. All designs of a model are one
vectorised call of :func:`simulator.sweep.systolic.systolic_network_variants` (SCALE-Sim v3's closed form
for cycles and utilisation, the double-buffered scratchpad model for DRAM traffic and stalls).
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
FIGURES = {"ResNet-50": f"{NAME}_resnet50.png", "BERT-Base": f"{NAME}_bert.png", "tradeoffs": f"{NAME}_tradeoffs.png"}
COLUMNS = ("workload", "model", "rows", "cols", "dataflow", "sram_kib", "word_bytes", "dram_words_per_cycle",
           "clock_hz", "layers", "macs", "total_cycles", "compute_cycles", "stall_cycles", "latency_s",
           "overall_util_pct", "dram_bytes", "memory_bound_layers")


def memory_system(cfg: dict[str, Any]) -> tuple[float, float]:
    """(DRAM words per array cycle, array clock in Hz): one matrix unit's share of the reference device's
    main-memory bandwidth, ``bandwidth / (sustained clock x cores x arrays per core) / word bytes``."""
    from hwmodels.catalog import load_device

    dev = load_device(cfg["reference_device"])
    if dev.systolic is None:
        raise ValueError(f"config.toml: reference_device: {dev.name} has no systolic arrays; got kind {dev.kind!r}; "
                         "expected a TPU-style device")
    arrays = dev.compute.units * dev.systolic.arrays_per_core
    clock = dev.clock.sustained_hz
    words = dev.main_memory.read_bandwidth_bytes_per_s / (clock * arrays) / cfg["word_bytes"]
    return float(words), float(clock)


def array_layers(graph: Any) -> Any:
    """The graph's array layers: convolutions and matmuls, plus the two GEMMs of every attention op."""
    import numpy as np

    from simulator.sweep.systolic import SystolicLayers, network_layers

    base = network_layers(graph)
    names, cols = list(base.names), {k: list(getattr(base, k)) for k in ("m", "n", "k", "ifmap_words", "repeat")}
    extra = 0
    for op in graph:
        if op.kind != "attention":
            continue
        q, k = op.inputs[0], op.inputs[1]
        b, h, s, d = q.shape
        s_kv = k.shape[2]
        for suffix, m, n, kk, words in (("qk", s, s_kv, d, s * d), ("pv", s, d, s_kv, s * s_kv)):
            names.append(f"{op.name}.{suffix}")
            for key, v in (("m", m), ("n", n), ("k", kk), ("ifmap_words", words), ("repeat", b * h)):
                cols[key].append(v)
        extra += 1
    arr = {k: np.asarray(v, dtype=np.int64) for k, v in cols.items()}
    return SystolicLayers(tuple(names), arr["m"], arr["n"], arr["k"], arr["ifmap_words"], arr["repeat"],
                          skipped_ops=base.skipped_ops - extra)


def designs(cfg: dict[str, Any]) -> list[tuple[int, int, str, int]]:
    """Every (rows, cols, dataflow, scratchpad KiB) of the configuration; ``cols = pes / rows``."""
    out = []
    for r in cfg["rows"]:
        if cfg["pes"] % r:
            raise ValueError(f"config.toml: rows: {r} does not divide pes = {cfg['pes']}; expected a divisor")
        for df in cfg["dataflows"]:
            for kib in cfg["sram_kib"]:
                out.append((int(r), cfg["pes"] // int(r), df, int(kib)))
    return out


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (workload, design)."""
    from simulator.sweep.systolic import systolic_network_variants
    from workloads.resolve import load_workload

    words, clock = memory_system(cfg)
    grid = designs(cfg)
    bar = study_progress(len(cfg["workloads"]))
    rows = []
    for w in cfg["workloads"]:
        g = load_workload(w["model"], batch=w["batch"], seq=w.get("seq"))
        layers = array_layers(g)
        sram = [kib * 1024 for _, _, _, kib in grid]
        v = systolic_network_variants(layers, [d[0] for d in grid], [d[1] for d in grid], [d[2] for d in grid],
                                      sram, sram, sram, words, word_bytes=cfg["word_bytes"], clock_hz=clock)
        bar.update(1)
        for i, (r, c, df, kib) in enumerate(grid):
            rows.append({
                "workload": w["name"], "model": w["model"], "rows": r, "cols": c, "dataflow": df, "sram_kib": kib,
                "word_bytes": cfg["word_bytes"], "dram_words_per_cycle": words, "clock_hz": clock,
                "layers": len(layers.names), "macs": int(v.macs), "total_cycles": int(v.total_cycles[i]),
                "compute_cycles": int(v.compute_cycles[i]), "stall_cycles": int(v.stall_cycles[i]),
                "latency_s": float(v.latency_s[i]), "overall_util_pct": float(v.overall_util_pct[i]),
                "dram_bytes": int(v.dram_bytes[i]), "memory_bound_layers": int(v.memory_bound_layers[i]),
            })
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


def plot(csv_path: Path, folder: Path) -> list[Path]:
    """The figures of the CSV at ``csv_path``: per workload a heatmap of the latency of the best
    dataflow over array shape x scratchpad size, and one figure of utilisation and DRAM traffic
    versus array shape per dataflow at the largest scratchpad."""
    import pandas as pd
    from matplotlib.figure import Figure

    from simulator.report.figures import axis_label, heatmap_figure, save_figure

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                f"`python -m studies.{NAME}` (or --out studies/{NAME})")
    df = pd.read_csv(csv_path)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    pes = int(df["rows"].iloc[0] * df["cols"].iloc[0])
    for wl, part in df.groupby("workload", sort=False):
        fig = heatmap_figure(part, "rows", "sram_kib", "latency_s", agg="min", cmap="viridis_r",
                             title=f"{wl}: latency of the best dataflow, {pes} PEs (cols = {pes} / rows)")
        fig.axes[0].set_xlabel(f"array rows (cols = {pes} / rows)")
        fig.axes[0].set_ylabel("scratchpad per operand (KiB)")
        out.append(save_figure(fig, folder / FIGURES[str(wl)]))
    sram = df["sram_kib"].max()
    sub = df[df["sram_kib"] == sram]
    wls = list(dict.fromkeys(sub["workload"]))
    fig = Figure(figsize=(8.0, 5.4), layout="constrained")
    axes = fig.subplots(2, len(wls), squeeze=False, sharex=True)
    markers = {"os": "o", "ws": "s", "is": "^"}
    for j, wl in enumerate(wls):
        part = sub[sub["workload"] == wl]
        dlabel, dscale = axis_label("dram_bytes", part["dram_bytes"])
        for dfl, p in part.groupby("dataflow"):
            p = p.sort_values("rows")
            axes[0][j].plot(p["rows"], p["overall_util_pct"], marker=markers.get(dfl, "o"), ms=4, lw=1.3, label=dfl)
            axes[1][j].plot(p["rows"], p["dram_bytes"] / dscale, marker=markers.get(dfl, "o"), ms=4, lw=1.3, label=dfl)
        axes[0][j].set_title(f"{wl}", fontsize=9)
        axes[0][j].set_ylabel("overall utilisation (%)")
        axes[1][j].set_ylabel(dlabel)
        axes[1][j].set_xlabel(f"array rows (cols = {pes} / rows)")
        for ax in (axes[0][j], axes[1][j]):
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted(set(part["rows"])), [f"{r}x{pes // r}" for r in sorted(set(part["rows"]))],
                          fontsize=7)
            ax.grid(True, lw=0.3, alpha=0.6)
    axes[0][0].legend(title="dataflow", fontsize=7, title_fontsize=7, frameon=False)
    fig.suptitle(f"Utilisation and DRAM traffic per array shape, {sram} KiB per scratchpad", fontsize=10)
    out.append(save_figure(fig, folder / FIGURES["tradeoffs"]))
    return out


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "reference_device": "device", "word_bytes": "int>0", "pes": "int>0", "rows": "int>0[]",
    "dataflows": "dataflow[]", "sram_kib": "int>0[]",
    "workloads[].name": "str", "workloads[].model": "model", "workloads[].batch": "int>0",
    "?workloads[].seq": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: list(plot(out / CSV_NAME, figs)))


if __name__ == "__main__":
    sys.exit(main())
