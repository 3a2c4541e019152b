"""Simulate a real-time scenario on a node: jobs released by time or by their predecessors, scheduled
on every device by fixed priority with preemption only at kernel boundaries; response times, deadline
misses, chain latencies and device utilisation, beside the worst-case bounds of :mod:`.rta`.

Semantics (see ``docs/realtime.md``):

- A periodic task's job ``k`` arrives at ``offset + k T`` and is released ``U[0, jitter]`` later; a
  sporadic task's arrivals are ``U[min_interarrival, max_interarrival]`` apart. A data-driven task
  releases one job when a job of its trigger finishes. Every task samples the latest finished output
  of each other predecessor when its job is released (a variable carried by that output sizes it;
  before the first output, the variable's ``min`` does).
- A device runs one kernel at a time. At each kernel boundary the highest-priority ready job (ties:
  earliest release, then task order) picks the next kernel; a kernel in flight is never cut. Jobs of
  one task run in release order.
- A job whose predecessor ran on another device first runs the transfer of that predecessor's output
  (a leading kernel of the job, :class:`~.costing.InputTransfer`).
- Devices of one memory pool (``analysis.pools``) share its DRAM bandwidth: while kernels of several
  of them overlap, each work part runs at its max-min fair share over its demand
  (:class:`~.costing.PoolSharing`); fixed parts run at full speed. Other devices run independently.
- Response time is measured from the job's release to its last kernel's end; a chain's latency from
  the release of its first task's job whose data reached the last task's job, to that job's end.
- ``frames`` bounds the run: sources release jobs until ``frames`` periods of the fastest source have
  passed; every released job then runs to completion. A wall-clock limit stops a run early, and the
  result says so.

The event loop is a heap of (time, kind, sequence) events. A job runs uninterrupted to its end unless
a higher-priority job is released meanwhile; then its run is cut at the first kernel boundary after
that release (a bisection in the kernels' running sums), so the cost is per job, not per kernel. A
device of a pool does the same while it is the only busy device of its pool; while others are busy
too, its position (standalone seconds into the job) advances at its current speed and it has one
event per kernel phase (fixed part, work part), at which the pool's shares are recomputed.
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from simulator.realtime.costing import (
    PoolSharing,
    TaskCost,
    Variant,
    apply_node_overlay,
    cost_scenario,
    memory_pools,
    resolve_node,
)
from simulator.realtime.rta import Analysis, analyse
from simulator.realtime.scenario import (
    CLOCK_SPAN_S,
    Scenario,
    ScenarioError,
    TaskSpec,
    load_scenario,
)

__all__ = ["ResponseStats", "TaskResult", "ChainResult", "DeviceResult", "RealtimeResult", "simulate_scenario",
           "run_realtime", "MAX_TRACE_EVENTS", "CDF_PERCENTILES"]

_RELEASE, _DONE, _DISPATCH = 0, 1, 2
#: Most job executions a trace keeps (later ones are counted, not written).
MAX_TRACE_EVENTS = 200_000
_CHECK_CLOCK_EVERY = 2048
#: Most jobs one device's ready queue holds before the run stops ("backlog"): a device that never
#: catches up would otherwise queue a job per release until memory runs out.
MAX_BACKLOG = 1_000_000
#: Times below this (s) print as 0: sums of the same kernel times in another order differ by rounding.
_SHOWN_ZERO_S = 1e-12
#: Percentiles each summary keeps as its CDF: 0 to 99 in steps of 1, then 99.1 to 100 in steps of 0.1.
CDF_PERCENTILES: tuple[float, ...] = (*(float(p) for p in range(100)), *(round(99.1 + 0.1 * i, 1) for i in range(9)), 100.0)


@dataclass(frozen=True)
class ResponseStats:
    """Summary of a set of response times or latencies (s)."""

    count: int
    p50_s: float
    p99_s: float
    p999_s: float
    max_s: float
    min_s: float
    mean_s: float
    jitter_s: float  # max - min
    deadline_misses: int
    #: the distribution at :data:`CDF_PERCENTILES` (s), for plotting CDFs without keeping every sample
    cdf_s: tuple[float, ...] = field(default=(), repr=False)
    #: whether the percentiles are exact (False: from :class:`SampleStream`'s log histogram, within
    #: :data:`HISTOGRAM_RELATIVE_ERROR`; count, min, max, mean and misses stay exact)
    exact: bool = True

    @classmethod
    def of(cls, samples: Sequence[float], deadline_s: float) -> ResponseStats:
        """Summary of ``samples`` (s) against ``deadline_s`` (a sample above it is a miss)."""
        import numpy as np

        if not samples:
            nan = math.nan
            return cls(0, nan, nan, nan, nan, nan, nan, nan, 0)
        a = np.asarray(samples, dtype=float)
        p50, p99, p999 = (float(x) for x in np.percentile(a, [50.0, 99.0, 99.9]))
        mx, mn = float(a.max()), float(a.min())
        cdf = tuple(float(x) for x in np.percentile(a, CDF_PERCENTILES))
        return cls(len(a), p50, p99, p999, mx, mn, float(a.mean()), mx - mn, int((a > deadline_s).sum()), cdf)

    @classmethod
    def of_stream(cls, stream: SampleStream) -> ResponseStats:
        """Summary of a :class:`SampleStream` (exact percentiles while it kept every sample)."""
        if stream.exact:
            got = cls.of(stream.samples, stream.deadline_s)
            return dataclasses.replace(got, deadline_misses=stream.misses)
        p50, p99, p999 = stream.percentiles([50.0, 99.0, 99.9])
        mean = stream.total / stream.count
        return cls(stream.count, p50, p99, p999, stream.max, stream.min, mean, stream.max - stream.min, stream.misses,
                   tuple(stream.percentiles(CDF_PERCENTILES)), exact=False)

    @property
    def miss_rate(self) -> float:
        """Deadline misses per job (0 when there are no samples)."""
        return self.deadline_misses / self.count if self.count else 0.0


#: Samples a :class:`SampleStream` keeps exactly (8 bytes each) before folding them into its histogram.
EXACT_SAMPLES = 1 << 20
#: Relative half-width of a histogram bin: a percentile read from it is within 0.05% of the exact one.
HISTOGRAM_RELATIVE_ERROR = 5e-4
_HIST_RATIO = (1 + HISTOGRAM_RELATIVE_ERROR) / (1 - HISTOGRAM_RELATIVE_ERROR)
_HIST_LO_S = 1e-12  # times at or below it share the first bin (printed as 0 anyway)
_HIST_BINS = math.ceil(math.log(1e6 / _HIST_LO_S) / math.log(_HIST_RATIO)) + 2  # up to 10^6 s: ~27,600 bins


class SampleStream:
    """Response times (s) of one task or chain, in bounded memory however long the run.

    The first :data:`EXACT_SAMPLES` are kept, so every run of up to about a million jobs per task
    reports exact percentiles (``numpy.percentile``, linear). Past that, the samples are folded into a
    fixed log-spaced histogram (bins 0.1% wide from 1 ps to 10^6 s, about 220 KiB) and percentiles
    are read from it, within :data:`HISTOGRAM_RELATIVE_ERROR` of the exact value; count, min, max,
    mean and deadline misses stay exact. :attr:`exact` says which, and the report says so.
    """

    def __init__(self, deadline_s: float, exact_limit: int = EXACT_SAMPLES) -> None:
        import array

        self.deadline_s, self.exact_limit = deadline_s, exact_limit
        self.samples: Any = array.array("d")
        self.hist: Any = None
        self.count = self.misses = 0
        self.total, self.min, self.max = 0.0, math.inf, -math.inf

    @property
    def exact(self) -> bool:
        return self.hist is None

    def add(self, x: float) -> None:
        self.count += 1
        self.total += x
        self.min, self.max = min(self.min, x), max(self.max, x)
        if x > self.deadline_s:
            self.misses += 1
        if self.hist is None:
            self.samples.append(x)
            if len(self.samples) > self.exact_limit:
                self._fold()
        else:
            self.hist[self._bin(x)] += 1

    @staticmethod
    def _bin(x: float) -> int:
        if x <= _HIST_LO_S:
            return 0
        return min(int(math.log(x / _HIST_LO_S) / math.log(_HIST_RATIO)) + 1, _HIST_BINS - 1)

    def _fold(self) -> None:
        import numpy as np

        self.hist = np.zeros(_HIST_BINS, dtype=np.int64)
        a = np.frombuffer(self.samples, dtype=float)
        idx = np.where(a <= _HIST_LO_S, 0, np.minimum(
            (np.log(np.maximum(a, _HIST_LO_S) / _HIST_LO_S) / math.log(_HIST_RATIO)).astype(np.int64) + 1,
            _HIST_BINS - 1))
        np.add.at(self.hist, idx, 1)
        self.samples = None

    def percentiles(self, qs: Sequence[float]) -> list[float]:
        """Percentiles ``qs`` (0-100) read from the histogram: the sample of rank ``q/100 * (count-1)``
        taken at its bin's geometric centre, clipped to the exact [min, max]."""
        import numpy as np

        cum = np.cumsum(self.hist)
        out = []
        for q in qs:
            rank = int(round(q / 100.0 * (self.count - 1)))
            b = int(np.searchsorted(cum, rank + 1))
            if b == 0:
                v = self.min
            else:
                v = _HIST_LO_S * _HIST_RATIO ** (b - 0.5)
            out.append(float(min(max(v, self.min), self.max)))
        return out


