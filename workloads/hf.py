"""Reads a Hugging Face ``config.json`` into a :class:`~workloads.zoo.transformer.TransformerConfig`.

Model types: gpt2, llama, mistral, mixtral, bert, opt, gpt_neox, qwen2, qwen3, qwen3_moe, gemma3_text,
gemma3, gpt_oss, deepseek_v3, llama4_text, llama4 and vit. Only the architecture hyperparameters are
read; no weights are ever loaded. Fields that do not change the operator graph's cost (dropout,
epsilons, token ids) are ignored; RoPE scaling (``rope_scaling``, or transformers v5's ``rope_parameters``,
flat or per layer type) sets only the context limit ``max_positions`` (:func:`_rope_context`). A key the config leaves out takes the default of its
transformers configuration class, as ``from_pretrained`` would.

Modelling notes per family:

* Sliding-window attention (Mistral, Mixtral, Qwen2/3 with ``use_sliding_window``, Gemma 3, GPT-OSS)
  is read from ``sliding_window`` and the per-layer ``layer_types`` (or the class's own rule:
  ``sliding_window_pattern`` for Gemma 3, ``max_window_layers`` for Qwen, every other layer for
  GPT-OSS). Patterns the graph builder represents are every layer local, or layer ``i`` global
  exactly when ``(i + 1) % k == 0``; any other pattern is refused by name rather than approximated.
* ``gemma3`` and ``llama4`` configs are multimodal: their ``text_config`` is read; the vision
  encoder runs only on image inputs and is not part of the graph.
* GPT-NeoX's partial rotary embedding and parallel residual change neither parameters nor matmul
  FLOPs and are modelled as full RoPE and a sequential residual.
* GPT-OSS's expert biases are read as the model class holds them (``expert_bias``: no config key).
* Not represented (a few element-wise ops or under 0.1% of the parameters each): GPT-OSS's attention
  sinks and router bias, DeepSeek-V3's router score-correction bias, Llama 4's weightless
  q/k L2 norm and its RoPE-free layers, Gemma's embedding scale and logit soft-capping.

Example
-------
>>> cfg = config_to_transformer({"model_type": "gpt2", "vocab_size": 50257, "n_embd": 768, "n_layer": 12,
...                              "n_head": 12, "n_positions": 1024})
>>> cfg.d_ff, cfg.tied_embeddings
(3072, True)
"""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.files import read_bytes_file
from nodeperf.suggest import did_you_mean
from workloads.dtypes import parse_dtype
from workloads.ir import OpGraph, format_problems
from workloads.zoo.transformer import TransformerConfig, build

__all__ = ["config_to_transformer", "build_from_config", "MODEL_TYPES", "HFConfigError", "torch_dtype_of",
           "MAX_LAYERS", "MAX_HIDDEN", "MAX_INTERMEDIATE", "MAX_HEADS", "MAX_VOCAB", "MAX_POSITIONS",
           "MAX_EXPERTS", "MAX_IMAGE_SIZE", "MAX_PARAMS", "MAX_JSON_DEPTH", "NESTED_TEXT_TYPES"]

# --- limits -----------------------------------------------------------------------------------
# A config's sizes are checked against these bounds before any graph is built, so a typo such as
# "num_hidden_layers": 1000000 is a located error in milliseconds instead of minutes of graph building
# and gigabytes of memory. Each bound is far above every published model (so no real config is
# refused) and low enough that graph building stays bounded in time and memory and every derived
# count (FLOPs, bytes, energy) stays a finite, exact-enough float.

#: Decoder/encoder layers: the deepest published transformers have ~100-300; a graph has ~20 ops per
#: layer, so 10,000 layers is ~200,000 ops (`nodeperf predict` of such a config takes ~35 s and ~650 MB
#: on one core; a million layers would take an hour and tens of GB).
MAX_LAYERS = 10_000
#: Hidden (residual) width: the widest published is ~16k-25k; 2**20 = 1,048,576.
MAX_HIDDEN = 2**20
#: MLP hidden width per expert (intermediate_size, ffn_dim, n_inner): 4x :data:`MAX_HIDDEN`.
MAX_INTERMEDIATE = 2**22
#: Attention heads (query or key/value) and head_dim: 2**16 = 65,536 (published: <= 128 heads).
MAX_HEADS = 2**16
#: Vocabulary rows: the largest published vocabularies are ~256k; 2**24 = 16,777,216.
MAX_VOCAB = 2**24
#: Learned position-table rows / context length: the longest published contexts are ~10M; 2**24.
MAX_POSITIONS = 2**24
#: Experts per MoE layer (published: <= 256); the graph's op count does not grow with it.
MAX_EXPERTS = 2**16
#: ViT image side in pixels (published: <= 1,024); 2**16 = 65,536.
MAX_IMAGE_SIZE = 2**16
#: Parameters of the whole model, estimated from the sizes: 10**15 (a quadrillion, ~500x the largest
#: published model), which keeps weight bytes and FLOPs of any phase far below float overflow.
MAX_PARAMS = 10**15
#: Nesting depth of the JSON (a config is 2-3 levels deep); deeper input is refused before parsing,
#: so no RecursionError can come out of the JSON parser.
MAX_JSON_DEPTH = 100


