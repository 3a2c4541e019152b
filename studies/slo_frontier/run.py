"""Run the SLO-frontier study: TTFT, TPOT and throughput of Llama-2-7B serving per (GPU, batch), and the
best batch under each latency SLO, written as two CSVs and one figure.

Usage: ``python -m studies.slo_frontier [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/slo_frontier/run.py ...`` from anywhere.
``results.csv``, ``frontier.csv`` and ``slo_frontier.png`` go to ``out/slo_frontier/`` under the
repository root by default (``out/`` is not tracked). The committed results are refreshed with
``python -m studies.slo_frontier --out studies/slo_frontier --figures docs/figures``.

Each (device, batch) is one request batch through :func:`simulator.parallel.compose.generate_request`
on one GPU (no parallelism): TTFT is the prefill of the whole batch, TPOT the mean decode step (vLLM's
definition), ``output_tokens_per_s`` the batch's output tokens over its end-to-end time, and
``decode_tokens_per_s`` the steady decode rate ``batch / TPOT``. ``frontier.csv`` has, per device and
TPOT SLO, the batch with the highest throughput that fits in memory and meets the TPOT and TTFT SLOs.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = HERE.name
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
CSV_NAME = "results.csv"
FRONTIER_NAME = "frontier.csv"
FIGURE_NAME = f"{NAME}.png"
COLUMNS = ("device", "model", "dtype", "batch", "input_len", "output_len", "ttft_s", "tpot_s", "e2e_latency_s",
           "output_tokens_per_s", "decode_tokens_per_s", "memory_per_device_bytes", "memory_capacity_bytes",
           "fits_in_memory")
FRONTIER_COLUMNS = ("device", "tpot_slo_s", "ttft_slo_s", "batch", "ttft_s", "tpot_s", "output_tokens_per_s",
                    "limited_by")


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (device, batch)."""
    from simulator.engines.options import options_from_settings
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import generate_request
    from workloads.parallel import ParallelPlan

    opts = options_from_settings({"cuda_graphs": cfg.get("cuda_graphs", False)}, where="config")
    bar = study_progress(len(cfg["devices"]) * len(cfg["batches"]))
    rows = []
    for name in cfg["devices"]:
        dev = load_hardware(name)
        for b in cfg["batches"]:
            g = generate_request(cfg["model"], dev, ParallelPlan(), opts, input_len=cfg["input_len"],
                                 output_len=cfg["output_len"], batch=b, dtype=cfg["dtype"],
                                 samples=cfg.get("tpot_samples", 5))
            bar.update(1)
            x = g.extra
            rows.append({
                "device": dev.name, "model": cfg["model"], "dtype": cfg["dtype"], "batch": b,
                "input_len": cfg["input_len"], "output_len": cfg["output_len"], "ttft_s": x["ttft_s"],
                "tpot_s": x["tpot_s"], "e2e_latency_s": x["e2e_latency_s"],
                "output_tokens_per_s": x["output_tokens_per_s"], "decode_tokens_per_s": b / x["tpot_s"],
                "memory_per_device_bytes": g.memory_per_device_bytes, "memory_capacity_bytes": g.memory_capacity_bytes,
                "fits_in_memory": g.fits_in_memory,
            })
    bar.close()
    return rows


def frontier(rows: list[dict[str, Any]], tpot_slos_s: list[float], ttft_slo_s: float) -> list[dict[str, Any]]:
    """Per device and TPOT SLO: the batch of highest ``output_tokens_per_s`` that fits and meets both SLOs
    (a row with an empty batch when none does), and what stops a larger batch (``limited_by``: the
    ``tpot`` or ``ttft`` SLO, ``memory``, or ``batches`` when the largest batch of the sweep qualifies)."""
    out = []
    for dev in dict.fromkeys(r["device"] for r in rows):
        mine = sorted((r for r in rows if r["device"] == dev), key=lambda r: r["batch"])
        for slo in tpot_slos_s:
            ok = [r for r in mine if r["fits_in_memory"] and r["tpot_s"] <= slo and r["ttft_s"] <= ttft_slo_s]
            best = max(ok, key=lambda r: (r["output_tokens_per_s"], -r["batch"]), default=None)
            row: dict[str, Any] = {"device": dev, "tpot_slo_s": slo, "ttft_slo_s": ttft_slo_s}
            if best is None:
                row.update({"batch": "", "ttft_s": "", "tpot_s": "", "output_tokens_per_s": "",
                            "limited_by": _why(mine[0], slo, ttft_slo_s)})
            else:
                bigger = [r for r in mine if r["batch"] > best["batch"]]
                row.update({k: best[k] for k in ("batch", "ttft_s", "tpot_s", "output_tokens_per_s")})
                row["limited_by"] = _why(bigger[0], slo, ttft_slo_s) if bigger else "batches"
            out.append(row)
    return out


