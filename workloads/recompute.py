"""Activation-recomputation policies by the names the training stacks give them.

A policy decides, for every forward op of a transformer layer (a group path ending in a layer index,
``layers.3``), whether its outputs are kept for the backward pass (saved), kept in host memory
(offloaded) or recomputed from the layer's input and the saved tensors just before that layer's
backward. :func:`workloads.training.training_graph` emits the recomputed ops into the step's graph,
so their time is priced like any other op, and the backward reads their copies.

Policies (:data:`POLICIES`):

* ``none``: everything saved. ``full``: only the layer input saved (Megatron-LM
  ``--recompute-granularity full``, PyTorch's ``checkpoint`` of a whole block, MaxText ``full``).
* ``selective``: Megatron-LM's ``--recompute-granularity selective`` (Korthikanti et al. 2022,
  Sec. 4.3): the attention core (``QK^T``, softmax, dropout, ``softmax V``) is recomputed.
* ``selective-op``: torchtitan's ``selective_ac_option = "op"``
  (``torchtitan/distributed/activation_checkpoint.py``, ``_apply_op_sac``): inside each block the
  outputs of ``aten.mm`` are saved except every second one (a counter per block, in call order:
  ``wq`` saved, ``wk`` recomputed, ``wv`` saved, ``wo`` recomputed, ``w1`` saved, ``w3`` recomputed,
  ``w2`` saved), the outputs of the SDPA kernels (flash, efficient, cuDNN) and of
  ``reduce_scatter_tensor`` are saved, every other op (norms, RoPE, activations, residual adds)
  is recomputed. torchtitan's Llama runs ``wq/wk/wv`` and ``w1/w3`` as separate linears, so a
  fused projection of the zoo's graph is split into its parts first (:func:`unfuse_projections`).
* MaxText's ``remat_policy`` names (``MaxText/layers/decoders.py``, ``get_remat_policy`` and
  ``minimal_policy``; names tagged with ``checkpoint_name`` in ``layers/attentions.py`` and
  ``layers/linears.py``): ``minimal`` saves ``query_proj key_proj value_proj qkv_proj out_proj
  mlpwi mlpwi_0 mlpwi_1 mlpwo``; ``minimal_with_context`` also ``context`` (the attention output);
  ``save_dot_with_context_except_mlp`` the attention projections and ``context``;
  ``save_dot_except_mlpwi`` the attention projections and ``mlpwo``; ``save_dot_except_mlp`` the
  attention projections; ``save_qkv_proj`` the q/k/v projections; ``save_out_proj`` ``out_proj``;
  ``qkv_proj_offloaded`` and ``minimal_offloaded`` offload (``save_and_offload_only_these_names``,
  ``offload_dst="pinned_host"``) the q/k/v projections, respectively the ``minimal`` set, and save
  nothing on the device.

MaxText's ``custom`` policy (``remat_policy: custom``) chooses per checkpoint name: ``device`` (saved in
HBM), ``offload`` (saved in pinned host memory) or ``remat`` (recomputed), the names and defaults of
``src/maxtext/configs/base.yml`` at AI-Hypercomputer/maxtext e591f30 (every name ``remat``, and
``decoder_layer_input`` ``device``: "this tensor cannot be rematerialized - it serves as periodic
checkpoints"); ``get_save_and_offload_names`` in ``src/maxtext/utils/maxtext_utils.py`` turns them into
``save_and_offload_only_these_names(..., offload_src="device", offload_dst="pinned_host")``. It is
stated as ``custom:NAME=CHOICE,...`` (:func:`custom_choices`); names not given keep their default.
``decoder_layer_input`` is the tensor entering each layer (tagged in ``layers/decoders.py``): saved on
the device under every other policy, its ``offload`` moves it to the host as well. The q/k/v
projections (``query_proj``, ``key_proj``, ``value_proj``; ``kv_proj``, ``qkv_proj`` when fused) and
the gated MLP's ``mlpwi_0``/``mlpwi_1`` are one fused matmul in the zoo's graphs; when their choices
differ, the fused matmul is run as one matmul per part (:func:`unfuse_projections`), parts in the
order the zoo splits them (q, k, v; gate = ``mlpwi_0``, up = ``mlpwi_1``). Expert matmuls (grouped
matmuls of MoE layers) are ``moe_mlpwi_0``, ``moe_mlpwi_1``, ``moe_mlpwo``. MaxText names of tensors
the zoo's graphs do not have (:data:`CUSTOM_UNMODELLED`: MLA and DeepSeek-V3.2 indexer tensors,
``attention_out``, ``engram``) are accepted only at their default ``remat``.

Megatron-Core's selective recomputation of named modules (``recompute_granularity: selective`` with
``recompute_modules``; megatron/core/transformer/transformer_config.py and the modules' code at NVIDIA/Megatron-LM
core_v0.15.0) is stated as ``modules:NAME,...`` (:func:`module_names`, :data:`MEGATRON_MODULES`): everything is
saved except what the named modules recompute (:func:`module_segments`). ``core_attn`` (the attention core),
``mlp`` (a dense layer's MLP; ``transformer_layer.py``: not for a ``MoELayer``; with Transformer Engine the
pre-MLP norm is fused into ``linear_fc1``, so it is recomputed with it), ``moe`` (the whole MoE layer, shared
experts included) and ``shared_experts`` keep their input and recompute the rest (``tensor_parallel.checkpoint``);
``layernorm``, ``moe_act`` and ``mla_up_proj`` discard their output after its consumer ran and recompute it before
that consumer's backward (``CheckpointWithoutOutput``): ``layernorm`` the layer's norms that are modules of their
own (``input_layernorm`` unless it is an ``IdentityOp``, as it is when Transformer Engine fuses it into the
attention's ``linear_qkv``; a latent-attention layer keeps it; ``pre_mlp_layernorm`` in MoE layers,
gpt_layer_specs.py ``backend.layer_norm() if num_experts else IdentityOp``), ``moe_act`` the experts'
activation between their two grouped GEMMs (``experts.py`` ``bias_act_func``), ``mla_up_proj`` the latent
attention's up projections with their fused norms and the RoPE and concatenation that form q, k and v
(``multi_latent_attention.py`` ``qkv_up_proj_and_rope_apply``: the down projections' outputs are kept).

Ops are matched to those names by their place in the layer: a weight matmul of the attention block
is ``out_proj`` when its output feeds the residual add, a q/k/v projection otherwise; a weight matmul
of the MLP is ``mlpwo`` when it feeds the residual, ``mlpwi`` otherwise; the attention kernel's
output is ``context``.
"""

