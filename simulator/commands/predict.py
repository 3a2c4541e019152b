"""`nodeperf predict MODEL --hardware NAME`: per-op latency, energy and memory of a workload on a device."""

from __future__ import annotations

import argparse
import sys

from simulator.commands._common import add_model_args, graph_from_args, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="predict latency, energy and memory of a model on a device",
        description="Predict latency, energy and memory of MODEL on a device or system, op by op. "
                    "Prints the top ops and the totals; --json prints one JSON object, --csv writes every op.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME",
                   help="catalog device or system name (see `nodeperf hardware list`) or a device/system TOML path")
    p.add_argument("--top", type=positive_int, default=15, help="rows of the op table (default 15)")
    p.add_argument("--no-aggregate", dest="aggregate", action="store_false",
                   help="one row per op instead of summing ops that differ only by layer index")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the whole report)")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per op to FILE")
    p.add_argument("--fusion", action="store_true", help="fuse elementwise ops into their producer kernel")
    p.add_argument("--cuda-graphs", action="store_true", help="kernels replayed from a CUDA graph (lower launch floor)")
    p.add_argument("--no-power-cap", dest="power_cap", action="store_false",
                   help="do not stretch ops whose average power would exceed the TDP")
    p.add_argument("--tf32", action="store_true", help="fp32 contractions use TF32 tensor cores")
    p.set_defaults(func=run)


def load_hardware(name: str):  # noqa: ANN201 - DeviceSpec | SystemSpec
    """A catalog device or system by name, or a TOML file (device first, then system)."""
    from hwmodels.catalog import list_systems, load_device, load_system
    from hwmodels.spec import SpecError

    if name.lower().endswith(".toml") or "/" in name:
        try:
            return load_device(name)
        except SpecError as dev_err:
            try:
                return load_system(name)
            except SpecError:
                raise dev_err from None
    if name.strip().lower() in {s.lower() for s in list_systems()}:
        return load_system(name)
    return load_device(name)


def run(args: argparse.Namespace) -> int:
    from simulator.engine import EvalOptions, evaluate

    hw = load_hardware(args.hardware)
    graph = graph_from_args(args)
    opts = EvalOptions(fusion=args.fusion, cuda_graphs=args.cuda_graphs, power_cap=args.power_cap,
                       allow_tf32=args.tf32)
    report = evaluate(graph, hw, opts)
    if args.csv:
        with open(args.csv, "w", encoding="utf-8", newline="") as fh:
            fh.write(report.to_csv())
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
        return 0
    meta = dict(graph.meta)
    desc = ", ".join(f"{k} {meta[k]}" for k in ("phase", "batch", "seq", "context", "dtype") if meta.get(k) is not None)
    print(f"{graph.name}{f' ({desc})' if desc else ''} on {report.hardware}: {len(graph)} ops")
    print()
    print(report.to_table(top=args.top, aggregate=args.aggregate))
    if args.csv:
        print(f"\nwrote {len(report.records)} rows to {args.csv}")
    return 0
