"""Capacity planning: search serving deployments for the highest load meeting SLOs, or the lowest cost.

Each candidate is one deployment (hardware, tensor-parallel degree, precision, replicas, ``max_num_seqs``,
chunk size). Its capacity is the highest Poisson arrival rate at which every SLO holds, found by
bisection over rates: each probe is one seeded :func:`simulator.serving.simulate_serving` run of
``max(requests, ceil(qps * probe_seconds))`` requests (the same seed for every probe, so the rates compare
the same request mix). The arrivals of a probe span at least ``probe_seconds`` (default 30 s): a short
burst of few requests at a rate above capacity would otherwise finish within the SLO before its queue grows. The
search starts at ``qps_min``, doubles the rate until an SLO fails (at most ``qps_max``), then halves the
bracket ``steps`` times. A candidate is rejected, with the reason, when it cannot run at all (does not
fit, a plan larger than the system, ...) or violates an SLO already at ``qps_min``.

Objectives: ``max-qps`` (highest capacity first) and ``min-cost`` (lowest ``usd_per_million_tokens`` at
the candidate's capacity first; the cost is priced by the serving summary, :mod:`hwmodels.cost`).
"""

from __future__ import annotations

import itertools
import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean
from simulator.sweep.tune import TuneError

__all__ = ["OBJECTIVES", "ServeCandidate", "CandidateOutcome", "ServeTuneResult", "ServeTuneError",
           "candidates", "max_rate", "tune_serving"]

logger = logging.getLogger(__name__)

#: Objective -> what ranks the feasible candidates.
OBJECTIVES = {"max-qps": "highest SLO-meeting Poisson rate first",
              "min-cost": "lowest usd_per_million_tokens at that rate first"}


#: A bad serving-search setting (one located line): ``nodeperf tune``'s error.
ServeTuneError = TuneError


@dataclass(frozen=True)
class ServeCandidate:
    """One serving deployment of the search."""

    hardware: str
    tp: int = 1
    dtype: str | None = None
    replicas: int = 1
    max_num_seqs: int | None = None
    chunk: int | None = None

    def label(self) -> str:
        parts = [self.hardware, f"tp{self.tp}"]
        parts += [self.dtype] if self.dtype else []
        parts += [f"x{self.replicas}"] if self.replicas != 1 else []
        parts += [f"seqs{self.max_num_seqs}"] if self.max_num_seqs else []
        parts += [f"chunk{self.chunk}"] if self.chunk else []
        return " ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "tp": self.tp, "dtype": self.dtype, "replicas": self.replicas,
                "max_num_seqs": self.max_num_seqs, "chunk": self.chunk}


@dataclass
class CandidateOutcome:
    """A candidate's capacity (``qps`` None: rejected, ``reason`` says why) and its probes.

    ``qps`` is the *offered* rate: the Poisson arrival rate of the last probe that met every SLO. The cost
    ``usd_per_million_tokens`` is priced at what that probe *achieved*: the devices' hourly price over the
    output tokens it served per hour (its requests over its makespan, which runs past the last arrival while the
    queue drains), so ``usd_per_million_tokens = usd_per_hour / (achieved_output_tokens_per_s x 3600) x 1e6``.
    :meth:`to_json` states both rates (``offered_*`` and ``achieved_*``)."""

    candidate: ServeCandidate
    qps: float | None = None
    usd_per_million_tokens: float | None = None
    reason: str | None = None
    probes: list[tuple[float, bool, int]] = field(default_factory=list)
    summary: dict[str, Any] | None = None
    #: every probe up to ``qps_max`` met the SLOs: ``qps`` (= ``qps_max``) is a lower bound of the capacity
    capped: bool = False

    def rates(self) -> dict[str, Any]:
        """The offered and achieved rates of the capacity probe and the hourly price the cost divides (empty
        without a summary): ``offered_requests_per_s`` (= ``qps``), ``offered_output_tokens_per_s`` (that rate
        times the probe's mean output length), ``achieved_requests_per_s`` and ``achieved_output_tokens_per_s``
        (requests and output tokens over the makespan), ``usd_per_hour`` (every device of the deployment; None
        when unpriced) and ``cost_rate`` (``"achieved"``: the rate the cost per million tokens is priced at)."""
        s = self.summary
        if s is None or self.qps is None:
            return {}
        mean_out = s["output_tokens"] / s["requests"] if s.get("requests") else 0.0
        cost = s.get("cost") or {}
        hourly = cost.get("usd_per_device_hour")
        return {"offered_requests_per_s": self.qps, "offered_output_tokens_per_s": self.qps * mean_out,
                "achieved_requests_per_s": s["requests_per_s"], "achieved_output_tokens_per_s": s["output_tokens_per_s"],
                "usd_per_hour": None if hourly is None else hourly * s["devices"], "cost_rate": "achieved"}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {**self.candidate.to_json(), "label": self.candidate.label(), "qps": self.qps,
                               "usd_per_million_tokens": self.usd_per_million_tokens,
                               "capacity_capped": self.capped,
                               "probes": [{"qps": q, "met": m, "requests": n} for q, m, n in self.probes]}
        if self.reason:
            out["reason"] = self.reason
        if self.summary is not None:
            out["ttft_p99_s"] = self.summary["ttft_s"]["p99"]
            out["tpot_p99_s"] = self.summary["tpot_s"]["p99"]
            out["output_tokens_per_s"] = self.summary["output_tokens_per_s"]
            out.update(self.rates())
            if self.summary.get("cost"):  # how usd_per_million_tokens was priced: mode, hourly price, provider
                out["cost"] = self.summary["cost"]
        return out