from __future__ import annotations

from collections.abc import Iterable

from workloads.ir import Op, OpGraph, Role, TensorSpec

__all__ = ["POLICIES", "MAXTEXT_SAVES", "CUSTOM_TENSORS", "CUSTOM_CHOICES", "CUSTOM_UNMODELLED", "policy_plan",
           "unfuse_projections", "projection_name", "layer_key", "custom_choices", "check_policy", "needs_unfuse",
           "check_modules_present", "layers_held", "config_layers_held",
           "MEGATRON_MODULES", "module_names", "module_segments", "STACK_POLICIES", "stack_accepts", "check_stack_policy",
           "policy_family", "at_reduction", "OUTPUT_DISCARDING_MODULES", "discards_output"]

#: MaxText remat policy -> (names saved on the device, names offloaded to pinned host memory)
_ATTN = ("qkv_proj", "out_proj")
MAXTEXT_SAVES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "minimal": (("qkv_proj", "out_proj", "mlpwi", "mlpwo"), ()),
    "minimal_with_context": (("qkv_proj", "out_proj", "mlpwi", "mlpwo", "context"), ()),
    "save_dot_with_context_except_mlp": (("qkv_proj", "out_proj", "context"), ()),
    "save_dot_except_mlpwi": (("qkv_proj", "out_proj", "mlpwo"), ()),
    "save_dot_except_mlp": (_ATTN, ()),
    "save_qkv_proj": (("qkv_proj",), ()),
    "save_out_proj": (("out_proj",), ()),
    "qkv_proj_offloaded": ((), ("qkv_proj",)),
    "minimal_offloaded": ((), ("qkv_proj", "out_proj", "mlpwi", "mlpwo")),
}
#: Every policy name ``--recompute`` takes (and ``custom:NAME=CHOICE,...``, :func:`custom_choices`).
POLICIES: tuple[str, ...] = ("none", "selective", "full", "selective-op", *MAXTEXT_SAVES, "custom")
#: MaxText's ``custom`` remat choices per checkpoint name (base.yml: ``['remat','device','offload']``)
CUSTOM_CHOICES = ("remat", "device", "offload")
#: MaxText checkpoint names of ``remat_policy: custom`` and their defaults (src/maxtext/configs/base.yml @ e591f30)
CUSTOM_TENSORS: dict[str, str] = {
    "decoder_layer_input": "device", "context": "remat", "mlpwi": "remat", "mlpwi_0": "remat", "mlpwi_1": "remat",
    "mlpwo": "remat", "moe_mlpwi_0": "remat", "moe_mlpwi_1": "remat", "moe_mlpwo": "remat", "query_proj": "remat",
    "key_proj": "remat", "value_proj": "remat", "kv_proj": "remat", "qkv_proj": "remat", "out_proj": "remat",
    "query_wa_proj": "remat", "kv_wa_proj": "remat", "mla_q": "remat", "mla_kv": "remat", "attention_out": "remat",
    "engram": "remat", "indexer_cutoff_threshold": "remat"}
#: names of tensors the zoo's graphs do not hold (accepted at their default only)
CUSTOM_UNMODELLED = ("query_wa_proj", "kv_wa_proj", "mla_q", "mla_kv", "attention_out", "engram",
                     "indexer_cutoff_threshold")
#: (fused projection, its parts in the zoo's split order) whose choices may differ
_FUSED_PARTS = (("qkv_proj", ("query_proj", "key_proj", "value_proj")), ("kv_proj", ("key_proj", "value_proj")),
                ("mlpwi", ("mlpwi_0", "mlpwi_1")), ("moe_mlpwi", ("moe_mlpwi_0", "moe_mlpwi_1")))


