"""Kernel tables measured by serving stacks' own collectors, predicted row by row (``--dataset kernels``).

Three files of ``hwmodels/measurements`` hold them, both from aiconfigurator's per-GPU tables (CUDA-graph
replay of one op): ``decode_attention_kernels.csv`` (the attention module of TensorRT-LLM, vLLM and SGLang
in the generation phase; its TensorRT-LLM rows with 32 KV heads are where the catalog's
``efficiency.decode_attention_*bandwidth_fraction`` figures come from) and ``gemm_kernels.csv``
(TensorRT-LLM's bf16 GEMMs, which the catalog never used) and ``gemm_fp8_kernels.csv`` (TensorRT-LLM's fp8
GEMMs on the H100 SXM at the Llama 3 70B TP 2 shapes, less their activation quantisation; unused by the catalog). :func:`validate_kernels` predicts every row
under its stated run conditions (:func:`simulator.calibration.predict.run_options`) and summarises the
errors per file, GPU, stack and K/V width, keeping the derivation rows apart from the others.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from simulator.calibration.errors import ErrorSummary, summarize_errors
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache, default_predict
from simulator.hardware import known_devices

__all__ = ["KERNEL_DATASETS", "kernel_stack", "validate_kernels"]

_DIR = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements"
#: name -> file of the kernel tables (``nodeperf validate --dataset kernels``)
KERNEL_DATASETS = {"decode attention": _DIR / "decode_attention_kernels.csv", "gemm": _DIR / "gemm_kernels.csv",
                   "fp8 gemm": _DIR / "gemm_fp8_kernels.csv"}
_STACKS = {"trtllm": "TensorRT-LLM", "vllm": "vLLM", "sglang": "SGLang"}


def kernel_stack(source: str) -> str:
    """The serving stack whose table a row's ``source`` cites (``.../attention/vllm/0.24.0/...`` -> ``vLLM 0.24.0``)."""
    parts = source.replace("\\", "/").split("/")
    for i, p in enumerate(parts[:-1]):
        if p in _STACKS:
            return f"{_STACKS[p]} {parts[i + 1]}"
    return "unknown"


def validate_kernels(files: dict[str, Path] | None = None) -> dict[str, Any]:
    """Predict the kernel tables and summarise the errors (percent; nothing fitted).

    Returns
    -------
    dict
        ``"groups"``: ``{label: ErrorSummary}`` per file, ``file / role`` (derivation rows: the catalog's
        figures are their medians; cross-check rows: unused), ``file / device / stack / K/V width``;
        ``"rows"``: one dict per row (id, file, workload, device, stack, kv_dtype, role, measured_s,
        predicted_s, error_pct).
    """
    from hwmodels.catalog import load_device

    files = dict(KERNEL_DATASETS if files is None else files)
    groups: dict[str, list[int]] = {}
    rows: list[dict[str, Any]] = []
    pred: list[float] = []
    meas: list[Any] = []
    for name, path in files.items():
        ms = MeasurementSet.load(path, devices=known_devices())
        graphs = GraphCache()
        for m in ms:
            p = default_predict(graphs.get(m), load_device(m.device), m)
            stack = kernel_stack(m.source)
            role = "derivation" if m.notes.startswith("derivation") else "cross-check"
            kv = m.kv_dtype or ("16-bit K/V" if name == "decode attention" else m.dtype)
            i = len(pred)
            pred.append(p)
            meas.append(m)
            rows.append({"id": m.id, "file": name, "workload": m.workload, "device": m.device, "stack": stack,
                         "kv_dtype": m.kv_dtype or "",
                         "role": role, "measured_s": m.median_s, "predicted_s": p,
                         "error_pct": 100.0 * (p - m.median_s) / m.median_s})
            for label in (name, f"{name} / {role}", f"{name} / {m.device} / {stack} / {kv}"):
                groups.setdefault(label, []).append(i)
    arr = np.asarray(pred, dtype=float)
    names = list(files)

    def order(label: str) -> tuple[int, int, str]:  # per file: its total, its roles, then GPU / stack / width
        parts = label.split(" / ")
        return names.index(parts[0]), min(len(parts) - 1, 2), label

    out: dict[str, ErrorSummary] = {}
    for label in sorted(groups, key=order):
        idx = groups[label]
        sub = MeasurementSet(tuple(meas[i] for i in idx), "kernels")
        out[label] = summarize_errors(arr[idx], sub, worst=3, by_class=False)
    return {"groups": out, "rows": rows}