class HFConfigError(NodeperfError, ValueError):
    """A config.json that cannot be read as a supported transformer; the message locates every problem.

    One problem is one line ``<file>: <key>: <problem>; got <value>; expected <form>``; several are a
    count line followed by one such line each (the first 20, then ``... and N more``).
    """


def _json(v: Any) -> str:
    """``v`` spelt as in the JSON file (``"4096"``, ``4096.0``, ``true``, ``null``), cut when long."""
    try:
        text = json.dumps(v, allow_nan=True, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 60 else text[:40] + "..." + text[-10:] + f" ({len(text)} characters)"


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, float):
        return "a non-integral number" if math.isfinite(v) and v != int(v) else "a float"
    return "a number" if isinstance(v, int) else type(v).__name__


class _Cfg:
    """Typed access to a config mapping; problems are collected (named by the config's own keys)."""

    def __init__(self, data: Mapping[str, Any], where: str, model_type: str) -> None:
        self.data = data
        self.where = where
        self.model_type = model_type
        self.problems: list[str] = []
        self.used: dict[str, str] = {}  # what -> the config key it was read from

    def bad(self, key: str, problem: str, got: Any, expected: str, raw: bool = False) -> None:
        shown = got if raw else _json(got)
        self.problems.append(f"{self.where}: {key}: {problem}; got {shown}; expected {expected}")

    def key_of(self, *keys: str) -> str | None:
        """The first of ``keys`` present with a non-null value (None when none is)."""
        return next((k for k in keys if self.data.get(k) is not None), None)

    def int(self, *keys: str, lo: int = 1, hi: int | None = None, what: str | None = None) -> int:
        """A required integer in ``[lo, hi]`` under the first present of ``keys`` (1 when it is bad)."""
        k = self.key_of(*keys)
        if k is None:
            alt = " or ".join(repr(x) for x in keys)
            null = next((x for x in keys if x in self.data), None)
            if null is not None:
                self.bad(null, "null value", None, self._form(lo, hi))
            else:
                self.problems.append(f"{self.where}: missing key {alt} for model_type {self.model_type!r}; "
                                     f"expected {self._form(lo, hi)}")
            return max(lo, 1)
        if what:
            self.used[what] = k
        return self._check(k, self.data[k], lo, hi)

    def opt_int(self, key: str, default: Any, *, lo: int = 1, hi: int | None = None, what: str | None = None) -> Any:
        """An optional integer (absent or null: ``default``)."""
        v = self.data.get(key)
        if v is None:
            return default
        if what:
            self.used[what] = key
        return self._check(key, v, lo, hi)

    def flag(self, key: str, default: bool) -> bool:
        """An optional JSON boolean (absent or null: ``default``)."""
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.bad(key, "not a boolean", v, "true or false")
            return default
        return v

    def text(self, key: str, default: str) -> str:
        v = self.data.get(key)
        if v is None:
            return default
        if not isinstance(v, str):
            self.bad(key, "not a string", v, "a name such as " + repr(default))
            return default
        return v

    @staticmethod
    def _form(lo: int, hi: int | None) -> str:
        base = "a positive integer" if lo == 1 else f"an integer >= {lo}"
        return base + (f" <= {hi:,}" if hi is not None else "")

    def _check(self, key: str, v: Any, lo: int, hi: int | None) -> int:
        form = self._form(lo, hi)
        if isinstance(v, bool) or not isinstance(v, int):
            self.bad(key, f"not an integer ({_kind(v)})", v, form)
            return max(lo, 1)
        if v < lo:
            self.bad(key, "zero" if v == 0 else "negative" if v < 0 else "too small", v, form)
            return max(lo, 1)
        if hi is not None and v > hi:
            self.bad(key, "too large", v, form + " (a limit of nodeperf, far above any published model)")
            return hi
        return v


def _act(c: _Cfg, key: str, default: str) -> str:
    act = c.text(key, default).lower()
    if act in ("silu", "swish"):
        return "swiglu"
    if act == "relu":
        return "relu"
    if act.startswith("gelu") or act == "quick_gelu":
        return "gelu"
    c.bad(key, "unsupported activation", act, "one of silu, swish, relu, gelu*")
    return "gelu"


def _gpt2(c: _Cfg) -> dict[str, Any]:
    d = c.int("n_embd", "hidden_size", hi=MAX_HIDDEN, what="d_model")
    return dict(vocab=c.int("vocab_size", hi=MAX_VOCAB, what="vocab"), d_model=d,
                layers=c.int("n_layer", "num_hidden_layers", hi=MAX_LAYERS, what="layers"),
                heads=c.int("n_head", "num_attention_heads", hi=MAX_HEADS, what="heads"),
                d_ff=c.opt_int("n_inner", 4 * d, hi=MAX_INTERMEDIATE, what="d_ff"),
                mlp=_act(c, "activation_function", "gelu_new"), norm="layernorm", pos="learned",
                max_positions=c.int("n_positions", "max_position_embeddings", hi=MAX_POSITIONS, what="max_positions"),
                tied_embeddings=c.flag("tie_word_embeddings", True))