@dataclass
class ServeTuneResult:
    """Ranked feasible candidates and rejected ones with their reasons."""

    objective: str
    ranked: list[CandidateOutcome]
    rejected: list[CandidateOutcome]
    requests_per_probe: int

    @property
    def best(self) -> CandidateOutcome | None:
        return self.ranked[0] if self.ranked else None

    def to_json(self) -> dict[str, Any]:
        return {"objective": self.objective, "requests_per_probe": self.requests_per_probe,
                "best": self.best.to_json() if self.best else None,
                "ranked": [c.to_json() for c in self.ranked], "rejected": [c.to_json() for c in self.rejected]}


def candidates(hardware: Sequence[str], tp: Sequence[int] = (1,), dtype: Sequence[str | None] = (None,),
               replicas: Sequence[int] = (1,), max_num_seqs: Sequence[int | None] = (None,),
               chunk: Sequence[int | None] = (None,)) -> list[ServeCandidate]:
    """Every combination of the axes, in order."""
    return [ServeCandidate(h, t, d, r, m, c)
            for h, t, d, r, m, c in itertools.product(hardware, tp, dtype, replicas, max_num_seqs, chunk)]


def _violations(summary: dict[str, Any]) -> list[str]:
    return [f"{s['metric']} = {s['value_s']:.4g} s > {s['bound_s']:.4g} s" for s in summary["slo"] if not s["met"]]


def probe_requests(base: Any, qps: float, probe_seconds: float) -> int:
    """Requests of one probe at ``qps``: ``base.requests`` (default 200), or more so that arrivals span
    ``probe_seconds``."""
    return max(base.requests or 200, math.ceil(qps * probe_seconds))


def _probe(model: Any, cand: ServeCandidate, base: Any, qps: float, probe_seconds: float) -> dict[str, Any]:
    from simulator.serving import simulate_serving
    from workloads.parallel import ParallelPlan

    config = replace(base, arrival=f"poisson:qps={qps:.6g}", requests=probe_requests(base, qps, probe_seconds), replicas=cand.replicas, dtype=cand.dtype or base.dtype,
                     max_num_seqs=cand.max_num_seqs or base.max_num_seqs, chunk=cand.chunk or base.chunk)
    return simulate_serving(model, cand.hardware, config, ParallelPlan(tp=cand.tp)).summary


def _priced(summary: dict[str, Any], pricing: Any) -> float | None:
    """USD per million output tokens of a probe's ``summary``, priced again by ``pricing`` where given (a
    :class:`hwmodels.cost.Pricing`: ``--price tco``), the summary's ``cost`` replaced by that pricing's."""
    if pricing is not None:
        from simulator.serving.metrics import reprice

        summary["cost"] = reprice(summary, pricing)
    return summary["cost"].get("usd_per_million_tokens")


