"""Published serving measurements against ``simulate_serving`` (unfitted): MAPE per engine and metric.

The data set is ``hwmodels/measurements/published_serving.csv`` (one measured number per row, each with
its engine and version, model, system, plan, arrival process, lengths and source; see that folder's
README). :func:`read_serving_csv` reads and checks it (every problem one ``file:line: column: ...`` line);
:func:`validate_serving` simulates each distinct deployment once with :func:`simulator.serving.simulate_serving`
and compares every measured metric with the prediction. Nothing is fitted to these rows.

Rows the simulator cannot run as published are reported as skipped with the reason (for example a
named length data set the simulator has no summary of), never dropped silently.
"""

from __future__ import annotations

import csv
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeperf.suggest import did_you_mean
from simulator.calibration.measurements import MeasurementError

__all__ = ["DEFAULT_SERVING_DATASET", "COLUMNS", "OPTIONAL_COLUMNS", "SETTINGS", "engine_profile", "METRICS", "ENGINES",
           "ServingRow", "ServingDataError", "read_serving_csv", "validate_serving", "predicted_metric",
           "serving_precision", "DEFAULT_MAX_REQUESTS"]

logger = logging.getLogger(__name__)

#: The shipped data set.
DEFAULT_SERVING_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_serving.csv"
#: The columns, in order.
COLUMNS = ("id", "engine", "engine_version", "model", "system", "n_devices", "tp", "pp", "dtype", "arrival", "lengths",
           "requests", "max_num_seqs", "max_batched_tokens", "scheduler", "metric", "value", "unit", "source", "notes",
           "date")
#: Optional trailing columns: scheduler settings of the engine as run, ``key=value`` pairs joined by ``;``
#: (:data:`SETTINGS`), and where each comes from (a command line the source prints, the engine's code).
OPTIONAL_COLUMNS = ("settings", "settings_source")
#: Setting (a ServeConfig field) -> its type: ``scheduler_steps=10`` (vLLM 0.6 ``--num-scheduler-steps``),
#: ``mixed_prefill=false`` (prompts run in iterations of their own: vLLM V0, SGLang <= 0.3), and the batch
#: limits an engine version defaults to (``max_num_seqs``, ``max_batched_tokens``) where they differ from
#: the simulator's scheduler defaults (vLLM V1's); ``arrival_seed=S``: the benchmark client's NumPy seed, so
#: a Poisson run has the measured run's arrival times (``ServeConfig.arrival_seed``); ``admission=no-evict``:
#: the KV admission policy (``ServeConfig.admission``, TensorRT-LLM's GUARANTEED_NO_EVICT); a setting may not
#: repeat a filled column; ``free_gpu_memory_fraction=F``: TensorRT-LLM's ``--kv_cache_free_gpu_mem_fraction``
#: as run (``ServeConfig.free_gpu_memory_fraction``, the engines whose profile sizes the KV cache from free memory).
#: ``measurement_interval_s=T``: genai-perf's ``--measurement-interval`` (in seconds) as the run's command gave
#: it: only the requests perf_analyzer's windows count are averaged (``ServeConfig.measurement_interval_s``).
#: ``graph_launch=pre-12.6`` / ``12.6``: the CUDA driver form of a decode-graph replay's launch where a row
#: states the driver it ran (``ServeConfig.graph_launch``; :data:`workloads.frameworks.GRAPH_LAUNCH_FORMS`).
SETTINGS: dict[str, str] = {"scheduler_steps": "int", "mixed_prefill": "bool", "max_num_seqs": "int",
                            "max_batched_tokens": "int", "arrival_seed": "seed", "admission": "admission",
                            "free_gpu_memory_fraction": "fraction", "warmup_requests": "count",
                            "measurement_interval_s": "seconds", "graph_launch": "graph_launch"}