def _why(r: dict[str, Any], tpot_slo: float, ttft_slo: float) -> str:
    reasons = [name for name, bad in (("memory", not r["fits_in_memory"]), ("tpot", r["tpot_s"] > tpot_slo),
                                      ("ttft", r["ttft_s"] > ttft_slo)) if bad]
    return "+".join(reasons) or "throughput"


def write_csv(rows: list[dict[str, Any]], out: Path, columns: tuple[str, ...] = COLUMNS) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, columns)


def plot(csv_path: Path, out: Path, tpot_slos_s: list[float]) -> Path:
    """Output tokens per second versus TPOT, one line per GPU through its batch sizes (labelled), its
    Pareto front (lower TPOT, higher throughput) over the batches that fit in memory, and the TPOT SLOs."""
    import pandas as pd

    from simulator.report.figures import pareto_figure, save_figure

    if not csv_path.is_file():
        raise FileNotFoundError(f"{csv_path}: no such results file; expected the CSV of "
                                f"`python -m studies.{NAME}` (or --out studies/{NAME})")
    df = pd.read_csv(csv_path)
    fits = df[df["fits_in_memory"].astype(bool)]
    fig = pareto_figure(fits, "tpot_s", "output_tokens_per_s", hue="device", minimize=(True, False), logx=True,
                        logy=True, title=f"{df['model'].iloc[0]} {df['dtype'].iloc[0]} serving, {df['input_len'].iloc[0]} "
                                         f"in / {df['output_len'].iloc[0]} out tokens: throughput vs TPOT")
    ax = fig.axes[0]
    colors = {label: h.get_facecolor()[0] for h, label in zip(*ax.get_legend_handles_labels(), strict=True)
              if hasattr(h, "get_facecolor")}
    for dev, part in df.groupby("device", sort=True):
        part = part.sort_values("batch")
        color = colors.get(str(dev), "black")
        ax.plot(part["tpot_s"] * 1e3, part["output_tokens_per_s"], lw=0.6, ls=":", color=color)
        for _, r in part.iterrows():
            if not bool(r["fits_in_memory"]):
                ax.plot([r["tpot_s"] * 1e3], [r["output_tokens_per_s"]], marker="x", ms=6, color=color, ls="none")
            ax.annotate(str(int(r["batch"])), (r["tpot_s"] * 1e3, r["output_tokens_per_s"]), fontsize=5.5,
                        xytext=(3, -3), textcoords="offset points", color=color)
    for slo in tpot_slos_s:
        ax.axvline(slo * 1e3, color="grey", lw=0.7, ls="--")
        ax.annotate(f"TPOT SLO {slo * 1e3:g} ms", (slo * 1e3, 0.02), xycoords=("data", "axes fraction"),
                    rotation=90, va="bottom", ha="right", fontsize=6, color="grey")
    if ax.get_xlabel() != "TPOT (ms)":
        raise ValueError(f"{csv_path}: tpot_s: expected values in milliseconds; got axis {ax.get_xlabel()!r}")
    ax.set_title(ax.get_title() + "\nnumbers: batch size; x: does not fit in memory; dotted: all batches", fontsize=8)
    out.parent.mkdir(parents=True, exist_ok=True)
    return save_figure(fig, out)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "model": "model", "dtype": "dtype", "devices": "device[]", "input_len": "int>0", "output_len": "int>0",
    "batches": "int>0[]", "cuda_graphs": "bool", "tpot_samples": "int>0", "tpot_slos_s": "num>0[]",
    "ttft_slo_s": "num>0",
}


def main(argv: list[str] | None = None) -> int:
    def compute(cfg: dict[str, Any], out: Path) -> str:
        rows = run(cfg)
        write_csv(rows, out / CSV_NAME)
        write_csv(frontier(rows, cfg["tpot_slos_s"], cfg["ttft_slo_s"]), out / FRONTIER_NAME, FRONTIER_COLUMNS)
        return f"{len(rows)} rows -> {out / CSV_NAME}; frontier -> {out / FRONTIER_NAME}"

    def draw(cfg: dict[str, Any], out: Path, figures: Path) -> list[Path]:
        # the SLO lines come from the configuration of the same size as the run (--reduced or not)
        return [plot(out / CSV_NAME, figures / FIGURE_NAME, cfg["tpot_slos_s"])]

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0], compute=compute,
                      draw=draw, results="results.csv and frontier.csv")


if __name__ == "__main__":
    sys.exit(main())