def _llama(c: _Cfg) -> dict[str, Any]:
    heads = c.int("num_attention_heads", hi=MAX_HEADS, what="heads")
    d = c.int("hidden_size", hi=MAX_HIDDEN, what="d_model")
    attn_bias = c.flag("attention_bias", False)
    out = dict(vocab=c.int("vocab_size", hi=MAX_VOCAB, what="vocab"), d_model=d,
               layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"), heads=heads,
               kv_heads=c.opt_int("num_key_value_heads", heads, hi=MAX_HEADS, what="kv_heads"),
               head_dim=c.opt_int("head_dim", None, hi=MAX_HEADS, what="head_dim"),
               d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"), mlp=_act(c, "hidden_act", "silu"),
               norm="rmsnorm", pos="rope",
               max_positions=c.opt_int("max_position_embeddings", 2048, hi=MAX_POSITIONS, what="max_positions"),
               tied_embeddings=c.flag("tie_word_embeddings", False), qkv_bias=attn_bias, out_bias=attn_bias,
               mlp_bias=c.flag("mlp_bias", False))
    return out


def _mistral(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)  # MistralConfig: sliding_window defaults to 4096, on every layer
    out.update(_windows(c, out["layers"], _window(c, 4096), lambda i: True))
    return out


def _mixtral(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)  # MixtralConfig: sliding_window defaults to null, on every layer when set
    out.update(experts=c.int("num_local_experts", hi=MAX_EXPERTS, what="experts"),
               top_k=c.int("num_experts_per_tok", hi=MAX_EXPERTS, what="top_k"), capacity_factor=1.0)
    out.update(_windows(c, out["layers"], _window(c, None), lambda i: True))
    return out


def _qwen2(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)
    out.update(qkv_bias=True, out_bias=False)  # Qwen2 attention: biases on q, k, v only
    out.update(_qwen_windows(c, out["layers"]))
    return out


def _qwen3(c: _Cfg) -> dict[str, Any]:
    out = _llama(c)  # Qwen3Config: head_dim defaults to 128; RMSNorm on each q and k head
    out.update(head_dim=c.opt_int("head_dim", 128, hi=MAX_HEADS, what="head_dim"), qk_norm=True)
    out.update(_qwen_windows(c, out["layers"]))
    return out


def _qwen3_moe(c: _Cfg) -> dict[str, Any]:
    """Qwen3-MoE: layer ``i`` is an MoE of ``num_experts`` when ``(i + 1) % decoder_sparse_step == 0``."""
    out = _llama(c)
    out.update(head_dim=c.opt_int("head_dim", None, hi=MAX_HEADS, what="head_dim"), qk_norm=True,
               experts=c.int("num_experts", "num_local_experts", hi=MAX_EXPERTS, what="experts"),
               top_k=c.int("num_experts_per_tok", hi=MAX_EXPERTS, what="top_k"), capacity_factor=1.0,
               d_ff=c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"))
    step = c.opt_int("decoder_sparse_step", 1, hi=MAX_LAYERS)
    if step > 1:  # the dense layers between run the intermediate_size MLP
        out.update(moe_every=step, moe_offset=step - 1, dense_d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE))
    only = c.data.get("mlp_only_layers")
    if only:
        c.bad("mlp_only_layers", "dense layers by index are not modelled", only,
              "[] (every MoE layer set by decoder_sparse_step, as the published Qwen3-MoE configs)")
    if c.flag("use_sliding_window", False) and c.data.get("layer_types") is None:
        c.bad("use_sliding_window", "a sliding window without layer_types is not modelled for qwen3_moe", True,
              "false (as the published Qwen3-MoE configs), or a layer_types list")
    elif c.flag("use_sliding_window", False):
        out.update(_windows(c, out["layers"], _window(c, 4096), lambda i: True))
    return out


def _gemma3_text(c: _Cfg) -> dict[str, Any]:
    """Gemma 3 text decoder (Gemma3TextConfig defaults for the keys a config leaves out)."""
    heads = c.int("num_attention_heads", hi=MAX_HEADS, what="heads")
    attn_bias = c.flag("attention_bias", False)
    out = dict(vocab=c.opt_int("vocab_size", 262208, hi=MAX_VOCAB, what="vocab"),
               d_model=c.int("hidden_size", hi=MAX_HIDDEN, what="d_model"),
               layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"), heads=heads,
               kv_heads=c.opt_int("num_key_value_heads", 4, hi=MAX_HEADS, what="kv_heads"),
               head_dim=c.opt_int("head_dim", 256, hi=MAX_HEADS, what="head_dim"),
               d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"),
               mlp=_gated(c, c.key_of("hidden_activation", "hidden_act") or "hidden_activation", "gelu_pytorch_tanh"),
               norm="rmsnorm", pos="rope",
               max_positions=c.opt_int("max_position_embeddings", 131072, hi=MAX_POSITIONS, what="max_positions"),
               tied_embeddings=c.flag("tie_word_embeddings", True), qkv_bias=attn_bias, out_bias=attn_bias,
               mlp_bias=False, qk_norm=True, sandwich_norm=True)
    every = c.opt_int("sliding_window_pattern", 6, hi=MAX_LAYERS)  # layer i global when (i + 1) % every == 0
    out.update(_windows(c, out["layers"], _window(c, 4096), lambda i: (i + 1) % every != 0))
    return out


