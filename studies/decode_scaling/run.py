"""Run the decode-scaling study: one predicted decode step per (device, batch), written as CSV.

Usage: ``python -m studies.decode_scaling.run [--reduced] [--out FILE.csv]``. The default output is
``out/decode_scaling/results.csv`` under the repository root (``out/`` is not tracked); the committed
``studies/decode_scaling/results.csv`` is replaced only when it is named explicitly with ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tomllib
from pathlib import Path
from typing import Any

from studies._cli import run_to_csv, write_rows

HERE = Path(__file__).parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = HERE.parents[1] / "out" / "decode_scaling"
DEFAULT_OUT = OUT_DIR / "results.csv"
COLUMNS = ("device", "batch", "context", "latency_s", "tokens_per_s", "energy_per_token_j", "avg_power_w",
           "memory_bound_share", "weight_bytes", "kv_cache_bytes", "memory_required_bytes", "fits_in_memory")


def load_config(reduced: bool = False, path: Path = HERE / "config.toml") -> dict[str, Any]:
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    if reduced:
        cfg.update(cfg.pop("reduced"))
    else:
        cfg.pop("reduced", None)
    return cfg


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (device, batch): a whole decode step of ``cfg['model']`` at ``cfg['context']``."""
    from hwmodels.catalog import load_device
    from simulator import evaluate
    from workloads.analysis import totals
    from workloads.resolve import load_workload

    rows = []
    for name in cfg["devices"]:
        dev = load_device(name)
        for batch in cfg["batches"]:
            g = load_workload(cfg["model"], phase="decode", batch=batch, context=cfg["context"], dtype=cfg["dtype"])
            r = evaluate(g, dev)
            t = r.totals
            memory_s = sum(rec.time_s for rec in r.records if rec.bound == "memory")
            rows.append({
                "device": dev.name, "batch": batch, "context": cfg["context"], "latency_s": t.latency_s,
                "tokens_per_s": batch / t.latency_s, "energy_per_token_j": t.energy_j / batch,
                "avg_power_w": t.avg_power_w, "memory_bound_share": memory_s / t.latency_s,
                "weight_bytes": g.weight_bytes, "kv_cache_bytes": totals(g).kv_cache_bytes,
                "memory_required_bytes": r.memory.required_bytes, "fits_in_memory": r.memory.fits,
            })
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, COLUMNS)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reduced", action="store_true", help="the small configuration the tests run")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help="CSV to write (default out/decode_scaling/results.csv under the repository root)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # "does not fit" is a column here, not a warning per row
    return run_to_csv("decode_scaling", lambda: run(load_config(args.reduced)), write_csv, args.out)


if __name__ == "__main__":
    sys.exit(main())
