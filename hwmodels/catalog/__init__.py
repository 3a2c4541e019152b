"""The shipped hardware catalog: find, load (cached) and describe device and system specs by name.

Device files live in ``devices/*.toml``, systems in ``systems/*.toml``, shared per-architecture
efficiency factors in ``defaults/efficiency.toml``; the format is described in ``README.md`` next
to this module. Names are case-insensitive; a misspelt name raises a
:class:`~hwmodels.spec.SpecError` naming the closest ones.

Examples
--------
>>> from hwmodels.catalog import load_device
>>> h100 = load_device("H100-SXM5-80GB")
>>> h100.level("hbm").read_bandwidth_bytes_per_s
3350000000000.0
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from pathlib import Path
from typing import Any

from hwmodels.loader import (
    DEFAULT_EFFICIENCY_FILE,
    load_device_file,
    load_system_file,
    numeric_paths,
    read_toml,
    spec_kind,
)
from hwmodels.spec import DeviceSpec, Provenance, SpecError, SystemSpec
from hwmodels.units import format_quantity
from nodeperf.files import check_regular_file
from nodeperf.suggest import near_match

__all__ = [
    "CATALOG_DIR",
    "DEVICES_DIR",
    "SYSTEMS_DIR",
    "list_devices",
    "list_systems",
    "load_device",
    "load_system",
    "describe",
    "load_any",
    "to_json",
    "clear_cache",
    "parse_tpu_slice",
    "tpu_slice",
    "TpuSlice",
    "TpuGeneration",
    "TPU_GENERATIONS",
]

CATALOG_DIR = Path(__file__).resolve().parent
DEVICES_DIR = CATALOG_DIR / "devices"
SYSTEMS_DIR = CATALOG_DIR / "systems"


def _names(folder: Path) -> list[str]:
    try:
        mtime = folder.stat().st_mtime_ns
    except FileNotFoundError:
        return []
    return list(_names_cached(folder, mtime))


@functools.lru_cache(maxsize=16)
def _names_cached(folder: Path, mtime_ns: int) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in folder.glob("*.toml")))


def list_devices() -> list[str]:
    """Names of the catalog's devices (``"h100-sxm5-80gb"``...), sorted."""
    return _names(DEVICES_DIR)


def list_systems() -> list[str]:
    """Names of the catalog's systems (``"dgx-h100"``...), sorted."""
    return _names(SYSTEMS_DIR)


def _near_names(key: str, names: list[str]) -> list[str]:
    """Names starting with what was typed (``h100`` -> both H100s), else the closest spellings."""
    return near_match(key, names, n=3, cutoff=0.5, prefix=True)


def _resolve(name: str, folder: Path, what: str) -> Path:
    names = _names(folder)
    key = name.strip().lower()
    for n in names:
        if n.lower() == key:
            return folder / f"{n}.toml"
    m = _CLUSTER.match(key)
    if what == "device" and m and m.group(1) in {n.lower() for n in names}:
        base = m.group(1)
        tpu = f"; for TPU slices over the data-centre network: {base}-256x{m.group(2)}" if base in (
            "tpu-v5e", "tpu-v6e") else (f"; for TPU slices over the data-centre network: {base}-128x{m.group(2)}"
                                         if base in ("tpu-v4", "tpu-v5p") else "")
        raise SpecError(f"{what} {name!r}: x{m.group(2)} on a single device; got device {base!r} with no network "
                        f"between copies of it; expected a node with NICs (dgx-h100x{m.group(2)}) or a TPU slice "
                        f"name{tpu}")
    near = _near_names(key, names)
    msg = f"{what} {name!r}: unknown name; got {name!r}; expected one of {', '.join(names)}"
    if near:
        msg += f"; did you mean {' or '.join(repr(n) for n in near)}?"
    raise SpecError(msg)


def _looks_like_path(s: str | os.PathLike[str]) -> bool:
    if isinstance(s, os.PathLike):
        return True
    return s.endswith(".toml") or os.sep in s or "/" in s


