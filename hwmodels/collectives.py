"""Alpha-beta cost models of NCCL/RCCL-style collectives over real fabrics, and the loader of the fabric catalog they read.

A collective's time is modelled the way NCCL's tuner models it: a fixed launch latency, plus a
per-step latency times the number of sequential steps the algorithm takes, plus the bytes that
cross the busiest link divided by that link's achievable bandwidth. The link bandwidth is a
catalog number (per link, per direction) times the number of links a device drives at once
(all 18 NVLinks of an H100 into the NVSwitches, one of MI300X's seven xGMI links per peer, the
NICs of a node running parallel rings) times a named, sourced achievable fraction; protocols
(NCCL's LL, LL128, Simple) trade bandwidth for latency.

Algorithms (see docs/collectives.md for the formulas and their sources):

``ring``          all_reduce, all_gather, reduce_scatter, broadcast; flat across nodes (rings
                  leave each node through its NICs in parallel).
``tree``          all_reduce: NCCL's chain within a node plus double binary tree across nodes.
``nvls``          NVLink SHARP in-switch reduction (NVSwitch gen3+, one node): all_reduce,
                  reduce_scatter, all_gather.
``hierarchical``  all_reduce across nodes: intra-node reduce-scatter (ring or NVLS), inter-node
                  ring over every GPU's NIC share in parallel, intra-node all-gather, pipelined
                  (NCCL's NVLS-tree / CollNet family; NCCL runs gather/scatter across nodes as rings).

NCCL's choices per message size (src/enqueue.cc, src/graph/tuning.cc, v2.28.7) refine the costs
where the catalog states them: the channels a ring or tree runs on (:func:`ring_channels_used`),
the NVLS loop (:func:`nvls_loop_bytes`), the LL cap across nodes by CPU vendor, the p2p channel
ramp of a send (docs/collectives.md).
``direct``        all_to_all (n - 1 simultaneous peer sends; on one node on NCCL's p2p channels, each
                  send's protocol by its size: :func:`_all_to_all_channels`, :func:`_p2p_runs_ll`) and
                  send_recv (one peer).
``allpairs``      all_reduce as RCCL's MSCCL all-pairs schedule runs it on a fully connected
                  node (two steps; taken ahead of the tuner for the sizes its files cover).

The option the library ranks first is not always the fastest: a network plugin's latency hint
(``latency.tuner_extra_step_s``) enters the ranking only, MSCCL's schedules precede the tuner,
and on one node NCCL ranks rings and trees by its own estimate (every channel, its tree bandwidth
and ``treeCorrectionFactor``: ``tuner.tree``), so it runs a ring where the model's tree would be
faster; each option's ``selection_time_s`` carries that ranking cost.

A run where one host thread drives several GPUs (nccl-tests ``-g N``) pays the library's
``launch.per_device_s`` once per further device on every collective (``gpus_per_thread``,
:func:`launch_skew_s`); the default, one rank per process, pays nothing.

A library entry may describe a range of releases of its family (``family``, ``versions``: NCCL
2.8.3-2.17.1 has other latency tables and a 235 GB/s bus bandwidth cap on Ampere; NCCL 2.8.3-2.20.5 caps a
one-node ring's LL bus bandwidth at 1/4 (all_reduce) or 1/3 (the other collectives) of the ring's, and to
2.19.4 rounds ring chunks up to a per-protocol granule, :func:`chunk_granule_ratio`); a published run whose
notes state a release is priced with the entry whose range holds it (:func:`library_for_version`).

:func:`select_algorithm` evaluates every applicable (algorithm, protocol) pair and keeps the
fastest per message size, as NCCL's tuner does; :func:`collective_time` prices one collective
(``algorithm="auto"`` selects). Sizes broadcast as numpy arrays, so an 8 B .. 8 GiB curve is
one call; catalog numbers may be arrays too (replace a field with ``dataclasses.replace``).

The catalog (``catalog/fabrics.toml``) is read by :func:`load_fabric_catalog`; every number
carries a source and human units are parsed strictly by :mod:`hwmodels.units`.

Examples
--------
>>> system = load_collective_system("dgx-h100")
>>> r = collective_time("all_reduce", 2**30, 8, system)
>>> r.algorithm, round(r.busbw_bytes_per_s / 1e9)
('nvls', 471)
>>> ring = collective_time("all_reduce", 2**30, 8, system, algorithm="ring", protocol="simple")
>>> round(ring.busbw_bytes_per_s / 1e9)
356
"""

from __future__ import annotations

import csv
import functools
import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np

from hwmodels.spec import Provenance, SpecError
from hwmodels.tables import table_problems
from hwmodels.units import UnitError, parse_quantity
from nodeperf.suggest import did_you_mean

__all__ = [
    "COLLECTIVES",
    "ALGORITHMS",
    "PROTOCOLS",
    "LATENCY_CLASSES",
    "TOPOLOGIES",
    "DEFAULT_FABRICS_FILE",
    "DEFAULT_PUBLISHED_FILE",
    "Fabric",
    "torus_group_axes",
    "torus_group_system",
    "CollectiveLibrary",
    "CollectiveSystem",
    "FabricCatalog",
    "CollectiveResult",
    "PublishedComparison",
    "load_fabric_catalog",
    "fabric_catalog",
    "load_collective_system",
    "bus_bandwidth_factor",
    "collective_time",
    "collective_options",
    "select_algorithm",
    "launch_skew_s",
    "net_ll128",
    "GPU_NIC_PATHS",
    "P2P_LL_THRESHOLD_OF",
    "ring_channels_used",
    "nvls_loop_bytes",
    "ring_cta_traffic_ratio",
    "applicable_algorithms",
    "read_published_collectives",
    "compare_published",
    "gpus_per_thread_of",
    "mape",
    "ENGINE_ALL_REDUCE_KERNELS",
    "EngineAllReduceKernel",
    "EngineAllReduceFit",
    "EngineAllReduceResult",
    "engine_all_reduce",
    "engine_all_reduce_stage",
]

#: Collectives modelled, with nccl-tests' names (``all_reduce_perf`` -> ``all_reduce``).
COLLECTIVES: tuple[str, ...] = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv",
)
#: Algorithm names a result may carry.
ALGORITHMS: tuple[str, ...] = ("ring", "tree", "nvls", "hierarchical", "direct", "allpairs")
#: Protocols, in NCCL's order (low latency first).
PROTOCOLS: tuple[str, ...] = ("ll", "ll128", "simple")
#: Hardware classes of the libraries' latency tables (NCCL's NVLINK / PCI / NET, plus TPU ICI).
LATENCY_CLASSES: tuple[str, ...] = ("nvlink", "pci", "net", "ici")
#: NCCL's path types from a GPU to a NIC, nearest first (src/graph/topo.h @ v2.29.2-1: PIX a single PCIe
#: bridge, PXB several bridges without the host bridge, P2C over C2C to the CPU then PCIe, PXN through
#: another GPU, PHB through the host bridge, SYS across the CPU sockets' interconnect).
GPU_NIC_PATHS: tuple[str, ...] = ("pix", "pxb", "p2c", "pxn", "phb", "sys")
#: What NCCL multiplies the p2p LL threshold by (library field ``p2p.ll_threshold_of``): p2pnChannelsPerPeer
#: (NCCL 2.28) or the send's own channel count (NCCL 2.29).
P2P_LL_THRESHOLD_OF: tuple[str, ...] = ("channels_per_peer", "send_channels")
#: How a fabric's links join devices.
TOPOLOGIES: tuple[str, ...] = ("switch", "fully_connected", "mesh", "torus", "nic")

DEFAULT_FABRICS_FILE = Path(__file__).resolve().parent / "catalog" / "fabrics.toml"
DEFAULT_PUBLISHED_FILE = Path(__file__).resolve().parent / "measurements" / "published_collectives.csv"

# Collectives each algorithm implements.
_SUPPORTS: dict[str, frozenset[str]] = {
    "ring": frozenset({"all_reduce", "all_gather", "reduce_scatter", "broadcast"}),
    "tree": frozenset({"all_reduce"}),
    "nvls": frozenset({"all_reduce", "all_gather", "reduce_scatter"}),
    # NCCL's tuner offers only Ring (and PAT at one GPU per node, NVLS on one node, CollNet with
    # SHARP switches) to all_gather / reduce_scatter across nodes: the NVLS-tree family is all_reduce
    # only (src/graph/tuning.cc ncclTopoTuneModel, v2.28.7)
    "hierarchical": frozenset({"all_reduce"}),
    "direct": frozenset({"all_to_all", "send_recv"}),
    # RCCL's MSCCL all-pairs all-reduce on one fully connected node (tools/msccl-algorithms)
    "allpairs": frozenset({"all_reduce"}),
}
# Protocols an algorithm may run with (NVLS and the NVLS-tree family are Simple-only in NCCL).
_SIMPLE_ONLY = frozenset({"nvls", "hierarchical"})


# ----------------------------------------------------------------------------------------------
# Specs
# ----------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Fabric:
    """One interconnect: links per device, per-link bandwidth per direction, achievable fraction.

    Numeric fields may be replaced by numpy arrays (``dataclasses.replace``) to sweep them.
    """

    name: str
    description: str
    latency_class: str  #: "nvlink" | "pci" | "net" | "ici": row of the library's latency table
    topology: str  #: one of :data:`TOPOLOGIES`
    link_bandwidth_bytes_per_s: Any  #: per link, per direction
    links_per_device: int
    bandwidth_fraction: Any  #: ``efficiency.bandwidth_fraction``: achievable share of the line rate
    links_per_peer: int | None = None  #: fully_connected / mesh: links joining a pair of devices
    torus_dims: int | None = None  #: torus: number of dimensions (2 links each)
    hop_latency_s: Any = None  #: ``latency.hop_s``: one hop's latency (multi-hop paths)
    extra_step_latency_s: Any = 0.0  #: ``latency.extra_step_s``: added to every step on this fabric
    #: ``latency.tuner_extra_step_s``: the latency a network plugin reports to NCCL (``props->latency``); NCCL's
    #: tuner adds it to every inter-node step of its estimate (twice for Simple), so it steers the choice of
    #: algorithm and protocol but is not part of the time (:func:`select_algorithm`)
    tuner_extra_step_latency_s: Any = 0.0
    nvls_bandwidth_fraction: Any = None  #: ``nvls.bandwidth_fraction``: in-switch reduction, if any
    ll_max_bandwidth_bytes_per_s: Any = None  #: ``ll.max_bandwidth_bytes_per_s``: one-node LL bus bandwidth cap
    channel_bandwidth_bytes_per_s: Any = None  #: ``channel.bandwidth_bytes_per_s``: one channel (one CTA)
    #: ``channel.cta_bytes_per_s``: bytes one channel's CTA loads plus stores per second in NCCL's Simple ring
    #: kernels, whatever memory they touch (None: not described; the ring is then bound by the link share alone,
    #: :func:`ring_cta_traffic_ratio`)
    cta_bytes_per_s: Any = None
    #: ``tree.max_channel_bandwidth_bytes_per_s``: NCCL's one-node cap on a tree channel's bus bandwidth
    #: (``perChMaxTreeBws``, by GPU generation); with the next field it enters only the tuner's tree estimate
    tree_channel_bandwidth_bytes_per_s: Any = None
    #: ``tree.ll128_max_channel_bandwidth_bytes_per_s``: the same cap for tree LL128 (``perChMaxTreeLL128Bws``)
    tree_ll128_channel_bandwidth_bytes_per_s: Any = None
    ll128: bool = False  #: NCCL enables its LL128 protocol on this fabric
    #: ``rendezvous.eager_max_bytes``: the network plugin sends a message of at most this size at once; a larger
    #: one waits for the receiver's control message (its buffer address) before it is written
    eager_max_bytes: Any = None
    #: ``rendezvous.latency_s``: that control message's trip, added once to a collective whose inter-node step message is larger
    rendezvous_latency_s: Any = 0.0
    #: ``rccl_tuner.*``: RCCL's one-node ranking factors for this fabric's GPUs (``ring_ratio`` / ``tree_ratio`` per
    #: protocol, ``tree_correction`` lists); a protocol missing from ``tree_ratio`` is one RCCL never runs as a tree
    rccl_tuner: Mapping[str, Any] | None = None
    provenance: Mapping[str, Provenance] = field(default_factory=dict, compare=False, repr=False)

    @property
    def achievable_link_bandwidth_bytes_per_s(self) -> Any:
        """Per-link, per-direction bandwidth a collective reaches (line rate x fraction), B/s."""
        return self.link_bandwidth_bytes_per_s * self.bandwidth_fraction

    @property
    def has_nvls(self) -> bool:
        """Whether the fabric reduces in the switch (NVLink SHARP)."""
        return self.nvls_bandwidth_fraction is not None


@dataclass(frozen=True)
class CollectiveLibrary:
    """A collective library's latency model: launch latency, per-step latency, protocol factors."""

    name: str
    description: str
    algorithms: tuple[str, ...]
    base_latency_s: Mapping[str, Any]  #: per protocol
    step_latency_s: Mapping[str, Mapping[str, Any]]  #: [latency class][protocol]
    protocol_bandwidth_fraction: Mapping[str, Any]  #: per protocol
    nvls_latency_s: Any = None
    p2p_chunk_bytes: Any = None  #: ``p2p.chunk_bytes``: point-to-point step size over NVLink (NCCL P2P_NVL_CHUNKSIZE)
    #: ``p2p.ll_threshold_bytes``: bytes per p2p channel up to which a send runs LL (NCCL_P2P_LL_THRESHOLD; None: the
    #: protocol of a send is the fastest one)
    p2p_ll_threshold_bytes: Any = None
    #: ``p2p.ll_step_bytes``: an LL send's step (NCCL's LL buffer over NCCL_STEPS), which sets its smallest part
    p2p_ll_step_bytes: Any = None
    #: ``p2p.ll_threshold_of``: the channels the LL threshold is multiplied by, ``channels_per_peer``
    #: (p2pnChannelsPerPeer, NCCL 2.28) or ``send_channels`` (the send's own count, NCCL 2.29); None: the former
    p2p_ll_threshold_of: str | None = None
    #: ``launch.per_device_s``: host time one thread adds per further device it launches a collective
    #: on (None: not described, no launch skew)
    launch_per_device_s: Any = None
    #: ``tuner.max_threads.<protocol>``: threads per channel (CTA) NCCL launches per protocol (None: no channel tuning)
    max_threads: Mapping[str, Any] | None = None
    #: ``tuner.thread_threshold_bytes.<protocol>``: bytes per thread below which NCCL drops a channel
    thread_threshold_bytes: Mapping[str, Any] | None = None
    #: ``tuner.nvls_chunk_bytes``: NVLS chunk size before NCCL shrinks it for small messages (NCCL_NVLS_CHUNKSIZE)
    nvls_chunk_bytes: Any = None
    #: ``tuner.nvls_tree_many_nodes_chunk_bytes``: the NVLS-tree chunk cap from four nodes (None: no cap)
    nvls_tree_many_nodes_chunk_bytes: Any = None
    #: ``tuner.ll_max_bandwidth.<vendor>_<two_nodes|more_nodes>``: NCCL's LL bus-bandwidth cap across nodes
    ll_max_bandwidth_multi_node: Mapping[str, Any] | None = None
    #: ``msccl.allpairs.*``: the library's all-pairs all-reduce schedule, chosen ahead of its tuner for
    #: sizes in its range (keys ``n_devices``, ``ll_max_bytes``, ``max_bytes``, ``granule_bytes``, and
    #: ``max_ranks_per_process``: None, or the most ranks one process may hold for it to run; None: none)
    allpairs: Mapping[str, Any] | None = None
    #: ``tuner.tree.*``: how NCCL's tuner estimates a one-node tree all_reduce, which it ranks by
    #: (keys ``bandwidth_fraction``, ``protocol_fraction`` {protocol: factor}, ``correction`` {protocol:
    #: factors by power-of-two size from 64 B}; None: the tree is ranked by its time)
    tree_tuner: Mapping[str, Any] | None = None
    #: ``ll128.max_gpu_nic_path``: the farthest GPU-to-NIC path (one of :data:`GPU_NIC_PATHS`) over which the
    #: library keeps LL128 across nodes by default (None: never across nodes)
    ll128_max_gpu_nic_path: str | None = None
    #: ``family``: the library this entry is a version range of (None: its own name)
    family: str | None = None
    #: ``versions``: (first, last) release the entry describes, as integer tuples (None: not stated)
    versions: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    #: ``tuner.ring_ll_busbw_fraction.<collective>``: NCCL's cap on a one-node ring's LL bus bandwidth as a
    #: fraction of ring channels x channel bandwidth (NCCL <= 2.20: 1/4 all_reduce, 1/3 the others; None: none)
    ring_ll_busbw_fraction: Mapping[str, Any] | None = None
    #: ``ring.chunk_granule_bytes_per_thread.<protocol>``: a ring step's chunk is rounded up to a multiple of
    #: threads per channel x this (NCCL <= 2.19 ``minChunkSize``; None: no rounding modelled)
    ring_chunk_granule_per_thread: Mapping[str, Any] | None = None
    #: ``tuner.ring_busbw_cap.<fabric>``: NCCL's cap on a one-node ring or tree bus bandwidth on that fabric's
    #: GPUs, before the protocol factors (NCCL 2.8-2.17: 235 GB/s on compute capability 8.0; None: none)
    ring_busbw_cap: Mapping[str, Any] | None = None
    #: ``tuner.ring_ll128_max_channel_bandwidth.<collective>``: NCCL's cap on a one-node ring's LL128 bus
    #: bandwidth per channel of its ring graph (NCCL 2.8.3-2.9.9 ``ll128MaxBwPerCh``; None: none)
    ring_ll128_channel_cap: Mapping[str, Any] | None = None
    provenance: Mapping[str, Provenance] = field(default_factory=dict, compare=False, repr=False)

    @property
    def family_name(self) -> str:
        """The library family this entry belongs to (``nccl`` for every NCCL version range)."""
        return self.family or self.name

    @property
    def protocols(self) -> tuple[str, ...]:
        """The protocols this library implements, low latency first."""
        return tuple(p for p in PROTOCOLS if p in self.protocol_bandwidth_fraction)


@dataclass(frozen=True)
class CollectiveSystem:
    """Devices of a node on an intra-node fabric, nodes joined by NICs (optional), one library."""

    name: str
    description: str
    library: CollectiveLibrary
    intra: Fabric
    devices_per_node: int
    inter: Fabric | None = None
    nics_per_node: int = 0
    p2p_channels: int | None = None  #: ``p2p_channels``: NCCL's p2pnChannels on this node (None: no ramp)
    p2p_channels_per_peer: int | None = None  #: ``p2p_channels_per_peer``: NCCL's p2pnChannelsPerPeer
    cpu_vendor: str | None = None  #: ``cpu_vendor``: "intel" or "amd", the column of NCCL's multi-node LL cap
    ring_channels: int | None = None  #: ``ring_channels``: NCCL's collective channel count (comm->nChannels) on one node
    nvls_channels: int | None = None  #: ``nvls_channels``: NCCL's NVLS channel count (comm->nvlsChannels)
    #: ``nvls_channels_one_node``: comm->nvlsChannels for a communicator whose ranks share one node (one NVLink
    #: clique), where NCCL sets it apart from ``nvls_channels`` (Blackwell from NCCL 2.27.3: NVLS_NCHANNELS_SM100_NVL);
    #: None: ``nvls_channels`` on one node too
    nvls_channels_one_node: int | None = None
    #: ``nvls_tree_chunk_bytes``: the chunk NCCL's NVLS tree starts from where the node's setup sets it
    #: (NCCL_NVLS_CHUNKSIZE and NCCL_NVLSTREE_MAX_CHUNKSIZE); None: NCCL's defaults (:func:`nvls_tree_wave_bytes`)
    nvls_tree_chunk_bytes: Any = None
    #: ``gpu_nic_path``: how each GPU reaches its nearest NIC (one of :data:`GPU_NIC_PATHS`; None: not described)
    gpu_nic_path: str | None = None
    #: ``nvls_tuner.all_reduce_algbw.<n>``: the NVLS all_reduce algorithm bandwidth NCCL's tuner prints for
    #: ``n`` ranks of this node, B/s (its ranking only; None: not printed, NVLS ranked by its modelled time)
    nvls_tuner_algbw: Mapping[int, Any] | None = None
    nvls_tuner_latency_s: Any = None  #: ``nvls_tuner.all_reduce_latency_s``: the latency printed beside it
    provenance: Mapping[str, Provenance] = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True)
