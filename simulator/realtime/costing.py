"""Cost a scenario's tasks on a node: resolve ``--hardware`` to a node, place each task on a device,
and turn each task's model into the sequence of kernel times a job runs, per input-dependent size.

A job is the task's graph costed by the analytical engine (:func:`simulator.engines.analytical.evaluate`)
on its device: one non-preemptible *segment* per kernel, in the engine's execution order (an
elementwise op fused into its producer lengthens that kernel; views take no time and no segment).
Tasks whose model names a variable (``gemm:m={objects},...``) are re-costed once per distinct value
(memoised), so the simulator and the bound use the exact kernel times of every size.
"""

from __future__ import annotations

import bisect
import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeperf.suggest import did_you_mean
from simulator.realtime.scenario import MAX_SUPPORT, Scenario, ScenarioError, TaskSpec

__all__ = ["Variant", "TaskCost", "resolve_node", "node_in_power_mode", "apply_node_overlay", "cost_scenario",
           "place_tasks", "device_aliases"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Variant:
    """The kernels of one job size: segment times (s) and their running sums for fast lookups."""

    segments: tuple[float, ...]
    prefix: tuple[float, ...]  # prefix[k] = sum(segments[:k]); len = len(segments) + 1

    @classmethod
    def of(cls, segments: Sequence[float]) -> Variant:
        """The variant of kernel times ``segments`` (s), with their running sums."""
        return cls(tuple(segments), tuple(itertools.accumulate(segments, initial=0.0)))

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


@dataclass
class TaskCost:
    """A task's costs on its device: the variant of every variable value in the bound's support."""

    task: TaskSpec
    device: str
    variants: dict[tuple[int, ...], Variant]
    support: dict[str, tuple[int, ...]]
    exact_bound: bool  # False: an unbounded variable; the bound holds up to its quantile
    warnings: tuple[str, ...] = ()
    _coster: Any = field(default=None, repr=False)

    @property
    def wcet_s(self) -> float:
        """Largest job work over the support (s)."""
        return max(v.work_s for v in self.variants.values())

    @property
    def bcet_s(self) -> float:
        """Smallest job work over the support (s)."""
        return min(v.work_s for v in self.variants.values())

    @property
    def longest_kernel_s(self) -> float:
        """Longest single kernel over the support (s): what this task can block others by."""
        return max(v.longest_s for v in self.variants.values())

    def variant(self, values: Mapping[str, int]) -> Variant:
        """The variant for ``values`` (costed on demand and memoised outside the support)."""
        key = tuple(int(values[v]) for v in self.task.variables)
        got = self.variants.get(key)
        if got is None:
            got = self._coster(self.task, self.device, dict(zip(self.task.variables, key, strict=True)))
            self.variants[key] = got
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
    from simulator.engines.analytical import EvalOptions

    return EvalOptions(**scn.options)


def _segments_of(report: Any) -> list[float]:
    """One segment per kernel in execution order; fused ops lengthen their producer's segment."""
    segs: list[float] = []
    for r in report.records:
        if r.time_s <= 0:
            continue
        if r.fused_into and segs:
            segs[-1] += r.time_s
        else:
            segs.append(float(r.time_s))
    return segs


class _Coster:
    """Costs (task, device, values) -> Variant, memoised by the resolved model and device."""

    def __init__(self, scn: Scenario, node: Any) -> None:
        self.scn = scn
        self.node = node
        self.opts = _eval_options(scn)
        self.cache: dict[tuple[Any, ...], Variant] = {}
        self.warnings: dict[str, set[str]] = {}

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
        got = Variant.of(_segments_of(report))
        self.cache[key] = got
        return got


def _support(scn: Scenario, task: TaskSpec) -> tuple[dict[str, tuple[int, ...]], bool]:
    support: dict[str, tuple[int, ...]] = {}
    exact = True
    for v in task.variables:
        dist = scn.variable(v).distribution
        support[v] = dist.support(scn.bound_quantile)
        exact = exact and dist.upper(scn.bound_quantile)[1]
    n = 1
    for vals in support.values():
        n *= len(vals)
    if n > MAX_SUPPORT:
        raise ScenarioError(f"{task.where}: {n} distinct job sizes to cost; got variables "
                            f"{', '.join(f'{k} ({len(s)} values)' for k, s in support.items())}; expected at most "
                            f"{MAX_SUPPORT} (give the variables a smaller max)")
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


def cost_scenario(scn: Scenario, node: Any) -> dict[str, TaskCost]:
    """Every task placed and costed over its variables' support (the bound's sizes)."""
    coster = _Coster(scn, node)
    placed = place_tasks(scn, node, coster)
    out: dict[str, TaskCost] = {}
    for t in scn.tasks:
        support, exact = _support(scn, t)
        variants: dict[tuple[int, ...], Variant] = {}
        keys = list(itertools.product(*(support[v] for v in t.variables))) if t.variables else [()]
        for key in keys:
            variants[key] = coster(t, placed[t.name], dict(zip(t.variables, key, strict=True)))
        out[t.name] = TaskCost(t, placed[t.name], variants, support, exact,
                               tuple(sorted(coster.warnings.get(t.name, ()))), coster)
    return out