#: Megatron-Core's ``recompute_modules`` choices (transformer_config.py @ core_v0.15.0), stated as ``modules:NAME,...``
MEGATRON_MODULES = ("core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts")


#: The ``recompute_modules`` that run under ``CheckpointWithoutOutput`` (their output released after its consumer ran,
#: recomputed before that consumer's backward), as the segment names of :func:`module_segments` end: ``layernorm``'s
#: norms (``attn_norm``, ``mlp_norm``), ``moe_act``, ``mla_up_proj`` (transformer_layer.py, moe/experts.py,
#: multi_latent_attention.py @ NVIDIA/Megatron-LM 0d8e0714)
OUTPUT_DISCARDING_MODULES = ("attn_norm", "mlp_norm", "moe_act", "mla_up_proj")


def discards_output(segment: str) -> bool:
    """Whether a recomputation segment of :func:`module_segments` (``LAYER/MODULE``) is a ``CheckpointWithoutOutput``
    module's (:data:`OUTPUT_DISCARDING_MODULES`).

    >>> discards_output("layers.3/moe_act"), discards_output("layers.3/mlp_norm"), discards_output("layers.3/core_attn")
    (True, True, False)
    """
    head, sep, module = segment.rpartition("/")
    return bool(sep) and layer_key(head) == head and module in OUTPUT_DISCARDING_MODULES


def module_names(policy: str) -> tuple[str, ...]:
    """The Megatron-Core modules ``modules:NAME,...`` names, in the order given.

    Raises
    ------
    ValueError
        ``recompute modules: ...; got ...; expected ...[; did you mean ...?]`` for an empty list, an unknown or a
        repeated name.
    """
    from nodeperf.suggest import did_you_mean

    head, _, body = policy.partition(":")
    if head != "modules":
        raise ValueError(f"recompute {policy!r}: not a module policy; expected modules:NAME,...")
    names = [x.strip() for x in body.split(",")]
    if not body.strip() or any(not n for n in names):
        raise ValueError(f"recompute modules: empty module name; got {policy!r}; expected modules:NAME,... (NAME one "
                         f"of {', '.join(MEGATRON_MODULES)})")
    for i, name in enumerate(names):
        if name not in MEGATRON_MODULES:
            raise ValueError(f"recompute modules: unknown Megatron-Core module; got {name!r}; expected one of "
                             f"{', '.join(MEGATRON_MODULES)}" + did_you_mean(name, MEGATRON_MODULES))
        if name in names[:i]:
            raise ValueError(f"recompute modules: {name!r} given twice; got {policy!r}; expected each module once")
    return tuple(names)


def custom_choices(policy: str) -> dict[str, str]:
    """Every MaxText checkpoint name's choice under ``custom[:NAME=CHOICE,...]`` (defaults filled in).

    Raises
    ------
    ValueError
        ``recompute custom: NAME: ...; got ...; expected ...[; did you mean ...?]`` for an unknown name
        or choice, a repeated name, ``decoder_layer_input=remat`` or a choice other than ``remat`` for a
        name the zoo's graphs do not hold.
    """
    from nodeperf.suggest import did_you_mean

    head, sep, body = policy.partition(":")
    if head != "custom":
        raise ValueError(f"recompute {policy!r}: not a custom policy; expected custom:NAME=CHOICE,...")
    if sep and not body.strip():
        raise ValueError(f"recompute custom: empty name list; got {policy!r}; expected custom:NAME=CHOICE,... (CHOICE "
                         f"one of {', '.join(CUSTOM_CHOICES)}), or custom alone for MaxText's defaults")
    out = dict(CUSTOM_TENSORS)
    seen: set[str] = set()
    for item in (x.strip() for x in body.split(",")) if body.strip() else ():
        name, eq, choice = (s.strip() for s in item.partition("="))
        where = f"recompute custom: {name or item!r}"
        if not eq or not name:
            raise ValueError(f"{where}: got {item!r}; expected NAME=CHOICE (CHOICE one of {', '.join(CUSTOM_CHOICES)})")
        if name not in CUSTOM_TENSORS:
            raise ValueError(f"recompute custom: unknown tensor name; got {name!r}; expected one of "
                             f"{', '.join(CUSTOM_TENSORS)}" + did_you_mean(name, list(CUSTOM_TENSORS)))
        if name in seen:
            raise ValueError(f"{where}: given twice; got {item!r}; expected each name once")
        seen.add(name)
        if choice not in CUSTOM_CHOICES:
            raise ValueError(f"{where}: unknown choice; got {choice!r}; expected one of {', '.join(CUSTOM_CHOICES)}"
                             + did_you_mean(choice, CUSTOM_CHOICES))
        if name == "decoder_layer_input" and choice == "remat":
            raise ValueError(f"{where}: got 'remat'; expected device or offload (MaxText base.yml: this tensor "
                             "cannot be rematerialized, it is the start point of each layer's recomputation)")
        if name in CUSTOM_UNMODELLED and choice != "remat":
            raise ValueError(f"{where}: got {choice!r}; expected remat (the zoo's graphs hold no tensor MaxText "
                             f"names {name!r})")
        out[name] = choice
    return out