class FabricCatalog:
    """Everything in one fabrics TOML file, by name."""

    path: str
    fabrics: Mapping[str, Fabric]
    libraries: Mapping[str, CollectiveLibrary]
    systems: Mapping[str, CollectiveSystem]

    def fabric(self, name: str) -> Fabric:
        """The fabric called ``name`` (SpecError with a near match otherwise)."""
        return _pick(self.fabrics, name, "fabric", self.path)

    def library(self, name: str) -> CollectiveLibrary:
        """The collective library called ``name``."""
        return _pick(self.libraries, name, "library", self.path)

    def system(self, name: str) -> CollectiveSystem:
        """The node configuration called ``name``."""
        return _pick(self.systems, name, "system", self.path)


def _pick(table: Mapping[str, Any], name: str, what: str, where: str) -> Any:
    key = str(name).strip().lower()
    if key in table:
        return table[key]
    raise SpecError(
        f"{where}: unknown {what}; got {name!r}; expected one of {', '.join(sorted(table))}"
        f"{did_you_mean(key, table)}"
    )


@dataclass(frozen=True)
class CollectiveResult:
    """Predicted cost of one collective; array fields have the shape of ``size_bytes``.

    ``algbw = size / time`` and ``busbw = algbw * factor`` as nccl-tests defines them
    (doc/PERFORMANCE.md): factor ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for all_gather,
    reduce_scatter and all_to_all, ``1`` for broadcast and send_recv. ``size`` is nccl-tests'
    size: the whole buffer (for all_gather / reduce_scatter: ``n`` times one rank's shard).
    """

    collective: str
    n_devices: int
    n_nodes: int
    size_bytes: Any
    time_s: Any
    latency_s: Any  #: the size-independent part of ``time_s``
    algorithm: Any  #: name (str, or array of str), one of :data:`ALGORITHMS`
    protocol: Any  #: name (str, or array of str), one of :data:`PROTOCOLS`
    algbw_bytes_per_s: Any
    busbw_bytes_per_s: Any
    #: the cost the library's tuner ranks this option by, where it differs from ``time_s`` (None: ``time_s``)
    selection_time_s: Any = None


# ----------------------------------------------------------------------------------------------
# Loader
# ----------------------------------------------------------------------------------------------

class _Problems:
    def __init__(self, where: str) -> None:
        self.where = where
        self.items: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.items.append(f"{self.where}:{path}: {msg}")

    def raise_if_any(self) -> None:
        if self.items:
            head = self.items[0]
            more = len(self.items) - 1
            tail = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
            raise SpecError(head + tail + ("\n" + "\n".join(self.items[1:]) if more else ""))


_QKEYS = frozenset({"value", "source", "note"})


class _Reader:
    """Reads sourced quantities out of the parsed TOML, recording provenance and problems."""

    def __init__(self, problems: _Problems, refs: Mapping[str, str]) -> None:
        self.problems = problems
        self.refs = refs

    def source(self, src: Any, path: str) -> str | None:
        if not isinstance(src, str) or not src.strip():
            self.problems.add(path, f"missing source; got {src!r}; expected a citation string")
            return None
        out = src.strip()
        for word in out.split():
            if word.startswith("@"):
                key = word[1:].rstrip(".,:;)'\"")
                if key not in self.refs:
                    self.problems.add(
                        path, f"unknown reference in source; got '@{key}'; expected a key of [refs]"
                        f"{did_you_mean(key, self.refs)}")
                    return None
                out = out.replace(f"@{key}", self.refs[key], 1)
        return out

    def quantity(self, table: Mapping[str, Any], key: str, unit: str, path: str, prov: dict[str, Provenance],
                 *, required: bool = True, zero_ok: bool = False, at_most_one: bool = False) -> Any:
        full = f"{path}.{key}"
        raw: Any = table
        for part in key.split("."):
            raw = raw.get(part) if isinstance(raw, Mapping) else None
        if raw is None:
            if required:
                self.problems.add(full, "missing value; got nothing; expected { value = ..., source = \"...\" }")
            return None
        if not isinstance(raw, Mapping) or "value" not in raw:
            self.problems.add(full, f"number without a source; got {raw!r}; expected "
                                    "{ value = ..., source = \"datasheet, table ...\" }")
            return None
        for kpath, msg in table_problems(dict.fromkeys(sorted(set(raw) - _QKEYS)), allowed=sorted(_QKEYS), path=full):
            self.problems.add(kpath, msg())
        src = self.source(raw.get("source"), full)
        try:
            v = parse_quantity(raw["value"], unit)
        except UnitError as e:
            self.problems.add(full, str(e))
            return None
        if not math.isfinite(v) or v < 0 or (v == 0 and not zero_ok):
            self.problems.add(full, f"out of range; got {raw['value']!r}; expected a "
                                    f"{'non-negative' if zero_ok else 'positive'} finite value")
            return None
        if at_most_one and v > 1:
            self.problems.add(full, f"fraction above 1; got {raw['value']!r}; expected a value in (0, 1]")
            return None
        if src is not None:
            prov[full] = Provenance(source=src, note=str(raw.get("note", "")))
        return int(v) if unit == "count" else v

    def choice(self, table: Mapping[str, Any], key: str, choices: Iterable[str], path: str) -> str | None:
        got = table.get(key)
        options = tuple(choices)
        if got not in options:
            self.problems.add(f"{path}.{key}", f"unknown {key}; got {got!r}; expected one of "
                                               f"{', '.join(options)}{did_you_mean(str(got), options)}")
            return None
        return str(got)

    def sourced_choice(self, table: Mapping[str, Any], key: str, choices: Iterable[str], path: str,
                       prov: dict[str, Provenance]) -> str | None:
        """``{ value = "<one of choices>", source = "..." }`` at dotted ``key`` (None when absent or wrong)."""
        full = f"{path}.{key}"
        raw: Any = table
        for part in key.split("."):
            raw = raw.get(part) if isinstance(raw, Mapping) else None
        if raw is None:
            return None
        options = tuple(choices)
        if not isinstance(raw, Mapping) or "value" not in raw:
            self.problems.add(full, f"value without a source; got {raw!r}; expected "
                                    f"{{ value = \"{options[0]}\", source = \"...\" }}")
            return None
        for kpath, msg in table_problems(dict.fromkeys(sorted(set(raw) - _QKEYS)), allowed=sorted(_QKEYS), path=full):
            self.problems.add(kpath, msg())
        got = raw["value"]
        if got not in options:
            self.problems.add(full, f"unknown value; got {got!r}; expected one of {', '.join(options)}"
                                    f"{did_you_mean(str(got), options)}")
            return None
        src = self.source(raw.get("source"), full)
        if src is None:
            return None
        prov[full] = Provenance(source=src, note=str(raw.get("note", "")))
        return str(got)

    def unknown_keys(self, table: Mapping[str, Any], allowed: Iterable[str], path: str) -> None:
        names = sorted(set(allowed))
        for kpath, msg in table_problems(dict.fromkeys(sorted(set(table) - set(names))), allowed=names, path=path):
            self.problems.add(kpath, msg())


_FABRIC_KEYS = ("description", "class", "topology", "ll128", "link_bandwidth_bytes_per_s", "links_per_device",
                "links_per_peer", "torus_dims", "latency", "efficiency", "nvls", "ll", "channel", "tree", "rendezvous",
                "rccl_tuner")


_TREE_FABRIC_KEYS = ("max_channel_bandwidth_bytes_per_s", "ll128_max_channel_bandwidth_bytes_per_s")


def _read_fabric(name: str, t: Mapping[str, Any], rd: _Reader) -> Fabric | None:
    path = f"fabrics.{name}"
    if not isinstance(t, Mapping):
        rd.problems.add(path, f"not a table; got {t!r}; expected [fabrics.{name}]")
        return None
    rd.unknown_keys(t, _FABRIC_KEYS, path)
    rd.unknown_keys(t.get("latency", {}), ("hop_s", "extra_step_s", "tuner_extra_step_s"), f"{path}.latency")
    rd.unknown_keys(t.get("efficiency", {}), ("bandwidth_fraction",), f"{path}.efficiency")
    rd.unknown_keys(t.get("nvls", {}), ("bandwidth_fraction",), f"{path}.nvls")
    rd.unknown_keys(t.get("ll", {}), ("max_bandwidth_bytes_per_s",), f"{path}.ll")
    rd.unknown_keys(t.get("channel", {}), ("bandwidth_bytes_per_s", "cta_bytes_per_s"), f"{path}.channel")
    rd.unknown_keys(t.get("tree", {}), _TREE_FABRIC_KEYS, f"{path}.tree")
    rd.unknown_keys(t.get("rendezvous", {}), ("eager_max_bytes", "latency_s"), f"{path}.rendezvous")
    prov: dict[str, Provenance] = {}
    cls = rd.choice(t, "class", LATENCY_CLASSES, path)
    topo = rd.choice(t, "topology", TOPOLOGIES, path)
    bw = rd.quantity(t, "link_bandwidth_bytes_per_s", "B/s", path, prov)
    links = rd.quantity(t, "links_per_device", "count", path, prov)
    frac = rd.quantity(t, "efficiency.bandwidth_fraction", "1", path, prov, at_most_one=True)
    peer = rd.quantity(t, "links_per_peer", "count", path, prov, required=topo in ("fully_connected", "mesh"))
    dims = rd.quantity(t, "torus_dims", "count", path, prov, required=topo == "torus")
    hop = rd.quantity(t, "latency.hop_s", "s", path, prov, required=topo == "torus")
    extra = rd.quantity(t, "latency.extra_step_s", "s", path, prov, required=False, zero_ok=True)
    tuner_extra = rd.quantity(t, "latency.tuner_extra_step_s", "s", path, prov, required=False, zero_ok=True)
    nvls = rd.quantity(t, "nvls.bandwidth_fraction", "1", path, prov, required=False, at_most_one=True)
    ll_max = rd.quantity(t, "ll.max_bandwidth_bytes_per_s", "B/s", path, prov, required=False)
    channel_bw = rd.quantity(t, "channel.bandwidth_bytes_per_s", "B/s", path, prov, required=False)
    cta_bw = rd.quantity(t, "channel.cta_bytes_per_s", "B/s", path, prov, required=False)
    tree_bw = [rd.quantity(t, f"tree.{k}", "B/s", path, prov, required=False) for k in _TREE_FABRIC_KEYS]
    eager = rd.quantity(t, "rendezvous.eager_max_bytes", "B", path, prov, required=False)
    rdv = rd.quantity(t, "rendezvous.latency_s", "s", path, prov, required=eager is not None, zero_ok=True)
    ll128 = t.get("ll128", False)
    if not isinstance(ll128, bool):
        rd.problems.add(f"{path}.ll128", f"not a boolean; got {ll128!r}; expected true or false")
    if nvls is not None and topo != "switch":
        rd.problems.add(f"{path}.nvls", f"in-switch reduction needs a switch; got topology {topo!r}; "
                                        "expected topology = \"switch\"")
    if None in (cls, topo, bw, links, frac) or (topo in ("fully_connected", "mesh") and peer is None) \
            or (topo == "torus" and (dims is None or hop is None)):
        return None
    return Fabric(name=name, description=str(t.get("description", "")), latency_class=cls, topology=topo,
                  link_bandwidth_bytes_per_s=bw, links_per_device=links, bandwidth_fraction=frac,
                  links_per_peer=peer, torus_dims=dims, hop_latency_s=hop,
                  extra_step_latency_s=0.0 if extra is None else extra,
                  tuner_extra_step_latency_s=0.0 if tuner_extra is None else tuner_extra, nvls_bandwidth_fraction=nvls,
                  ll_max_bandwidth_bytes_per_s=ll_max, channel_bandwidth_bytes_per_s=channel_bw, cta_bytes_per_s=cta_bw,
                  tree_channel_bandwidth_bytes_per_s=tree_bw[0], tree_ll128_channel_bandwidth_bytes_per_s=tree_bw[1],
                  ll128=bool(ll128), eager_max_bytes=eager, rendezvous_latency_s=0.0 if rdv is None else rdv,
                  rccl_tuner=_read_rccl_tuner(t, rd, path, prov), provenance=MappingProxyType(prov))


def _sub_table(t: Mapping[str, Any], key: str, entry: str, rd: _Reader, path: str) -> Mapping[str, Any]:
    """``t[key]`` when it is a table ({} when absent); anything else is one located problem (the values under
    it are then read as absent)."""
    sub = t.get(key, {})
    if isinstance(sub, Mapping):
        return sub
    rd.problems.add(f"{path}.{key}", f"not a table; got {sub!r}; expected {key}.{entry}")
    return {}


def _read_library(name: str, t: Mapping[str, Any], rd: _Reader,
                  fabric_names: Iterable[str] = ()) -> CollectiveLibrary | None:
    path = f"libraries.{name}"
    if not isinstance(t, Mapping):
        rd.problems.add(path, f"not a table; got {t!r}; expected [libraries.{name}]")
        return None
    rd.unknown_keys(t, ("description", "algorithms", "base_latency_s", "step_latency_s", "protocol",
                        "nvls_latency_s", "p2p", "launch", "tuner", "msccl", "ll128", "family", "versions",
                        "ring"), path)
    rd.unknown_keys(_sub_table(t, "p2p", "chunk_bytes = { value = \"512 KiB\", source = \"...\" }", rd, path),
                    ("chunk_bytes", "ll_threshold_bytes", "ll_step_bytes", "ll_threshold_of"), f"{path}.p2p")
    rd.unknown_keys(_sub_table(t, "ll128", "max_gpu_nic_path = { value = \"pxb\", source = \"...\" }", rd, path),
                    ("max_gpu_nic_path",), f"{path}.ll128")
    tuner = _sub_table(t, "tuner", "max_threads.ll = { value = 512, source = \"...\" }", rd, path)
    rd.unknown_keys(tuner, ("max_threads", "thread_threshold_bytes", "nvls_chunk_bytes", "ll_max_bandwidth", "tree",
                            "nvls_tree_many_nodes_chunk_bytes",
                            "ring_ll_busbw_fraction", "ring_busbw_cap", "ring_ll128_max_channel_bandwidth"),
                    f"{path}.tuner")

    rd.unknown_keys(t.get("launch", {}), ("per_device_s",), f"{path}.launch")
    prov: dict[str, Provenance] = {}
    algos = t.get("algorithms")
    if not isinstance(algos, list) or not algos or any(a not in ALGORITHMS for a in algos):
        rd.problems.add(f"{path}.algorithms", f"bad algorithm list; got {algos!r}; expected a non-empty list "
                                              f"from {', '.join(ALGORITHMS)}")
        algos = []
    protos = t.get("protocol", {})
    rd.unknown_keys(protos, PROTOCOLS, f"{path}.protocol")
    fractions: dict[str, Any] = {}
    for p in PROTOCOLS:
        if p in protos:
            rd.unknown_keys(protos[p], ("bandwidth_fraction",), f"{path}.protocol.{p}")
            fractions[p] = rd.quantity(t, f"protocol.{p}.bandwidth_fraction", "1", path, prov, at_most_one=True)
    if not fractions:
        rd.problems.add(f"{path}.protocol", "no protocol; got nothing; expected [libraries.x.protocol.simple] at least")
    base: dict[str, Any] = {}
    rd.unknown_keys(t.get("base_latency_s", {}), PROTOCOLS, f"{path}.base_latency_s")
    for p in fractions:
        base[p] = rd.quantity(t, f"base_latency_s.{p}", "s", path, prov, zero_ok=True)
    steps: dict[str, dict[str, Any]] = {}
    table = t.get("step_latency_s", {})
    rd.unknown_keys(table, LATENCY_CLASSES, f"{path}.step_latency_s")
    for cls in LATENCY_CLASSES:
        if cls in table:
            rd.unknown_keys(table[cls], PROTOCOLS, f"{path}.step_latency_s.{cls}")
            steps[cls] = {p: rd.quantity(t, f"step_latency_s.{cls}.{p}", "s", path, prov) for p in fractions}
    nvls = rd.quantity(t, "nvls_latency_s", "s", path, prov, required="nvls" in algos)
    p2p_chunk = rd.quantity(t, "p2p.chunk_bytes", "B", path, prov, required=False)
    p2p_ll = rd.quantity(t, "p2p.ll_threshold_bytes", "B", path, prov, required=False)
    p2p_ll_step = rd.quantity(t, "p2p.ll_step_bytes", "B", path, prov, required=False)
    p2p_ll_of = rd.sourced_choice(t, "p2p.ll_threshold_of", P2P_LL_THRESHOLD_OF, path, prov)
    launch = rd.quantity(t, "launch.per_device_s", "s", path, prov, required=False)
    threads, thresholds = _read_tuner_tables(t, rd, path, prov, tuple(fractions))
    ll_multi = _read_ll_multi_node(t, rd, path, prov)
    nvls_chunk, nvls_tree_cap = (rd.quantity(t, f"tuner.{k}", "B", path, prov, required=False)
                                 for k in ("nvls_chunk_bytes", "nvls_tree_many_nodes_chunk_bytes"))
    allpairs = _read_allpairs(t, rd, path, prov, "allpairs" in algos)
    tree_tuner = _read_tree_tuner(t, rd, path, prov, tuple(fractions))
    ll128_path = rd.sourced_choice(t, "ll128.max_gpu_nic_path", GPU_NIC_PATHS, path, prov)
    family, versions = _read_versions(t, rd, path, prov)
    ll_frac, granule = _read_ring_tables(t, rd, path, prov, tuple(fractions))
    busbw_cap = _read_busbw_cap(t, rd, path, prov, fabric_names)
    ll128_cap = _read_ring_ll128_cap(t, rd, path, prov)
    if any(v is None for v in (*fractions.values(), *base.values())) or \
            any(v is None for d in steps.values() for v in d.values()):
        return None
    return CollectiveLibrary(
        name=name, description=str(t.get("description", "")), algorithms=tuple(algos),
        base_latency_s=MappingProxyType(base),
        step_latency_s=MappingProxyType({k: MappingProxyType(v) for k, v in steps.items()}),
        protocol_bandwidth_fraction=MappingProxyType(fractions), nvls_latency_s=nvls, p2p_chunk_bytes=p2p_chunk,
        p2p_ll_threshold_bytes=p2p_ll, p2p_ll_step_bytes=p2p_ll_step, p2p_ll_threshold_of=p2p_ll_of,
        launch_per_device_s=launch, max_threads=threads, thread_threshold_bytes=thresholds,
        nvls_chunk_bytes=nvls_chunk, nvls_tree_many_nodes_chunk_bytes=nvls_tree_cap,
        ll_max_bandwidth_multi_node=ll_multi, allpairs=allpairs,
        tree_tuner=tree_tuner, ll128_max_gpu_nic_path=ll128_path, family=family, versions=versions,
        ring_ll_busbw_fraction=ll_frac, ring_chunk_granule_per_thread=granule, ring_busbw_cap=busbw_cap,
        ring_ll128_channel_cap=ll128_cap, provenance=MappingProxyType(prov))