def _stamp(path: Path) -> tuple[str, int, int]:
    try:
        st = path.stat()
    except FileNotFoundError as e:
        raise SpecError(f"{path}: file not found; got {str(path)!r}; expected an existing TOML file") from e
    return str(path), st.st_mtime_ns, st.st_size


def _defaults_stamp() -> tuple[str, int, int]:
    return _stamp(DEFAULT_EFFICIENCY_FILE)


@functools.lru_cache(maxsize=256)
def _load_device_cached(stamp: tuple[str, int, int], defaults: tuple[str, int, int]) -> DeviceSpec:
    return load_device_file(stamp[0], efficiency_defaults_file=defaults[0])


@functools.lru_cache(maxsize=64)
def _load_system_cached(stamp: tuple[str, int, int], defaults: tuple[str, int, int]) -> SystemSpec:
    folder = Path(stamp[0]).parent

    def resolve_device(name: str) -> DeviceSpec:
        # a relative device path is relative to the system file, not to the working directory
        if _looks_like_path(name) and not Path(name).is_absolute():
            return load_device(folder / name)
        return load_device(name)

    return load_system_file(stamp[0], resolve_device=resolve_device)


def load_device(name_or_path: str | os.PathLike[str]) -> DeviceSpec:
    """The catalog device called ``name_or_path`` (case-insensitive), or the device TOML at a path.

    Loaded specs are cached (keyed by file, modification time and size), so repeated loads cost
    microseconds. Treat the result as immutable: it is shared between callers.

    Raises
    ------
    SpecError
        Unknown name (with the closest names), missing file, or every problem of the file.
    """
    if _looks_like_path(name_or_path):
        path = _spec_path(name_or_path)
    else:
        path = _resolve(str(name_or_path), DEVICES_DIR, "device")
    return _load_device_cached(_stamp(path), _defaults_stamp())


def load_system(name_or_path: str | os.PathLike[str]) -> SystemSpec:
    """The catalog system called ``name_or_path`` (case-insensitive), or the system TOML at a path.

    A catalog node name with the suffix ``xN`` (``dgx-h100x16``) is ``N`` such nodes on the network
    its node configuration in ``fabrics.toml`` names (the vendor's reference InfiniBand: one NIC per
    GPU), ``N`` from 1 to :data:`MAX_NODES`.
    """
    if not _looks_like_path(name_or_path):
        m = _CLUSTER.match(str(name_or_path).strip().lower())
        if m and m.group(1) in {n.lower() for n in _names(SYSTEMS_DIR)}:
            return cluster(load_system(m.group(1)), int(m.group(2)))
        if _TPU_SLICE.match(str(name_or_path).strip().lower()):
            return tpu_slice(str(name_or_path))
    if _looks_like_path(name_or_path):
        path = _spec_path(name_or_path)
    else:
        path = _resolve(str(name_or_path), SYSTEMS_DIR, "system")
    return _load_system_cached(_stamp(path), _defaults_stamp())


#: Largest node count of a catalog cluster name (``dgx-h100x1024``).
MAX_NODES = 4096
_CLUSTER = re.compile(r"^(.+)x(\d+)$")


#: A TPU slice name: Google's accelerator type (``v5p-128``, ``v5litepod-256``, ``v6e-8``), optionally
#: with the catalog prefix ``tpu-`` (``tpu-v5e-256``) and ``xN`` for N slices over the data-centre
#: network (``tpu-v5e-256x4``).
_TPU_SLICE = re.compile(r"^(?:tpu-)?(v4|v5p|v5e|v5litepod|v6e)-(\d+)(?:x(\d+))?$")