@dataclass(frozen=True)
class TaskResult:
    name: str
    device: str
    priority: int
    deadline_s: float
    stats: ResponseStats
    wcrt_bound_s: float
    wcet_s: float
    period_s: float
    released: int
    transfer_s: float = 0.0  # worst-case input transfers in wcet_s
    contention_s: float = 0.0  # worst-case shared-DRAM slowdown in wcet_s


@dataclass(frozen=True)
class ChainResult:
    name: str
    tasks: tuple[str, ...]
    deadline_s: float
    stats: ResponseStats
    wcrt_bound_s: float


@dataclass(frozen=True)
class DeviceResult:
    name: str
    spec: str
    utilisation: float  # simulated busy time / simulated time
    utilisation_wcet: float  # sum of worst-case work / period
    tasks: tuple[str, ...]
    busy_s: float = 0.0  # simulated busy time
    work_s: float = 0.0  # standalone time of the kernels it ran (busy_s minus shared-DRAM slowdown)
    contended_s: float = 0.0  # time it ran a kernel below full speed (shared DRAM)

    @property
    def stretch(self) -> float:
        """Busy time over standalone work: 1 without shared-DRAM contention."""
        return self.busy_s / self.work_s if self.work_s > 0 else 1.0

    @property
    def overloaded(self) -> bool:
        """Worst-case work per period above 100% of the device."""
        return self.utilisation_wcet > 1.0


def _num(x: float) -> float | None:
    """JSON number, or null for no value (NaN: no samples; inf: no bound)."""
    return float(x) if math.isfinite(x) else None