def check_policy(policy: str) -> str:
    """``policy`` when ``--recompute`` states it (a name of :data:`POLICIES` or ``custom:...``), else a
    ValueError with a did-you-mean."""
    from nodeperf.suggest import did_you_mean

    if policy in POLICIES:
        return policy
    if isinstance(policy, str) and policy.startswith("custom:"):
        custom_choices(policy)
        return policy
    if isinstance(policy, str) and policy.startswith("modules:"):
        module_names(policy)
        return policy
    raise ValueError(f"recompute: unknown recomputation policy; got {policy!r}; expected one of {', '.join(POLICIES)}"
                     ", custom:NAME=CHOICE,... or modules:NAME,..." + did_you_mean(str(policy), POLICIES))


#: The policy families each ``--framework`` profile's stack states, from the stacks' own option sets:
#:
#: * Megatron-Core (``megatron-core``): ``recompute_granularity`` ``full`` or ``selective`` (its default
#:   ``recompute_modules: ["core_attn"]``, the attention core: ``selective``), other ``recompute_modules`` lists as
#:   ``modules:NAME,...`` (megatron/core/transformer/transformer_config.py @ core_v0.15.0); no recomputation: ``none``.
#: * Megatron-LM of 2021-2022 (``megatron-lm``): ``--recompute-granularity full|selective``
#:   (NVIDIA/Megatron-LM @ d63c254 megatron/arguments.py); ``recompute_modules`` came with later Megatron-Core.
#: * torchtitan (``fsdp2``, ``fsdp2-compile``, ``fsdp2-compile-blocks``, ``torchtitan-eager``):
#:   ``activation_checkpoint.mode`` ``none``, ``full`` or ``selective`` with ``selective_ac_option = "op"``
#:   (``selective-op``; the layer-level option, every N-th block checkpointed, is not modelled) (torchtitan
#:   config_manager.py / config/job_config.py ``ActivationCheckpoint``).
#: * NeMo AutoModel (``automodel``, ``automodel-compile``): ``distributed.activation_checkpointing`` on or off,
#:   a checkpoint wrapper around each decoder layer: ``full`` or ``none``.
#: * PyTorch programs (``eager``, ``sdpa``, ``compile``, ``cuda-graphs``) and a generic XLA program (``xla``):
#:   ``torch.utils.checkpoint`` of a whole block (Hugging Face ``gradient_checkpointing_enable``), ``jax.checkpoint``
#:   of a layer: ``full`` or ``none``.
#: * MaxText (``maxtext``, ``maxtext-cf``, ``maxtext-sc``, ``maxtext-cf-sc``, ``maxtext-serial``): ``remat_policy`` ``full``, the named policies of
#:   :data:`MAXTEXT_SAVES` and ``custom`` (``MaxText/layers/decoders.py`` ``get_remat_policy``); MaxText has no
#:   policy that saves everything, ``none`` is kept as the nearest statement of no recomputation.
#: * Inference engines (``tensorrt``, ``trt-llm``, ``trt-llm-pytorch``, ``vllm``, ``vllm-v0``, ``sglang``,
#:   ``sglang-0.3``) train nothing: ``none`` only.
#:
#: A family is ``none``, ``full``, ``selective``, ``selective-op``, ``maxtext`` (a name of :data:`MAXTEXT_SAVES`),
#: ``custom`` (``custom`` and ``custom:...``) or ``modules`` (``modules:...``). Without ``--framework`` every policy
#: is priced as stated.
_TORCH = ("none", "full")
_TITAN = ("none", "full", "selective-op")
_MAXTEXT = ("none", "full", "maxtext", "custom")
STACK_POLICIES: dict[str, tuple[str, ...]] = {
    "megatron-core": ("none", "full", "selective", "modules"), "megatron-lm": ("none", "full", "selective"),
    "fsdp2": _TITAN, "fsdp2-compile": _TITAN, "fsdp2-compile-blocks": _TITAN, "torchtitan-eager": _TITAN,
    "automodel": _TORCH, "automodel-compile": _TORCH,
    "eager": _TORCH, "sdpa": _TORCH, "compile": _TORCH, "cuda-graphs": _TORCH, "xla": _TORCH,
    "maxtext": _MAXTEXT, "maxtext-cf": _MAXTEXT, "maxtext-sc": _MAXTEXT, "maxtext-cf-sc": _MAXTEXT,
    "maxtext-serial": _MAXTEXT,
    "tensorrt": ("none",), "trt-llm": ("none",), "trt-llm-pytorch": ("none",), "vllm": ("none",),
    "vllm-v0": ("none",), "sglang": ("none",), "sglang-0.3": ("none",)}
#: the stack a family comes from (named in a refusal)
_FAMILY_STACK = {"selective": "Megatron's recompute_granularity (megatron-core, megatron-lm)",
                 "selective-op": "torchtitan's op-level selective_ac_option (fsdp2, fsdp2-compile, ...)",
                 "maxtext": "a MaxText remat_policy (maxtext, maxtext-cf, maxtext-serial)",
                 "custom": "MaxText's custom remat_policy (maxtext, maxtext-cf, maxtext-serial)",
                 "modules": "Megatron-Core's recompute_modules (megatron-core)"}


