"""Real-time scenarios: the TOML schema of periodic, sporadic and data-driven tasks, their chains and
input-dependent work, read and validated into frozen records.

A scenario names several models (zoo names, micro-workloads, imported or saved graphs), each run as a
task on a device of a node, and the end-to-end chains through them. Everything a file gets wrong is
collected and raised once as a :class:`ScenarioError` (a ``ValueError``) whose lines are located by
file and dotted path (``scenario.toml: tasks.detector.deadline: ...``). The schema is documented in
``docs/realtime.md``; in brief::

    name = "av-perception"
    frames = 10000                      # optional default frame budget (periods of the fastest source)
    seed = 0                            # optional default seed

    [options]                           # how the kernels are costed (simulator EvalOptions)
    cuda_graphs = true

    [variables.objects]                 # input-dependent work: one draw per job of `produced_by`
    distribution = "poisson"            # poisson | uniform | empirical | constant
    mean = 8
    min = 1                             # draws are clipped to [min, max]
    max = 64
    produced_by = "detector"

    [[tasks]]
    name = "tracker"
    model = "gemm:m={objects},n=256,k=256"   # {variable} or {variable*K} in model, batch, seq, context
    device = "gpu"                      # a device of the node, "auto", or a list: the first the node has
    priority = 2                        # larger runs first; default deadline-monotonic
    after = ["detector"]                # dependencies (edges of the DAG)
    deadline = "20 ms"
    # a source task has `rate` ("30 Hz") or `period` ("33.3 ms"), optional `jitter` and `offset`;
    # a sporadic one `min_interarrival` and `max_interarrival`; a task with neither is data-driven:
    # one job per finished job of its `trigger` (default: its only predecessor)

    [[chains]]
    name = "camera-to-plan"
    tasks = ["detector", "tracker", "planner"]
    deadline = "100 ms"
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodels.tables import table_problems
from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean, format_problems, short_repr
from simulator.engines import CLOCK_SPAN_S as ENGINE_CLOCK_SPAN_S
from simulator.engines.options import SETTING_ALIASES, SETTINGS, options_from_settings

__all__ = [
    "ScenarioError",
    "Distribution",
    "Variable",
    "TaskSpec",
    "ChainSpec",
    "Scenario",
    "load_scenario",
    "scenario_from_dict",
    "DISTRIBUTIONS",
    "MAX_SUPPORT",
    "DEFAULT_BOUND_QUANTILE",
    "CLOCK_SPAN_S",
]

#: Distributions a variable may follow, with the keys each takes.
DISTRIBUTIONS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # name: (required keys, optional keys)
    "constant": (("value",), ()),
    "poisson": (("mean",), ("min", "max")),
    "uniform": (("low", "high"), ()),
    "empirical": (("values",), ("weights",)),
}
#: Most distinct values of a variable's support (each one is a re-costed graph).
MAX_SUPPORT = 4096
#: Quantile of an unbounded distribution (a Poisson without ``max``) up to which the bound holds.
DEFAULT_BOUND_QUANTILE = 0.9999
#: Longest simulated span (s): :data:`simulator.engines.CLOCK_SPAN_S` (2**52 ns); a period, deadline or horizon
#: beyond it loses a job's microseconds to the clock's rounding.
CLOCK_SPAN_S = ENGINE_CLOCK_SPAN_S
#: Shortest period a rate may give (s): 1 ns, the clock's step (a rate above 1 GHz).
MIN_PERIOD_S = 1e-9

_TOP_KEYS = ("schema", "name", "description", "frames", "seed", "time_limit_s", "bound_quantile", "options",
             "variables", "tasks", "chains")
_TASK_KEYS = ("name", "model", "batch", "seq", "phase", "context", "dtype", "device", "priority", "rate", "period",
              "min_interarrival", "max_interarrival", "offset", "jitter", "deadline", "after", "trigger",
              "description")
_CHAIN_KEYS = ("name", "tasks", "deadline")


def _option_keys() -> tuple[str, ...]:
    """Engine settings a scenario's [options] takes: every name of the one translator
    (:data:`simulator.engines.options.SETTINGS`, and its aliases such as ``allow_tf32``)."""
    return (*SETTINGS, *SETTING_ALIASES)


_OPTION_KEYS = _option_keys()  # (the names at import; the loader asks _option_keys() each time)

_VAR_KEYS = ("distribution", "produced_by", "mean", "min", "max", "value", "low", "high", "values", "weights",
             "description")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)(?:\s*\*\s*([0-9]+))?\}")
_TEMPLATED = ("model", "batch", "seq", "context")
#: Default wall-clock limit of one simulation (s); a scenario or ``--time-limit`` may change it.
DEFAULT_TIME_LIMIT_S = 300.0


class ScenarioError(NodeperfError, ValueError):
    """A scenario is invalid; the message locates every problem (``file: tasks.<name>.<key>: ...``)."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[str, ...] = tuple(problems) or (message,)