_TPU_TYPES_DOC = ("Google Cloud TPU 'TPU types and topologies' (cloud.google.com/tpu/docs/types-topologies): "
                  "TensorCore-based configurations name 'the TPU version and the number of TensorCores', e.g. "
                  "v4-128; v4 topologies are AxBxC with A<=B<=C, all <= 4 or all integer multiples of 4 "
                  "(2x2x4 is 16 chips with 2 TensorCores each)")
_V5P_DOC = ("Google Cloud TPU v5p (cloud.google.com/tpu/docs/v5p): 'v5p-32 specifies a v5p slice of 32 "
            "TensorCores (16 chips)'; 2 TensorCores per chip; topology table 2x2x1 (8 cores, 4 chips) ... 16x16x24 "
            "(12288 cores, 6144 chips), 'the maximum v5p shape is 16x16x24'")
_V4_DOC = ("Google Cloud TPU v4 (cloud.google.com/tpu/docs/v4): 'Each TPU v4 chip contains two TensorCores'; "
           "4096-chip pod; and " + _TPU_TYPES_DOC)
_V5E_DOC = ("Google Cloud TPU v5e (cloud.google.com/tpu/docs/v5e): 'Each v5e chip contains one TensorCore'; "
            "accelerator types v5litepod-1/4/8/16/32/64/128/256 on topologies 1x1, 2x2, 2x4, 4x4, 4x8, 8x8, "
            "8x16, 16x16 (256-chip pod, 2D torus); the Multislice overview names v5litepod-128 as an example type")
_V6E_DOC = ("Google Cloud TPU v6e (docs.cloud.google.com/tpu/docs/v6e): 'Each v6e chip contains one TensorCore'; "
            "v6e-1/4/8/16/32/64/128/256 on 2D topologies 1x1 ... 16x16 (256-chip pod)")
_SHAPES_2D = ((1, 1), (2, 2), (2, 4), (4, 4), (4, 8), (8, 8), (8, 16), (16, 16))
#: 3D shapes below one 4x4x4 cube (the v4 rule's 'all <= 4' branch, as the Cloud tables list them).
_SHAPES_3D_SMALL = ((2, 2, 1), (2, 2, 2), (2, 2, 4), (2, 4, 4))


@dataclasses.dataclass(frozen=True)
class TpuGeneration:
    """What a Google accelerator type means for one TPU generation (with its source)."""

    name: str  #: Google's generation prefix (``v5p``)
    device: str  #: catalog device (``tpu-v5p``)
    counts: str  #: what the number in the name counts: ``"TensorCores"`` or ``"chips"``
    cores_per_chip: int
    dims: int  #: torus dimensions
    max_shape: tuple[int, ...]  #: largest single-slice shape
    source: str
    #: chips a TPU VM host drives (its DCN NICs and PCIe serve them); 0: not stated
    chips_per_host: int = 0
    host_source: str = ""


_V4_HOST = ("jax-ml 'How to Scale Your Model', Part 2 (tpus.md): a TPU v4 or v5p host is a 2x2x1 block of chips "
            "(4 chips), as hwmodels/catalog/fabrics.toml @scalingdcn")
_V5P_HOST = ("Google Cloud TPU v5p (docs.cloud.google.com/tpu/docs/v5p): topology table, 2x2x1 = 4 chips on 1 host ... "
             "16x16x24 = 6144 chips on 1536 hosts; VM attributes 'Number of v5p chips 4'")
_V5E_HOST = ("Google Cloud TPU v5e (docs.cloud.google.com/tpu/docs/v5e): 'Chips per host 8', 'Per-host NIC "
             "configuration 2 x 100 Gbps NIC'; topology table 16x16 = 256 chips on 32 hosts (2x4 and smaller: one "
             "VM, a fraction of a host)")
_V6E_HOST = ("Google Cloud TPU v6e (docs.cloud.google.com/tpu/docs/v6e): 'Chips per host 8' (4 x 200 Gbps NICs a host, "
             "fabrics.toml dcn-v6e)")