@dataclass(frozen=True)
class RealtimeResult:
    """Everything one ``nodeperf realtime`` run reports; :meth:`to_json` is byte-stable per input and seed."""

    scenario: str
    node: str
    frames: int
    seed: int
    horizon_s: float
    simulated_s: float
    stopped_by: str  # "frames", "time limit" or "backlog" (a ready queue passed MAX_BACKLOG jobs)
    tasks: tuple[TaskResult, ...]
    chains: tuple[ChainResult, ...]
    devices: tuple[DeviceResult, ...]
    report_lines: tuple[str, ...]
    warnings: tuple[str, ...]
    bound_exact: bool
    bound_quantile: float
    trace: tuple[tuple[str, str, int, float, float, int, int], ...] = field(default=(), repr=False)

    @property
    def utilisation(self) -> dict[str, float]:
        """Simulated busy fraction per device."""
        return {d.name: d.utilisation for d in self.devices}

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready data (null for no samples or no bound)."""
        def stats(s: ResponseStats, deadline: float, bound: float) -> dict[str, Any]:
            return {"jobs": s.count, "p50_s": _num(s.p50_s), "p99_s": _num(s.p99_s), "p999_s": _num(s.p999_s),
                    "max_s": _num(s.max_s), "min_s": _num(s.min_s), "mean_s": _num(s.mean_s),
                    "jitter_s": _num(s.jitter_s), "deadline_s": deadline, "deadline_misses": s.deadline_misses,
                    "miss_rate": s.miss_rate, "wcrt_bound_s": _num(bound), "bounded": math.isfinite(bound),
                    **({} if s.exact else {"percentiles": f"log histogram, within {HISTOGRAM_RELATIVE_ERROR:.2%}"})}

        return {
            "scenario": self.scenario, "node": self.node, "frames": self.frames, "seed": self.seed,
            "horizon_s": self.horizon_s, "simulated_s": self.simulated_s, "stopped_by": self.stopped_by,
            "bound_exact": self.bound_exact, "bound_quantile": self.bound_quantile,
            "tasks": [{"name": t.name, "device": t.device, "priority": t.priority, "released": t.released,
                       "wcet_s": t.wcet_s, "period_s": t.period_s, "transfer_s": t.transfer_s,
                       "contention_s": t.contention_s, **stats(t.stats, t.deadline_s, t.wcrt_bound_s)}
                      for t in self.tasks],
            "chains": [{"name": c.name, "tasks": list(c.tasks), **stats(c.stats, c.deadline_s, c.wcrt_bound_s)}
                       for c in self.chains],
            "utilisation": {d.name: d.utilisation for d in self.devices},
            "devices": [{"name": d.name, "spec": d.spec, "utilisation": d.utilisation,
                         "utilisation_wcet": d.utilisation_wcet, "overloaded": d.overloaded, "tasks": list(d.tasks),
                         "busy_s": d.busy_s, "work_s": d.work_s, "contended_s": d.contended_s,
                         "stretch": d.stretch}
                        for d in self.devices],
            "report": list(self.report_lines), "warnings": list(self.warnings),
        }

    def to_json(self) -> str:
        """The JSON ``--json`` prints: sorted keys, byte-identical for the same inputs and seed."""
        return json.dumps(self.to_dict(), sort_keys=True, indent=1)

    def to_table(self) -> str:
        """The human report: one row per task and chain, then devices and report lines."""
        from simulator.report.formatting import si

        def ms(x: float) -> str:
            if not math.isfinite(x):
                return "-"
            return "0 s" if abs(x) < _SHOWN_ZERO_S else si(x, "s")

        lines = [f"{self.scenario} on {self.node}: {self.frames} frames, seed {self.seed}, "
                 f"{self.simulated_s:.3f} s simulated (stopped by {self.stopped_by})", ""]
        head = (f"{'task':<16} {'device':<8} {'prio':>4} {'jobs':>6} {'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9} "
                f"{'bound':>9} {'deadline':>9} {'misses':>7} {'rate':>7} {'jitter':>9}")
        lines.append(head)
        lines.append("-" * len(head))
        for t in self.tasks:
            s = t.stats
            lines.append(f"{t.name:<16} {t.device:<8} {t.priority:>4} {s.count:>6} {ms(s.p50_s):>9} {ms(s.p99_s):>9} "
                         f"{ms(s.p999_s):>9} {ms(s.max_s):>9} {ms(t.wcrt_bound_s) if math.isfinite(t.wcrt_bound_s) else 'none':>9} "
                         f"{ms(t.deadline_s):>9} {s.deadline_misses:>7} {s.miss_rate:>7.2%} {ms(s.jitter_s):>9}")
        if self.chains:
            lines.append("")
            chead = (f"{'chain':<30} {'samples':>7} {'p50':>9} {'p99':>9} {'p99.9':>9} {'max':>9} {'bound':>9} "
                     f"{'deadline':>9} {'misses':>7} {'rate':>7}")
            lines.append(chead)
            lines.append("-" * len(chead))
            for c in self.chains:
                s = c.stats
                bound = ms(c.wcrt_bound_s) if math.isfinite(c.wcrt_bound_s) else "none"
                lines.append(f"{c.name:<30} {s.count:>7} {ms(s.p50_s):>9} {ms(s.p99_s):>9} {ms(s.p999_s):>9} "
                             f"{ms(s.max_s):>9} {bound:>9} {ms(c.deadline_s):>9} {s.deadline_misses:>7} "
                             f"{s.miss_rate:>7.2%}")
        lines.append("")
        for d in self.devices:
            slow = (f"; shared DRAM slowed it {d.contended_s / self.simulated_s:.1%} of the time, busy "
                    f"{d.stretch - 1:.1%} longer than standalone" if d.contended_s > 0 and self.simulated_s > 0 else "")
            lines.append(f"device {d.name} ({d.spec}): utilisation {d.utilisation:.1%} simulated, "
                         f"{d.utilisation_wcet:.1%} at worst-case work; tasks {', '.join(d.tasks) or 'none'}{slow}")
        for line in self.report_lines:
            lines.append(line)
        for w in self.warnings:
            lines.append(f"warning: {w}")
        return "\n".join(lines)

    def chrome_trace(self) -> dict[str, Any]:
        """The executed job runs as a Chrome trace (one track per device), as :mod:`simulator.report.trace`."""
        dev_ids = {d.name: i for i, d in enumerate(self.devices)}
        events: list[dict[str, Any]] = [
            {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": self.node}},
        ]
        for d in self.devices:
            events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": dev_ids[d.name],
                           "args": {"name": f"{d.name} ({d.spec})"}})
            events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": dev_ids[d.name],
                           "args": {"sort_index": dev_ids[d.name]}})
        for dev, task, k, start, end, k0, k1 in self.trace:
            events.append({"name": f"{task} #{k}", "cat": task, "ph": "X", "ts": start * 1e6, "dur": (end - start) * 1e6,
                           "pid": 0, "tid": dev_ids[dev], "args": {"job": k, "kernels": f"{k0}..{k1 - 1}"}})
        return {"traceEvents": events, "displayTimeUnit": "ns",
                "otherData": {"scenario": self.scenario, "node": self.node, "seed": str(self.seed),
                              "frames": str(self.frames)}}


class _Job:
    __slots__ = ("task", "k", "release", "variant", "pos", "values", "origins", "seq", "prio")

    def __init__(self, task: int, k: int, release: float, prio: int, seq: int) -> None:
        self.task = task
        self.k = k
        self.release = release
        self.prio = prio
        self.seq = seq
        self.pos = 0
        self.variant: Variant | None = None
        self.values: dict[str, int] = {}
        self.origins: dict[int, float] = {}


class _Draws:
    """Values of one variable, drawn in blocks from its own random stream (deterministic per seed)."""

    BLOCK = 4096

    def __init__(self, dist: Any, rng: Any) -> None:
        self.dist, self.rng, self.buf, self.i = dist, rng, [], 0

    def next(self) -> int:
        if self.i >= len(self.buf):
            self.buf, self.i = self.dist.draw(self.rng, self.BLOCK), 0
        self.i += 1
        return self.buf[self.i - 1]


def _source_releases(t: TaskSpec, horizon: float, rng: Any, block: int = 1 << 16) -> Iterator[float]:
    """Release times of the jobs of a task released by time (arrivals before ``horizon``), in order.

    Generated in blocks of ``block``, so memory stays bounded however many frames a run has. The draws
    are those of one vectorised call: a sporadic task's inter-arrival gaps (all of them) come first
    from ``rng`` and the jitters after, so the jitter stream starts ``n_max - 1`` draws further
    (``bit_generator.advance``; one 64-bit step per uniform double).
    """
    import numpy as np

    if t.activation == "periodic":
        n = max(0, math.ceil((horizon - t.offset_s) / t.period_s))
        for start in range(0, n, block):
            m = min(block, n - start)
            a = t.offset_s + np.arange(start, start + m) * t.period_s
            j = rng.uniform(0.0, t.jitter_s, size=m) if t.jitter_s > 0 else np.zeros(m)
            yield from (a + j).tolist()
        return
    n_max = int(math.ceil((horizon - t.offset_s) / t.period_s)) + 1
    jrng = None
    if t.jitter_s > 0:
        bg = type(rng.bit_generator)()
        bg.state = rng.bit_generator.state
        jrng = np.random.Generator(bg.advance(max(n_max - 1, 0)))
    total, done = 0.0, 1  # running sum of the gaps; the first arrival is the offset itself
    arr = np.array([0.0])
    while True:
        full = len(arr)
        arr = t.offset_s + arr
        arr = arr[arr < horizon]
        j = jrng.uniform(0.0, t.jitter_s, size=len(arr)) if jrng is not None else np.zeros(len(arr))
        yield from (arr + j).tolist()
        if len(arr) < full or done >= n_max:
            return
        m = min(block, n_max - done)
        gaps = rng.uniform(t.period_s, t.max_interarrival_s, size=m)
        gaps[0] += total  # so that cumsum continues the running sum, adding in the same order
        arr = np.cumsum(gaps)
        total = float(arr[-1])
        done += m


class _EventLoop:
    """The state of one run and its event handlers (see the module docstring); :meth:`run` drives it."""

    def __init__(self, scn: Scenario, costs: Mapping[str, TaskCost], analysis: Analysis,
                 device_specs: Mapping[str, str], horizon: float, seed: int, trace: bool) -> None:
        import numpy as np

        self.scn, self.costs, self.analysis, self.trace, self.horizon = scn, costs, analysis, trace, horizon
        self.tasks = tasks = list(scn.tasks)
        self.tidx = {t.name: i for i, t in enumerate(tasks)}
        self.sources = [t for t in tasks if t.is_source]
        self.devices = list(device_specs)
        self.didx = {d: i for i, d in enumerate(self.devices)}
        self.tdev = [self.didx[self.costs[t.name].device] for t in self.tasks]
        self.prio = [t.priority for t in self.tasks]
        self.seq_root = np.random.SeedSequence([seed, 0x5EA1])
        self.children = self.seq_root.spawn(len(self.tasks) + len(self.scn.variables))
        self.rngs_task = [np.random.default_rng(self.children[i]) for i in range(len(self.tasks))]
        self.draws = {v.name: _Draws(v.distribution, np.random.default_rng(self.children[len(self.tasks) + i]))
                 for i, v in enumerate(self.scn.variables)}
        self.produces: list[list[str]] = [[v.name for v in self.scn.variables if v.produced_by == t.name] for t in self.tasks]
        self.triggered: list[list[int]] = [[self.tidx[s.name] for s in self.tasks if s.trigger == t.name] for t in self.tasks]
        self.samples_from: list[list[int]] = [[self.tidx[a] for a in t.after if a != t.trigger] for t in self.tasks]
        # chains: (chain index, position) per task
        self.chain_pos: list[list[tuple[int, int]]] = [[] for _ in self.tasks]
        for ci, c in enumerate(self.scn.chains):
            for pos, name in enumerate(c.tasks):
                self.chain_pos[self.tidx[name]].append((ci, pos))
        self.chain_prev = [[self.tidx[c.tasks[p - 1]] if p > 0 else -1 for p in range(len(c.tasks))] for c in self.scn.chains]
        self.chain_last = [len(c.tasks) - 1 for c in self.scn.chains]
        self.var_lo = {v.name: v.distribution.lo for v in self.scn.variables}

        self.events: list[tuple[float, int, int, Any, Any]] = []
        self.seq = 0
        self.released = [0] * len(self.tasks)
        # one pending release per source (the next comes when it is popped): memory does not grow with frames;
        # release events order by (time, task index, job number), as when all were queued up front
        self.sources_next: dict[int, Iterator[float]] = {}
        for t in self.sources:
            i = self.tidx[t.name]
            self.sources_next[i] = _source_releases(t, self.horizon, self.rngs_task[i])
            first = next(self.sources_next[i], None)
            if first is not None:
                self.events.append((first, _RELEASE, i, i, 0))
        heapq.heapify(self.events)

        self.latest: list[_Job | None] = [None] * len(self.tasks)
        self.responses = [SampleStream(t.deadline_s) for t in self.tasks]
        self.chain_lat = [SampleStream(c.deadline_s) for c in self.scn.chains]
        self.backlog = [False]  # a device's ready queue passed MAX_BACKLOG jobs (an overload that never drains)
        self.ready: list[list[tuple[int, float, int, _Job]]] = [[] for _ in self.devices]
        self.running: list[_Job | None] = [None] * len(self.devices)
        self.chunk_start = [0.0] * len(self.devices)
        self.chunk_pos0 = [0] * len(self.devices)
        self.chunk_end_pos = [0] * len(self.devices)
        self.version = [0] * len(self.devices)
        self.pending = [False] * len(self.devices)
        self.busy = [0.0] * len(self.devices)
        self.worked = [0.0] * len(self.devices)  # standalone seconds of kernels run
        self.runs: list[tuple[str, str, int, float, float, int, int]] = []
        self.now = 0.0
        self.clock0 = time.monotonic()
        self.n_events = 0
        # inputs whose transfer a job of each task receives first: (producer index, is its trigger)
        self.inputs: list[list[int]] = [[self.tidx[x.producer] for x in self.costs[t.name].inputs] for t in self.tasks]
        self._init_pools()
        self.anchor_t = [0.0] * len(self.devices)  # position anchor: the job was at standalone second anchor_x at anchor_t
        self.anchor_x = [0.0] * len(self.devices)
        self.speed = [1.0] * len(self.devices)
        self.stepping = [False] * len(self.devices)
        self.kidx = [0] * len(self.devices)  # kernel in flight (stepping)
        self.target = [0.0] * len(self.devices)  # standalone position of the next event (stepping)
        self.contended = [0.0] * len(self.devices)  # seconds run below full speed


    def _init_pools(self) -> None:
        """Shared-DRAM pools of two or more of the run's devices."""
        # shared-DRAM pools: a device of a pool runs "solo" (one event per chunk, as a device of its own)
        # while it is the only busy device of its pool, and "stepping" (one event per kernel phase, at
        # the speed the pool's sharing gives it) while others are busy too
        self.pool_of = [-1] * len(self.devices)
        self.pool_devs: list[list[int]] = []
        self.sharing: list[PoolSharing] = []
        for pool in self.analysis.pools:
            members = [self.didx[d] for d in pool.devices if d in self.didx]
            if len(members) < 2:
                continue
            for d in members:
                self.pool_of[d] = len(self.pool_devs)
            self.pool_devs.append(members)
            self.sharing.append(PoolSharing(pool))

    def make_job(self, i: int, k: int, release: float, trigger_job: _Job | None) -> _Job:
        job = _Job(i, k, release, self.prio[i], self.seq)
        self.seq += 1
        inputs_now = ([trigger_job] if trigger_job is not None else []) + [self.latest[p] for p in self.samples_from[i]]
        for inp in inputs_now:
            if inp is not None:
                for key, val in inp.values.items():
                    job.values.setdefault(key, val)
        for name in self.produces[i]:
            job.values[name] = self.draws[name].next()
        for ci, pos in self.chain_pos[i]:
            if pos == 0:
                job.origins[ci] = release
                continue
            prev = self.chain_prev[ci][pos]
            src = trigger_job if (trigger_job is not None and trigger_job.task == prev) else self.latest[prev]
            if src is not None and ci in src.origins:
                job.origins[ci] = src.origins[ci]
        needed = {v: job.values.get(v, self.var_lo[v]) for v in self.tasks[i].variables}
        if self.inputs[i]:
            sizes = []
            for p in self.inputs[i]:
                src = trigger_job if (trigger_job is not None and trigger_job.task == p) else self.latest[p]
                sizes.append(src.variant.output_bytes if src is not None else 0.0)
            job.variant = self.costs[self.tasks[i].name].job_variant(needed, sizes)
        else:
            job.variant = self.costs[self.tasks[i].name].variant(needed)
        self.released[i] += 1
        return job

    def push(self, ev: tuple[float, int, int, Any, Any]) -> None:
        heapq.heappush(self.events, ev)

    def release(self, job: _Job, t: float) -> None:
        d = self.tdev[job.task]
        heapq.heappush(self.ready[d], (-job.prio, job.release, job.seq, job))
        if len(self.ready[d]) > MAX_BACKLOG:
            self.backlog[0] = True
        run = self.running[d]
        if run is not None:
            if job.prio > run.prio and self.chunk_end_pos[d] > self.chunk_pos0[d]:
                if self.pool_of[d] < 0:
                    cut = run.variant.boundary_at_or_after(self.chunk_pos0[d], t - self.chunk_start[d])
                    if cut < self.chunk_end_pos[d]:
                        self.chunk_end_pos[d] = cut
                        self.version[d] += 1
                        end = self.chunk_start[d] + (run.variant.prefix[cut] - run.variant.prefix[self.chunk_pos0[d]])
                        self.push((max(end, t), _DONE, self.seq, d, self.version[d]))
                        self.seq += 1
                elif self.stepping[d]:  # the kernel in flight ends the chunk; its end event is already due
                    self.chunk_end_pos[d] = min(self.chunk_end_pos[d], self.kidx[d] + 1)
                else:  # solo at full speed since the anchor
                    pre = run.variant.prefix
                    x = self.anchor_x[d] + (t - self.anchor_t[d])
                    cut = min(bisect.bisect_left(pre, x, lo=self.chunk_pos0[d]), len(run.variant.segments))
                    if cut < self.chunk_end_pos[d]:
                        self.chunk_end_pos[d] = cut
                        self.version[d] += 1
                        self.push((max(self.anchor_t[d] + (pre[cut] - self.anchor_x[d]), t), _DONE, self.seq, d, self.version[d]))
                        self.seq += 1
        elif not self.pending[d]:
            self.pending[d] = True
            self.push((t, _DISPATCH, self.seq, d, None))
            self.seq += 1

    def complete(self, job: _Job, t: float) -> None:
        i = job.task
        self.responses[i].add(t - job.release)
        self.latest[i] = job
        for ci, pos in self.chain_pos[i]:
            if pos == self.chain_last[ci] and ci in job.origins:
                self.chain_lat[ci].add(t - job.origins[ci])
        for s in self.triggered[i]:
            self.release(self.make_job(s, self.released[s], t, job), t)

    def end_chunk(self, d: int, t: float) -> None:
        job = self.running[d]
        self.running[d] = None
        self.stepping[d] = False
        if self.trace and len(self.runs) < MAX_TRACE_EVENTS and t > self.chunk_start[d]:
            self.runs.append((self.devices[d], self.tasks[job.task].name, job.k, self.chunk_start[d], t, self.chunk_pos0[d],
                         self.chunk_end_pos[d]))
        self.busy[d] += t - self.chunk_start[d]
        self.worked[d] += job.variant.prefix[self.chunk_end_pos[d]] - job.variant.prefix[self.chunk_pos0[d]]
        job.pos = self.chunk_end_pos[d]
        if job.pos >= len(job.variant.segments):
            self.complete(job, t)
        else:
            heapq.heappush(self.ready[d], (-job.prio, job.release, job.seq, job))
        if not self.pending[d]:
            self.pending[d] = True
            self.push((t, _DISPATCH, self.seq, d, None))
            self.seq += 1

    def reshare(self, p: int, t: float) -> None:
        """Re-divide pool ``p``'s DRAM at ``t`` and reschedule the next event of each of its self.busy self.devices."""
        live = [d for d in self.pool_devs[p] if self.running[d] is not None]
        if len(live) == 1:  # alone: full speed to the end of the chunk
            d = live[0]
            if self.stepping[d]:
                x = self.anchor_x[d] + (t - self.anchor_t[d]) * self.speed[d]
                if self.speed[d] < 1.0:
                    self.contended[d] += t - self.anchor_t[d]
                self.stepping[d] = False
                self.anchor_t[d], self.anchor_x[d], self.speed[d] = t, x, 1.0
                self.version[d] += 1
                self.push((max(t, t + self.running[d].variant.prefix[self.chunk_end_pos[d]] - x), _DONE, self.seq, d, self.version[d]))
                self.seq += 1
            return
        rates = []
        state = []
        for d in live:
            v = self.running[d].variant
            x = self.anchor_x[d] + (t - self.anchor_t[d]) * self.speed[d]
            fresh = not self.stepping[d]
            if fresh:
                k = bisect.bisect_right(v.prefix, x, lo=self.chunk_pos0[d], hi=self.chunk_end_pos[d]) - 1
                self.kidx[d] = min(max(k, self.chunk_pos0[d]), self.chunk_end_pos[d] - 1)
            k = self.kidx[d]
            fb = v.prefix[k] + v.fixed_s(k)
            in_fixed = x < fb
            rates.append(0.0 if in_fixed else v.rate(k))
            state.append((d, x, fb if in_fixed else v.prefix[k + 1], fresh))
        got = self.sharing[p].speeds(rates)
        for (d, x, tgt, fresh), s in zip(state, got, strict=True):
            if not fresh and s == self.speed[d] and tgt == self.target[d]:
                continue  # its next event stands
            if self.speed[d] < 1.0:
                self.contended[d] += t - self.anchor_t[d]
            self.stepping[d] = True
            self.anchor_t[d], self.anchor_x[d], self.speed[d], self.target[d] = t, x, s, tgt
            self.version[d] += 1
            self.push((max(t, t + (tgt - x) / s), _DONE, self.seq, d, self.version[d]))
            self.seq += 1

    def run(self, limit: float) -> str:
        """Process events until none is left, the wall-clock ``limit`` (s) passes or a ready queue
        overflows; returns what stopped the run."""
        stopped_by = "frames"
        while self.events:
            t, kind, _, a, b = heapq.heappop(self.events)
            self.now = t
            self.n_events += 1
            if self.n_events % _CHECK_CLOCK_EVERY == 0 and time.monotonic() - self.clock0 > limit:
                stopped_by = "time limit"
                break
            if self.backlog[0]:
                stopped_by = "backlog"
                break
            if kind == _RELEASE:
                nxt = next(self.sources_next[a], None)
                if nxt is not None:
                    self.push((nxt, _RELEASE, a, a, b + 1))
                self.release(self.make_job(a, b, t, None), t)
            elif kind == _DISPATCH:
                d = a
                self.pending[d] = False
                if self.running[d] is not None or not self.ready[d]:
                    continue
                job = heapq.heappop(self.ready[d])[3]
                self.running[d] = job
                self.chunk_start[d], self.chunk_pos0[d] = t, job.pos
                self.chunk_end_pos[d] = len(job.variant.segments)
                if self.pool_of[d] < 0:
                    self.version[d] += 1
                    self.push((t + job.variant.prefix[-1] - job.variant.prefix[job.pos], _DONE, self.seq, d, self.version[d]))
                    self.seq += 1
                else:
                    self.anchor_t[d], self.anchor_x[d], self.speed[d], self.stepping[d] = t, job.variant.prefix[job.pos], 1.0, False
                    if sum(1 for e in self.pool_devs[self.pool_of[d]] if self.running[e] is not None) == 1:
                        self.version[d] += 1
                        self.push((t + job.variant.prefix[-1] - job.variant.prefix[job.pos], _DONE, self.seq, d, self.version[d]))
                        self.seq += 1
                    else:
                        self.reshare(self.pool_of[d], t)
            else:  # _DONE: a chunk ends (solo) or a kernel phase ends (stepping)
                d = a
                if b != self.version[d]:
                    continue  # superseded by a cut or a new share
                if not self.stepping[d]:
                    self.end_chunk(d, t)
                    if self.pool_of[d] >= 0:
                        self.reshare(self.pool_of[d], t)
                    continue
                if self.speed[d] < 1.0:
                    self.contended[d] += t - self.anchor_t[d]
                x = self.target[d]
                self.anchor_t[d], self.anchor_x[d] = t, x
                v = self.running[d].variant
                if x >= v.prefix[self.kidx[d] + 1]:  # the kernel in flight ended
                    self.kidx[d] += 1
                    if self.kidx[d] >= self.chunk_end_pos[d]:
                        self.end_chunk(d, t)
                self.target[d] = -1.0  # force a new event for this device
                self.reshare(self.pool_of[d], t)

        return stopped_by


