"""Validation of the analytical engine against published GPU measurements, with honest error summaries.

Each row of ``hwmodels/measurements/published_gpu.csv`` names a workload (a zoo model or a
micro-workload), its batch/sequence/phase/context/dtype, a catalog device and a measured time.
:func:`validate_published` predicts every row with :func:`simulator.evaluate` using the catalog's
sourced efficiency factors as they are (nothing is fitted to these rows) and summarises the
relative errors per category (``gemm``, ``attention``, ``bandwidth``, ``e2e_*``) and for the
op-level and end-to-end groups.

Run conditions are taken from what each source states about its software stack, never from the
measured value: engines built by TensorRT / TensorRT-LLM and ``torch.compile`` programs fuse
elementwise ops and replay CUDA graphs; eager PyTorch launches every kernel; a stated power limit
replaces the board TDP; tf32 rows enable the TF32 tensor path; the attention kernel a row names
(FlashAttention-2 versus FlashAttention-3/4 or cuDNN) selects ``EvalOptions.attention_kernel``; rows
run from eager PyTorch pay the framework's per-op host cost (``EvalOptions.eager_framework``).
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["ErrorSummary", "RowResult", "validate_published", "summarise", "DEFAULT_DATASET", "OP_LEVEL", "format_summaries"]

logger = logging.getLogger(__name__)

DEFAULT_DATASET = Path(__file__).resolve().parents[1] / "hwmodels" / "measurements" / "published_gpu.csv"
#: Categories that time one kernel (the rest are end-to-end model runs).
OP_LEVEL = frozenset({"gemm", "attention", "bandwidth", "elementwise", "norm", "softmax", "conv"})


@dataclass(frozen=True)
class RowResult:
    """One dataset row predicted: relative error ``(predicted - measured) / measured``."""

    id: str
    category: str
    workload: str
    device: str
    measured_s: float
    predicted_s: float
    options: str

    @property
    def rel_error(self) -> float:
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class ErrorSummary:
    """Relative-error statistics of a set of predictions (fractions, not percent).

    ``mape`` is the mean absolute relative error, ``median``/``p90``/``max`` are of the absolute
    relative error, ``bias`` the mean signed relative error (positive: predictions too slow), and
    ``worst`` the rows with the largest absolute error, worst first.
    """

    name: str
    n: int
    mape: float
    median: float
    p90: float
    max: float
    bias: float
    worst: tuple[RowResult, ...]

    def line(self) -> str:
        w = ", ".join(f"{r.id} {r.rel_error * 100:+.0f}%" for r in self.worst)
        return (f"{self.name:<20} n={self.n:<3} MAPE {self.mape * 100:6.1f}%  median {self.median * 100:6.1f}%  "
                f"p90 {self.p90 * 100:6.1f}%  max {self.max * 100:6.1f}%  bias {self.bias * 100:+6.1f}%  worst: {w}")


def _percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = (len(s) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def summarise(name: str, rows: list[RowResult], worst: int = 3) -> ErrorSummary:
    """Error statistics of ``rows`` (see :class:`ErrorSummary`)."""
    errs = [abs(r.rel_error) for r in rows]
    if not rows:
        return ErrorSummary(name, 0, math.nan, math.nan, math.nan, math.nan, math.nan, ())
    ranked = sorted(rows, key=lambda r: (-abs(r.rel_error), r.id))
    return ErrorSummary(
        name=name, n=len(rows), mape=sum(errs) / len(errs), median=_percentile(errs, 0.5),
        p90=_percentile(errs, 0.9), max=max(errs), bias=sum(r.rel_error for r in rows) / len(rows),
        worst=tuple(ranked[:worst]),
    )


_FUSED_STACKS = ("TensorRT", "torch.compile", "gpt-fast")
_POWER_LIMIT = re.compile(r"power-limited to (\d+(?:\.\d+)?) W")
# Attention kernels named by a row's source or notes: FlashAttention-2 (warp-level mma.sync, softmax
# between the matmuls) versus the warp-specialised designs (FlashAttention-3 on Hopper,
# FlashAttention-4 on Blackwell, cuDNN fused attention).
_FLASH2 = re.compile(r"Flash2 |FlashAttention-2|flash_v2|flash_attn 2\.")
_FLASH3 = re.compile(r"Flash3 |FlashAttention-3|FlashAttention-4|cuDNN")
# Stacks that issue every op from eager PyTorch (host-bound at small sizes).
_EAGER = re.compile(r"Eager PyTorch")


def _options_for(row: dict[str, str]) -> tuple[Any, dict[str, Any]]:
    """(EvalOptions, spec overrides) implied by the row's stated run conditions."""
    from simulator.engine import EvalOptions

    text = f"{row.get('source', '')} {row.get('notes', '')}"
    fused = any(s in text for s in _FUSED_STACKS)
    # the metric column names the kernel of a comparison table (e.g. 'cuDNN fwd' vs 'Flash3 fwd')
    metric = row.get("metric_reported", "")
    kernel = "auto"
    for where in (metric, text):
        if _FLASH3.search(where):
            kernel = "flash3"
            break
        if _FLASH2.search(where):
            kernel = "flash2"
            break
    opts = EvalOptions(fusion=fused, cuda_graphs=fused, allow_tf32=row.get("dtype") == "tf32",
                       attention_kernel=kernel, eager_framework=bool(_EAGER.search(text)))
    overrides: dict[str, Any] = {}
    m = _POWER_LIMIT.search(text)
    if m:
        overrides["power.tdp_w"] = float(m.group(1))
    return opts, overrides


