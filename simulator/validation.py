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

import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration import ErrorSummary

__all__ = ["validate_published", "run_options", "DEFAULT_DATASET", "OP_LEVEL"]

logger = logging.getLogger(__name__)

DEFAULT_DATASET = Path(__file__).resolve().parents[1] / "hwmodels" / "measurements" / "published_gpu.csv"
#: Categories that time one kernel (the rest are end-to-end model runs).
OP_LEVEL = frozenset({"gemm", "attention", "bandwidth", "elementwise", "norm", "softmax", "conv"})


_FUSED_STACKS = ("TensorRT", "torch.compile", "gpt-fast")
_POWER_LIMIT = re.compile(r"power-limited to (\d+(?:\.\d+)?) W")
# Attention kernels named by a row's source or notes: FlashAttention-2 (warp-level mma.sync, softmax
# between the matmuls) versus the warp-specialised designs (FlashAttention-3 on Hopper,
# FlashAttention-4 on Blackwell, cuDNN fused attention).
_FLASH2 = re.compile(r"Flash2 |FlashAttention-2|flash_v2|flash_attn 2\.")
_FLASH3 = re.compile(r"Flash3 |FlashAttention-3|FlashAttention-4|cuDNN")
# Stacks that issue every op from eager PyTorch (host-bound at small sizes).
_EAGER = re.compile(r"Eager PyTorch")


def run_options(row: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """(EvalOptions, spec overrides by dotted path) implied by a measurement's stated run conditions.

    ``row`` needs ``source``, ``notes``, ``metric_reported`` and ``dtype`` (any may be empty): the
    software stack they name decides fusion, CUDA graphs, the attention kernel design, eager
    per-op costs, TF32, and a stated power limit. Both the published-set validation and the
    calibrator use it, so a measurement is always predicted under the same conditions.
    """
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


def validate_published(path: str | Path | None = None, *, categories: set[str] | None = None
                       ) -> dict[str, ErrorSummary]:
    """Predict every row of the published dataset and summarise the errors.

    Parameters
    ----------
    path
        A published-measurements CSV (default: the shipped ``published_gpu.csv``); it is loaded and
        validated by :class:`~simulator.measurements.MeasurementSet` (a bad row is a located error).
    categories
        Only rows of these categories (default: all).

    Returns
    -------
    dict
        ``{name: ErrorSummary}`` (percentages) for every category, plus ``"op-level"``,
        ``"end-to-end"`` and ``"all"``. Each row runs under the conditions it states
        (:func:`run_options`); nothing is fitted.
    """
    from hwmodels.catalog import load_device
    from simulator.calibration import _Graphs, default_predict, known_devices, summarize_errors
    from simulator.measurements import MeasurementSet

    ms = MeasurementSet.load(Path(path) if path is not None else DEFAULT_DATASET, devices=known_devices())
    if categories is not None:
        ms = MeasurementSet(tuple(m for m in ms if m.category in categories), ms.source)
    graphs = _Graphs()
    pred = np.array([default_predict(graphs.get(m), load_device(m.device), m) for m in ms], dtype=float)

    def subset(keep: Any) -> tuple[np.ndarray, MeasurementSet]:
        idx = [i for i, m in enumerate(ms) if keep(m)]
        return pred[idx], MeasurementSet(tuple(ms[i] for i in idx), ms.source)

    out: dict[str, ErrorSummary] = {}
    for cat in sorted({m.category for m in ms}):
        out[cat] = summarize_errors(*subset(lambda m, c=cat: m.category == c), worst=3, by_class=False)
    out["op-level"] = summarize_errors(*subset(lambda m: m.category in OP_LEVEL), worst=3, by_class=False)
    out["end-to-end"] = summarize_errors(*subset(lambda m: m.category not in OP_LEVEL), worst=3, by_class=False)
    out["all"] = summarize_errors(pred, ms, worst=3, by_class=False)
    return out
