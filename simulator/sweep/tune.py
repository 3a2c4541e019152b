"""Constrained search for the best configuration of a workload: constraints, search space, search
strategies (exhaustive with pruning, seeded random, Gaussian-process Bayesian optimisation) and the
result with its best configurations and its rejected ones, each with the reason.

The search knows nothing of graphs or hardware: a *problem* (``simulator.sweep.tune_model`` for a
model on GPUs/TPUs, ``simulator.sweep.tune_systolic`` for systolic-array design) supplies the
search space, a cheap pre-check run before the costly evaluation (memory feasibility, area/SRAM
budgets) and the evaluation itself, both returning metrics by name (SI units, see :data:`METRICS`).

Pruning: a configuration whose pre-check fails (it does not fit in device memory) or whose
pre-check metrics already break a constraint is rejected without being evaluated. Pre-check
metrics listed in ``problem.lower_bound_metrics`` are lower bounds of the evaluated ones (a
training pipeline's activation stash is only known after its schedule), so only upper-bound
constraints (``<=``, ``<``) prune on them; the evaluated value is checked again afterwards.

Determinism: every random draw comes from ``numpy.random.default_rng(seed)``; candidates are
visited in index order where the strategy leaves a choice; ties are broken by the lower index.

Examples
--------
>>> c = parse_constraint("ttft_s<=200 ms")
>>> c.metric, c.op, c.value
('ttft_s', '<=', 0.2)
>>> parse_constraint("memory_per_device <= 0.9*capacity").bound({"capacity": 80e9})
72000000000.0
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from hwmodels.units import METRIC_UNITS
from nodeperf.errors import NodeperfError

__all__ = [
    "TuneError", "Metric", "METRICS", "OBJECTIVES", "Constraint", "parse_constraint", "Axis", "SearchSpace",
    "Problem", "Trial", "TuneResult", "tune", "SEARCH_METHODS", "format_metric", "DEFAULT_TRIALS",
]

logger = logging.getLogger(__name__)

#: Search strategies; ``auto`` picks exhaustive when the space has at most ``trials`` configurations.
SEARCH_METHODS: tuple[str, ...] = ("auto", "exhaustive", "random", "bayes")
#: Evaluations a random or Bayesian search may spend by default.
DEFAULT_TRIALS = 64


class TuneError(NodeperfError, ValueError):
    """A tuning request that cannot run: bad constraint, objective, space or device list."""


@dataclass(frozen=True)
class Metric:
    """A quantity a configuration is judged by: its SI unit and what it means."""

    name: str
    unit: str
    description: str


_METRIC_LIST = (
    Metric("latency_s", "s", "time of one step (inference batch, training iteration) or one whole request"),
    Metric("throughput_per_s", "1/s", "samples (sequences, images, requests) per second over all devices"),
    Metric("tokens_per_s", "1/s", "tokens per second (LLMs; generated tokens for --phase generate)"),
    Metric("energy_j", "J", "energy of the step or request on every device used"),
    Metric("energy_per_sample_j", "J", "energy_j per sample"),
    Metric("power_w", "W", "average power per device over the step (energy_j / latency_s / devices)"),
    Metric("memory_per_device", "B", "resident bytes of the worst device (weights, activations, KV cache, "
                                     "gradients, optimizer state)"),
    Metric("capacity", "B", "main-memory capacity of one device"),
    Metric("ttft_s", "s", "time to first token (LLM prefill or generate)"),
    Metric("tpot_s", "s", "time per output token (LLM decode or generate)"),
    Metric("mfu", "1", "model FLOPs utilisation"),
    Metric("devices", "count", "devices the configuration occupies"),
    Metric("cost_per_hour", "USD/h", "hourly price of the devices used"),
    Metric("cost_per_million_samples", "USD", "device cost of one million samples at the predicted throughput"),
    Metric("cost_per_million_tokens", "USD", "device cost of one million tokens (as tokens_per_s counts them) at "
                                             "the predicted throughput"),
    Metric("cost_per_step", "USD", "device cost of one training step"),
    Metric("cycles", "cycles", "systolic array: cycles of the whole network"),
    Metric("stall_cycles", "cycles", "systolic array: cycles waiting on DRAM"),
    Metric("util_pct", "%", "systolic array: MACs / (cycles x PEs), percent"),
    Metric("pes", "count", "systolic array: processing elements (rows x cols), the area budget"),
    Metric("sram_bytes", "B", "systolic array: total scratchpad bytes (ifmap + filter + ofmap)"),
    Metric("dram_words", "words", "systolic array: DRAM words moved"),
)
#: Every metric a constraint or objective may name.
METRICS: dict[str, Metric] = {m.name: m for m in _METRIC_LIST}

#: Objective name -> (metric, direction) for model problems (systolic problems map their own).
OBJECTIVES: dict[str, tuple[str, str]] = {
    "latency": ("latency_s", "min"),
    "throughput": ("throughput_per_s", "max"),
    "energy": ("energy_per_sample_j", "min"),
    "cost": ("cost_per_million_samples", "min"),
}

_OPS = ("<=", ">=", "<", ">")
_CONSTRAINT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(<=|>=|<|>|==|=|!=|=<|=>)\s*(.*?)\s*$")
_NUMBER = r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_REF = re.compile(rf"^(?:({_NUMBER})\s*\*\s*)?([A-Za-z_][A-Za-z0-9_]*)$")
_QUANTITY = re.compile(rf"^\$?\s*({_NUMBER})\s*(.*)$")
_UNIT_EXAMPLES = {"s": "'0.2', '200 ms' or '50 us'", "B": "'80 GiB' or '0.9*capacity'", "W": "'700 W'",
                  "J": "'5 J' or '300 mJ'", "1/s": "'1000' or '1000 samples/s'", "USD/h": "'40' or '$40/h'",
                  "USD": "'2.5' or '$2.5'", "%": "'80' or '80 %'", "1": "'0.5' or '50 %'", "count": "'4096'",
                  "cycles": "'1e6' or '1 Mcycles'", "words": "'1e6' or '1 Mwords'"}


def format_metric(name: str, value: float) -> str:
    """A metric value in human units (``ms``, ``GiB``, ``W``...) for messages and tables."""
    from simulator.report.formatting import si

    unit = METRICS[name].unit if name in METRICS else ""
    v = float(value)
    if not math.isfinite(v):
        return f"{v:g}"
    if unit == "B":
        return f"{v / 2**30:.2f} GiB" if abs(v) >= 2**25 else f"{v / 2**10:.1f} KiB"
    if unit in ("s", "J", "W"):
        return si(v, unit, digits=4)
    if unit == "1/s":
        return si(v, "/s", digits=4)
    if unit == "USD/h":
        return f"${v:.2f}/h"
    if unit == "USD":
        return f"${v:.4g}"
    if unit == "%":
        return f"{v:.2f} %"
    if unit == "1":
        return f"{100 * v:.1f} %"
    if unit in ("count", "cycles", "words"):
        return f"{v:,.0f}" if abs(v) < 1e15 else f"{v:.4g}"
    return f"{v:.4g}"


def _parse_value(metric: Metric, text: str, where: str) -> float:
    """``text`` ("0.2", "200 ms", "80 GiB", "700 W") in the SI unit of ``metric``."""
    expected = f"a number with an optional unit of {metric.name} ({metric.unit}), such as " \
               f"{_UNIT_EXAMPLES.get(metric.unit, repr('1'))}"
    m = _QUANTITY.match(text)
    if not m:
        raise TuneError(f"{where}: cannot read a value; got {text!r}; expected {expected}")
    number, unit = float(m.group(1)), m.group(2).strip()
    if not math.isfinite(number):
        raise TuneError(f"{where}: not a finite value; got {text!r}; expected {expected}")
    if not unit:
        return number
    if metric.unit in ("s", "B", "W"):
        from hwmodels.units import parse_quantity

        try:
            return parse_quantity(f"{m.group(1)} {unit}", metric.unit)
        except ValueError as exc:
            raise TuneError(f"{where}: {exc}") from None
    table = METRIC_UNITS.get(metric.unit, {})
    if unit in table:
        return number * table[unit]
    from nodeperf.suggest import did_you_mean

    raise TuneError(f"{where}: unit {unit!r} is not a unit of {metric.name} ({metric.unit}); got {text!r}; "
                    f"expected {expected}{did_you_mean(unit, list(table))}")


@dataclass(frozen=True)
class Constraint:
    """``metric op value`` or ``metric op factor*reference`` (e.g. ``memory_per_device<=0.9*capacity``).

    Attributes
    ----------
    metric, op
        The constrained metric (a key of :data:`METRICS`) and one of ``<=``, ``<``, ``>=``, ``>``.
    value
        The bound in the metric's SI unit, or the factor applied to ``reference``.
    reference
        ``""`` for a fixed bound, else the metric the bound scales (``"capacity"``).
    text
        The constraint as the user wrote it (for messages).
    """

    metric: str
    op: str
    value: float
    reference: str = ""
    text: str = ""

    @property
    def upper(self) -> bool:
        """Whether the constraint caps the metric from above (``<=``, ``<``)."""
        return self.op in ("<=", "<")

    def bound(self, metrics: Mapping[str, float]) -> float:
        """The bound for one configuration (a reference is read from its metrics)."""
        return self.value * float(metrics[self.reference]) if self.reference else self.value

    def holds(self, metrics: Mapping[str, float]) -> bool:
        v, b = float(metrics[self.metric]), self.bound(metrics)
        return {"<=": v <= b, "<": v < b, ">=": v >= b, ">": v > b}[self.op]

    def violation(self, metrics: Mapping[str, float]) -> float:
        """Relative distance to the bound (0 when the constraint holds)."""
        if self.holds(metrics):
            return 0.0
        v, b = float(metrics[self.metric]), self.bound(metrics)
        return abs(v - b) / max(abs(b), 1e-300)

    def reason(self, metrics: Mapping[str, float]) -> str:
        """Why the constraint fails: ``misses ttft_s<=200 ms by 35.1 ms (predicted 235.1 ms)``."""
        v, b = float(metrics[self.metric]), self.bound(metrics)
        gap = format_metric(self.metric, abs(v - b))
        got = format_metric(self.metric, v)
        bound = format_metric(self.metric, b)
        ref = f" ({self.value:g} x {self.reference} = {bound})" if self.reference else ""
        side = "over" if self.upper else "under"
        if METRICS[self.metric].unit == "s":
            return f"misses the SLO {self.text}{ref} by {gap} (predicted {got})"
        if self.metric == "memory_per_device":
            return f"breaks {self.text}{ref}: needs {got}, limit {bound} ({gap} over)"
        return f"breaks {self.text}{ref}: {got}, limit {bound} ({gap} {side})"


def parse_constraint(text: str, allowed: Iterable[str] | None = None) -> Constraint:
    """Parse ``METRIC OP VALUE`` without ``eval``.

    ``VALUE`` is a number with an optional unit of the metric's dimension ("0.2", "200 ms",
    "80 GiB", "700 W") or ``k*capacity`` / ``capacity``.

    Parameters
    ----------
    text
        The constraint, e.g. ``"ttft_s<=0.2"``.
    allowed
        Metrics this problem produces (default: all of :data:`METRICS`); another name is an error.

    Raises
    ------
    TuneError
        Malformed expression, unknown metric (with the nearest name), metric not produced, bad
        value or unit; one line naming the constraint.
    """
    from nodeperf.suggest import did_you_mean

    where = f"--constraint {text!r}"
    names = sorted(allowed) if allowed is not None else sorted(METRICS)
    m = _CONSTRAINT.match(text or "")
    if not m:
        raise TuneError(f"{where}: malformed constraint; got {text!r}; expected METRIC OP VALUE with OP one of "
                        f"{', '.join(_OPS)} (e.g. 'ttft_s<=0.2', 'memory_per_device<=0.9*capacity')")
    name, op, rhs = m.group(1), m.group(2), m.group(3)
    if op not in _OPS:
        raise TuneError(f"{where}: operator {op!r} is not supported; got {op!r}; expected one of {', '.join(_OPS)}")
    if name not in METRICS:
        raise TuneError(f"{where}: unknown metric {name!r}; got {name!r}; expected one of {', '.join(names)}"
                        f"{did_you_mean(name, names)}")
    if name not in names:
        raise TuneError(f"{where}: metric {name!r} is not produced by this search; got {name!r}; expected one of "
                        f"{', '.join(names)}")
    if not rhs:
        raise TuneError(f"{where}: missing value after {op!r}; got {text!r}; expected METRIC OP VALUE")
    metric = METRICS[name]
    ref = _REF.match(rhs.replace(" ", ""))
    if ref and not re.fullmatch(_NUMBER, rhs.replace(" ", "")):
        factor = float(ref.group(1)) if ref.group(1) is not None else 1.0
        target = ref.group(2)
        if target != "capacity" or metric.unit != "B":
            refs = "capacity" if metric.unit == "B" else "none for this metric"
            raise TuneError(f"{where}: {target!r} cannot scale a bound of {name}; got {rhs!r}; expected a number with "
                            f"a unit (references: {refs})"
                            f"{did_you_mean(target, ['capacity']) if target != 'capacity' else ''}")
        if "capacity" not in names:
            raise TuneError(f"{where}: this search has no device capacity; got {rhs!r}; expected a size such as "
                            "'80 GiB'")
        if not math.isfinite(factor) or factor <= 0:
            raise TuneError(f"{where}: factor of capacity must be positive; got {factor:g}; expected e.g. 0.9*capacity")
        return Constraint(name, op, factor, "capacity", text.strip())
    value = _parse_value(metric, rhs, where)
    if value < 0:  # no metric is negative: an upper bound below 0 rejected every configuration, a lower one none
        raise TuneError(f"{where}: negative bound; got {rhs!r}; expected a value >= 0 ({name} is never negative)")
    return Constraint(name, op, value, "", text.strip())


# --------------------------------------------------------------------------------------------- space


@dataclass(frozen=True)
class Axis:
    """One searched choice: its name, its values in order, and whether they are ordered numbers."""

    name: str
    values: tuple[Any, ...]
    numeric: bool = False

    def __post_init__(self) -> None:
        if not self.values:
            raise TuneError(f"search space: axis {self.name!r} has no values; got an empty list; expected at least one")


@dataclass(frozen=True)
class SearchSpace:
    """The Cartesian product of its axes; configuration ``i`` is the mixed-radix digit tuple of ``i``
    (last axis fastest)."""

    axes: tuple[Axis, ...]

    @property
    def size(self) -> int:
        return math.prod(len(a.values) for a in self.axes)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.axes)

    def coords(self, index: int) -> tuple[int, ...]:
        out = []
        for a in reversed(self.axes):
            index, r = divmod(index, len(a.values))
            out.append(r)
        return tuple(reversed(out))

    def index(self, coords: Sequence[int]) -> int:
        i = 0
        for a, c in zip(self.axes, coords, strict=True):
            i = i * len(a.values) + int(c)
        return i

    def config(self, index: int) -> dict[str, Any]:
        return {a.name: a.values[c] for a, c in zip(self.axes, self.coords(index), strict=True)}

    def features(self, indices: Sequence[int]) -> np.ndarray:
        """Points in [0, 1]^d for the surrogate model: ordered numeric axes by (log-)position, other
        axes one-hot scaled so two different values are at distance 1."""
        cols: list[np.ndarray] = []
        shape = tuple(len(a.values) for a in self.axes)
        co = np.stack(np.unravel_index(np.asarray(indices, dtype=np.int64), shape), axis=1).reshape(
            len(indices), len(self.axes))
        for j, a in enumerate(self.axes):
            n = len(a.values)
            if n == 1:
                continue
            if a.numeric:
                vals = np.array([float(v) for v in a.values])
                pos = np.log(vals) if np.all(vals > 0) else vals
                span = float(pos.max() - pos.min()) or 1.0
                cols.append(((pos[co[:, j]] - pos.min()) / span)[:, None])
            else:
                cols.append(np.eye(n)[co[:, j]] / math.sqrt(2.0))
        if not cols:
            return np.zeros((len(indices), 1))
        return np.hstack(cols)


# --------------------------------------------------------------------------------------------- problem


class Problem(Protocol):
    """What a search needs from a workload/hardware family (see the module docstring)."""

    space: SearchSpace
    #: metrics a constraint may name for this problem
    metrics: frozenset[str]
    #: pre-check metrics that are lower bounds of the evaluated ones
    lower_bound_metrics: frozenset[str]

    def valid(self, config: Mapping[str, Any]) -> bool:
        """Whether the configuration exists at all (e.g. a plan no larger than the system)."""

    def precheck(self, config: Mapping[str, Any]) -> tuple[dict[str, float], str]:
        """Cheap metrics known before evaluation and a rejection reason ("" when it may run)."""

    def evaluate(self, config: Mapping[str, Any]) -> dict[str, float]:
        """The metrics of one configuration (raises ValueError/NotImplementedError when unsupported).

        A problem may also define ``evaluate_many(configs) -> list[dict]``: the exhaustive search
        then costs the configurations that pass the pre-check in vectorised batches.
        """


@dataclass(frozen=True)
class Trial:
    """One visited configuration.

    ``status``: ``"ok"`` (meets every constraint), ``"pruned"`` (rejected by the pre-check, not
    evaluated), ``"rejected"`` (evaluated, breaks a constraint or does not fit) or ``"error"`` (the
    configuration is not supported: the reason says why).
    """

    index: int
    config: dict[str, Any]
    status: str
    metrics: dict[str, float] = field(default_factory=dict)
    reason: str = ""
    violation: float = 0.0

    def to_json(self, *, with_reason: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"config": dict(self.config)}
        if self.metrics:
            out["metrics"] = {k: float(v) for k, v in sorted(self.metrics.items())}
        if with_reason:
            out["reason"] = self.reason
            out["stage"] = {"pruned": "pruned before evaluation", "rejected": "evaluated",
                            "error": "not supported"}[self.status]
        return out


@dataclass(frozen=True)
class TuneResult:
    """What a search found: the best configurations, every rejected one with its reason, and counts."""

    objective: str
    metric: str
    direction: str
    method: str
    seed: int
    trials: int
    space: SearchSpace
    constraints: tuple[Constraint, ...]
    visited: tuple[Trial, ...]
    evaluations: int
    top: int = 5
    valid_size: int | None = None

    @property
    def feasible(self) -> list[Trial]:
        """Configurations meeting every constraint, best first (ties: lower index)."""
        ok = [t for t in self.visited if t.status == "ok"]
        sign = 1.0 if self.direction == "min" else -1.0
        return sorted(ok, key=lambda t: (sign * float(t.metrics[self.metric]), t.index))

    @property
    def best(self) -> list[Trial]:
        return self.feasible[: self.top]

    @property
    def rejected(self) -> list[Trial]:
        return [t for t in self.visited if t.status != "ok"]

    @property
    def pruned(self) -> int:
        return sum(t.status == "pruned" for t in self.visited)

    def nearest_rejected(self, k: int) -> list[Trial]:
        """The ``k`` rejected configurations nearest the best one (fewest axes changed, then the
        smallest steps along them); with no feasible configuration, the ``k`` closest to feasible."""
        rej = self.rejected
        best = self.best
        if not best:
            return sorted(rej, key=lambda t: (t.status == "error", t.violation, t.index))[:k]
        ref = self.space.coords(best[0].index)

        def dist(t: Trial) -> tuple[int, int, int]:
            c = self.space.coords(t.index)
            return (sum(a != b for a, b in zip(c, ref, strict=True)),
                    sum(abs(a - b) for a, b in zip(c, ref, strict=True)), t.index)

        return sorted(rej, key=dist)[:k]

    def to_json(self, *, rejected: int = 5, all_rejected: bool = False) -> dict[str, Any]:
        """The JSON contract: ``best`` (``config``, ``metrics``) and ``rejected`` (``config``,
        ``reason``), with the search's description and counts."""
        rej = self.rejected if all_rejected else self.nearest_rejected(rejected)
        return {
            "objective": self.objective, "metric": self.metric, "direction": self.direction,
            "search": self.method, "seed": self.seed, "trials": self.trials,
            "space": {"size": self.space.size, "valid": self.valid_size,
                      "axes": {a.name: list(a.values) for a in self.space.axes}},
            "constraints": [c.text for c in self.constraints],
            "visited": len(self.visited), "evaluated": self.evaluations, "pruned": self.pruned,
            "feasible": len(self.feasible), "rejected_total": len(self.rejected),
            "best": [t.to_json(with_reason=False) for t in self.best],
            "rejected": [t.to_json(with_reason=True) for t in rej],
        }