#: Metric -> (unit, summary key, statistic or None for a scalar).
METRICS: dict[str, tuple[str, str, str | None]] = {
    "ttft_mean_s": ("s", "ttft_s", "mean"), "ttft_p50_s": ("s", "ttft_s", "p50"), "ttft_p99_s": ("s", "ttft_s", "p99"),
    "tpot_mean_s": ("s", "tpot_s", "mean"), "tpot_p50_s": ("s", "tpot_s", "p50"), "tpot_p99_s": ("s", "tpot_s", "p99"),
    # inter-token latency: the gaps between streamed chunks, pooled over requests (a client's "Median ITL")
    "itl_mean_s": ("s", "itl_s", "mean"), "itl_p50_s": ("s", "itl_s", "p50"), "itl_p99_s": ("s", "itl_s", "p99"),
    "output_tokens_per_s": ("tokens/s", "output_tokens_per_s", None),
    "requests_per_s": ("requests/s", "requests_per_s", None),
}
#: Engine -> the framework profile that prices its iterations (``nim``: NVIDIA's container around TensorRT-LLM).
ENGINES = {"vllm": "vllm", "sglang": "sglang", "tensorrt-llm": "trt-llm", "nim": "trt-llm"}
#: vLLM releases before 0.8 ran the V0 engine by default (host time per iteration: the ``vllm-v0`` profile).
_V0_VERSION = re.compile(r"^0\.[0-7]\.")
#: SGLang releases before 0.4 had no overlap scheduler (host time per iteration: the ``sglang-0.3`` profile).
_SGLANG_SERIAL_VERSION = re.compile(r"^0\.[0-3]\.")


def engine_profile(engine: str, version: str) -> str:
    """The framework profile that prices ``engine`` at ``version`` (:data:`ENGINES`; vLLM < 0.8: ``vllm-v0``;
    SGLang < 0.4: ``sglang-0.3``; TensorRT-LLM stated as its PyTorch backend: ``trt-llm-pytorch``)."""
    if engine == "vllm" and _V0_VERSION.match(version):
        return "vllm-v0"
    if engine == "sglang" and _SGLANG_SERIAL_VERSION.match(version):
        return "sglang-0.3"
    if engine == "tensorrt-llm" and "pytorch" in version.lower():
        return "trt-llm-pytorch"
    return ENGINES[engine]


#: Engines whose fp8 rows run ModelOpt fp8 checkpoints: TensorRT-LLM's ``quantize_and_export``
#: (``tensorrt_llm/quantization/quantize_by_modelopt.py`` @ 042c510d) quantises with ModelOpt's
#: ``FP8_DEFAULT_CFG``, whose ``"*lm_head*": {"enable": False}`` it deletes only for ``quantize_lm_head``
#: (default False), and keeps "dtype ... for non-quantized layers" (the checkpoint's bf16): fp8 weights and fp8
#: inputs in the linear layers, the LM head, embeddings, norms, residual stream and the tensor-parallel
#: all-reduces in bf16 (the PyTorch backend's ``FP8QDQLinearMethod.apply`` quantises a bf16 input before
#: ``cublas_scaled_mm``); the KV cache fp8 (the TensorRT-LLM rows: ModelOpt's ``--kv_cache_qformat fp8``
#: default; the NIM rows: a bf16 cache would hold about 48 requests of 5,500 tokens per TP2 replica where the
#: 100-250-client runs kept 85 resident, docs/serving.md). Row dtype -> ServeConfig dtype, weight_dtype, kv_dtype.
_MODELOPT_FP8_ENGINES = frozenset({"nim", "tensorrt-llm"})
_MODELOPT_FP8 = {"dtype": "bf16", "weight_dtype": "fp8", "kv_dtype": "fp8"}

_SCHEDULERS = ("vllm", "sarathi", "orca", "static")
_ARRIVALS = ("poisson", "gamma", "concurrency", "burst", "trace")
_INTS = ("n_devices", "tp", "pp")
_OPTIONAL_INTS = ("requests", "max_num_seqs", "max_batched_tokens")
_REQUIRED = ("id", "engine", "engine_version", "model", "system", "dtype", "arrival", "lengths", "scheduler", "metric",
             "value", "unit", "source")
#: Requests simulated per deployment at most: the largest published run (30,000 requests), so every run is
#: simulated with its published count (a run cut short would weigh the drain at the end of a burst more
#: in its throughput: the 5,000-prompt SGLang / vLLM 0.6 bursts cut to 500 lost a fifth of their requests/s).
DEFAULT_MAX_REQUESTS = 30_000


#: A malformed serving-measurement file (one located line per problem): the measurement files' error.
ServingDataError = MeasurementError


@dataclass(frozen=True)
class ServingRow:
    """One published serving measurement (a row of ``published_serving.csv``)."""

    id: str
    engine: str
    engine_version: str
    model: str
    system: str
    n_devices: int
    tp: int
    pp: int
    dtype: str
    arrival: str
    lengths: str
    requests: int | None
    max_num_seqs: int | None
    max_batched_tokens: int | None
    scheduler: str
    metric: str
    value: float
    unit: str
    source: str
    notes: str = ""
    date: str = ""
    line: int = 0
    settings: tuple[tuple[str, Any], ...] = ()

    def deployment(self) -> tuple[Any, ...]:
        """What one simulation covers: every setting but the metric."""
        return (self.engine, self.engine_version, self.model, self.system, self.tp, self.pp, self.dtype, self.arrival,
                self.lengths, self.requests, self.max_num_seqs, self.max_batched_tokens, self.scheduler, self.settings)