def _gpt_oss(c: _Cfg) -> dict[str, Any]:
    """GPT-OSS: every layer an MoE; GptOssConfig alternates sliding (even i) and full (odd i) layers."""
    out = _llama(c)
    attn_bias = c.flag("attention_bias", True)
    out.update(head_dim=c.opt_int("head_dim", 64, hi=MAX_HEADS, what="head_dim"), qkv_bias=attn_bias,
               out_bias=attn_bias, experts=c.int("num_local_experts", "num_experts", hi=MAX_EXPERTS, what="experts"),
               top_k=c.int("num_experts_per_tok", hi=MAX_EXPERTS, what="top_k"), capacity_factor=1.0,
               expert_bias=True)  # GptOssExperts always holds gate_up_proj_bias and down_proj_bias (no config key)
    out.update(_windows(c, out["layers"], _window(c, 128), lambda i: (i + 1) % 2 != 0))
    return out


def _deepseek_v3(c: _Cfg) -> dict[str, Any]:
    """DeepSeek-V3: latent attention, ``first_k_dense_replace`` dense layers, then routed plus shared experts."""
    out = _llama(c)
    inter = c.int("moe_intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff")
    out.update(head_dim=c.int("qk_nope_head_dim", hi=MAX_HEADS, what="head_dim"),
               rope_head_dim=c.int("qk_rope_head_dim", hi=MAX_HEADS), v_head_dim=c.int("v_head_dim", hi=MAX_HEADS),
               q_lora_rank=c.opt_int("q_lora_rank", 0, lo=0, hi=MAX_HIDDEN),
               kv_lora_rank=c.int("kv_lora_rank", hi=MAX_HIDDEN), kv_heads=None, d_ff=inter,
               dense_d_ff=out["d_ff"], shared_d_ff=c.opt_int("n_shared_experts", 0, lo=0, hi=MAX_EXPERTS) * inter,
               experts=c.int("n_routed_experts", "num_local_experts", hi=MAX_EXPERTS, what="experts"),
               top_k=c.int("num_experts_per_tok", hi=MAX_EXPERTS, what="top_k"), capacity_factor=1.0,
               first_dense=c.opt_int("first_k_dense_replace", 0, lo=0, hi=MAX_LAYERS),
               moe_every=c.opt_int("moe_layer_freq", 1, hi=MAX_LAYERS))
    return out


def _llama4_text(c: _Cfg) -> dict[str, Any]:
    """Llama 4 text decoder: MoE layers every ``interleave_moe_layer_step`` (the last of each step), top-k
    routed experts plus one shared expert of the experts' width; dense layers ``intermediate_size_mlp``."""
    out = _llama(c)
    step = c.opt_int("interleave_moe_layer_step", 1, hi=MAX_LAYERS)
    out.update(head_dim=c.opt_int("head_dim", None, hi=MAX_HEADS, what="head_dim"),
               experts=c.int("num_local_experts", hi=MAX_EXPERTS, what="experts"),
               top_k=c.opt_int("num_experts_per_tok", 1, hi=MAX_EXPERTS, what="top_k"), capacity_factor=1.0,
               shared_d_ff=out["d_ff"], moe_every=step, moe_offset=step - 1,
               attention_chunk=c.opt_int("attention_chunk_size", 0, lo=0, hi=MAX_POSITIONS))
    if step > 1:
        out["dense_d_ff"] = c.int("intermediate_size_mlp", hi=MAX_INTERMEDIATE)
    moe = c.data.get("moe_layers")
    if moe is not None and moe != list(range(step - 1, out["layers"], step)):
        c.bad("moe_layers", "MoE layers other than every interleave_moe_layer_step-th are not modelled", moe,
              f"the layers {step - 1}, {2 * step - 1}, ... (interleave_moe_layer_step {step}) or null")
    return out


def _window(c: _Cfg, default: int | None) -> int:
    """``sliding_window`` in tokens, 0 for none: null switches it off, absence takes the class default."""
    if "sliding_window" not in c.data:
        return default or 0
    return c.opt_int("sliding_window", 0, hi=MAX_POSITIONS)


def _qwen_windows(c: _Cfg, layers: int) -> dict[str, Any]:
    """Qwen2/Qwen3: with ``use_sliding_window`` the layers from ``max_window_layers`` on are local."""
    if not c.flag("use_sliding_window", False):
        return {}
    first = c.opt_int("max_window_layers", 28, lo=0, hi=MAX_LAYERS)
    return _windows(c, layers, _window(c, 4096), lambda i: i >= first, key="max_window_layers")


_LAYER_TYPES = ("full_attention", "sliding_attention")


