"""Run the AV perception study: the scenario on every (placement, power mode), written as two CSVs.

Usage: ``python -m studies.av_perception [--reduced] [--out DIR] [--figures DIR] [--plot-only]
[--contention on|off] [--transfers on|off]`` from the repository root, or ``python
studies/av_perception/run.py ...`` from anywhere. It writes ``results.csv`` (one row per task and per chain of each
configuration: response-time percentiles, the worst-case bound, deadline misses, the device's
utilisation, the worst-case input transfer and shared-DRAM slowdown in a task's work, and how much
longer the device was busy than its kernels take alone) and ``cdf.csv`` (the response-time distribution of
each row at :data:`simulator.realtime.simulate.CDF_PERCENTILES`), then draws ``av_response_cdf.png``
and ``av_miss_rate.png``, into ``out/av_perception/`` under the repository root (``out/`` is not
tracked); the committed ones are refreshed with ``python -m studies.av_perception --out
studies/av_perception --figures docs/figures``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
COLUMNS = ("placement", "power_mode", "kind", "name", "device", "jobs", "p50_s", "p99_s", "p999_s", "max_s",
           "wcrt_bound_s", "deadline_s", "deadline_misses", "miss_rate", "jitter_s", "device_utilisation",
           "device_utilisation_wcet", "transfer_s", "contention_s", "device_stretch")
CDF_COLUMNS = ("placement", "power_mode", "kind", "name", "percentile", "response_s")


def run(cfg: dict[str, Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(result rows, CDF rows) of every (placement, power mode) of ``cfg``."""
    from simulator.realtime.scenario import load_scenario
    from simulator.realtime.simulate import CDF_PERCENTILES, run_realtime

    bar = study_progress(len(cfg["placements"]) * len(cfg["power_modes"]))
    rows: list[dict[str, Any]] = []
    cdf_rows: list[dict[str, Any]] = []
    for placement, overrides in cfg["placements"].items():
        scn = load_scenario(HERE / cfg["scenario"], placement=dict(overrides))
        for mode in cfg["power_modes"]:
            r = run_realtime(scn, f"{cfg['node']}@{mode}", frames=cfg["frames"], seed=cfg["seed"],
                             contention=cfg.get("contention", True), transfers=cfg.get("transfers", True))
            bar.update(1)
            devs = {d.name: d for d in r.devices}
            entries = [("task", t.name, t.device, t.stats, t.wcrt_bound_s, t.deadline_s, t.transfer_s, t.contention_s)
                       for t in r.tasks]
            entries += [("chain", c.name, "", c.stats, c.wcrt_bound_s, c.deadline_s, math.nan, math.nan)
                        for c in r.chains]
            for kind, name, dev, s, bound, deadline, transfer, contention in entries:
                rows.append({
                    "placement": placement, "power_mode": mode, "kind": kind, "name": name, "device": dev,
                    "jobs": s.count, "p50_s": s.p50_s, "p99_s": s.p99_s, "p999_s": s.p999_s, "max_s": s.max_s,
                    "wcrt_bound_s": bound, "deadline_s": deadline, "deadline_misses": s.deadline_misses,
                    "miss_rate": s.miss_rate, "jitter_s": s.jitter_s,
                    "device_utilisation": devs[dev].utilisation if dev else math.nan,
                    "device_utilisation_wcet": devs[dev].utilisation_wcet if dev else math.nan,
                    "transfer_s": transfer, "contention_s": contention,
                    "device_stretch": devs[dev].stretch if dev else math.nan,
                })
                for pct, val in zip(CDF_PERCENTILES, s.cdf_s, strict=True):
                    cdf_rows.append({"placement": placement, "power_mode": mode, "kind": kind, "name": name,
                                     "percentile": pct, "response_s": val})
    bar.close()
    return rows, cdf_rows


def write_csvs(rows: list[dict[str, Any]], cdf_rows: list[dict[str, Any]], folder: Path) -> tuple[Path, Path]:
    """Write ``results.csv`` and ``cdf.csv`` into ``folder`` (created); floats to 6 significant digits."""
    out = (folder / "results.csv", folder / "cdf.csv")
    write_rows(rows, out[0], COLUMNS)
    write_rows(cdf_rows, out[1], CDF_COLUMNS)
    return out


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "scenario": "str", "node": "device", "power_modes": "power_mode[]", "frames": "int>0", "seed": "int>=0",
    "contention": "bool", "transfers": "bool", "placements": "table",
}


def main(argv: list[str] | None = None) -> int:
    from studies.av_perception.plot import plot

    def options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--contention", choices=("on", "off"), default=None,
                       help="override the config's contention (shared-DRAM sharing between the Orin engines)")
        p.add_argument("--transfers", choices=("on", "off"), default=None,
                       help="override the config's transfers (hand-offs between engines)")

    def configure(cfg: dict[str, Any], args: argparse.Namespace) -> None:
        for key in ("contention", "transfers"):
            if getattr(args, key) is not None:
                cfg[key] = getattr(args, key) == "on"

    def compute(cfg: dict[str, Any], out: Path) -> str:
        rows, cdf_rows = run(cfg)
        res, cdf = write_csvs(rows, cdf_rows, out)
        return f"{len(rows)} rows -> {res}; {len(cdf_rows)} CDF points -> {cdf}"

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0], compute=compute,
                      draw=lambda _cfg, out, figs: list(plot(out, figs)), results="results.csv and cdf.csv",
                      options=options, configure=configure)


if __name__ == "__main__":
    sys.exit(main())