# --------------------------------------------------------------------------------------------- search


class _Runner:
    """Visits configurations once each, pruning before evaluation and recording every outcome."""

    def __init__(self, problem: Problem, constraints: Sequence[Constraint], metric: str) -> None:
        self.problem = problem
        self.constraints = tuple(constraints)
        self.metric = metric
        self.seen: dict[int, Trial] = {}
        self.evaluations = 0
        self.bar: Any = None  # a progress bar counting visited configurations (tune's ``progress``)

    def _record(self, index: int, trial: Trial) -> Trial:
        self.seen[index] = trial
        if self.bar is not None:
            self.bar.update(1)
        return trial

    def visit(self, index: int) -> Trial:
        if index in self.seen:
            return self.seen[index]
        config = self.problem.space.config(index)
        t = self._pre(index, config)
        if t is None:
            self.evaluations += 1
            try:
                metrics = self.problem.evaluate(config)
            except (ValueError, NotImplementedError) as exc:
                t = Trial(index, config, "error", reason=_message(exc), violation=math.inf)
            else:
                t = self._judge(index, config, metrics)
        return self._record(index, t)

    def visit_all(self, indices: Iterable[int], chunk: int = 4096) -> None:
        """Visit ``indices``; a problem with ``evaluate_many`` costs the unpruned ones in vectorised batches."""
        many = getattr(self.problem, "evaluate_many", None)
        if many is None:
            for i in indices:
                self.visit(i)
            return
        todo: list[tuple[int, dict[str, Any]]] = []

        def flush() -> None:
            try:
                results = many([c for _, c in todo])
            except (ValueError, NotImplementedError):  # locate the failing configurations one by one
                results = None
            for k, (i, c) in enumerate(todo):
                if results is None:
                    self.visit(i)
                    continue
                self.evaluations += 1
                self._record(i, self._judge(i, c, results[k]))
            todo.clear()

        for i in indices:
            if i in self.seen:
                continue
            config = self.problem.space.config(i)
            t = self._pre(i, config)
            if t is not None:
                self._record(i, t)
                continue
            todo.append((i, config))
            if len(todo) >= chunk:
                flush()
        if todo:
            flush()

    def _pre(self, index: int, config: dict[str, Any]) -> Trial | None:
        """The pruned (or unsupported) trial, or None when the configuration is to be evaluated."""
        p = self.problem
        try:
            pre, why = p.precheck(config)
        except (ValueError, NotImplementedError) as exc:
            return Trial(index, config, "error", reason=_message(exc), violation=math.inf)
        if why:
            need, have = pre.get("memory_per_device", 0.0), pre.get("capacity", 0.0)
            viol = need / have - 1.0 if have > 0 and need > have else 1.0
            return Trial(index, config, "pruned", metrics=dict(pre), reason=why, violation=viol)
        for c in self.constraints:
            if c.metric in pre and (c.reference == "" or c.reference in pre):
                if c.metric in p.lower_bound_metrics and not c.upper:
                    continue
                if not c.holds(pre):
                    return Trial(index, config, "pruned", metrics=dict(pre), reason=c.reason(pre),
                                 violation=c.violation(pre))
        return None

    def _judge(self, index: int, config: dict[str, Any], metrics: dict[str, float]) -> Trial:
        """The trial of evaluated ``metrics``: feasible, or rejected with every reason."""
        bad = [m for m, v in metrics.items() if not math.isfinite(float(v))]
        if bad or self.metric not in metrics:
            what = ", ".join(bad) or f"{self.metric} missing"
            return Trial(index, config, "error", metrics=metrics, reason=f"no finite prediction ({what})",
                         violation=math.inf)
        reasons = []
        viol = 0.0
        if metrics.get("memory_per_device", 0.0) > metrics.get("capacity", math.inf):
            need, have = metrics["memory_per_device"], metrics["capacity"]
            reasons.append(_fit_reason(need, have))
            viol += need / have - 1.0
        for c in self.constraints:
            if not c.holds(metrics):
                reasons.append(c.reason(metrics))
                viol += c.violation(metrics)
        if reasons:
            return Trial(index, config, "rejected", metrics=metrics, reason="; ".join(reasons), violation=viol)
        return Trial(index, config, "ok", metrics=metrics)