def _windows(c: _Cfg, layers: int, window: int, local: Callable[[int], bool],
             key: str = "layer_types") -> dict[str, Any]:
    """``sliding_window``/``global_every`` for a per-layer local rule (a ``layer_types`` list wins)."""
    types = c.data.get("layer_types")
    if types is not None:
        key = "layer_types"
        if not isinstance(types, list) or len(types) != layers or any(t not in _LAYER_TYPES for t in types):
            c.bad(key, "not one attention type per layer", types,
                  f"a list of {layers} of {' or '.join(repr(t) for t in _LAYER_TYPES)}")
            return {}
        flags = [t == "sliding_attention" for t in types]
    else:
        flags = [bool(local(i)) for i in range(layers)]
    if not window or not any(flags) or c.problems:
        return {}
    if all(flags):
        return {"sliding_window": window}
    every = flags.index(False) + 1
    if any(f != ((i + 1) % every != 0) for i, f in enumerate(flags)):
        shown = "".join("L" if f else "G" for f in flags)
        c.bad(key, "a local (L) / global (G) layer pattern not modelled", shown,
              "every layer local, or layer i global exactly when (i + 1) % k == 0", raw=True)
        return {}
    return {"sliding_window": window, "global_every": every}


def _gated(c: _Cfg, key: str, default: str) -> str:
    """The activation of a gated MLP (gate and up projections): GeGLU or SwiGLU."""
    act = c.text(key, default).lower()
    if act.startswith("gelu"):
        return "geglu"
    if act in ("silu", "swish"):
        return "swiglu"
    c.bad(key, "unsupported gated activation", act, "one of gelu*, silu, swish")
    return "geglu"


def _bert(c: _Cfg) -> dict[str, Any]:
    return dict(vocab=c.int("vocab_size", hi=MAX_VOCAB, what="vocab"),
                d_model=c.int("hidden_size", hi=MAX_HIDDEN, what="d_model"),
                layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"),
                heads=c.int("num_attention_heads", hi=MAX_HEADS, what="heads"),
                d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="learned",
                max_positions=c.int("max_position_embeddings", hi=MAX_POSITIONS, what="max_positions"),
                pre_norm=False, final_norm=False, embed_norm=True, encoder_only=True,
                token_types=c.opt_int("type_vocab_size", 2, lo=0, hi=MAX_VOCAB), pooler=True)


def _opt(c: _Cfg) -> dict[str, Any]:
    d = c.int("hidden_size", hi=MAX_HIDDEN, what="d_model")
    proj = c.opt_int("word_embed_proj_dim", d, hi=MAX_HIDDEN)
    if proj != d and not c.problems:
        c.bad("word_embed_proj_dim", "differs from hidden_size (OPT input/output projections are not modelled)",
              proj, f"hidden_size {d}")
    pre = c.flag("do_layer_norm_before", True)
    bias = c.flag("enable_bias", True)
    return dict(vocab=c.int("vocab_size", hi=MAX_VOCAB, what="vocab"), d_model=d,
                layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"),
                heads=c.int("num_attention_heads", hi=MAX_HEADS, what="heads"),
                d_ff=c.int("ffn_dim", hi=MAX_INTERMEDIATE, what="d_ff"), mlp=_act(c, "activation_function", "relu"),
                norm="layernorm", pos="learned",
                max_positions=c.int("max_position_embeddings", hi=MAX_POSITIONS, what="max_positions") + 2,  # OPT offset
                tied_embeddings=c.flag("tie_word_embeddings", True), qkv_bias=bias, out_bias=bias, mlp_bias=bias,
                pre_norm=pre, final_norm=pre)


def _gpt_neox(c: _Cfg) -> dict[str, Any]:
    bias = c.flag("attention_bias", True)
    return dict(vocab=c.int("vocab_size", hi=MAX_VOCAB, what="vocab"),
                d_model=c.int("hidden_size", hi=MAX_HIDDEN, what="d_model"),
                layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"),
                heads=c.int("num_attention_heads", hi=MAX_HEADS, what="heads"),
                d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="rope",
                max_positions=c.opt_int("max_position_embeddings", 2048, hi=MAX_POSITIONS, what="max_positions"),
                tied_embeddings=c.flag("tie_word_embeddings", False), qkv_bias=bias, out_bias=bias, mlp_bias=True)


def _vit(c: _Cfg) -> dict[str, Any]:
    labels = c.data.get("id2label")
    if isinstance(labels, Mapping):
        classes = len(labels)
    else:
        if labels is not None:
            c.bad("id2label", f"not an object ({_kind(labels)})", labels, 'an object such as {"0": "label"}')
        classes = c.opt_int("num_labels", 0, lo=0, hi=MAX_VOCAB)
    return dict(vocab=0, d_model=c.int("hidden_size", hi=MAX_HIDDEN, what="d_model"),
                layers=c.int("num_hidden_layers", hi=MAX_LAYERS, what="layers"),
                heads=c.int("num_attention_heads", hi=MAX_HEADS, what="heads"),
                d_ff=c.int("intermediate_size", hi=MAX_INTERMEDIATE, what="d_ff"), mlp=_act(c, "hidden_act", "gelu"),
                norm="layernorm", pos="learned", encoder_only=True,
                image_size=c.int("image_size", hi=MAX_IMAGE_SIZE, what="image_size"),
                patch_size=c.int("patch_size", hi=MAX_IMAGE_SIZE, what="patch_size"),
                channels=c.opt_int("num_channels", 3, hi=MAX_HEADS), num_classes=classes,
                qkv_bias=c.flag("qkv_bias", True))


