"""Heterogeneous nodes: devices of different kinds (GPU, systolic accelerator, CPU, DLA) joined by links.

A :class:`NodeSpec` names its devices (instance names such as ``"gpu"``, ``"sa"``, ``"dla0"``,
``"cpu"``, each a catalog :class:`~hwmodels.spec.DeviceSpec` or :class:`~hwmodels.spec.SystemSpec`)
and the point-to-point :class:`NodeLink` between pairs of them (PCIe generations, CXL, NVLink-C2C,
on-chip shared memory). Link numbers are sourced like every catalog number. Nodes live in
``hwmodels/catalog/nodes/*.toml``::

    schema = 1
    name = "h100-plus-systolic128"
    description = "..."
    shared_memory = []                 # optional: devices that share one physical DRAM

    [refs]
    pcisig = "..."

    [[devices]]
    name = "gpu"
    spec = "h100-sxm5-80gb"            # catalog device or system name, a TOML path (relative to this
                                       # file), or host / host:N (this machine's CPU, hwmodels/host.py)
    source = "why this device"

    [[links]]
    a = "gpu"
    b = "sa"
    kind = "pcie5"                     # pcie3 | pcie4 | pcie5 | cxl | nvlink-c2c | shared-memory
    source = "what the link is"
    bandwidth_bytes_per_s = { value = "63 GB/s", source = "@pcisig" }
    bandwidth_fraction = { value = 0.762, source = "..." }
    latency_s = { value = "4.1 us", source = "..." }
    energy_j_per_byte = { value = "5.5 pJ/bit", source = "..." }

A link number that is a figure of one of the node's devices may name it instead of copying it:
``bandwidth_fraction = { value_of = "gpu:efficiency.dram_bandwidth_fraction", source = "why it holds" }``
(the device instance, a colon, the dotted path; the field must have the link field's unit), so it is
written once, where it was measured.

A transfer of ``n`` bytes over a link takes ``latency_s + n / (bandwidth_bytes_per_s x
bandwidth_fraction)`` and costs ``n x energy_j_per_byte`` (:meth:`NodeLink.transfer_time_s`).
Links are symmetric; two devices without a link cannot exchange tensors (:meth:`NodeSpec.link`
returns None). Every problem of a file is collected and raised as one :class:`~hwmodels.spec.SpecError`.

Examples
--------
>>> from hwmodels.node import load_node
>>> node = load_node("h100-plus-systolic128")
>>> sorted(d.name for d in node.devices)
['cpu', 'gpu', 'sa']
>>> node.link("sa", "gpu").kind
'pcie5'
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodels.spec import DeviceSpec, Provenance, SpecError, SystemSpec, spec_field
from hwmodels.tables import table_problems
from nodeperf.files import check_regular_file
from nodeperf.suggest import did_you_mean, near_match

__all__ = [
    "NodeDevice",
    "NodeLink",
    "NodeSpec",
    "LINK_KINDS",
    "NODES_DIR",
    "list_nodes",
    "load_node",
    "load_node_file",
    "node_from_dict",
    "node_from_spec",
    "is_node_file",
]

#: Kinds of links a node file may name.
LINK_KINDS: tuple[str, ...] = ("pcie3", "pcie4", "pcie5", "pcie6", "cxl", "nvlink-c2c", "shared-memory")

NODES_DIR = Path(__file__).resolve().parent / "catalog" / "nodes"


@dataclass(frozen=True)
class NodeDevice:
    """One device of a node: its instance name (``"gpu"``, ``"dla0"``), its spec and why it is there."""

    name: str
    spec: DeviceSpec | SystemSpec
    source: str = ""

    @property
    def device(self) -> DeviceSpec:
        """The device spec (a system's device)."""
        return self.spec.device if isinstance(self.spec, SystemSpec) else self.spec

    @property
    def kind(self) -> str:
        """The device kind (``gpu``, ``tpu``, ``cpu``)."""
        return self.device.kind


@dataclass(frozen=True)
class NodeLink:
    """A symmetric point-to-point link between devices ``a`` and ``b`` of a node (per-direction figures)."""

    a: str = field(metadata={"unit": "", "doc": "instance name of one end"})
    b: str = field(metadata={"unit": "", "doc": "instance name of the other end"})
    kind: str = field(metadata={"unit": "", "doc": "link technology", "choices": LINK_KINDS})
    bandwidth_bytes_per_s: float = spec_field("B/s", "peak bandwidth per direction")
    latency_s: float = spec_field("s", "one-way latency of a transfer (paid once per transfer)")
    energy_j_per_byte: float = spec_field("J/B", "energy per byte moved over the link", default=0.0)
    bandwidth_fraction: float = spec_field(
        "1", "fraction of the peak bandwidth a large transfer achieves (protocol and DMA overheads)", default=1.0)
    source: str = field(default="", metadata={"unit": "", "doc": "what the link is (text)"})
    provenance: dict[str, Provenance] = field(default_factory=dict, compare=False, hash=False)

    @property
    def ends(self) -> frozenset[str]:
        return frozenset((self.a, self.b))

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        return self.bandwidth_bytes_per_s * self.bandwidth_fraction

    def transfer_time_s(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` one way: ``latency + bytes / (bandwidth x fraction)``; 0 for 0 bytes."""
        if nbytes <= 0:
            return 0.0
        return self.latency_s + float(nbytes) / self.effective_bandwidth_bytes_per_s

    def transfer_energy_j(self, nbytes: float) -> float:
        """Joules to move ``nbytes``: ``bytes x energy_j_per_byte``."""
        return max(0.0, float(nbytes)) * self.energy_j_per_byte


@dataclass(frozen=True)
class NodeSpec:
    """Devices of different kinds and the links between them.

    Attributes
    ----------
    name, description
        Node name and a one-line description.
    devices
        The node's devices, in file order.
    links
        Symmetric links; at most one per pair of devices.
    shared_memory
        Names of devices that share one physical DRAM (an SoC such as Jetson Orin); their
        capacities are one pool.
    """

    name: str
    description: str
    devices: tuple[NodeDevice, ...]
    links: tuple[NodeLink, ...] = ()
    shared_memory: tuple[str, ...] = ()
    source_file: str = field(default="", compare=False)
    refs: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def device_names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.devices)

    def device(self, name: str) -> NodeDevice:
        """The device called ``name``; a located error naming the node's devices otherwise."""
        for d in self.devices:
            if d.name == name:
                return d
        names = list(self.device_names)
        raise SpecError(f"node {self.name!r}: devices.{name}: unknown device; got {name!r}; expected one of "
                        f"{', '.join(names)}{did_you_mean(name, names)}")

    def link(self, a: str, b: str) -> NodeLink | None:
        """The link joining ``a`` and ``b`` in either order (None when they have no link).

        Raises
        ------
        SpecError
            ``a`` or ``b`` is not a device of the node.
        """
        self.device(a)
        self.device(b)
        key = frozenset((a, b))
        for ln in self.links:
            if ln.ends == key:
                return ln
        return None

    def restrict(self, names: tuple[str, ...] | list[str]) -> NodeSpec:
        """The node with only the devices ``names`` (in node order) and the links among them."""
        for n in names:
            self.device(n)
        keep = set(names)
        return dataclasses.replace(
            self, name=f"{self.name}[{','.join(d for d in self.device_names if d in keep)}]",
            devices=tuple(d for d in self.devices if d.name in keep),
            links=tuple(ln for ln in self.links if ln.a in keep and ln.b in keep),
            shared_memory=tuple(s for s in self.shared_memory if s in keep))

    def with_link(self, link: NodeLink) -> NodeSpec:
        """The node with ``link`` replacing the link between its two devices (or added)."""
        self.device(link.a)
        self.device(link.b)
        others = tuple(ln for ln in self.links if ln.ends != link.ends)
        return dataclasses.replace(self, links=(*others, link))

    def shares_memory(self, a: str, b: str) -> bool:
        """Whether ``a`` and ``b`` use the same physical DRAM."""
        return a in self.shared_memory and b in self.shared_memory

    def source_of(self, path: str) -> Provenance | None:
        """Provenance of ``links.<a>-<b>.<field>``."""
        parts = path.split(".")
        if len(parts) == 3 and parts[0] == "links":
            for ln in self.links:
                if f"{ln.a}-{ln.b}" == parts[1]:
                    return ln.provenance.get(parts[2])
        return None


# ------------------------------------------------------------------------------------------------
# building from a parsed file


def node_from_spec(spec: DeviceSpec | SystemSpec, name: str | None = None) -> NodeSpec:
    """One device (or a homogeneous system, as one device) as a node of one device named ``name``
    (default: the spec's name)."""
    if not isinstance(spec, (DeviceSpec, SystemSpec)):
        raise SpecError(f"node_from_spec: not a spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
    inst = name or spec.name
    return NodeSpec(name=spec.name, description=spec.description,
                    devices=(NodeDevice(inst, spec, f"the single device of {spec.name}"),),
                    source_file=getattr(spec, "source_file", ""))


def _resolve_spec(ref: str, folder: Path) -> DeviceSpec | SystemSpec:
    from hwmodels.catalog import load_any
    from hwmodels.host import HOST_NAME, host_spec

    key = ref.strip().lower()
    if key == HOST_NAME:  # this machine's CPU, detected and probed (hwmodels/host.py)
        return host_spec()
    if key.startswith(HOST_NAME + ":"):
        cores = key.split(":", 1)[1]
        if not cores.isdigit() or int(cores) < 1:
            raise SpecError(f"host: cores; got {cores!r}; expected host:N with N a positive integer")
        return host_spec(int(cores))
    if ref.endswith(".toml") or "/" in ref or os.sep in ref:
        p = Path(ref)
        if not p.is_absolute():
            p = folder / p
        return load_any(p)
    return load_any(ref)


_NODE_KEYS = ("schema", "refs", "name", "description", "devices", "links", "shared_memory")
_DEVICE_KEYS = ("name", "spec", "source")


def node_from_dict(data: dict[str, Any], *, where: str = "<dict>", folder: Path | None = None) -> NodeSpec:
    """Build a :class:`NodeSpec` from a parsed node file; one SpecError lists every problem.

    Device ``spec`` names resolve through the catalog (devices, then systems); a relative TOML path
    is relative to ``folder`` (the node file's folder).
    """
    from hwmodels.loader import _build, _Ctx, _Problems, _short, _split_refs

    folder = folder or Path.cwd()
    problems = _Problems(where, "node spec")
    body, refs = _split_refs(data, problems)
    ctx = _Ctx(problems, refs, None)
    for path, msg in table_problems(body, allowed=_NODE_KEYS):
        problems.add(path, msg)
    for key in ("name", "description"):
        if not isinstance(body.get(key), str) or not body.get(key):
            problems.add(key, f"missing or not a string; got {_short(body.get(key))}; expected {key} = \"...\"")

    devices: list[NodeDevice] = []
    raw_devs = body.get("devices")
    if not isinstance(raw_devs, list) or not raw_devs or not all(isinstance(x, dict) for x in raw_devs):
        problems.add("devices", f"missing or not an array of tables; got {_short(raw_devs)}; expected [[devices]] "
                                "entries with name = \"gpu\" and spec = \"<catalog device>\"")
        raw_devs = []
    seen: set[str] = set()
    for i, ent in enumerate(raw_devs):
        name = ent.get("name")
        if not isinstance(name, str) or not name:
            problems.add(f"devices[{i}]", f"device without a name; got {_short(name)}; expected name = \"gpu\"")
            continue
        path = f"devices.{name}"
        if name in seen:
            problems.add(path, f"duplicate device name; got {name!r} twice; expected unique names")
            continue
        seen.add(name)
        for kpath, msg in table_problems(ent, allowed=_DEVICE_KEYS, path=path):
            problems.add(kpath, msg)
        ref = ent.get("spec")
        if not isinstance(ref, str) or not ref:
            problems.add(f"{path}.spec", f"missing field; got {_short(ref)}; expected spec = \"<catalog device or "
                                         "system name, or a TOML path>\"")
            continue
        src = ent.get("source", "")
        if not isinstance(src, str):
            problems.add(f"{path}.source", f"expected a string; got {_short(src)}; expected source = \"...\"")
            src = ""
        try:
            spec = _resolve_spec(ref, folder)
        except SpecError as exc:
            msg = str(exc).replace("\n", " ")
            problems.add(f"{path}.spec", msg)
            continue
        devices.append(NodeDevice(name, spec, src))

    links: list[NodeLink] = []
    raw_links = body.get("links", [])
    if not isinstance(raw_links, list) or not all(isinstance(x, dict) for x in raw_links):
        problems.add("links", f"not an array of tables; got {_short(raw_links)}; expected [[links]] entries")
        raw_links = []
    pairs: set[frozenset[str]] = set()
    names = sorted(seen)
    for i, ent in enumerate(raw_links):
        a, b = ent.get("a"), ent.get("b")
        label = f"links[{i}]" + (f" ({a}-{b})" if isinstance(a, str) and isinstance(b, str) else "")
        bad = False
        for end, val in (("a", a), ("b", b)):
            if not isinstance(val, str) or not val:
                problems.add(f"{label}.{end}", f"missing end; got {_short(val)}; expected {end} = \"<device name>\" "
                                               f"(one of {', '.join(names) or 'none'})")
                bad = True
            elif val not in seen:
                problems.add(f"{label}.{end}", lambda val=val: f"unknown device; got {val!r}; expected one of "
                                                               f"{', '.join(names) or 'none'}{did_you_mean(val, names)}")
                bad = True
        if not bad and a == b:
            problems.add(label, f"a link from a device to itself; got a = b = {a!r}; expected two different devices")
            bad = True
        if not bad:
            key = frozenset((a, b))
            if key in pairs:
                problems.add(label, f"duplicate link; got a second link between {a!r} and {b!r}; expected one link "
                                    "per pair of devices")
                bad = True
            pairs.add(key)
        lctx = _Ctx(problems, refs, None, lookup=functools.partial(_node_device, devices))
        lk = _build(NodeLink, ent, label, lctx)
        if lk is None or bad:
            continue
        prov = {k.rsplit(".", 1)[-1]: v for k, v in lctx.provenance.items()}
        links.append(dataclasses.replace(lk, provenance=prov))

    shared = body.get("shared_memory", [])
    if not isinstance(shared, list) or not all(isinstance(x, str) for x in shared):
        problems.add("shared_memory", f"not a list of device names; got {_short(shared)}; expected shared_memory = "
                                      "[\"gpu\", \"dla0\", ...]")
        shared = []
    for s in shared:
        if s not in seen:
            problems.add("shared_memory", lambda s=s: f"unknown device; got {s!r}; expected one of "
                                                      f"{', '.join(names) or 'none'}{did_you_mean(s, names)}")
    _ = ctx
    problems.raise_if_any()
    return NodeSpec(name=body["name"], description=body["description"], devices=tuple(devices), links=tuple(links),
                    shared_memory=tuple(shared), source_file=where, refs=dict(refs))


def _node_device(devices: list[NodeDevice], name: str) -> DeviceSpec | SystemSpec:
    """The spec of device instance ``name`` of a node being read (a link's ``value_of = "gpu:..."``)."""
    for d in devices:
        if d.name == name:
            return d.spec
    names = [d.name for d in devices]
    raise SpecError(f"unknown device; got {name!r}; expected one of {', '.join(names) or 'none'}"
                    f"{did_you_mean(name, names)}")


def is_node_file(data: dict[str, Any]) -> bool:
    """Whether a parsed TOML file is a node (it lists ``[[devices]]``)."""
    return "devices" in data


def load_node_file(path: str | Path) -> NodeSpec:
    """Load the node TOML at ``path`` (every problem of the file in one located SpecError)."""
    from hwmodels.loader import read_toml

    p = Path(path)
    data = read_toml(p)
    if not is_node_file(data):
        raise SpecError(f"{p}: devices: not a node file; got no [[devices]] table (keys: {', '.join(sorted(data))}); "
                        "expected [[devices]] and [[links]] entries (a device or system file goes to --hardware "
                        "directly)")
    return node_from_dict(data, where=str(p), folder=p.resolve().parent)


def _stamp(p: Path) -> tuple[str, int, int]:
    try:
        st = p.stat()
    except FileNotFoundError:
        raise SpecError(f"{p}: file not found; got {str(p)!r}; expected an existing node TOML file") from None
    return str(p), st.st_mtime_ns, st.st_size


@functools.lru_cache(maxsize=32)
def _load_cached(stamp: tuple[str, int, int]) -> NodeSpec:
    return load_node_file(stamp[0])


def list_nodes() -> list[str]:
    """Names of the catalog's nodes, sorted."""
    if not NODES_DIR.is_dir():
        return []
    return sorted(p.stem for p in NODES_DIR.glob("*.toml"))


def load_node(name_or_path: str | os.PathLike[str]) -> NodeSpec:
    """The catalog node called ``name_or_path`` (case-insensitive), or the node TOML at a path.

    Raises
    ------
    SpecError
        Unknown name (with the closest node names), missing file, or every problem of the file.
    """
    text = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) or text.endswith(".toml") or "/" in text or os.sep in text:
        return _load_cached(_stamp(check_regular_file(text, what="a node TOML file", error=SpecError,
                                                      max_bytes=None).resolve()))
    key = text.strip().lower()
    names = list_nodes()
    for n in names:
        if n.lower() == key:
            return _load_cached(_stamp(NODES_DIR / f"{n}.toml"))
    near = near_match(key, names, n=3, cutoff=0.5, prefix=True)
    msg = f"node {text!r}: unknown name; got {text!r}; expected one of {', '.join(names) or 'none'}"
    if near:
        msg += f"; did you mean {' or '.join(repr(n) for n in near)}?"
    raise SpecError(msg)