@dataclass(frozen=True)
class Distribution:
    """A distribution of a non-negative integer (a count such as detected objects).

    ``kind`` is one of :data:`DISTRIBUTIONS`; ``lo``/``hi`` clip every draw (``hi`` None: unbounded).
    """

    kind: str
    mean: float = 0.0
    lo: int = 0
    hi: int | None = None
    values: tuple[int, ...] = ()
    weights: tuple[float, ...] = ()

    def draw(self, rng: Any, n: int) -> list[int]:
        """``n`` draws from ``rng`` (a :class:`numpy.random.Generator`), clipped to ``[lo, hi]``."""
        import numpy as np

        if self.kind == "constant":
            raw = np.full(n, self.values[0], dtype=np.int64)
        elif self.kind == "poisson":
            raw = rng.poisson(self.mean, size=n)
        elif self.kind == "uniform":
            raw = rng.integers(self.lo, int(self.hi) + 1, size=n)
        else:  # empirical
            p = np.asarray(self.weights, dtype=float)
            raw = rng.choice(np.asarray(self.values, dtype=np.int64), size=n, p=p / p.sum())
        hi = self.hi if self.hi is not None else np.iinfo(np.int64).max
        return [int(v) for v in np.clip(raw, self.lo, hi)]

    def upper(self, quantile: float) -> tuple[int, bool]:
        """(largest value the bound covers, whether that is the support's true maximum)."""
        if self.hi is not None:
            return int(self.hi), True
        return max(self.lo, poisson_quantile(self.mean, quantile)), False

    def support_size(self, quantile: float) -> int:
        """How many values :meth:`support` has, counted without building it (a ``max = 1e9`` is 10^9)."""
        if self.kind in ("constant", "empirical"):
            return len(set(self.values))
        if self.hi is None and self.mean > MAX_SUPPORT:  # its quantile is above the mean: too many, uncounted
            return math.ceil(self.mean) - self.lo + 1
        top, _ = self.upper(quantile)
        return max(top - self.lo + 1, 0)

    def support(self, quantile: float) -> tuple[int, ...]:
        """Every value a draw may take, up to :meth:`upper` (``quantile`` for an unbounded Poisson)."""
        if self.kind in ("constant", "empirical"):
            return tuple(sorted({min(max(v, self.lo), self.hi if self.hi is not None else v) for v in self.values}))
        top, _ = self.upper(quantile)
        return tuple(range(self.lo, top + 1))

    def describe(self) -> str:
        """A short human description (``poisson(mean 12, clipped to [1, 48])``)."""
        if self.kind == "constant":
            return f"constant({self.values[0]})"
        if self.kind == "poisson":
            return f"poisson(mean {self.mean:g}, clipped to [{self.lo}, {self.hi if self.hi is not None else 'inf'}])"
        if self.kind == "uniform":
            return f"uniform({self.lo}..{self.hi})"
        return f"empirical({len(self.values)} values)"


@dataclass(frozen=True)
class Variable:
    """Input-dependent work: a count drawn once per job of ``produced_by`` and carried with its output."""

    name: str
    distribution: Distribution
    produced_by: str


@dataclass(frozen=True)
class TaskSpec:
    """One task: a model run once per job on one device.

    Times are seconds. ``activation`` is ``"periodic"`` (``period_s``), ``"sporadic"`` (inter-arrival
    uniform in ``[period_s, max_interarrival_s]``) or ``"triggered"`` (one job per finished job of
    ``trigger``). ``priority``: larger runs first (None: deadline-monotonic, filled in by the loader).
    """

    name: str
    model: str
    params: tuple[tuple[str, Any], ...]
    device: tuple[str, ...]  # preference list: the first device the node has ("auto": placed by load)
    priority: int
    activation: str
    period_s: float | None
    max_interarrival_s: float | None
    offset_s: float
    jitter_s: float
    deadline_s: float
    after: tuple[str, ...]
    trigger: str | None
    where: str
    variables: tuple[str, ...] = ()
    priority_given: bool = True

    @property
    def is_source(self) -> bool:
        """Released by time (periodic or sporadic) rather than by a predecessor's output."""
        return self.activation != "triggered"

    def resolved(self, values: Mapping[str, int]) -> tuple[str, dict[str, Any]]:
        """(model string, load_workload keyword arguments) with the variables' ``values`` put in."""
        def sub(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)] * int(m.group(2) or 1)), text)

        kw: dict[str, Any] = {}
        for k, v in self.params:
            if isinstance(v, str) and k in _TEMPLATED:
                text = sub(v)
                kw[k] = int(text) if text.isdigit() else text
            else:
                kw[k] = v
        return sub(self.model), kw


