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
from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, default_predict
from simulator.hardware import known_devices

__all__ = ["validate_published", "DEFAULT_DATASET", "OP_LEVEL"]

logger = logging.getLogger(__name__)

DEFAULT_DATASET = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_gpu.csv"
#: Categories that time one kernel (the rest are end-to-end model runs).
OP_LEVEL = frozenset({"gemm", "attention", "bandwidth", "elementwise", "norm", "softmax", "conv"})


def validate_published(path: str | Path | None = None, *, categories: set[str] | None = None
                       ) -> dict[str, ErrorSummary]:
    """Predict every row of the published dataset and summarise the errors.

    Parameters
    ----------
    path
        A published-measurements CSV (default: the shipped ``published_gpu.csv``); it is loaded and
        validated by :class:`~simulator.calibration.measurements.MeasurementSet` (a bad row is a located error).
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

    ms = MeasurementSet.load(Path(path) if path is not None else DEFAULT_DATASET, devices=known_devices())
    if categories is not None:
        ms = MeasurementSet(tuple(m for m in ms if m.category in categories), ms.source)
    graphs = GraphCache()
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