TPU_GENERATIONS: dict[str, TpuGeneration] = {
    "v4": TpuGeneration("v4", "tpu-v4", "TensorCores", 2, 3, (16, 16, 16), _V4_DOC, 4, _V4_HOST),
    "v5p": TpuGeneration("v5p", "tpu-v5p", "TensorCores", 2, 3, (16, 16, 24), _V5P_DOC, 4, _V5P_HOST),
    "v5e": TpuGeneration("v5e", "tpu-v5e", "chips", 1, 2, (16, 16), _V5E_DOC, 8, _V5E_HOST),
    "v6e": TpuGeneration("v6e", "tpu-v6e", "chips", 1, 2, (16, 16), _V6E_DOC, 8, _V6E_HOST),
}


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    """A TPU slice name resolved: ``slices`` slices of ``chips`` chips each on a ``topology`` torus."""

    name: str  #: canonical catalog name (``tpu-v5p-128``, ``tpu-v5e-256x4``)
    generation: TpuGeneration
    number: int  #: the number in Google's accelerator type
    chips: int  #: chips per slice
    topology: tuple[int, ...]
    slices: int = 1

    @property
    def tensorcores(self) -> int:
        """TensorCores per slice."""
        return self.chips * self.generation.cores_per_chip

    @property
    def hosts(self) -> int:
        """TPU VM hosts of all slices (a slice smaller than a host takes one); 0 where the generation states no
        host size."""
        per = self.generation.chips_per_host
        return self.slices * -(-self.chips // per) if per else 0

    @property
    def accelerator_type(self) -> str:
        """Google's accelerator type of one slice (``v5litepod-256``, ``v5p-128``)."""
        prefix = "v5litepod" if self.generation.name == "v5e" else self.generation.name
        return f"{prefix}-{self.number}"

    def summary(self) -> str:
        """One line: chips, TensorCores, topology and slices (``hardware show``)."""
        g = self.generation
        shape = "x".join(str(d) for d in self.topology)
        per = (f"{_count(self.chips, 'chip')} x {g.cores_per_chip} TensorCores = "
               f"{_count(self.tensorcores, 'TensorCore')}" if g.cores_per_chip > 1
               else f"{_count(self.chips, 'chip')} ({_count(self.tensorcores, 'TensorCore')}, one per chip)")
        line = (f"{self.accelerator_type}: {per}; Google's {g.name} accelerator types count {g.counts}; "
                f"topology {shape} ({g.dims}D ICI torus)")
        if self.slices > 1:
            line += (f"; {self.slices} slices over the data-centre network (DCN): {self.slices * self.chips} chips in all")
        if self.hosts:
            line += f"; {_count(self.hosts, 'host')} ({g.chips_per_host} chips a host)"
        return line


def _count(n: int, noun: str) -> str:
    """``n noun`` with the noun plural unless ``n`` is 1 (``1 chip``, ``4 chips``)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _shapes_3d(g: TpuGeneration) -> dict[int, tuple[int, ...]]:
    """Chips -> the most cube-like valid AxBxC (A<=B<=C) of a 3D generation within its largest shape."""
    out: dict[int, tuple[int, ...]] = {a * b * c: (a, b, c) for a, b, c in _SHAPES_3D_SMALL}
    lim = sorted(g.max_shape)
    steps = range(4, lim[2] + 1, 4)
    for a in steps:
        for b in steps:
            for c in steps:
                if not (a <= b <= c and a <= lim[0] and b <= lim[1]):
                    continue
                n = a * b * c
                if n not in out or (c - a) < (max(out[n]) - min(out[n])):
                    out[n] = (a, b, c)
    return dict(sorted(out.items()))


def _valid_slices(g: TpuGeneration) -> dict[int, tuple[int, ...]]:
    """Chips -> topology of every valid single slice of generation ``g``."""
    if g.dims == 2:
        return {a * b: (a, b) for a, b in _SHAPES_2D}
    return _shapes_3d(g)


def parse_tpu_slice(name: str) -> TpuSlice | None:
    """The TPU slice a name denotes (None when it is not a TPU slice name).

    Follows Google's accelerator types: for v4 and v5p the number counts TensorCores (two per chip:
    ``v5p-8`` is 4 chips), for v5e (``v5litepod-N``) and v6e it counts chips. ``xN`` is N slices.

    Raises
    ------
    SpecError
        A size that is no valid slice shape (with the valid sizes and the nearest ones), or a slice
        count out of range.
    """
    m = _TPU_SLICE.match(str(name).strip().lower())
    if not m:
        return None
    gen = TPU_GENERATIONS["v5e" if m.group(1) == "v5litepod" else m.group(1)]
    number, slices = int(m.group(2)), int(m.group(3) or 1)
    prefix = "v5litepod" if gen.name == "v5e" else gen.name
    valid = _valid_slices(gen)
    numbers = [c * gen.cores_per_chip for c in valid]
    chips = number // gen.cores_per_chip if number % gen.cores_per_chip == 0 else -1
    if chips not in valid:
        near = sorted(numbers, key=lambda v: (abs(v - number), v))[:2]
        raise SpecError(
            f"system {name!r}: slice size; got {prefix}-{number}; expected a Google accelerator type of "
            f"{gen.name} ({gen.name}-N counts {gen.counts}"
            f"{', two per chip' if gen.cores_per_chip == 2 else ''}): N in {', '.join(str(v) for v in numbers)}; "
            f"did you mean {' or '.join(repr(f'tpu-{gen.name}-{v}') for v in near)}? (Google Cloud TPU {gen.name} documentation)")
    if not 1 <= slices <= MAX_NODES:
        raise SpecError(f"system {name!r}: slice count; got x{slices}; expected x1 to x{MAX_NODES}")
    canon = f"tpu-{gen.name}-{number}" + (f"x{slices}" if m.group(3) else "")
    return TpuSlice(canon, gen, number, chips, valid[chips], slices)


def is_cluster_name(name: str) -> bool:
    """Whether ``name`` is a catalog node name with an ``xN`` node-count suffix, or a TPU slice name
    (``tpu-v5p-128``, ``v5litepod-256``, ``tpu-v5e-256x4``)."""
    key = str(name).strip().lower()
    m = _CLUSTER.match(key)
    return (bool(m) and m.group(1) in {n.lower() for n in _names(SYSTEMS_DIR)}) or bool(_TPU_SLICE.match(key))


def tpu_slice(name: str) -> SystemSpec:
    """The system a TPU slice name denotes (:func:`parse_tpu_slice`): its chips on the ICI torus of the
    ``<device>-pod`` node configuration of ``fabrics.toml``; with ``xN``, N such slices joined by that
    configuration's data-centre network (one node per slice)."""
    from hwmodels.collectives import fabric_catalog

    sl = parse_tpu_slice(name)
    if sl is None:
        raise SpecError(f"system {name!r}: not a TPU slice name; got {name!r}; expected e.g. tpu-v5p-128 or v6e-256")
    device = sl.generation.device
    csys = fabric_catalog().systems.get(f"{device}-pod")
    if csys is None:  # pragma: no cover - every generation the pattern admits has a pod entry
        raise SpecError(f"system {sl.name!r}: no {device}-pod node configuration in hwmodels/catalog/fabrics.toml")
    if sl.chips > csys.devices_per_node:
        raise SpecError(f"system {sl.name!r}: chips; got {sl.chips}; expected at most {csys.devices_per_node} "
                        f"(a {device} pod)")
    if sl.slices > 1 and csys.inter is None:
        raise SpecError(f"system {sl.name!r}: x{sl.slices} slices; got a {device} node configuration without a "
                        f"data-centre network (fabrics.toml systems.{device}-pod has no 'inter'); expected x1")
    dev = load_device(device)
    prov = {"count": Provenance(f"catalog name {sl.name}: {sl.summary()}", sl.generation.source),
            "collectives": Provenance(f"fabrics.toml systems.{device}-pod: {csys.description}")}
    shape = "x".join(str(d) for d in sl.topology)
    desc = f"{sl.chips} x {dev.name} ({sl.accelerator_type}, {shape}) on {csys.intra.description}"
    if sl.slices > 1:
        prov["nodes"] = Provenance(f"catalog name suffix x{sl.slices}: {sl.slices} slices on {csys.inter.description}")
        desc = f"{sl.slices} slices x {desc}; slices joined by {csys.inter.description}"
    return SystemSpec(name=sl.name, description=desc, device=dev, count=sl.chips * sl.slices, nodes=sl.slices,
                      collectives=f"{device}-pod", provenance=prov)