def _message(exc: BaseException) -> str:
    return f"not supported: {exc}"


def _fit_reason(need: float, have: float) -> str:
    """``does not fit: needs 93.2 GiB, has 80.0 GiB (13.2 GiB over)``."""
    g = 2.0**30
    return f"does not fit: needs {need / g:.1f} GiB, has {have / g:.1f} GiB ({(need - have) / g:.1f} GiB over)"


def _valid_indices(problem: Problem, limit: int = 2_000_000) -> list[int] | None:
    """Indices of the configurations that exist (None when the space is too large to list)."""
    space = problem.space
    if space.size > limit:
        return None
    return [i for i in range(space.size) if problem.valid(space.config(i))]


def _stream(rng: np.random.Generator, problem: Problem, valid: list[int] | None) -> Iterable[int]:
    """Valid indices in a seeded random order, each once."""
    if valid is not None:
        for j in rng.permutation(len(valid)):
            yield valid[int(j)]
        return
    size, drawn = problem.space.size, set()
    misses = 0
    while misses < 10_000:
        i = int(rng.integers(size))
        if i in drawn:
            misses += 1
            continue
        drawn.add(i)
        if problem.valid(problem.space.config(i)):
            misses = 0
            yield i
        else:
            misses += 1


def _score(t: Trial, metric: str, direction: str) -> float | None:
    """Minimised surrogate target of a feasible trial (log of the metric, negated for max)."""
    if t.status != "ok":
        return None
    v = float(t.metrics[metric])
    y = math.log(v) if v > 0 else v
    return y if direction == "min" else -y