@dataclass(frozen=True)
class ChainSpec:
    """An end-to-end chain: a path of tasks along ``after`` edges, with its deadline (s)."""

    name: str
    tasks: tuple[str, ...]
    deadline_s: float
    where: str


@dataclass(frozen=True)
class Scenario:
    """A validated scenario (tasks in file order, chains, variables, defaults)."""

    name: str
    description: str
    tasks: tuple[TaskSpec, ...]
    chains: tuple[ChainSpec, ...]
    variables: tuple[Variable, ...]
    options: dict[str, bool] = field(default_factory=dict)
    frames: int = 10000
    seed: int = 0
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    bound_quantile: float = DEFAULT_BOUND_QUANTILE
    where: str = "<scenario>"
    folder: str = "."

    def task(self, name: str) -> TaskSpec:
        """The task called ``name`` (a located ScenarioError with a near match otherwise)."""
        for t in self.tasks:
            if t.name == name:
                return t
        names = [t.name for t in self.tasks]
        raise ScenarioError(f"{self.where}: tasks.{name}: unknown task; got {name!r}; expected one of "
                            f"{', '.join(names)}{did_you_mean(name, names)}")

    def variable(self, name: str) -> Variable:
        """The variable called ``name``."""
        return next(v for v in self.variables if v.name == name)

    def successors(self, name: str) -> tuple[str, ...]:
        """Names of the tasks that list ``name`` in their ``after``."""
        return tuple(t.name for t in self.tasks if name in t.after)


# ------------------------------------------------------------------------------------------------
# reading


class _Problems:
    def __init__(self, where: str) -> None:
        self.where = where
        self.items: list[str] = []

    def add(self, path: str, msg: str) -> None:
        self.items.append(f"{self.where}: {path}: {msg}" if path else f"{self.where}: {msg}")

    def raise_if_any(self) -> None:
        if self.items:
            raise ScenarioError(format_problems(self.where, self.items, "scenario"), self.items)


def poisson_quantile(mean: float, q: float) -> int:
    """The smallest ``k`` with ``P(X <= k) >= q`` for ``X ~ Poisson(mean)`` (summed in log space).

    >>> poisson_quantile(8.0, 0.5), poisson_quantile(8.0, 0.9999)
    (8, 20)
    """
    log_p = -mean  # log P(X = 0)
    cdf = math.exp(log_p)
    k = 0
    while cdf < q and k < 10 * (mean + 100):
        k += 1
        log_p += math.log(mean) - math.log(k)
        cdf += math.exp(log_p)
    return k


def _short(v: Any, limit: int = 60) -> str:
    return short_repr(v, limit)


def _time(raw: Any, path: str, p: _Problems, *, unit: str = "s", positive: bool = True) -> float | None:
    """A time (or frequency with ``unit="Hz"``) given as a unit string ("33.3 ms", "30 Hz")."""
    from hwmodels.units import UnitError, parse_quantity

    example = "'30 Hz'" if unit == "Hz" else "'33.3 ms'"
    if isinstance(raw, bool) or not isinstance(raw, str):
        p.add(path, f"not a quantity with a unit; got {_short(raw)}; expected a string such as {example}")
        return None
    try:
        v = float(parse_quantity(raw, unit))
    except UnitError as exc:
        p.add(path, str(exc).split(": ", 1)[-1] if ": " in str(exc) else str(exc))
        return None
    if not math.isfinite(v) or v < 0 or (positive and v <= 0):
        bound = "> 0" if positive else ">= 0"
        p.add(path, f"out of range; got {raw!r}; expected a value {bound}")
        return None
    if unit == "Hz" and not 1.0 / CLOCK_SPAN_S <= v <= 1.0 / MIN_PERIOD_S:
        p.add(path, f"out of range; got {raw!r}; expected a rate from {1.0 / CLOCK_SPAN_S:.3g} Hz to 1 GHz (a period "
                    f"within the simulated clock: 1 ns steps up to {CLOCK_SPAN_S:.3g} s)")
        return None
    if unit != "Hz" and v > CLOCK_SPAN_S:
        p.add(path, f"out of range; got {raw!r}; expected at most {CLOCK_SPAN_S:.3g} s (the simulated clock keeps 1 ns "
                    "steps up to 2**52 ns)")
        return None
    return v


def _int(raw: Any, path: str, p: _Problems, *, low: int = 0) -> int | None:
    if isinstance(raw, bool) or not isinstance(raw, int):
        p.add(path, f"not an integer; got {_short(raw)}; expected an integer >= {low}")
        return None
    if raw < low:
        p.add(path, f"out of range; got {raw}; expected an integer >= {low}")
        return None
    return raw


def _names_in(text: str) -> list[str]:
    return [m.group(1) for m in _PLACEHOLDER.finditer(text)]


