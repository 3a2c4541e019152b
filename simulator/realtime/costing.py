"""Cost a scenario's tasks on a node: resolve ``--hardware`` to a node, place each task on a device,
and turn each task's model into the sequence of kernel times a job runs, per input-dependent size.

A job is the task's graph costed by the analytical engine (:func:`simulator.engines.analytical.evaluate`)
on its device: one non-preemptible *segment* per kernel, in the engine's execution order (an
elementwise op fused into its producer lengthens that kernel; views take no time and no segment).
Tasks whose model names a variable (``gemm:m={objects},...``) are re-costed once per distinct value
(memoised), so the simulator and the bound use the exact kernel times of every size.

Each kernel is also split as :class:`simulator.engines.contention.KernelDemand` splits a record: a
*fixed* part (launch floor, latencies) and a *work* part that moves its DRAM bytes at
``dram_bytes / work_s`` per second of standalone work; devices of one :class:`MemoryPool` (a node's
``shared_memory``) share that bandwidth when their kernels overlap (:class:`PoolSharing`).

*Transfers.* When a task's predecessor runs on another device, a job first receives the predecessor's
output (the bytes of its graph's output tensors) over the link between the two devices, costed as the
partitioner costs a transfer (:meth:`hwmodels.node.NodeLink.transfer_time_s`: ``latency + bytes /
(bandwidth x bandwidth_fraction)``). The transfer is charged to the consumer: it is a leading,
non-preemptible segment of the consumer's job on the consumer's device (:class:`InputTransfer`).
Over a ``shared-memory`` link between devices of one pool (Jetson's reformat pass through LPDDR5) the
transfer reads and writes the tensor once, ``2 x bytes`` of DRAM traffic in its work part, and so
contends for the pool like any kernel.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeperf.suggest import did_you_mean
from simulator.realtime.scenario import MAX_SUPPORT, Scenario, ScenarioError, TaskSpec

__all__ = ["Variant", "TaskCost", "InputTransfer", "MemoryPool", "PoolSharing", "resolve_node", "node_in_power_mode",
           "apply_node_overlay", "cost_scenario", "place_tasks", "device_aliases", "memory_pools", "input_transfers"]

logger = logging.getLogger(__name__)

#: DRAM bytes a hand-off over a ``shared-memory`` link moves per byte of tensor: the reformat pass reads
#: it once and writes it once (``hwmodels/catalog/nodes/jetson-agx-orin-64gb.toml``, its links' source).
_SHARED_MEMORY_PASSES = 2.0
#: Most demand combinations a PoolSharing remembers (each a few tuples; beyond it, shares are recomputed).
_MEMO_LIMIT = 1 << 20


@dataclass(frozen=True)
class Variant:
    """The kernels of one job size: segment times (s) and their running sums for fast lookups.

    ``fixed[k]`` is the fixed part of kernel ``k`` (s, run first, no DRAM use) and ``dram_rate[k]`` the
    DRAM bandwidth its work part (``segments[k] - fixed[k]``) moves at standalone speed (B/s); both
    empty means no DRAM use (the kernel is never slowed by another device). ``output_bytes`` is what a
    job hands to its successors (the graph's output tensors).
    """

    segments: tuple[float, ...]
    prefix: tuple[float, ...]  # prefix[k] = sum(segments[:k]); len = len(segments) + 1
    fixed: tuple[float, ...] = ()
    dram_rate: tuple[float, ...] = ()
    output_bytes: float = 0.0

    @classmethod
    def of(cls, segments: Sequence[float], fixed: Sequence[float] | None = None,
           dram_bytes: Sequence[float] | None = None, output_bytes: float = 0.0) -> Variant:
        """The variant of kernel times ``segments`` (s), with their running sums.

        ``fixed`` (s) and ``dram_bytes`` (B) per kernel give its DRAM demand: the work part moves
        ``dram_bytes`` in ``segment - fixed`` seconds at standalone speed.
        """
        segs = tuple(float(x) for x in segments)
        fx: tuple[float, ...] = ()
        rate: tuple[float, ...] = ()
        if fixed is not None or dram_bytes is not None:
            fx = tuple(min(max(float(f), 0.0), s) for f, s in zip(fixed or [0.0] * len(segs), segs, strict=True))
            rate = tuple(float(b) / (s - f) if s - f > 0 and b > 0 else 0.0
                         for b, s, f in zip(dram_bytes or [0.0] * len(segs), segs, fx, strict=True))
        return cls(segs, tuple(itertools.accumulate(segs, initial=0.0)), fx, rate, float(output_bytes))

    def fixed_s(self, k: int) -> float:
        """Fixed part of kernel ``k`` (s)."""
        return self.fixed[k] if self.fixed else 0.0

    def rate(self, k: int) -> float:
        """DRAM bytes per second kernel ``k``'s work part moves at standalone speed (B/s)."""
        return self.dram_rate[k] if self.dram_rate else 0.0

    @property
    def peak_rate(self) -> float:
        """Largest DRAM demand of any of its kernels (B/s)."""
        return max(self.dram_rate, default=0.0)

    def then(self, other: Variant) -> Variant:
        """This variant's kernels followed by ``other``'s (a transfer before a job)."""
        n1, n2 = len(self.segments), len(other.segments)
        return Variant(self.segments + other.segments,
                       tuple(itertools.accumulate(self.segments + other.segments, initial=0.0)),
                       (self.fixed or (0.0,) * n1) + (other.fixed or (0.0,) * n2),
                       (self.dram_rate or (0.0,) * n1) + (other.dram_rate or (0.0,) * n2),
                       other.output_bytes)

    @property
    def work_s(self) -> float:
        """Total work of a job (s)."""
        return self.prefix[-1]

    @property
    def longest_s(self) -> float:
        """Longest kernel (s)."""
        return max(self.segments, default=0.0)

    def boundary_at_or_after(self, start_index: int, elapsed_s: float) -> int:
        """The first kernel boundary at or after ``elapsed_s`` of running from boundary ``start_index``."""
        target = self.prefix[start_index] + elapsed_s
        k = bisect.bisect_left(self.prefix, target, lo=start_index)
        return min(k, len(self.segments))


@dataclass(frozen=True)
class InputTransfer:
    """The transfer of a predecessor's output to a task on another device, charged to the task's job.

    A transfer of ``n`` bytes is one non-preemptible kernel on the consumer's device of
    ``link.transfer_time_s(n)`` seconds (the partitioner's cost): its fixed part the link latency, its
    work part ``n / effective bandwidth``, moving ``dram_factor x n`` DRAM bytes (2 over a shared
    memory: the tensor read and written once; 0 over a bus). ``support_bytes``: the producer's output
    sizes over its job sizes (what the bound covers).
    """

    producer: str
    src: str
    dst: str
    link: Any  # hwmodels.node.NodeLink
    dram_factor: float
    support_bytes: tuple[float, ...]
    _memo: dict[float, Variant] = field(default_factory=dict, compare=False, hash=False, repr=False)

    def variant(self, nbytes: float) -> Variant | None:
        """The transfer of ``nbytes`` as a one-kernel variant (None for nothing to send)."""
        if nbytes <= 0:
            return None
        got = self._memo.get(nbytes)
        if got is None:
            t = float(self.link.transfer_time_s(nbytes))
            got = Variant.of([t], [min(float(self.link.latency_s), t)], [self.dram_factor * nbytes])
            self._memo[nbytes] = got
        return got

    def _times(self) -> list[float]:
        return [v.work_s for v in (self.variant(n) for n in self.support_bytes) if v is not None] or [0.0]

    @property
    def worst_s(self) -> float:
        """Longest transfer over the producer's job sizes (s)."""
        return max(self._times())

    @property
    def best_s(self) -> float:
        """Shortest transfer over the producer's job sizes (s)."""
        return min(self._times()) if all(n > 0 for n in self.support_bytes) else 0.0

    @property
    def peak_rate(self) -> float:
        """Largest DRAM demand of the transfer over the producer's job sizes (B/s)."""
        return max((v.peak_rate for v in (self.variant(n) for n in self.support_bytes) if v is not None), default=0.0)

    def describe(self) -> str:
        """``producer (src -> dst over kind)``."""
        return f"{self.producer} ({self.src} -> {self.dst} over {self.link.kind})"


@dataclass
class TaskCost:
    """A task's costs on its device: the variant of every variable value in the bound's support, and
    the transfers of its inputs from predecessors on other devices (``inputs``, in ``after`` order)."""

    task: TaskSpec
    device: str
    variants: dict[tuple[int, ...], Variant]
    support: dict[str, tuple[int, ...]]
    exact_bound: bool  # False: an unbounded variable; the bound holds up to its quantile
    warnings: tuple[str, ...] = ()
    _coster: Any = field(default=None, repr=False)
    inputs: tuple[InputTransfer, ...] = ()
    _jobs: dict[tuple[Any, ...], Variant] = field(default_factory=dict, repr=False)

    @property
    def own_wcet_s(self) -> float:
        """Largest work of the task's own kernels over the support (s), without input transfers."""
        return max(v.work_s for v in self.variants.values())

    @property
    def transfer_s(self) -> float:
        """Longest time its input transfers can add to a job (s): the worst of each, summed."""
        return sum(x.worst_s for x in self.inputs)

    @property
    def wcet_s(self) -> float:
        """Largest job work over the support, input transfers included (s)."""
        return self.own_wcet_s + self.transfer_s

    @property
    def bcet_s(self) -> float:
        """Smallest job work over the support (s): its own smallest work plus the smallest transfer of
        its trigger's output (the one input a data-driven job always receives)."""
        trig = next((x.best_s for x in self.inputs if x.producer == self.task.trigger), 0.0)
        return min(v.work_s for v in self.variants.values()) + trig

    @property
    def longest_kernel_s(self) -> float:
        """Longest single kernel over the support (s): what this task can block others by."""
        return max(max(v.longest_s for v in self.variants.values()),
                   max((x.worst_s for x in self.inputs), default=0.0))

    @property
    def peak_rate(self) -> float:
        """Largest DRAM demand of any of its kernels or transfers (B/s)."""
        return max(max(v.peak_rate for v in self.variants.values()), max((x.peak_rate for x in self.inputs), default=0.0))

    def variant(self, values: Mapping[str, int]) -> Variant:
        """The variant for ``values`` (costed on demand and memoised outside the support)."""
        key = tuple(int(values[v]) for v in self.task.variables)
        got = self.variants.get(key)
        if got is None:
            got = self._coster(self.task, self.device, dict(zip(self.task.variables, key, strict=True)))
            self.variants[key] = got
        return got

    def job_variant(self, values: Mapping[str, int], input_bytes: Sequence[float]) -> Variant:
        """A job's kernels: the transfer of each input (``input_bytes[i]``: the size of the output of
        ``inputs[i]``'s producer it reads, 0 when there is none yet), then its own."""
        own = self.variant(values)
        if not self.inputs or not any(n > 0 for n in input_bytes):
            return own
        memo = (tuple(int(values[v]) for v in self.task.variables), tuple(input_bytes))
        got = self._jobs.get(memo)
        if got is None:
            pre: Variant | None = None
            for x, n in zip(self.inputs, input_bytes, strict=True):
                tv = x.variant(n)
                if tv is not None:
                    pre = tv if pre is None else pre.then(tv)
            got = own if pre is None else pre.then(own)
            self._jobs[memo] = got
        return got


@dataclass(frozen=True)
class MemoryPool:
    """Devices of a node that share one physical DRAM, and the bandwidth they share (B/s).

    ``bandwidth_bytes_per_s`` is the largest achievable DRAM bandwidth of its devices (main-memory
    read bandwidth x ``efficiency.dram_bandwidth_fraction``): the most the memory delivers to any one
    engine, so a kernel alone is never slowed, and the total the engines' kernels share.
    """

    name: str
    devices: tuple[str, ...]
    bandwidth_bytes_per_s: float
    source: str = ""


def memory_pools(node: Any) -> tuple[MemoryPool, ...]:
    """The node's memory pool (its ``shared_memory`` devices), or none when fewer than two share."""
    names = tuple(n for n in node.shared_memory if n in node.device_names)
    if len(names) < 2:
        return ()
    bws = []
    for n in names:
        dev = node.device(n).device
        bws.append((float(dev.main_memory.read_bandwidth_bytes_per_s) * float(dev.efficiency.dram_bandwidth_fraction),
                    n))
    bw, who = max(bws)
    src = (f"{who}: memory.{node.device(who).device.main_memory.name}.read_bandwidth x "
           "efficiency.dram_bandwidth_fraction (the largest of the pool's devices)")
    return (MemoryPool(f"{node.name} shared DRAM", names, bw, src),)


class PoolSharing:
    """DRAM bandwidth of a :class:`MemoryPool` divided among the kernels running on its devices at one
    instant: the max-min fair point of :func:`simulator.engines.contention.share` (processor sharing of
    the bandwidth, no kernel above its standalone speed), memoised by the demands.

    Examples
    --------
    Two kernels that each alone move the whole bandwidth run at half speed together; a kernel that
    needs a quarter of it keeps full speed beside one that wants it all:

    >>> s = PoolSharing(MemoryPool("p", ("a", "b"), 100e9))
    >>> s.speeds((100e9, 100e9)), s.speeds((25e9, 100e9))
    ((0.5, 0.5), (1.0, 0.75))
    """

    def __init__(self, pool: MemoryPool) -> None:
        from simulator.engines.contention import DeviceCapacity

        self.pool = pool
        self.bandwidth = float(pool.bandwidth_bytes_per_s)
        # one shared resource: DRAM (no SM slots: each kernel runs on its own engine)
        self.capacity = DeviceCapacity(name=pool.name, units=1, max_ctas_per_sm=1, dram_bytes_per_s=self.bandwidth)
        self._memo: dict[tuple[float, ...], tuple[float, ...]] = {}

    def speeds(self, rates: Sequence[float]) -> tuple[float, ...]:
        """Speed (standalone seconds per second, in (0, 1]) of each kernel whose work part moves
        ``rates[i]`` B/s at standalone speed (0: no DRAM use, a fixed part, or an idle engine)."""
        raw = tuple(rates)
        got = self._memo.get(raw)
        if got is not None:
            return got
        key = tuple(min(float(r), self.bandwidth) for r in raw)
        if sum(key) <= self.bandwidth:
            got = (1.0,) * len(key)
        else:
            from simulator.engines.contention import KernelDemand, Running, share

            # each kernel as one second of work moving rate bytes, on no SM slot (sm_fraction 0)
            kernels = [Running(KernelDemand(f"k{i}", time_s=1.0, work_s=1.0, dram_bytes=r, sm_fraction=0.0), seq=i)
                       for i, r in enumerate(key)]
            got = tuple(sh.speed if r > 0 else 1.0 for sh, r in zip(share(self.capacity, kernels), key, strict=True))
        if len(self._memo) < _MEMO_LIMIT:
            self._memo[raw] = got
        return got


def device_aliases(node: Any) -> dict[str, str]:
    """Names a task may use for each device of ``node``: its instance name, and for a one-device node
    also the device's kind (``gpu``) and catalog name."""
    names = {d.name: d.name for d in node.devices}
    if len(node.devices) == 1:
        d = node.devices[0]
        names.setdefault(d.kind, d.name)
        names.setdefault(d.spec.name, d.name)
    return names


def resolve_node(hardware: Any, *, calibration: str | None = None) -> Any:
    """A :class:`hwmodels.node.NodeSpec` for ``--hardware``: a catalog node or node TOML, else a catalog
    device or system (or its TOML) as a node of one device named after its kind (``gpu``)."""
    from hwmodels.node import NodeSpec, is_node_file, list_nodes, load_node, node_from_spec
    from hwmodels.spec import DeviceSpec, SystemSpec

    if isinstance(hardware, NodeSpec):
        return hardware
    if isinstance(hardware, (DeviceSpec, SystemSpec)):
        dev = hardware.device if isinstance(hardware, SystemSpec) else hardware
        return node_from_spec(hardware, name=dev.kind)
    text = str(hardware)
    base, at, mode = text.rpartition("@")
    if at and base.strip() and mode.strip() and "/" not in mode and not mode.endswith(".toml"):
        return node_in_power_mode(resolve_node(base, calibration=calibration), mode)
    node = None
    if text.strip().lower() in {n.lower() for n in list_nodes()}:
        node = load_node(text)
    elif text.endswith(".toml") and Path(text).is_file():
        from hwmodels.loader import read_toml

        if is_node_file(read_toml(text)):
            node = load_node(text)
    if node is not None:
        if calibration:
            raise ValueError(f"--calibration: a node has several devices; got --calibration with node {text!r}; "
                             "expected a calibration overlay on a single device (--hardware DEVICE)")
        return node
    from simulator.hardware import load_hardware

    return resolve_node(load_hardware(text, calibration))


def node_in_power_mode(node: Any, mode: str) -> Any:
    """``node`` with every device that ships power mode ``mode`` (``hwmodels/catalog/power_modes/``) in
    that mode; devices without modes (a host CPU) keep their spec. Raises SpecError when no device has it."""
    import dataclasses

    from hwmodels.loader import apply_power_mode, list_power_modes
    from hwmodels.spec import SpecError

    new, applied = [], []
    for d in node.devices:
        if mode.strip().lower() in list_power_modes(d.device.name):
            new.append(dataclasses.replace(d, spec=apply_power_mode(d.spec, mode)))
            applied.append(d.name)
        else:
            new.append(d)
    if not applied:
        have = sorted({m for d in node.devices for m in list_power_modes(d.device.name)})
        raise SpecError(f"{node.name}@{mode}: power mode: no device of the node has it; got {mode!r}; expected "
                        f"{'one of ' + ', '.join(have) if have else 'a node with power modes (none of its devices has any)'}"
                        f"{did_you_mean(mode.strip().lower(), have)}")
    return dataclasses.replace(node, name=f"{node.name}@{mode.strip().lower()}", devices=tuple(new))


def apply_node_overlay(node: Any, overlay: str | Path, devices: Sequence[str] | None = None) -> Any:
    """``node`` with the overlay file applied to ``devices`` (default: the devices of the catalog device its
    ``[calibration] device`` names, as power-mode and calibration overlays do, else every device whose spec
    has all the overlay's paths). Raises SpecError when no device accepts it."""
    import dataclasses

    from hwmodels.loader import apply_overlay, read_toml
    from hwmodels.spec import SpecError

    meta = read_toml(overlay).get("calibration", {})
    fitted = str(meta.get("device", "")).lower() if isinstance(meta, Mapping) else ""
    if devices:
        targets = list(devices)
    elif fitted:
        targets = [d.name for d in node.devices if d.device.name.lower() == fitted]
        if not targets:
            raise SpecError(f"{overlay}: calibration.device: no device of node {node.name!r} is {fitted!r}; got "
                            f"{', '.join(sorted({d.device.name for d in node.devices}))}; expected an overlay of one of "
                            "the node's devices")
    else:
        targets = [d.name for d in node.devices]
    new, applied, errors = [], [], []
    for d in node.devices:
        if d.name not in targets:
            new.append(d)
            continue
        try:
            spec = apply_overlay(d.spec, str(overlay))
        except SpecError as exc:
            errors.append(f"{d.name}: {str(exc).splitlines()[0]}")
            new.append(d)
            continue
        new.append(dataclasses.replace(d, spec=spec))
        applied.append(d.name)
    if not applied:
        raise SpecError(f"{overlay}: no device of node {node.name!r} accepts this overlay; got "
                        f"{'; '.join(errors) or 'no device'}; expected an overlay of one of the node's devices")
    return dataclasses.replace(node, devices=tuple(new))


def _eval_options(scn: Scenario) -> Any:
    from simulator.engines.options import options_from_settings

    return options_from_settings(scn.options, where=f"{scn.where}: options")


def _segments_of(report: Any) -> list[float]:
    """One segment per kernel in execution order; fused ops lengthen their producer's segment."""
    return _kernels_of(report, None)[0]


def _kernels_of(report: Any, capacity: Any) -> tuple[list[float], list[float], list[float]]:
    """(segment times, fixed parts, DRAM bytes) per kernel in execution order (s, s, B).

    Each record is split by :meth:`simulator.engines.contention.KernelDemand.from_record` (fixed part
    ``time_s - max(compute_s, memory_s)``, DRAM bytes of its work part); an op fused into its producer
    adds its fixed part, time and bytes to that kernel. ``capacity`` None: times only.
    """
    from simulator.engines.contention import KernelDemand

    segs: list[float] = []
    fixed: list[float] = []
    dram: list[float] = []
    for r in report.records:
        if r.time_s <= 0:
            continue
        if capacity is not None:
            d = KernelDemand.from_record(r, capacity)
            f, b = d.fixed_s, d.dram_bytes
        else:
            f = b = 0.0
        if r.fused_into and segs:
            segs[-1] += r.time_s
            fixed[-1] += f
            dram[-1] += b
        else:
            segs.append(float(r.time_s))
            fixed.append(f)
            dram.append(b)
    return segs, fixed, dram


class _Coster:
    """Costs (task, device, values) -> Variant, memoised by the resolved model and device."""

    def __init__(self, scn: Scenario, node: Any) -> None:
        self.scn = scn
        self.node = node
        self.opts = _eval_options(scn)
        self.cache: dict[tuple[Any, ...], Variant] = {}
        self.warnings: dict[str, set[str]] = {}
        self.capacity: dict[str, Any] = {}

    def __call__(self, task: TaskSpec, device: str, values: Mapping[str, int]) -> Variant:
        from simulator.engines.analytical import evaluate
        from workloads.resolve import load_workload

        model, kw = task.resolved(values)
        if model.lower().endswith((".json", ".onnx")) and not Path(model).is_absolute():
            model = str(Path(self.scn.folder) / model)
        key = (model, tuple(sorted(kw.items())), device)
        got = self.cache.get(key)
        if got is not None:
            return got
        nd = self.node.device(device)
        shown = f" with {', '.join(f'{k}={v}' for k, v in values.items())}" if values else ""
        try:
            graph = load_workload(model, **kw)
        except (ValueError, KeyError, FileNotFoundError, NotImplementedError) as exc:
            msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
            hint = "; expected a model that builds at every value of its variables (their min and max set the " \
                   "range)" if values else ""
            raise ScenarioError(f"{task.where}.model: cannot build {model!r}{shown}; got {msg}{hint}") from None
        try:
            report = evaluate(graph, nd.spec, self.opts)
        except NotImplementedError as exc:
            raise ScenarioError(f"{task.where}.device: {device} ({nd.spec.name}) cannot run {model!r}; got {exc}; "
                                "expected a device with a lowering for every op of the model (try another "
                                "device, or device = \"auto\")") from None
        except ValueError as exc:
            raise ScenarioError(f"{task.where}.device: {device} ({nd.spec.name}) cannot cost {model!r}{shown}; "
                                f"got {exc}") from None
        self.warnings.setdefault(task.name, set()).update(report.warnings)
        cap = self.capacity.get(device)
        if cap is None:
            from simulator.engines.contention import DeviceCapacity

            cap = self.capacity[device] = DeviceCapacity.of(nd.device)
        segs, fixed, dram = _kernels_of(report, cap)
        got = Variant.of(segs, fixed, dram, output_bytes=float(sum(t.nbytes for t in graph.outputs)))
        self.cache[key] = got
        return got


def _support(scn: Scenario, task: TaskSpec) -> tuple[dict[str, tuple[int, ...]], bool]:
    # count first (a variable with max = 1e9 has 10^9 values: never build them)
    sizes = {v: scn.variable(v).distribution.support_size(scn.bound_quantile) for v in task.variables}
    n = math.prod(sizes.values())
    if n > MAX_SUPPORT:
        raise ScenarioError(f"{task.where}: {n} distinct job sizes to cost; got variables "
                            f"{', '.join(f'{k} ({s} values)' for k, s in sizes.items())}; expected at most "
                            f"{MAX_SUPPORT} (give the variables a smaller max)")
    support: dict[str, tuple[int, ...]] = {}
    exact = True
    for v in task.variables:
        dist = scn.variable(v).distribution
        support[v] = dist.support(scn.bound_quantile)
        exact = exact and dist.upper(scn.bound_quantile)[1]
    return support, exact


def place_tasks(scn: Scenario, node: Any, coster: _Coster | None = None) -> dict[str, str]:
    """Device instance name of every task: its ``device`` key resolved, and ``"auto"`` tasks placed by
    worst-fit decreasing utilisation (each on the device where the largest device utilisation after
    placing it is smallest; a device that cannot run the model is skipped).

    Raises
    ------
    ScenarioError
        Every task placed on a device the node lacks (with the node's devices and a near match).
    """
    alias = device_aliases(node)
    problems, placed = [], {}
    auto = []
    for t in scn.tasks:
        pick = next((d for d in t.device if d == "auto" or d in alias), None)
        if pick == "auto":
            auto.append(t)
        elif pick is None:
            names = sorted(alias)
            got = t.device[0] if len(t.device) == 1 else list(t.device)
            problems.append(f"{t.where}.device: the node {node.name!r} has no device {got!r}; got {got!r}; expected "
                            f"one of {', '.join(names)} or \"auto\"{did_you_mean(t.device[0], names)}")
        else:
            placed[t.name] = alias[pick]
    if problems:
        from nodeperf.suggest import format_problems

        raise ScenarioError(format_problems(scn.where, problems, "scenario"), problems)
    if not auto:
        return placed
    coster = coster or _Coster(scn, node)
    util: dict[str, float] = dict.fromkeys((d.name for d in node.devices), 0.0)
    for t in scn.tasks:
        if t.name in placed:
            util[placed[t.name]] += _wcet(scn, t, placed[t.name], coster) / _min_interval(scn, t)
    demand: list[tuple[float, str, dict[str, float]]] = []
    for t in auto:
        per_dev: dict[str, float] = {}
        errors = []
        for d in node.devices:
            try:
                per_dev[d.name] = _wcet(scn, t, d.name, coster) / _min_interval(scn, t)
            except ScenarioError as exc:
                errors.append(str(exc))
        if not per_dev:
            raise ScenarioError(f"{t.where}.device: no device of node {node.name!r} can run {t.model!r}; got "
                                f"{' | '.join(errors)}")
        demand.append((max(per_dev.values()), t.name, per_dev))
    for _, name, per_dev in sorted(demand, key=lambda x: (-x[0], x[1])):
        best = min(per_dev, key=lambda d: (max(util[d] + per_dev[d], *(u for k, u in util.items() if k != d)),
                                           per_dev[d], list(util).index(d)))
        placed[name] = best
        util[best] += per_dev[best]
    return placed


def _wcet(scn: Scenario, t: TaskSpec, device: str, coster: _Coster) -> float:
    support, _ = _support(scn, t)
    top = {v: max(s) for v, s in support.items()}
    return coster(t, device, top).work_s


def _min_interval(scn: Scenario, t: TaskSpec) -> float:
    """Shortest interval between a task's releases in the long run: its period, or its source's."""
    by = {x.name: x for x in scn.tasks}
    while not t.is_source:
        t = by[t.trigger]
    return float(t.period_s)


def cost_scenario(scn: Scenario, node: Any, *, transfers: bool = True,
                  progress: bool | None = None) -> dict[str, TaskCost]:
    """Every task placed and costed over its variables' support (the bound's sizes), with the transfers
    of its inputs from predecessors on other devices (``transfers=False``: none, devices exchange
    data for free). ``progress``: a bar per task on standard error (None: see
    :func:`simulator.report.progress.progress_enabled`).

    Raises
    ------
    ScenarioError
        A predecessor on a device with no link to the task's device (with ``transfers``).
    """
    import dataclasses

    from simulator.report.progress import track

    coster = _Coster(scn, node)
    placed = place_tasks(scn, node, coster)
    out: dict[str, TaskCost] = {}
    for t in track(scn.tasks, desc="costing tasks", unit="task", enabled=progress):
        support, exact = _support(scn, t)
        variants: dict[tuple[int, ...], Variant] = {}
        keys = list(itertools.product(*(support[v] for v in t.variables))) if t.variables else [()]
        for key in keys:
            variants[key] = coster(t, placed[t.name], dict(zip(t.variables, key, strict=True)))
        out[t.name] = TaskCost(t, placed[t.name], variants, support, exact,
                               tuple(sorted(coster.warnings.get(t.name, ()))), coster)
    if transfers:
        inputs = input_transfers(scn, node, out)
        for name, xs in inputs.items():
            out[name] = dataclasses.replace(out[name], inputs=xs, _jobs={})
    return out


def input_transfers(scn: Scenario, node: Any, costs: Mapping[str, TaskCost]) -> dict[str, tuple[InputTransfer, ...]]:
    """The :class:`InputTransfer` of every edge ``a -> b`` whose tasks run on different devices, per
    consumer ``b`` in ``after`` order (tasks with none are left out).

    Raises
    ------
    ScenarioError
        Every such edge between devices the node has no link between, at once.
    """
    problems: list[str] = []
    out: dict[str, tuple[InputTransfer, ...]] = {}
    for t in scn.tasks:
        dst = costs[t.name].device
        xs = []
        for a in t.after:
            src = costs[a].device
            if src == dst:
                continue
            link = node.link(src, dst)
            if link is None:
                linked = sorted({ln.b if ln.a == dst else ln.a for ln in node.links if dst in ln.ends})
                problems.append(f"{t.where}.after: {a!r} runs on {src} and {t.name!r} on {dst}, and node {node.name!r} "
                                f"has no link between them; got no [[links]] entry {src}-{dst}; expected the two tasks "
                                f"on one device or on linked devices ({dst} is linked to "
                                f"{', '.join(linked) or 'nothing'})")
                continue
            shared = link.kind == "shared-memory" and node.shares_memory(src, dst)
            sizes = tuple(sorted({v.output_bytes for v in costs[a].variants.values()}))
            xs.append(InputTransfer(a, src, dst, link, _SHARED_MEMORY_PASSES if shared else 0.0, sizes))
        if xs:
            out[t.name] = tuple(xs)
    if problems:
        from nodeperf.suggest import format_problems

        raise ScenarioError(format_problems(scn.where, problems, "scenario"), problems)
    return out