def policy_family(policy: str) -> str:
    """The family of a checked policy (see :data:`STACK_POLICIES`): ``none``, ``full``, ``selective``,
    ``selective-op``, ``maxtext``, ``custom`` or ``modules``.

    >>> policy_family("save_dot_except_mlpwi"), policy_family("modules:core_attn"), policy_family("custom:mlpwo=device")
    ('maxtext', 'modules', 'custom')
    """
    if policy in MAXTEXT_SAVES:
        return "maxtext"
    return policy.partition(":")[0]


def stack_accepts(policy: str, stack: str | None) -> bool:
    """Whether ``--framework stack`` states ``policy`` (every policy without a stack, or for a profile this table
    does not list)."""
    if stack is None or stack not in STACK_POLICIES:
        return True
    return policy_family(policy) in STACK_POLICIES[stack]


def _family_names(families: Iterable[str]) -> list[str]:
    out: list[str] = []
    for f in families:
        out += {"maxtext": list(MAXTEXT_SAVES), "custom": ["custom", "custom:NAME=CHOICE,..."],
                "modules": [f"modules:NAME,... (NAME: {', '.join(MEGATRON_MODULES)})"]}.get(f, [f])
    return out


def check_stack_policy(policy: str, stack: str | None, flag: str = "--recompute") -> str:
    """``policy`` when the training stack ``--framework stack`` has it (:data:`STACK_POLICIES`), else a
    ValueError: ``--recompute NAME: --framework STACK has no such recomputation; got ...; expected one of
    ...[; did you mean ...?]``.

    >>> check_stack_policy("selective", "megatron-core")
    'selective'
    >>> check_stack_policy("minimal", "fsdp2")
    Traceback (most recent call last):
    ...
    ValueError: --recompute minimal: --framework fsdp2 has no such activation recomputation; got 'minimal' (a MaxText remat_policy (maxtext, maxtext-cf, maxtext-serial)); expected one of none, full, selective-op
    """
    from nodeperf.suggest import did_you_mean

    check_policy(policy)
    if stack_accepts(policy, stack):
        return policy
    family = policy_family(policy)
    accepted = STACK_POLICIES[str(stack)]
    names = _family_names(accepted)
    what = f" ({_FAMILY_STACK[family]})" if family in _FAMILY_STACK else ""
    plain = [n for f in accepted for n in ((list(MAXTEXT_SAVES) + ["custom"]) if f in ("maxtext", "custom") else [f])
             if f != "modules"]
    raise ValueError(f"{flag} {policy}: --framework {stack} has no such activation recomputation; got {policy!r}{what}; "
                     f"expected one of {', '.join(names)}" + did_you_mean(policy.partition(":")[0], plain))


def needs_unfuse(policy: str) -> bool:
    """Whether ``policy`` runs fused projections as one matmul per part: torchtitan's ``selective-op``,
    or a custom policy choosing differently for the parts of a fused projection."""
    if policy == "selective-op":
        return True
    if not policy.startswith("custom"):
        return False
    ch = custom_choices(policy)
    return any(len({ch[p] for p in parts}) > 1 for _, parts in _FUSED_PARTS)


def layer_key(group: str) -> str | None:
    """The group prefix ending in its first numeric component (``layers.3.attn`` -> ``layers.3``)."""
    parts = group.split(".") if group else []
    for i, p in enumerate(parts):
        if p.isdigit():
            return ".".join(parts[: i + 1])
    return None


def _weighted(op: Op) -> bool:
    return op.kind in ("matmul", "grouped_matmul") and any(t.role is Role.WEIGHT for t in op.inputs[1:2])


_PASS_THROUGH = frozenset({"reshape", "all_reduce", "reduce_scatter", "all_gather", "moe_combine", "all_to_all"})


def _feeds_residual(g: OpGraph, op: Op) -> bool:
    """Whether ``op``'s output reaches a residual add (an elementwise add of the layer group)
    through views and collectives only."""
    todo = [t.name for t in op.outputs]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for c in g.consumers(name):
            if c.kind == "elementwise" and c.attrs.get("op") == "add":
                if c.name.endswith("_residual"):
                    return True
                todo += [t.name for t in c.outputs]
            elif c.kind in _PASS_THROUGH:
                todo += [t.name for t in c.outputs]
    return False


def projection_name(g: OpGraph, op: Op) -> str | None:
    """The MaxText checkpoint name of ``op`` (``qkv_proj``, ``out_proj``, ``mlpwi``, ``mlpwo``,
    ``context``) or None."""
    if op.kind == "attention":
        return "context"
    if not _weighted(op):
        return None
    block = op.group.rsplit(".", 1)[-1] if op.group else ""
    residual = _feeds_residual(g, op)
    if block.startswith("attn") or "attention" in block:
        return "out_proj" if residual else "qkv_proj"
    if block.startswith(("mlp", "moe", "ffn")) or "expert" in op.group:
        return "mlpwo" if residual else "mlpwi"
    return None