def max_rate(model: Any, cand: ServeCandidate, base: Any, qps_min: float = 0.25, qps_max: float = 1024.0,
             steps: int = 5, probe_seconds: float = 30.0, pricing: Any = None) -> CandidateOutcome:
    """The highest Poisson rate of ``cand`` meeting every SLO of ``base`` (see the module docstring), its cost
    priced by ``pricing`` (default the summary's)."""
    out = CandidateOutcome(cand)

    def run(qps: float) -> dict[str, Any] | None:
        try:
            s = _probe(model, cand, base, qps, probe_seconds)
        except NodeperfError as e:  # the deployment cannot run at all: the same at every rate
            out.reason = f"cannot run: {str(e).splitlines()[0]}"
            return None
        out.probes.append((qps, not _violations(s), probe_requests(base, qps, probe_seconds)))
        return s

    s = run(qps_min)
    if s is None:
        return out
    if _violations(s):
        out.reason = f"SLO violated at the lowest rate ({qps_min:g} req/s): {'; '.join(_violations(s))}"
        return out
    good, good_s, bad = qps_min, s, None

    def climb() -> Iterator[float]:  # doubling from the lowest rate, then qps_max itself where doubling stopped short (64 for 100)
        while bad is None and good * 2 <= qps_max:
            yield good * 2
        if bad is None and good < qps_max:
            yield qps_max

    def bisect() -> Iterator[float]:  # between the highest rate that met the SLOs and the lowest that did not (set)
        for _ in range(steps if bad is not None else 0):
            yield (good + bad) / 2

    for phase in (climb, bisect):
        for rate in phase():
            s = run(rate)
            if s is None:
                return out
            if _violations(s):
                bad = rate
            else:
                good, good_s = rate, s
        if phase is climb:
            out.capped = bad is None  # every probe met the SLOs: the capacity is at least qps_max
    out.qps, out.summary = good, good_s
    out.usd_per_million_tokens = _priced(good_s, pricing)
    return out


def _check(model: Any, base: Any, objective: str) -> None:
    from simulator.serving.lengths import parse_lengths
    from simulator.serving.metrics import check_slos, parse_slo
    from simulator.serving.scheduler import SCHEDULERS

    if objective not in OBJECTIVES:
        raise ServeTuneError(f"--objective: unknown serving objective; got {objective!r}; expected "
                             f"{' or '.join(OBJECTIVES)}{did_you_mean(objective, list(OBJECTIVES))}")
    if not base.slo:
        raise ServeTuneError("--slo: none given; got no SLO; expected at least one, e.g. --slo 'ttft_p99<=2 s'")
    for i, text in enumerate(base.slo):
        parse_slo(text, f"--slo #{i + 1}")
    check_slos(base.slo, "--slo")
    parse_lengths(base.lengths)
    if base.scheduler not in SCHEDULERS:  # one located line, not every candidate rejected for the same name
        raise ServeTuneError(f"--scheduler: unknown scheduler; got {base.scheduler!r}; expected one of "
                             f"{', '.join(SCHEDULERS)}{did_you_mean(str(base.scheduler), SCHEDULERS)}")


def tune_serving(model: Any, cands: Sequence[ServeCandidate], base: Any, objective: str = "max-qps",
                 qps_min: float = 0.25, qps_max: float = 1024.0, steps: int = 5,
                 probe_seconds: float = 30.0, pricing: Any = None) -> ServeTuneResult:
    """Search ``cands`` (see the module docstring); ``base`` is a :class:`~simulator.serving.ServeConfig`
    giving lengths, scheduler, SLOs, ``requests`` per probe and ``seed``; ``pricing``: how a device-hour is
    priced (a :class:`hwmodels.cost.Pricing`; default the summary's cloud price).

    Raises :class:`ServeTuneError` (or the serving error of a bad SLO / length spec) before any probe."""
    _check(model, base, objective)
    if not cands:
        raise ServeTuneError("candidates: none; got an empty search space; expected at least one hardware")
    chunks = sorted({c.chunk for c in cands if c.chunk is not None})
    if chunks and base.scheduler != "sarathi":  # one located line, not every candidate rejected for it
        raise ServeTuneError(f"--chunk: Sarathi-Serve's chunk size; got {','.join(map(str, chunks))} with --scheduler "
                             f"{base.scheduler}; expected --scheduler sarathi (vllm chunks by its token budget)")
    outcomes = [max_rate(model, c, base, qps_min, qps_max, steps, probe_seconds, pricing) for c in cands]
    ok = [o for o in outcomes if o.qps is not None]
    if objective == "max-qps":
        ok.sort(key=lambda o: (-o.qps, o.usd_per_million_tokens if o.usd_per_million_tokens is not None else 1e300))
    else:
        for o in ok:
            if o.usd_per_million_tokens is None:
                o.reason = "no price for this hardware: cannot rank by cost"
        priced = [o for o in ok if o.usd_per_million_tokens is not None]
        ok = sorted(priced, key=lambda o: (o.usd_per_million_tokens, -o.qps))
    rejected = [o for o in outcomes if o not in ok]
    return ServeTuneResult(objective, ok, rejected, base.requests or 200)
