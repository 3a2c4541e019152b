"""One entry point from a user's MODEL argument to an OpGraph: zoo name, micro-workload, .onnx, saved graph or config.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from workloads.ir import GraphError, OpGraph
from workloads.micro import build_micro, is_micro

__all__ = ["load_workload", "saved_graph_json"]


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
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    group_size: int | None = None,
    **extra: Any,
) -> OpGraph:
    """Build the graph the user means by ``model``.

    Parameters
    ----------
    model
        A zoo name (``resnet50``), a micro-workload (``gemm:m=4096,n=4096,k=4096``), a path to an
        ``.onnx`` file, or a ``.json`` file: a graph saved by ``nodeperf graph MODEL --save FILE``
        (recognised by its ``"format": "nodeperf.opgraph"`` field) or else a Hugging Face
        ``config.json``.
    batch, seq, phase, context, dtype
        Zoo/config parameters (None: the model's defaults). ``seq`` is the image side for vision
        models. A saved graph has fixed shapes: any of these set is an error.
    train
        Derive the whole training step (forward, backward, optimizer) from the forward graph (for a
        saved graph: a forward graph ending in a loss, saved with ``--phase train``).
    strict
        Importers only: an unknown operator is an error (True) or a generic op with a warning (False).
    weight_dtype, kv_dtype, group_size
        Serving precision (:func:`workloads.precision.apply_precision`): quantised linear-layer
        weights (``int8``, ``int4``: weight-only with ``group_size`` weights per fp16 scale; ``fp8``:
        W8A8 fp8) and the KV cache's dtype (``fp8``). None: the graph's own dtypes.

    Raises
    ------
    FileNotFoundError
        A path that does not exist.
    GraphError
        A saved graph that cannot be read (invalid JSON, another version, an invalid graph), or an
        option that cannot apply to one; located in the file.
    ValueError, KeyError
        Conflicting options, a bad config, an unknown zoo name (with near matches).
    """
    graph = _load(model, batch=batch, seq=seq, phase=phase, context=context, train=train, dtype=dtype,
                  optimizer=optimizer, recompute=recompute, strict=strict, extra=extra)
    _check_tensor_sizes(graph, model)
    if weight_dtype is None and kv_dtype is None and group_size is None:
        return graph
    from workloads.precision import apply_precision

    return apply_precision(graph, weight_dtype=weight_dtype, kv_dtype=kv_dtype, group_size=group_size)


def _check_tensor_sizes(graph: OpGraph, model: str) -> None:
    """The micro-workloads' bound on one tensor (:data:`workloads.micro.MAX_TENSOR_ELEMENTS`, 2**48 elements: more
    memory than any node has) for every graph: a batch or length of 1e21 is a located error, not a prediction of
    1e21 GiB."""
    from workloads.micro import MAX_TENSOR_ELEMENTS

    big = next((t for t in graph.tensors.values() if t.numel > MAX_TENSOR_ELEMENTS), None)
    if big is not None:
        dims = " x ".join(str(d) for d in big.shape)
        raise ValueError(f"model {model!r}: tensor {big.name!r} too large; got {dims} = {big.numel:.3g} elements; "
                         f"expected at most {MAX_TENSOR_ELEMENTS:.3g} (2**48) per tensor (a smaller batch, seq or context)")


def _load(model: str, *, batch: int | None, seq: int | None, phase: str | None, context: int | None, train: bool,
          dtype: str | None, optimizer: str, recompute: str, strict: bool, extra: dict[str, Any]) -> OpGraph:
    """:func:`load_workload` without the precision options."""
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
            raise FileNotFoundError(f"{model}: no such file; expected a graph saved by `nodeperf graph MODEL --save "
                                    "FILE` or a Hugging Face config.json")
        from workloads.serialize import is_saved_graph

        data = saved_graph_json(path)
        if is_saved_graph(data):
            return _from_saved_graph(model, data, batch=batch, seq=seq, phase=phase, context=context, dtype=dtype,
                                     train=train, optimizer=optimizer, recompute=recompute, extra=extra)
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


def saved_graph_json(path: Path) -> Any:
    """The parsed JSON of ``path``, or None when it does not parse and is not a saved graph.

    A file that does not parse is a saved graph's error (located by :func:`~workloads.serialize.read_json`)
    when its opening names the saved-graph format; otherwise the config reader reports it, located
    the same way. (A config that parses is read a second time by that reader, which names the file
    in its own errors; configs are a few kilobytes.)
    """
    from workloads.serialize import FORMAT, read_json

    try:
        return read_json(path)
    except GraphError:
        with path.open(encoding="utf-8", errors="replace") as fh:
            head = fh.read(256)
        if FORMAT in head:
            raise
        return None


def _from_saved_graph(model: str, data: Any, *, batch: int | None, seq: int | None, phase: str | None,
                      context: int | None, dtype: str | None, train: bool, optimizer: str, recompute: str,
                      extra: dict[str, Any]) -> OpGraph:
    """The graph saved in ``model`` (already parsed as ``data``), refusing options that would change it."""
    from workloads import precision as _precision  # noqa: F401  (a saved graph may hold quant_matmul ops)
    from workloads.serialize import graph_from_json

    for opt, got in (("batch", batch), ("seq", seq), ("phase", phase), ("context", context), ("dtype", dtype),
                     *sorted(extra.items())):
        if got is not None:
            raise GraphError(f"{model}: --{opt}: a saved graph has fixed shapes; got {got}; expected no --{opt} "
                             f"(re-save with the {opt} you want)")
    graph = graph_from_json(data, model)
    if not train:
        return graph
    if graph.meta.get("phase") == "train_step":
        raise GraphError(f"{model}: --train: the saved graph is already a training step; got phase 'train_step'; "
                         "expected no --train")
    from workloads.training import training_graph

    try:
        return training_graph(graph, optimizer=optimizer, recompute=recompute)
    except GraphError as exc:
        raise GraphError(f"{model}: --train: {exc}") from None