def policy_plan(g: OpGraph, policy: str) -> tuple[set[str], set[str]]:
    """(saved op names, offloaded op names) of the layers' ops under a named full-layer policy
    (``full``, ``selective-op`` or a MaxText name); every other op of a layer is recomputed."""
    saved: set[str] = set()
    offloaded: set[str] = set()
    if policy == "full":
        return saved, offloaded
    if policy == "selective-op":
        count: dict[str, int] = {}
        for op in g.ops:
            key = layer_key(op.group)
            if key is None:
                continue
            if op.kind in ("attention", "reduce_scatter"):
                saved.add(op.name)
            elif op.kind == "matmul" and _weighted(op):
                count[key] = count.get(key, 0) + 1
                if count[key] % 2 == 1:
                    saved.add(op.name)
        return saved, offloaded
    if policy.startswith("custom"):
        return _custom_plan(g, custom_choices(policy))
    keep, off = MAXTEXT_SAVES[policy]
    for op in g.ops:
        if layer_key(op.group) is None:
            continue
        name = projection_name(g, op)
        if name in keep:
            saved.add(op.name)
        elif name in off:
            offloaded.add(op.name)
    return at_reduction(g, saved), at_reduction(g, offloaded)


def at_reduction(g: OpGraph, names: set[str]) -> set[str]:
    """``names`` (ops whose outputs a MaxText policy keeps) with each weight matmul whose output reaches its
    consumers only through a tensor-parallel reduce-scatter (reshapes between) replaced by that reduce-scatter.

    MaxText tags a projection's output with ``checkpoint_name`` on the value the einsum returns (``out =
    checkpoint_name(out, "out_proj")``, MaxText/layers/attentions.py @ f4db8e4cc; ``"mlpwo"`` in layers/linears.py)
    and lets XLA's SPMD partitioner shard it: a dot whose contracted dimension is sharded over ``tensor`` has its
    partial sums reduced where it is produced (every HLO value holds the full sum in its own sharding, here the
    residual's ``activation_embed`` over ``tensor``), so the tensor kept on the device or sent to the host is the
    reduced, sharded one: in the zoo's sequence-parallel graphs the reduce-scatter's output, ``1/tp`` of the
    matmul's, and the backward needs no second reduce-scatter to rebuild it. Grouped matmuls keep their own
    output: MaxText's expert ``mlpwo`` is tagged inside the MoE ``shard_map`` before its explicit
    ``psum_scatter`` (MaxText/layers/moe.py @ f4db8e4cc, ``sparse_matmul``), on the per-chip partial sums."""
    out = set(names)
    for name in names:
        op = g.op(name)
        if op.kind != "matmul" or not _weighted(op):
            continue
        t = op.outputs[0]
        while len(cons := g.consumers(t.name)) == 1 and cons[0].kind == "reshape":
            t = cons[0].outputs[0]
        if len(cons) == 1 and cons[0].kind == "reduce_scatter":
            out.discard(name)
            out.add(cons[0].name)
    return out


_RANK = {"remat": 0, "offload": 1, "device": 2}


def _custom_choice(g: OpGraph, op: Op, ch: dict[str, str], parts_of: dict[str, int]) -> str:
    """The choice of ``custom`` for one op of a layer: its MaxText name's (a fused projection: the
    strongest of its own name and its parts', device > offload > remat); ``remat`` for unnamed ops."""
    coarse = projection_name(g, op)
    if coarse is None:
        return "remat"
    moe = op.kind == "grouped_matmul"
    if coarse == "context" or coarse == "out_proj":
        return ch[coarse]
    if coarse == "mlpwo":
        return ch["moe_mlpwo" if moe else "mlpwo"]
    fused = dict(_FUSED_PARTS)
    stem, dot, idx = op.name.rpartition(".part")
    if dot and idx.isdigit():  # one part of an unfused projection
        n = parts_of.get(stem, 0)
        key = ("qkv_proj" if n == 3 else "kv_proj") if coarse == "qkv_proj" else ("moe_mlpwi" if moe else "mlpwi")
        parts = fused[key]
        return ch[parts[int(idx)]] if int(idx) < len(parts) else "remat"
    split = _split_sizes(g, op)
    n = len(split[1]) if split else 1
    if coarse == "qkv_proj":
        names = ("qkv_proj", *fused["qkv_proj"]) if n == 3 else ("kv_proj", *fused["kv_proj"]) if n == 2 \
            else ("query_proj",)
    else:
        key = "moe_mlpwi" if moe else "mlpwi"
        names = (*fused[key], *(("mlpwi",) if not moe else ())) if n == 2 else (("moe_mlpwi_0",) if moe else ("mlpwi",))
    return max((ch[x] for x in names), key=_RANK.__getitem__)