def cluster(node: SystemSpec, nodes: int) -> SystemSpec:
    """``nodes`` copies of the single-node system ``node`` joined by its node configuration's network."""
    name = f"{node.name}x{nodes}"
    if not 1 <= nodes <= MAX_NODES:
        raise SpecError(f"system {name!r}: node count; got {nodes}; expected 1 to {MAX_NODES}")
    if node.nodes != 1:
        raise SpecError(f"system {name!r}: {node.name!r} already has {node.nodes} nodes; expected a single-node system")
    from hwmodels.collectives import fabric_catalog

    key = (node.collectives or node.name).lower()
    csys = fabric_catalog().systems.get(key)
    if nodes > 1 and (csys is None or csys.inter is None):
        raise SpecError(f"system {name!r}: {node.name!r} has no inter-node network in hwmodels/catalog/fabrics.toml "
                        f"(node configuration {key!r}); expected a node with NICs, such as dgx-a100 or dgx-h100")
    prov = dict(node.provenance)
    if "count" in prov:
        prov["count"] = Provenance(f"{nodes} nodes x {node.count} per node; per node: {prov['count'].source}")
    if csys is not None and csys.inter is not None:
        prov["nodes"] = Provenance(f"catalog name suffix x{nodes}: {nodes} x {node.name} on {csys.inter.description} "
                                   f"({csys.nics_per_node} NICs per node; fabrics.toml systems.{key})")
    return dataclasses.replace(
        node, name=name, count=node.count * nodes, nodes=nodes, collectives=node.collectives or node.name,
        description=f"{nodes} x {node.description}" if nodes > 1 else node.description, provenance=prov)


