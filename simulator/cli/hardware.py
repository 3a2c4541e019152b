"""`nodeperf hardware [show NAME]`: list the hardware catalog or print one spec with its sources."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("hardware", help="list the hardware catalog, or show one spec with sources",
                       description="List the hardware catalog (devices and systems), or show one spec with the "
                                   "source of every number.")
    p.add_argument("action", nargs="?", choices=("list", "show"), default="list")
    p.add_argument("name", nargs="?", metavar="NAME",
                   help="device, system or node name, NAME@MODE for a power mode, or a TOML file (for show)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def _cluster_note() -> str:
    """The names that are not listed: clusters of a node (with the catalog's node limit) and TPU slices."""
    from hwmodels.catalog import MAX_NODES

    return (f"\nclusters: any node above with the suffix xN (N nodes, 1-{MAX_NODES}, on its InfiniBand: dgx-h100x16); "
            "TPU slices by Google's accelerator types: v4-N and v5p-N (N TensorCores, two per chip: v5p-8 is 4 chips), "
            "v5litepod-N (or v5e-N) and v6e-N (N chips), with or without the prefix tpu-; xM for M slices over the "
            "data-centre network (tpu-v5e-256x4)")


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
        from hwmodels.node import list_nodes

        if "@" in key and not key.endswith(".toml"):  # a power mode: the device as that mode sets it
            from simulator.hardware import load_hardware

            spec = load_hardware(args.name)
        elif key in list_nodes():
            return _show_node(key, args.json)
        else:
            spec = catalog.load_any(args.name)
        if args.json:
            out = catalog.to_json(spec)
            tpu = catalog.parse_tpu_slice(spec.name) if isinstance(spec, catalog.SystemSpec) else None
            if tpu is not None:  # what Google's accelerator type holds
                out["tpu_slice"] = {"accelerator_type": tpu.accelerator_type, "chips_per_slice": tpu.chips,
                                    "tensorcores_per_slice": tpu.tensorcores, "slices": tpu.slices,
                                    "topology": "x".join(str(d) for d in tpu.topology),
                                    "counts": tpu.generation.counts}
            print(json.dumps(out, indent=2))
        else:
            print(catalog.describe(spec))
            print(_memory_line(getattr(spec, "device", spec)))
        return 0
    if args.name:
        raise ValueError(f"hardware: unexpected argument {args.name!r}; expected `nodeperf hardware show {args.name}`")
    devices = [catalog.load_device(n) for n in catalog.list_devices()]
    systems = [catalog.load_system(n) for n in catalog.list_systems()]
    from hwmodels.loader import list_power_modes
    from hwmodels.node import list_nodes, load_node

    nodes = [load_node(n) for n in list_nodes()]
    modes = {d.name: list_power_modes(d.name) for d in devices if list_power_modes(d.name)}
    if args.json:
        print(json.dumps({"devices": [d.name for d in devices], "systems": [s.name for s in systems],
                          "nodes": [n.name for n in nodes], "power_modes": modes}, indent=2))
        return 0
    rows = []
    for d in devices:
        rates = d.compute.tensor_flops_per_s
        best = "bf16" if "bf16" in rates else ("fp16" if "fp16" in rates else next(iter(rates)))
        rows.append([d.name, d.kind, d.arch, f"{si(rates[best], 'FLOP/s')} {best}",
                     binary_bytes(d.main_memory.usable), si(d.main_memory.read_bandwidth_bytes_per_s, "B/s"),
                     f"{d.power.tdp_w:.0f} W"])
    print(table(rows, ["device", "kind", "arch", "dense tensor peak", "memory", "bandwidth", "TDP"], align="llllrrr"))
    if systems:
        print()
        rows = [[s.name, f"{s.count} x {s.device.name}", s.description] for s in systems]
        print(table(rows, ["system", "devices", "description"], align="lll"))
        print(_cluster_note())
    if nodes:
        print()
        rows = [[n.name, ", ".join(f"{d.name} ({d.device.name})" for d in n.devices), n.description] for n in nodes]
        print(table(rows, ["heterogeneous node", "devices", "description"], align="lll"))
    if modes:
        print("\npower modes (NAME@MODE, e.g. " + next(f"{d}@{m[0]}" for d, m in modes.items()) + "): "
              + "; ".join(f"{d}: {', '.join(m)}" for d, m in modes.items()))
    if any(d.kind == "gpu" and d.name not in modes for d in devices):
        print("board power limits (NAME@<N>w, a board capped below its TDP as nvidia-smi -pl N sets it, e.g. "
              "h100-sxm5-80gb@500w or dgx-h100@500w): every other GPU and its systems, N within the board's sourced "
              "range (hwmodels/power_limits.py)")
    return 0


def _memory_line(dev: object) -> str:
    """The main memory as marketed and as the runtime reports it: "80 GB marketed, 79.18 GiB usable (source)"."""
    from simulator.report.formatting import si

    m = dev.main_memory  # type: ignore[attr-defined]
    marketed = f"{si(m.capacity_bytes, 'B')} marketed ({m.capacity_bytes / 2**30:.2f} GiB)"
    if m.usable_bytes > 0:
        prov = dev.source_of(f"memory.{m.name}.usable_bytes")  # type: ignore[attr-defined]
        src = f" ({prov.source})" if prov is not None else ""
        return f"memory.{m.name}: {marketed}, {m.usable / 2**30:.2f} GiB usable as the runtime reports it{src}"
    return (f"memory.{m.name}: {marketed}; no runtime figure in the catalog: fit checks and KV-cache sizing use "
            "the capacity")


def _show_node(name: str, as_json: bool) -> int:
    """A heterogeneous node: its devices, the links between them (with sources) and what shares memory."""
    from hwmodels.node import load_node
    from simulator.report.formatting import si, table

    node = load_node(name)
    if as_json:
        print(json.dumps({
            "name": node.name, "description": node.description,
            "devices": [{"name": d.name, "device": d.device.name, "kind": d.kind} for d in node.devices],
            "links": [{"a": ln.a, "b": ln.b, "kind": ln.kind, "bandwidth_bytes_per_s": ln.bandwidth_bytes_per_s,
                       "bandwidth_fraction": ln.bandwidth_fraction, "latency_s": ln.latency_s,
                       "energy_j_per_byte": ln.energy_j_per_byte, "source": ln.source} for ln in node.links],
            "shared_memory": list(node.shared_memory)}, indent=2))
        return 0
    print(f"{node.name}: {node.description}")
    print(table([[d.name, d.device.name, d.kind] for d in node.devices], ["device", "spec", "kind"], align="lll"))
    if node.links:
        print()
        print(table([[f"{ln.a} - {ln.b}", ln.kind, si(ln.bandwidth_bytes_per_s, "B/s"), f"{ln.bandwidth_fraction:.2f}",
                      si(ln.latency_s, "s"), ln.source] for ln in node.links],
                    ["link", "kind", "bandwidth", "fraction", "latency", "what"], align="llrrrl"))
    if node.shared_memory:
        print(f"\nshare one memory: {', '.join(node.shared_memory)}")
    print("\n(each device's own spec: nodeperf hardware show SPEC; a node is used by `realtime` and `partition`, "
          "while `predict --hardware` takes a device or system)")
    return 0
