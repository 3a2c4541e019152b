"""Held-out error of the host CPU calibration on this machine: MAPE before/after, with the machine named.

The CI test (``tests/simulator/cli/test_cli_calibrate.py::test_cpu_end_to_end``) asserts only that
calibration lowers the held-out error: the absolute figure depends on the machine (CPU, hypervisor,
other tenants). The absolute goal lives here:

    held-out MAPE after calibration <= CPU_HELD_OUT_MAPE_MAX (15 %, the fidelity issue's target) with the
    CI settings (quick suite, one thread, 0.1 s per case in five interleaved rounds, 30 % held out, seed 0).

Documented quiet-run figures: docs/calibration.md and hwmodels/measurements/host_cpu_quick.md.

Run: ``python benchmarks/bench_host_calibration.py`` (measures the quick suite with torch, about 20 s,
then calibrates), or ``--measurements FILE`` to calibrate an existing measurement CSV of this machine;
``--runs N`` repeats measure + calibrate (``--keep DIR`` keeps the CSVs); ``--json`` prints one JSON
object. Each run also reports its quietness: the median over cases of the repetitions' inter-quartile
range / median (1-2 % on a quiet machine measured in one round; `nodeperf measure` now pools five
interleaved rounds, so the figure also holds the differences between rounds: 6-22 % on the shared
2-core AMD EPYC guest of docs/calibration.md). Exit status 1 when the median held-out MAPE after
calibration is above the goal or not below the error before.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

#: Held-out MAPE (%) the CPU calibration should reach on a quiet machine with the CI settings (the median
#: of --runs 3 on the shared AMD EPYC AVX2 guest: 12.5, 14.1 and 9.6 % in three sessions, docs/calibration.md).
CPU_HELD_OUT_MAPE_MAX = 15.0


def _cli_json(argv: list[str]) -> tuple[int, dict]:
    from simulator.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    text = buf.getvalue()
    try:
        return rc, json.loads(text)
    except json.JSONDecodeError:
        return rc, {}


def _size(n: float) -> str:
    return f"{n / 2**20:.3g} MiB" if n >= 2**20 else f"{n / 2**10:.3g} KiB"


def _machine() -> dict:
    import os

    from hwmodels.host import l3_from_ladder, probe_host, read_host_info

    info = read_host_info()
    probes = probe_host(info)
    l3 = l3_from_ladder(probes.plan, probes.values)
    return {
        "cpu": info.model_name, "vendor": info.vendor_id, "family": f"{info.family:#x}",
        "microarch": info.microarch.name if info.microarch else "not in hwmodels/host.py's table",
        "cores": info.cores, "online_cpus": info.online_cpus,
        "hypervisor": info.hypervisor or "none detected", "hypervisor_source": info.hypervisor_source,
        "caches": {k: {"per_instance": v[0], "all": v[1], "cpus_per_instance": info.cache_sharing.get(k, 0)}
                   for k, v in sorted(info.caches.items())},
        "memory_bytes": info.memory_bytes,
        "probe_cache": probes.cache_status, "probe_cache_file": probes.cache_file,
        "probes_measured_at": probes.measured_at, "probes_load_average": probes.load_average,
        "l3_usable_bytes": l3.usable_bytes if l3 is not None else 0,
        "l3_rule": l3.rule if l3 is not None else "no L3 detected",
        "load_average_now": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def _one_run(csv: Path | None, args: argparse.Namespace, workdir: Path, i: int) -> dict:
    measured_s = None
    if csv is None:
        csv = workdir / f"host-{i}.csv"
        t0 = time.perf_counter()
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):  # per-case progress
            from simulator.cli import main

            rc = main(["measure", "--device", "cpu", "--suite", "quick", "--threads", str(args.threads),
                       "--budget", str(args.budget), "--out", str(csv)])
        if rc != 0:
            raise SystemExit(f"bench_host_calibration: nodeperf measure failed (exit {rc}):\n{err.getvalue()}")
        measured_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    with contextlib.redirect_stderr(io.StringIO()):  # "held-out MAPE got worse" is reported below
        rc, res = _cli_json(["calibrate", str(csv), "--hardware", f"host:{args.threads}", "--seed", str(args.seed),
                             "--json"])
    if not res:
        raise SystemExit(f"bench_host_calibration: nodeperf calibrate failed (exit {rc})")
    import csv as _csv

    with open(csv, newline="", encoding="utf-8") as fh:
        spread = [float(r["iqr_s"]) / float(r["median_s"]) for r in _csv.DictReader(fh)
                  if r.get("iqr_s") and r.get("median_s")]
    return {"measurements": str(csv), "measure_s": measured_s, "calibrate_s": time.perf_counter() - t0,
            "iqr_over_median": statistics.median(spread) if spread else None,
            "calibrate_exit": rc,
            **{f"{split}_{when}": {k: res[split][when][k] for k in ("n", "mape", "median_ape", "p90_ape")}
               for split in ("train", "test") for when in ("before", "after")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measurements", type=Path, help="calibrate this CSV (of this machine) instead of measuring")
    ap.add_argument("--runs", type=int, default=1, help="measure + calibrate this many times (default 1)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--budget", type=float, default=0.1, help="seconds of timed runs per case (CI: 0.1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", type=Path, metavar="DIR", help="keep the measured CSVs in this folder")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    machine = _machine()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        runs = [_one_run(args.measurements, args, workdir, i) for i in range(max(1, args.runs))]
    after = statistics.median(r["test_after"]["mape"] for r in runs)
    before = statistics.median(r["test_before"]["mape"] for r in runs)
    ok = after <= CPU_HELD_OUT_MAPE_MAX and after < before
    if args.json:
        print(json.dumps({"machine": machine, "runs": runs, "held_out_mape_before": before,
                          "held_out_mape_after": after, "goal": CPU_HELD_OUT_MAPE_MAX, "met": ok}, indent=2))
        return 0 if ok else 1
    m = machine
    print(f"machine: {m['cpu']} ({m['vendor']} family {m['family']}, {m['microarch']}), {m['cores']} cores, "
          f"hypervisor: {m['hypervisor']} [{m['hypervisor_source']}]")
    caches = ", ".join(f"{k} {_size(v['per_instance'])} x{v['all'] // v['per_instance']} "
                       f"({v['cpus_per_instance']} CPU/inst)" for k, v in m["caches"].items())
    print(f"caches: {caches or 'none detected'}; memory {m['memory_bytes'] / 2**30:.1f} GiB; "
          f"load average now {m['load_average_now']}")
    print(f"probes: cache {m['probe_cache']} ({m['probe_cache_file'] or 'no file'}), timed {m['probes_measured_at']} "
          f"at load {m['probes_load_average']}")
    print(f"usable L3 {_size(m['l3_usable_bytes'])}: {m['l3_rule']}")
    print(f"settings: quick suite, {args.threads} thread(s), budget {args.budget} s, seed {args.seed}, 30 % held out")
    print()
    print(f"{'run':>3}  {'train n':>7}  {'train before':>12}  {'train after':>11}  {'held-out n':>10}  "
          f"{'held-out before':>15}  {'held-out after':>14}  {'iqr/med':>7}  {'measure':>8}  {'calibrate':>9}")
    for i, r in enumerate(runs, 1):
        ms = f"{r['measure_s']:.0f} s" if r["measure_s"] is not None else "-"
        quiet = f"{100 * r['iqr_over_median']:.1f}%" if r["iqr_over_median"] is not None else "-"
        print(f"{i:>3}  {r['train_before']['n']:>7}  {r['train_before']['mape']:>11.1f}%  "
              f"{r['train_after']['mape']:>10.1f}%  {r['test_before']['n']:>10}  {r['test_before']['mape']:>14.1f}%  "
              f"{r['test_after']['mape']:>13.1f}%  {quiet:>7}  {ms:>8}  {r['calibrate_s']:>7.0f} s")
    print()
    print(f"held-out MAPE (median of {len(runs)} run(s)): before {before:.1f} %, after {after:.1f} %; "
          f"goal <= {CPU_HELD_OUT_MAPE_MAX:g} % and below before: {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