def _distribution(name: str, raw: Mapping[str, Any], path: str, p: _Problems) -> Distribution | None:
    kind = raw.get("distribution")
    if kind not in DISTRIBUTIONS:
        p.add(f"{path}.distribution", f"unknown distribution; got {_short(kind)}; expected one of "
                                      f"{', '.join(DISTRIBUTIONS)}{did_you_mean(str(kind), DISTRIBUTIONS)}")
        return None
    required, optional = DISTRIBUTIONS[kind]
    allowed = {*required, *optional, "distribution", "produced_by", "description"}
    bad = False
    for k in sorted(raw):
        if k not in allowed:
            p.add(f"{path}.{k}", f"not a parameter of a {kind} distribution; got {k!r}; expected "
                                 f"{', '.join(required + optional)}{did_you_mean(k, sorted(allowed))}")
            bad = True
    for k in required:
        if k not in raw:
            p.add(f"{path}.{k}", f"missing; got nothing; expected {k} = ... for a {kind} distribution")
            bad = True
    if bad:
        return None
    if kind == "constant":
        v = _int(raw["value"], f"{path}.value", p)
        return None if v is None else Distribution("constant", lo=v, hi=v, values=(v,), weights=(1.0,))
    if kind == "poisson":
        mean = raw["mean"]
        if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean) or mean <= 0:
            p.add(f"{path}.mean", f"not a positive number; got {_short(mean)}; expected mean > 0")
            return None
        lo = _int(raw.get("min", 0), f"{path}.min", p)
        hi = _int(raw["max"], f"{path}.max", p) if "max" in raw else None
        if lo is None or ("max" in raw and hi is None):
            return None
        if hi is not None and hi < lo:
            p.add(f"{path}.max", f"below min; got max = {hi}, min = {lo}; expected max >= min")
            return None
        return Distribution("poisson", mean=float(mean), lo=lo, hi=hi)
    if kind == "uniform":
        lo, hi = _int(raw["low"], f"{path}.low", p), _int(raw["high"], f"{path}.high", p)
        if lo is None or hi is None:
            return None
        if hi < lo:
            p.add(f"{path}.high", f"below low; got high = {hi}, low = {lo}; expected high >= low")
            return None
        return Distribution("uniform", mean=(lo + hi) / 2, lo=lo, hi=hi)
    vals = raw["values"]
    if not isinstance(vals, list) or not vals or any(isinstance(v, bool) or not isinstance(v, int) or v < 0
                                                     for v in vals):
        p.add(f"{path}.values", f"not a list of integers >= 0; got {_short(vals)}; expected values = [0, 3, 8, ...]")
        return None
    w = raw.get("weights", [1.0] * len(vals))
    if (not isinstance(w, list) or len(w) != len(vals)
            or any(isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0 for x in w)
            or sum(w) <= 0):
        p.add(f"{path}.weights", f"not {len(vals)} non-negative numbers with a positive sum; got {_short(w)}; "
                                 "expected one weight per value")
        return None
    kept = tuple((int(v), float(x)) for v, x in zip(vals, w, strict=True) if x > 0)
    return Distribution("empirical", mean=sum(v * x for v, x in kept) / sum(x for _, x in kept),
                        lo=min(v for v, _ in kept), hi=max(v for v, _ in kept),
                        values=tuple(v for v, _ in kept), weights=tuple(x for _, x in kept))


def load_scenario(path: str | Path, *, placement: Mapping[str, str] | None = None) -> Scenario:
    """Read and validate the scenario TOML at ``path``.

    Parameters
    ----------
    path
        The scenario file. Model paths in it are relative to its folder.
    placement
        Task name -> device name overrides of the file's ``device`` keys (``--place``).

    Raises
    ------
    ScenarioError
        Every problem of the file, located (``file: tasks.<name>.<key>: problem; got ...; expected ...``).
    """
    from hwmodels.loader import read_toml
    from hwmodels.spec import SpecError

    p = Path(path)
    try:
        data = read_toml(p)
    except SpecError as exc:
        raise ScenarioError(str(exc)) from None
    return scenario_from_dict(data, where=str(path), folder=p.resolve().parent, placement=placement)