def _int(text: str, col: str, where: str, problems: list[str], optional: bool = False) -> int | None:
    if optional and not text.strip():
        return None
    try:
        v = int(text)
    except ValueError:
        problems.append(f"{where}: {col}: not an integer; got {text!r}; expected a positive integer")
        return None
    if v < 1:
        problems.append(f"{where}: {col}: not positive; got {v}; expected a positive integer")
        return None
    return v


def _check_choice(value: str, col: str, choices: Sequence[str], where: str, problems: list[str]) -> None:
    if value not in choices:
        problems.append(f"{where}: {col}: unknown; got {value!r}; expected one of {', '.join(choices)}"
                        f"{did_you_mean(value, list(choices))}")


def _setting_choices(kind: str) -> tuple[str, ...]:
    """The values a named-choice setting takes (``graph_launch``: the launch forms or none; ``admission``)."""
    if kind == "graph_launch":
        from workloads.frameworks import GRAPH_LAUNCH_FORMS

        return (*GRAPH_LAUNCH_FORMS, "none")
    from simulator.serving.scheduler import ADMISSIONS

    return tuple(ADMISSIONS)


def _settings(text: str, where: str, problems: list[str]) -> tuple[tuple[str, Any], ...]:
    """``scheduler_steps=10;mixed_prefill=false`` -> ((name, value), ...) (:data:`SETTINGS`)."""
    out: list[tuple[str, Any]] = []
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        key, eq, val = (x.strip() for x in item.partition("="))
        if key not in SETTINGS or not eq:
            problems.append(f"{where}: settings: unknown setting; got {item!r}; expected NAME=VALUE with NAME one of "
                            f"{', '.join(SETTINGS)}{did_you_mean(key, list(SETTINGS))}")
            continue
        if SETTINGS[key] in ("graph_launch", "admission"):
            forms = _setting_choices(SETTINGS[key])
            if val not in forms:
                problems.append(f"{where}: settings: {key}: got {val!r}; expected one of {', '.join(forms)}"
                                f"{did_you_mean(val, list(forms))}")
                continue
            out.append((key, val))
            continue
        if SETTINGS[key] == "seconds":
            try:
                f = float(val)
            except ValueError:
                f = math.nan
            if not 0.0 < f < math.inf:
                problems.append(f"{where}: settings: {key}: got {val!r}; expected a positive number of seconds")
                continue
            out.append((key, f))
            continue
        if SETTINGS[key] == "fraction":
            try:
                f = float(val)
            except ValueError:
                f = math.nan
            if not 0.0 < f < 1.0:
                problems.append(f"{where}: settings: {key}: got {val!r}; expected a fraction in (0, 1)")
                continue
            out.append((key, f))
            continue
        if SETTINGS[key] == "bool":
            if val.lower() not in ("true", "false"):
                problems.append(f"{where}: settings: {key}: got {val!r}; expected true or false")
                continue
            out.append((key, val.lower() == "true"))
        else:
            low = 0 if SETTINGS[key] in ("seed", "count") else 1
            try:
                v = int(val)
            except ValueError:
                v = low - 1
            if v < low:
                problems.append(f"{where}: settings: {key}: got {val!r}; expected a "
                                f"{'non-negative' if low == 0 else 'positive'} integer")
                continue
            out.append((key, v))
    return tuple(sorted(out))


