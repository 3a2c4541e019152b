"""Request arrivals: when requests reach the deployment (open-loop processes, closed-loop clients, traces).

Specs (``--arrival``):

* ``poisson:qps=Q``: exponential gaps of mean ``1/Q`` (vLLM's ``benchmark_serving`` with
  ``--request-rate Q`` and burstiness 1);
* ``gamma:qps=Q,cv=C``: gamma gaps of mean ``1/Q`` and coefficient of variation ``C`` (shape ``1/C^2``;
  ``benchmark_serving``'s ``--burstiness`` is the shape);
* ``concurrency:n=N``: closed loop, N clients each sending its next request when its previous one has
  finished (``benchmark_serving --max-concurrency`` with every request sent at once);
* ``burst``: every request at t = 0 (offline throughput);
* ``trace:FILE.csv``: arrival times (and lengths) from a file: the Azure LLM inference trace columns
  ``TIMESTAMP, ContextTokens, GeneratedTokens`` (times as date-times or seconds) or a plain
  ``arrival_s, input_len, output_len`` CSV; rows must be sorted by time.

Everything random draws from one :class:`numpy.random.Generator` seeded by the caller.
"""

from __future__ import annotations

import csv
import io
import math
import os
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean, short_text
from simulator.engines import CLOCK_SPAN_S
from simulator.serving.config import ServingError

__all__ = ["ArrivalSpec", "parse_arrival", "arrival_times", "client_arrival_times", "read_trace", "parse_params", "ARRIVAL_KINDS",
           "MAX_HORIZON_S"]

ARRIVAL_KINDS = ("poisson", "gamma", "concurrency", "burst", "trace")

#: Longest span of simulated time (s): the event clock's :data:`simulator.engines.CLOCK_SPAN_S` (2**52 ns).
MAX_HORIZON_S = CLOCK_SPAN_S


@dataclass(frozen=True)
class ArrivalSpec:
    """A parsed ``--arrival``: ``kind`` and its parameters (``qps``, ``cv``, ``n`` or ``path``)."""

    kind: str
    qps: float = 0.0
    cv: float = 1.0
    n: int = 0
    path: str = ""

    @property
    def closed_loop(self) -> bool:
        return self.kind == "concurrency"


def parse_params(text: str, where: str, allowed: tuple[str, ...]) -> dict[str, str]:
    """``k=v,k=v`` into a dict; unknown keys and repeats are refused (located, with a near match)."""
    out: dict[str, str] = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            raise ServingError(f"{where}: empty parameter; got {text!r}; expected key=value[,key=value]")
        key, sep, val = part.partition("=")
        key = key.strip()
        if not sep or not val.strip():
            raise ServingError(f"{where}: {part!r} has no value; got {text!r}; expected key=value")
        if key not in allowed:
            raise ServingError(f"{where}: unknown parameter {key!r}; got {text!r}; expected "
                               f"{', '.join(allowed)}{did_you_mean(key, allowed)}")
        if key in out:
            raise ServingError(f"{where}: {key} given twice; got {text!r}; expected it once")
        out[key] = val.strip()
    return out