def simulate_scenario(scn: Scenario, costs: Mapping[str, TaskCost], analysis: Analysis, *, node_name: str,
                      device_specs: Mapping[str, str], frames: int | None = None, seed: int | None = None,
                      time_limit_s: float | None = None, trace: bool = False) -> RealtimeResult:
    """Run the event loop (see the module docstring) and summarise it beside ``analysis``'s bounds."""
    frames = int(frames if frames is not None else scn.frames)
    seed = int(seed if seed is not None else scn.seed)
    limit = float(time_limit_s if time_limit_s is not None else scn.time_limit_s)
    if frames < 1:
        raise ScenarioError(f"{scn.where}: frames; got {frames}; expected a positive frame budget")
    sources = [t for t in scn.tasks if t.is_source]
    if not sources:
        raise ScenarioError(f"{scn.where}: tasks; got no task with a rate, period or min_interarrival; expected at "
                            "least one task released by time")
    horizon = frames * min(float(t.period_s) for t in sources)
    if horizon > CLOCK_SPAN_S:
        raise ScenarioError(f"{scn.where}: frames; got {frames}: a horizon of {horizon:.3g} s; expected at most "
                            f"{CLOCK_SPAN_S:.3g} s (the simulated clock keeps 1 ns steps up to 2**52 ns)")
    loop = _EventLoop(scn, costs, analysis, device_specs, horizon, seed, trace)
    stopped_by = loop.run(limit)
    return _result(scn, costs, analysis, loop, stopped_by, node_name=node_name, device_specs=device_specs,
                   frames=frames, seed=seed)