def _parse_row(raw: Mapping[str, str], where: str, problems: list[str]) -> ServingRow | None:
    n0 = len(problems)
    for col in _REQUIRED:
        if not (raw.get(col) or "").strip():
            problems.append(f"{where}: {col}: empty; got ''; expected a value")
    if len(problems) > n0:
        return None
    _check_choice(raw["engine"], "engine", tuple(ENGINES), where, problems)
    _check_choice(raw["scheduler"], "scheduler", _SCHEDULERS, where, problems)
    _check_choice(raw["metric"], "metric", tuple(METRICS), where, problems)
    _check_choice(raw["arrival"].split(":", 1)[0], "arrival", _ARRIVALS, where, problems)
    if raw["metric"] in METRICS and raw["unit"] != METRICS[raw["metric"]][0]:
        problems.append(f"{where}: unit: got {raw['unit']!r}; expected {METRICS[raw['metric']][0]!r} for {raw['metric']}")
    try:
        value = float(raw["value"])
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        problems.append(f"{where}: value: not a positive number; got {raw['value']!r}; expected the measured value in "
                        f"{raw['unit']}")
    ints = {c: _int(raw.get(c, ""), c, where, problems) for c in _INTS}
    opt = {c: _int(raw.get(c, ""), c, where, problems, optional=True) for c in _OPTIONAL_INTS}
    if None not in ints.values() and ints["tp"] * ints["pp"] != ints["n_devices"]:  # type: ignore[operator]
        problems.append(f"{where}: n_devices: got {ints['n_devices']}; expected tp x pp = {ints['tp'] * ints['pp']}")  # type: ignore[operator]
    settings = _settings(raw.get("settings") or "", where, problems)
    for key, _v in settings:
        if key in _OPTIONAL_INTS and (raw.get(key) or "").strip():
            problems.append(f"{where}: settings: {key} given twice; got column {key} {raw[key]!r} and setting "
                            f"{key}; expected one of them")
    if settings and not (raw.get("settings_source") or "").strip():
        problems.append(f"{where}: settings_source: empty; got ''; expected where the settings come from")
    if len(problems) > n0:
        return None
    return ServingRow(raw["id"], raw["engine"], raw["engine_version"], raw["model"], raw["system"], ints["n_devices"],  # type: ignore[arg-type]
                      ints["tp"], ints["pp"], raw["dtype"], raw["arrival"], raw["lengths"], opt["requests"],  # type: ignore[arg-type]
                      opt["max_num_seqs"], opt["max_batched_tokens"], raw["scheduler"], raw["metric"], value,
                      raw["unit"], raw["source"], raw.get("notes") or "", raw.get("date") or "", 0, settings)


def read_serving_csv(path: str | Path | None = None) -> list[ServingRow]:
    """The rows of a serving-measurement CSV (default: the shipped data set), checked.

    Raises
    ------
    ServingDataError
        Every problem, one ``file:line: column: got ...; expected ...`` line each: a missing file, a wrong
        header, an empty required field, an unknown engine, scheduler, metric or arrival kind, a unit that
        does not match the metric, a non-positive value or count, ``n_devices != tp x pp``, a duplicate id.
    """
    from nodeperf.files import read_csv_text

    p = Path(path) if path is not None else DEFAULT_SERVING_DATASET
    text = read_csv_text(p, what="a serving-measurement CSV", error=ServingDataError)
    reader = csv.DictReader(text.splitlines())
    header = tuple(reader.fieldnames or ())
    if header[: len(COLUMNS)] != COLUMNS:
        missing = [c for c in COLUMNS if c not in header]
        raise ServingDataError(f"{p}:1: header: got {', '.join(header) or 'nothing'}; expected the columns "
                               f"{', '.join(COLUMNS)} in that order" + (f" (missing: {', '.join(missing)})" if missing else ""))
    problems: list[str] = []
    rows: list[ServingRow] = []
    seen: dict[str, int] = {}
    for raw in reader:
        i = reader.line_num
        where = f"{p}:{i}"
        row = _parse_row(raw, where, problems)
        if row is None:
            continue
        if row.id in seen:
            problems.append(f"{where}: id: duplicate; got {row.id!r}; expected a unique id (first on line {seen[row.id]})")
            continue
        seen[row.id] = i
        rows.append(ServingRow(**{**row.__dict__, "line": i}))
    if problems:
        raise ServingDataError("\n".join(problems))
    if not rows:
        raise ServingDataError(f"{p}:2: no rows; got a header only; expected at least one measurement")
    return rows


def predicted_metric(summary: Mapping[str, Any], metric: str) -> float:
    """The value of ``metric`` (a :data:`METRICS` name) in a ``ServeResult.summary``."""
    _, key, stat = METRICS[metric]
    v = summary[key]
    return float(v[stat] if stat is not None else v)


def _requests(row: ServingRow, max_requests: int) -> int:
    """Requests to simulate: the published count (or, when unstated, 8 per client / 1,000), capped."""
    n = row.requests
    if n is None:
        n = 8 * int(row.arrival.split("n=", 1)[1].split(",")[0]) if row.arrival.startswith("concurrency:") else 1000
    return max(1, min(n, max_requests))