def scenario_from_dict(data: Mapping[str, Any], *, where: str = "<scenario>", folder: str | Path = ".",
                       placement: Mapping[str, str] | None = None) -> Scenario:
    """Validate a parsed scenario (see :func:`load_scenario`)."""
    p = _Problems(where)
    for path, msg in table_problems(data, allowed=_TOP_KEYS):
        p.add(path, msg())
    if "schema" in data and data["schema"] != 1:
        p.add("schema", f"unknown schema version; got {_short(data['schema'])}; expected schema = 1")
    name = data.get("name", Path(where).stem)
    if not isinstance(name, str) or not name:
        p.add("name", f"not a string; got {_short(name)}; expected name = \"...\"")
        name = "scenario"
    frames = _int(data.get("frames", 10000), "frames", p, low=1) or 10000
    seed = _int(data.get("seed", 0), "seed", p, low=0) or 0
    tl = data.get("time_limit_s", DEFAULT_TIME_LIMIT_S)
    if isinstance(tl, bool) or not isinstance(tl, (int, float)) or not math.isfinite(tl) or tl <= 0:
        p.add("time_limit_s", f"not a positive number of seconds; got {_short(tl)}; expected time_limit_s > 0")
        tl = DEFAULT_TIME_LIMIT_S
    bq = data.get("bound_quantile", DEFAULT_BOUND_QUANTILE)
    if isinstance(bq, bool) or not isinstance(bq, float) or not 0.5 <= bq < 1:
        p.add("bound_quantile", f"out of range; got {_short(bq)}; expected a number in [0.5, 1), e.g. 0.9999")
        bq = DEFAULT_BOUND_QUANTILE

    options = data.get("options", {})
    opts: dict[str, Any] = {}
    if not isinstance(options, Mapping):
        p.add("options", f"not a table; got {_short(options)}; expected [options] with {', '.join(_option_keys())}")
    else:
        unknown = dict(table_problems(options, allowed=_option_keys(), path="options", what="option"))
        for k, v in options.items():
            if f"options.{k}" in unknown:
                p.add(f"options.{k}", unknown[f"options.{k}"]())
            else:
                try:  # the value as the one translator takes it (kind and choices from SETTINGS)
                    options_from_settings({k: v}, where="options")
                except ValueError as exc:
                    p.add(f"options.{k}", str(exc).removeprefix(f"options.{k}: "))
                else:
                    opts[k] = v

    raw_tasks = data.get("tasks")
    if not isinstance(raw_tasks, list) or not raw_tasks or not all(isinstance(t, Mapping) for t in raw_tasks):
        p.add("tasks", f"missing or not an array of tables; got {_short(raw_tasks)}; expected [[tasks]] entries "
                       "with name, model, device and a rate, period or predecessor")
        p.raise_if_any()
    tasks = _tasks(raw_tasks, p, placement or {})
    names = [t.name for t in tasks]
    raw_vars = data.get("variables", {})
    variables = _variables(raw_vars, names, p)
    _check_graph(tasks, variables, p, declared=frozenset(raw_vars) if isinstance(raw_vars, Mapping) else frozenset())
    p.raise_if_any()
    tasks = _default_priorities(tasks)
    chains = _chains(data.get("chains"), tasks, p)
    p.raise_if_any()
    return Scenario(name=name, description=str(data.get("description", "")), tasks=tuple(tasks),
                    chains=tuple(chains), variables=tuple(variables), options=opts, frames=frames, seed=seed,
                    time_limit_s=float(tl), bound_quantile=float(bq), where=where, folder=str(folder))


def _tasks(raw_tasks: list[Mapping[str, Any]], p: _Problems, placement: Mapping[str, str]) -> list[TaskSpec]:
    out: list[TaskSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_tasks):
        name = raw.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.\-]+", name or ""):
            p.add(f"tasks[{i}].name", f"missing or not a plain name; got {_short(name)}; expected name = \"detector\" "
                                      "(letters, digits, _ . -)")
            continue
        path = f"tasks.{name}"
        if name in seen:
            p.add(path, f"duplicate task name; got {name!r} twice; expected unique names")
            continue
        seen.add(name)
        out.append(_task(raw, name, path, p, placement))
    for tname in placement:
        if tname not in seen:
            p.add("", f"--place {tname}: unknown task; got {tname!r}; expected one of {', '.join(sorted(seen))}"
                      f"{did_you_mean(tname, sorted(seen))}")
    return out