#: model_type -> reader
MODEL_TYPES: dict[str, Callable[[_Cfg], dict[str, Any]]] = {
    "gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "mixtral": _mixtral, "bert": _bert, "opt": _opt,
    "gpt_neox": _gpt_neox, "qwen2": _qwen2, "qwen3": _qwen3, "qwen3_moe": _qwen3_moe, "gemma3_text": _gemma3_text,
    "gpt_oss": _gpt_oss, "deepseek_v3": _deepseek_v3, "llama4_text": _llama4_text, "vit": _vit,
}

#: multimodal model_type -> the model_type of its ``text_config``, which is what is read
NESTED_TEXT_TYPES: dict[str, str] = {"gemma3": "gemma3_text", "llama4": "llama4_text"}


def _json_depth_exceeds(text: str, limit: int) -> tuple[int, int] | None:
    """(line, column) where ``text`` first nests deeper than ``limit`` arrays/objects, else None.

    A linear scan that skips strings, so deeply nested input is refused without recursion.
    """
    depth = 0
    in_str = esc = False
    line, col0 = 1, -1
    for i, ch in enumerate(text):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
            elif ch == "\n":
                line, col0 = line + 1, i
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            depth += 1
            if depth > limit:
                return line, i - col0
        elif ch in "]}":
            depth -= 1
        elif ch == "\n":
            line, col0 = line + 1, i
    return None


def _load(path_or_dict: str | Path | Mapping[str, Any]) -> tuple[Mapping[str, Any], str]:
    if isinstance(path_or_dict, Mapping):
        return path_or_dict, "<config dict>"
    p = Path(path_or_dict)
    if p.is_dir():
        p = p / "config.json"
    raw = read_bytes_file(p, what="a readable config.json", error=HFConfigError)
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark is allowed (editors on Windows write one)
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise HFConfigError(f"{p}:{line}:{col}: not UTF-8 text; got byte {raw[exc.start]:#04x} at offset {exc.start}; "
                            "expected a UTF-8 JSON file") from None
    if not text.strip():
        raise HFConfigError(f"{p}:1:1: invalid JSON: empty file; got {len(raw)} bytes of blank text; expected a JSON "
                            'object such as {"model_type": "llama", ...}')
    opens = text.count("[") + text.count("{")
    deep = _json_depth_exceeds(text, MAX_JSON_DEPTH) if opens > MAX_JSON_DEPTH else None
    if deep is not None:
        raise HFConfigError(f"{p}:{deep[0]}:{deep[1]}: JSON nested too deeply; got more than {MAX_JSON_DEPTH} levels "
                            "of arrays/objects; expected a config object a few levels deep")
    dups: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                dups.append(f"{p}: {k}: duplicate key; got {_json(out[k])} and then {_json(v)}; expected each key "
                            "once (JSON keeps only the last)")
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as exc:
        line_text = text.splitlines()[exc.lineno - 1] if exc.lineno - 1 < len(text.splitlines()) else ""
        near = line_text[max(0, exc.colno - 16): exc.colno + 15].strip()
        raise HFConfigError(f"{p}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}; got {near!r}; "
                            "expected a JSON object (a config.json)") from None
    except RecursionError:  # unreachable after the depth check; kept so no traceback can escape
        raise HFConfigError(f"{p}: JSON nested too deeply; got more levels than the parser can follow; "
                            "expected a config object a few levels deep") from None
    except ValueError:  # an integer literal longer than Python converts (sys.get_int_max_str_digits())
        raise HFConfigError(f"{p}: invalid JSON: a number is too long; got an integer of more than "
                            f"{sys.get_int_max_str_digits()} digits; expected numbers of ordinary size") from None
    if not isinstance(data, dict):
        got = _json(data) + ("" if data is None else f" ({_kind(data)})")
        raise HFConfigError(f"{p}: top level: not a JSON object; got {got}; expected a JSON object such as "
                            '{"model_type": "llama", ...}')
    if dups:
        raise HFConfigError(format_problems(str(p), dups, "config"))
    return data, str(p)


def config_to_transformer(path_or_dict: str | Path | Mapping[str, Any], name: str | None = None) -> TransformerConfig:
    """A :class:`TransformerConfig` from a Hugging Face config (a path to config.json, its folder, or a dict).

    Sizes are checked against the module's limits (:data:`MAX_LAYERS`, :data:`MAX_HIDDEN`, ...,
    :data:`MAX_PARAMS`) before anything is built.

    Raises
    ------
    HFConfigError
        (a ValueError) naming the file and each problem by the config's own key: invalid JSON (line
        and column), not UTF-8, nesting deeper than :data:`MAX_JSON_DEPTH`, a top level that is not an
        object, a missing key, a value of the wrong type, zero, negative or beyond a limit, heads that
        do not divide the hidden size, or an unsupported ``model_type`` (with the nearest supported one).
    """
    return _to_config(*_load(path_or_dict), name)


