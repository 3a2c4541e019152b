"""One entry point from a user's MODEL argument to an OpGraph: zoo name, micro-workload, .onnx or config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.ir import OpGraph
from workloads.micro import build_micro, is_micro

__all__ = ["load_workload"]


def load_workload(
    model: str,
    *,
    batch: int | None = None,
    seq: int | None = None,
    phase: str | None = None,
    context: int | None = None,
    train: bool = False,
    dtype: str | None = None,
    optimizer: str = "adamw",
    recompute: str = "none",
    strict: bool = True,
    **extra: Any,
) -> OpGraph:
    """Build the graph the user means by ``model``.

    Parameters
    ----------
    model
        A zoo name (``resnet50``), a micro-workload (``gemm:m=4096,n=4096,k=4096``), a path to an
        ``.onnx`` file, or a path to a Hugging Face ``config.json``.
    batch, seq, phase, context, dtype
        Zoo/config parameters (None: the model's defaults). ``seq`` is the image side for vision models.
    train
        Derive the whole training step (forward, backward, optimizer) from the forward graph.
    strict
        Importers only: an unknown operator is an error (True) or a generic op with a warning (False).
    """
    if train and phase not in (None, "train"):
        raise ValueError(f"model {model!r}: --train conflicts with phase {phase!r}; expected no phase or 'train'")
    if is_micro(model):
        if train:
            raise ValueError(f"model {model!r}: micro-workloads are single ops; expected no --train")
        return build_micro(model, dtype=dtype)
    path = Path(model)
    if model.lower().endswith(".onnx"):
        if not path.is_file():
            raise FileNotFoundError(f"{model}: no such ONNX file")
        from workloads.importers.onnx_import import import_onnx

        graph = import_onnx(path, batch=batch, dtype=dtype, strict=strict)
    elif model.lower().endswith(".json"):
        if not path.is_file():
            raise FileNotFoundError(f"{model}: no such config file")
        from workloads.hf import build_from_config

        kw = {"seq": seq} if seq else {}
        graph = build_from_config(path, batch=batch or 1, phase="train" if train else phase, context=context,
                                  dtype=dtype, **kw, **extra)
    else:
        from workloads.zoo import build_model

        graph = build_model(model, batch=batch, seq=seq, phase="train" if train else phase, context=context,
                            dtype=dtype, **extra)
    if train:
        from workloads.training import training_graph

        graph = training_graph(graph, optimizer=optimizer, recompute=recompute)
    return graph