def _task(raw: Mapping[str, Any], name: str, path: str, p: _Problems, placement: Mapping[str, str]) -> TaskSpec:
    """One task's fields checked (each problem added to ``p``), with placeholders where a field was bad."""
    for kpath, msg in table_problems(raw, allowed=_TASK_KEYS, path=path):
        p.add(kpath, msg())
    model, params, used = _task_model(raw, path, p)
    device = placement.get(name, raw.get("device"))
    if isinstance(device, str):
        device = [device]
    if not isinstance(device, list) or not device or not all(isinstance(d, str) and d for d in device):
        p.add(f"{path}.device", f"missing or not a device name; got {_short(device)}; expected device = "
                                "\"<a device of the node>\", \"auto\", or a preference list [\"dla0\", \"gpu\"]")
        device = ["auto"]
    prio = raw.get("priority")
    if prio is not None and (isinstance(prio, bool) or not isinstance(prio, int)):
        p.add(f"{path}.priority", f"not an integer; got {_short(prio)}; expected priority = 3 (larger runs first)")
        prio = None
    after = raw.get("after", [])
    if isinstance(after, str):
        after = [after]
    if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
        p.add(f"{path}.after", f"not a list of task names; got {_short(after)}; expected after = [\"detector\"]")
        after = []
    if len(set(after)) != len(after):
        p.add(f"{path}.after", f"a predecessor listed twice; got {after}; expected each task once")
    activation, period, max_ia = _task_activation(raw, path, p)
    offset = _time(raw.get("offset", "0 s"), f"{path}.offset", p, positive=False) or 0.0
    jitter = _time(raw.get("jitter", "0 s"), f"{path}.jitter", p, positive=False) or 0.0
    trigger = _task_trigger(raw, path, p, activation, after)
    if "deadline" not in raw:
        p.add(f"{path}.deadline", "missing; got nothing; expected deadline = \"33 ms\" (from the job's release)")
        deadline = None
    else:
        deadline = _time(raw["deadline"], f"{path}.deadline", p)
    return TaskSpec(
        name=name, model=model, params=tuple(params), device=tuple(device), priority=prio if prio is not None else 0,
        activation=activation, period_s=period, max_interarrival_s=max_ia, offset_s=offset, jitter_s=jitter,
        deadline_s=deadline if deadline is not None else 1.0, after=tuple(after), trigger=trigger,
        where=f"{p.where}: {path}", variables=tuple(dict.fromkeys(used)), priority_given=prio is not None,
    )


def _task_model(raw: Mapping[str, Any], path: str, p: _Problems) -> tuple[str, list[tuple[str, Any]], list[str]]:
    """(model string, load_workload parameters, variable names used) of one task."""
    model = raw.get("model")
    if not isinstance(model, str) or not model.strip():
        p.add(f"{path}.model", f"missing; got {_short(model)}; expected model = \"<zoo name, micro-workload "
                               "(gemm:m=..,n=..,k=..), .onnx or saved-graph .json>\"")
        model = ""
    params: list[tuple[str, Any]] = []
    used = _names_in(model)
    for k in ("batch", "seq", "context"):
        if k in raw:
            v = raw[k]
            if isinstance(v, str) and _PLACEHOLDER.fullmatch(v.strip()):
                used += _names_in(v)
                params.append((k, v.strip()))
            elif isinstance(v, bool) or not isinstance(v, int) or v < 1:
                p.add(f"{path}.{k}", f"not a positive integer or a variable; got {_short(v)}; expected {k} = 8 "
                                     f"or {k} = \"{{objects}}\"")
            else:
                params.append((k, v))
    for k in ("phase", "dtype"):
        if k in raw:
            if not isinstance(raw[k], str):
                p.add(f"{path}.{k}", f"not a string; got {_short(raw[k])}; expected {k} = \"...\"")
            else:
                params.append((k, raw[k]))
    return model, params, used


def _period(raw: Any, path: str, p: _Problems) -> float | None:
    """A period or inter-arrival time of at least :data:`MIN_PERIOD_S` (the clock's step)."""
    v = _time(raw, path, p)
    if v is not None and v < MIN_PERIOD_S:
        p.add(path, f"out of range; got {raw!r}; expected at least 1 ns (the simulated clock's step)")
        return None
    return v


def _task_activation(raw: Mapping[str, Any], path: str, p: _Problems) -> tuple[str, float | None, float | None]:
    """(activation, period or minimum inter-arrival (s), maximum inter-arrival (s)) of one task."""
    has = [k for k in ("rate", "period", "min_interarrival") if k in raw]
    period = max_ia = None
    if len(has) > 1:
        p.add(f"{path}.{has[1]}", f"conflicts with {has[0]}; got both; expected one of rate, period, "
                                  "min_interarrival (or none for a data-driven task)")
    activation = "triggered"
    if "rate" in raw:
        hz = _time(raw["rate"], f"{path}.rate", p, unit="Hz")
        period, activation = (1.0 / hz if hz else None), "periodic"
    elif "period" in raw:
        period, activation = _period(raw["period"], f"{path}.period", p), "periodic"
    elif "min_interarrival" in raw:
        period, activation = _period(raw["min_interarrival"], f"{path}.min_interarrival", p), "sporadic"
        if "max_interarrival" not in raw:
            p.add(f"{path}.max_interarrival", "missing; got nothing; expected max_interarrival = \"...\" with "
                                              "min_interarrival (inter-arrival times are uniform between them)")
        else:
            max_ia = _time(raw["max_interarrival"], f"{path}.max_interarrival", p)
            if max_ia is not None and period is not None and max_ia < period:
                p.add(f"{path}.max_interarrival", f"below min_interarrival; got {raw['max_interarrival']!r}; "
                                                  f"expected >= {raw['min_interarrival']!r}")
    if "max_interarrival" in raw and activation != "sporadic":
        p.add(f"{path}.max_interarrival", "only for a sporadic task; got it without min_interarrival; expected "
                                          "min_interarrival too")
    return activation, period, max_ia