_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)$")


def parse_version(text: str) -> tuple[int, ...] | None:
    """``"2.9.9"`` -> ``(2, 9, 9)``; None when ``text`` is not three dot-separated integers."""
    m = _VERSION.match(str(text).strip())
    return tuple(int(g) for g in m.groups()) if m else None


def _read_versions(t: Mapping[str, Any], rd: _Reader, path: str,
                   prov: dict[str, Provenance]) -> tuple[str | None, tuple[tuple[int, ...], tuple[int, ...]] | None]:
    """``family = "nccl"`` and ``versions = { value = "2.8.3..2.17.1", source = ... }`` (both optional)."""
    family = t.get("family")
    if family is not None and (not isinstance(family, str) or not family.strip()):
        rd.problems.add(f"{path}.family", f"not a library name; got {family!r}; expected a string such as \"nccl\"")
        family = None
    raw = t.get("versions")
    if raw is None:
        return family, None
    full = f"{path}.versions"
    if family is None:
        rd.problems.add(full, "a range without a family never matches; got versions but no family; expected "
                              "family = \"nccl\" (the library the range belongs to) beside it")
        return family, None
    if not isinstance(raw, Mapping) or "value" not in raw:
        rd.problems.add(full, f"range without a source; got {raw!r}; expected {{ value = \"2.8.3..2.17.1\", source = \"...\" }}")
        return family, None
    rd.unknown_keys(raw, sorted(_QKEYS), full)
    ends = str(raw["value"]).split("..")
    lo, hi = (parse_version(ends[0]), parse_version(ends[1])) if len(ends) == 2 else (None, None)
    if lo is None or hi is None or lo > hi:
        rd.problems.add(full, f"bad version range; got {raw['value']!r}; expected \"first..last\" such as \"2.8.3..2.17.1\"")
        return family, None
    src = rd.source(raw.get("source"), full)
    if src is not None:
        prov[full] = Provenance(source=src, note=str(raw.get("note", "")))
    return family, (lo, hi)


def _read_ring_tables(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance],
                      protocols: tuple[str, ...]) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """``tuner.ring_ll_busbw_fraction.<collective>`` and ``ring.chunk_granule_bytes_per_thread.<protocol>``."""
    ll_frac = _keyed_table(t, rd, path, prov, "tuner.ring_ll_busbw_fraction", COLLECTIVES, "1",
                           "<collective> = { value = 0.25, source = \"...\" }", at_most_one=True)
    ring = _sub_table(t, "ring", "chunk_granule_bytes_per_thread.ll = { value = \"8 B\", source = \"...\" }", rd, path)
    rd.unknown_keys(ring, ("chunk_granule_bytes_per_thread",), f"{path}.ring")
    granule = _keyed_table(t, rd, path, prov, "ring.chunk_granule_bytes_per_thread", protocols, "B",
                           "<protocol> = { value = \"8 B\", source = \"...\" }")
    if granule is not None and set(granule) != set(protocols):
        missing = sorted(set(protocols) - set(granule))
        rd.problems.add(f"{path}.ring.chunk_granule_bytes_per_thread.{missing[0]}",
                        "missing value; got nothing; expected { value = ..., source = \"...\" } for every protocol")
    return ll_frac, granule


def _keyed_table(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance], key: str,
                 keys: Iterable[str], unit: str, example: str, **kw: Any) -> Mapping[str, Any] | None:
    """The sourced quantities at dotted ``key``, a table keyed by ``keys`` (None when absent); anything else there
    (not a table, a key outside ``keys``) is one located problem."""
    raw: Any = t
    for part in key.split("."):
        raw = raw.get(part) if isinstance(raw, Mapping) else None
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        rd.problems.add(f"{path}.{key}", f"not a table; got {raw!r}; expected {key}.{example}")
        return None
    known = tuple(keys)
    rd.unknown_keys(raw, known, f"{path}.{key}")
    return MappingProxyType({k: rd.quantity(t, f"{key}.{k}", unit, path, prov, **kw) for k in known if k in raw})


def _read_busbw_cap(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance],
                    fabric_names: Iterable[str]) -> Mapping[str, Any] | None:
    """``tuner.ring_busbw_cap.<fabric>`` in B/s, keyed by fabrics the catalog declares (None when absent)."""
    return _keyed_table(t, rd, path, prov, "tuner.ring_busbw_cap", fabric_names, "B/s",
                        "<fabric> = { value = \"235 GB/s\", source = \"...\" }")


def _read_ring_ll128_cap(t: Mapping[str, Any], rd: _Reader, path: str,
                         prov: dict[str, Provenance]) -> Mapping[str, Any] | None:
    """``tuner.ring_ll128_max_channel_bandwidth.<collective>`` in B/s (None when absent)."""
    return _keyed_table(t, rd, path, prov, "tuner.ring_ll128_max_channel_bandwidth", COLLECTIVES, "B/s",
                        "<collective> = { value = \"16.9 GB/s\", source = \"...\" }")


_ALLPAIRS_KEYS: tuple[tuple[str, str], ...] = (("n_devices", "count"), ("ll_max_bytes", "B"), ("max_bytes", "B"),
                                               ("granule_bytes", "B"))


def _read_allpairs(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance],
                   listed: bool) -> Mapping[str, Any] | None:
    """``msccl.allpairs.*`` (required when the library lists the ``allpairs`` algorithm)."""
    msccl = t.get("msccl", {}) if isinstance(t.get("msccl", {}), Mapping) else {}
    rd.unknown_keys(msccl, ("allpairs",), f"{path}.msccl")
    if "allpairs" not in msccl and not listed:
        return None
    rd.unknown_keys(msccl.get("allpairs", {}), [k for k, _ in _ALLPAIRS_KEYS] + ["max_ranks_per_process"],
                    f"{path}.msccl.allpairs")
    got = {k: rd.quantity(t, f"msccl.allpairs.{k}", unit, path, prov) for k, unit in _ALLPAIRS_KEYS}
    per_process = rd.quantity(t, "msccl.allpairs.max_ranks_per_process", "count", path, prov, required=False)
    if not listed:
        rd.problems.add(f"{path}.msccl.allpairs", "described but not used; got no 'allpairs' in algorithms; "
                                                  "expected it listed in algorithms")
    if any(v is None for v in got.values()):
        return None
    return MappingProxyType({**got, "max_ranks_per_process": per_process})


def _read_tree_tuner(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance],
                     protocols: tuple[str, ...]) -> Mapping[str, Any] | None:
    """``tuner.tree.*``: NCCL's tree estimate (None when absent or incomplete)."""
    tuner = t.get("tuner", {}) if isinstance(t.get("tuner", {}), Mapping) else {}
    tree = tuner.get("tree")
    if not isinstance(tree, Mapping):
        return None
    where = f"{path}.tuner.tree"
    rd.unknown_keys(tree, ("bandwidth_fraction", "protocol_fraction", "correction"), where)
    rd.unknown_keys(tree.get("protocol_fraction", {}), protocols, f"{where}.protocol_fraction")
    rd.unknown_keys(tree.get("correction", {}), protocols, f"{where}.correction")
    frac = rd.quantity(t, "tuner.tree.bandwidth_fraction", "1", path, prov, at_most_one=True)
    proto = {p: rd.quantity(t, f"tuner.tree.protocol_fraction.{p}", "1", path, prov, at_most_one=True)
             for p in protocols}
    corr = {p: _read_factor_list(tree.get("correction", {}).get(p), rd, f"{where}.correction.{p}", prov)
            for p in protocols}
    if frac is None or any(v is None for v in (*proto.values(), *corr.values())):
        return None
    return MappingProxyType({"bandwidth_fraction": frac, "protocol_fraction": MappingProxyType(proto),
                             "correction": MappingProxyType(corr)})


def _read_rccl_tuner(t: Mapping[str, Any], rd: _Reader, path: str,
                     prov: dict[str, Provenance]) -> Mapping[str, Any] | None:
    """``rccl_tuner.*``: RCCL's one-node ranking factors (None when absent or incomplete; problems located)."""
    tab = t.get("rccl_tuner")
    if not isinstance(tab, Mapping):
        return None
    where = f"{path}.rccl_tuner"
    rd.unknown_keys(tab, ("ring_ratio", "tree_ratio", "tree_correction"), where)
    out: dict[str, Any] = {}
    for key in ("ring_ratio", "tree_ratio", "tree_correction"):
        sub = tab.get(key, {}) if isinstance(tab.get(key, {}), Mapping) else {}
        rd.unknown_keys(sub, PROTOCOLS, f"{where}.{key}")
        out[key] = MappingProxyType({
            p: (_read_factor_list(sub[p], rd, f"{where}.{key}.{p}", prov) if key == "tree_correction"
                else rd.quantity(t, f"rccl_tuner.{key}.{p}", "1", path, prov)) for p in PROTOCOLS if p in sub})
    if any(v is None for m in out.values() for v in m.values()):
        return None
    if set(out["tree_ratio"]) != set(out["tree_correction"]):
        rd.problems.add(f"{where}.tree_correction", f"protocols differ from tree_ratio; got {sorted(out['tree_correction'])}; "
                                                   f"expected {sorted(out['tree_ratio'])}")
        return None
    return MappingProxyType(out)


def _read_factor_list(raw: Any, rd: _Reader, full: str, prov: dict[str, Provenance]) -> tuple[float, ...] | None:
    """``{ value = [f0, f1, ...], source = "..." }``: factors in (0, 1] (None on a problem, located)."""
    if not isinstance(raw, Mapping) or "value" not in raw:
        rd.problems.add(full, f"missing factor list; got {raw!r}; expected {{ value = [1.0, 0.9, ...], source = \"...\" }}")
        return None
    for kpath, msg in table_problems(dict.fromkeys(sorted(set(raw) - _QKEYS)), allowed=sorted(_QKEYS), path=full):
        rd.problems.add(kpath, msg())
    vals = raw["value"]
    ok = isinstance(vals, list) and vals and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1 for v in vals)
    if not ok:
        rd.problems.add(full, f"bad factor list; got {vals!r}; expected a non-empty list of numbers in (0, 1]")
        return None
    src = rd.source(raw.get("source"), full)
    if src is None:
        return None
    prov[full] = Provenance(source=src, note=str(raw.get("note", "")))
    return tuple(float(v) for v in vals)


def _read_ll_multi_node(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance]) -> Any:
    """``tuner.ll_max_bandwidth.<vendor>_<two_nodes|more_nodes>`` (None when absent or incomplete)."""
    tuner = t.get("tuner", {})
    table = tuner.get("ll_max_bandwidth") if isinstance(tuner, Mapping) else None
    if table is None:
        return None
    keys = tuple(f"{v}_{c}" for v in CPU_VENDORS for c in ("two_nodes", "more_nodes"))
    rd.unknown_keys(table, keys, f"{path}.tuner.ll_max_bandwidth")
    got = {k: rd.quantity(t, f"tuner.ll_max_bandwidth.{k}", "B/s", path, prov) for k in keys}
    return None if any(v is None for v in got.values()) else MappingProxyType(got)


def _read_tuner_tables(t: Mapping[str, Any], rd: _Reader, path: str, prov: dict[str, Provenance],
                       protocols: tuple[str, ...]) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
    """``tuner.max_threads`` and ``tuner.thread_threshold_bytes`` per protocol (both or neither)."""
    tuner = t.get("tuner", {}) if isinstance(t.get("tuner", {}), Mapping) else {}
    have = [k for k in ("max_threads", "thread_threshold_bytes") if k in tuner]
    if not have:
        return None, None
    out = []
    for key in ("max_threads", "thread_threshold_bytes"):
        rd.unknown_keys(tuner.get(key, {}), PROTOCOLS, f"{path}.tuner.{key}")
        unit = "count" if key == "max_threads" else "B"
        out.append(MappingProxyType({p: rd.quantity(t, f"tuner.{key}.{p}", unit, path, prov) for p in protocols}))
    if any(v is None for m in out for v in m.values()):
        return None, None
    return out[0], out[1]


def _read_nvls_tuner(t: Mapping[str, Any], rd: _Reader, path: str,
                     prov: dict[str, Provenance]) -> tuple[Mapping[int, Any] | None, Any]:
    """``nvls_tuner.all_reduce_algbw.<ranks>`` and ``nvls_tuner.all_reduce_latency_s`` (both or neither)."""
    table = t.get("nvls_tuner")
    if table is None:
        return None, None
    full = f"{path}.nvls_tuner"
    if not isinstance(table, Mapping):
        rd.problems.add(full, f"not a table; got {table!r}; expected nvls_tuner.all_reduce_algbw.<ranks> = {{ ... }}")
        return None, None
    rd.unknown_keys(table, ("all_reduce_algbw", "all_reduce_latency_s"), full)
    lat = rd.quantity(t, "nvls_tuner.all_reduce_latency_s", "s", path, prov)
    ranks = table.get("all_reduce_algbw")
    if not isinstance(ranks, Mapping) or not ranks:
        rd.problems.add(f"{full}.all_reduce_algbw", f"missing table; got {ranks!r}; expected "
                                                    "all_reduce_algbw.<ranks> = { value = \"160 GB/s\", source = \"...\" }")
        return None, None
    got: dict[int, Any] = {}
    for key in ranks:
        if not str(key).isdigit() or int(key) < 2:
            rd.problems.add(f"{full}.all_reduce_algbw.{key}", f"not a rank count; got {key!r}; expected a whole "
                                                              "number >= 2 (e.g. all_reduce_algbw.4)")
            continue
        got[int(key)] = rd.quantity(t, f"nvls_tuner.all_reduce_algbw.{key}", "B/s", path, prov)
    if lat is None or not got or any(v is None for v in got.values()):
        return None, None
    return MappingProxyType(got), lat


def _check_nvls_tuner(algbw: Mapping[int, Any] | None, channels: Any, per_node: Any, rd: _Reader,
                      path: str) -> None:
    """An ``nvls_tuner`` table belongs to a system with NVLS (``nvls_channels``) and names rank counts that fit
    in one of its nodes (the tuner's figures are single-node estimates): one located problem each."""
    if not algbw:
        return
    if channels is None:
        rd.problems.add(f"{path}.nvls_tuner", "given for a system without NVLS; got no nvls_channels; expected "
                                              "nvls_channels = { value = N, source = \"...\" } beside it")
    if per_node is None:
        return
    for ranks in sorted(algbw):
        if ranks > per_node:
            rd.problems.add(f"{path}.nvls_tuner.all_reduce_algbw.{ranks}",
                            f"more ranks than one node holds; got {ranks}; expected at most "
                            f"devices_per_node = {int(per_node)}")


def _read_system(name: str, t: Mapping[str, Any], rd: _Reader, fabrics: Mapping[str, Fabric],
                 libraries: Mapping[str, CollectiveLibrary], declared: tuple[set[str], set[str]]) -> CollectiveSystem | None:
    path = f"systems.{name}"
    if not isinstance(t, Mapping):
        rd.problems.add(path, f"not a table; got {t!r}; expected [systems.{name}]")
        return None
    rd.unknown_keys(t, ("description", "library", "intra", "inter", "devices_per_node", "nics_per_node",
                        "p2p_channels", "p2p_channels_per_peer", "ring_channels", "nvls_channels", "nvls_channels_one_node",
                        "cpu_vendor",
                        "gpu_nic_path", "nvls_tuner", "nvls_tree_chunk_bytes"), path)
    prov: dict[str, Provenance] = {}
    fabric_names, library_names = declared
    ok = True
    refs: dict[str, Any] = {}
    for key, names, table in (("library", library_names, libraries), ("intra", fabric_names, fabrics),
                              ("inter", fabric_names, fabrics)):
        got = t.get(key)
        if got is None and key == "inter":
            refs[key] = None
            continue
        if got not in names:
            rd.problems.add(f"{path}.{key}", f"unknown {'library' if key == 'library' else 'fabric'}; got {got!r}; "
                                             f"expected one of {', '.join(sorted(names))}{did_you_mean(str(got), names)}")
            ok = False
            continue
        refs[key] = table.get(got)  # None when that entry itself had problems (already reported)
        ok = ok and refs[key] is not None
    per_node = rd.quantity(t, "devices_per_node", "count", path, prov)
    nics = rd.quantity(t, "nics_per_node", "count", path, prov, required=t.get("inter") is not None)
    p2p = rd.quantity(t, "p2p_channels", "count", path, prov, required="p2p_channels_per_peer" in t)
    p2p_peer = rd.quantity(t, "p2p_channels_per_peer", "count", path, prov, required="p2p_channels" in t)
    ring_ch = rd.quantity(t, "ring_channels", "count", path, prov, required=False)
    nvls_ch = rd.quantity(t, "nvls_channels", "count", path, prov, required=False)
    nvls_ch1 = rd.quantity(t, "nvls_channels_one_node", "count", path, prov, required=False)
    tree_chunk = rd.quantity(t, "nvls_tree_chunk_bytes", "B", path, prov, required=False)
    cpu = rd.choice(t, "cpu_vendor", CPU_VENDORS, path) if "cpu_vendor" in t else None
    nic_path = rd.sourced_choice(t, "gpu_nic_path", GPU_NIC_PATHS, path, prov)
    nvls_algbw, nvls_lat = _read_nvls_tuner(t, rd, path, prov)
    _check_nvls_tuner(nvls_algbw, nvls_ch, per_node, rd, path)
    if nic_path == "pxn":  # NCCL 2.17+ keeps LL128 up to PXN on compute capability 90+ only: not modelled
        rd.problems.add(f"{path}.gpu_nic_path", "a PXN path is not modelled; got 'pxn'; expected one of "
                        f"{', '.join(p for p in GPU_NIC_PATHS if p != 'pxn')} (NCCL's LL128 rule for PXN depends on "
                        "the GPU's compute capability and the NCCL version, which a node configuration does not state)")
        nic_path = None
    if nic_path is not None and t.get("inter") is None:
        rd.problems.add(f"{path}.gpu_nic_path", "a GPU-to-NIC path without an inter-node fabric; got gpu_nic_path; "
                                                "expected inter = \"<fabric>\" as well")
    if t.get("inter") is None and "nics_per_node" in t:
        rd.problems.add(f"{path}.nics_per_node", "NICs without an inter-node fabric; got nics_per_node; "
                                                 "expected inter = \"<fabric>\" as well")
    if not ok or per_node is None or (t.get("inter") is not None and nics is None):
        return None
    lib: CollectiveLibrary = refs["library"]
    for key in ("intra", "inter"):
        fab = refs[key]
        if fab is None:
            continue
        if fab.latency_class not in lib.step_latency_s:
            rd.problems.add(f"{path}.{key}", f"library {lib.name!r} has no step latency for {fab.latency_class!r} "
                                             f"fabrics; got fabric {fab.name!r}; expected a fabric of class "
                                             f"{', '.join(sorted(lib.step_latency_s))}")
            ok = False
    if refs["inter"] is not None and refs["inter"].topology != "nic":
        rd.problems.add(f"{path}.inter", f"inter-node fabric is not a NIC; got {refs['inter'].name!r}; "
                                         "expected a fabric with topology = \"nic\"")
        ok = False
    if not ok:
        return None
    return CollectiveSystem(name=name, description=str(t.get("description", "")), library=lib,
                            intra=refs["intra"], inter=refs["inter"], devices_per_node=per_node,
                            nics_per_node=nics or 0, p2p_channels=p2p, p2p_channels_per_peer=p2p_peer,
                            cpu_vendor=cpu, ring_channels=ring_ch, nvls_channels=nvls_ch,
                            nvls_channels_one_node=nvls_ch1, gpu_nic_path=nic_path,
                            nvls_tuner_algbw=nvls_algbw, nvls_tuner_latency_s=nvls_lat,
                            nvls_tree_chunk_bytes=tree_chunk, provenance=MappingProxyType(prov))