def _int(v: str) -> int | None:
    v = (v or "").strip()
    return int(float(v)) if v else None


def _graph_for(row: dict[str, str]) -> Any:
    from workloads.micro import is_micro
    from workloads.resolve import load_workload

    wl = row["workload"].strip()
    dtype = (row.get("dtype") or "").strip() or None
    if is_micro(wl):
        return load_workload(wl, dtype=dtype)
    train = (row.get("train") or "").strip() in ("1", "true", "True")
    phase = (row.get("phase") or "").strip() or None
    if train:
        phase = None
    return load_workload(wl, batch=_int(row.get("batch", "")), seq=_int(row.get("seq", "")), phase=phase,
                         context=_int(row.get("context", "")), train=train, dtype=dtype)


def validate_published(path: str | Path | None = None, *, categories: set[str] | None = None
                       ) -> dict[str, ErrorSummary]:
    """Predict every row of the published dataset and summarise the errors.

    Parameters
    ----------
    path
        CSV with columns id, category, workload, batch, seq, phase, context, dtype, train, device,
        median_s, ... (default: the shipped ``published_gpu.csv``).
    categories
        Only rows of these categories (default: all).

    Returns
    -------
    dict
        ``{name: ErrorSummary}`` for every category, plus ``"op-level"``, ``"end-to-end"`` and
        ``"all"``; rows that cannot be predicted (unknown model or device) are logged and skipped,
        and counted under ``"skipped"`` as an ErrorSummary with ``n`` = the number skipped.
    """
    from hwmodels.catalog import load_device
    from hwmodels.spec import replace_path
    from simulator.engine import evaluate

    p = Path(path) if path is not None else DEFAULT_DATASET
    with p.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    results: list[RowResult] = []
    skipped: list[str] = []
    for row in rows:
        cat = row["category"].strip()
        if categories is not None and cat not in categories:
            continue
        try:
            dev = load_device(row["device"].strip())
            opts, overrides = _options_for(row)
            for path_, value in overrides.items():
                dev = replace_path(dev, path_, value)
            graph = _graph_for(row)
        except (ValueError, KeyError, FileNotFoundError, NotImplementedError) as exc:
            logger.warning("%s: %s: skipped; %s", p.name, row.get("id"), exc)
            skipped.append(row.get("id", "?"))
            continue
        rep = evaluate(graph, dev, opts)
        results.append(RowResult(
            id=row["id"], category=cat, workload=row["workload"], device=row["device"],
            measured_s=float(row["median_s"]), predicted_s=rep.latency_s,
            options=",".join([k for k, v in dataclasses.asdict(opts).items() if v is True]
                             + [f"attention={opts.attention_kernel}"]),
        ))
    out: dict[str, ErrorSummary] = {}
    for cat in sorted({r.category for r in results}):
        out[cat] = summarise(cat, [r for r in results if r.category == cat])
    out["op-level"] = summarise("op-level", [r for r in results if r.category in OP_LEVEL])
    out["end-to-end"] = summarise("end-to-end", [r for r in results if r.category not in OP_LEVEL])
    out["all"] = summarise("all", results)
    out["skipped"] = ErrorSummary("skipped", len(skipped), math.nan, math.nan, math.nan, math.nan, math.nan, ())
    return out


def format_summaries(summaries: dict[str, ErrorSummary]) -> str:
    """One line per summary (for reports and the CLI)."""
    return "\n".join(s.line() if s.name != "skipped" else f"skipped              n={s.n}"
                     for s in summaries.values())