def _result(scn: Scenario, costs: Mapping[str, TaskCost], analysis: Analysis, loop: _EventLoop, stopped_by: str, *,
            node_name: str, device_specs: Mapping[str, str], frames: int, seed: int) -> RealtimeResult:
    """The run's statistics beside the analysis' bounds."""
    tasks, devices, horizon, now = loop.tasks, loop.devices, loop.horizon, loop.now
    responses, chain_lat, busy, worked, contended = loop.responses, loop.chain_lat, loop.busy, loop.worked, loop.contended
    runs, released = loop.runs, loop.released
    simulated = max(now, horizon) if stopped_by == "frames" else now  # a stopped run: the time it reached
    task_results = []
    for i, t in enumerate(tasks):
        b = analysis.tasks[t.name]
        task_results.append(TaskResult(t.name, costs[t.name].device, t.priority, t.deadline_s,
                                       ResponseStats.of_stream(responses[i]), b.response_bound_s, b.wcet_s,
                                       b.period_s, released[i], b.transfer_s, b.contention_s))
    chain_results = [ChainResult(c.name, c.tasks, c.deadline_s, ResponseStats.of_stream(chain_lat[ci]),
                                 analysis.chains[c.name].bound_s) for ci, c in enumerate(scn.chains)]
    dev_results = [DeviceResult(d, device_specs[d], busy[di] / simulated if simulated > 0 else 0.0,
                                analysis.utilisation.get(d, 0.0),
                                tuple(t.name for t in tasks if costs[t.name].device == d), busy[di], worked[di],
                                contended[di])
                   for di, d in enumerate(devices)]
    lines = list(_report_lines(scn, analysis, dev_results, task_results, chain_results, stopped_by, frames))
    warnings = sorted({f"{n}: {w}" for n, c in costs.items() for w in c.warnings})
    return RealtimeResult(scn.name, node_name, frames, seed, horizon, simulated, stopped_by, tuple(task_results),
                          tuple(chain_results), tuple(dev_results), tuple(lines), tuple(warnings), analysis.exact,
                          scn.bound_quantile, tuple(runs))


