"""`nodeperf graph MODEL`: summarise an operator graph (params, FLOPs, bytes, ops by kind, memory, groups)."""

from __future__ import annotations

import argparse
import json

from simulator.cli.common import add_model_args, graph_from_args
from simulator.report.formatting import binary_bytes, si, table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("graph", help="summarise a model's operator graph",
                       description="Summarise a model's operator graph: params, FLOPs, bytes, ops by kind, memory.")
    add_model_args(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object")
    p.add_argument("--top", type=int, default=10, help="groups to list (default 10)")
    p.add_argument("--depth", type=int, default=2, help="group depth for the breakdown (default 2)")
    p.add_argument("--save", metavar="FILE", help="also write the graph as versioned JSON (- for standard output, "
                                                  "instead of the summary)")
    p.set_defaults(func=run)


def summary(graph, top: int = 10, depth: int = 2) -> dict:
    from workloads.analysis import breakdown, totals

    t = totals(graph)
    kinds = breakdown(graph, "kind")
    groups = breakdown(graph, "group", depth=depth)
    return {
        "model": graph.meta.get("model", graph.name),
        "meta": graph.meta.to_json(),
        "params": t.params,
        "flops": t.flops,
        "macs": t.macs,
        "ops": t.ops,
        "bytes_read": t.bytes_read,
        "bytes_written": t.bytes_written,
        "weight_bytes": t.weight_bytes,
        "kv_cache_bytes": t.kv_cache_bytes,
        "peak_activation_bytes": t.peak_activation_bytes,
        "ops_by_kind": {k: v["ops"] for k, v in kinds.items()},
        "flops_by_kind": {k: v["flops"] for k, v in kinds.items()},
        "top_groups": [{"group": k, **v} for k, v in list(groups.items())[:top]],
    }


def run(args: argparse.Namespace) -> int:
    from simulator.cli.output import check_outputs, write_output

    check_outputs(("--save", args.save), json_flag=args.json)
    graph = graph_from_args(args)
    if args.save is not None:
        from workloads.serialize import graph_to_json

        # the text save_graph writes, through the CLI's checked writer (- is standard output)
        text = json.dumps(graph_to_json(graph), separators=(",", ":"), sort_keys=False)
        write_output("--save", args.save, text + "\n" if args.save == "-" else text)
        if args.save == "-":
            return 0
    s = summary(graph, args.top, args.depth)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    meta = ", ".join(f"{k}={v}" for k, v in s["meta"].items() if k != "model")
    print(f"{s['model']}" + (f"  ({meta})" if meta else ""))
    print(f"  params                {s['params']:,} ({si(s['params'])})")
    print(f"  FLOPs                 {si(s['flops'], 'FLOP')}  ({si(s['macs'], 'MAC')} in contractions)")
    print(f"  compulsory bytes      read {binary_bytes(s['bytes_read'])}, written {binary_bytes(s['bytes_written'])}")
    print(f"  weights               {binary_bytes(s['weight_bytes'])}")
    if s["kv_cache_bytes"]:
        print(f"  KV cache              {binary_bytes(s['kv_cache_bytes'])}")
    print(f"  peak live activations {binary_bytes(s['peak_activation_bytes'])}")
    print(f"  ops                   {s['ops']:,}\n")
    rows = [[k, f"{n:,}", si(s["flops_by_kind"][k], "FLOP")] for k, n in s["ops_by_kind"].items()]
    print(table(rows, ["op kind", "count", "FLOPs"]))
    print()
    rows = [[g["group"], f"{g['ops']:,}", si(g["flops"], "FLOP"), f"{100 * g['flops'] / max(s['flops'], 1):.1f}%"]
            for g in s["top_groups"]]
    print(table(rows, ["group", "ops", "FLOPs", "share"]))
    return 0
