"""Reads a Hugging Face ``config.json`` (gpt2, llama, mistral, mixtral, bert, opt, gpt_neox, qwen2, vit) into a :class:`~workloads.zoo.transformer.TransformerConfig`.

Only the architecture hyperparameters are read; no weights are ever loaded. Fields that do not
change the operator graph's cost (dropout, epsilons, RoPE scaling, token ids) are ignored.
Modelling notes per family: Mistral's sliding-window attention is modelled as full causal
attention; GPT-NeoX's partial rotary embedding and parallel residual change neither parameters nor
matmul FLOPs and are modelled as full RoPE and a sequential residual.

Example
-------
>>> cfg = config_to_transformer({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
...                              "n_head": 12, "n_positions": 1024})
>>> cfg.d_ff, cfg.tied_embeddings
(3072, True)
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from workloads.dtypes import parse_dtype
from workloads.ir import OpGraph
from workloads.zoo.transformer import TransformerConfig, build

__all__ = ["config_to_transformer", "build_from_config", "MODEL_TYPES", "HFConfigError", "torch_dtype_of"]


class HFConfigError(ValueError):
    """A config.json that cannot be read as a supported transformer; one line naming the file and problem."""


class _Cfg:
    """Typed access to a config mapping with located errors."""

    def __init__(self, data: Mapping[str, Any], where: str, model_type: str) -> None:
        self.data = data
        self.where = where
        self.model_type = model_type

    def req(self, *keys: str) -> Any:
        for k in keys:
            if k in self.data and self.data[k] is not None:
                return self.data[k]
        alt = " or ".join(repr(k) for k in keys)
        raise HFConfigError(f"{self.where}: missing key {alt} for model_type {self.model_type!r}; expected an integer")

    def int(self, *keys: str) -> int:
        v = self.req(*keys)
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise HFConfigError(f"{self.where}: {keys[0]!r} is {v!r}; expected a non-negative integer")
        return v

    def get(self, key: str, default: Any) -> Any:
        v = self.data.get(key)
        return default if v is None else v


def _act(c: _Cfg, key: str, default: str) -> str:
    act = str(c.get(key, default)).lower()
    if act in ("silu", "swish"):
        return "swiglu"
    if act == "relu":
        return "relu"
    if act.startswith("gelu") or act == "quick_gelu":
        return "gelu"
    raise HFConfigError(f"{c.where}: {key!r} is {act!r}; expected one of silu, relu, gelu*")


def _gpt2(c: _Cfg) -> dict[str, Any]:
    d = c.int("n_embd", "hidden_size")
    inner = c.get("n_inner", None)
    return dict(vocab=c.int("vocab_size"), d_model=d, layers=c.int("n_layer", "num_hidden_layers"),
                heads=c.int("n_head", "num_attention_heads"), d_ff=int(inner) if inner else 4 * d,
                mlp=_act(c, "activation_function", "gelu_new"), norm="layernorm", pos="learned",
                max_positions=c.int("n_positions", "max_position_embeddings"),
                tied_embeddings=bool(c.get("tie_word_embeddings", True)))


def _llama(c: _Cfg) -> dict[str, Any]:
    heads = c.int("num_attention_heads")
    d = c.int("hidden_size")
    attn_bias = bool(c.get("attention_bias", False))
    hd = c.get("head_dim", None)
    out = dict(vocab=c.int("vocab_size"), d_model=d, layers=c.int("num_hidden_layers"), heads=heads,
               kv_heads=int(c.get("num_key_value_heads", heads)), head_dim=int(hd) if hd else None,
               d_ff=c.int("intermediate_size"), mlp=_act(c, "hidden_act", "silu"), norm="rmsnorm", pos="rope",
               max_positions=int(c.get("max_position_embeddings", 2048)),
               tied_embeddings=bool(c.get("tie_word_embeddings", False)), qkv_bias=attn_bias, out_bias=attn_bias,
               mlp_bias=bool(c.get("mlp_bias", False)))
    return out


def _mixtral(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)
    out.update(experts=c.int("num_local_experts"), top_k=c.int("num_experts_per_tok"), capacity_factor=1.0)
    return out


def _qwen2(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)
    out.update(qkv_bias=True, out_bias=False)  # Qwen2 attention: biases on q, k, v only
    return out


def _bert(c: _Cfg) -> dict[str, Any]:
    return dict(vocab=c.int("vocab_size"), d_model=c.int("hidden_size"), layers=c.int("num_hidden_layers"),
                heads=c.int("num_attention_heads"), d_ff=c.int("intermediate_size"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="learned", max_positions=c.int("max_position_embeddings"),
                pre_norm=False, final_norm=False, embed_norm=True, encoder_only=True,
                token_types=int(c.get("type_vocab_size", 2)), pooler=True)


def _opt(c: _Cfg) -> dict[str, Any]:
    d = c.int("hidden_size")
    proj = c.get("word_embed_proj_dim", d)
    if proj != d:
        raise HFConfigError(f"{c.where}: 'word_embed_proj_dim' is {proj!r}; expected hidden_size {d} "
                            "(OPT input/output projections are not modelled)")
    pre = bool(c.get("do_layer_norm_before", True))
    bias = bool(c.get("enable_bias", True))
    return dict(vocab=c.int("vocab_size"), d_model=d, layers=c.int("num_hidden_layers"),
                heads=c.int("num_attention_heads"), d_ff=c.int("ffn_dim"), mlp=_act(c, "activation_function", "relu"),
                norm="layernorm", pos="learned", max_positions=c.int("max_position_embeddings") + 2,  # OPT offset
                tied_embeddings=bool(c.get("tie_word_embeddings", True)), qkv_bias=bias, out_bias=bias, mlp_bias=bias,
                pre_norm=pre, final_norm=pre)


def _gpt_neox(c: _Cfg) -> dict[str, Any]:
    bias = bool(c.get("attention_bias", True))
    return dict(vocab=c.int("vocab_size"), d_model=c.int("hidden_size"), layers=c.int("num_hidden_layers"),
                heads=c.int("num_attention_heads"), d_ff=c.int("intermediate_size"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="rope", max_positions=int(c.get("max_position_embeddings", 2048)),
                tied_embeddings=bool(c.get("tie_word_embeddings", False)), qkv_bias=bias, out_bias=bias, mlp_bias=True)


def _vit(c: _Cfg) -> dict[str, Any]:
    labels = c.get("id2label", None)
    classes = len(labels) if isinstance(labels, Mapping) else int(c.get("num_labels", 0))
    return dict(vocab=0, d_model=c.int("hidden_size"), layers=c.int("num_hidden_layers"),
                heads=c.int("num_attention_heads"), d_ff=c.int("intermediate_size"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="learned", encoder_only=True, image_size=c.int("image_size"),
                patch_size=c.int("patch_size"), channels=int(c.get("num_channels", 3)), num_classes=classes,
                qkv_bias=bool(c.get("qkv_bias", True)))


#: model_type -> reader
MODEL_TYPES: dict[str, Callable[[_Cfg], dict[str, Any]]] = {
    "gpt2": _gpt2, "llama": _llama, "mistral": _llama, "mixtral": _mixtral, "bert": _bert, "opt": _opt,
    "gpt_neox": _gpt_neox, "qwen2": _qwen2, "vit": _vit,
}


def _load(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        return path_or_dict, "<config dict>"
    p = Path(path_or_dict)
    if p.is_dir():
        p = p / "config.json"
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise HFConfigError(f"{p}: cannot read config; got {exc.strerror or exc}; expected a readable config.json") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise HFConfigError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON; {exc.msg}") from None
    if not isinstance(data, dict):
        raise HFConfigError(f"{p}: top level is {type(data).__name__}; expected a JSON object")
    return data, str(p)


def config_to_transformer(path_or_dict: str | Path | Mapping[str, Any], name: str | None = None) -> TransformerConfig:
    """A :class:`TransformerConfig` from a Hugging Face config (a path to config.json, its folder, or a dict).

    Raises
    ------
    HFConfigError
        (a ValueError) with one line naming the file and the problem: invalid JSON (line and column),
        a missing key, or an unsupported ``model_type`` (with the nearest supported one).
    """
    return _to_config(*_load(path_or_dict), name)


def _to_config(data: Mapping[str, Any], where: str, name: str | None = None) -> TransformerConfig:
    mt = data.get("model_type")
    if not isinstance(mt, str):
        raise HFConfigError(f"{where}: missing key 'model_type'; expected one of {', '.join(sorted(MODEL_TYPES))}")
    reader = MODEL_TYPES.get(mt)
    if reader is None:
        near = difflib.get_close_matches(mt, list(MODEL_TYPES), n=1)
        raise HFConfigError(f"{where}: unknown model_type {mt!r}; expected one of {', '.join(sorted(MODEL_TYPES))}"
                            + (f"; did you mean {near[0]!r}?" if near else ""))
    fields = reader(_Cfg(data, where, mt))
    label = name or str(data.get("_name_or_path") or mt)
    try:
        return TransformerConfig(name=label, **fields)
    except ValueError as exc:
        raise HFConfigError(f"{where}: {exc}") from None


def torch_dtype_of(path_or_dict: str | Path | Mapping[str, Any]) -> str | None:
    """The config's ``torch_dtype`` as a nodeperf dtype string (``"bf16"``), or None when absent."""
    return _torch_dtype(_load(path_or_dict)[0])


def _torch_dtype(data: Mapping[str, Any], where: str = "config") -> str | None:
    v = data.get("torch_dtype")
    if v is None:
        return None
    return parse_dtype(str(v).removeprefix("torch."), where=f"{where}: torch_dtype").value


def build_from_config(path_or_dict: str | Path | Mapping[str, Any], *, batch: int = 1, seq: int | None = None,
                      phase: str | None = None, context: int | None = None, dtype: str | None = None,
                      **extra: Any) -> OpGraph:
    """Build the graph of a config.json.

    ``phase`` defaults to ``prefill`` for decoders and ``forward`` otherwise; ``seq`` to 2048, or the
    learned position table's size when that is smaller; ``dtype`` to the config's ``torch_dtype``.
    """
    data, where = _load(path_or_dict)  # read once
    cfg = _to_config(data, where)
    ph = phase or ("prefill" if cfg.is_decoder_lm else "forward")
    dt = dtype or _torch_dtype(data, where) or "bf16"
    if cfg.is_vision:
        seq = cfg.image_size
    elif seq is None:
        seq = min(2048, cfg.max_positions) if cfg.pos == "learned" else 2048
    return build(cfg, batch=batch, seq=seq, phase=ph, context=context, dtype=dt, **extra)