def _custom_plan(g: OpGraph, ch: dict[str, str]) -> tuple[set[str], set[str]]:
    """(saved, offloaded) op names of MaxText's ``custom`` policy; ``decoder_layer_input`` names the ops
    outside a layer whose outputs enter it (the previous layer's residual add, the embedding)."""
    saved: set[str] = set()
    offloaded: set[str] = set()
    parts_of: dict[str, int] = {}  # an unfused projection's name -> its number of parts
    for op in g.ops:
        stem, dot, idx = op.name.rpartition(".part")
        if dot and idx.isdigit():
            parts_of[stem] = parts_of.get(stem, 0) + 1
    for op in g.ops:
        key = layer_key(op.group)
        if key is None:
            continue
        choice = _custom_choice(g, op, ch, parts_of)
        if choice == "device":
            saved.add(op.name)
        elif choice == "offload":
            offloaded.add(op.name)
        if ch["decoder_layer_input"] == "offload":
            for t in op.inputs:
                prod = g.producer(t.name)
                if prod is not None and layer_key(prod.group) != key and t.role is Role.ACTIVATION:
                    offloaded.add(prod.name)
    return at_reduction(g, saved), at_reduction(g, offloaded)


def _split_sizes(g: OpGraph, op: Op) -> tuple[Op, tuple[int, ...]] | None:
    """(the split, its part widths) when ``op``'s only consumer splits its last axis."""
    out = op.outputs[0]
    cons = g.consumers(out.name)
    if len(cons) != 1 or cons[0].kind != "split":
        return None
    sp = cons[0]
    axis = int(sp.attrs.get("axis", -1))
    if axis not in (-1, len(out.shape) - 1):
        return None
    return sp, tuple(int(t.shape[-1]) for t in sp.outputs)


def unfuse_projections(g: OpGraph) -> OpGraph:
    """``g`` with every fused projection of a layer (a weight matmul whose output is split along
    its last axis: ``qkv``, ``gate_up``) run as one matmul per part, as PyTorch models written with
    separate ``nn.Linear`` layers run them (torchtitan's Llama: ``wq``, ``wk``, ``wv``; ``w1``,
    ``w3``). The parts' weights partition the fused weight (the same parameters and bytes); the
    parts' outputs are the split's outputs, so every consumer is unchanged."""
    ops: list[Op] = []
    drop: set[str] = set()
    for op in g.ops:
        if op.name in drop:
            continue
        parts = _split_sizes(g, op) if _weighted(op) and op.kind == "matmul" and layer_key(op.group) else None
        if parts is None:
            ops.append(op)
            continue
        sp, widths = parts
        drop.add(sp.name)
        ops += _parts(op, sp, widths)
    return OpGraph(g.name, ops, dict(g.meta))


def _parts(op: Op, sp: Op, widths: Iterable[int]) -> list[Op]:
    x, w = op.inputs[0], op.inputs[1]
    bias = op.inputs[2] if len(op.inputs) > 2 else None
    out: list[Op] = []
    for i, (width, y) in enumerate(zip(widths, sp.outputs, strict=True)):
        wi = TensorSpec(f"{w.name}.part{i}", (*w.shape[:-1], width), w.dtype, Role.WEIGHT)
        ins = [x, wi]
        if bias is not None:
            ins.append(TensorSpec(f"{bias.name}.part{i}", (width,), bias.dtype, Role.WEIGHT))
        out.append(Op(f"{op.name}.part{i}", op.kind, tuple(ins), (y,), op.attrs, op.group))
    return out


_STOP_KINDS = frozenset({"all_gather", "reduce_scatter", "all_reduce", "all_to_all", "moe_dispatch", "grouped_matmul"})


def _walk_back(g: OpGraph, start: Op, inside: str, stop_names: tuple[str, ...]) -> list[str]:
    """Names of the ops of group ``inside`` (or below it) that produce ``start``'s inputs, transitively, stopping
    before collectives, dispatches, grouped GEMMs and ops named ``*stop_names``."""
    out: list[str] = []
    todo = [t.name for t in start.inputs]
    seen: set[str] = set()
    while todo:
        prod = g.producer(todo.pop())
        if prod is None or prod.name in seen:
            continue
        seen.add(prod.name)
        if not (prod.group == inside or prod.group.startswith(inside + ".")) or prod.kind in _STOP_KINDS \
                or prod.name.endswith(stop_names) or any(t.role is Role.WEIGHT for t in prod.outputs):
            continue
        out.append(prod.name)
        todo += [t.name for t in prod.inputs]
    return out