def _task_trigger(raw: Mapping[str, Any], path: str, p: _Problems, activation: str, after: list[str]) -> str | None:
    """The predecessor whose outputs release a data-driven task (None for a task released by time)."""
    trigger = raw.get("trigger")
    if activation != "triggered":
        if trigger is not None:
            p.add(f"{path}.trigger", "only for a data-driven task; got trigger on a task with a rate; expected no "
                                     "trigger (a task with a rate samples the latest output of each predecessor)")
        return None
    for k in ("offset", "jitter"):
        if k in raw:
            p.add(f"{path}.{k}", f"only for a task released by time; got {k} on a data-driven task; expected "
                                 "a rate or period with it, or no " + k)
    if trigger is None:
        if len(after) == 1:
            return after[0]
        if not after:
            p.add(path, "no activation; got no rate, period, min_interarrival or predecessor; expected "
                        "rate = \"30 Hz\", period = \"...\", or after = [\"<task>\"] (data-driven)")
        else:
            p.add(f"{path}.trigger", f"missing; got {len(after)} predecessors {after} and no rate; expected "
                                     "trigger = \"<the predecessor whose outputs release this task>\"")
        return None
    if not isinstance(trigger, str) or trigger not in after:
        p.add(f"{path}.trigger", f"not one of the task's predecessors; got {_short(trigger)}; expected one of "
                                 f"{after}{did_you_mean(str(trigger), after)}")
        return None
    return trigger


def _variables(raw: Any, task_names: list[str], p: _Problems) -> list[Variable]:
    if not isinstance(raw, Mapping):
        p.add("variables", f"not a table; got {_short(raw)}; expected [variables.<name>] tables")
        return []
    out = []
    for name in sorted(raw):
        path = f"variables.{name}"
        body = raw[name]
        if not isinstance(body, Mapping):
            p.add(path, f"not a table; got {_short(body)}; expected [variables.{name}] with distribution = ...")
            continue
        for kpath, msg in table_problems(body, allowed=_VAR_KEYS, path=path):
            p.add(kpath, msg())
        prod = body.get("produced_by")
        if prod not in task_names:
            p.add(f"{path}.produced_by", f"not a task; got {_short(prod)}; expected one of {', '.join(task_names)}"
                                         f"{did_you_mean(str(prod), task_names)}")
            continue
        dist = _distribution(name, {k: v for k, v in body.items() if k in _VAR_KEYS}, path, p)
        if dist is not None:
            out.append(Variable(name, dist, prod))
    return out


def _check_graph(tasks: list[TaskSpec], variables: list[Variable], p: _Problems, *,
                 declared: frozenset[str] = frozenset()) -> None:
    """Unknown predecessors, cycles, variables used where their producer is not upstream. ``declared``: every
    variable table's name, those with a problem of their own too (their uses are not unknown as well)."""
    by_name = {t.name: t for t in tasks}
    names = list(by_name)
    for t in tasks:
        for a in t.after:
            if a not in by_name:
                p.add(f"tasks.{t.name}.after", f"unknown task; got {a!r}; expected one of {', '.join(names)}"
                                               f"{did_you_mean(a, names)}")
            elif a == t.name:
                p.add(f"tasks.{t.name}.after", f"a task cannot depend on itself; got {a!r}; expected other tasks")
    cycle = _find_cycle({t.name: [a for a in t.after if a in by_name and a != t.name] for t in tasks})
    if cycle:
        p.add(f"tasks.{cycle[0]}.after", f"dependency cycle; got {' -> '.join(cycle)}; expected a DAG (remove one "
                                         "of these edges)")
        return
    var_names = [v.name for v in variables]
    produced = {v.name: v.produced_by for v in variables}
    for t in tasks:
        for v in t.variables:
            if v not in produced:
                if v in declared:  # declared with a problem of its own, already reported
                    continue
                known = f"one of {', '.join(var_names)}" if var_names else f"a variable declared as [variables.{v}]"
                p.add(f"tasks.{t.name}", f"unknown variable {{{v}}}; got {v!r}; expected {known}"
                                         f"{did_you_mean(v, var_names)}")
            elif produced[v] == t.name or produced[v] not in _ancestors(t.name, by_name):
                p.add(f"tasks.{t.name}", f"variable {{{v}}} is produced by {produced[v]!r}, which is not upstream of "
                                         f"{t.name!r}; got no path {produced[v]} -> {t.name}; expected {t.name} to "
                                         f"depend (through after) on {produced[v]}")


def _ancestors(name: str, by_name: Mapping[str, TaskSpec]) -> set[str]:
    seen: set[str] = set()
    stack = list(by_name[name].after)
    while stack:
        a = stack.pop()
        if a in seen or a not in by_name:
            continue
        seen.add(a)
        stack.extend(by_name[a].after)
    return seen


