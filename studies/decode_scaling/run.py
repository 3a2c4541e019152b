"""Run the decode-scaling study: one predicted decode step per (device, batch), written as a CSV and a figure.

Usage: ``python -m studies.decode_scaling [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/decode_scaling/run.py ...`` from anywhere. ``results.csv`` and
``decode_scaling.png`` go to ``out/decode_scaling/`` under the repository root by default (``out/`` is not
tracked); the committed ones are refreshed with ``python -m studies.decode_scaling --out studies/decode_scaling``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, rows_step, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
CSV_NAME = "results.csv"
FIGURE_NAME = "decode_scaling.png"
COLUMNS = ("device", "batch", "context", "latency_s", "tokens_per_s", "energy_per_token_j", "avg_power_w",
           "memory_bound_share", "weight_bytes", "kv_cache_bytes", "memory_required_bytes", "fits_in_memory")


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (device, batch): a whole decode step of ``cfg['model']`` at ``cfg['context']``."""
    from hwmodels.catalog import load_device
    from simulator import evaluate
    from workloads.analysis import totals
    from workloads.resolve import load_workload

    bar = study_progress(len(cfg["devices"]) * len(cfg["batches"]))
    rows = []
    for name in cfg["devices"]:
        dev = load_device(name)
        for batch in cfg["batches"]:
            g = load_workload(cfg["model"], phase="decode", batch=batch, context=cfg["context"], dtype=cfg["dtype"])
            r = evaluate(g, dev)
            bar.update(1)
            t = r.totals
            memory_s = sum(rec.time_s for rec in r.records if rec.bound == "memory")
            rows.append({
                "device": dev.name, "batch": batch, "context": cfg["context"], "latency_s": t.latency_s,
                "tokens_per_s": batch / t.latency_s, "energy_per_token_j": t.energy_j / batch,
                "avg_power_w": t.avg_power_w, "memory_bound_share": memory_s / t.latency_s,
                "weight_bytes": g.weight_bytes, "kv_cache_bytes": totals(g).kv_cache_bytes,
                "memory_required_bytes": r.memory.required_bytes, "fits_in_memory": r.memory.fits,
            })
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "model": "model", "dtype": "dtype", "context": "int>0", "devices": "device[]", "batches": "int>0[]",
}


def main(argv: list[str] | None = None) -> int:
    from studies.decode_scaling.plot import plot

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, CSV_NAME),
                      draw=lambda _cfg, out, figs: [plot(out / CSV_NAME, figs / FIGURE_NAME)])


if __name__ == "__main__":
    sys.exit(main())
