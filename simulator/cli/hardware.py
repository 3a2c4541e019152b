"""`nodeperf hardware [show NAME]`: list the hardware catalog or print one spec with its sources."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help="list the hardware catalog, or show one spec with sources",
                       description="List the hardware catalog (devices and systems), or show one spec with the "
                                   "source of every number.")
    p.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    p.add_argument("name", nargs="?", metavar="NAME", help="device or system name, or a TOML file (for show)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from hwmodels import catalog
    from simulator.report.formatting import binary_bytes, si, table

    if args.action == "show":
        if not args.name:
            raise ValueError("hardware show: missing NAME; expected a device or system name (see `nodeperf hardware`)")
        key = args.name.strip().lower()
        if key == "host" or key.startswith("host:"):  # this machine's CPU: what was detected and probed, and how
            from hwmodels.host import describe_host, host_report
            from simulator.hardware import load_hardware

            host = load_hardware(args.name)  # validates host:N
            cores = host.compute.units if ":" in key else None
            if args.json:
                print(json.dumps({**catalog.to_json(host), "host": host_report(cores)}, indent=2))
            else:
                print(describe_host(cores))
            return 0
        spec = catalog.load_any(args.name)
        if args.json:
            print(json.dumps(catalog.to_json(spec), indent=2))
        else:
            print(catalog.describe(spec))
        return 0
    if args.name:
        raise ValueError(f"hardware: unexpected argument {args.name!r}; expected `nodeperf hardware show {args.name}`")
    devices = [catalog.load_device(n) for n in catalog.list_devices()]
    systems = [catalog.load_system(n) for n in catalog.list_systems()]
    if args.json:
        print(json.dumps({"devices": [d.name for d in devices], "systems": [s.name for s in systems]}, indent=2))
        return 0
    rows = []
    for d in devices:
        rates = d.compute.tensor_flops_per_s
        best = "bf16" if "bf16" in rates else ("fp16" if "fp16" in rates else next(iter(rates)))
        rows.append([d.name, d.kind, d.arch, f"{si(rates[best], 'FLOP/s')} {best}",
                     binary_bytes(d.main_memory.capacity_bytes), si(d.main_memory.read_bandwidth_bytes_per_s, "B/s"),
                     f"{d.power.tdp_w:.0f} W"])
    print(table(rows, ["device", "kind", "arch", "dense tensor peak", "memory", "bandwidth", "TDP"], align="llllrrr"))
    if systems:
        print()
        rows = [[s.name, f"{s.count} x {s.device.name}", s.description] for s in systems]
        print(table(rows, ["system", "devices", "description"], align="lll"))
        print("\nclusters: any node above with the suffix xN (N nodes, 1-1024, on its InfiniBand: dgx-h100x16); "
              "TPU slices: tpu-v4-N, tpu-v5p-N, tpu-v5e-N, tpu-v6e-N (N chips, up to a pod)")
    return 0