def _find_cycle(preds: Mapping[str, list[str]]) -> list[str]:
    """A cycle as ``[a, b, ..., a]`` along predecessor edges reversed (data flow), or ``[]``."""
    succ: dict[str, list[str]] = {n: [] for n in preds}
    for n, ps in preds.items():
        for a in ps:
            succ[a].append(n)
    color: dict[str, int] = dict.fromkeys(preds, 0)
    for start in preds:
        if color[start]:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = []
        while stack:
            node, i = stack.pop()
            if i == 0:
                color[node] = 1
                path.append(node)
            if i < len(succ[node]):
                stack.append((node, i + 1))
                nxt = succ[node][i]
                if color[nxt] == 1:
                    return [*path[path.index(nxt):], nxt]
                if color[nxt] == 0:
                    stack.append((nxt, 0))
            else:
                color[node] = 2
                path.pop()
    return []


def _default_priorities(tasks: list[TaskSpec]) -> list[TaskSpec]:
    """Tasks without a priority get deadline-monotonic ones below every given priority (ties by file order)."""
    from dataclasses import replace

    missing = [t for t in tasks if not t.priority_given]
    if not missing:
        return tasks
    floor = min((t.priority for t in tasks if t.priority_given), default=0)
    order = sorted(missing, key=lambda t: (-t.deadline_s, -tasks.index(t)))  # longest deadline lowest
    rank = {t.name: floor - len(missing) + i for i, t in enumerate(order)}
    return [replace(t, priority=rank[t.name]) if t.name in rank else t for t in tasks]


def _chains(raw: Any, tasks: list[TaskSpec], p: _Problems) -> list[ChainSpec]:
    by_name = {t.name: t for t in tasks}
    names = list(by_name)
    if raw is None:
        return _default_chains(tasks, p.where)
    if not isinstance(raw, list) or not all(isinstance(c, Mapping) for c in raw):
        p.add("chains", f"not an array of tables; got {_short(raw)}; expected [[chains]] entries")
        return []
    out: list[ChainSpec] = []
    seen: set[str] = set()
    for i, c in enumerate(raw):
        name = c.get("name")
        if not isinstance(name, str) or not name:
            p.add(f"chains[{i}].name", f"missing; got {_short(name)}; expected name = \"...\"")
            continue
        path = f"chains.{name}"
        if name in seen:
            p.add(path, f"duplicate chain name; got {name!r} twice; expected unique names")
            continue
        seen.add(name)
        for kpath, msg in table_problems(c, allowed=_CHAIN_KEYS, path=path):
            p.add(kpath, msg())
        seq = c.get("tasks")
        if not isinstance(seq, list) or len(seq) < 1 or not all(isinstance(s, str) for s in seq):
            p.add(f"{path}.tasks", f"not a list of task names; got {_short(seq)}; expected tasks = [\"camera\", "
                                   "\"detector\", ...] along after edges")
            continue
        ok = True
        for s in seq:
            if s not in by_name:
                p.add(f"{path}.tasks", f"unknown task; got {s!r}; expected one of {', '.join(names)}"
                                       f"{did_you_mean(s, names)}")
                ok = False
        if ok:
            for a, b in zip(seq, seq[1:], strict=False):
                if a not in by_name[b].after:
                    p.add(f"{path}.tasks", f"no edge {a} -> {b}; got {b!r} without {a!r} in its after list; expected "
                                           "consecutive tasks joined by after edges")
                    ok = False
        if "deadline" not in c:
            p.add(f"{path}.deadline", "missing; got nothing; expected deadline = \"100 ms\" (end to end)")
            continue
        d = _time(c["deadline"], f"{path}.deadline", p)
        if ok and d is not None:
            out.append(ChainSpec(name, tuple(seq), d, f"{p.where}: {path}"))
    return out


def _default_chains(tasks: list[TaskSpec], where: str) -> list[ChainSpec]:
    """Without [[chains]]: every path from a task with no predecessor to a task with no successor of
    more than one task, its deadline the sum of its tasks' deadlines."""
    by_name = {t.name: t for t in tasks}
    succ = {t.name: [s.name for s in tasks if t.name in s.after] for t in tasks}
    out: list[ChainSpec] = []
    limit = 64

    def walk(path: list[str]) -> None:
        if len(out) >= limit:
            return
        nxt = succ[path[-1]]
        if not nxt:
            if len(path) > 1:
                name = "->".join(path)
                out.append(ChainSpec(name, tuple(path), sum(by_name[n].deadline_s for n in path),
                                     f"{where}: chains.{name}"))
            return
        for n in nxt:
            walk([*path, n])

    for t in tasks:
        if not t.after:
            walk([t.name])
    return out
