"""The model zoo: named, cited networks built as OpGraphs from hyperparameter data files.

Builders register themselves with :func:`register_model` when their module is imported; the
hyperparameters live in ``workloads/zoo/data/*.toml`` with the paper or model card they come from.

A builder is called as ``builder(name, batch=..., seq=..., phase=..., context=..., dtype=..., **extra)``:

* ``seq`` is the sequence length for sequence models and the image side for vision models;
* ``phase`` is one of ``forward`` (whole-input inference), ``prefill``, ``decode`` (decoder LMs, with
  KV-cache tensors) or ``train`` (the forward pass of a training step, loss included, no KV cache;
  :func:`workloads.training.training_graph` derives backward and optimizer ops from it);
* ``context`` is the KV-cache length already present for ``decode``.
"""

from __future__ import annotations

import importlib
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from nodeperf.suggest import near_match
from workloads.ir import OpGraph

__all__ = ["ModelEntry", "register_model", "get_entry", "list_models", "build_model", "load_data", "DATA_DIR",
           "META_KEYS", "checkpoint_weight_dtype"]

DATA_DIR = Path(__file__).parent / "data"
#: zoo modules imported on first use, in listing order
_MODULES = ("cnn", "transformer", "rnn", "dlrm", "unet", "retinanet")
PHASES = ("forward", "prefill", "decode", "train")
#: keys of a zoo entry that describe it rather than its network (the rest are the builder's hyperparameters)
META_KEYS = ("family", "description", "source", "aliases", "defaults", "checkpoint")


@dataclass(frozen=True)
class ModelEntry:
    name: str
    family: str
    description: str
    source: str
    builder: Callable[..., OpGraph]
    defaults: dict[str, Any] = field(default_factory=dict)  # batch, seq, dtype, phase, ...
    phases: tuple[str, ...] = ("forward", "train")
    aliases: tuple[str, ...] = ()
    #: the weight format the published checkpoint ships for inference (a ``--weight-dtype`` name, e.g. ``mxfp4``:
    #: GPT-OSS's experts), applied by ``predict`` / ``serve`` / ``tune`` unless a weight dtype is given; None: 16-bit
    checkpoint_weight_dtype: str | None = None
    checkpoint_source: str = ""


_REGISTRY: dict[str, ModelEntry] = {}
_ALIASES: dict[str, str] = {}


def register_model(entry: ModelEntry) -> ModelEntry:
    _REGISTRY[entry.name] = entry
    for a in entry.aliases:
        _ALIASES[a] = entry.name
    return entry


_imported = 0  # how many of _MODULES are imported (always a prefix, so entries keep the listing order)


def _import_next() -> bool:
    """Import the next zoo module of :data:`_MODULES` (its entries register); False when all are."""
    global _imported
    if _imported >= len(_MODULES):
        return False
    m = _MODULES[_imported]
    _imported += 1
    try:
        importlib.import_module(f"workloads.zoo.{m}")
    except ModuleNotFoundError as exc:
        if exc.name != f"workloads.zoo.{m}":
            raise
    return True


def _load_all() -> None:
    while _import_next():
        pass


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def get_entry(name: str) -> ModelEntry:
    """The zoo entry called ``name`` (case, ``_`` and ``-`` insensitive); near matches on a typo.

    The zoo modules are imported in listing order until one has registered ``name`` (a transformer
    does not wait for the recommender and detection models to load); a name no module registers
    imports them all, for the near matches."""
    key = _norm(name)
    while True:
        table = {_norm(k): k for k in _REGISTRY} | {_norm(k): v for k, v in _ALIASES.items()}
        if key in table:
            return _REGISTRY[table[key]]
        if not _import_next():
            break
    # an alias and its model name are near the same typo: each model offered once
    near = list(dict.fromkeys(table[n] for n in near_match(key, list(table), n=len(table), cutoff=0.5)))[:3]
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    raise KeyError(f"model {name!r}: unknown model; expected a zoo name (see `nodeperf models`), a micro-workload, "
                   f"an .onnx file or a config.json{hint}")


def list_models() -> list[ModelEntry]:
    _load_all()
    return list(_REGISTRY.values())


def build_model(name: str, **params: Any) -> OpGraph:
    """Build zoo model ``name`` with ``params`` (None values fall back to the entry's defaults)."""
    entry = get_entry(name)
    kw = dict(entry.defaults)
    kw.update({k: v for k, v in params.items() if v is not None})
    phase = kw.get("phase", "forward")
    if phase not in entry.phases:
        raise ValueError(f"model {entry.name!r}: phase {phase!r} not supported; expected one of {', '.join(entry.phases)}")
    for k in ("batch", "seq", "context"):
        v = kw.get(k)
        if v is not None and (not isinstance(v, int) or v < 1):
            raise ValueError(f"model {entry.name!r}: {k} must be a positive integer; got {v!r}")
    return entry.builder(entry.name, **kw)


def checkpoint_weight_dtype(model: Any) -> tuple[str, str] | None:
    """(weight dtype, source) of the checkpoint zoo model ``model`` is published as (``("mxfp4", ...)`` for
    GPT-OSS), or None: a 16-bit checkpoint, or not a zoo name (a config.json, an ONNX file, a graph)."""
    if not isinstance(model, str):
        return None
    try:
        entry = get_entry(model)
    except KeyError:
        return None
    return (entry.checkpoint_weight_dtype, entry.checkpoint_source) if entry.checkpoint_weight_dtype else None


@cache
def load_data(filename: str) -> dict[str, Any]:
    """Parsed ``workloads/zoo/data/<filename>`` (TOML)."""
    with open(DATA_DIR / filename, "rb") as f:
        return tomllib.load(f)
