"""Transformer models for the zoo: one configurable builder for encoders, decoder LMs (prefill and decode with KV caches), encoder-decoders and MoE variants.

A :class:`TransformerConfig` holds a network's hyperparameters (as published in its paper or model
card, see ``workloads/zoo/data/transformers.toml``); :func:`build` turns it into an
:class:`~workloads.ir.OpGraph` for one phase:

* ``forward``: whole-input inference (no KV cache); decoders produce logits for every position;
* ``prefill``: the prompt pass of a decoder LM; it writes the KV cache (tensors with role
  ``kv_cache``) and, by default, computes the logits of the last position only (``logits="all"``
  computes them all);
* ``decode``: one new token per sequence against a cache of ``context`` tokens; the cache is a graph
  input (role ``kv_cache``), ``kv_append`` extends it in place and attention reads all
  ``context + 1`` keys;
* ``train``: the forward pass of a training step with its loss (``cross_entropy``), no KV cache;
  :func:`workloads.training.training_graph` derives the backward pass and optimizer from it.

Modelling choices (documented, not hardware factors):

* linear weights are stored ``(in, out)``; q, k and v share one fused projection GEMM (as inference
  engines fuse them), as do the SwiGLU gate and up projections; the parameter counts are those of the
  separate framework matrices;
* the head split is a view: fused attention kernels read the ``(B, S, H, D)`` layout directly;
* ``attention="fused"`` (default) is one flash-style ``attention`` op (causal pairs only);
  ``attention="decomposed"`` is QK^T matmul, scale, mask, softmax and PV matmul over the full score
  matrix, grouped-query heads folded into the query rows;
* MoE layers route ``tokens * top_k`` rows; expert buffers hold ``capacity = ceil(capacity_factor *
  tokens * top_k / experts)`` rows each, and ``experts_active`` is the expected number of distinct
  experts hit when each token picks ``top_k`` of ``experts`` uniformly: ``E * (1 - (1 - k/E)^T)``.

Example
-------
>>> from workloads.zoo.transformer import TransformerConfig, prefill
>>> cfg = TransformerConfig("tiny", vocab=1000, d_model=64, layers=2, heads=4, d_ff=256, mlp="swiglu",
...                         norm="rmsnorm", pos="rope", tied_embeddings=False, qkv_bias=False,
...                         out_bias=False, mlp_bias=False)
>>> g = prefill(cfg, batch=1, seq_len=16)
>>> g.params == 2 * 1000 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 64
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from workloads.dtypes import DType, parse_dtype
from workloads.ir import GraphBuilder, OpGraph, Role, TensorSpec

#: Op attribute: the elementwise op runs outside any library GEMM's epilogue (``simulator.engines.walk.OUTSIDE_EPILOGUE``)
OUTSIDE_EPILOGUE = "outside_epilogue"

__all__ = [
    "TransformerConfig",
    "request_context_problem",
    "rope_context_problem",
    "MOE_DISPATCH_MODES",
    "einsum_capacity",
    "build",
    "prefill",
    "decode",
    "forward",
    "train_forward",
    "expected_active_experts",
    "moe_capacity",
    "config_from_mapping",
    "zoo_config",
    "PHASES",
    "tensor_parallel_problems",
]

PHASES = ("forward", "prefill", "decode", "train")
_MLPS = ("gelu", "swiglu", "relu", "geglu")
_NORMS = ("layernorm", "rmsnorm")
_POS = ("learned", "rope", "none", "relative")
_ATTENTION = ("fused", "decomposed")
_LOGITS = ("last", "all")


@dataclass(frozen=True)
class TransformerConfig:
    """Hyperparameters of a transformer (sizes in elements, counts in units).

    Parameters
    ----------
    name
        Model name.
    vocab
        Vocabulary size (token embedding rows); 0 for vision models.
    d_model
        Residual-stream width.
    layers
        Number of (encoder, or decoder-only) layers.
    heads, kv_heads, head_dim
        Query heads, key/value heads (``kv_heads < heads``: GQA, 1: MQA; default ``heads``) and the
        per-head width (default ``d_model // heads``).
    d_ff
        Hidden width of the MLP (of each expert for MoE layers).
    mlp
        ``gelu``, ``relu`` (two matrices) or ``swiglu``/``geglu`` (gated, three matrices).
    norm
        ``layernorm`` (scale and shift) or ``rmsnorm`` (scale only).
    pos
        ``learned`` (absolute table of ``max_positions`` rows), ``rope``, ``relative`` (T5 bucketed
        bias, ``relative_buckets`` x heads per stack) or ``none``.
    max_positions
        Rows of the learned position table (OPT's table has 2 extra rows).
    tied_embeddings
        The LM head reuses the token-embedding matrix.
    qkv_bias, out_bias, mlp_bias
        Biases of the q/k/v projections, of the attention output projection and of the MLP matrices.
    pre_norm
        Pre-LN (GPT-2, Llama) when True; post-LN (BERT) when False.
    final_norm
        A norm after the last layer (pre-LN models).
    embed_norm
        A norm right after the embeddings (BERT).
    encoder_only
        Bidirectional attention, no LM head (BERT, ViT).
    token_types
        Token-type (segment) embedding rows (BERT: 2).
    pooler
        A dense + tanh layer on the first token (BERT).
    num_classes
        Classification head size on the pooled/first token (ViT: 1000); 0 for none.
    image_size, patch_size, channels
        Vision input (ViT): a ``channels x image_size^2`` image cut into ``patch_size^2`` patches
        and a class token.
    decoder_layers
        Decoder layers of an encoder-decoder model (0: not encoder-decoder).
    experts, top_k, moe_every, moe_offset, capacity_factor
        MoE: ``experts`` per MoE layer (0: dense), each token routed to ``top_k``; layer ``i`` is MoE
        when ``i % moe_every == moe_offset``; expert buffer rows scale with ``capacity_factor``.
    expert_bias
        MoE: the experts' two projections have biases (GPT-OSS: ``gate_up_proj_bias``, ``down_proj_bias``).
        The first is added in its grouped GEMM's epilogue; the second, weighted by each row's routing
        probability, by a loop over the local experts where the stack runs one
        (:attr:`workloads.frameworks.FrameworkProfile.moe_bias_per_expert`), else in the epilogue too.
    moe_host_sync
        MoE: the dispatcher copies its token counts to the host and waits for them (Megatron-Core's dropless
        dispatchers); the ``moe_dispatch`` op carries ``host_sync`` (a synchronisation point of the step).
    attention_chunk
        Chunked local attention (Llama 4's iRoPE: three of every four layers attend within chunks of
        this many tokens, the fourth globally; 0: none). Up to one chunk it is full causal attention,
        which is what is built; longer sequences are refused (the chunk mask is not modelled yet).
    q_lora_rank, kv_lora_rank, rope_head_dim, v_head_dim
        Multi-head latent attention (DeepSeek-V2/V3; ``kv_lora_rank`` > 0): queries through a
        ``q_lora_rank`` bottleneck (0: one projection), keys and values up-projected from a normed
        ``kv_lora_rank`` latent, each head's query and key ``head_dim`` wide plus ``rope_head_dim``
        rotary columns (the key's shared by all heads), values ``v_head_dim`` wide.
    first_dense
        MoE: the first ``first_dense`` layers are dense (DeepSeek-V3's ``first_k_dense_replace``).
    shared_d_ff, dense_d_ff
        MoE: the width of the shared expert MLP every token also runs in an MoE layer (0: none;
        DeepSeek-MoE, Llama 4), and the MLP width of the dense layers (0: ``d_ff``; Llama 4
        Maverick's dense layers are twice its experts' width).
    relative_buckets
        Buckets of the T5 relative position bias.
    sliding_window, global_every
        Sliding-window (local) causal attention: a query at position ``p`` of a local layer sees the
        keys ``p - sliding_window < j <= p`` (0: every layer global). Layer ``i`` is global when
        ``global_every`` > 0 and ``(i + 1) % global_every == 0``, local otherwise (Gemma 3: window 1024,
        every 6th layer global, 5 local : 1 global; GPT-OSS: window 128, every 2nd layer global). A
        local layer's decode KV cache holds only its last ``sliding_window`` positions.
    qk_norm
        RMSNorm over each query and key head before the rotary embedding (Gemma 3, OLMo 2, Qwen 3).
    sandwich_norm
        A norm on the attention output and on the MLP output too, before each residual add (Gemma 2/3's
        ``post_attention_layernorm`` and ``post_feedforward_layernorm``).
    """

    name: str
    vocab: int
    d_model: int
    layers: int
    heads: int
    d_ff: int
    kv_heads: int | None = None
    head_dim: int | None = None
    mlp: str = "gelu"
    norm: str = "layernorm"
    pos: str = "learned"
    max_positions: int = 2048
    tied_embeddings: bool = True
    qkv_bias: bool = True
    out_bias: bool = True
    mlp_bias: bool = True
    pre_norm: bool = True
    final_norm: bool = True
    embed_norm: bool = False
    encoder_only: bool = False
    token_types: int = 0
    pooler: bool = False
    num_classes: int = 0
    image_size: int = 0
    patch_size: int = 0
    channels: int = 3
    decoder_layers: int = 0
    experts: int = 0
    top_k: int = 1
    moe_every: int = 1
    moe_offset: int = 0
    capacity_factor: float = 1.0
    moe_dispatch: str = "sparse"
    moe_routing: str = "uniform"
    moe_host_sync: bool = False
    expert_bias: bool = False
    relative_buckets: int = 32
    shared_d_ff: int = 0
    dense_d_ff: int = 0
    attention_chunk: int = 0
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    rope_head_dim: int = 0
    v_head_dim: int = 0
    first_dense: int = 0
    sliding_window: int = 0
    global_every: int = 0
    qk_norm: bool = False
    sandwich_norm: bool = False

    def __post_init__(self) -> None:
        problems = []
        for f in ("d_model", "layers", "heads", "d_ff"):
            if int(getattr(self, f)) < 1:
                problems.append(f"{f}: got {getattr(self, f)!r}; expected a positive integer")
        if self.vocab < 0 or (self.vocab == 0 and not self.is_vision):
            problems.append(f"vocab: got {self.vocab!r}; expected a positive integer (0 only for vision models)")
        for f, allowed in (("mlp", _MLPS), ("norm", _NORMS), ("pos", _POS)):
            if getattr(self, f) not in allowed:
                problems.append(f"{f}: got {getattr(self, f)!r}; expected one of {', '.join(allowed)}")
        kv = self.n_kv_heads
        if kv < 1 or (self.heads >= 1 and self.heads % kv):
            problems.append(f"kv_heads: got {self.kv_heads!r}; expected a divisor of heads={self.heads}")
        if self.head_dim is None and self.heads >= 1 and self.d_model % self.heads:
            problems.append(f"head_dim: d_model={self.d_model} not divisible by heads={self.heads}; expected head_dim set")
        if self.experts:
            if not 1 <= self.top_k <= self.experts:
                problems.append(f"top_k: got {self.top_k}; expected 1..experts={self.experts}")
            if self.moe_every < 1 or not 0 <= self.moe_offset < self.moe_every:
                problems.append(f"moe_every/moe_offset: got {self.moe_every}/{self.moe_offset}; expected 0 <= offset < every")
            if self.capacity_factor <= 0:
                problems.append(f"capacity_factor: got {self.capacity_factor}; expected > 0")
            if self.moe_dispatch not in MOE_DISPATCH_MODES:
                problems.append(f"moe_dispatch: got {self.moe_dispatch!r}; expected one of {', '.join(MOE_DISPATCH_MODES)}")
            if self.moe_routing not in MOE_ROUTINGS:
                problems.append(f"moe_routing: got {self.moe_routing!r}; expected one of {', '.join(MOE_ROUTINGS)}")
        if self.kv_lora_rank and (self.head_dim is None or self.rope_head_dim < 1 or self.v_head_dim < 1
                                  or self.pos != "rope"):
            problems.append("kv_lora_rank: latent attention needs head_dim, rope_head_dim >= 1, v_head_dim >= 1 and "
                            f"pos 'rope'; got head_dim {self.head_dim}, rope_head_dim {self.rope_head_dim}, "
                            f"v_head_dim {self.v_head_dim}, pos {self.pos!r}")
        if self.expert_bias is not False and (self.expert_bias is not True or not self.experts):
            problems.append(f"expert_bias: got {self.expert_bias!r}; expected true or false, true only on an MoE "
                            "model (experts > 0)")
        for f in ("shared_d_ff", "dense_d_ff", "first_dense"):
            v = getattr(self, f)
            if not isinstance(v, int) or v < 0 or (v and not self.experts):
                problems.append(f"{f}: got {v!r}; expected an integer >= 0, set only on an MoE model (experts > 0)")
        if self.is_vision and (self.patch_size < 1 or self.image_size % self.patch_size):
            problems.append(f"patch_size: got {self.patch_size} for image_size {self.image_size}; expected a divisor")
        for f in ("sliding_window", "global_every"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                problems.append(f"{f}: got {v!r}; expected an integer >= 0")
        if self.sliding_window and not self.is_decoder_lm:
            problems.append(f"sliding_window: got {self.sliding_window} on an encoder or encoder-decoder model; "
                            "expected 0 (sliding windows are modelled for decoder-only causal LMs)")
        if self.decoder_layers and self.encoder_only:
            problems.append("decoder_layers: set on an encoder_only model; expected one or the other")
        if problems:
            raise ValueError(f"TransformerConfig {self.name!r}: " + "; ".join(problems))

    # --- derived sizes ------------------------------------------------------------------------
    @property
    def n_kv_heads(self) -> int:
        return self.heads if self.kv_heads is None else int(self.kv_heads)

    @property
    def d_head(self) -> int:
        return self.d_model // self.heads if self.head_dim is None else int(self.head_dim)

    @property
    def is_vision(self) -> bool:
        return self.image_size > 0

    @property
    def is_encoder_decoder(self) -> bool:
        return self.decoder_layers > 0

    @property
    def is_decoder_lm(self) -> bool:
        """A decoder-only language model (supports prefill and decode)."""
        return not self.encoder_only and not self.is_encoder_decoder

    @property
    def gated(self) -> bool:
        return self.mlp in ("swiglu", "geglu")

    def layer_window(self, i: int) -> int:
        """Layer ``i``'s causal attention window in tokens (0: global, full causal attention)."""
        if self.sliding_window <= 0 or (self.global_every and (i + 1) % self.global_every == 0):
            return 0
        return int(self.sliding_window)

    def layer_context(self, i: int, context: int) -> int:
        """Positions layer ``i``'s KV cache holds after ``context`` tokens (a local layer: at most its window)."""
        return window_context(context, self.layer_window(i))

    def is_moe_layer(self, i: int) -> bool:
        return self.experts > 0 and i >= self.first_dense and i % self.moe_every == self.moe_offset

    @property
    def phases(self) -> tuple[str, ...]:
        return PHASES if self.is_decoder_lm else ("forward", "train")

    def kv_cache_bytes(self, batch: int, context: int, dtype: str | DType = "bf16") -> int:
        """KV-cache size: ``2 * layers * kv_heads * head_dim * context * batch * bytes_per_element``
        (latent attention: ``layers * (kv_lora_rank + rope_head_dim) * context * batch * bytes``); a local
        (sliding-window) layer holds ``min(context, sliding_window)`` positions."""
        if self.kv_lora_rank:
            return self.layers * (self.kv_lora_rank + self.rope_head_dim) * context * batch * parse_dtype(dtype).bits // 8
        positions = sum(self.layer_context(i, context) for i in range(self.layers))
        return 2 * self.n_kv_heads * self.d_head * positions * batch * parse_dtype(dtype).bits // 8


def window_context(context: int, window: int) -> int:
    """Earlier positions one attention layer's KV cache holds after ``context`` tokens: all of them on a
    global layer (``window`` 0), at most ``window`` on a local (sliding-window) one.

    >>> window_context(5000, 0), window_context(5000, 1024), window_context(300, 1024)
    (5000, 1024, 300)
    """
    return min(context, window) if window else context


def config_from_mapping(name: str, data: Mapping[str, Any], where: str = "") -> TransformerConfig:
    """A config from a mapping of field values (unknown keys are an error naming the near match)."""
    from nodeperf.suggest import near_match

    known = {f.name for f in fields(TransformerConfig)}
    bad = [k for k in data if k not in known]
    if bad:
        hints = []
        for k in bad:
            near = near_match(k, sorted(known))
            hints.append(f"{k!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise ValueError(f"{where or name}: unknown transformer field(s) {', '.join(hints)}; expected fields of TransformerConfig")
    kw = {k: data[k] for k in data if k != "name"}
    return TransformerConfig(name=name, **kw)


def expected_active_experts(tokens: int, experts: int, top_k: int) -> int:
    """Expected distinct experts hit when ``tokens`` each pick ``top_k`` of ``experts`` uniformly (rounded, >= top_k)."""
    if tokens < 1:
        return 0
    miss = (1.0 - top_k / experts) ** tokens
    return max(min(top_k, experts), min(experts, round(experts * (1.0 - miss))))


#: How MoE tokens reach their experts: ``sparse`` (gather / scatter of routed rows: Megatron-Core's permute,
#: MaxText ``sparse_matmul``; over expert parallelism an all-to-all of every (token, expert) row, as
#: Megatron-Core's ``alltoall`` dispatcher sends them), ``einsum`` (MaxText ``dense_matmul`` with
#: ``capacity_factor > 0``: one-hot dispatch and combine einsums over capacity-padded expert buffers,
#: :meth:`_Build.einsum_dispatch`), ``deepep`` (the sparse dispatch with DeepEP's normal kernels: each token
#: crosses the fabric once per rank that holds one of its experts and, between nodes, once per node, then is
#: forwarded over NVLink: :func:`dispatch_copies`), ``hybridep`` (the sparse dispatch over Megatron-Core's flex
#: dispatcher with DeepEP's HybridEP backend, priced as ``sparse`` except that the permutation into
#: local-expert order happens inside its dispatch kernel: no chunk sort, ``FrameworkProfile.moe_sort_chunks``)
MOE_DISPATCH_MODES = ("sparse", "einsum", "deepep", "hybridep")
#: How a router spreads each token's ``top_k`` experts (what :func:`dispatch_copies` counts): ``uniform``
#: (a learned gate, or Megatron-Core's ``moe_router_force_load_balancing`` random logits: ``top_k`` distinct
#: experts as if drawn at random), ``round-robin`` (NeMo AutoModel's ``FakeBalancedGate`` with no noise,
#: nemo_automodel/components/moe/layers.py @ cb97654: token ``i`` takes experts ``(i * top_k + j) mod E``,
#: ``j < top_k``, so a token's experts are neighbours and sit on the fewest ranks)
MOE_ROUTINGS = ("uniform", "round-robin")
#: attributes of an expert-parallel all-to-all that DeepEP deduplicates (:func:`dispatch_copies`)
DEDUP_ATTRS = ("dedup_tokens", "dedup_experts", "dedup_top_k", "dedup_routing", "dedup_row_bytes")


def dispatch_copies(experts: int, top_k: int, domains: int, routing: str = "uniform") -> float:
    """Expected distinct domains (ranks, or nodes) holding a token's ``top_k`` experts when ``experts`` are
    split evenly over ``domains`` in order: how many times DeepEP sends the token. DeepEP's dispatch sends
    each token once to every rank in its ``is_token_in_rank`` layout and, between nodes, once per node over
    RDMA, forwarded over NVLink to the ranks there (``Buffer.get_dispatch_layout``: ``num_tokens_per_rank``,
    ``num_tokens_per_rdma_rank``; deepseek-ai/DeepEP docs/legacy.md "Normal kernels with NVLink and RDMA
    forwarding"; DeepSeek-V3 technical report, arXiv:2412.19437, section 3.2.2: tokens go over IB once to
    each target node, then over NVLink to the GPUs of their experts). ``uniform``: ``D (1 - C(E - E/D, k) /
    C(E, k))``; ``round-robin``: the mean over the gate's start experts (:data:`MOE_ROUTINGS`)."""
    d = max(1, int(domains))
    if d == 1 or experts % d:
        return 1.0 if d == 1 else float(min(top_k, d))
    per = experts // d
    if routing == "round-robin":
        starts = range(0, experts * top_k // math.gcd(experts, top_k), top_k)
        counts = [len({((s + j) % experts) // per for j in range(top_k)}) for s in starts]
        return sum(counts) / len(counts)
    return d * (1.0 - math.comb(experts - per, top_k) / math.comb(experts, top_k))


def einsum_capacity(seq: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Expert slots per sequence of MaxText's einsum dispatch: ``int(max(ceil(seq * top_k / experts) *
    capacity_factor, capacity_factor))`` (``generate_masks``, MaxText/layers/linears.py @ 449b4fe)."""
    return max(1, int(max(math.ceil(seq * top_k / experts) * capacity_factor, capacity_factor)))


def moe_capacity(tokens: int, experts: int, top_k: int, capacity_factor: float) -> int:
    """Rows per expert buffer: ``ceil(capacity_factor * tokens * top_k / experts)`` (at least 1)."""
    return max(1, math.ceil(capacity_factor * tokens * top_k / experts))


# ------------------------------------------------------------------------------------------------
# the builder


class _Build:
    """State of one graph build (not exported)."""

    def __init__(self, cfg: TransformerConfig, name: str, *, batch: int, seq: int, phase: str, context: int,
                 dtype: str | DType, attention: str, logits: str, decoder_seq: int, tp: int = 1,
                 sequence_parallel: bool = False, stage_layers: tuple[int, int] | None = None,
                 pipeline_stride: int = 1, ep: int = 1, cp: int = 1, framework: str = "",
                 hf_family: str = "", etp: int | None = None, dropout: float = 0.0) -> None:
        if phase not in cfg.phases:
            raise ValueError(f"model {name!r}: phase {phase!r} not supported; expected one of {', '.join(cfg.phases)}")
        if attention not in _ATTENTION:
            raise ValueError(f"model {name!r}: attention {attention!r}; expected one of {', '.join(_ATTENTION)}")
        if logits not in _LOGITS:
            raise ValueError(f"model {name!r}: logits {logits!r}; expected one of {', '.join(_LOGITS)}")
        for k, v in (("batch", batch), ("seq", seq), ("decoder_seq", decoder_seq)):
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"model {name!r}: {k} must be a positive integer; got {v!r}")
        if phase == "decode" and (not isinstance(context, int) or context < 0):
            raise ValueError(f"model {name!r}: context must be an integer >= 0; got {context!r}")
        self.cfg = cfg
        self.b = GraphBuilder(name, dtype=dtype)
        self.batch = batch
        self.phase = phase
        self.context = context
        self.attention, self.logits = attention, logits
        self.seq, self.decoder_seq = seq, decoder_seq
        self.tp, self.ep = tp, ep
        #: expert tensor parallelism (Megatron-Core expert_tensor_parallel_size; None: tp)
        self.etp = tp if etp is None else etp
        self.cp = cp
        self.sp = sequence_parallel and tp > 1
        #: the layers [first, last) this pipeline stage holds; the embedding lives on the stage holding
        #: layer 0, the final norm and LM head (and loss) on the stage holding the last layer
        self.stage_layers = stage_layers or (0, cfg.layers)
        #: rank distance between neighbouring pipeline stages (the ranks of the other parallel
        #: dimensions lie between them: tp x dp in Megatron-LM's default order)
        self.pipeline_stride = pipeline_stride
        #: query / key-value heads, MLP width and vocabulary rows held by one tensor-parallel rank
        self.heads_local = cfg.heads // tp
        self.kv_heads_local = max(1, cfg.n_kv_heads // tp)  # fewer KV heads than ranks: replicated (as vLLM)
        self.d_ff_local = cfg.d_ff // tp
        self.vocab_local = -(-cfg.vocab // tp)  # padded up to a multiple of tp, as Megatron pads the table
        #: a software-stack profile (workloads.frameworks): eager per-op kernels and training dropout
        from workloads.frameworks import HF_MODEL_CODE, HFModelCode, get_profile

        self.profile = prof = get_profile(framework) if framework else None
        self.eager_ops = bool(prof and prof.eager_ops)
        self.eager_norm, self.eager_final_norm = self.eager_ops or bool(prof and prof.eager_norm), bool(prof and prof.eager_final_norm)
        self.complex_rope = bool(prof and prof.complex_rope)  # torchtitan's apply_rotary_emb, eagerly
        self.repeat_kv = bool(prof and prof.repeat_kv)  # torchtitan's repeat_kv: SDPA over copied K/V heads
        #: the stack turns its rope fusion off for this family: Megatron-Core's op-by-op RoPE (GPT-OSS's YaRN)
        self.unfused_rope = bool(prof and hf_family and hf_family in prof.unfused_rope_families)
        self.fused_rope = bool(prof and prof.fused_rope) and not self.unfused_rope  # TE's fused RoPE: a library kernel
        self.split_copies = bool(prof and prof.split_qkv_copies)  # Megatron-Core's copies of the QKV split's views
        self.clamped_glu = bool(prof and hf_family and hf_family in prof.clamped_glu_families)  # GPT-OSS: clamp_halves
        #: the model code's torch.matmul runs the attention products (eager, or traced by AOTAutograd for Inductor)
        self.eager_matmul = self.eager_ops and bool(prof and prof.matmul_copies)
        #: the m tile of the stack's grouped matmul (MaxText Megablox ``tile_batch_seq``; 0: not modelled)
        self.gmm_tile_rows = int(prof.grouped_gemm_tile_rows) if prof else 0
        self.gmm_tile_cols = int(prof.grouped_gemm_tile_cols) if prof else 0  # its n tile (megacore split)
        self.gmm_streams = int(prof.grouped_gemm_streams) if prof and prof.grouped_gemm == "per_expert" else 0
        self.sort_chunks = bool(prof and prof.moe_sort_chunks)  # the dispatcher's sort by local expert
        self.sort_copies = bool(prof and prof.moe_sort_copies)  # MaxText's repeat and unsort written to HBM
        self.bias_loop = bool(prof and prof.moe_bias_per_expert)  # fc2's expert biases added expert by expert
        #: the dispatcher's framework ops beside the priced ones, (before, after) its host sync, by dispatch mode
        self.dispatch_host = {m: (b_, a_) for m, b_, a_ in prof.moe_dispatch_host_ops} if prof else {}
        self.dispatch_collectives = frozenset(prof.moe_dispatch_collectives if prof else ())  # its own collectives
        #: context parallelism as PyTorch runs it (torch.distributed.tensor.experimental.context_parallel,
        #: used by the FSDP2 stacks) rather than Transformer Engine's ring
        self.torch_ring = bool(prof and prof.stack == "fsdp2")
        self.hf = HF_MODEL_CODE.get(hf_family) or HFModelCode(
            {"gelu": "gelu", "relu": "relu", "swiglu": "silu", "geglu": "gelu"}[cfg.mlp])
        if not isinstance(dropout, (int, float)) or isinstance(dropout, bool) or not 0.0 <= dropout < 1.0:
            raise ValueError(f"model {name!r}: dropout; got {dropout!r}; expected a probability in [0, 1)")
        #: a stack that runs the model's dropout layers as kernels in every phase at this probability
        #: (0: only an eager profile's training dropout, at the Hugging Face code's probabilities)
        self.dropout_p = float(dropout) or (float(prof.dropout_p) if prof and prof.dropout and phase == "train" else 0.0)
        #: Megatron-LM's unfused attention core: the scale in the score GEMM, scale and mask in the softmax kernel
        self.fused_softmax = bool(prof and prof.fused_scale_mask_softmax)
        if self.fused_softmax and self.attention == "fused":
            self.attention = "decomposed"
        self.dropout_on = bool(prof and prof.dropout and phase == "train") or self.dropout_p > 0

    # --- small helpers ------------------------------------------------------------------------
    def w(self, name: str, shape: tuple[int, ...]) -> TensorSpec:
        g = self.b.current_group
        return self.b.weight(f"{g}.{name}" if g else name, shape)

    def linear(self, x: TensorSpec, d_in: int, d_out: int, name: str, bias: bool, parallel: str = "") -> TensorSpec:
        """``x @ W (+ b)``; ``parallel`` marks a tensor-parallel shard: ``"column"`` (W split by output
        columns: ``d_out`` is this rank's share) or ``"row"`` (split by input rows; the partial sums are
        reduced by the caller, and the bias is added once, after the reduction, so it is not here)."""
        if bias and parallel == "row":
            raise ValueError(f"{name}: a row-parallel linear's bias is added after the reduction; expected bias=False")
        w = self.w(f"{name}.weight", (d_in, d_out))
        ins = [x, w]
        if bias:
            ins.append(self.w(f"{name}.bias", (d_out,)))
        attrs = {"tensor_parallel": parallel} if parallel and self.tp > 1 else {}
        return self.b.op("matmul", ins, name=name, **attrs)

    # --- tensor parallelism (Megatron-LM: Shoeybi et al. 2019, Korthikanti et al. 2022) -----------
    def tp_enter(self, h: TensorSpec, name: str = "") -> TensorSpec:
        """Input of a column-parallel block. With sequence parallelism the ranks hold ``s / tp`` tokens
        each and all-gather them (backward: a reduce-scatter); otherwise Megatron's "f" operator, an
        identity forward (a view here) whose backward all-reduces the input gradient."""
        if self.tp == 1:
            return h
        if self.sp:
            # Megatron keeps only the local shard for the backward pass and gathers it again there
            # (Korthikanti et al. 2022, Sec. 4.2.2): recompute_in_backward
            return self.b.op("all_gather", [h], name=f"sp_gather{name}", group_size=self.tp, axis=1,
                             recompute_in_backward=True)
        return self.b.op("reshape", [h], name=f"tp_copy{name}", shape=h.shape, grad_all_reduce=self.tp)

    def tp_exit(self, y: TensorSpec, name: str) -> TensorSpec:
        """Output of a row-parallel linear: partial sums reduced over the ranks, by an all-reduce
        (Megatron's "g" operator), or a reduce-scatter over the sequence with sequence parallelism."""
        if self.tp == 1:
            return y
        if self.sp:
            return self.b.op("reduce_scatter", [y], name=f"{name}_reduce_scatter", group_size=self.tp, axis=1)
        return self.b.op("all_reduce", [y], name=f"{name}_all_reduce", group_size=self.tp)

    def norm(self, x: TensorSpec, name: str) -> TensorSpec:
        d = x.shape[-1]
        if self.eager_norm and self.cfg.norm == "rmsnorm":
            return self.eager_rmsnorm(x, name)
        # eager_norm: the model code's RMSNorm op by op everywhere; eager_final_norm: the final norm only, outside a
        # compiler that takes the blocks (torchtitan's --compile of 2024)
        if self.eager_final_norm and name == "final_norm" and self.cfg.norm == "rmsnorm":
            return self.eager_rmsnorm(x, name, outside_compile=True)
        ins = [x, self.w(f"{name}.weight", (d,))]
        if self.cfg.norm == "layernorm":
            ins.append(self.w(f"{name}.bias", (d,)))
        return self.b.op(self.cfg.norm, ins, name=name)

    def ew(self, fn: str, *ins: TensorSpec, name: str | None = None) -> TensorSpec:
        return self.b.op("elementwise", list(ins), name=name or fn, op=fn, **self.outside_epilogue(fn, ins))

    def outside_epilogue(self, fn: str, ins: tuple[TensorSpec, ...] | list[TensorSpec]) -> dict[str, bool]:
        """The attribute that keeps an elementwise op out of a library GEMM's epilogue
        (:data:`simulator.engines.walk.OUTSIDE_EPILOGUE`) under a profile whose GEMMs take only a linear's bias
        (``FrameworkProfile.epilogue_bias_only``); ``{}`` for a bias add (an ``add`` of one value per column of
        its other input) and under other profiles."""
        if not (self.profile and self.profile.epilogue_bias_only):
            return {}
        bias = fn == "add" and len(ins) == 2 and len(ins[1].shape) == 1 and ins[1].shape == ins[0].shape[-1:]
        return {} if bias else {OUTSIDE_EPILOGUE: True}

    # --- eager framework kernels (Hugging Face model code, one kernel per PyTorch op) ------------
    def eager_rmsnorm(self, x: TensorSpec, name: str, *, outside_compile: bool = False) -> TensorSpec:
        """LlamaRMSNorm as eager PyTorch runs it: upcast, pow, mean, + eps, rsqrt, multiply, downcast, * weight;
        ``outside_compile``: under a compiler that leaves the norm out, each op its own ATen kernel."""
        b = self.b
        low = x.dtype.value != "fp32"
        kw = {"aten_fallback": True} if outside_compile else {}
        with b.group(name):
            h = b.op("elementwise", [x], name="to_fp32", op="cast", out_dtype="fp32", **kw) if low else x
            sq = b.op("elementwise", [h], name="pow", op="pow", **kw)
            var = b.op("reduction", [sq], name="mean", op="mean", axes=(-1,), keepdims=True, **kw)
            var = b.op("elementwise", [var], name="add_eps", op="add", **kw)
            r = b.op("elementwise", [var], name="rsqrt", op="rsqrt", **kw)
            h = b.op("elementwise", [h, r], name="normalize", op="mul", **kw)
            if low:
                h = b.op("elementwise", [h], name="to_dtype", op="cast", out_dtype=x.dtype.value, **kw)
            return b.op("elementwise", [self.w("weight", (x.shape[-1],)), h], name="scale_weight", op="mul", **kw)

    def eager_rope(self, x: TensorSpec, cos: TensorSpec, sin: TensorSpec, name: str) -> TensorSpec:
        """apply_rotary_pos_emb for one tensor: x * cos + cat(-x2, x1) * sin (5 kernels; the halves are views)."""
        b = self.b
        bsz, h, s, d = x.shape
        with b.group(name):
            x1, x2 = b.op("split", [x], name="halves", axis=-1, sizes=(d // 2, d - d // 2))
            rot = b.op("concat", [self.ew("neg", x2, name="neg"), x1], name="rotate_half", axis=-1)
            return self.ew("add", self.ew("mul", x, cos, name="mul_cos"), self.ew("mul", rot, sin, name="mul_sin"),
                           name="add")

    def rope(self, x: TensorSpec, name: str) -> TensorSpec:
        """RoPE of one tensor as one op; a library kernel nothing fuses with under the stack's ``fused_rope``
        (Transformer Engine's fused RoPE, :attr:`workloads.frameworks.FrameworkProfile.fused_rope`)."""
        return self.b.op("elementwise", [x], name=name, op="rope", **({"aten_fallback": True} if self.fused_rope else {}))

    def split_view_copies(self, q: TensorSpec, k: TensorSpec) -> tuple[TensorSpec, TensorSpec]:
        """The copies of Megatron-Core's query and key views of the fused QKV output
        (:attr:`workloads.frameworks.FrameworkProfile.split_qkv_copies`): the query's reshape to heads copies
        it with more than one query group on the rank and more than one query head a group; a QK-norm
        (Transformer Engine's RMSNorm) makes a still strided query, and the key, contiguous first. Library
        copies nothing fuses with; their gradient is the gradient itself."""
        hq, hk = q.shape[1], k.shape[1]
        if (hk > 1 and hq > hk) or self.cfg.qk_norm:
            q = self.b.op("elementwise", [q], name="q_contiguous", op="copy", aten_fallback=True)
        if self.cfg.qk_norm:
            k = self.b.op("elementwise", [k], name="k_contiguous", op="copy", aten_fallback=True)
        return q, k

    def mcore_unfused_rope(self, x: TensorSpec, freqs: TensorSpec, name: str) -> TensorSpec:
        """Megatron-Core's ``_apply_rotary_pos_emb_bshd`` for one tensor (rope fusion off): ``cos`` and ``sin``
        of the fp32 angles, each ``* mscale`` and cast to the activations' type, then ``t * cos``,
        ``cat(-x2, x1)``, ``* sin``, the sum and ``cat`` with the empty pass-through part (a copy): eager PyTorch
        kernels, nothing fused."""
        b, fb = self.b, {"aten_fallback": True}
        d = x.shape[-1]
        with b.group(name):
            trig = []
            for fn in ("cos", "sin"):
                t = b.op("elementwise", [freqs], name=fn, op=fn, **fb)
                t = b.op("elementwise", [t], name=f"{fn}_mscale", op="scale", **fb)
                trig.append(b.op("elementwise", [t], name=f"{fn}_to_dtype", op="cast", out_dtype=x.dtype.value, **fb))
            x1, x2 = b.op("split", [x], name="halves", axis=-1, sizes=(d // 2, d - d // 2))
            rot = b.op("concat", [b.op("elementwise", [x2], name="neg", op="neg", **fb), x1], name="rotate_half",
                       axis=-1)
            h = b.op("elementwise", [b.op("elementwise", [x, trig[0]], name="mul_cos", op="mul", **fb),
                                     b.op("elementwise", [rot, trig[1]], name="mul_sin", op="mul", **fb)],
                     name="add", op="add", **fb)
            return b.op("elementwise", [h], name="cat_pass", op="copy", **fb)

    def complex_rope_kernels(self, x: TensorSpec, freqs: TensorSpec, name: str) -> TensorSpec:
        """torchtitan's ``apply_rotary_emb`` for one tensor, eagerly: ``x.float()``, the complex product with
        ``freqs_cis`` (an fp32 pass over the pairs) and ``type_as(x)``; the complex views launch nothing. Under
        torch.compile the product stays an ATen kernel (complex tensors are not code-generated), so the casts
        before and after it are kernels of their own too."""
        b = self.b
        with b.group(name):
            h = b.op("elementwise", [x], name="to_fp32", op="cast", out_dtype="fp32")
            # complex64 operands: Inductor leaves the product to ATen (simulator.engines.walk.ATEN_FALLBACK)
            h = b.op("elementwise", [h, freqs], name="mul_freqs_cis", op="mul", aten_fallback=True)
            return b.op("elementwise", [h], name="to_dtype", op="cast", out_dtype=x.dtype.value)

    def activation(self, x: TensorSpec) -> TensorSpec:
        """The MLP activation: one op, or with eager kernels the ops the model code launches for it."""
        from workloads.frameworks import ACTIVATION_KERNELS

        if not self.eager_ops:
            return self.ew(self.cfg.mlp if not self.cfg.gated else
                           ("silu" if self.cfg.mlp == "swiglu" else "gelu"), x, name="act")
        kernels = ACTIVATION_KERNELS[self.hf.activation]
        if len(kernels) == 1:
            return self.ew(kernels[0][0], x, name="act")
        outs: list[TensorSpec] = []
        with self.b.group("act"):
            for i, (fn, refs) in enumerate(kernels):
                ins = [x if r == "x" else outs[int(r[1:])] for r in refs]
                outs.append(self.ew(fn, *ins, name=f"{i}_{fn}"))
        return outs[-1]

    def dropout(self, x: TensorSpec, p: float, name: str) -> TensorSpec:
        """A dropout kernel in a training graph of an eager profile when the config's p > 0, or in any phase
        at the build's ``dropout`` probability; else ``x``."""
        p = self.dropout_p or p
        if not self.dropout_on or p <= 0:
            return x
        # in training it writes its keep-mask for the backward (workloads.semantics.DROPOUT_MASK_BYTES)
        return self.b.op("elementwise", [x], name=name, op="dropout", training=self.phase == "train",
                         **self.outside_epilogue("dropout", [x]))

    def reshape(self, x: TensorSpec, shape: tuple[int, ...], name: str) -> TensorSpec:
        return self.b.op("reshape", [x], name=name, shape=shape)

    # --- attention ----------------------------------------------------------------------------
    def attention_block(self, h: TensorSpec, *, causal: bool, cache: bool, bias: TensorSpec | None,
                        memory: TensorSpec | None = None, name: str = "attn", window: int = 0) -> TensorSpec:
        """Self-attention (``memory`` None) or cross-attention over ``memory``; returns the projected output.
        ``window`` > 0: causal sliding-window attention over the last ``window`` keys (the decode cache
        holds ``min(context, window)`` positions)."""
        cfg, b = self.cfg, self.b
        if cfg.kv_lora_rank and memory is None:
            return self.latent_attention_block(h, causal=causal, cache=cache, name=name)
        hq, hk, hd = self.heads_local, self.kv_heads_local, cfg.d_head
        with b.group(name):
            h = self.tp_enter(h)
            bsz, s, d = h.shape
            if memory is None and self.eager_ops and self.hf.separate_projections:
                # the model code's separate nn.Linear query / key / value projections (three GEMMs)
                q = self.linear(h, d, hq * hd, "q", cfg.qkv_bias, parallel="column")
                k = self.linear(h, d, hk * hd, "k", cfg.qkv_bias, parallel="column")
                v = self.linear(h, d, hk * hd, "v", cfg.qkv_bias, parallel="column")
                skv = s
            elif memory is None:
                qkv = self.linear(h, d, (hq + 2 * hk) * hd, "qkv", cfg.qkv_bias, parallel="column")
                q, k, v = b.op("split", [qkv], name="split_qkv", axis=-1, sizes=(hq * hd, hk * hd, hk * hd))
                skv = s
            else:
                memory = self.tp_enter(memory, "_memory")
                q = self.linear(h, d, hq * hd, "q", cfg.qkv_bias, parallel="column")
                kv = self.linear(memory, d, 2 * hk * hd, "kv", cfg.qkv_bias, parallel="column")
                k, v = b.op("split", [kv], name="split_kv", axis=-1, sizes=(hk * hd, hk * hd))
                skv = memory.shape[1]
            q = self.reshape(q, (bsz, hq, s, hd), "q_heads")
            k = self.reshape(k, (bsz, hk, skv, hd), "k_heads")
            v = self.reshape(v, (bsz, hk, skv, hd), "v_heads")
            split_views = memory is None and self.split_copies and not self.eager_ops
            if split_views:
                q, k = self.split_view_copies(q, k)
            if cfg.qk_norm:  # per-head RMSNorm of queries and keys (weights head_dim wide)
                q, k = self.head_norm(q, "q_norm"), self.head_norm(k, "k_norm")
            if cfg.pos == "rope" and memory is None and self.unfused_rope and not self.eager_ops:
                freqs = b.input("rope_freqs", (1, 1, s, hd), dtype="fp32")
                q, k = self.mcore_unfused_rope(q, freqs, "rope_q"), self.mcore_unfused_rope(k, freqs, "rope_k")
            elif cfg.pos == "rope" and memory is None and self.eager_ops:
                # cos/sin come from the model's rotary embedding, computed once per forward
                cos = b.input("rope_cos", (bsz, 1, s, hd))
                sin = b.input("rope_sin", (bsz, 1, s, hd))
                q = self.eager_rope(q, cos, sin, "rope_q")
                k = self.eager_rope(k, cos, sin, "rope_k")
            elif cfg.pos == "rope" and memory is None and self.complex_rope:
                freqs = b.input("freqs_cis", (1, 1, s, hd), dtype="fp32")  # complex64 (s, hd / 2) as pairs
                q = self.complex_rope_kernels(q, freqs, "rope_q")
                k = self.complex_rope_kernels(k, freqs, "rope_k")
            elif cfg.pos == "rope" and memory is None:
                q, k = self.rope(q, "rope_q"), self.rope(k, "rope_k")
            if cache and memory is None:
                if self.phase == "prefill":
                    k = b.op("kv_append", [k], name="k_cache", out_roles=[Role.KV_CACHE])
                    v = b.op("kv_append", [v], name="v_cache", out_roles=[Role.KV_CACHE])
                else:  # decode: the stored cache is an input; the append happens in place
                    g = b.current_group
                    held = min(self.context, window) if window else self.context  # a local layer's ring of W slots
                    kc = b.tensor(f"{g}.k_cache", (bsz, hk, held, hd), role=Role.KV_CACHE)
                    vc = b.tensor(f"{g}.v_cache", (bsz, hk, held, hd), role=Role.KV_CACHE)
                    k = b.op("kv_append", [kc, k], name="k_append")
                    v = b.op("kv_append", [vc, v], name="v_append")
            if split_views and (cfg.pos == "rope" or cfg.qk_norm):
                # Transformer Engine's get_qkv_layout: the value view's strides differ from the key's
                v = b.op("elementwise", [v], name="v_contiguous", op="copy", aten_fallback=True)
            if self.cp > 1 and memory is None:
                o = self.context_parallel_core(q, k, v, causal=causal)
            elif self.attention == "fused":
                if self.repeat_kv and k.shape[1] < q.shape[1]:  # the model code's repeat_kv before SDPA
                    k, v = self.repeat_heads(k, q.shape[1], "repeat_k"), self.repeat_heads(v, q.shape[1], "repeat_v")
                ins = [q, k, v] + ([bias] if bias is not None else [])
                o = b.op("attention", ins, name="core", causal=causal, **({"window": window} if window else {}))
            else:
                o = self.decomposed_core(q, k, v, causal=causal, bias=bias, views=not cache and memory is None)
            if self.eager_ops:  # attn_output.transpose(1, 2).contiguous(): a copy kernel
                o = b.op("transpose", [o], name="heads_contiguous", perm=(0, 2, 1, 3))
            o = self.reshape(o, (bsz, s, hq * hd), "merge_heads")
            o = self.row_parallel_out(o, hq * hd, d, "out", cfg.out_bias)
            return self.dropout(o, self.hf.resid_dropout, "resid_dropout")

    def repeat_heads(self, x: TensorSpec, hq: int, name: str) -> TensorSpec:
        """torchtitan's ``repeat_kv`` of a ``(B, hk, S, D)`` tensor to ``hq`` heads: ``x[:, :, :, None, :]
        .expand(...).reshape(...)`` (torchtitan/models/llama3/model.py @ 820504e), a broadcast the reshape
        materialises: one copy reading the ``hk`` heads once and writing ``hq``, whose backward is one sum over
        the copies (the ``expand`` rule of :mod:`workloads.training`). Each key/value head's copies are adjacent."""
        bsz, hk, s, d = x.shape
        rows = self.b.op("expand", [self.reshape(x, (bsz, hk, 1, s, d), f"{name}_rows")], name=name,
                         shape=(bsz, hk, hq // hk, s, d))
        return self.reshape(rows, (bsz, hq, s, d), f"{name}_heads")

    def head_norm(self, x: TensorSpec, name: str) -> TensorSpec:
        """RMSNorm over the last (head) axis of a ``(B, H, S, D)`` tensor, one ``D``-wide scale (QK-norm)."""
        return self.b.op("rmsnorm", [x, self.w(f"{name}.weight", (x.shape[-1],))], name=name)

    def latent_attention_block(self, h: TensorSpec, *, causal: bool, cache: bool, name: str = "attn") -> TensorSpec:
        """Multi-head latent attention (DeepSeek-V3, Sec. 2.1.1 of its report; HF ``DeepseekV3Attention``):
        ``q = W_qb norm(W_qa h)``; ``[c_kv, k_rope] = W_kva h``; ``[k_nope, v] = W_kvb norm(c_kv)``; each
        head's key is ``[k_nope, rope(k_rope)]`` (the rotary part shared by the heads). The down
        projections are replicated over the tensor-parallel ranks, the up projections split by heads
        (Megatron-Core's ``MLASelfAttention``)."""
        cfg, b = self.cfg, self.b
        if self.phase == "decode" or self.cp > 1 or self.attention != "fused" or self.eager_ops:
            raise ValueError(f"model {cfg.name!r}: multi-head latent attention is modelled for prefill, forward and "
                             f"training steps with fused attention, no context parallelism and the default stack; got "
                             f"phase {self.phase!r}, cp {self.cp}, attention {self.attention!r}"
                             f"{', a framework profile' if self.eager_ops else ''} (decode over the latent cache, with "
                             "its absorbed projections, is not modelled yet)")
        hq, dn, dr, dv = self.heads_local, cfg.d_head, cfg.rope_head_dim, cfg.v_head_dim
        with b.group(name):
            h = self.tp_enter(h)
            bsz, s, d = h.shape
            if cfg.q_lora_rank:
                cq = self.norm(self.linear(h, d, cfg.q_lora_rank, "q_down", False), "q_norm")
                q = self.linear(cq, cfg.q_lora_rank, hq * (dn + dr), "q_up", False, parallel="column")
            else:
                q = self.linear(h, d, hq * (dn + dr), "q", False, parallel="column")
            ckv = self.linear(h, d, cfg.kv_lora_rank + dr, "kv_down", False)
            c, kr = b.op("split", [ckv], name="split_latent", axis=-1, sizes=(cfg.kv_lora_rank, dr))
            c = self.norm(c, "kv_norm")
            if cache:  # prefill: the normed latent and the rotary key columns are what is cached
                c = self.reshape(b.op("kv_append", [self.reshape(c, (bsz, 1, s, cfg.kv_lora_rank), "latent_head")],
                                      name="latent_cache", out_roles=[Role.KV_CACHE]), (bsz, s, cfg.kv_lora_rank),
                                 "latent_tokens")
                kr = self.reshape(b.op("kv_append", [self.reshape(kr, (bsz, 1, s, dr), "rope_head")],
                                       name="rope_cache", out_roles=[Role.KV_CACHE]), (bsz, s, dr), "rope_tokens")
            kv = self.linear(c, cfg.kv_lora_rank, hq * (dn + dv), "kv_up", False, parallel="column")
            q = self.ew("rope", self.reshape(q, (bsz, hq, s, dn + dr), "q_heads"), name="rope_q")
            kn, v = b.op("split", [self.reshape(kv, (bsz, hq, s, dn + dv), "kv_heads")], name="split_k_v", axis=-1,
                         sizes=(dn, dv))
            kr = self.ew("rope", self.reshape(kr, (bsz, 1, s, dr), "k_rope_head"), name="rope_k")
            kr = b.op("expand", [kr], name="k_rope_heads", shape=(bsz, hq, s, dr))
            k = b.op("concat", [kn, kr], name="k", axis=-1)
            o = b.op("attention", [q, k, v], name="core", causal=causal)
            o = self.reshape(o, (bsz, s, hq * dv), "merge_heads")
            o = self.row_parallel_out(o, hq * dv, d, "out", cfg.out_bias)
            return self.dropout(o, self.hf.resid_dropout, "resid_dropout")

    def context_parallel_core(self, q: TensorSpec, k: TensorSpec, v: TensorSpec, *, causal: bool) -> TensorSpec:
        """Attention of this rank's queries over the whole sequence's keys and values (context
        parallelism, as Megatron-Core runs it with Transformer Engine's attention).

        The ``cp`` ranks each hold ``s / cp`` tokens; their keys and values are exchanged (an
        ``all_gather`` along the sequence here, the same bytes as the ring of ``cp - 1`` point-to-point
        steps; its backward is a reduce-scatter of the gradients). With a causal mask the sequence is
        cut into ``2 cp`` chunks and rank ``r`` holds chunks ``r`` and ``2 cp - 1 - r``, so every rank
        has the same work: chunk ``j`` attends to the first ``(j + 1)`` chunks of keys. The graph is
        rank 0's: chunk 0 against one chunk of keys, chunk ``2 cp - 1`` against all of them.
        """
        if self.torch_ring:
            return self.torch_ring_core(q, k, v, causal=causal)
        b, cp = self.b, self.cp
        bsz, hq, sl, hd = q.shape
        hk = k.shape[1]
        k = b.op("all_gather", [k], name="cp_gather_k", group_size=cp, stride=self.tp, axis=2)
        v = b.op("all_gather", [v], name="cp_gather_v", group_size=cp, stride=self.tp, axis=2)
        if not causal:
            return b.op("attention", [q, k, v], name="core", causal=False)
        c = sl // 2
        q_first, q_last = b.op("split", [q], name="cp_split_q", axis=2, sizes=(c, c))
        k0 = b.op("slice", [k], name="cp_first_k", shape=(bsz, hk, c, hd))
        v0 = b.op("slice", [v], name="cp_first_v", shape=(bsz, hk, c, hd))
        o_first = b.op("attention", [q_first, k0, v0], name="core", causal=True)
        o_last = b.op("attention", [q_last, k, v], name="core_last_chunk", causal=True)
        return b.op("concat", [o_first, o_last], name="cp_merge", axis=2)

    def torch_ring_core(self, q: TensorSpec, k: TensorSpec, v: TensorSpec, *, causal: bool) -> TensorSpec:
        """Ring attention as PyTorch's ``context_parallel`` runs it (torch/distributed/tensor/experimental/
        _attention.py, ``_templated_ring_attention`` and ``_SDPAMerger``; torchtitan's default
        ``rotate_method`` 'allgather'), for the rank whose work is the largest share of full queries.

        * The model code repeats the key/value heads to the query heads before SDPA (torchtitan
          models/llama/model.py ``repeat_kv``), so the ring exchanges ``hq`` heads of keys and values.
        * The all-gather rotater gathers every rank's keys and values once per call (one
          ``all_gather`` each here, marked ``ring_steps``). The backward
          (``_templated_ring_attention_backward``) gathers them again (its ``kv_rotater`` is the same
          all-gather) and passes the fp32 dK/dV accumulator around the ring, one ``permute_tensor``
          (an ``all_to_all_single``) per step whatever the rotate method: the ``ring_steps`` rule of
          :mod:`workloads.training` emits those, not a reduce-scatter.
        * Load-balanced causal sharding (2 cp chunks, rank r holding chunks r and 2cp - 1 - r): step 0
          is the causal attention of the local queries over the local keys; each of the ``cp - 1``
          other steps a non-causal SDPA call of the local queries over the first half of one rank's
          keys (``i <= rank``), so every step has the FLOPs of half a square of ``s / cp`` tokens.
        * Each step's output is merged in fp32 (``convert_to_f32``): the block output cast to fp32,
          ``out - sigmoid(lse_b - lse) * (out - out_b)`` (a subtraction, a scaling by the broadcast
          weight, a subtraction over the output), and the merged output cast back at the end.
        """
        b, cp = self.b, self.cp
        bsz, hq, sl, hd = q.shape
        hk = k.shape[1]
        with b.group("ring"):
            if hk < hq:  # repeat_kv: a materialised copy of each key/value head for its query heads
                k, v = self.repeat_heads(k, hq, "repeat_k"), self.repeat_heads(v, hq, "repeat_v")
            kg = b.op("all_gather", [k], name="gather_k", group_size=cp, stride=self.tp, axis=2, ring_steps=cp)
            vg = b.op("all_gather", [v], name="gather_v", group_size=cp, stride=self.tp, axis=2, ring_steps=cp)
            ks = b.op("split", [kg], name="chunks_k", axis=2, sizes=(sl,) * cp)
            vs = b.op("split", [vg], name="chunks_v", axis=2, sizes=(sl,) * cp)
            o = b.op("attention", [q, ks[0], vs[0]], name="step0", causal=causal)  # the local chunk
            out = b.op("elementwise", [o], name="step0_fp32", op="cast", out_dtype="fp32")
            for i in range(1, cp):
                ki = b.op("slice", [ks[i]], name=f"step{i}_k", shape=(bsz, hq, sl // 2, hd))
                vi = b.op("slice", [vs[i]], name=f"step{i}_v", shape=(bsz, hq, sl // 2, hd))
                oi = b.op("attention", [q, ki, vi], name=f"step{i}", causal=False)
                oi = b.op("elementwise", [oi], name=f"step{i}_fp32", op="cast", out_dtype="fp32")
                diff = self.ew("sub", out, oi, name=f"merge{i}_diff")
                diff = self.ew("scale", diff, name=f"merge{i}_weight")
                out = self.ew("sub", out, diff, name=f"merge{i}")
            return b.op("elementwise", [out], name="out_dtype", op="cast", out_dtype=q.dtype.value)

    def decomposed_core(self, q: TensorSpec, k: TensorSpec, v: TensorSpec, *, causal: bool,
                        bias: TensorSpec | None, views: bool = False) -> TensorSpec:
        """QK^T, scale, bias, mask, softmax, dropout, PV. ``views``: q, k and v are the permuted head views of the
        projections (self-attention without a KV cache); under an eager profile's ``torch.matmul`` at batch > 1
        each is then copied: ``at::matmul`` of two 4-d tensors reshapes both to (batch x heads, rows, cols), which a
        ``view(b, s, h, d).permute(0, 2, 1, 3)`` (or its ``transpose(-1, -2)``) cannot do without a clone
        (pytorch/pytorch ``aten/src/ATen/native/LinearAlgebra.cpp``, ``_matmul_impl``; at batch 1 the size-1 batch
        merges with the heads). The softmax output is contiguous. A copy's gradient is a copy."""
        b = self.b
        bsz, hq, s, hd = q.shape
        hk = k.shape[1]
        g = hq // hk
        with b.group("core"):
            if views and self.eager_matmul and bsz > 1 and g == 1:
                q, k, v = (b.op("transpose", [t], name=f"{n}_contiguous", perm=(0, 1, 2, 3))
                           for t, n in ((q, "q"), (k, "k"), (v, "v")))
            qg = self.reshape(q, (bsz, hk, g * s, hd), "q_groups") if g > 1 else q
            scores = b.op("matmul", [qg, k], name="qk", transpose_b=True)
            if not self.fused_softmax:  # else: baddbmm's alpha and FusedScaleMaskSoftmax
                scores = self.ew("scale", scores)
            if bias is not None:
                scores = self.ew("add", scores, bias, name="bias")
            if causal and not self.fused_softmax:
                scores = self.ew("mask", scores)
            if self.eager_ops and self.hf.softmax_fp32 and scores.dtype.value != "fp32":
                p = b.op("softmax", [scores], name="softmax", axis=-1, out_dtype="fp32")
                p = b.op("elementwise", [p], name="to_dtype", op="cast", out_dtype=scores.dtype.value)
            else:
                p = b.op("softmax", [scores], name="softmax", axis=-1)
            p = self.dropout(p, self.hf.attn_dropout, "attn_dropout")
            o = b.op("matmul", [p, v], name="pv")
            return self.reshape(o, (bsz, hq, s, hd), "o_heads") if g > 1 else o

    # --- MLPs ---------------------------------------------------------------------------------
    def mlp_block(self, h: TensorSpec, width: int = 0, group: str = "mlp") -> TensorSpec:
        """The dense MLP of ``width`` columns (0: the model's ``d_ff``; split over the tensor-parallel ranks)."""
        cfg, b = self.cfg, self.b
        d, ff = h.shape[-1], (width // self.tp if width else self.d_ff_local)
        with b.group(group):
            h = self.tp_enter(h)
            if cfg.gated:
                if self.eager_ops and self.hf.separate_projections:  # the model code's gate_proj and up_proj
                    gate = self.linear(h, d, ff, "gate", cfg.mlp_bias, parallel="column")
                    up = self.linear(h, d, ff, "up", cfg.mlp_bias, parallel="column")
                else:
                    gu = self.linear(h, d, 2 * ff, "gate_up", cfg.mlp_bias, parallel="column")
                    gate, up = b.op("split", [gu], name="split_gate_up", axis=-1, sizes=(ff, ff))
                a = self.activation(gate) if self.eager_ops else \
                    self.ew("silu" if cfg.mlp == "swiglu" else "gelu", gate, name="act")
                a = self.ew("mul", a, up, name="gate_mul")
            else:
                a = self.linear(h, d, ff, "up", cfg.mlp_bias, parallel="column")
                a = self.activation(a) if self.eager_ops else self.ew(cfg.mlp, a, name="act")
            y = self.row_parallel_out(a, ff, d, "down", cfg.mlp_bias)
            return self.dropout(y, self.hf.resid_dropout, "dropout")

    def row_parallel_out(self, x: TensorSpec, d_in: int, d_out: int, name: str, bias: bool) -> TensorSpec:
        """A row-parallel linear and the reduction of its partial sums (bias added after it)."""
        if self.tp == 1:
            return self.linear(x, d_in, d_out, name, bias)
        y = self.tp_exit(self.linear(x, d_in, d_out, name, False, parallel="row"), name)
        if bias:
            y = self.ew("add", y, self.w(f"{name}.bias", (d_out,)), name=f"{name}_bias")
        return y

    def moe_block(self, h: TensorSpec) -> TensorSpec:
        cfg, b = self.cfg, self.b
        if cfg.moe_dispatch == "einsum":
            return self.einsum_dispatch(h)
        # etp 1 with tp > 1: each rank dispatches its own sequence-parallel tokens to whole experts over ep
        # consecutive ranks (Megatron-Core's expert groups ETP x EP x EDP over tp x cp x dp, order tp-ep-dp)
        fold = self.etp != self.tp
        h = h if fold else self.tp_enter(h)
        bsz, s, d = h.shape
        t = bsz * s
        e, k, ff = cfg.experts, cfg.top_k, cfg.d_ff // self.etp
        cap = moe_capacity(t, e, k, cfg.capacity_factor)
        routed = min(t * k, e * cap)
        active = min(expected_active_experts(t, e, k), routed)
        ep = self.ep
        # expert parallelism (GShard, Lepikhin et al. 2020; Megatron-LM): ep ranks with their own tokens
        # each hold e / ep experts; an all-to-all sends every expert's buffer to its owner and back. The
        # owner's experts see the ep ranks' tokens: e/ep experts of ep * cap slots, tokens spread evenly
        le = e // ep
        active_local = max(1, min(le, round(expected_active_experts(t * ep, e, k) * le / e))) if ep > 1 else active
        dedup = {} if cfg.moe_dispatch != "deepep" else dict(zip(DEDUP_ATTRS, (
            t, e, k, cfg.moe_routing, h.nbytes // t), strict=True))  # sizes as DeepEP sends them (dispatch_copies)
        tiles = {"tile_rows": self.gmm_tile_rows} if self.gmm_tile_rows else {}  # Megablox's tile visits
        if self.gmm_tile_cols:
            tiles["tile_cols"] = self.gmm_tile_cols
        if self.gmm_streams:  # one GEMM per local expert, round-robin on the streams (TE multi_stream_cublas_gemm)
            tiles = {**tiles, "per_expert_streams": self.gmm_streams}
        with b.group("moe"):
            x2 = self.reshape(h, (t, d), "tokens")
            wts, idx = b.op("moe_router", [x2, self.w("router.weight", (d, e))], name="router", top_k=k)
            sync, after = self.dispatch_sync(ep)
            xs, slots = self.replicate_tokens(x2, idx, k) if self.sort_copies else (x2, idx)
            side = ep > 1 and cfg.moe_dispatch in self.dispatch_collectives
            if side and sync:  # inside the interval the host waits on, before the permute
                self.count_all_gather(e, ep)
            buf = b.op("moe_dispatch", [xs, slots], name="dispatch", experts=e, capacity=cap, tokens=routed, **sync)
            if ep > 1:
                buf = b.op("all_to_all", [buf], name="dispatch_all_to_all", group_size=ep, stride=self.etp, **dedup,
                           **after)
                wts = self.probs_all_to_all(wts, ep) if side else wts
                buf = self.sort_by_local_expert(buf, ep, le, cap, d)
            n1 = 2 * ff if cfg.gated else ff
            calls = {"column_calls": 2} if cfg.gated and "tile_cols" in tiles else {}  # Megablox: w0, w1 apart
            hid = b.op("grouped_matmul", [buf, self.w("experts.w_in", (le, d, n1))], name="experts_in",
                       tokens=routed, experts_active=active_local, **tiles, **calls)
            if cfg.gated:
                hid = self.clamp_halves(hid, ff) if self.clamped_glu else hid
                gate, up = b.op("split", [hid], name="split_gate_up", axis=-1, sizes=(ff, ff))
                a = self.ew("silu" if cfg.mlp == "swiglu" else "gelu", gate, name="act")
                a = self.ew("mul", a, up, name="gate_mul")
            else:
                a = self.ew(cfg.mlp, hid, name="act")
            y = b.op("grouped_matmul", [a, self.w("experts.w_out", (le, ff, d))], name="experts_out",
                     tokens=routed, experts_active=active_local, **tiles)
            if cfg.expert_bias and self.bias_loop:
                y = self.expert_bias_loop(y, wts, idx, le, d)
            if ep > 1:
                y = self.restore_source_order(y, ep, le, cap, d)
                y = b.op("all_to_all", [y], name="combine_all_to_all", group_size=ep, stride=self.etp, **dedup)
            if self.scatter_routed(fold, s, d):
                return self.unpermute_columns(y, wts, idx, routed, (bsz, s, d))
            y = self.unsort_rows(y, routed, d) if self.sort_copies else y
            y = b.op("moe_combine", [y, wts, idx], name="combine", tokens=routed)
            # experts' MLP widths are split over the tensor-parallel ranks: partial sums reduced
            y = self.reshape(y, (bsz, s, d), "merge")
            return y if fold else self.tp_exit(y, "experts")

    def clamp_halves(self, hid: TensorSpec, ff: int) -> TensorSpec:
        """GPT-OSS's clamps before the experts' gated activation as Megatron-Core runs them
        (``weighted_bias_quick_geglu_impl``; :attr:`workloads.frameworks.FrameworkProfile.clamped_glu_families`):
        the first GEMM's output chunked into its halves (views), each clamped by an eager kernel (the gate at
        most the limit, the linear half within it: ``clip`` with ``bounds`` max and both), the two concatenated
        by ``torch.cat`` (a copy of every column), then ``torch.tensor(linear_offset, device=...)``, whose copy
        from a CPU scalar makes the host wait for the stream: the concatenation carries ``host_sync``. Nothing
        fuses into these kernels (``aten_fallback``); their gradients are PyTorch's ``clamp_backward`` kernels
        (:func:`workloads.training._clamp_grad`) and the chunk's concatenation. Same shape."""
        b, fb = self.b, {"aten_fallback": True}
        gate, up = b.op("split", [hid], name="clamp_halves", axis=-1, sizes=(ff, ff))
        gate = b.op("elementwise", [gate], name="clamp_gate", op="clip", bounds="max", **fb)
        up = b.op("elementwise", [up], name="clamp_up", op="clip", bounds="both", **fb)
        return b.op("concat", [gate, up], name="clamp_cat", axis=-1, host_sync=True, **fb)

    def scatter_routed(self, fold: bool, s: int, d: int) -> bool:
        """Whether the experts' partial sums are reduce-scattered over the tensor-parallel ranks before the
        unpermute (MaxText's ``sparse_matmul``: ``psum_scatter(intermediate_output, "tensor",
        scatter_dimension=1)`` right after the down-projection's ``gmm`` and before ``unpermute``,
        src/MaxText/layers/moe.py @ 3eb77db3c, MaxText/layers/moe.py @ f4db8e4cc), so the unsort's gather and
        the weighted sum run on ``d / tp`` columns of the routed rows. Only with sequence parallelism, whose exit
        leaves the same bytes as MaxText's embed-sharded activations."""
        return self.sort_copies and self.sp and not fold and s % self.tp == 0 and d % self.tp == 0

    def unpermute_columns(self, y: TensorSpec, wts: TensorSpec, idx: TensorSpec, routed: int,
                          shape: tuple[int, int, int]) -> TensorSpec:
        """The experts' routed rows reduce-scattered over their ``d`` columns, then unsorted and combined on the
        rank's ``d / tp`` columns (:meth:`scatter_routed`); the layer's output, ``(bsz, s / tp, d)``, has the
        bytes of the sequence-parallel exit."""
        bsz, s, d = shape
        rows = self.reshape(y, (y.numel // d, d), "expert_rows_full")
        part = self.b.op("reduce_scatter", [rows], name="experts_reduce_scatter", group_size=self.tp, axis=1)
        out = self.unsort_rows(part, routed, d // self.tp)
        out = self.b.op("moe_combine", [out, wts, idx], name="combine", tokens=routed)
        return self.reshape(out, (bsz, s // self.tp, d), "merge")

    def count_all_gather(self, e: int, ep: int) -> TensorSpec:
        """Megatron-Core's dropless alltoall dispatcher gathers every rank's per-expert token counts (one int64
        a global expert) over the expert-parallel group before it copies them to the host and waits
        (``MoEAlltoAllTokenDispatcher.preprocess``, ``gather_from_sequence_parallel_region``: an NCCL
        all-gather on the compute stream; :attr:`workloads.frameworks.FrameworkProfile.moe_dispatch_collectives`).
        The counts carry no gradient. ``(ep * e,)`` int64."""
        counts = self.b.input(f"{self.b.current_group}.tokens_per_expert", (e,), "int64")
        return self.b.op("all_gather", [counts], name="count_all_gather", group_size=ep, stride=self.etp, axis=0)

    def probs_all_to_all(self, wts: TensorSpec, ep: int) -> TensorSpec:
        """The dispatcher's second all-to-all, of the routed tokens' probabilities (one value a routed token),
        after the tokens' (``token_dispatch``: ``all_to_all(ep_group, permuted_probs, ...)``), and its backward
        the reverse all-to-all of their gradient. The code applies them on the experts' side (the weighted
        activation); the graph weights the combine with them, the same values through the same collectives.
        Shape unchanged."""
        return self.b.op("all_to_all", [wts], name="probs_all_to_all", group_size=ep, stride=self.etp)

    def replicate_tokens(self, x2: TensorSpec, idx: TensorSpec, k: int) -> tuple[TensorSpec, TensorSpec]:
        """The rows MaxText's sort gathers from, and their slots: with ``k`` > 1 ``jnp.repeat(inputs_2d, k,
        axis=0)`` first writes the ``k`` copies of every token (a broadcast, whose backward sums the copies), and
        the sort's gather reads ``T k`` rows (:attr:`workloads.frameworks.FrameworkProfile.moe_sort_copies`);
        with ``k`` = 1 the repeat is a view and nothing changes."""
        if k == 1:
            return x2, idx
        t, d = x2.shape
        rows = self.b.op("expand", [self.reshape(x2, (t, 1, d), "token_rows")], name="repeat_top_k", shape=(t, k, d))
        return self.reshape(rows, (t * k, d), "token_copies"), self.reshape(idx, (t * k, 1), "copy_slots")

    def unsort_rows(self, y: TensorSpec, routed: int, d: int) -> TensorSpec:
        """MaxText's unpermute: the gather of the experts' rows back to token order (``_sort_activations``
        with the inverse sort) writes the ``routed`` rows before the float32 weighted sum (the combine) reads
        them; its backward is the gather of their gradients. ``(1, routed, d)``."""
        rows = self.reshape(y, (y.numel // d, d), "expert_rows")
        slots = self.b.input(f"{self.b.current_group}.unsort_slots", (rows.shape[0], 1), "int32")
        return self.b.op("moe_dispatch", [rows, slots], name="unsort", experts=1, capacity=routed, tokens=routed)

    def dispatch_sync(self, ep: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """Attributes of the dispatch and of its all-to-all: with ``moe_host_sync`` the dispatch is where the
        host waits for the token counts (``host_sync``), and with expert parallelism both stand for the
        dispatcher's framework ops beside them: those before the wait, issued before the dispatch
        (``host_ops``), and those after it, issued after the all-to-all (``host_ops_after``;
        :attr:`workloads.frameworks.FrameworkProfile.moe_dispatch_host_ops`, counted for ``ep > 1``)."""
        if not self.cfg.moe_host_sync:
            return {}, {}
        before, after = self.dispatch_host.get(self.cfg.moe_dispatch, (0, 0)) if ep > 1 else (0, 0)
        return ({"host_sync": True, **({"host_ops": before} if before else {})},
                {"host_ops_after": after} if after else {})

    def expert_bias_loop(self, y: TensorSpec, wts: TensorSpec, idx: TensorSpec, le: int, d: int) -> TensorSpec:
        """The second expert GEMM's bias as Megatron-Core's ``TEGroupedMLP._apply_bias`` adds it: for each
        local expert ``t + b * p`` over its rows (``b`` the expert's bias, ``p`` the rows' routing
        probabilities), then ``torch.cat`` of the experts' rows: a multiply and an add of the expert's rows
        each (``le`` kernels apiece, issued from Python: ``host_ops``) and one copy of every row. The
        probabilities are the router's weights in the rows' order: a view where their count equals the rows
        (dropless, evenly spread), else permuted into the rows' slots as the dispatcher permutes them with the
        tokens (a ``moe_dispatch`` of the ``(T k, 1)`` weights, whose backward scatters the gradient back)."""
        b = self.b
        rows = y.shape[1]
        if wts.numel == le * rows:
            p = self.reshape(wts, (le, rows, 1), "expert_row_probs")
        else:
            flat = self.reshape(wts, (wts.numel, 1), "routed_probs")
            slots = self.reshape(idx, (idx.numel, 1), "routed_slots")
            p = b.op("moe_dispatch", [flat, slots], name="expert_row_probs", experts=le, capacity=rows,
                     tokens=min(wts.numel, le * rows))
        loop = {"host_ops": le - 1} if le > 1 else {}
        bias = self.w("experts.b_out", (le, 1, d))
        bp = b.op("elementwise", [bias, p], name="expert_bias_scale", op="mul", **loop)
        y = b.op("elementwise", [y, bp], name="expert_bias_add", op="add", **loop, **self.outside_epilogue("add", [y, bp]))
        return b.op("elementwise", [y], name="expert_bias_cat", op="copy")

    def sort_by_local_expert(self, buf: TensorSpec, ep: int, le: int, cap: int, d: int) -> TensorSpec:
        """The dispatch all-to-all's output (source rank, local expert, rows) as the experts read it: one block
        of rows per local expert. A view, or with :attr:`workloads.frameworks.FrameworkProfile.moe_sort_chunks`
        and several local experts the copy that sorts the chunks (a transpose of the first two axes, its
        backward the inverse copy)."""
        if self.sort_chunks and le > 1 and self.cfg.moe_dispatch == "sparse":
            buf = self.reshape(buf, (ep, le, cap, d), "received_chunks")
            buf = self.b.op("transpose", [buf], name="sort_chunks", perm=(1, 0, 2, 3))
        return self.reshape(buf, (le, ep * cap, d), "local_experts")

    def restore_source_order(self, y: TensorSpec, ep: int, le: int, cap: int, d: int) -> TensorSpec:
        """The experts' output back in the order of the combine all-to-all (the inverse of
        :meth:`sort_by_local_expert`)."""
        if self.sort_chunks and le > 1 and self.cfg.moe_dispatch == "sparse":
            y = self.reshape(y, (le, ep, cap, d), "expert_chunks")
            y = self.b.op("transpose", [y], name="unsort_chunks", perm=(1, 0, 2, 3))
        return self.reshape(y, (ep * le, cap, d), "expert_buffers")

    def einsum_dispatch(self, h: TensorSpec) -> TensorSpec:
        """MaxText's ``dense_matmul`` with ``capacity_factor > 0`` (MaxText/layers/linears.py @ 449b4fe52a78,
        ``sparse_matmul: False``): per sequence a one-hot combine mask (B, S, E, C) of the routing weights at
        each kept token's slot (``generate_masks``), ``dispatch = einsum('BSM,BSEC->EBCM')`` and
        ``combine = einsum('EBCM,BSEC->BSM')``, dense matmuls of ``2 B S E C M`` flops each, and the expert
        einsums over every one of the ``E x B x C`` capacity-padded slots (:func:`einsum_capacity`)."""
        cfg, b = self.cfg, self.b
        h = self.tp_enter(h)
        bsz, s, d = h.shape
        e, k, ff, ep = cfg.experts, cfg.top_k, self.d_ff_local, self.ep
        c = einsum_capacity(s, e, k, cfg.capacity_factor)
        le = e // ep
        with b.group("moe"):
            x2 = self.reshape(h, (bsz * s, d), "tokens")
            wts, idx = b.op("moe_router", [x2, self.w("router.weight", (d, e))], name="router", top_k=k)
            # one_hot(slot) from the cumulative count of each expert's tokens (no gradient), times the weights
            slots = b.op("generic", [idx], name="slot_one_hot", op_type="one_hot", output_shapes=[(bsz, s, e * c)],
                         output_dtypes=[h.dtype.value])
            w = b.op("reduction", [self.reshape(wts, (bsz, s, k), "token_weights")], name="kept_weight", op="sum",
                     axes=(-1,), keepdims=True)
            mask = self.ew("mul", w, slots, name="combine_mask")
            mask_t = b.op("transpose", [mask], name="dispatch_mask", perm=(0, 2, 1))
            buf = b.op("matmul", [mask_t, h], name="dispatch")  # (B, E*C, M)
            buf = b.op("transpose", [self.reshape(buf, (bsz, e, c, d), "slots")], name="expert_major",
                       perm=(1, 0, 2, 3))
            buf = self.reshape(buf, (e, bsz * c, d), "expert_buffers_in")
            if ep > 1:
                buf = b.op("all_to_all", [buf], name="dispatch_all_to_all", group_size=ep, stride=self.tp)
                buf = self.reshape(buf, (le, ep * bsz * c, d), "local_experts")
            rows = e * bsz * c  # every slot computed, kept or padding
            n1 = 2 * ff if cfg.gated else ff
            hid = b.op("grouped_matmul", [buf, self.w("experts.w_in", (le, d, n1))], name="experts_in",
                       tokens=rows, experts_active=le)
            if cfg.gated:
                gate, up = b.op("split", [hid], name="split_gate_up", axis=-1, sizes=(ff, ff))
                a = self.ew("mul", self.ew("silu" if cfg.mlp == "swiglu" else "gelu", gate, name="act"), up,
                            name="gate_mul")
            else:
                a = self.ew(cfg.mlp, hid, name="act")
            y = b.op("grouped_matmul", [a, self.w("experts.w_out", (le, ff, d))], name="experts_out",
                     tokens=rows, experts_active=le)
            if ep > 1:
                y = b.op("all_to_all", [self.reshape(y, (e, bsz * c, d), "expert_buffers")], name="combine_all_to_all",
                         group_size=ep, stride=self.tp)
            y = b.op("transpose", [self.reshape(y, (e, bsz, c, d), "slots_out")], name="batch_major",
                     perm=(1, 0, 2, 3))
            out = b.op("matmul", [mask, self.reshape(y, (bsz, e * c, d), "slot_rows")], name="combine")
            return self.tp_exit(out, "experts")

    # --- layers -------------------------------------------------------------------------------
    def layer(self, x: TensorSpec, i: int, *, causal: bool, cache: bool, bias: TensorSpec | None,
              memory: TensorSpec | None = None, cross_bias: TensorSpec | None = None) -> TensorSpec:
        cfg, b = self.cfg, self.b
        window = cfg.layer_window(i) if causal and memory is None else 0
        with b.group(f"layers.{i}"):
            if cfg.pre_norm:
                a = self.attention_block(self.norm(x, "attn_norm"), causal=causal, cache=cache, bias=bias,
                                         window=window)
                if cfg.sandwich_norm:
                    a = self.norm(a, "post_attn_norm")
                x = self.ew("add", x, a, name="attn_residual")
                if memory is not None:
                    c = self.attention_block(self.norm(x, "cross_norm"), causal=False, cache=False, bias=cross_bias,
                                             memory=memory, name="cross")
                    x = self.ew("add", x, c, name="cross_residual")
                hn = self.norm(x, "mlp_norm")
                m = self.moe_or_mlp(hn, i)
                if cfg.sandwich_norm:
                    m = self.norm(m, "post_mlp_norm")
                return self.ew("add", x, m, name="mlp_residual")
            a = self.attention_block(x, causal=causal, cache=cache, bias=bias)
            x = self.norm(self.ew("add", x, a, name="attn_residual"), "attn_norm")
            if memory is not None:
                c = self.attention_block(x, causal=False, cache=False, bias=cross_bias, memory=memory, name="cross")
                x = self.norm(self.ew("add", x, c, name="cross_residual"), "cross_norm")
            m = self.moe_or_mlp(x, i)
            return self.norm(self.ew("add", x, m, name="mlp_residual"), "mlp_norm")

    def moe_or_mlp(self, h: TensorSpec, i: int) -> TensorSpec:
        """Layer ``i``'s feed-forward block: routed experts (plus the shared expert) or the dense MLP."""
        cfg = self.cfg
        if not cfg.is_moe_layer(i):
            return self.mlp_block(h, cfg.dense_d_ff)
        y = self.moe_block(h)
        if cfg.shared_d_ff:  # every token also through the shared expert, its output added (Llama 4, DeepSeek-MoE)
            y = self.ew("add", y, self.mlp_block(h, cfg.shared_d_ff, "shared_expert"), name="shared_expert_add")
        return y

    def relative_bias(self, s: int, skv: int) -> TensorSpec:
        """T5 bucketed relative position bias (heads, s, skv), computed once per stack."""
        b = self.b
        with b.group("rel_bias"):
            g = b.current_group
            ids = b.input(f"{g}.buckets", (s, skv), "int32")
            table = self.w("weight", (self.cfg.relative_buckets, self.heads_local))
            rb = b.op("embedding", [ids, table], name="lookup")
            return b.op("transpose", [rb], name="to_heads", perm=(2, 0, 1))

    def embed_tokens(self, s: int, prefix: str = "") -> TensorSpec:
        cfg, b = self.cfg, self.b
        ids = b.input(f"{prefix}input_ids", (self.batch, s), "int32")
        with b.group("embed"):
            x = b.op("embedding", [ids, self.table()], name="tokens")
            # vocabulary-parallel table: each rank looks up its rows, the partial rows are reduced
            x = self.tp_exit(x, "tokens")
            s = x.shape[1]  # s / tp tokens per rank with sequence parallelism
            if cfg.pos == "learned":
                pids = b.input(f"{prefix}position_ids", (1, s), "int32")
                p = b.op("embedding", [pids, self.w("positions.weight", (cfg.max_positions, cfg.d_model))],
                         name="positions")
                x = self.ew("add", x, p, name="add_positions")
            if cfg.token_types:
                tids = b.input(f"{prefix}token_type_ids", (self.batch, s), "int32")
                tt = b.op("embedding", [tids, self.w("token_types.weight", (cfg.token_types, cfg.d_model))],
                          name="token_types")
                x = self.ew("add", x, tt, name="add_token_types")
            if cfg.embed_norm:
                x = self.norm(x, "norm")
            return self.dropout(x, self.hf.embd_dropout, "dropout")

    def table(self) -> TensorSpec:
        return self.b.weight("embed.tokens.weight", (self.vocab_local, self.cfg.d_model))

    def embed_patches(self) -> TensorSpec:
        cfg, b = self.cfg, self.b
        p, n_side = cfg.patch_size, cfg.image_size // cfg.patch_size
        img = b.input("pixels", (self.batch, cfg.channels, cfg.image_size, cfg.image_size))
        with b.group("embed"):
            w = self.w("patch.weight", (cfg.d_model, cfg.channels, p, p))
            y = b.op("conv2d", [img, w, self.w("patch.bias", (cfg.d_model,))], name="patch", stride=p)
            y = self.reshape(y, (self.batch, cfg.d_model, n_side * n_side), "flatten")
            y = b.op("transpose", [y], name="to_tokens", perm=(0, 2, 1))
            cls_ids = b.input("cls_ids", (self.batch, 1), "int32")
            cls = b.op("embedding", [cls_ids, self.w("cls_token", (1, cfg.d_model))], name="cls")
            x = b.op("concat", [cls, y], name="prepend_cls", axis=1)
            pos = self.w("positions.weight", (1, n_side * n_side + 1, cfg.d_model))
            return self.ew("add", x, pos, name="add_positions")

    def lm_head(self, x: TensorSpec) -> TensorSpec:
        cfg, b = self.cfg, self.b
        with b.group("lm_head"):
            x = self.tp_enter(x)
            if self.logits == "last" and x.shape[1] > 1:
                x = b.op("slice", [x], name="last_token", shape=(x.shape[0], 1, x.shape[2]))
            par = {"tensor_parallel": "column"} if self.tp > 1 else {}
            if cfg.tied_embeddings:
                y = b.op("matmul", [x, self.table()], name="logits", transpose_b=True, **par)
            else:
                y = b.op("matmul", [x, self.w("weight", (cfg.d_model, self.vocab_local))], name="logits", **par)
            if self.tp > 1 and self.phase != "train":
                # inference gathers the vocabulary shards of the logits to sample (vLLM's logits gather);
                # training keeps them sharded (Megatron's vocabulary-parallel cross entropy)
                y = b.op("all_gather", [y], name="logits_gather", group_size=self.tp, axis=-1)
            return y

    def lm_loss(self, logits: TensorSpec) -> TensorSpec:
        b = self.b
        bsz, s, v = logits.shape
        with b.group("loss"):
            flat = self.reshape(logits, (bsz * s, v), "flatten")
            labels = b.input("labels", (bsz * s,), "int32")
            return b.op("cross_entropy", [flat, labels], name="cross_entropy")

    def first_token(self, x: TensorSpec) -> TensorSpec:
        bsz, _, d = x.shape
        y = self.b.op("slice", [x], name="first_token", shape=(bsz, 1, d))
        return self.reshape(y, (bsz, d), "squeeze")

    # --- whole models -------------------------------------------------------------------------
    def build_encoder_only(self) -> TensorSpec:
        cfg, b = self.cfg, self.b
        x = self.embed_patches() if cfg.is_vision else self.embed_tokens(self.seq)
        for i in range(cfg.layers):
            x = self.layer(x, i, causal=False, cache=False, bias=None)
        if cfg.final_norm:
            x = self.norm(x, "final_norm")
        out = x
        if cfg.pooler:
            with b.group("pooler"):
                out = self.ew("tanh", self.linear(self.first_token(x), cfg.d_model, cfg.d_model, "dense", True))
        classes = cfg.num_classes or (2 if self.phase == "train" else 0)
        if classes:
            with b.group("head"):
                h = out if cfg.pooler else self.first_token(out)
                out = self.linear(h, cfg.d_model, classes, "classifier", True)
            if self.phase == "train":
                with b.group("loss"):
                    labels = b.input("labels", (self.batch,), "int32")
                    out = b.op("cross_entropy", [out, labels], name="cross_entropy")
        return out

    def build_decoder(self) -> TensorSpec:
        cfg, b = self.cfg, self.b
        s = 1 if self.phase == "decode" else self.seq // self.cp  # context parallelism: s / cp tokens each
        cache = self.phase in ("prefill", "decode")
        lo, hi = self.stage_layers
        shape = (self.batch, s // self.tp if self.sp else s, cfg.d_model)
        # Megatron's scatter/gather optimisation (Narayanan et al. 2021, Sec. 4.1): the tensor-parallel
        # ranks hold the same activations, so each sends 1/tp of them and the next stage all-gathers
        # them over its fast intra-node fabric
        shards = self.tp if (self.tp > 1 and not self.sp and math.prod(shape) % self.tp == 0) else 1
        if lo == 0:
            x = self.embed_tokens(s)
        else:  # a later pipeline stage: the previous stage's activations arrive over the link
            with b.group("pipeline"):
                if shards > 1:
                    part = b.op("recv", [], name="recv", shape=(math.prod(shape) // shards,), dtype=b.dtype.value,
                                group_size=2, stride=self.pipeline_stride)
                    x = self.reshape(b.op("all_gather", [part], name="gather", group_size=shards, axis=0),
                                     shape, "unflatten")
                else:
                    x = b.op("recv", [], name="recv", shape=shape, dtype=b.dtype.value, group_size=2,
                             stride=self.pipeline_stride)
        for i in range(lo, hi):
            x = self.layer(x, i, causal=True, cache=cache, bias=None)
        if hi < cfg.layers:
            with b.group("pipeline"):
                b.op("send", [x], name="send", group_size=2, stride=self.pipeline_stride, shards=shards)
            return x
        if cfg.final_norm:
            x = self.norm(x, "final_norm")
        if self.phase in ("forward", "train"):
            self.logits = "all"
        logits = self.lm_head(x)
        return self.lm_loss(logits) if self.phase == "train" else logits

    def build_encoder_decoder(self) -> TensorSpec:
        cfg, b = self.cfg, self.b
        with b.group("encoder"):
            x = self.embed_tokens(self.seq, prefix="encoder_")
            bias = self.relative_bias(self.seq, self.seq) if cfg.pos == "relative" else None
            for i in range(cfg.layers):
                x = self.layer(x, i, causal=False, cache=False, bias=bias)
            if cfg.final_norm:
                x = self.norm(x, "final_norm")
        memory = x
        sd = self.decoder_seq
        with b.group("decoder"):
            ids = b.input("decoder_input_ids", (self.batch, sd), "int32")
            with b.group("embed"):
                y = b.op("embedding", [ids, self.table()], name="tokens")
            bias = self.relative_bias(sd, sd) if cfg.pos == "relative" else None
            for i in range(cfg.decoder_layers):
                y = self.layer(y, i, causal=True, cache=False, bias=bias, memory=memory)
            if cfg.final_norm:
                y = self.norm(y, "final_norm")
        self.logits = "all"
        logits = self.lm_head(y)
        return self.lm_loss(logits) if self.phase == "train" else logits


def build(cfg: TransformerConfig, *, batch: int = 1, seq: int = 2048, phase: str = "forward", context: int | None = None,
          dtype: str | DType = "bf16", attention: str | None = None, logits: str | None = None,
          decoder_seq: int | None = None, name: str | None = None, tp: int = 1, sequence_parallel: bool = False,
          stage_layers: tuple[int, int] | None = None, pipeline_stride: int = 1, ep: int = 1,
          cp: int = 1, framework: str = "", hf_family: str = "", etp: int | None = None,
          dropout: float = 0.0) -> OpGraph:
    """Build ``cfg`` as an OpGraph for ``phase``.

    Parameters
    ----------
    cfg
        The model's hyperparameters.
    batch
        Sequences (images) per step.
    seq
        Tokens per sequence (prompt length for ``prefill``); ignored for ``decode`` (one token) and
        for vision models (the image size comes from ``cfg``).
    phase
        ``forward``, ``prefill``, ``decode`` or ``train`` (see the module docstring).
    context
        Tokens already in the KV cache for ``decode`` (default ``seq``).
    dtype
        Weight and activation dtype.
    attention
        ``fused`` (one flash-style op) or ``decomposed`` (matmul, softmax, matmul); default: the
        framework profile's, else ``fused``.
    logits
        ``last`` (prefill computes the last position's logits only) or ``all``; default: the
        framework profile's, else ``last``.
    decoder_seq
        Decoder tokens of an encoder-decoder model (default ``seq``).
    name
        Graph name (default ``cfg.name``).
    tp, sequence_parallel
        Tensor parallelism: the graph is the work of ONE of ``tp`` ranks, as Megatron-LM splits it
        (Shoeybi et al. 2019): q/k/v, MLP-up and expert-up projections by output columns, attention
        by heads, the output/down projections by input rows followed by an ``all_reduce`` of their
        partial sums, the embedding table and LM head by vocabulary rows (padded up to a multiple of
        ``tp``); inference all-gathers the logits. ``sequence_parallel`` (Korthikanti et al. 2022)
        keeps ``seq / tp`` tokens per rank between blocks, with an ``all_gather`` before and a
        ``reduce_scatter`` after each block instead of the all-reduce. See
        :func:`tensor_parallel_problems` for what must divide.
    stage_layers
        Pipeline parallelism (decoder-only LMs): build only layers ``[first, last)``, as one stage
        of a pipeline; a stage without layer 0 starts by receiving the previous stage's activations
        (``recv``), a stage without the last layer ends by sending its own (``send``). The
        embedding belongs to the first stage, the final norm, LM head and loss to the last.
    pipeline_stride
        Rank distance between neighbouring stages (``stride`` of the send/recv ops), which tells
        whether they cross nodes.
    ep
        Expert parallelism: each MoE layer's experts are split over ``ep`` ranks that hold different
        tokens (data-parallel replicas, ``tp`` ranks apart), with an ``all_to_all`` before and after
        the experts; ``experts`` must be divisible by ``ep``.
    cp
        Context parallelism (decoder-only LMs, prefill and training): each of ``cp`` ranks holds
        ``seq / cp`` tokens of every sequence; attention exchanges keys and values and balances the
        causal work (see ``_Build.context_parallel_core``); ``seq`` must be divisible by ``2 cp``.
    framework
        A software-stack profile of :mod:`workloads.frameworks` (``""``: none, the default graph).
        ``eager`` and ``sdpa`` emit what Hugging Face model code launches in eager PyTorch:
        activations, RMSNorm and RoPE op by op, the head merge as a copy, logits for every position,
        dropout kernels in training (``eager`` also decomposes attention over the full scores).
        The graph's ``meta["framework"]`` records it.
    hf_family
        The Hugging Face family whose model code the eager kernels follow (a key of
        :data:`workloads.frameworks.HF_MODEL_CODE`; zoo models pass their family).
    dropout
        Every dropout layer as a kernel in every phase at this probability (static graphs); 0: none.
    """
    prof = None
    if framework:
        from workloads.frameworks import get_profile

        prof = get_profile(framework)
    attention = attention or (prof.attention if prof and prof.attention else "fused")
    logits = logits or (prof.logits if prof and prof.logits else "last")
    gname = name or cfg.name
    ctx = seq if context is None else context
    problems = tensor_parallel_problems(cfg, tp, sequence_parallel=sequence_parallel, phase=phase, seq=seq)
    if cp != 1:
        if not isinstance(cp, int) or cp < 1:
            problems.append(f"cp: got {cp!r}; expected a positive integer")
        elif not cfg.is_decoder_lm or phase == "decode":
            problems.append(f"cp {cp}: context parallelism splits a decoder's prompt or training sequence; got "
                            f"phase {phase!r}{'' if cfg.is_decoder_lm else ' of an encoder model'}; expected prefill, "
                            "forward or train of a decoder-only model")
        elif seq % (2 * cp * (tp if sequence_parallel else 1)):
            unit = 2 * cp * (tp if sequence_parallel else 1)
            problems.append(f"cp {cp}: seq {seq} is not divisible by {unit} (2 x cp{' x tp' if sequence_parallel else ''}"
                            f"); expected a multiple of {unit}")
    if ep != 1 and (not isinstance(ep, int) or ep < 1 or not cfg.experts or cfg.experts % ep):
        problems.append(f"ep {ep!r}: expected a divisor of experts={cfg.experts}" if cfg.experts else
                        f"ep {ep!r}: the model has no experts; expected ep 1")
    if problems:
        raise ValueError(f"model {cfg.name!r}: tensor parallelism: " + "; ".join(problems))
    _check_positions(cfg, seq=seq, ctx=ctx, phase=phase, decoder_seq=decoder_seq)
    if cfg.sliding_window and cp > 1:
        raise ValueError(f"model {cfg.name!r}: cp {cp}: context parallelism of sliding-window attention is not "
                         "modelled; expected cp 1")
    if cfg.attention_chunk and max(seq, ctx or 0) > cfg.attention_chunk:
        raise ValueError(f"model {cfg.name!r}: seq {max(seq, ctx or 0)} exceeds its attention chunk of "
                         f"{cfg.attention_chunk} tokens; expected at most {cfg.attention_chunk} (chunked local "
                         "attention beyond one chunk is not modelled yet)")
    if stage_layers is not None:
        lo, hi = stage_layers
        if not cfg.is_decoder_lm:
            raise ValueError(f"model {cfg.name!r}: pipeline stages: expected a decoder-only language model; "
                             "got an encoder or encoder-decoder model")
        if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo < hi <= cfg.layers):
            raise ValueError(f"model {cfg.name!r}: stage_layers: got {stage_layers!r}; expected (first, last) "
                             f"with 0 <= first < last <= {cfg.layers}")
    st = _Build(cfg, gname, batch=batch, seq=seq, phase=phase, context=ctx, dtype=dtype, attention=attention,
                logits=logits, decoder_seq=decoder_seq or seq, tp=tp, sequence_parallel=sequence_parallel,
                stage_layers=stage_layers, pipeline_stride=pipeline_stride, ep=ep, cp=cp, etp=etp,
                framework=prof.name if prof else "", hf_family=hf_family, dropout=dropout)
    if cfg.encoder_only:
        st.build_encoder_only()
    elif cfg.is_encoder_decoder:
        st.build_encoder_decoder()
    else:
        st.build_decoder()
    meta: dict[str, Any] = {"model": cfg.name, "batch": batch, "phase": phase, "dtype": parse_dtype(dtype).value,
                            "attention": attention}
    if cfg.is_vision:
        meta["image_size"] = cfg.image_size
    else:
        meta["seq"] = 1 if phase == "decode" else seq
    if phase == "decode":
        meta["context"] = ctx
    if cfg.is_encoder_decoder:
        meta["decoder_seq"] = decoder_seq or seq
    if stage_layers is not None and stage_layers != (0, cfg.layers):
        meta["stage_layers"] = list(stage_layers)
    if cp > 1:
        meta["cp"] = cp
    if prof is not None:
        meta["framework"] = prof.name
        if logits == "all" and phase == "prefill":
            meta["logits"] = "all"
    if tp > 1:
        meta["tp"] = tp
        if sequence_parallel:
            meta["sequence_parallel"] = True
    return st.b.build(meta)


def _nearest_divisors(n: int, k: int) -> str:
    """The divisors of ``n`` nearest ``k`` (below and above), for error messages."""
    divs = [d for d in range(1, n + 1) if n % d == 0]
    lo = max((d for d in divs if d < k), default=None)
    hi = min((d for d in divs if d > k), default=None)
    return " or ".join(str(d) for d in (lo, hi) if d is not None)


def tensor_parallel_problems(cfg: TransformerConfig, tp: int, *, sequence_parallel: bool = False,
                             phase: str = "forward", seq: int = 1) -> list[str]:
    """What prevents splitting ``cfg`` over ``tp`` tensor-parallel ranks (empty: nothing).

    As Megatron-LM requires: ``heads``, ``d_ff`` (and every expert's) divisible by ``tp``; key/value
    heads divisible by ``tp``, or, with fewer KV heads than ranks, ``tp`` a multiple of them (each
    rank then holds one replicated KV head, as vLLM does). Sequence parallelism also needs the
    sequence divisible by ``tp`` and a token model that is not an encoder-decoder.
    """
    if not isinstance(tp, int) or isinstance(tp, bool) or tp < 1:
        return [f"tp: got {tp!r}; expected a positive integer"]
    out: list[str] = []
    if tp == 1:
        return out
    if cfg.heads % tp:
        out.append(f"tp {tp} does not divide heads={cfg.heads}; expected a divisor (nearest: "
                   f"{_nearest_divisors(cfg.heads, tp)})")
    kv = cfg.n_kv_heads
    if kv % tp and tp % kv:
        out.append(f"tp {tp} and kv_heads={kv}: expected tp to divide the KV heads, or a multiple of them")
    if cfg.d_ff % tp:
        out.append(f"tp {tp} does not divide d_ff={cfg.d_ff}; expected a divisor (nearest: "
                   f"{_nearest_divisors(cfg.d_ff, tp)})")
    for f in ("shared_d_ff", "dense_d_ff"):
        if getattr(cfg, f) % tp:
            out.append(f"tp {tp} does not divide {f}={getattr(cfg, f)}; expected a divisor (nearest: "
                       f"{_nearest_divisors(getattr(cfg, f), tp)})")
    if sequence_parallel:
        s = 1 if phase == "decode" else seq
        if cfg.is_vision or cfg.is_encoder_decoder:
            out.append("sequence parallelism: expected a decoder-only or encoder-only token model")
        elif s % tp:
            out.append(f"sequence parallelism: tp {tp} does not divide the sequence of {s} token(s); "
                       "expected seq divisible by tp")
    return out


def prefill(cfg: TransformerConfig, batch: int, seq_len: int, **kw: Any) -> OpGraph:
    """The prompt pass of ``batch`` sequences of ``seq_len`` tokens, writing the KV cache."""
    return build(cfg, batch=batch, seq=seq_len, phase="prefill", **kw)


def decode(cfg: TransformerConfig, batch: int, context_len: int, **kw: Any) -> OpGraph:
    """One decoding step: one new token per sequence against ``context_len`` cached tokens."""
    return build(cfg, batch=batch, seq=1, phase="decode", context=context_len, **kw)


def forward(cfg: TransformerConfig, batch: int, seq_len: int, **kw: Any) -> OpGraph:
    """Whole-input inference without a KV cache (encoders, or a decoder over full sequences)."""
    return build(cfg, batch=batch, seq=seq_len, phase="forward", **kw)


def train_forward(cfg: TransformerConfig, batch: int, seq_len: int, **kw: Any) -> OpGraph:
    """The forward pass of a training step, with its cross-entropy loss."""
    return build(cfg, batch=batch, seq=seq_len, phase="train", **kw)


# ------------------------------------------------------------------------------------------------
# zoo registration


def _register_zoo() -> None:
    from workloads.zoo import META_KEYS, ModelEntry, load_data, register_model

    data = load_data("transformers.toml")
    for key, spec in data.get("models", {}).items():
        spec = dict(spec)
        meta = {k: spec.pop(k) for k in META_KEYS if k in spec}
        ckpt = _checkpoint(meta.get("checkpoint"), f"transformers.toml:models.{key}.checkpoint")
        cfg = config_from_mapping(key, spec, where=f"transformers.toml:models.{key}")
        defaults = dict(meta.get("defaults", {}))
        defaults.setdefault("batch", 1)
        defaults.setdefault("dtype", "bf16")
        defaults.setdefault("phase", "prefill" if cfg.is_decoder_lm else "forward")
        if cfg.is_vision:
            defaults.setdefault("seq", cfg.image_size)
        else:
            defaults.setdefault("seq", min(cfg.max_positions, 2048) if cfg.pos == "learned" else 2048)
            if cfg.pos == "learned" and cfg.is_decoder_lm:  # decode: the new token needs a position too
                defaults.setdefault("context", min(defaults["seq"], cfg.max_positions - 1))

        def builder(name: str, *, batch: int = 1, seq: int = 2048, phase: str = "forward", context: int | None = None,
                    dtype: str = "bf16", _cfg: TransformerConfig = cfg, _family: str = meta.get("family", ""),
                    **extra: Any) -> OpGraph:
            c = _cfg
            if "experts" in extra:
                c = replace(c, experts=int(extra.pop("experts")))
            if "capacity_factor" in extra:
                c = replace(c, capacity_factor=float(extra.pop("capacity_factor")))
            if c.is_vision and seq != c.image_size:
                c = replace(c, image_size=int(seq))
            unknown = set(extra) - {"attention", "logits", "decoder_seq", "tp", "sequence_parallel", "stage_layers",
                                    "pipeline_stride", "ep", "cp", "framework", "dropout"}
            if unknown:
                raise ValueError(f"model {name!r}: unknown option(s) {', '.join(sorted(unknown))}; expected "
                                 "attention, logits, decoder_seq, experts, capacity_factor, tp, sequence_parallel, "
                                 "stage_layers, pipeline_stride, ep, cp, framework, dropout")
            if extra.get("framework"):
                extra["hf_family"] = _family
            return build(c, batch=batch, seq=seq, phase=phase, context=context, dtype=dtype, name=name, **extra)

        register_model(ModelEntry(
            name=key, family=meta.get("family", "transformer"), description=meta.get("description", ""),
            source=meta.get("source", ""), builder=builder, defaults=defaults, phases=cfg.phases,
            aliases=tuple(meta.get("aliases", ())), checkpoint_weight_dtype=ckpt[0], checkpoint_source=ckpt[1],
        ))


def _checkpoint(table: Any, where: str) -> tuple[str | None, str]:
    """(weight dtype, source) of a zoo entry's ``checkpoint`` table (``{ weight_dtype = "mxfp4", source = "..." }``);
    (None, "") when absent; a located ValueError for an unknown dtype or a missing source."""
    if table is None:
        return None, ""
    from workloads.precision import parse_weight_dtype

    if not isinstance(table, dict) or set(table) != {"weight_dtype", "source"} or not str(table["source"]).strip():
        raise ValueError(f"{where}: got {table!r}; expected {{ weight_dtype = NAME, source = TEXT }}")
    parse_weight_dtype(table["weight_dtype"], f"{where}.weight_dtype")
    return str(table["weight_dtype"]), str(table["source"])


def zoo_config(name: str) -> TransformerConfig:
    """The :class:`TransformerConfig` of zoo entry ``name`` (as in ``transformers.toml``)."""
    from workloads.zoo import META_KEYS, get_entry, load_data

    entry = get_entry(name)
    spec = dict(load_data("transformers.toml")["models"][entry.name])
    for k in META_KEYS:
        spec.pop(k, None)
    return config_from_mapping(entry.name, spec)


_register_zoo()


def _context_source(cfg: TransformerConfig) -> str:
    """Where ``cfg``'s context (``max_positions``) is stated: its zoo entry and the entry's first source, else
    the config it came from."""
    from workloads.zoo import get_entry

    try:
        entry = get_entry(cfg.name)
        same = zoo_config(entry.name).max_positions == cfg.max_positions
    except (KeyError, ValueError):
        same = False
    if not same:
        return ("max_positions of its config (max_position_embeddings of a config.json, times the factor of a "
                "linear, dynamic or yarn rope_scaling)")
    from nodeperf.suggest import short_text

    first = entry.source.split(";")[0].split(" (")[0].strip()
    return f"max_positions of transformers.toml models.{entry.name}" + (f"; source: {short_text(first, 90)}"
                                                                         if first else "")


def _longer_context_hint(cfg: TransformerConfig, longest: int) -> str:
    """``; did you mean ...`` naming the zoo's variants of ``cfg``'s architecture (every field equal but the name
    and ``max_positions``) whose context holds ``longest`` positions, else its family's decoders that do."""
    from workloads.zoo import get_entry, list_models

    try:
        family = get_entry(cfg.name).family
    except (KeyError, ValueError):
        family = ""
    same, kin = [], []
    for entry in list_models():
        try:
            other = zoo_config(entry.name)
        except (KeyError, ValueError):
            continue
        if other.name == cfg.name or other.max_positions < longest or not other.is_decoder_lm:
            continue
        if replace(other, name=cfg.name, max_positions=cfg.max_positions) == cfg:
            same.append(f"{entry.name!r} (the same architecture, context {other.max_positions})")
        elif family and entry.family == family:
            kin.append(f"{entry.name!r} (context {other.max_positions})")
    names = same or kin[:3]
    return f"; did you mean {' or '.join(names)}?" if names else ""


def _check_positions(cfg: TransformerConfig, *, seq: int, ctx: int, phase: str, decoder_seq: int | None) -> None:
    """Refuse positions beyond a learned position table (``context + 1`` in decode: the new token needs a row), or
    an inference pass beyond a RoPE model's stated context (:func:`rope_context_problem`)."""
    if cfg.pos == "learned" and not cfg.is_vision:
        longest = ctx + 1 if phase == "decode" else max(seq, decoder_seq or seq)
        if longest > cfg.max_positions:
            what = f"context {ctx} + 1 new token" if phase == "decode" else f"seq {longest}"
            raise ValueError(f"model {cfg.name!r}: {what} exceeds its learned position table; got {longest} "
                             f"positions; expected at most max_positions = {cfg.max_positions}")
    problem = rope_context_problem(cfg, seq=seq, context=ctx, phase=phase)
    if problem:
        raise ValueError(problem)


def rope_context_problem(cfg: TransformerConfig, *, seq: int, context: int | None, phase: str) -> str | None:
    """The problem of an inference pass of a RoPE model beyond its stated context, else None.

    ``max_positions`` of a rotary model is the context its config states (``max_position_embeddings``; for Llama
    3.1 it already includes the config's ``rope_scaling``): a prefill or forward pass of ``seq`` tokens, or a decode
    step after ``context`` cached ones, beyond it is refused, as serving engines refuse a request beyond
    ``max_model_len``, and as :func:`request_context_problem` refuses a request of ``serve``. A decode step's bound
    is its cached context (the zoo's default decode context of a RoPE model is its default ``seq``, 4096 for
    Llama 2, which the new token's position passes by one); a learned position table bounds ``context + 1``. A
    training step (phase ``train``) is not bounded by it: its sequence length sets the rotary table it trains
    (torchtitan builds the model with ``model_config.max_seq_len = job_config.training.seq_len``: pytorch/torchtitan
    @ 5604ab163deb5ee50b051bf148e4bc514c08dfdb ``train.py``; long-context training runs far past the
    pretrained context, e.g. the 262,144-token context-parallel runs of the training dataset).
    """
    if cfg.pos != "rope" or phase == "train" or not cfg.max_positions:
        return None
    decode = phase == "decode"
    longest = int(context or 0) if decode else int(seq)
    if longest <= cfg.max_positions:
        return None
    what = f"decode context {longest}" if decode else f"seq {longest}"
    return (f"model {cfg.name!r}: {what} exceeds its context; got {longest} positions; expected at most "
            f"{cfg.max_positions} ({_context_source(cfg)}); a training step (--train) may run longer"
            + _longer_context_hint(cfg, longest))


def request_context_problem(cfg: Any, input_len: int, output_len: int) -> str | None:
    """The one rule a generation request (``serve``'s requests, ``predict --phase generate``) is held to: its
    prompt and output tokens within the model's context ``max_positions`` (vLLM refuses a prompt + ``max_tokens``
    beyond ``max_model_len``); the problem, else None (no stated context: unbounded)."""
    context = int(getattr(cfg, "max_positions", 0) or 0)
    total = int(input_len) + int(output_len)
    if context and total > context:
        where = f" ({_context_source(cfg)})" if isinstance(cfg, TransformerConfig) else ""
        hint = _longer_context_hint(cfg, total) if isinstance(cfg, TransformerConfig) else ""
        return (f"{int(input_len)} prompt + {int(output_len)} output tokens; got {total} tokens; expected at most "
                f"the model's context of {context}{where}{hint}")
    return None
