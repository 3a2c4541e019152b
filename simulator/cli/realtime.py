"""`nodeperf realtime SCENARIO.toml --hardware NODE`: simulate periodic and data-driven model tasks with
deadlines on a node; response times, deadline misses, chain latencies, utilisation and worst-case bounds,
with transfers between devices and shared-DRAM contention (``--contention off`` / ``--transfers off``
turn them off for comparison)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from simulator.cli.common import nonempty, nonnegative_int, positive_int


def _placement(text: str) -> tuple[str, str]:
    task, eq, dev = text.partition("=")
    if not eq or not task.strip() or not dev.strip():
        raise argparse.ArgumentTypeError(f"got {text!r}; expected TASK=DEVICE, e.g. detector=dla0")
    return task.strip(), dev.strip()


def _positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive number of seconds") from None
    if not v > 0 or v == float("inf"):
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive number of seconds")
    return v


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "realtime",
        help="simulate periodic/sporadic model tasks with deadlines on a node, with worst-case bounds",
        description="Simulate the tasks of SCENARIO.toml (schema: docs/realtime.md) on a node: each job's kernels "
                    "are costed on its device and scheduled by fixed priority, preempted only at kernel "
                    "boundaries. Prints per task and per end-to-end chain the response-time p50/p99/p99.9/max, "
                    "deadline misses, jitter and a worst-case response-time bound (response-time analysis), and "
                    "each device's utilisation. Inputs from other devices are transferred over the node's links "
                    "and devices that share one DRAM slow each other down (both in the bound too).",
    )
    p.add_argument("scenario", metavar="SCENARIO.toml", help="the scenario file")
    p.add_argument("--hardware", required=True, metavar="NODE",
                   help="catalog node (hwmodels/catalog/nodes), device or system name, a TOML path; NAME@MODE for "
                        "a power mode (jetson-agx-orin-64gb@30w)")
    p.add_argument("--power-mode", type=nonempty, metavar="MODE",
                   help="run every device that ships MODE in that power mode (same as --hardware NAME@MODE)")
    p.add_argument("--frames", type=positive_int, metavar="N",
                   help="frame budget: periods of the fastest source task (default: the scenario's, else 10000)")
    p.add_argument("--seed", type=nonnegative_int, metavar="S", help="random seed (default: the scenario's, else 0)")
    p.add_argument("--time-limit", type=_positive_float, metavar="SECONDS",
                   help="wall-clock limit of the simulation (default: the scenario's time_limit_s, else 300)")
    p.add_argument("--place", type=_placement, action="append", default=[], metavar="TASK=DEVICE",
                   help="place TASK on DEVICE instead of its device key (repeatable; DEVICE may be auto)")
    p.add_argument("--overlay", type=nonempty, action="append", default=[], metavar="FILE.toml",
                   help="apply an overlay (calibration or power mode file) to every device that accepts it")
    p.add_argument("--calibration", type=nonempty, metavar="OVERLAY.toml",
                   help="apply a calibration overlay (single-device hardware only)")
    p.add_argument("--contention", choices=("on", "off"), default="on",
                   help="on (default): devices of the node's shared memory (Jetson's GPU, DLAs and CPU) divide its "
                        "DRAM bandwidth max-min fairly while their kernels overlap, and the bound allows for it; "
                        "off: every device runs as if alone (for comparison)")
    p.add_argument("--transfers", choices=("on", "off"), default="on",
                   help="on (default): a job whose predecessor ran on another device first receives its output "
                        "over their link (charged to the job's device); off: data moves between devices for free")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the executed jobs as a Chrome trace (chrome://tracing, Perfetto); - for standard "
                        "output, instead of the table")
    p.add_argument("--csv", metavar="FILE",
                   help="write one CSV row per task and per chain (response-time percentiles, bound, deadline, "
                        "misses; times in seconds) to FILE; - for standard output, instead of the table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.realtime.simulate import run_realtime

    if not args.verbose:
        logging.getLogger("simulator").setLevel(logging.ERROR)
    check_outputs(("--trace", args.trace), ("--csv", args.csv), json_flag=args.json)
    placement: dict[str, str] = {}
    for task, dev in args.place:
        if task in placement:
            raise ValueError(f"--place {task}={dev}: task placed twice; got {task}={placement[task]} and {task}={dev}; "
                             "expected one --place per task")
        placement[task] = dev
    hardware = args.hardware
    if args.power_mode:
        if "@" in hardware:
            raise ValueError(f"--power-mode {args.power_mode}: a power mode is already named; got --hardware {hardware}; "
                             "expected NAME@MODE or --power-mode MODE, not both")
        hardware = f"{hardware}@{args.power_mode}"
    result = run_realtime(args.scenario, hardware, frames=args.frames, seed=args.seed,
                          time_limit_s=args.time_limit, trace=args.trace is not None, overlays=args.overlay,
                          placement=placement or None, calibration=args.calibration,
                          contention=args.contention == "on", transfers=args.transfers == "on")
    if args.trace is not None:
        write_output("--trace", args.trace, json.dumps(result.chrome_trace(), sort_keys=True) + "\n")
    if args.csv is not None:
        write_output("--csv", args.csv, _csv(result))
    if to_stdout(args.trace, args.csv):  # that output is all standard output shows
        return 0
    if args.json:
        sys.stdout.write(result.to_json() + "\n")
        return 0
    print(result.to_table())
    if args.trace is not None:
        print(f"wrote a Chrome trace of {len(result.trace)} job runs to {args.trace}")
    if args.csv is not None:
        print(f"wrote {len(result.tasks) + len(result.chains)} rows to {args.csv}")
    return 0


_CSV_TASK = ("device", "priority", "released", "wcet_s", "period_s", "transfer_s", "contention_s")
_CSV_STATS = ("jobs", "p50_s", "p99_s", "p999_s", "max_s", "min_s", "mean_s", "jitter_s", "wcrt_bound_s",
              "deadline_s", "deadline_misses", "miss_rate")


def _csv(result: Any) -> str:
    """One row per task, then per chain (``kind`` says which): the ``--json`` figures, empty where a
    field does not apply (a chain has no device) or has no value (no samples, no bound)."""
    from simulator.cli.output import csv_text

    doc = result.to_dict()
    rows = [["task", t["name"], *(t[k] for k in _CSV_TASK), None, *(t[k] for k in _CSV_STATS)] for t in doc["tasks"]]
    rows += [["chain", c["name"], *([None] * len(_CSV_TASK)), " ".join(c["tasks"]), *(c[k] for k in _CSV_STATS)]
             for c in doc["chains"]]
    return csv_text(["kind", "name", *_CSV_TASK, "chain_tasks", *_CSV_STATS], rows)