def _gp_posterior(x: np.ndarray, y: np.ndarray, xq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard deviation of a zero-mean GP (squared-exponential kernel, unit variance on
    standardised targets) at ``xq``; the length scale maximises the marginal likelihood on a grid."""
    mu_y, sd_y = float(y.mean()), float(y.std()) or 1.0
    z = (y - mu_y) / sd_y
    d2 = ((x[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    dq = ((xq[:, None, :] - x[None, :, :]) ** 2).sum(-1)
    best: tuple[float, np.ndarray, np.ndarray] | None = None
    for ell in (0.1, 0.2, 0.4, 0.8, 1.6):
        k = np.exp(-0.5 * d2 / ell**2) + 1e-6 * np.eye(len(x))
        try:
            chol = np.linalg.cholesky(k)
        except np.linalg.LinAlgError:
            continue
        alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
        lml = -0.5 * float(z @ alpha) - float(np.log(np.diag(chol)).sum())
        if best is None or lml > best[0] + 1e-12:
            best = (lml, chol, alpha)
            best_ell = ell
    if best is None:  # pragma: no cover - the jitter keeps K positive definite
        return np.full(len(xq), mu_y), np.full(len(xq), sd_y)
    _, chol, alpha = best
    kq = np.exp(-0.5 * dq / best_ell**2)
    mean = kq @ alpha
    v = np.linalg.solve(chol, kq.T)
    var = np.clip(1.0 - (v * v).sum(0), 1e-12, None)
    return mu_y + sd_y * mean, sd_y * np.sqrt(var)


def _expected_improvement(mean: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    from scipy.special import ndtr

    imp = best - mean
    zz = imp / sd
    return imp * ndtr(zz) + sd * np.exp(-0.5 * zz * zz) / math.sqrt(2 * math.pi)


def _bayes(runner: _Runner, rng: np.random.Generator, valid: list[int] | None, trials: int, direction: str,
           pool_size: int = 8192) -> None:
    """Gaussian-process Bayesian optimisation with expected improvement over the finite space.

    A quarter of the budget (at least 4 evaluations) samples the space at random; then each step
    fits the GP to every evaluated configuration (infeasible ones scored worse than the worst
    feasible one by their relative constraint violation; pruned ones left out) and evaluates the unvisited candidate of
    largest expected improvement (all of them, or ``pool_size`` drawn at random in a large space).
    """
    problem = runner.problem
    space = problem.space
    order = iter(_stream(rng, problem, valid))
    n_init = min(trials, max(4, trials // 4))
    while runner.evaluations < n_init:
        i = next(order, None)
        if i is None:
            return  # every configuration visited
        runner.visit(i)
    proposals = 0
    pending: list[int] = []  # large spaces: drawn candidates not yet visited
    while runner.evaluations < trials and proposals < 1000 * trials:
        if valid is not None:
            cand = [i for i in valid if i not in runner.seen]
            if len(cand) > pool_size:
                cand = sorted(cand[int(j)] for j in rng.choice(len(cand), pool_size, replace=False))
        else:
            cand = [i for i in pending if i not in runner.seen]
            while len(cand) < pool_size:
                i = next(order, None)
                if i is None:
                    break
                cand.append(i)
            cand.sort()
            pending = cand
        if not cand:
            return
        # pruned configurations were never evaluated: they say nothing of the objective (and often sit
        # just past a budget the best ones touch), so the surrogate is fitted to evaluated ones only
        seen = sorted(i for i, t in runner.seen.items() if t.status != "pruned")
        if not seen:
            pick = cand[0]
            proposals += 1
            runner.visit(pick)
            continue
        scores = [_score(runner.seen[i], runner.metric, direction) for i in seen]
        feas = [s for s in scores if s is not None]
        if feas:
            lo, hi = min(feas), max(feas)
            worst = hi + max(hi - lo, 1.0)
        else:
            worst = 1.0
        y = np.array([s if s is not None else worst + min(runner.seen[i].violation, 10.0)
                      for s, i in zip(scores, seen, strict=True)])
        mean, sd = _gp_posterior(space.features(seen), y, space.features(cand))
        ei = _expected_improvement(mean, sd, min(feas) if feas else float(y.min()))
        # best expected improvement first (ties: lower index); a candidate the pre-check prunes costs
        # no evaluation, so the next one is tried without refitting
        for j in np.argsort(-ei, kind="stable"):
            proposals += 1
            if runner.visit(cand[int(j)]).status != "pruned":
                break


def tune(problem: Problem, constraints: Sequence[Constraint], metric: str, direction: str, *,
         objective: str | None = None, search: str = "auto", trials: int = DEFAULT_TRIALS, seed: int = 0,
         top: int = 5, progress: bool | None = None) -> TuneResult:
    """Search ``problem`` for the configurations with the best ``metric`` that meet ``constraints``.

    Parameters
    ----------
    problem
        The space, pre-check and evaluation (:class:`Problem`).
    constraints
        Parsed constraints (:func:`parse_constraint`).
    metric, direction
        The objective metric and ``"min"`` or ``"max"``.
    objective
        Its name for the report (default: ``metric``).
    search
        ``exhaustive`` (every valid configuration, pruned ones not evaluated), ``random`` (a seeded
        sample of ``trials`` evaluations), ``bayes`` (Gaussian-process expected improvement with
        ``trials`` evaluations), or ``auto``: exhaustive when the space has at most ``trials``
        valid configurations, else bayes.
    trials
        Evaluation budget of random and bayes (pruned configurations cost none).
    seed
        Seed of every random draw: the same inputs give the same result.
    top
        How many best configurations the result lists.
    progress
        A bar of visited configurations on standard error (out of the valid ones for exhaustive
        search); None: see :func:`simulator.report.progress.progress_enabled`.

    Raises
    ------
    TuneError
        Unknown search, bad budget, an empty space or an objective the problem does not produce.
    """
    if search not in SEARCH_METHODS:
        from nodeperf.suggest import did_you_mean

        raise TuneError(f"--search: unknown method {search!r}; got {search!r}; expected one of "
                        f"{', '.join(SEARCH_METHODS)}{did_you_mean(search, SEARCH_METHODS)}")
    if direction not in ("min", "max"):
        raise TuneError(f"tune: direction; got {direction!r}; expected 'min' or 'max'")
    if metric not in problem.metrics:
        raise TuneError(f"--objective {objective or metric}: metric {metric!r} is not produced by this search; "
                        f"expected one of {', '.join(sorted(problem.metrics))}")
    if not isinstance(trials, int) or trials < 1:
        raise TuneError(f"--trials: got {trials!r}; expected a positive integer")
    valid = _valid_indices(problem)
    if problem.space.size == 0 or (valid is not None and not valid):
        raise TuneError("search space: empty; got no configuration that exists (every combination of the axes "
                        f"{', '.join(problem.space.names)} is invalid); expected at least one")
    n_valid = len(valid) if valid is not None else problem.space.size
    method = search if search != "auto" else ("exhaustive" if n_valid <= trials else "bayes")
    runner = _Runner(problem, constraints, metric)
    rng = np.random.default_rng(seed)
    from simulator.report.progress import progress_bar

    with progress_bar(n_valid if method == "exhaustive" else None, desc=f"tune ({method})", unit="config",
                      enabled=progress) as runner.bar:
        if method == "exhaustive":
            indices: Iterable[int] = valid if valid is not None else (
                i for i in range(problem.space.size) if problem.valid(problem.space.config(i)))
            runner.visit_all(indices)
        elif method == "random":
            for i in _stream(rng, problem, valid):
                if runner.evaluations >= trials:
                    break
                runner.visit(i)
        else:
            _bayes(runner, rng, valid, trials, direction)
    runner.bar = None
    visited = tuple(runner.seen[i] for i in sorted(runner.seen))
    return TuneResult(objective=objective or metric, metric=metric, direction=direction, method=method, seed=seed,
                      trials=trials, space=problem.space, constraints=tuple(constraints), visited=visited,
                      evaluations=runner.evaluations, top=top, valid_size=len(valid) if valid is not None else None)