def _check_version_ranges(libraries: Mapping[str, CollectiveLibrary | None], problems: _Problems) -> None:
    """A release is priced by the one entry of its family whose range holds it: two entries of one family whose
    ranges overlap are one located problem naming both."""
    ranged = sorted((lib.family_name, lib.versions, n) for n, lib in libraries.items() if lib and lib.versions)
    for (fam_a, (lo_a, hi_a), a), (fam_b, (lo_b, hi_b), b) in zip(ranged, ranged[1:], strict=False):
        if fam_a == fam_b and lo_b <= hi_a:
            problems.add(f"libraries.{b}.versions", f"overlaps another entry of family {fam_a!r}; got "
                                                    f"{'.'.join(map(str, lo_b))}..{'.'.join(map(str, hi_b))} against "
                                                    f"libraries.{a} ({'.'.join(map(str, lo_a))}.."
                                                    f"{'.'.join(map(str, hi_a))}); expected disjoint release ranges")


def _lower_keys(table: Any) -> dict[str, Any]:
    return {str(k).lower(): v for k, v in table.items()} if isinstance(table, Mapping) else {}


def _parse_catalog(data: Mapping[str, Any], where: str) -> FabricCatalog:
    problems = _Problems(where)
    refs = data.get("refs", {})
    if not isinstance(refs, Mapping) or any(not isinstance(v, str) for v in refs.values()):
        problems.add("refs", f"not a table of strings; got {refs!r}; expected key = \"citation\"")
        refs = {}
    rd = _Reader(problems, refs)
    rd.unknown_keys(data, ("schema", "refs", "fabrics", "libraries", "systems"), "<top>")
    if data.get("schema") != 1:
        problems.add("schema", f"unsupported schema; got {data.get('schema')!r}; expected 1")
    raw_f, raw_l, raw_s = (_lower_keys(data.get(k, {})) for k in ("fabrics", "libraries", "systems"))
    fabrics = {n: _read_fabric(n, t, rd) for n, t in sorted(raw_f.items())}
    libraries = {n: _read_library(n, t, rd, tuple(raw_f)) for n, t in sorted(raw_l.items())}
    _check_version_ranges(libraries, problems)
    systems = {n: _read_system(n, t, rd, fabrics, libraries, (set(raw_f), set(raw_l)))
               for n, t in sorted(raw_s.items())}
    problems.raise_if_any()
    return FabricCatalog(path=where, fabrics=MappingProxyType(fabrics), libraries=MappingProxyType(libraries),
                         systems=MappingProxyType(systems))


def load_fabric_catalog(path: str | Path = DEFAULT_FABRICS_FILE) -> FabricCatalog:
    """Read a fabrics TOML file into frozen specs (SI units; provenance per dotted path).

    Raises
    ------
    SpecError
        Every problem of the file, one located line each
        (``<file>:<path>: <problem>; got <value>; expected <form>``).
    """
    p = Path(path)
    try:
        mtime = p.stat().st_mtime_ns
    except FileNotFoundError as e:
        raise SpecError(f"{p}: file not found; got {str(p)!r}; expected an existing TOML file") from e
    return _load_cached(str(p), mtime)


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, mtime_ns: int) -> FabricCatalog:
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as e:
        raise SpecError(f"{path}: invalid TOML; got {e}; expected valid TOML syntax") from e
    return _parse_catalog(data, path)


def fabric_catalog() -> FabricCatalog:
    """The shipped catalog (``hwmodels/catalog/fabrics.toml``), cached."""
    return load_fabric_catalog(DEFAULT_FABRICS_FILE)


def load_collective_system(system: str | CollectiveSystem, catalog: FabricCatalog | None = None) -> CollectiveSystem:
    """A :class:`CollectiveSystem` by catalog name (``"dgx-h100"``), or the one given."""
    if isinstance(system, CollectiveSystem):
        return system
    return (catalog or fabric_catalog()).system(system)


# ----------------------------------------------------------------------------------------------
# Model
# ----------------------------------------------------------------------------------------------

def bus_bandwidth_factor(collective: str, n_devices: int) -> float:
    """nccl-tests' busbw / algbw factor (doc/PERFORMANCE.md) for ``collective`` on ``n_devices``."""
    _check_collective(collective)
    n = int(n_devices)
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


def _check_collective(collective: str) -> None:
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective; got {collective!r}; expected one of {', '.join(COLLECTIVES)}"
                         f"{did_you_mean(str(collective), COLLECTIVES)}")


def _layout(system: CollectiveSystem, n_devices: int, n_nodes: int | None) -> tuple[int, int, int]:
    n = int(n_devices)
    if n != n_devices or n < 2:
        raise ValueError(f"n_devices must be a whole number >= 2; got {n_devices!r}; expected e.g. 8")
    nodes = math.ceil(n / system.devices_per_node) if n_nodes is None else int(n_nodes)
    if nodes < 1 or n % nodes:
        raise ValueError(f"{system.name}: {n} devices do not split evenly over n_nodes; got n_nodes={n_nodes!r}; "
                         f"expected a divisor of {n}")
    g = n // nodes
    if g > system.devices_per_node:
        raise ValueError(f"{system.name}: {g} devices per node; got n_devices={n}, n_nodes={nodes}; expected at most "
                         f"{system.devices_per_node} per node (pass n_nodes)")
    if nodes > 1 and system.inter is None:
        raise ValueError(f"{system.name}: no inter-node fabric; got {nodes} nodes; expected a system with "
                         "'inter' and 'nics_per_node' for multi-node collectives")
    return n, nodes, g


def _links(fabric: Fabric, pattern: str, n_local: int) -> Any:
    """Links a device drives at once for a traffic ``pattern`` among ``n_local`` devices."""
    total = fabric.links_per_device
    peer = fabric.links_per_peer or total
    topo = fabric.topology
    if pattern == "pair":
        return total if topo in ("switch", "nic") else peer
    if topo in ("switch", "nic"):
        return total
    if topo == "fully_connected":
        return min(total, (n_local - 1) * peer)
    if topo == "mesh":
        return total if pattern == "ring" else min(total, (n_local - 1) * peer)
    # torus: rings run both directions of every dimension; an all-to-all message crosses on
    # average dims * k / 4 hops of a k-ary torus, each hop taking a link's share.
    if pattern == "ring":
        return total
    dims = fabric.torus_dims or 1
    k = max(n_local ** (1.0 / dims), 2.0)
    return total / max(1.0, dims * k / 4.0)


def _ring_steps(fabric: Fabric, n_local: int) -> int:
    """Sequential steps of one reduce-scatter (or all-gather) pass over ``n_local`` devices.

    A flat ring takes ``n - 1``; on a torus the pass runs dimension by dimension
    (``dims * (k - 1)`` for a ``k``-ary torus, ``k = ceil(n ** (1 / dims))``).
    """
    if fabric.topology != "torus" or n_local <= 1:
        return n_local - 1
    dims = fabric.torus_dims or 1
    k = math.ceil(round(n_local ** (1.0 / dims), 9))
    return min(n_local - 1, dims * (k - 1))