def _layer_modules(g: OpGraph, key: str, ops: list[Op], names: tuple[str, ...]) -> dict[str, str]:
    """op name -> segment (``LAYER/MODULE``) of one layer's ops under Megatron-Core's ``recompute_modules``."""
    seg: dict[str, str] = {}
    moe = any(op.kind == "moe_router" for op in ops)
    mla = any(op.name.endswith(".kv_down") for op in ops)

    def in_group(op: Op, sub: str) -> bool:
        return op.group == f"{key}.{sub}" or op.group.startswith(f"{key}.{sub}.")

    for op in ops:
        if "layernorm" in names and op.group == key and op.kind in ("rmsnorm", "layernorm"):
            if (op.name == f"{key}.attn_norm" and mla) or (op.name == f"{key}.mlp_norm" and moe):
                seg[op.name] = f"{key}/{op.name.rsplit('.', 1)[-1]}"
        if "core_attn" in names and (op.kind in ("attention", "softmax") or (
                op.kind == "matmul" and len(op.inputs) == 2 and not _weighted(op) and "attn" in op.group)):
            seg[op.name] = f"{key}/core_attn"
        if "mlp" in names and not moe and (in_group(op, "mlp") or op.name == f"{key}.mlp_norm"):
            seg[op.name] = f"{key}/mlp"
        if "moe" in names and moe and (in_group(op, "moe") or in_group(op, "shared_expert")
                                       or op.name == f"{key}.shared_expert_add"):
            seg[op.name] = f"{key}/moe"
        elif "shared_experts" in names and in_group(op, "shared_expert"):
            seg[op.name] = f"{key}/shared_experts"
        if "moe_act" in names and op.kind == "grouped_matmul" and op.name.endswith(".experts_out"):
            seg.update(dict.fromkeys(_walk_back(g, op, op.group, ()), f"{key}/moe_act"))
        if "mla_up_proj" in names and mla and op.kind == "attention":
            seg.update(dict.fromkeys(_walk_back(g, op, op.group, (".q_down", ".kv_down", ".split_latent")),
                                     f"{key}/mla_up_proj"))
    return seg


#: module -> (what a layer must hold for it to recompute anything, how :func:`_has_layers` finds it)
_MODULE_NEEDS = {"moe_act": "MoE layers", "moe": "MoE layers", "shared_experts": "shared experts",
                 "mla_up_proj": "multi-latent attention", "mlp": "dense MLP layers"}


def layers_held(g: OpGraph) -> set[str]:
    """What of :data:`_MODULE_NEEDS` the layers of ``g`` hold (matched as :func:`_layer_modules` matches them)."""
    have: set[str] = set()
    for op in g.ops:
        key = layer_key(op.group)
        if key is None:
            continue
        have |= {"MoE layers"} if op.kind == "moe_router" else set()
        have |= {"multi-latent attention"} if op.name.endswith(".kv_down") else set()
        have |= {"shared experts"} if op.group.startswith(f"{key}.shared_expert") else set()
        have |= {"dense MLP layers"} if op.group == f"{key}.mlp" or op.group.startswith(f"{key}.mlp.") else set()
    return have


def config_layers_held(cfg: object) -> set[str]:
    """:func:`layers_held` of a whole zoo transformer ``cfg`` (a pipeline stage's graph holds only some layers)."""
    experts = getattr(cfg, "experts", 0)
    dense = not experts or getattr(cfg, "first_dense", 0) > 0 or getattr(cfg, "moe_every", 1) > 1
    return {need for need, on in (("MoE layers", experts), ("multi-latent attention", getattr(cfg, "kv_lora_rank", 0)),
                                  ("shared experts", experts and getattr(cfg, "shared_d_ff", 0)),
                                  ("dense MLP layers", dense)) if on}


def check_modules_present(have: set[str], policy: str, model: str) -> None:
    """Refuse a ``modules:NAME,...`` module whose layers ``model`` does not have (``have``: :func:`layers_held`), so
    it would recompute nothing: Megatron-Core refuses two of them itself (``TransformerConfig.__post_init__``,
    megatron/core/transformer/transformer_config.py: 'moe_act in recompute_modules is only supported with
    moe_grouped_gemm.', 'mla_up_proj in recompute_modules is only supported with multi_latent_attention.'); ``moe``,
    ``shared_experts`` and ``mlp`` (not a ``MoELayer``) on a model without such layers are dropped there without a
    word. ``layernorm`` and ``core_attn`` are always taken (``layernorm`` recomputes nothing where Transformer Engine
    fuses every norm into a linear, a stack detail of a valid recipe)."""
    if not policy.startswith("modules:"):
        return
    for name in module_names(policy):
        need = _MODULE_NEEDS.get(name)
        if need is not None and need not in have:
            held = [n for n in MEGATRON_MODULES if _MODULE_NEEDS.get(n, "") in have or n not in _MODULE_NEEDS]
            raise ValueError(f"recompute modules: {name!r} recomputes nothing; got {policy!r} on {model}, which has "
                             f"no {need}; expected modules of its layers ({', '.join(held)})")


def module_segments(g: OpGraph, policy: str) -> dict[str, str]:
    """op name -> recomputation segment of the layers' ops that ``modules:NAME,...`` recomputes (Megatron-Core's
    selective ``recompute_modules``); every other op is saved. A segment re-runs, in forward order, just before
    the backward pass first reads one of its tensors.

    Raises
    ------
    ValueError
        A module the layers of a whole model's graph do not have (:func:`check_modules_present`).
    """
    names = module_names(policy)
    if "stage_layers" not in g.meta:  # a pipeline stage holds some layers: the whole model is checked by its plan
        check_modules_present(layers_held(g), policy, g.name)
    layers: dict[str, list[Op]] = {}
    for op in g.ops:
        key = layer_key(op.group)
        if key is not None:
            layers.setdefault(key, []).append(op)
    out: dict[str, str] = {}
    for key, ops in layers.items():
        out.update(_layer_modules(g, key, ops, names))
    return out