def _report_lines(scn: Scenario, analysis: Analysis, devices: Sequence[DeviceResult], tasks: Sequence[TaskResult],
                  chains: Sequence[ChainResult], stopped_by: str, frames: int) -> list[str]:
    out = []
    for d in devices:
        if d.overloaded:
            out.append(f"overload: device {d.name}: utilisation at worst-case work {d.utilisation_wcet:.1%} > 100%; "
                       + ("no finite bound for its lowest-priority tasks" if not analysis.pools else
                          "its lowest-priority tasks may have no finite bound (work at its worst shared-DRAM speed)")
                       + "; simulated anyway, misses counted")
    for pool in analysis.pools:
        out.append(f"contention: {', '.join(pool.devices)} share {pool.bandwidth_bytes_per_s / 1e9:.1f} GB/s of DRAM "
                   f"({pool.source}); overlapping kernels get max-min fair shares, and the bound slows every kernel "
                   "to its worst share")
    for t in tasks:
        if t.transfer_s > 0:
            out.append(f"transfer: task {t.name}: its inputs from other devices add up to {t.transfer_s * 1e6:.1f} us "
                       "to a job (charged to its device before its kernels)")
    if stopped_by == "time limit":
        out.append(f"stopped: the wall-clock limit ended the run before all {frames} frames were simulated; the "
                   "statistics cover the jobs finished so far")
    elif stopped_by == "backlog":
        out.append(f"stopped: a device's ready queue passed {MAX_BACKLOG:,} jobs (it never catches up: see the "
                   f"utilisation) before all {frames} frames were simulated; the statistics cover the jobs "
                   "finished so far")
    for what, x in [*(("task", t) for t in tasks), *(("chain", c) for c in chains)]:
        if not x.stats.exact:
            out.append(f"percentiles: {what} {x.name}: {x.stats.count:,} samples, more than the {EXACT_SAMPLES:,} "
                       f"kept exactly; p50/p99/p99.9 read from a log histogram, within "
                       f"{HISTOGRAM_RELATIVE_ERROR:.2%} (count, min, max, mean and misses exact)")
    if not analysis.exact:
        out.append(f"bound: conditional: unbounded input distributions are bounded at their {scn.bound_quantile:g} "
                   "quantile; a larger draw may exceed the bound")
    for t in tasks:
        if math.isfinite(t.wcrt_bound_s) and t.wcrt_bound_s > t.deadline_s:
            out.append(f"bound: task {t.name}: worst-case response bound {t.wcrt_bound_s * 1e3:.3f} ms exceeds its "
                       f"deadline {t.deadline_s * 1e3:.3f} ms: misses are possible")
    for c in chains:
        if math.isfinite(c.wcrt_bound_s) and c.wcrt_bound_s > c.deadline_s:
            out.append(f"bound: chain {c.name}: end-to-end bound {c.wcrt_bound_s * 1e3:.3f} ms exceeds its deadline "
                       f"{c.deadline_s * 1e3:.3f} ms")
    out.extend(analysis.notes)
    return out


