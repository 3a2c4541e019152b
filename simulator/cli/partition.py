"""`nodeperf partition MODEL --hardware NODE [--objective latency|throughput|energy]`: place a graph's ops
on the devices of a heterogeneous node and report the gain over the best single device."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from simulator.cli.common import (
    add_model_args,
    check_profile_hardware,
    graph_from_args,
    positive_int,
    profile_from_args,
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "partition",
        help="place a model's ops on the devices of a heterogeneous node (GPU + accelerator + CPU)",
        description="Assign every op of MODEL to a device of NODE (a catalog node such as h100-plus-systolic128 "
                    "or tpu-v5e-host, a node TOML, or any device/system as a one-device node), minimising latency "
                    "or energy, or maximising pipelined throughput. Op costs come from the analytical engine on "
                    "each device, transfers from the node's links; reports the placement, the transfers and the "
                    "gain over the best single device. Model and algorithms: docs/heterogeneous.md.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NODE",
                   help="catalog node name (hwmodels/catalog/nodes), a node TOML path, or a device/system name")
    p.add_argument("--objective", default="latency", metavar="OBJ",
                   help="latency (default): sequential latency of one input; energy: joules of one input; "
                        "throughput: pipelined inputs per second of a batched stream")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per op (position, op, device, the device's "
                                                 "catalog name) to FILE; - for standard output, instead of the table")
    p.add_argument("--top", type=positive_int, default=12, help="rows of the placement table (default 12)")
    p.add_argument("--max-states", type=positive_int, default=None, metavar="N",
                   help="states the dynamic programme keeps per op before it becomes a beam search "
                        "(default 4096; the result says whether it is exact)")
    p.add_argument("--cuda-graphs", action="store_true",
                   help="ops replayed from a recorded graph (CUDA graph, DLA loadable): each pays the device's "
                        "graph_launch_overhead_s instead of launch_overhead_s")
    p.add_argument("--idle", default="used", metavar="POLICY",
                   help="which devices draw idle power in the energy figures: used (default; unused devices are "
                        "power-gated) or all (every device of the node)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from simulator.cli.output import check_outputs, csv_text, to_stdout, write_output
    from simulator.hardware import load_node_or_device
    from simulator.realtime.partition import DEFAULT_MAX_STATES, check_objective, partition

    if not args.verbose:
        logging.getLogger("simulator").setLevel(logging.ERROR)
    objective = check_objective(args.objective)  # before any work: a typo is one line
    check_outputs(("--csv", args.csv), json_flag=args.json)
    node = load_node_or_device(args.hardware)
    check_profile_hardware(args, node)  # a profile on a device it does not run on: one line, before any work
    graph = graph_from_args(args)
    result = partition(graph, node, objective, max_states=args.max_states or DEFAULT_MAX_STATES,
                       cuda_graphs=args.cuda_graphs, idle=args.idle, profile=profile_from_args(args))
    if args.csv is not None:
        spec = {d.name: d.device.name for d in node.devices}
        rows = [[i, op, dev, spec.get(dev)] for i, (op, dev) in enumerate(result.placement.items())]
        write_output("--csv", args.csv, csv_text(["position", "op", "device", "device_spec"], rows))
        if to_stdout(args.csv):  # the CSV is all standard output shows
            return 0
    if args.json:
        out = result.to_json()
        out["devices"] = {d.name: d.device.name for d in node.devices}
        sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
        return 0
    print(_text(graph, node, result, args.top))
    if args.csv is not None:
        print(f"\nwrote {len(result.placement)} rows to {args.csv}")
    return 0


def _ms(s: float) -> str:
    return f"{s * 1e3:.4g} ms"


def _bytes(b: float) -> str:
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if b >= div:
            return f"{b / div:.3g} {unit}"
    return f"{b:.0f} B"


def _runs(result: Any) -> list[tuple[str, str, str, int]]:
    """Contiguous runs of ops on one device, in topological order: (device, first op, last op, count)."""
    runs: list[list[Any]] = []
    for op, dev in result.placement.items():
        if runs and runs[-1][0] == dev:
            runs[-1][2] = op
            runs[-1][3] += 1
        else:
            runs.append([dev, op, op, 1])
    return [tuple(r) for r in runs]  # type: ignore[misc]


def _text(graph: Any, node: Any, r: Any, top: int) -> str:
    lines: list[str] = []
    meta = dict(graph.meta)
    desc = ", ".join(f"{k} {meta[k]}" for k in ("phase", "batch", "seq", "context", "dtype") if meta.get(k) is not None)
    devs = ", ".join(f"{d.name} = {d.device.name}" for d in node.devices)
    lines.append(f"{graph.name}{f' ({desc})' if desc else ''} on node {node.name} [{devs}]: {len(graph)} ops")
    lines.append(f"objective {r.objective}: {r.method} ({'exact' if r.exact else 'heuristic, not proven optimal'})")
    lines.append("")
    counts: dict[str, int] = {}
    for dev in r.placement.values():
        counts[dev] = counts.get(dev, 0) + 1
    for d in node.device_names:
        if d in counts:
            lines.append(f"  {d:<8} {counts[d]:>6} ops  busy {_ms(r.busy_s.get(d, 0.0))}")
    nbytes = sum(t.nbytes for t in r.transfers)
    lines.append(f"  transfers {len(r.transfers)}: {_bytes(nbytes)}, {_ms(sum(t.time_s for t in r.transfers))}, "
                 f"{sum(t.energy_j for t in r.transfers):.4g} J")
    if r.objective == "throughput":
        lines.append("")
        lines.append("pipeline stages:")
        for s in r.stages:
            lines.append(f"  {s.device:<8} ops {s.first_op} .. {s.last_op} ({s.last - s.first + 1}): {_ms(s.time_s)}")
        lines.append(f"throughput {r.throughput_per_s:.4g} inputs/s (best single device {r.best_single_device}: "
                     f"{r.best_single_device_throughput_per_s:.4g} inputs/s; {r.speedup:.3f}x)")
    else:
        runs = _runs(r)
        if len(runs) > 1:
            lines.append("")
            lines.append(f"runs of consecutive ops on one device ({len(runs)}; first {min(top, len(runs))}):")
            for dev, a, b, n in runs[:top]:
                lines.append(f"  {dev:<8} {a} .. {b} ({n} ops)" if n > 1 else f"  {dev:<8} {a}")
    lines.append("")
    lines.append(f"latency {_ms(r.latency_s)}, energy {r.energy_j:.4g} J")
    if r.best_single_device:
        lines.append(f"best single device: {r.best_single_device} ({node.device(r.best_single_device).device.name}) "
                     f"{_ms(r.best_single_device_latency_s)}, {r.best_single_device_energy_j:.4g} J")
        if r.objective != "throughput":
            lines.append(f"gain: {r.best_single_device_latency_s / r.latency_s:.3f}x latency, "
                         f"{r.energy_ratio:.3f}x energy of the best single device")
    for n in r.notes:
        lines.append(f"note: {n}")
    return "\n".join(lines)