def _estimated_params(f: Mapping[str, Any]) -> int:
    """Rough parameter count from the sizes (embeddings, attention, MLPs of every expert)."""
    d, ff, layers = f["d_model"], f["d_ff"], f["layers"]
    heads = f["heads"]
    hd = f.get("head_dim") or max(1, d // heads)
    kv = f.get("kv_heads") or heads
    attn = d * hd * (2 * heads + 2 * kv)
    mlp = (3 if f.get("mlp") == "swiglu" else 2) * d * ff * max(1, f.get("experts") or 0)
    return layers * (attn + mlp) + (f.get("vocab") or 0) * d * 2 + (f.get("max_positions") or 0) * d


def _cross_checks(c: _Cfg, f: Mapping[str, Any]) -> None:
    """Relations between sizes, named by the config's keys (after each size passed on its own)."""
    u = c.used
    heads, d = f["heads"], f["d_model"]
    kv = f.get("kv_heads")
    if kv is not None and "kv_heads" in u and heads % kv:
        c.bad(u["kv_heads"], f"does not divide {u.get('heads', 'num_attention_heads')}={heads}", kv,
              f"a divisor of {heads} (grouped-query attention)")
    if f.get("head_dim") is None and d % heads:
        c.bad(u.get("heads", "num_attention_heads"), f"does not divide {u.get('d_model', 'hidden_size')}={d}", heads,
              f"a divisor of {d} (or head_dim set)")
    if f.get("experts") and f.get("top_k", 1) > f["experts"]:
        c.bad(u.get("top_k", "num_experts_per_tok"), f"more than {u.get('experts', 'num_local_experts')}="
              f"{f['experts']}", f["top_k"], f"1..{f['experts']}")
    if f.get("image_size") and f["image_size"] % f["patch_size"]:
        c.bad(u.get("patch_size", "patch_size"), f"does not divide image_size={f['image_size']}", f["patch_size"],
              f"a divisor of {f['image_size']}")
    if not c.problems:
        n = _estimated_params(f)
        if n > MAX_PARAMS:
            c.problems.append(f"{c.where}: (model): too many parameters; got about {n:.3g} from the sizes above; "
                              f"expected at most {MAX_PARAMS:.0e} (a limit of nodeperf, far above any published model)")


#: ``rope_scaling`` types whose ``max_position_embeddings`` already states the extended context (no factor applied),
#: and those whose context is the base times ``factor``, as vLLM derives ``max_model_len`` (vllm-project/vllm @
#: 0052a5b818980ce8a0477706aaf9f75bd5af72cd vllm/config/model.py ``_get_and_verify_max_len``: the factor of every
#: type but ``su``, ``longrope`` and ``llama3``; for ``yarn`` the base is ``original_max_position_embeddings``).
#: The types are those of transformers' ``ROPE_INIT_FUNCTIONS`` (huggingface/transformers @
#: 0044e3b3facff1a1ad60b235c69d5b45beae75a4 src/transformers/modeling_rope_utils.py), with ``su`` (the former name
#: of ``longrope``) and ``mrope`` (Qwen2-VL's sectioned RoPE, which Qwen2VLConfig reads as ``default``).
ROPE_UNSCALED_TYPES = ("default", "mrope", "llama3", "longrope", "su")
ROPE_SCALED_TYPES = ("linear", "dynamic", "ntk", "yarn")


def _rope_context(c: _Cfg, max_positions: int) -> int:
    """The context limit of a RoPE config (vLLM's rule, see :data:`ROPE_SCALED_TYPES`): ``max_position_embeddings``
    for ``default``, ``llama3`` and ``longrope`` (Llama 3.1 states 131072 with factor 8), ``factor`` x
    ``max_position_embeddings`` for ``linear``, ``dynamic`` and ``ntk``, ``factor`` x
    ``original_max_position_embeddings`` (else ``max_position_embeddings``) for ``yarn`` (Qwen2.5's 32768 x 4);
    Gemma 3 states its scaled context already (vLLM skips it too). The scaling is read from ``rope_scaling``
    (transformers v4) or, when that is absent, from ``rope_parameters`` (transformers v5), either one object or
    one object per layer type (``{"full_attention": {...}, "sliding_attention": {...}}``), whose largest context
    is the model's, as vLLM derives one limit for all layer types (vllm-project/vllm @
    18ec6629253632af0a384f2ffbb8c6b28af322e7 vllm/config/model.py ``_get_and_verify_max_len``). A bad entry is
    a located problem."""
    rs = c.data.get("rope_scaling")
    if rs is not None:
        return _rope_entry_context(c, "rope_scaling", rs, max_positions)
    rp = c.data.get("rope_parameters")
    if rp is None:
        return max_positions
    if not isinstance(rp, Mapping):
        c.bad("rope_parameters", "not an object", rp,
              'null or an object such as {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000000.0}')
        return max_positions
    nested = bool(rp) and all(isinstance(v, Mapping) for v in rp.values())
    entries = [(f"rope_parameters.{k}", v) for k, v in rp.items()] if nested else [("rope_parameters", rp)]
    return max(_rope_entry_context(c, key, entry, max_positions) for key, entry in entries)


def _rope_entry_context(c: _Cfg, where: str, rs: Any, max_positions: int) -> int:
    """The context limit one RoPE scaling object (at config key ``where``) gives; see :func:`_rope_context`."""
    if not isinstance(rs, Mapping):
        c.bad(where, "not an object", rs, 'null or an object such as {"rope_type": "linear", "factor": 2.0}')
        return max_positions
    key = f"{where}.rope_type" if rs.get("rope_type") is not None else f"{where}.type"
    kind = rs.get("rope_type", rs.get("type", "default"))
    known = (*ROPE_UNSCALED_TYPES, *ROPE_SCALED_TYPES)
    if not isinstance(kind, str) or kind not in known:
        c.bad(key, "unknown RoPE scaling type", kind, "one of " + ", ".join(known)
              + (did_you_mean(kind, known) if isinstance(kind, str) else ""))
        return max_positions
    factor = rs.get("factor")
    needs = kind in ROPE_SCALED_TYPES or kind == "llama3"
    if factor is None and not needs:
        return max_positions
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not math.isfinite(factor) or factor <= 0:
        c.bad(f"{where}.factor", "missing" if factor is None else "not a positive number", factor,
              f"a positive number (the context scale of rope_type {kind!r}, such as 4.0)")
        return max_positions
    if kind not in ROPE_SCALED_TYPES or c.model_type.startswith("gemma3"):
        return max_positions
    base = max_positions
    if kind == "yarn" and rs.get("original_max_position_embeddings") is not None:
        base = c._check(f"{where}.original_max_position_embeddings", rs["original_max_position_embeddings"], 1,
                        MAX_POSITIONS)
    limit = int(base * factor)
    if limit > MAX_POSITIONS:
        c.bad(f"{where}.factor", f"too large: the context {base} x {factor:g} = {limit:,} positions", factor,
              f"at most {MAX_POSITIONS // base:,} (a context of at most {MAX_POSITIONS:,}, a limit of nodeperf)")
        return max_positions
    return max(limit, 1)


def _to_config(data: Mapping[str, Any], where: str, name: str | None = None) -> TransformerConfig:
    supported = ", ".join(sorted([*MODEL_TYPES, *NESTED_TEXT_TYPES]))
    mt = data.get("model_type")
    if mt is None:
        raise HFConfigError(f"{where}: missing key 'model_type'; expected one of {supported}")
    if not isinstance(mt, str):
        raise HFConfigError(f"{where}: model_type: not a string; got {_json(mt)}; expected one of {supported}")
    if mt in NESTED_TEXT_TYPES:  # a multimodal config: its language model is text_config
        text = data.get("text_config")
        if not isinstance(text, Mapping):
            raise HFConfigError(f"{where}: text_config: {'missing' if text is None else 'not an object'} for "
                                f"model_type {mt!r}; got {_json(text)}; expected an object with the "
                                f"{NESTED_TEXT_TYPES[mt]} keys (hidden_size, num_hidden_layers, ...)")
        name = name or (str(data["_name_or_path"]) if data.get("_name_or_path") else None)
        data, where, mt = text, f"{where}: text_config", NESTED_TEXT_TYPES[mt]
    reader = MODEL_TYPES.get(mt)
    if reader is None:
        raise HFConfigError(f"{where}: unknown model_type {mt!r}; expected one of {supported}"
                            + did_you_mean(mt, [*MODEL_TYPES, *NESTED_TEXT_TYPES]))
    c = _Cfg(data, where, mt)
    fields = reader(c)
    if fields.get("pos") == "rope" and not c.problems:
        fields["max_positions"] = _rope_context(c, fields["max_positions"])
    if not c.problems:
        _cross_checks(c, fields)
    if c.problems:
        raise HFConfigError(format_problems(where, c.problems, "config"))
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
    if dtype is not None:  # an empty --dtype is an error, not the config's default
        dt = parse_dtype(dtype, where="dtype").value
    else:
        dt = _torch_dtype(data, where) or "bf16"
    if cfg.is_vision:
        seq = cfg.image_size
    elif seq is None:
        seq = min(2048, cfg.max_positions) if cfg.pos == "learned" else 2048
    if extra.get("framework") and "hf_family" not in extra:
        # a software-stack profile follows the model code of the config's family (workloads.frameworks)
        from workloads.frameworks import HF_MODEL_TYPES

        extra = {**extra, "hf_family": HF_MODEL_TYPES.get(str(data.get("model_type", "")), "")}
    return build(cfg, batch=batch, seq=seq, phase=ph, context=context, dtype=dt, **extra)