def run_realtime(scenario: str | Scenario, hardware: Any, *, frames: int | None = None, seed: int | None = None,
                 time_limit_s: float | None = None, trace: bool = False, overlays: Sequence[str] = (),
                 placement: Mapping[str, str] | None = None, calibration: str | None = None,
                 contention: bool = True, transfers: bool = True, progress: bool | None = None) -> RealtimeResult:
    """Load, cost, bound and simulate a scenario: what ``nodeperf realtime`` runs.

    Parameters
    ----------
    scenario
        A scenario TOML path or a loaded :class:`Scenario`.
    hardware
        A catalog node, device or system name, a TOML path, or a NodeSpec / DeviceSpec / SystemSpec.
    frames, seed, time_limit_s
        Override the scenario's frame budget, seed and wall-clock limit.
    overlays
        Overlay TOML files (a power mode, a calibration) applied to every device that accepts them.
    placement
        Task -> device overrides of the scenario's ``device`` keys.
    contention
        Devices of the node's ``shared_memory`` share its DRAM bandwidth when their kernels overlap
        (False: every device runs as if alone, the behaviour before shared memory was modelled).
    transfers
        A job whose predecessor ran on another device first receives its output over their link
        (False: data moves between devices for free).
    progress
        A bar of the tasks being costed on standard error (None: see
        :func:`simulator.report.progress.progress_enabled`).

    Examples
    --------
    >>> r = run_realtime("studies/av_perception/scenario.toml", "l4", frames=300)  # doctest: +SKIP
    >>> all(t.stats.max_s <= t.wcrt_bound_s for t in r.tasks)  # doctest: +SKIP
    True
    """
    scn = scenario if isinstance(scenario, Scenario) else load_scenario(scenario, placement=placement)
    if isinstance(scenario, Scenario) and placement:
        import dataclasses

        unknown = sorted(set(placement) - {t.name for t in scn.tasks})
        if unknown:
            raise ScenarioError(f"{scn.where}: --place {unknown[0]}: unknown task; got {unknown[0]!r}; expected one "
                                f"of {', '.join(t.name for t in scn.tasks)}")
        scn = dataclasses.replace(scn, tasks=tuple(
            dataclasses.replace(t, device=(placement[t.name],) if t.name in placement else t.device)
            for t in scn.tasks))
    node = resolve_node(hardware, calibration=calibration)
    for ov in overlays:
        node = apply_node_overlay(node, ov)
    costs = cost_scenario(scn, node, transfers=transfers, progress=progress)
    analysis = analyse(scn, costs, memory_pools(node) if contention else ())
    specs = {d.name: d.spec.name for d in node.devices}
    return simulate_scenario(scn, costs, analysis, node_name=node.name, device_specs=specs, frames=frames, seed=seed,
                             time_limit_s=time_limit_s, trace=trace)