def _torus_max_hops(fabric: Fabric, n_local: int) -> int:
    """Hops of the farthest peer on a ``k``-ary torus (``dims * floor(k / 2)``); 1 elsewhere."""
    if fabric.topology != "torus":
        return 1
    dims = fabric.torus_dims or 1
    k = math.ceil(round(n_local ** (1.0 / dims), 9))
    return max(1, dims * (k // 2))


def _bw(fabric: Fabric, library: CollectiveLibrary, protocol: str, pattern: str, n_local: int,
        one_node: bool = False) -> Any:
    """A device's achievable bandwidth on ``fabric`` for ``pattern`` and ``protocol``, B/s.

    On one node LL is further capped by the fabric's ``ll.max_bandwidth_bytes_per_s`` (NCCL's
    ``llMaxBw``, looked up by GPU generation for single-node communicators; across nodes NCCL
    indexes it by CPU vendor and node count: :func:`_ll_cap_multi_node`).
    """
    bw = (_links(fabric, pattern, n_local) * fabric.link_bandwidth_bytes_per_s * fabric.bandwidth_fraction
          * library.protocol_bandwidth_fraction[protocol])
    if one_node and protocol == "ll" and fabric.ll_max_bandwidth_bytes_per_s is not None:
        bw = np.minimum(bw, fabric.ll_max_bandwidth_bytes_per_s)
    return bw


#: CPU vendors NCCL's multi-node LL cap distinguishes (src/graph/tuning.cc: AMD or mixed vs the rest).
CPU_VENDORS: tuple[str, ...] = ("intel", "amd")


def _ll_cap_multi_node(system: CollectiveSystem, nodes: int) -> Any:
    """NCCL's LL bus-bandwidth cap across nodes (``llMaxBws[cpu][2 nodes | more]``), B/s (None: not described)."""
    table = system.library.ll_max_bandwidth_multi_node
    if nodes <= 1 or table is None or system.cpu_vendor is None:
        return None
    return table[f"{system.cpu_vendor}_{'two_nodes' if nodes == 2 else 'more_nodes'}"]


#: NCCL's point-to-point split on one node (src/enqueue.cc addP2pToPlan): a part is at least
#: ``stepSize / 8`` and at most ``stepSize * 32`` bytes, ``stepSize`` being the P2P chunk size.
_P2P_MIN_PART_DIVISOR = 8
_P2P_MAX_PART_STEPS = 32


def _p2p_channels(system: CollectiveSystem, size: np.ndarray, n: int, protocol: str = "simple") -> Any:
    """Channels NCCL stripes one single-node send over, per message size (None: no ramp known).

    NCCL (src/enqueue.cc scheduleP2pTasksToPlan / addP2pToPlan, v2.28-2.29): start from
    ``p2pnChannelsPerPeer`` halved until ``nChannelsMin * nRanks <= p2pnChannels``, use
    ``min(nChannelsMin, ceil(S / minPart))`` channels, and double them while a part exceeds
    ``maxPart`` and the count stays within ``p2pnChannelsPerPeer``. The parts are counted in the
    protocol's step: the p2p chunk for Simple, ``p2p.ll_step_bytes`` for LL (v2.28.7-2.28.9; where the
    library does not state it, the Simple chunk).
    """
    lib = system.library
    if system.p2p_channels is None or lib.p2p_chunk_bytes is None or system.intra.channel_bandwidth_bytes_per_s is None:
        return None
    n_max = int(system.p2p_channels_per_peer)
    n_min = n_max
    while n_min * n > system.p2p_channels and n_min > 1:
        n_min //= 2
    step = lib.p2p_ll_step_bytes if protocol == "ll" and lib.p2p_ll_step_bytes is not None else lib.p2p_chunk_bytes
    min_part = step / _P2P_MIN_PART_DIVISOR
    max_part = step * _P2P_MAX_PART_STEPS
    nch = np.minimum(n_min, np.ceil(size / min_part))
    part = np.maximum(min_part, np.ceil(size / nch))
    while True:
        grow = (part > max_part) & (nch <= n_max / 2)
        if not np.any(grow):
            return nch
        nch = np.where(grow, nch * 2, nch)
        part = np.where(grow, np.ceil(size / nch), part)


def _all_to_all_channels(system: CollectiveSystem, size: np.ndarray, n: int, protocol: str = "simple") -> Any:
    """Channels one rank's all-to-all sends to its ``n - 1`` peers run on, on one node (None: not described).

    nccl-tests' alltoall is ``ncclGroupStart``, a send and a receive per rank, ``ncclGroupEnd``; NCCL
    schedules the group in ``n`` p2p rounds (src/enqueue.cc scheduleP2pTasksToPlan, v2.28.7-2.29.2), round
    ``r`` pairing the send to one peer with the receive from another, round 0 the copy to self. Every round
    gets the channels of a send of ``S / n`` bytes (:func:`_p2p_channels`: ``p2pnChannelsPerPeer`` halved
    until ``n`` rounds fit in ``p2pnChannels``, doubled while a part exceeds ``32 x`` the p2p chunk), starting
    at the channel ``reverseBits(r)`` (src/include/channel.h ``ncclP2pChannelBaseForRound``), so the rounds
    take disjoint channels until the doubling makes them share: ``min(p2pnChannels, (n - 1) x channels)``.
    """
    nch = _p2p_channels(system, size / n, n, protocol)
    return None if nch is None else np.minimum(system.p2p_channels, (n - 1) * nch)


def _p2p_drain_s(system: CollectiveSystem, per_peer: np.ndarray, n: int, protocol: str) -> Any:
    """The last chunk of a one-node Simple send, copied out after it has arrived, s (0 where not described).

    A Simple send moves whole chunks: ``ProtoSimple<1,1>`` (src/device/sendrecv.h, v2.28.9), one slice of
    ``p2p.chunk_bytes`` a step, the receiver waiting for the whole step before it copies it from its FIFO into
    the user buffer (src/device/prims_simple.h ``waitPeer``; without registered buffers the receive is not
    direct, v2.28.9 ``loadRecvConn`` sets DirectWrite / DirectRead only with ``ipcRegFlag``). Send and copy
    are two pipeline stages, so the copy of the last chunk, ``min(part, chunk)`` bytes of each channel's part,
    follows the last send. Priced at the fabric's ``channel.bandwidth_bytes_per_s`` (assumed: no figure for
    one CTA's local copy rate was found). LL moves 8-byte lines with their flags and has no such step.
    """
    nch = _p2p_channels(system, per_peer, n, protocol)
    if nch is None or protocol != "simple":
        return 0.0
    part = per_peer / nch
    return np.minimum(part, system.library.p2p_chunk_bytes) / system.intra.channel_bandwidth_bytes_per_s


def _p2p_runs_ll(system: CollectiveSystem, collective: str, size: np.ndarray, n: int) -> Any:
    """Whether NCCL runs a one-node send (send_recv) or each of an all-to-all's sends as LL (None: not described).

    src/enqueue.cc addP2pToPlan: a send is LL when its bytes are at most ``NCCL_P2P_LL_THRESHOLD`` times
    ``p2pnChannelsPerPeer`` (v2.28.7, v2.28.9: ``channels_per_peer``) or times the send's own channel count,
    counted in the Simple chunk (v2.29.2-2.29.7: ``send_channels``), else Simple; p2p never runs LL128. The
    copy to self is always Simple.
    """
    lib = system.library
    thr = lib.p2p_ll_threshold_bytes
    if thr is None or system.p2p_channels_per_peer is None:
        return None
    per_peer = size / n if collective == "all_to_all" else size
    if lib.p2p_ll_threshold_of == "send_channels":
        nch = _p2p_channels(system, per_peer, n, "simple")
        if nch is None:
            return None
        return per_peer <= nch * thr
    return per_peer <= system.p2p_channels_per_peer * thr


def _bytes_per_channel(system: CollectiveSystem, algorithm: str, protocol: str, n: int) -> Any:
    """``nt * threadThreshold``: the bytes below which NCCL drops a channel (None: not described)."""
    lib = system.library
    if system.ring_channels is None or lib.max_threads is None or protocol not in lib.max_threads:
        return None
    per_channel = lib.max_threads[protocol] * lib.thread_threshold_bytes[protocol]
    return per_channel * int(n) if algorithm == "ring" and protocol == "ll" else per_channel


def ring_channels_used(system: str | CollectiveSystem, algorithm: str, protocol: str, size_bytes: Any,
                       n_devices: int) -> Any:
    """Channels NCCL runs a ring or tree collective of ``size_bytes`` on (None: not described).

    NCCL (src/enqueue.cc topoGetAlgoInfo, v2.28.7) starts from the communicator's channel count
    and drops one channel while ``nBytes < nc * nt * threadThreshold`` (and ``nc >= 2``), ``nt``
    being the protocol's threads per channel and ``threadThreshold`` its bytes per thread (ring
    LL: times the rank count; src/graph/tuning.cc). ``nBytes`` is nccl-tests' size. The result
    is ``floor(size / (nt * threadThreshold))`` clipped to ``[1, ring_channels]``.
    """
    sysm = load_collective_system(system)
    per_channel = _bytes_per_channel(sysm, algorithm, protocol, n_devices)
    if per_channel is None:
        return None
    return np.clip(np.floor(np.asarray(size_bytes, dtype=float) / per_channel), 1, sysm.ring_channels)


def _channel_capped_bw(system: CollectiveSystem, algorithm: str, protocol: str, size: np.ndarray, n: int,
                       bw: Any) -> Any:
    """``bw`` capped at the channels NCCL uses for this size times one channel's bandwidth.

    The channel count is taken continuous, ``clip(size / (nt * threadThreshold), 1, channels)``:
    NCCL's integer count (:func:`ring_channels_used`) makes each channel carry between one and two
    thresholds of bytes, a saw-tooth of at most one threshold's transfer time that would make the
    predicted time fall as the size grows.
    """
    ch_bw = system.intra.channel_bandwidth_bytes_per_s
    per_channel = _bytes_per_channel(system, algorithm, protocol, n)
    if per_channel is None or ch_bw is None:
        return bw
    nc = np.clip(size / per_channel, 1, system.ring_channels)
    return np.minimum(bw, nc * ch_bw * system.library.protocol_bandwidth_fraction[protocol])


def ring_cta_traffic_ratio(collective: str, n_devices: int) -> float | None:
    """Bytes a channel's CTA loads plus stores per byte it sends to the next rank in NCCL's Simple ring on one node
    (None: not described for this collective).

    Read from the ring kernels of NVIDIA/nccl @ v2.28.9-1 for out-of-place calls on unregistered buffers, as
    nccl-tests runs them by default (its ``-R`` is 0, src/common.cu line 123): without registration no operation is
    direct (src/device/prims_simple.h ``loadRecvConn`` / ``loadSendConn``, lines 512-527 and 557-572, set DirectRead
    / DirectWrite only under ``ipcRegFlag`` = the work's ``regUsed``, line 641), so each receive loads the chunk from
    the connection's FIFO and each send stores it into the next rank's FIFO. Per chunk and channel:

    * all_gather (src/device/all_gather.h ``runRing``, lines 46-70): ``directCopySend`` (load the input, store the
      output and the peer: 3), ``n - 2`` x ``directRecvCopyDirectSend`` (load the FIFO, store the output and the
      peer: 3), ``directRecv`` (load the FIFO, store the output: 2): ``3n - 1`` for ``n - 1`` chunks sent;
    * reduce_scatter (src/device/reduce_scatter.h lines 41-53): ``send`` (2), ``n - 2`` x ``recvReduceSend`` (load
      the FIFO and the input, store the peer: 3), ``recvReduceCopy`` (3): ``3n - 1`` for ``n - 1``;
    * all_reduce (src/device/all_reduce.h lines 47-81): ``directSend`` (2), ``n - 2`` x
      ``directRecvReduceDirectSend`` (3), ``directRecvReduceCopyDirectSend`` (4), ``n - 2`` x
      ``directRecvCopyDirectSend`` (3), ``directRecv`` (2): ``6n - 4`` for ``2(n - 1)``.

    One CTA runs these operations one after another (prims_simple.h ``genericOp``: wait, copy, post per slice), so
    the last operation, which sends nothing, is a share of its time that shrinks as ``n`` grows: 5 / 1 on 2 ranks,
    11 / 3 on 4, 23 / 7 on 8 for all_gather.
    """
    n = int(n_devices)
    if n < 2:
        return None
    if collective in ("all_gather", "reduce_scatter"):
        return (3 * n - 1) / (n - 1)
    if collective == "all_reduce":
        return (6 * n - 4) / (2 * (n - 1))
    return None


def _cta_capped_bw(system: CollectiveSystem, collective: str, protocol: str, size: np.ndarray, n: int,
                   bw: Any) -> Any:
    """``bw`` capped at what the ring's CTAs can send when each moves ``channel.cta_bytes_per_s`` of loads and
    stores (:func:`ring_cta_traffic_ratio`) at the protocol's bandwidth fraction, on the channels NCCL uses for the
    size; unchanged where not described. Every protocol's ring runs the same operations (``runRing`` is one
    template over the protocol), so the cap applies to each, and it alone does not change which one is fastest."""
    rate = system.intra.cta_bytes_per_s
    ratio = ring_cta_traffic_ratio(collective, n)
    per_channel = _bytes_per_channel(system, "ring", protocol, n)
    if rate is None or ratio is None or per_channel is None:
        return bw
    nc = np.clip(size / per_channel, 1, system.ring_channels)
    return np.minimum(bw, nc * rate * system.library.protocol_bandwidth_fraction[protocol] / ratio)


def _busbw_cap(system: CollectiveSystem) -> Any:
    """The library's cap on a one-node ring or tree bus bandwidth on this system's fabric (None: none)."""
    caps = system.library.ring_busbw_cap
    return None if caps is None else caps.get(system.intra.name)


def _ring_graph_busbw(system: CollectiveSystem) -> Any:
    """NCCL's ring bus bandwidth on one node, ``ring_channels x channel bandwidth`` under the library's cap."""
    graph = system.ring_channels * system.intra.channel_bandwidth_bytes_per_s
    cap = _busbw_cap(system)
    return graph if cap is None else np.minimum(graph, cap)


def _ring_ll_capped_bw(system: CollectiveSystem, collective: str, protocol: str, bw: Any) -> Any:
    """``bw`` capped at the library's one-node ring LL bus bandwidth, ``fraction x ring_channels x channel
    bandwidth`` (NCCL 2.8-2.20 src/graph/tuning.cc: ``busBw * 1.0/4.0`` for all_reduce, ``1.0/3.0`` for the
    other collectives); unchanged where the library or the fabric does not describe it."""
    table = system.library.ring_ll_busbw_fraction
    ch_bw = system.intra.channel_bandwidth_bytes_per_s
    if protocol != "ll" or table is None or collective not in table or ch_bw is None or system.ring_channels is None:
        return bw
    return np.minimum(bw, table[collective] * _ring_graph_busbw(system))


#: NCCL lays its ring graph's channels out twice over the communicator's channels (src/graph/connect.cc
#: ncclTopoPostset, v2.8.3-1 to v2.17.1-1, line 267 at v2.8.3-1 and 293 at v2.9.9-1: 'nChannels = comm->nChannels =
#: std::min(MAXCHANNELS,nChannels*2)'),
#: so the tuner's ``graphs[RING]->nChannels`` is the printed channel count (``ring_channels``) over this. Used only
#: with ``tuner.ring_ll128_max_channel_bandwidth``, which only the NCCL 2.8.3-2.9.9 entry states (a constant of
#: those releases).
_RING_CHANNEL_COPIES = 2


def _ring_ll128_capped_bw(system: CollectiveSystem, collective: str, protocol: str, bw: Any) -> Any:
    """``bw`` capped at the library's one-node ring LL128 bus bandwidth, ``ll128MaxBwPerCh[collective] x the
    ring graph's channels`` (NCCL 2.8.3-2.9.9 src/graph/tuning.cc: ``busBw = std::min(busBw * 0.92,
    ll128MaxBwPerCh[coll]*graphs[a]->nChannels)``), the graph's channels being ``ring_channels /
    _RING_CHANNEL_COPIES``; unchanged where the library does not describe it."""
    table = system.library.ring_ll128_channel_cap
    if protocol != "ll128" or table is None or collective not in table or system.ring_channels is None:
        return bw
    return np.minimum(bw, table[collective] * (system.ring_channels / _RING_CHANNEL_COPIES))


def _ring_protocol_capped_bw(system: CollectiveSystem, collective: str, protocol: str, bw: Any) -> Any:
    """``bw`` under the library's one-node ring LL and LL128 caps (:func:`_ring_ll_capped_bw`,
    :func:`_ring_ll128_capped_bw`), in the time and in NCCL's own estimate alike."""
    return _ring_ll128_capped_bw(system, collective, protocol, _ring_ll_capped_bw(system, collective, protocol, bw))


def chunk_granule_ratio(system: str | CollectiveSystem, protocol: str, size_bytes: Any, n_devices: int) -> Any:
    """How much longer a one-node ring's transfer takes because each step's chunk is rounded up (1: no rounding).

    NCCL 2.8-2.19 (src/collectives/device/all_reduce.h, all_gather.h) gives every ring step a chunk of
    ``ceil(S / (nChannels x nranks x minChunk)) x minChunk`` bytes, ``minChunk`` being threads per channel x
    the library's ``ring.chunk_granule_bytes_per_thread``; the busiest channel moves whole chunks at every
    step, so the bandwidth term grows by that chunk over the even share ``S / (nChannels x nranks)``.
    Applied once the message runs on all ring channels (below, NCCL's channel tuning keeps a channel's share
    near one granule); 1 where the library or system does not describe it.
    """
    sysm = load_collective_system(system)
    lib, size = sysm.library, np.asarray(size_bytes, dtype=float)
    granule = lib.ring_chunk_granule_per_thread
    per_channel = _bytes_per_channel(sysm, "ring", protocol, n_devices)
    if granule is None or protocol not in granule or per_channel is None:
        return np.ones_like(size)
    unit = sysm.ring_channels * int(n_devices) * lib.max_threads[protocol] * granule[protocol]
    ratio = np.ceil(size / unit) * unit / np.maximum(size, 1.0)
    return np.where(size >= sysm.ring_channels * per_channel, ratio, 1.0)


#: NCCL's NVLS chunk shrinking for small messages (src/enqueue.cc calcCollChunking, v2.28.7):
#: (size multiple of nChannels * nHeads * chunk below which the chunk shrinks, the chunk it shrinks to).
_NVLS_CHUNK_STEPS: tuple[tuple[int, int], ...] = ((64, 65536), (8, 32768), (2, 16384))


def nvls_loop_bytes(system: str | CollectiveSystem, size_bytes: Any, n_devices: int, *, n_nodes: int = 1) -> Any:
    """Bytes one NVLS loop covers (``nvls_channels * n * chunk``), NCCL's chunk rule per size (None: not described).

    The chunk starts at the library's ``tuner.nvls_chunk_bytes`` (NCCL_NVLS_CHUNKSIZE, 128 KiB)
    and shrinks to 64, 32 and 16 KiB while the message is under 64, 8 and 2 times
    ``nvls_channels * n * chunk`` (src/enqueue.cc calcCollChunking, v2.28.7). ``n_devices`` are the
    devices of one node; a communicator of one node (``n_nodes`` 1) runs the node's one-node channel count
    (``nvls_channels_one_node``) where the catalog gives one.
    """
    sysm = load_collective_system(system)
    chunk0 = sysm.library.nvls_chunk_bytes
    one_node = n_nodes == 1 and sysm.nvls_channels_one_node is not None
    channels = sysm.nvls_channels_one_node if one_node else sysm.nvls_channels
    if chunk0 is None or channels is None:
        return None
    size = np.asarray(size_bytes, dtype=float)
    ops = float(channels * int(n_devices))
    chunk = np.full(size.shape, float(chunk0))
    for mult, floor in _NVLS_CHUNK_STEPS:
        chunk = np.where((size < mult * ops * chunk) & (chunk > floor), float(floor), chunk)
    return ops * chunk


#: NCCL's NVLS-tree chunk shrinking (src/enqueue.cc calcCollChunking, NVLS_TREE branch, v2.22.3 and v2.28.7): (size
#: multiple of nChannels * nHeads * chunk below which the chunk shrinks, the chunk it shrinks to).
_NVLS_TREE_CHUNK_STEPS: tuple[tuple[int, int], ...] = ((32, 262144), (16, 131072), (4, 65536), (1, 32768))


def nvls_tree_wave_bytes(system: str | CollectiveSystem, size_bytes: Any, n_nodes: int, heads: int) -> Any:
    """Bytes one NVLS-tree wave puts through each head GPU (``nvls_channels`` chunks), per size (None: not described).

    NCCL (src/enqueue.cc calcCollChunking, NVLS_TREE branch; v2.22.3 and v2.28.7) starts from the NVLS chunk
    (``nvls_tree_chunk_bytes`` where the node's setup sets it, else the library's NCCL_NVLS_CHUNKSIZE capped at
    its ``tuner.nvls_tree_many_nodes_chunk_bytes``, 64 KiB, from four nodes) and shrinks it to 256, 128, 64 and
    32 KiB while the message is under 32, 16, 4 and 1 times ``nvls_channels * heads * chunk``. Each channel moves one chunk per head at a time.
    """
    sysm = load_collective_system(system)
    if sysm.nvls_channels is None:
        return None
    chunk0 = sysm.nvls_tree_chunk_bytes
    if chunk0 is None:
        if sysm.library.nvls_chunk_bytes is None:
            return None
        chunk0 = sysm.library.nvls_chunk_bytes
        cap = sysm.library.nvls_tree_many_nodes_chunk_bytes
        if n_nodes >= 4 and cap is not None:
            chunk0 = min(chunk0, cap)
    size = np.asarray(size_bytes, dtype=float)
    ops = float(sysm.nvls_channels * int(heads))
    chunk = np.full(size.shape, float(chunk0))
    for mult, floor in _NVLS_TREE_CHUNK_STEPS:
        chunk = np.where((size < mult * ops * chunk) & (chunk > floor), float(floor), chunk)
    return sysm.nvls_channels * chunk


def _nvls_tree_fill(system: CollectiveSystem, size: np.ndarray, nodes: int, g: int, protocol: str) -> Any:
    """Time the NVLS tree's first wave adds crossing the network: a chunk goes up the tree of nodes and its
    result comes back down, ``2 ceil(log2 N)`` network stages in series (src/device/all_reduce.h, NVLS_TREE:
    the reduce warps send up, the broadcast warps receive from above, each chunk in turn), so the pipeline
    fills with ``2 ceil(log2 N) - 1`` waves beyond the steady state, each a head's wave over its NIC share."""
    wave = nvls_tree_wave_bytes(system, size, nodes, g)
    if wave is None or nodes <= 1:
        return 0.0
    stages = 2 * math.ceil(math.log2(nodes))
    per_gpu = _nic_bw(system, protocol, g) / g
    return (stages - 1) * np.minimum(wave, size / g) / per_gpu


def _nic_bw(system: CollectiveSystem, protocol: str, g: int | None = None) -> Any:
    """The NICs ``g`` group members of one node drive, per direction, achievable, B/s.

    Each GPU sends through its own share of the node's NICs (``nics_per_node / devices_per_node``
    of them: one 400 Gb/s port per GPU on a DGX H100), so a group with fewer members per node than
    the node has GPUs reaches only their share (``g`` None: the whole node).
    """
    inter = system.inter
    share = 1.0 if g is None else min(1.0, g / system.devices_per_node)
    return (system.nics_per_node * share * inter.link_bandwidth_bytes_per_s * inter.bandwidth_fraction
            * system.library.protocol_bandwidth_fraction[protocol])


def _alpha(system: CollectiveSystem, fabric: Fabric, protocol: str, tuner: bool = False) -> Any:
    """One step's latency on ``fabric``; ``tuner``: as NCCL's tuner estimates it, with the latency the
    network plugin reports added once (twice for Simple: 'flush extra latency', src/graph/tuning.cc)."""
    alpha = system.library.step_latency_s[fabric.latency_class][protocol] + fabric.extra_step_latency_s
    if tuner:
        alpha = alpha + (2 if protocol == "simple" else 1) * fabric.tuner_extra_step_latency_s
    return alpha


#: Bytes a protocol puts on the wire per data byte (LL: a 4-byte flag beside every 4 data bytes; LL128: 8 flag
#: bytes in every 128-byte line; src/include/device.h), for the size of one network message.
_WIRE_BYTES_PER_DATA_BYTE: Mapping[str, float] = MappingProxyType({"ll": 2.0, "ll128": 128.0 / 120.0, "simple": 1.0})


def _rendezvous_s(system: CollectiveSystem, collective: str, algorithm: str, protocol: str, size: np.ndarray,
                  n: int, g: int) -> Any:
    """Latency a collective's first inter-node step adds when its message is too large for the network plugin to
    send at once (the pipeline fill; 0 where the messages go eagerly).

    aws-ofi-nccl's RDMA protocol (``send`` in src/nccl_ofi_rdma.c, v1.9.2-aws) writes a message into the
    receiver's buffer only once the receiver's control message (buffer address and keys) has arrived; a
    message of at most ``eager_max_bytes`` (OFI_NCCL_EAGER_MAX_SIZE) without one is sent at once. A step's
    message is one channel's share of the step, on the wire: ``S / (share x channels)`` times the protocol's
    wire bytes, ``share`` being the ranks a ring step divides the buffer into (``n``; a broadcast, a tree or a
    send: 1; the NVLS tree: the ``g`` heads of a node; an all-to-all: ``n`` peers) and the channels: NCCL's
    channel rule for a ring or a tree (:func:`ring_channels_used`), the NVLS channels for the NVLS tree, one
    for a send or an all-to-all and wherever the system does not describe its channels (the larger message).
    The receiver's plugin sends the control message when NCCL posts the receive (``recv`` in
    src/nccl_ofi_rdma.c, v1.9.2-aws: ``receive_progress(recv_data->send_ctrl_req, true)``), and NCCL's net
    proxy posts a connection's receives up to NCCL_STEPS (8) steps ahead of the last one done, from the
    collective's start, without waiting for the GPU (src/transport/net.cc recvProxyProgress, v2.22.3-1:
    ``if (sub->posted >= sub->done + maxDepth)``, ``maxDepth = std::min(NCCL_STEPS, ...)``): every later
    step's control message left at least 8 steps before it is needed, so only the first step waits, once per
    collective (all connections start together). Whether the first trip overlaps the sender's own
    preparation (kernel launch, its first chunk) is not modelled: the whole trip is added once.
    """
    inter = system.inter
    if inter is None or inter.eager_max_bytes is None:
        return 0.0
    nc = None
    if algorithm in ("ring", "tree"):
        nc = ring_channels_used(system, algorithm, protocol, size, n)
    elif algorithm == "hierarchical":
        nc = system.nvls_channels
    nc = 1.0 if nc is None else nc
    if algorithm == "hierarchical":
        share = g
    elif (algorithm == "ring" and collective != "broadcast") or collective == "all_to_all":
        share = n
    else:
        share = 1
    msg = size / (share * nc) * _WIRE_BYTES_PER_DATA_BYTE[protocol]
    return np.where(msg > inter.eager_max_bytes, inter.rendezvous_latency_s, 0.0)


def net_ll128(system: CollectiveSystem) -> bool:
    """Whether the library keeps LL128 on a communicator that spans nodes of ``system`` (by default, no
    ``NCCL_PROTO`` set): the inter-node fabric is marked ``ll128``, or each GPU reaches its NIC no farther
    than the library's ``ll128.max_gpu_nic_path`` (NCCL: ``typeInter <= PATH_PXB``, src/graph/tuning.cc).
    The NVLink side of the rule is the intra-node fabric's own ``ll128`` flag."""
    if system.inter is None:
        return False
    if system.inter.ll128:
        return True
    limit, path = system.library.ll128_max_gpu_nic_path, system.gpu_nic_path
    return limit is not None and path is not None and GPU_NIC_PATHS.index(path) <= GPU_NIC_PATHS.index(limit)


def _protocols(system: CollectiveSystem, algorithm: str, n_nodes: int) -> tuple[str, ...]:
    lib = system.library
    if algorithm in _SIMPLE_ONLY:
        return ("simple",) if "simple" in lib.protocols else ()
    ll128 = system.intra.ll128 and (n_nodes <= 1 or net_ll128(system))
    return tuple(p for p in lib.protocols if p != "ll128" or ll128)


def applicable_algorithms(collective: str, n_devices: int, system: str | CollectiveSystem,
                          n_nodes: int | None = None) -> tuple[str, ...]:
    """Algorithms that can run ``collective`` on this system and device count, in :data:`ALGORITHMS` order."""
    _check_collective(collective)
    sysm = load_collective_system(system)
    n, nodes, g = _layout(sysm, n_devices, n_nodes)
    out = []
    for a in ALGORITHMS:
        if a not in sysm.library.algorithms or collective not in _SUPPORTS[a]:
            continue
        if a == "nvls" and not (nodes == 1 and sysm.intra.has_nvls and sysm.library.nvls_latency_s is not None):
            continue
        if a == "hierarchical" and nodes == 1:
            continue
        if a == "allpairs" and not (nodes == 1 and sysm.library.allpairs is not None
                                    and sysm.intra.topology == "fully_connected"
                                    and n == int(sysm.library.allpairs["n_devices"])):
            continue
        if not _protocols(sysm, a, nodes):
            continue
        out.append(a)
    return tuple(out)


def _cost(collective: str, algorithm: str, protocol: str, size: np.ndarray, n: int, nodes: int, g: int,
          system: CollectiveSystem, tuner: bool = False) -> tuple[Any, Any]:
    """(time_s, latency_s) of one algorithm/protocol; assumes it is applicable (``tuner``: the
    inter-node steps as NCCL's tuner estimates them, :func:`_alpha`)."""
    lib = system.library
    intra = system.intra
    base = lib.base_latency_s[protocol]
    a_i = _alpha(system, intra, protocol)
    a_n = _alpha(system, system.inter, protocol, tuner) if nodes > 1 else 0.0
    if nodes > 1 and not tuner:  # the plugin's rendezvous, once per collective; the tuner does not estimate it
        base = base + _rendezvous_s(system, collective, algorithm, protocol, size, n, g)
    k = 2 if collective == "all_reduce" else 1
    zero = np.zeros_like(size)
    inside = 1.0 if nodes == 1 else (g - 1) / g  # share of a ring's edges inside a node
    ll_cap = _ll_cap_multi_node(system, nodes) if protocol == "ll" else None

    def intra_time(nbytes: Any, pattern: str) -> Any:
        if g <= 1:
            return zero
        bw = _bw(intra, lib, protocol, pattern, g, nodes == 1)
        if algorithm in ("ring", "tree"):  # few channels carry a small message (NCCL's channel tuning)
            bw = _channel_capped_bw(system, algorithm, protocol, size, n, bw)
        cap = _busbw_cap(system) if algorithm in ("ring", "tree") and nodes == 1 else None
        if cap is not None:
            bw = np.minimum(bw, cap * lib.protocol_bandwidth_fraction[protocol])
        if algorithm == "ring" and nodes == 1:
            bw = _ring_protocol_capped_bw(system, collective, protocol, bw)
            bw = _cta_capped_bw(system, collective, protocol, size, n, bw)  # the CTAs' loads and stores
        return nbytes / bw

    if algorithm == "ring" and collective != "broadcast":
        data = k * (n - 1) / n * size
        inter_steps = k * (nodes - 1)
        lat = base + k * nodes * _ring_steps(intra, g) * a_i + inter_steps * a_n
        # one edge of every ring leaves each node through a NIC; the rest stay inside
        t_bw = intra_time(inside * data, "ring")
        if nodes == 1:  # a step's chunk rounded up to the kernel's granule (NCCL <= 2.19)
            t_bw = t_bw * chunk_granule_ratio(system, protocol, size, n)
        if nodes > 1:
            t_bw = np.maximum(t_bw, data / _nic_bw(system, protocol, g))
            if ll_cap is not None:  # NCCL's LL bus-bandwidth cap across nodes
                t_bw = np.maximum(t_bw, data / ll_cap)
        return lat + t_bw, lat
    if algorithm == "ring":  # broadcast: a pipelined chain, every device forwards the whole buffer
        lat = base + nodes * _ring_steps(intra, g) * a_i + (nodes - 1) * a_n
        t_bw = intra_time(inside * size, "ring")
        if nodes > 1:
            t_bw = np.maximum(t_bw, size / _nic_bw(system, protocol, g))
        return lat + t_bw, lat
    if algorithm == "tree":  # chain in a node (reduce up + broadcast down), double binary tree across
        lat = base + 2 * ((g - 1) * a_i + math.ceil(math.log2(nodes)) * a_n)
        t_bw = intra_time(2 * size, "ring")
        if nodes > 1:
            t_bw = np.maximum(t_bw, (1 if nodes == 2 else 2) * size / _nic_bw(system, protocol, g))
            if ll_cap is not None:  # tree algbw is half its busbw in NCCL's model (tuning.cc ratio .5)
                t_bw = np.maximum(t_bw, 2 * size / ll_cap)
        return lat + t_bw, lat
    if algorithm == "nvls":
        return _nvls(collective, size, n, system, protocol)
    if algorithm == "allpairs":
        return _allpairs(size, n, system, protocol)
    if algorithm == "hierarchical":
        return _hierarchical(collective, protocol, size, nodes, g, system, (base, a_i, a_n), intra_time)
    if collective == "send_recv":  # direct
        return _send_recv(size, n, nodes, g, system, protocol, base + (a_i if nodes == 1 else a_n))
    # all n - 1 messages leave at once; on a torus the farthest one crosses several hops
    far = (_torus_max_hops(intra, g) - 1) * (intra.hop_latency_s if intra.hop_latency_s is not None else 0.0)
    lat = base + ((a_i + far) if g > 1 else 0.0) + (a_n if nodes > 1 else 0.0)
    t_bw = intra_time((g - 1) / n * size, "direct")
    nch = _all_to_all_channels(system, size, n, protocol) if nodes == 1 else None
    if nch is not None:  # the sends run on NCCL's p2p channels, one CTA each
        t_bw = np.maximum(t_bw, (n - 1) / n * size / (nch * intra.channel_bandwidth_bytes_per_s
                                                      * lib.protocol_bandwidth_fraction[protocol]))
        t_bw = t_bw + _p2p_drain_s(system, size / n, n, protocol)
    if nodes > 1:
        t_bw = np.maximum(t_bw, (n - g) / n * size / (_nic_bw(system, protocol, g) / g))
    return lat + t_bw, lat + zero


def _hierarchical(collective: str, protocol: str, size: np.ndarray, nodes: int, g: int, system: CollectiveSystem,
                  alphas: tuple[float, Any, Any], intra_time: Any) -> tuple[Any, Any]:
    """(time_s, latency_s) of the hierarchical algorithm (:func:`_cost`): a ring inside each node (or NVLS where the
    node has it and it is faster, with the NVLS tree's network fill) beside a ring across nodes, their bandwidth
    phases overlapped. ``alphas``: the library's base latency and the intra- and inter-node step latencies;
    ``intra_time(nbytes, pattern)``: the intra-node transfer time as :func:`_cost` prices it."""
    base, a_i, a_n = alphas
    intra, lib = system.intra, system.library
    k = 2 if collective == "all_reduce" else 1
    lat_n = k * (nodes - 1) * a_n
    t_n = k * (nodes - 1) / nodes * (size / g) / (_nic_bw(system, protocol, g) / g)
    lat_i = k * _ring_steps(intra, g) * a_i
    t_i = intra_time(k * (g - 1) / g * size, "ring")
    best = base + lat_i + lat_n + np.maximum(t_i, t_n)
    lat = base + lat_i + lat_n + np.zeros_like(size)
    if g > 1 and intra.has_nvls and lib.nvls_latency_s is not None:
        t_nv, lat_nv = _nvls(collective, size, g, system, protocol, nodes)
        alt = base + lat_n + lat_nv + np.maximum(t_nv - lat_nv, t_n) + _nvls_tree_fill(system, size, nodes, g, protocol)
        lat = np.where(alt < best, base + lat_n + lat_nv, lat)
        best = np.minimum(best, alt)
    return best, lat


def _tree_correction(factors: tuple[float, ...], size: np.ndarray) -> np.ndarray:
    """NCCL's ``treeCorrectionFactor[protocol][log2(nBytes >> 6)]``; 1 beyond the table (src/graph/tuning.cc)."""
    idx = np.floor(np.log2(np.maximum(size, 64.0) / 64.0)).astype(int)
    table = np.asarray(factors, dtype=float)
    return np.where(idx < table.size, table[np.clip(idx, 0, table.size - 1)], 1.0)


def _tuner_estimate(collective: str, algorithm: str, protocol: str, size: np.ndarray, n: int, g: int,
                    system: CollectiveSystem, lat: Any) -> Any:
    """NCCL's own estimate of a one-node ring or tree all_reduce, the cost its tuner ranks by (None: not described).

    NCCL ranks every option at all of the communicator's channels (src/graph/tuning.cc
    ``ncclTopoGetAlgoTime``: ``lat + nBytes / bw``) and picks the channel count afterwards, so a ring
    is ranked at ``ring_channels x channel bandwidth``. A tree's bus bandwidth is
    ``min(ring graph x bandwidth_fraction, ring_channels x tree channel cap)``, then per protocol
    ``x protocol_fraction`` (LL also capped by the fabric's LL cap, LL128 by its tree LL128 channel
    cap), its algorithm bandwidth half of that, times ``treeCorrectionFactor`` of the size. Only
    where the library describes the tree estimate (``tuner.tree``) and the fabric its caps.
    """
    tree, intra, lib = system.library.tree_tuner, system.intra, system.library
    if (collective != "all_reduce" or algorithm not in ("ring", "tree") or tree is None or g <= 1
            or system.ring_channels is None or intra.channel_bandwidth_bytes_per_s is None
            or intra.tree_channel_bandwidth_bytes_per_s is None or intra.tree_ll128_channel_bandwidth_bytes_per_s is None):
        return None
    nc = system.ring_channels
    graph = _ring_graph_busbw(system)  # the ring graph: nChannels x bwIntra (under the library's cap)
    if algorithm == "ring":
        bw = np.minimum(_bw(intra, lib, protocol, "ring", g, True), graph * lib.protocol_bandwidth_fraction[protocol])
        bw = _ring_protocol_capped_bw(system, collective, protocol, bw)
        return lat + 2 * (n - 1) / n * size / bw
    bus = np.minimum(graph * tree["bandwidth_fraction"], nc * intra.tree_channel_bandwidth_bytes_per_s)
    bus = bus * tree["protocol_fraction"][protocol]
    if protocol == "ll" and intra.ll_max_bandwidth_bytes_per_s is not None:
        bus = np.minimum(bus, intra.ll_max_bandwidth_bytes_per_s)
    elif protocol == "ll128":
        bus = np.minimum(bus, nc * intra.tree_ll128_channel_bandwidth_bytes_per_s)
    return lat + 2 * size / (bus * _tree_correction(tree["correction"][protocol], size))


def _rccl_tuner_estimate(collective: str, algorithm: str, protocol: str, size: np.ndarray, n: int, g: int,
                         system: CollectiveSystem, lat: Any) -> Any:
    """RCCL's own estimate of a one-node ring or tree all_reduce, the cost its tuner ranks by (None: not described).

    RCCL (src/graph/tuning.cc ``ncclTopoTuneModel`` / ``ncclTopoGetAlgoTime``, branch release/rocm-rel-6.2, HIP
    build) scales the graph's bus bandwidth (``nChannels x bwIntra``: on the 8x MI300X topology models the sum
    of a GPU's links, ``totalBw``, here the fabric's ring bandwidth at Simple) by its tuning model's ``bwRatio`` per algorithm and protocol instead of NCCL's protocol factors, converts it to
    algorithm bandwidth (ring ``n / 2(n-1)``, tree ``0.5``), multiplies a tree's by ``treeCorrectionFactor`` of the
    size (``log2(nBytes >> 6)``, the last entry beyond the table; one-node rings get no correction) and ranks at
    ``lat + nBytes / bw``. A tree protocol the catalog leaves out of ``tree_ratio`` never ranks (Tree Simple on a
    single gfx94 node is skipped outright).
    """
    tune = system.intra.rccl_tuner
    if tune is None or collective != "all_reduce" or algorithm not in ("ring", "tree") or g <= 1:
        return None
    graph = _links(system.intra, "ring", g) * system.intra.achievable_link_bandwidth_bytes_per_s
    if algorithm == "ring":
        ratio = tune["ring_ratio"].get(protocol)
        return None if ratio is None else lat + size / (graph * ratio * n / (2 * (n - 1)))
    if protocol not in tune["tree_ratio"]:
        return np.full(np.shape(size), np.inf)
    table = np.asarray(tune["tree_correction"][protocol], dtype=float)
    idx = np.clip(np.floor(np.log2(np.maximum(size, 64.0) / 64.0)).astype(int), 0, table.size - 1)
    return lat + size / (graph * tune["tree_ratio"][protocol] * 0.5 * table[idx])


def _nvls_tuner_estimate(collective: str, size: np.ndarray, n: int, system: CollectiveSystem) -> Any:
    """NCCL's own estimate of a one-node NVLS all_reduce on ``n`` ranks, as its tuner prints it (None: not printed).

    NCCL ranks NVLS at ``latency + nBytes / algBw`` (src/graph/tuning.cc ``ncclTopoGetAlgoTime``), its
    algBw being ``nvlsChannels x min(bwIntra x nvlsEfficiency x (nc-1)/nc x 2, bwInter) x n / (2(n-1))``
    from the NVLS graph of that rank count; the graph's bandwidths come from NCCL's topology search,
    so the catalog carries the algBw NCCL printed per rank count (``nvls_tuner.all_reduce_algbw``).
    """
    table = system.nvls_tuner_algbw
    if collective != "all_reduce" or table is None or int(n) not in table:
        return None
    return system.nvls_tuner_latency_s + size / table[int(n)]


def _send_recv(size: np.ndarray, n: int, nodes: int, g: int, system: CollectiveSystem, protocol: str,
               lat: Any) -> tuple[Any, Any]:
    """One send to one peer: over the node's fabric (striped over NCCL's p2p channels) or a NIC share."""
    lib, intra = system.library, system.intra
    zero = np.zeros_like(size)
    if nodes > 1:
        return lat + size / (_nic_bw(system, protocol, g) / g), lat + zero
    bw = _bw(intra, lib, protocol, "pair", n, True)
    nch = _p2p_channels(system, size, n, protocol)
    if nch is not None:  # a message is striped over few channels until it is large
        bw = np.minimum(bw, nch * intra.channel_bandwidth_bytes_per_s * lib.protocol_bandwidth_fraction[protocol])
        return lat + size / bw + _p2p_drain_s(system, size, n, protocol), lat + zero
    return lat + size / bw, lat + zero


def _allpairs_valid(size: np.ndarray, system: CollectiveSystem, protocol: str) -> np.ndarray:
    """Sizes the all-pairs schedule of ``protocol`` takes: a multiple of its granule, at most its maximum,
    LL below ``ll_max_bytes`` and Simple from there (the MSCCL algorithm files' minBytes / maxBytes)."""
    ap = system.library.allpairs
    ok = (size <= ap["max_bytes"]) & (np.mod(size, ap["granule_bytes"]) == 0)
    return ok & (size < ap["ll_max_bytes"] if protocol == "ll" else size >= ap["ll_max_bytes"])


def _allpairs(size: np.ndarray, n: int, system: CollectiveSystem, protocol: str) -> tuple[Any, Any]:
    """RCCL's MSCCL all-pairs all-reduce on a fully connected node: every device sends each peer its
    shard directly (a reduce-scatter in one step), then every reduced shard goes to every peer (an
    all-gather in one step): two steps instead of a ring's ``2 (n - 1)``, the ring's bytes over all
    peer links at once. Infinite outside the sizes its schedule takes (:func:`_allpairs_valid`)."""
    lib, intra = system.library, system.intra
    lat = lib.base_latency_s[protocol] + 2 * _alpha(system, intra, protocol) + np.zeros_like(size)
    t = lat + 2 * (n - 1) / n * size / _bw(intra, lib, protocol, "direct", n, True)
    valid = _allpairs_valid(size, system, protocol)
    return np.where(valid, t, np.inf), np.where(valid, lat, np.inf)


def _nvls(collective: str, size: np.ndarray, n: int, system: CollectiveSystem, protocol: str,
          nodes: int = 1) -> tuple[Any, Any]:
    """In-switch reduction on ``n`` devices of one node (NVLink SHARP).

    all_reduce: each device's whole buffer is read once by the switch (multimem load-reduce of its
    shard) and each reduced shard is written once and multicast, so every device moves
    ``S (n+1)/n`` bytes per direction. reduce_scatter sends ``S`` (the switch reads it all),
    all_gather receives ``S`` (every shard is multicast to every device).
    """
    intra = system.intra
    bw = (intra.links_per_device * intra.link_bandwidth_bytes_per_s * intra.nvls_bandwidth_fraction
          * system.library.protocol_bandwidth_fraction[protocol])
    factor = (n + 1) / n if collective == "all_reduce" else 1.0
    lat = system.library.nvls_latency_s + np.zeros_like(size)
    loop = nvls_loop_bytes(system, size, n, n_nodes=nodes)
    # a loop's chunks are reduced in the switch before they are multicast: the first reduce and the
    # last multicast do not overlap another loop, one loop's traffic more than the steady state
    fill = 0.0 if loop is None else np.minimum(loop, size)
    return lat + (size + fill) * factor / bw, lat


def _sizes(size_bytes: Any) -> np.ndarray:
    size = np.asarray(size_bytes, dtype=float)
    if not np.all(np.isfinite(size)) or np.any(size <= 0):
        raise ValueError(f"size_bytes must be positive and finite; got {size_bytes!r}; expected e.g. 1 << 20")
    return size


def _result(collective: str, n: int, nodes: int, size: np.ndarray, time: Any, lat: Any, algo: Any,
            proto: Any, selection: Any = None) -> CollectiveResult:
    time = np.broadcast_to(np.asarray(time, dtype=float), np.broadcast(size, time).shape)
    if selection is not None:
        selection = np.broadcast_to(np.asarray(selection, dtype=float), time.shape)
        selection = float(selection) if time.ndim == 0 else selection.copy()
    size_b = np.broadcast_to(size, time.shape)
    algbw = size_b / time
    busbw = algbw * bus_bandwidth_factor(collective, n)
    lat = np.broadcast_to(np.asarray(lat, dtype=float), time.shape)
    algo = np.broadcast_to(np.asarray(algo, dtype=object), time.shape)
    proto = np.broadcast_to(np.asarray(proto, dtype=object), time.shape)
    if time.ndim == 0:
        return CollectiveResult(collective, n, nodes, float(size_b), float(time), float(lat), str(algo[()]),
                                str(proto[()]), float(algbw), float(busbw), selection)
    return CollectiveResult(collective, n, nodes, size_b.copy(), time.copy(), lat.copy(), algo.copy(),
                            proto.copy(), algbw, busbw, selection)


def launch_skew_s(system: str | CollectiveSystem, gpus_per_thread: int = 1) -> Any:
    """Time one thread driving ``gpus_per_thread`` devices adds to each collective, s.

    NCCL launches a collective's kernels from ``ncclGroupEnd``, one device after another, on the
    calling thread; the collective cannot finish before its last device's kernel has started,
    ``(gpus_per_thread - 1) x launch.per_device_s`` after the first. With one rank per process
    (the default, ``gpus_per_thread = 1``) there is no skew; with one thread driving four GPUs
    (``all_reduce_perf -g 4``) it adds to every size (it dominates small messages). 0.0 when the
    library does not describe its launch cost.
    """
    sysm = load_collective_system(system)
    gpt = _gpus_per_thread(gpus_per_thread)
    per = sysm.library.launch_per_device_s
    return 0.0 if per is None or gpt <= 1 else (gpt - 1) * per


def _allpairs_allowed(system: CollectiveSystem, gpus_per_thread: int) -> bool:
    """Whether MSCCL runs its all-pairs schedule when one thread drives ``gpus_per_thread`` ranks.

    RCCL 2.20 (src/misc/msccl/msccl_lifecycle.cc ``mscclCommCompatible``) turns MSCCL off for a
    communicator in which two ranks share a host and a process, as every rank of ``rccl-tests -g N``
    does: the collective then goes to the tuner (``msccl.allpairs.max_ranks_per_process``)."""
    limit = system.library.allpairs["max_ranks_per_process"]
    return limit is None or gpus_per_thread <= int(limit)


def _gpus_per_thread(gpus_per_thread: Any) -> int:
    g = int(gpus_per_thread) if isinstance(gpus_per_thread, (int, np.integer)) else -1
    if g < 1:
        raise ValueError(f"gpus_per_thread must be a whole number >= 1; got {gpus_per_thread!r}; expected e.g. 1 "
                         "(one rank per process) or 4 (nccl-tests -g 4)")
    return g


def collective_options(collective: str, size_bytes: Any, n_devices: int, system: str | CollectiveSystem, *,
                       n_nodes: int | None = None, gpus_per_thread: int = 1) -> dict[tuple[str, str], CollectiveResult]:
    """Every applicable (algorithm, protocol) pair and its cost, in :data:`ALGORITHMS` x :data:`PROTOCOLS` order.

    ``gpus_per_thread`` > 1 adds the launch skew (:func:`launch_skew_s`) of one thread driving
    that many of the ``n_devices``.
    """
    _check_collective(collective)
    sysm = load_collective_system(system)
    n, nodes, g = _layout(sysm, n_devices, n_nodes)
    gpt = _gpus_per_thread(gpus_per_thread)
    if gpt > n:
        raise ValueError(f"{sysm.name}: gpus_per_thread exceeds the devices; got gpus_per_thread={gpt}, "
                         f"n_devices={n}; expected at most {n}")
    skew = launch_skew_s(sysm, gpt)
    size = _sizes(size_bytes)
    out: dict[tuple[str, str], CollectiveResult] = {}
    tuned = nodes > 1 and np.any(np.asarray(sysm.inter.tuner_extra_step_latency_s) != 0)
    for a in applicable_algorithms(collective, n, sysm, nodes):
        for p in _protocols(sysm, a, nodes):
            t, lat = _cost(collective, a, p, size, n, nodes, g, sysm)
            sel = _cost(collective, a, p, size, n, nodes, g, sysm, tuner=True)[0] if tuned else None
            if nodes == 1:  # NCCL ranks one-node rings, trees and NVLS by its own estimate where it is described
                sel = (_nvls_tuner_estimate(collective, size, n, sysm) if a == "nvls"
                       else _tuner_estimate(collective, a, p, size, n, g, sysm, lat))
                if sel is None:  # RCCL: its tuning model's estimate
                    sel = _rccl_tuner_estimate(collective, a, p, size, n, g, sysm, lat)
            if a == "direct" and nodes == 1:  # NCCL picks a send's protocol by its size, not by a time
                ll = _p2p_runs_ll(sysm, collective, size, n)
                if ll is not None:
                    runs = np.zeros_like(size, dtype=bool) if p == "ll128" else (ll if p == "ll" else ~ll)
                    sel = np.where(runs, t, np.inf)
            if a == "allpairs" and not _allpairs_allowed(sysm, gpt):
                continue
            if a == "allpairs":  # MSCCL takes a size in its schedule's range before the tuner is asked
                sel = np.where(np.isfinite(t), -np.inf, np.inf)
            if gpt > 1 and sysm.library.launch_per_device_s is not None:  # may be an array (sweeps)
                t, lat = t + skew, lat + skew
                sel = None if sel is None else sel + skew
            out[(a, p)] = _result(collective, n, nodes, size, t, lat, a, p, sel)
    return out


def _fastest(collective: str, options: Mapping[tuple[str, str], CollectiveResult]) -> CollectiveResult:
    """The option the library's tuner ranks first per size (by ``selection_time_s`` where an option
    has one, else ``time_s``), priced at its ``time_s``; ties go to the earlier option."""
    keys = list(options)
    first = options[keys[0]]

    def stack(attr: str) -> np.ndarray:
        rows = [getattr(options[k], attr) for k in keys]
        rows = [options[k].time_s if v is None else v for k, v in zip(keys, rows, strict=True)]
        return np.stack([np.broadcast_to(np.asarray(v, dtype=float), np.shape(first.time_s)) for v in rows])

    times, lats = stack("time_s"), stack("latency_s")
    idx = np.argmin(stack("selection_time_s"), axis=0)
    pick = np.take_along_axis(times, idx[None], axis=0)[0]
    if not np.all(np.isfinite(pick)):
        bad = np.broadcast_to(np.asarray(first.size_bytes, dtype=float), pick.shape)[~np.isfinite(pick)]
        raise ValueError(f"{collective}: no chosen algorithm takes this size; got size_bytes={bad.ravel()[0]:g} with "
                         f"{', '.join(sorted({f'{a}/{p}' for a, p in keys}))}; expected a size the algorithm's "
                         "schedule takes (allpairs: a multiple of its granule, at most its max_bytes)")
    lat = np.take_along_axis(lats, idx[None], axis=0)[0]
    algos = np.array([k[0] for k in keys], dtype=object)[idx]
    protos = np.array([k[1] for k in keys], dtype=object)[idx]
    return _result(collective, first.n_devices, first.n_nodes, np.asarray(first.size_bytes, dtype=float),
                   pick, lat, algos, protos)


def select_algorithm(collective: str, size_bytes: Any, n_devices: int, system: str | CollectiveSystem, *,
                     n_nodes: int | None = None, algorithms: Iterable[str] | None = None,
                     gpus_per_thread: int = 1) -> CollectiveResult:
    """The fastest applicable (algorithm, protocol) per size, as NCCL's tuner picks, with its name.

    Parameters
    ----------
    collective
        One of :data:`COLLECTIVES`.
    size_bytes
        nccl-tests' size in bytes (scalar or numpy array; the result has its shape).
    n_devices
        Ranks taking part (one per device).
    system
        A :class:`CollectiveSystem` or a catalog name (``"dgx-h100"``).
    n_nodes
        Nodes the ranks span (default: as few as ``devices_per_node`` allows).
    algorithms
        Restrict the choice (``NCCL_ALGO``); default every applicable one.
    gpus_per_thread
        Devices one host thread drives (nccl-tests ``-g``); 1 (one rank per process) adds
        nothing, more adds :func:`launch_skew_s`.

    Returns
    -------
    CollectiveResult
        ``algorithm`` / ``protocol`` name the winner per size; ties go to the earlier
        algorithm in :data:`ALGORITHMS` and the lower-latency protocol.
    """
    options = collective_options(collective, size_bytes, n_devices, system, n_nodes=n_nodes,
                                 gpus_per_thread=gpus_per_thread)
    if algorithms is not None:
        wanted = set(algorithms)
        for a in wanted - set(ALGORITHMS):
            raise ValueError(f"unknown algorithm; got {a!r}; expected one of {', '.join(ALGORITHMS)}"
                             f"{did_you_mean(a, ALGORITHMS)}")
        options = {k: v for k, v in options.items() if k[0] in wanted}
    if not options:
        sysm = load_collective_system(system)
        raise ValueError(f"{sysm.name}: no algorithm can run {collective} here; got algorithms={algorithms!r}; "
                         f"expected one of {applicable_algorithms(collective, n_devices, sysm, n_nodes)}")
    return _fastest(collective, options)


def collective_time(collective: str, size_bytes: Any, n_devices: int, system: str | CollectiveSystem, *,
                    algorithm: str = "auto", protocol: str | None = None,
                    n_nodes: int | None = None, gpus_per_thread: int = 1) -> CollectiveResult:
    """Predicted time of one collective (see the module docstring for the model).

    Parameters
    ----------
    collective, size_bytes, n_devices, system, n_nodes, gpus_per_thread
        As for :func:`select_algorithm`.
    algorithm
        ``"auto"`` (the tuner's choice per size) or one of :data:`ALGORITHMS`.
    protocol
        ``None`` (the fastest protocol the algorithm may use) or one of :data:`PROTOCOLS`.

    Returns
    -------
    CollectiveResult
        Time in s, algbw and busbw in B/s, the algorithm and protocol used.

    Raises
    ------
    ValueError
        Unknown collective / algorithm / protocol, an algorithm that cannot run here, a device
        count that does not fit the system.
    """
    if algorithm == "auto" and protocol is None:
        return select_algorithm(collective, size_bytes, n_devices, system, n_nodes=n_nodes,
                                gpus_per_thread=gpus_per_thread)
    options = collective_options(collective, size_bytes, n_devices, system, n_nodes=n_nodes,
                                 gpus_per_thread=gpus_per_thread)
    if algorithm != "auto" and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm; got {algorithm!r}; expected 'auto' or one of {', '.join(ALGORITHMS)}"
                         f"{did_you_mean(str(algorithm), ALGORITHMS)}")
    if protocol is not None and protocol not in PROTOCOLS:
        raise ValueError(f"unknown protocol; got {protocol!r}; expected one of {', '.join(PROTOCOLS)}"
                         f"{did_you_mean(str(protocol), PROTOCOLS)}")
    keep = {k: v for k, v in options.items()
            if (algorithm == "auto" or k[0] == algorithm) and (protocol is None or k[1] == protocol)}
    if not keep:
        sysm = load_collective_system(system)
        have = sorted({f"{a}/{p}" for a, p in options})
        raise ValueError(f"{sysm.name}: {collective} cannot run as {algorithm}/{protocol or 'any'} on {n_devices} "
                         f"devices; got algorithm={algorithm!r}, protocol={protocol!r}; expected one of "
                         f"{', '.join(have)}")
    if len(keep) == 1:
        return _fastest(collective, keep)
    algos = {a for a, _ in keep}
    sysm = load_collective_system(system)
    best = select_algorithm(collective, size_bytes, n_devices, sysm, n_nodes=n_nodes, algorithms=algos,
                            gpus_per_thread=gpus_per_thread)
    if protocol is None:
        return best
    return _fastest(collective, keep)  # auto algorithm, pinned protocol: choose among the kept pairs only


# ----------------------------------------------------------------------------------------------
# Validation against published measurements
# ----------------------------------------------------------------------------------------------

_CSV_COLUMNS = ("id", "collective", "n_gpus", "n_nodes", "system", "hardware", "algorithm", "size_bytes",
                "time_us", "algbw_GBps", "busbw_GBps", "in_score", "source", "notes")


@dataclass(frozen=True)
class PublishedComparison:
    """One published measurement next to the model's prediction (busbw in B/s)."""

    id: str
    group: str  #: system / collective / GPUs x nodes
    collective: str
    n_devices: int
    n_nodes: int
    system: str
    size_bytes: float
    measured_busbw_bytes_per_s: float
    predicted_busbw_bytes_per_s: float
    predicted_algorithm: str
    predicted_protocol: str
    in_score: bool
    gpus_per_thread: int = 1  #: devices one host thread drove (nccl-tests ``nGpus`` / ``-g``), from the row's notes

    @property
    def error(self) -> float:
        """Signed relative error of the predicted busbw, (pred - meas) / meas."""
        return self.predicted_busbw_bytes_per_s / self.measured_busbw_bytes_per_s - 1.0


def read_published_collectives(path: str | Path = DEFAULT_PUBLISHED_FILE) -> list[dict[str, str]]:
    """Rows of ``published_collectives.csv`` as dicts (strings), checked for the expected columns."""
    p = Path(path)
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if tuple(reader.fieldnames or ()) != _CSV_COLUMNS:
            raise SpecError(f"{p}:1: unexpected header; got {reader.fieldnames!r}; expected {list(_CSV_COLUMNS)}")
        return list(reader)


def _measured_busbw(row: Mapping[str, str], n: int) -> float:
    """busbw from the printed time when there is one (more digits than the printed GB/s)."""
    size = float(row["size_bytes"])
    if row.get("time_us"):
        return size / (float(row["time_us"]) * 1e-6) * bus_bandwidth_factor(row["collective"], n)
    return float(row["busbw_GBps"]) * 1e9


#: How a row's notes state that one thread drove several GPUs: nccl-tests' own header
#: ("nThread 1 nGpus 4") or its command line ("-g 8").
_GPUS_PER_THREAD = re.compile(r"\bnGpus (\d+)|(?<![\w-])-g ?(\d+)\b")


def gpus_per_thread_of(row: Mapping[str, str]) -> int:
    """Devices one host thread drove in a published run, as its notes state (1 when they do not)."""
    m = _GPUS_PER_THREAD.search(row.get("notes", "") or "")
    return int(m.group(1) or m.group(2)) if m else 1


#: How a row's notes state the collective library's release: "NCCL 2.28.7", "NCCL v2.9.9", nccl-tests' own header
#: ("NCCL version 2.9.9+cuda11.0"), or the package an image pins ("libnccl2 2.9.9-1+cuda11.3", "libnccl2=2.9.9-1").
#: The release ends where no digit follows ("2.9.99" is not 2.9.9); "RCCL 2.9.9" is another library, and so is a
#: plugin named after it ("aws-ofi-NCCL 1.9.2": no hyphen or word character before "NCCL").
_LIBRARY_VERSION = re.compile(r"(?:(?<![\w-])NCCL (?:version )?v?|(?<![\w-])libnccl2[ =])(\d+\.\d+\.\d+)(?!\.?\d)")


def library_version_of(row: Mapping[str, str]) -> tuple[int, ...] | None:
    """The NCCL release a published run used, as its notes state it first (None when they do not)."""
    m = _LIBRARY_VERSION.search(row.get("notes", "") or "")
    return parse_version(m.group(1)) if m else None


def library_for_version(catalog: FabricCatalog, library: CollectiveLibrary,
                        version: tuple[int, ...] | None) -> CollectiveLibrary:
    """The catalog entry of ``library``'s family whose ``versions`` range holds ``version`` (``library``
    itself when none does or no version is known)."""
    if version is None:
        return library
    for lib in catalog.libraries.values():
        if lib.family_name == library.family_name and lib.versions and lib.versions[0] <= version <= lib.versions[1]:
            return lib
    return library


def compare_published(rows: Iterable[Mapping[str, str]] | None = None,
                      catalog: FabricCatalog | None = None) -> list[PublishedComparison]:
    """Predict every published row that names a catalog system; rows without a system are skipped.

    A row's ``algorithm`` is ``auto`` (the tuner's choice was measured) or the algorithm the
    measurement pinned (``NCCL_ALGO``), which the prediction then uses too. A row whose notes state an
    NCCL release that a catalog entry of the system's library family describes (``versions``) is priced
    with that entry (:func:`library_for_version`). A run whose notes say
    one thread drove several GPUs (``nGpus 4``, ``-g 8``) is predicted with that launch skew
    (:func:`launch_skew_s`).
    """
    cat = catalog or fabric_catalog()
    out = []
    for row in rows if rows is not None else read_published_collectives():
        if not row.get("system"):
            continue
        n, nodes = int(row["n_gpus"]), int(row["n_nodes"])
        sysm = cat.system(row["system"])
        lib = library_for_version(cat, sysm.library, library_version_of(row))
        if lib is not sysm.library:
            sysm = replace(sysm, library=lib)
        size = float(row["size_bytes"])
        algo = row.get("algorithm") or "auto"
        gpt = min(gpus_per_thread_of(row), n)
        res = collective_time(row["collective"], size, n, sysm, algorithm=algo, n_nodes=nodes, gpus_per_thread=gpt)
        out.append(PublishedComparison(
            id=row["id"], group=f"{row['system']} {row['collective']} {n}x{nodes}", collective=row["collective"],
            n_devices=n, n_nodes=nodes, system=row["system"], size_bytes=size,
            measured_busbw_bytes_per_s=_measured_busbw(row, n),
            predicted_busbw_bytes_per_s=float(res.busbw_bytes_per_s), predicted_algorithm=str(res.algorithm),
            predicted_protocol=str(res.protocol), in_score=row.get("in_score", "1").strip() == "1",
            gpus_per_thread=gpt))
    return out


def mape(comparisons: Iterable[PublishedComparison]) -> float:
    """Mean absolute percentage error of predicted busbw, in percent (NaN for no rows)."""
    errs = [abs(c.error) for c in comparisons]
    return 100.0 * float(np.mean(errs)) if errs else float("nan")


# ----------------------------------------------------------------------------------------------
# TPU Multislice: collectives over slices joined by the data-centre network (DCN)
# ----------------------------------------------------------------------------------------------
#
# Chips of one slice talk over ICI; chips of different slices through their hosts over the DCN
# (Google Cloud 'Cloud TPU Multislice overview'). A group spanning slices is priced hierarchically,
# the bandwidth-optimal decomposition XLA's multislice data parallelism follows: reduce-scatter
# inside each slice over ICI, the slice's shard reduced across slices over every chip's DCN share
# in parallel, all-gather inside the slice (docs/tpu.md). Kept apart from the NCCL models above.

# ----------------------------------------------------------------------------------------------
# A group of chips inside one TPU slice: the torus axes it spans
# ----------------------------------------------------------------------------------------------
#
# The scaling book (Austin et al., 'How to Scale Your Model', jax-ml/scaling-book sharding.md @
# 0819a7d: 'When we gather over multiple axes ... This increases the available bandwidth by a
# factor of n_axes'; the collective table: AllGather time = bytes / (bidirectional ICI bandwidth x
# num_axes)) prices an ICI collective by the torus axes its group spans, not by all of a chip's
# ports: a ring over one axis drives that axis's two links. tpus.md @ 0819a7d: slices of v4/v5p
# that are multiples of a full 4x4x4 cube have wraparound links on every axis ('2x2x4 won't have
# any'); v5e/v6e have a wraparound only on an axis of length 16; without one 'it typically doubles
# the time of most communication' (one link's worth per axis instead of two).

def _mesh_axes_for(avail: list[int], size: int) -> tuple[int, ...] | None:
    """Indices of the available physical axes a logical axis of ``size`` takes, as JAX's
    ``mesh_utils._create_device_mesh_for_nd_torus`` assigns them: the most axes first ('Preferentially
    map to more physical axes first for higher bandwidth'), the first combination whose product is
    ``size``; None when none is (JAX then splits physical axes)."""
    import itertools

    free = [(i, a) for i, a in enumerate(avail) if a > 1]
    for k in range(len(free), 0, -1):
        for combo in itertools.combinations(free, k):
            if math.prod(a for _, a in combo) == size:
                return tuple(i for i, _ in combo)
    return None


def _fill_order_axes(shape: tuple[int, ...], n: int, stride: int) -> list[tuple[int, int]]:
    """(axis, extent) of the axes ``n`` ranks ``stride`` apart span when ranks fill the first axis fastest."""
    chips = math.prod(shape)
    ranks = sorted({(j * stride) % chips for j in range(n)})
    out, place = [], 1
    for i, a in enumerate(shape):
        extent = len({(r // place) % a for r in ranks})
        if extent > 1:
            out.append((i, extent))
        place *= a
    return out


@functools.lru_cache(maxsize=256)
def torus_group_axes(shape: tuple[int, ...], n: int, stride: int, wrap: tuple[bool, ...]) -> tuple[tuple[int, int], ...]:
    """(extent, links) of every axis of a slice of torus ``shape`` that a group of ``n`` chips
    ``stride`` ranks apart spans; ``links``: 2 when the group covers the whole axis and the axis has a
    wraparound (``wrap``), else 1.

    The inner groups (``stride`` ranks: tensor-parallel, innermost) take their physical axes first and
    the group the remaining ones, each by JAX's mesh rule (:func:`_mesh_axes_for`, MaxText's mesh axes
    are assigned from the last, ``tensor``, to the first); where no whole axes multiply to a size,
    ranks fill the first axis fastest.

    Examples
    --------
    >>> torus_group_axes((4, 4, 8), 8, 1, (True, True, True))    # the axis of 8
    ((8, 2),)
    >>> torus_group_axes((4, 4, 8), 16, 8, (True, True, True))   # the two axes of 4 left
    ((4, 2), (4, 2))
    >>> torus_group_axes((8, 8, 8), 16, 1, (True, True, True))   # no whole axes: 8 x 2 in fill order
    ((8, 2), (2, 1))
    """
    avail = list(shape)
    inner = _mesh_axes_for(avail, stride) if stride > 1 else ()
    if inner is not None:
        for i in inner:
            avail[i] = 1
        own = _mesh_axes_for(avail, n)
        if own is not None:
            return tuple((shape[i], 2 if wrap[i] else 1) for i in sorted(own))
    return tuple((e, 2 if (e == shape[i] and wrap[i]) else 1) for i, e in _fill_order_axes(shape, n, stride))


def torus_group_system(system: CollectiveSystem, shape: tuple[int, ...], n: int, stride: int,
                       wrap: tuple[bool, ...]) -> CollectiveSystem:
    """``system`` whose ICI torus is narrowed to the axes a group of ``n`` chips ``stride`` apart
    spans in a slice of ``shape`` (:func:`torus_group_axes`): its links per chip are those axes'
    links, its dimensions their count; unchanged when the group spans no axis."""
    from dataclasses import replace

    intra = system.intra
    axes = torus_group_axes(tuple(shape), int(n), int(stride), tuple(wrap))
    if intra.topology != "torus" or not axes:
        return system
    sub = replace(intra, links_per_device=sum(links for _, links in axes), torus_dims=len(axes))
    return replace(system, intra=sub)


def is_multislice(system: CollectiveSystem) -> bool:
    """Whether ``system`` is a TPU node configuration whose nodes are slices joined by a DCN."""
    return system.library.name == "xla-tpu" and system.inter is not None


def slice_system(system: CollectiveSystem, chips_per_slice: int) -> CollectiveSystem:
    """``system`` with one node per slice of ``chips_per_slice`` chips (each chip keeps its DCN share)."""
    from dataclasses import replace

    per_chip = system.nics_per_node / system.devices_per_node
    return replace(system, devices_per_node=int(chips_per_slice), nics_per_node=int(round(per_chip * chips_per_slice)))


def dcn_bandwidth_per_chip(system: CollectiveSystem) -> float:
    """One chip's achievable DCN bandwidth per direction, B/s (its share of its host's NICs)."""
    inter = system.inter
    if inter is None:
        raise ValueError(f"{system.name}: no data-centre network; got a node configuration without 'inter'; "
                         "expected a TPU pod configuration with a dcn-* fabric")
    return (inter.link_bandwidth_bytes_per_s * inter.bandwidth_fraction * system.nics_per_node
            / system.devices_per_node * system.library.protocol_bandwidth_fraction["simple"])


def _ici_part(collective: str, size: np.ndarray, g: int, system: CollectiveSystem) -> tuple[Any, Any]:
    """(time, latency) of the part of a collective inside one slice of ``g`` chips (ICI)."""
    if g <= 1:
        return np.zeros_like(size), np.zeros_like(size)
    r = select_algorithm(collective, size, g, system)
    return np.asarray(r.time_s, dtype=float), np.asarray(r.latency_s, dtype=float)


def multislice_collective(collective: str, size_bytes: Any, n_devices: int, system: CollectiveSystem,
                          n_slices: int) -> CollectiveResult:
    """One collective over ``n_devices`` chips in ``n_slices`` slices (``system.devices_per_node`` chips
    each at most, see :func:`slice_system`), sizes as nccl-tests states them.

    - all_reduce: reduce-scatter in the slice (ICI), ring all-reduce of the ``S / g`` shard across the
      ``s`` slices (``2 (s-1)/s x S/g`` bytes over each chip's DCN share), all-gather in the slice.
    - reduce_scatter: in the slice, then ``(s-1)/s x S/g`` across slices; all_gather the reverse.
    - broadcast: a pipelined chain of slices over DCN, then a broadcast in each slice.
    - all_to_all: the in-slice and cross-slice messages leave at once (``(n-g)/n x S`` over DCN).
    - send_recv: one chip's DCN share.

    The DCN part pays the library's ``net`` step latency per sequential step.
    """
    _check_collective(collective)
    size = _sizes(size_bytes)
    n, s = int(n_devices), int(n_slices)
    if s < 2 or n % s:
        raise ValueError(f"{system.name}: {n} chips over {s} slices; got n_slices={n_slices!r}; expected 2 or more "
                         f"slices dividing {n}")
    g = n // s
    if g > system.devices_per_node:
        raise ValueError(f"{system.name}: {g} chips per slice; got n_devices={n}, n_slices={s}; expected at most "
                         f"{system.devices_per_node}")
    bw = dcn_bandwidth_per_chip(system)
    a_n = _alpha(system, system.inter, "simple")
    base = system.library.base_latency_s["simple"]
    if collective == "send_recv":
        t_n, l_n = size / bw + a_n, a_n + np.zeros_like(size)
        return _result(collective, n, s, size, base + t_n, base + l_n, "hierarchical", "simple")
    if collective == "all_to_all":
        t_i, l_i = _ici_part(collective, size * g / n, g, system)
        t_n = (n - g) / n * size / bw + a_n
        return _result(collective, n, s, size, base + np.maximum(t_i, t_n), base + np.maximum(l_i, a_n),
                       "hierarchical", "simple")
    if collective == "broadcast":
        t_i, l_i = _ici_part(collective, size, g, system)
        t_n, l_n = size / bw + (s - 1) * a_n, (s - 1) * a_n
        return _result(collective, n, s, size, base + t_i + t_n, base + l_i + l_n, "hierarchical", "simple")
    k = 2 if collective == "all_reduce" else 1
    t_n = k * (s - 1) / s * (size / g) / bw + k * (s - 1) * a_n
    l_n = k * (s - 1) * a_n + np.zeros_like(size)
    phases = {"all_reduce": ("reduce_scatter", "all_gather"), "reduce_scatter": ("reduce_scatter",),
              "all_gather": ("all_gather",)}[collective]
    t, lat = base + t_n, base + l_n
    for ph in phases:
        t_i, l_i = _ici_part(ph, size, g, system)
        t, lat = t + t_i, lat + l_i
    return _result(collective, n, s, size, t, lat, "hierarchical", "simple")


# ----------------------------------------------------------------------------------------------
# Serving engines' own all-reduce kernels (vLLM's custom all-reduce, also run by SGLang; TensorRT-LLM's
# custom all-reduce plugin)
# ----------------------------------------------------------------------------------------------

_MIB = 1024 * 1024

#: Where the dispatch rule of vLLM's custom all-reduce is read (the same rule from 2024 on).
VLLM_CUSTOM_AR_RULE = (
    "vllm-project/vllm csrc/custom_all_reduce.cuh CustomAllreduce::allreduce (REDUCE_CASE): world size 2, or a "
    "fully NVLink-connected node with world size <= 4 below 512 KiB or <= 8 below 256 KiB -> "
    "cross_device_reduce_1stage, else cross_device_reduce_2stage; world sizes 2, 4, 6, 8 only; "
    "vllm/distributed/device_communicators/custom_all_reduce.py CustomAllreduce.should_custom_ar: the message a "
    "multiple of 16 bytes and below the registered buffer (max_size 8 MiB), on 2 GPUs or a fully NVLink-connected "
    "node (disabled on more than two PCIe-only GPUs), else NCCL; outside CUDA graphs (registered=False) the input "
    "is first copied into the registered IPC buffer (cudaMemcpyAsync device to device). Merged in vllm-project/vllm "
    "PR #2192 (2023-12-19, first released in v0.2.7); vLLM V0 0.5 / 0.6 and V1, and SGLang (model_runner "
    "set_custom_all_reduce(not server_args.disable_custom_all_reduce)) run it by default")
_AR_H100_TP4 = (
    "vllm-project/vllm PR #24532 (2025-09, 'add nccl symmetric memory for all reduce') and PR #24111 (2025-09-02), "
    "benchmarks/kernels/benchmark_device_communicators.py on 4 H100 SXM (NVSwitch), bf16, hidden 8192, ten "
    "all-reduces captured in one CUDA graph and replayed, ms per call: ca_1stage 0.010 / 0.010 at 0.5 MB, "
    "0.014 / 0.015 at 1 MB, 0.019 / 0.019 at 1.5 MB, 0.023 / 0.022 at 2 MB, 0.030 / 0.030 at 3 MB, 0.038 / 0.038 "
    "at 4 MB; ca_2stage 0.017 / 0.017, 0.018 / 0.018, 0.025 / 0.027, 0.026 / 0.027, 0.035 / 0.035, 0.042 / 0.043. "
    "Read as latency + bytes x seconds per byte through the table's end points (0.5 and 4 MiB, the two PRs "
    "averaged): one-stage 6.0 us + 8.0 us per MiB (within 1 us of every row), two-stage 13.36 us + 7.29 us per "
    "MiB (within 2.7 us of every row); below 0.5 MiB and from 4 to 8 MiB along the same line (no row there)")
_AR_H100_TP6 = (
    "vllm-project/vllm PR #24111 (2025-09-02), the same benchmark on 6 H100 SXM: ca_1stage 0.013 ms at 0.5 MB ... "
    "0.070 at 4 MB; ca_2stage 0.015 ... 0.037. End points read as one-stage 4.86 us + 16.29 us per MiB, "
    "two-stage 11.86 us + 6.29 us per MiB")
#: Where the dispatch rule of TensorRT-LLM's custom all-reduce plugin (the TensorRT engine path) is read.
TRTLLM_CUSTOM_AR_RULE = (
    "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/plugins/ncclPlugin/allreducePlugin.cpp AllreducePlugin::selectImplementation "
    "and cpp/tensorrt_llm/common/customAllReduceUtils.h getMaxRequiredWorkspaceSize, as of 0.10.0.dev2024043000 "
    "(WhiteD2125/TensorRT-LLM @ 6ad7cf1bcc08e31990c62ba929a8e84f35667654, the pinned copy the v0.9.0 rows cite; "
    "the 0.9.0 tag's own code was not read): strategy AUTO (a build with use_custom_all_reduce) runs the custom "
    "kernels when the message is at most the workspace, 16,000,000 bytes on <= 2 GPUs and 8,000,000 bytes above; "
    "then ONESHOT on <= 2 GPUs, on <= 4 GPUs below 1,000,000 bytes, else below 500,000 bytes, TWOSHOT otherwise; "
    "NCCL where configurationSupported fails (the message not a multiple of 16 bytes, or for TWOSHOT of 16 x world "
    "size bytes) and on world sizes the plugin rejects (isCustomAllReduceSuported: even and <= 8). "
    "cpp/tensorrt_llm/kernels/customAllReduceKernels.cu (same commit): oneShotAllReduceKernel copies its chunk of "
    "the input into the rank's IPC-shared buffer (COPY_INPUT, or a cudaMemcpyAsync first under USE_MEMCPY), a "
    "block barrier over the ranks' flags, then reads every peer's chunk over NVLink and sums; twoShotAllReduceKernel "
    "copies the input, barrier, each rank reduces its 1/n slice from all peers (reduce-scatter), a second "
    "barrier, then gathers the other slices from their owners (all-gather): the algorithm of vLLM's "
    "cross_device_reduce_1stage / _2stage (VLLM_CUSTOM_AR_RULE), except that the input is copied into the shared "
    "buffer in every call, CUDA graphs or not. Default per version: the legacy examples/*/build.py of v0.5 / v0.6.1 "
    "take --use_custom_all_reduce as an opt-in flag; trtllm-build (0.9.0) defaults it to 'enable' "
    "(tensorrt_llm/plugin/plugin.py PluginConfig.use_custom_all_reduce = True, the same commit; a trtllm-build 0.9.0 "
    "log prints it for a build that does not pass the flag: InfraCloud, 'Running Llama 3 with Triton and "
    "TensorRT-LLM', 2024-07). Later releases changed the rule (TWOSHOT disabled in selectImplementation by late "
    "2024: NVIDIA/TensorRT-LLM issue #2575; per-SM lookup tables and Lamport one-shot kernels in 1.x): not this "
    "kernel entry")
#: What vLLM's custom all-reduce cost before vllm-project/vllm PR #8558 (the kernel vLLM 0.5.x-0.6.1 and SGLang 0.3
#: with vllm 0.5.5 ship), beyond the build the published tables time.
VLLM_CUSTOM_AR_2024 = (
    "vllm-project/vllm PR #8558 ('[Bugfix] Fix potentially unsafe custom allreduce synchronization', opened "
    "2024-09-18 by the kernel's author): the flags become incrementing counters and the two-stage kernel's "
    "__threadfence_system between its stages becomes an acquire-release pair: 'Performance improved for 6~7us for "
    "two stage allreduce after this PR on H100', 'we replace a __threadfence_system with acquire-release' (no gain "
    "is stated for the one-stage kernel, left as the tables time it). The midpoint, 6.5 us, is charged to every two-stage call "
    "of a build before the PR: vLLM 0.6.0 (2024-09-05) and the 0.6.x CI builds of about 2024-09-17, SGLang 0.3.0 "
    "(Requires-Dist vllm==0.5.5, its custom all-reduce through vllm.distributed); the statement is for the "
    "author's H100 machine (eight GPUs), the fence does not depend on the world size")
_AR_SAME_KERNELS = (
    "priced with the vLLM kernels' published times (the two are one algorithm, see TRTLLM_CUSTOM_AR_RULE): "
    "sgl-project/sglang PR #2511 (2024-12-18, 'adapt custom allreduce for tensorrt llm') ported TensorRT-LLM's "
    "kernels and sgl-project/sglang PR #2688 (2024-12-31, 'support twoshot allreduce mainly from tensorrt llm') times "
    "them against vLLM's custom all-reduce on A100 GPUs in one harness, ms (vLLM / the TensorRT-LLM port): world size 2, "
    "test_size 1048576 0.0325 / 0.0326 and 2097152 0.0553 / 0.0543; world size 4, 524288 0.0313 / 0.0306 and "
    "1048576 0.0471 / 0.0455: within 2.3 us at every size of its 2- and 4-GPU tables")


@dataclass(frozen=True)
class EngineAllReduceFit:
    """An engine all-reduce kernel's time on one fabric and world size: ``latency_s + bytes * s_per_byte`` per stage
    (``"1stage"``, ``"2stage"``), read off a published latency table (``source``)."""

    one_stage: tuple[float, float]  #: (latency s, s per byte) of the one-stage kernel
    two_stage: tuple[float, float]  #: (latency s, s per byte) of the two-stage kernel
    source: str


@dataclass(frozen=True)
class EngineAllReduceKernel:
    """A serving engine's own all-reduce (one node, peer-to-peer over NVLink): which world sizes and messages it
    takes (``max_bytes``, exclusive), when it runs one stage, and its sourced times by (intra fabric, world size);
    a message it does not take, or a fabric / world size with no published table, is NCCL's (None)."""

    name: str
    world_sizes: tuple[int, ...]
    max_bytes: int
    one_stage_below: Mapping[int, int]  #: world size -> bytes below which the one-stage kernel runs
    fits: Mapping[tuple[str, int], EngineAllReduceFit]
    source: str
    #: world size -> bytes from which NCCL takes the message (exclusive bound), where it differs from ``max_bytes``
    max_bytes_by_world: Mapping[int, int] = field(default_factory=lambda: MappingProxyType({}))
    #: True where the kernel copies its input into the shared buffer in every call (CUDA graphs or not)
    copies_input: bool = False
    #: True where the two-stage kernel needs the message to be a multiple of 16 bytes times the world size
    two_stage_rank_align: bool = False
    #: Seconds the two-stage kernel of this build takes beyond the published tables' (which time a later build),
    #: and where that is stated (``two_stage_extra_source``)
    two_stage_extra_s: float = 0.0
    two_stage_extra_source: str = ""


def _fit(one: tuple[float, float], two: tuple[float, float], src: str) -> EngineAllReduceFit:
    """Fit from (latency us, us per MiB) pairs."""
    return EngineAllReduceFit((one[0] * 1e-6, one[1] * 1e-6 / _MIB), (two[0] * 1e-6, two[1] * 1e-6 / _MIB), src)


#: The one-/two-stage kernels' published times by (intra fabric, world size): ((latency us, us per MiB) one-stage,
#: the same two-stage, source). Both engine kernels are priced from this one table (TensorRT-LLM's plugin runs the
#: same algorithm: ``_AR_SAME_KERNELS``). No 2-GPU table was found, so 2-GPU calls of either kernel stay NCCL.
_CUSTOM_AR_FITS: Mapping[tuple[str, int], tuple[tuple[float, float], tuple[float, float], str]] = MappingProxyType({
    ("nvlink4-nvswitch3", 4): ((6.0, 8.0), (13.36, 7.29), _AR_H100_TP4),
    ("nvlink4-nvswitch3", 6): ((4.86, 16.29), (11.86, 6.29), _AR_H100_TP6),
})


def _custom_ar_fits(note: str = "") -> Mapping[tuple[str, int], EngineAllReduceFit]:
    """:data:`_CUSTOM_AR_FITS` as fits, each source followed by ``note`` (why the table applies) where given."""
    return MappingProxyType({key: _fit(one, two, f"{src}; {note}" if note else src)
                             for key, (one, two, src) in _CUSTOM_AR_FITS.items()})


#: Engine all-reduce kernels by the name profiles give them (``FrameworkProfile.all_reduce_kernel``); ``"nccl"``
#: (the library's tuner, :func:`select_algorithm`) is the default and not listed. Tables exist for Hopper GPUs on
#: NVSwitch gen3 (H100, and H200 with the same NVLink 4 ports and SM count) at 4 and 6 GPUs; 2 and 8 GPUs, A100
#: (only timings without CUDA graphs were found: SGLang PR #2688) and other fabrics stay NCCL. TensorRT-LLM's
#: 2-GPU workspace bound (16,000,000 bytes) therefore decides dispatch (:func:`engine_all_reduce_stage`) but no
#: priced call until a 2-GPU table is added to :data:`_CUSTOM_AR_FITS`.
ENGINE_ALL_REDUCE_KERNELS: Mapping[str, EngineAllReduceKernel] = MappingProxyType({
    "vllm-custom": EngineAllReduceKernel(
        "vllm-custom", (2, 4, 6, 8), 8 * _MIB, MappingProxyType({2: 1 << 62, 4: 512 * 1024, 6: 256 * 1024,
                                                                 8: 256 * 1024}),
        _custom_ar_fits(), VLLM_CUSTOM_AR_RULE),
    "vllm-custom-2024": EngineAllReduceKernel(
        "vllm-custom-2024", (2, 4, 6, 8), 8 * _MIB, MappingProxyType({2: 1 << 62, 4: 512 * 1024, 6: 256 * 1024,
                                                                      8: 256 * 1024}),
        _custom_ar_fits(), VLLM_CUSTOM_AR_RULE, two_stage_extra_s=6.5e-6, two_stage_extra_source=VLLM_CUSTOM_AR_2024),
    "trtllm-custom": EngineAllReduceKernel(
        "trtllm-custom", (2, 4, 6, 8), 8_000_001, MappingProxyType({2: 1 << 62, 4: 1_000_000, 6: 500_000, 8: 500_000}),
        _custom_ar_fits(_AR_SAME_KERNELS), TRTLLM_CUSTOM_AR_RULE, max_bytes_by_world=MappingProxyType({2: 16_000_001}),
        copies_input=True, two_stage_rank_align=True),
})


def engine_all_reduce_stage(kernel: str, size_bytes: float, n_devices: int) -> str | None:
    """The stage (``"1stage"``, ``"2stage"``) the engine kernel ``kernel`` runs for one all-reduce of ``size_bytes``
    over ``n_devices`` GPUs by its dispatch rule alone, or None where the engine hands the message to NCCL (world
    size, alignment, workspace bound); whether a published table prices it is :func:`engine_all_reduce`'s matter."""
    k = ENGINE_ALL_REDUCE_KERNELS.get(kernel)
    size = float(size_bytes)
    if k is None or n_devices not in k.world_sizes or size <= 0 or int(size) % 16:
        return None
    if size >= k.max_bytes_by_world.get(n_devices, k.max_bytes):
        return None
    stage = "1stage" if size < k.one_stage_below[n_devices] else "2stage"
    if stage == "2stage" and k.two_stage_rank_align and int(size) % (16 * n_devices):
        return None
    return stage


@dataclass(frozen=True)
class EngineAllReduceResult:
    """One engine all-reduce: its device time (s), the stage that ran, the input copy it includes (s)."""

    time_s: float
    stage: str
    copy_s: float
    source: str


def engine_all_reduce(kernel: str, size_bytes: float, n_devices: int, system: CollectiveSystem, *,
                      cuda_graphs: bool, copy_bytes_per_s: float) -> EngineAllReduceResult | None:
    """The time of one all-reduce run by a serving engine's own kernel ``kernel`` (:data:`ENGINE_ALL_REDUCE_KERNELS`)
    on one node of ``system``, or None where the engine hands it to NCCL (a message it does not take) or no
    published table covers the fabric and world size. Outside CUDA graphs the input is first copied into the
    registered buffer: ``2 x size / copy_bytes_per_s`` more (the device's memory rate); a kernel that copies in every
    call (``copies_input``: TensorRT-LLM's) pays it under CUDA graphs too."""
    stage = engine_all_reduce_stage(kernel, size_bytes, n_devices)
    if stage is None:
        return None
    k, size = ENGINE_ALL_REDUCE_KERNELS[kernel], float(size_bytes)
    fit = k.fits.get((system.intra.name, n_devices))
    if fit is None:
        return None
    lat, per_byte = fit.one_stage if stage == "1stage" else (fit.two_stage[0] + k.two_stage_extra_s, fit.two_stage[1])
    copy = 0.0 if cuda_graphs and not k.copies_input else 2.0 * size / float(copy_bytes_per_s)
    src = f"{fit.source}; {k.two_stage_extra_source}" if stage == "2stage" and k.two_stage_extra_s else fit.source
    return EngineAllReduceResult(lat + size * per_byte + copy, stage, copy, src)