def serving_precision(engine: str, dtype: str) -> dict[str, str]:
    """The ServeConfig ``dtype`` / ``weight_dtype`` / ``kv_dtype`` of a row: an ``fp8_e4m3`` row of a
    TensorRT-LLM engine as its ModelOpt fp8 checkpoint runs (:data:`_MODELOPT_FP8_ENGINES`); else the dtype."""
    if engine in _MODELOPT_FP8_ENGINES and dtype == "fp8_e4m3":
        return dict(_MODELOPT_FP8)
    return {"dtype": dtype}


def _simulate(row: ServingRow, max_requests: int) -> Mapping[str, Any]:
    from simulator.serving import ServeConfig, simulate_serving
    from workloads.parallel import ParallelPlan

    settings = {"max_num_seqs": row.max_num_seqs, "max_batched_tokens": row.max_batched_tokens, **dict(row.settings)}
    config = ServeConfig(arrival=row.arrival, lengths=row.lengths, scheduler=row.scheduler,
                         requests=_requests(row, max_requests), seed=0,
                         framework=engine_profile(row.engine, row.engine_version),
                         **serving_precision(row.engine, row.dtype), **settings)
    return simulate_serving(row.model, row.system, config, ParallelPlan(tp=row.tp, pp=row.pp)).summary


def _stats(pairs: Sequence[tuple[float, float]]) -> dict[str, float]:
    ape = [100.0 * abs(p - m) / m for p, m in pairs]
    bias = 100.0 * (math.exp(sum(math.log(p / m) for p, m in pairs) / len(pairs)) - 1.0)
    return {"n": len(pairs), "mape": sum(ape) / len(ape), "max_ape": max(ape), "bias": bias}


def _group(rows: Iterable[ServingRow]) -> dict[tuple[Any, ...], list[ServingRow]]:
    groups: dict[tuple[Any, ...], list[ServingRow]] = {}
    for r in rows:
        groups.setdefault(r.deployment(), []).append(r)
    return groups


def validate_serving(path: str | Path | None = None, *, max_requests: int = DEFAULT_MAX_REQUESTS,
                     engines: Sequence[str] | None = None, worst: int = 5) -> dict[str, Any]:
    """Simulate every published deployment once and compare each measured metric (nothing fitted).

    Returns ``{"dataset", "rows": [{id, engine, metric, measured, predicted, ape_pct, ...}], "skipped":
    [{id, reason}], "by_engine_metric": {"ENGINE/METRIC": {n, mape, max_ape, bias}}, "all": {...},
    "worst": [...], "max_requests"}``.

    Raises
    ------
    ServingDataError
        A malformed file (:func:`read_serving_csv`).
    ModuleNotFoundError
        The serving simulator (:mod:`simulator.serving`) is not installed.
    """
    import importlib.util

    rows = [r for r in read_serving_csv(path) if engines is None or r.engine in engines]
    if importlib.util.find_spec("simulator.serving") is None:
        raise ModuleNotFoundError("validate --dataset serving: simulator.serving is not available in this checkout",
                                  name="simulator.serving")
    out_rows: list[dict[str, Any]] = []
    skipped: list[dict[str, str]] = []
    for group in _group(rows).values():
        try:
            summary = _simulate(group[0], max_requests)
        except (ValueError, KeyError) as e:  # the simulator's located errors (ServingError is a ValueError)
            logger.info("serving validation: %s skipped: %s", group[0].id, e)
            skipped.extend({"id": r.id, "reason": str(e).splitlines()[0]} for r in group)
            continue
        for r in group:
            pred = predicted_metric(summary, r.metric)
            out_rows.append({"id": r.id, "engine": r.engine, "metric": r.metric, "model": r.model, "system": r.system,
                             "arrival": r.arrival, "lengths": r.lengths, "measured": r.value, "predicted": pred,
                             "ape_pct": 100.0 * abs(pred - r.value) / r.value})
    return _report(path, out_rows, skipped, max_requests, worst)


def _report(path: str | Path | None, rows: list[dict[str, Any]], skipped: list[dict[str, str]], max_requests: int,
            worst: int) -> dict[str, Any]:
    by: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["predicted"] > 0:
            by.setdefault(f"{r['engine']}/{r['metric']}", []).append((r["predicted"], r["measured"]))
    pairs = [(r["predicted"], r["measured"]) for r in rows if r["predicted"] > 0]
    return {"dataset": str(path or DEFAULT_SERVING_DATASET), "rows": rows, "skipped": skipped,
            "by_engine_metric": {k: _stats(v) for k, v in sorted(by.items())},
            "all": _stats(pairs) if pairs else {"n": 0},
            "worst": sorted(rows, key=lambda r: -r["ape_pct"])[:worst], "max_requests": max_requests}