def _spec_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The absolute path of a spec file, once it is known to be a regular file (not a folder, a device,
    a pipe or a symlink loop: each one located SpecError)."""
    return check_regular_file(name_or_path, what="a device or system TOML file", error=SpecError,
                              max_bytes=None).resolve()


def load_any(name_or_path: str | os.PathLike[str]) -> DeviceSpec | SystemSpec:
    """A catalog device or system by name (devices first), or the spec in a TOML file.

    A file is a system when it names a ``device`` (or has a ``count`` and no device ``kind``, see
    :func:`hwmodels.loader.spec_kind`); otherwise a device.

    Raises
    ------
    SpecError
        Unknown name, with the closest device and system names.
    """
    if _looks_like_path(name_or_path):
        path = _spec_path(name_or_path)
        is_system = spec_kind(read_toml(path)) == "system"
        return load_system(path) if is_system else load_device(path)
    key = str(name_or_path).strip().lower()
    if key in (n.lower() for n in list_devices()):
        return load_device(key)
    if key in (n.lower() for n in list_systems()) or is_cluster_name(key):
        return load_system(key)
    names = list_devices() + list_systems()
    near = _near_names(key, names)
    msg = (f"hardware {str(name_or_path)!r}: unknown name; got {str(name_or_path)!r}; "
           f"expected a device ({', '.join(list_devices())}) or a system ({', '.join(list_systems())})")
    if near:
        msg += f"; did you mean {' or '.join(repr(n) for n in near)}?"
    raise SpecError(msg)


def _plain(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def to_json(spec: DeviceSpec | SystemSpec) -> dict[str, Any]:
    """JSON-ready dict of ``spec``: every field in SI units, provenance as {path: {source, note}}."""
    if not isinstance(spec, (DeviceSpec, SystemSpec)):
        raise SpecError(f"to_json: not a spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
    return _plain(spec)


def clear_cache() -> None:
    """Forget cached specs (files are re-read on the next load)."""
    _load_device_cached.cache_clear()
    _load_system_cached.cache_clear()
    _names_cached.cache_clear()


def _source_text(spec: DeviceSpec | SystemSpec, path: str) -> str:
    prov = spec.provenance.get(path)
    if prov is None:
        return "(default of hwmodels/spec.py; no source in the file)"
    return prov.source + (f" [{prov.note}]" if prov.note else "")


def _describe_device(dev: DeviceSpec, indent: str = "") -> list[str]:
    lines = [
        f"{indent}{dev.name}: {dev.description}",
        f"{indent}  kind {dev.kind}, vendor {dev.vendor}, arch {dev.arch}",
        f"{indent}  file {dev.source_file}",
    ]
    rows = [(p, format_quantity(v, u)) for p, v, u in numeric_paths(dev)]
    width = max((len(p) for p, _ in rows), default=0)
    vwidth = max((len(v) for _, v in rows), default=0)
    section = None
    for p, v in rows:
        head = p.split(".", 1)[0]
        if head != section:
            section = head
            lines.append(f"{indent}  [{head}]")
        lines.append(f"{indent}    {p:<{width}}  {v:>{vwidth}}  {_source_text(dev, p)}")
    tables = [(f"efficiency.{f.name}", getattr(dev.efficiency, f.name)) for f in dataclasses.fields(dev.efficiency)
              if isinstance(getattr(dev.efficiency, f.name), tuple) and getattr(dev.efficiency, f.name)]
    if tables:  # table-valued fields (rows of a whole number and a factor)
        lines.append(f"{indent}  [efficiency tables]")
    for p, rows_ in tables:
        text = ", ".join(f"{k}: {r:.4g}" for k, r in rows_)
        lines.append(f"{indent}    {p}  {text}  {_source_text(dev, p)}")
    for ln in dev.links:
        lines.append(f"{indent}  link {ln.name}: kind {ln.kind}")
    return lines


def describe(spec: DeviceSpec | SystemSpec) -> str:
    """Multi-line listing of every field of ``spec`` in human units, each with its source.

    Used by ``nodeperf hardware show NAME``.
    """
    if isinstance(spec, SystemSpec):
        lines = [f"{spec.name}: {spec.description}"]
        if spec.source_file:  # a TPU slice is built from its name: no system file (its device's file is listed)
            lines.append(f"  file {spec.source_file}")
        lines.append(f"  count {spec.count}  {_source_text(spec, 'count')}")
        if spec.nodes > 1:
            lines.append(f"  nodes {spec.nodes} of {spec.devices_per_node}  {_source_text(spec, 'nodes')}")
        tpu = parse_tpu_slice(spec.name) if _TPU_SLICE.match(spec.name.lower()) else None
        if tpu is not None:
            lines.append(f"  TPU slice {tpu.summary()}")
        if spec.collectives:
            lines.append(f"  collectives and network: fabrics.toml systems.{spec.collectives}")
        if spec.fabric is not None:
            lines.append(f"  fabric {spec.fabric.name}: kind {spec.fabric.kind}")
            for p, v, u in numeric_paths(spec.fabric, "fabric"):
                lines.append(f"    {p}  {format_quantity(v, u)}  {_source_text(spec, p)}")
        lines.append("  device:")
        lines.extend(_describe_device(spec.device, indent="    "))
        return "\n".join(lines)
    if isinstance(spec, DeviceSpec):
        return "\n".join(_describe_device(spec))
    raise SpecError(f"describe: not a spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