def positive_number(text: str, where: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise ServingError(f"{where}: got {text!r}; expected a positive number") from None
    if not math.isfinite(v) or v <= 0:
        raise ServingError(f"{where}: got {text!r}; expected a positive finite number")
    return v


def positive_integer(text: str, where: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise ServingError(f"{where}: got {text!r}; expected a positive integer") from None
    if v < 1:
        raise ServingError(f"{where}: got {text!r}; expected a positive integer")
    return v


def parse_arrival(text: str, where: str = "--arrival") -> ArrivalSpec:
    """Parse an arrival spec (see the module docstring); :class:`ServingError` on a bad one."""
    text = str(text).strip()
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in ARRIVAL_KINDS:
        raise ServingError(f"{where}: unknown arrival process {kind!r}; got {text!r}; expected "
                           f"poisson:qps=Q, gamma:qps=Q,cv=C, concurrency:n=N, burst or trace:FILE.csv"
                           f"{did_you_mean(kind, ARRIVAL_KINDS)}")
    if kind == "burst":
        if rest.strip():
            raise ServingError(f"{where}: burst takes no parameters; got {text!r}; expected burst")
        return ArrivalSpec("burst")
    if kind == "trace":
        if not rest.strip():
            raise ServingError(f"{where}: trace needs a file; got {text!r}; expected trace:FILE.csv")
        return ArrivalSpec("trace", path=rest.strip())
    allowed = {"poisson": ("qps",), "gamma": ("qps", "cv"), "concurrency": ("n",)}[kind]
    p = parse_params(rest, where, allowed)
    missing = [k for k in allowed if k not in p]
    if missing:
        raise ServingError(f"{where}: {kind} needs {', '.join(missing)}; got {text!r}; expected "
                           + {"poisson": "poisson:qps=8", "gamma": "gamma:qps=8,cv=3", "concurrency": "concurrency:n=32"}[kind])
    if kind == "concurrency":
        return ArrivalSpec("concurrency", n=positive_integer(p["n"], f"{where}: n"))
    qps = positive_number(p["qps"], f"{where}: qps")
    cv = positive_number(p["cv"], f"{where}: cv") if "cv" in p else 1.0
    return ArrivalSpec(kind, qps=qps, cv=cv)


def client_arrival_times(spec: ArrivalSpec, seed: int, *, count: int | None = None,
                         duration_s: float | None = None) -> np.ndarray:
    """Arrival times as a benchmark client sends them: NumPy's legacy generator seeded once
    (``np.random.seed(seed)``, what vLLM's ``benchmark_serving.py`` (``--seed``, default 0) and SGLang's
    ``bench_serving.py`` (``--seed``, default 1) call first), the first request at t = 0 and, after each
    request, one gap ``np.random.exponential(1 / qps)`` (poisson) or ``np.random.gamma(shape, scale)`` (gamma)
    (their ``get_request``: yield the request, then sleep the gap). The ShareGPT sampling of those clients
    draws from Python's ``random``, not NumPy, so the gaps are NumPy's first draws."""
    if spec.kind not in ("poisson", "gamma"):
        raise ValueError(f"client_arrival_times: {spec.kind} is not an open-loop process")
    legacy = np.random.RandomState(seed)
    mean = 1.0 / spec.qps
    shape = 1.0 / (spec.cv * spec.cv)
    n = int(count) if count is not None else max(16, int((duration_s or 0.0) * spec.qps * 1.5) + 16)
    while True:
        k = max(0, n - 1)  # one draw per gap, in order: the same stream as the clients' scalar calls
        gaps = legacy.exponential(mean, k) if spec.kind == "poisson" else legacy.gamma(shape, mean / shape, k)
        times = np.concatenate(([0.0], np.cumsum(gaps)))
        if count is not None:
            return times
        assert duration_s is not None
        if times[-1] >= duration_s:
            return times[times < duration_s]
        legacy = np.random.RandomState(seed)
        n *= 2


def arrival_times(spec: ArrivalSpec, rng: np.random.Generator, *, count: int | None = None,
                  duration_s: float | None = None) -> np.ndarray:
    """Arrival times (s, sorted, first gap from t = 0) of an open-loop process: ``count`` of them, or
    every one before ``duration_s``. ``burst``: ``count`` zeros."""
    if spec.kind == "burst":
        return np.zeros(int(count or 0))
    if spec.kind not in ("poisson", "gamma"):
        raise ValueError(f"arrival_times: {spec.kind} is not an open-loop process")
    mean = 1.0 / spec.qps
    shape = 1.0 / (spec.cv * spec.cv)

    def draw(n: int) -> np.ndarray:
        if spec.kind == "poisson":
            return rng.exponential(mean, n)
        return rng.gamma(shape, mean / shape, n)

    if count is not None:
        return np.cumsum(draw(int(count)))
    assert duration_s is not None
    out: list[np.ndarray] = []
    t, block = 0.0, max(16, int(duration_s * spec.qps * 1.1) + 16)
    while True:
        times = t + np.cumsum(draw(block))
        out.append(times[times < duration_s])
        if times[-1] >= duration_s:
            break
        t = float(times[-1])
    return np.concatenate(out)


_AZURE = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_PLAIN = ("arrival_s", "input_len", "output_len")


def _parse_time(text: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:  # the Azure trace writes "2023-11-16 18:15:46.6805900": numpy parses up to nanoseconds
        with warnings.catch_warnings():  # an offset ("Z", "+02:00") is converted to UTC, with a UserWarning
            warnings.filterwarnings("ignore", message="no explicit representation of timezones", category=UserWarning)
            return float(np.datetime64(text.strip().replace(" ", "T"), "ns").astype("int64")) / 1e9
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise ServingError(f"{where}: got {text!r}; expected seconds or a date-time") from None


#: The last trace parsed: ``(path, hash of its text) -> arrays`` (read-only). ``serve`` reads its trace twice (the
#: run, then the warning when it holds fewer rows than asked for); a million-row trace is parsed once.
_LAST_TRACE: dict[tuple[str, str], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}


def read_trace(path: str, where: str = "--arrival trace") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s from the first row, input_len, output_len) of a trace file (Azure or plain columns), read-only
    arrays; the same text at the same path is parsed once.

    Raises :class:`ServingError` at ``file:line`` for an empty file, a missing column, a bad value, or
    a row earlier than the one before it."""
    import hashlib

    from nodeperf.files import read_csv_text

    text = read_csv_text(path, what=f"a CSV file with the columns {', '.join(_AZURE)} or {', '.join(_PLAIN)}",
                         error=ServingError)
    key = (os.path.realpath(path), hashlib.sha256(text.encode()).hexdigest())
    if key in _LAST_TRACE:
        return _LAST_TRACE[key]
    reader = csv.reader(io.StringIO(text))
    header = next(reader, None)
    if header is None or not any(h.strip() for h in header):
        raise ServingError(f"{path}:1: empty trace; got no header; expected columns {', '.join(_AZURE)} or "
                           f"{', '.join(_PLAIN)}")
    cols = [h.strip() for h in header]
    names = _AZURE if all(c in cols for c in _AZURE) else _PLAIN
    missing = [c for c in names if c not in cols]
    if missing:
        raise ServingError(f"{path}:1: missing column(s) {', '.join(missing)}; got {short_text(', '.join(cols))}; expected "
                           f"{', '.join(_AZURE)} (Azure LLM inference trace) or {', '.join(_PLAIN)}")
    idx = [cols.index(c) for c in names]
    times: list[float] = []
    ins: list[int] = []
    outs: list[int] = []
    for line, row in enumerate(reader, start=2):
        if not row or not any(x.strip() for x in row):
            continue
        if len(row) != len(cols):
            raise ServingError(f"{path}:{line}: {len(row)} fields; got {row!r}; expected {len(cols)}")
        t = _parse_time(row[idx[0]], f"{path}:{line}: {names[0]}")
        if not math.isfinite(t):
            raise ServingError(f"{path}:{line}: {names[0]}: got {row[idx[0]]!r}; expected a finite time")
        if times and t - times[0] > MAX_HORIZON_S:
            raise ServingError(f"{path}:{line}: {names[0]}: {t - times[0]:.3g} s after the first row; expected at "
                               f"most {MAX_HORIZON_S:.3g} s (2**52 ns: the simulated clock keeps 1 ns steps up to there)")
        if times and t < times[-1]:
            raise ServingError(f"{path}:{line}: {names[0]}: unsorted trace; got {row[idx[0]].strip()} after "
                               f"{times[-1] if names is _PLAIN else 'a later time'}; expected rows in time order")
        n_in = positive_integer(row[idx[1]].strip(), f"{path}:{line}: {names[1]}")
        n_out = positive_integer(row[idx[2]].strip(), f"{path}:{line}: {names[2]}")
        times.append(t)
        ins.append(n_in)
        outs.append(n_out)
    if not times:
        raise ServingError(f"{path}:2: empty trace; got a header and no rows; expected at least one request")
    arr = np.asarray(times, dtype=float)
    arrays = (arr - arr[0], np.asarray(ins, dtype=np.int64), np.asarray(outs, dtype=np.int64))
    for a in arrays:
        a.flags.writeable = False
    _LAST_TRACE.clear()
    _LAST_TRACE[key] = arrays
    return arrays


def describe(spec: ArrivalSpec) -> dict[str, Any]:
    """The arrival process as the JSON summary states it."""
    out: dict[str, Any] = {"kind": spec.kind}
    if spec.kind in ("poisson", "gamma"):
        out["qps"] = spec.qps
    if spec.kind == "gamma":
        out["cv"] = spec.cv
    if spec.kind == "concurrency":
        out["clients"] = spec.n
    if spec.kind == "trace":
        out["file"] = spec.path
    return out
