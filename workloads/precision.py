"""Per-tensor precision as LLM serving stacks run it: quantised weights (W8A16, W4A16, fp8 W8A8) and an fp8 KV cache.

:func:`apply_precision` is a graph pass. It re-types the weights of the linear layers (the ``matmul``
ops whose second input is a weight) to a narrow dtype and turns those ops into ``quant_matmul`` ops
that also read the quantisation scales (and zero points), and it re-types the KV cache. Weight
bytes, KV-cache bytes and the memory a report checks follow from the tensors, so nothing else has
to know about quantisation; the lowering rules price a ``quant_matmul`` per operand.

What is quantised, as the serving stacks do it:

* Weight-only int4 / int8 (GPTQ, AWQ; run by the Marlin, AWQ and ExLlama kernels in vLLM): the
  weights of every linear layer of the transformer blocks. The LM head stays 16-bit (GPTQ and
  AutoAWQ checkpoints leave ``lm_head`` unquantised; vLLM quantises it only when the checkpoint's
  config says ``lm_head: true``, ``vllm/model_executor/layers/quantization/gptq.py``), and so do
  embeddings, norms, biases and MoE routers (vLLM builds Mixtral's gate without a quantisation
  method). MoE expert weights (``grouped_matmul``) are quantised like the linear layers, one set of
  scales per expert (vLLM's fused MoE Marlin kernels), and become ``quant_grouped_matmul`` ops.
  Each group of ``group_size`` consecutive weights along the reduction dimension K of one output
  column has one fp16 scale (GPTQ/AWQ ``scales`` tensor of shape ``(K / group_size, N)``) and,
  for asymmetric quantisation (AWQ's default ``zero_point=True``; GPTQ with ``sym=False``), one
  zero point stored at the weight's width (``qzeros``: eight 4-bit zeros packed per int32). A group
  size of -1 is one group per column (GPTQ's ``group_size=-1``). Marlin's README prices the same
  layout: "0.125 bits storage overhead of the group scales" at group size 128 (16 bits / 128).
* fp8 weights (W8A8 fp8, as vLLM's ``fp8`` method and llm-compressor's ``FP8_DYNAMIC`` scheme run
  it): e4m3 weights with one fp32 scale per output channel; activations are quantised to fp8 per
  token on the fly and the products are accumulated at higher precision and written in 16 bits.
  The op's compute dtype is ``fp8_e4m3``, so a device without an fp8 tensor rate refuses it.
* MXFP4 MoE experts (``--weight-dtype mxfp4``; GPT-OSS ships so): OCP Microscaling FP4, one E2M1 element
  (4 bits) per weight and one E8M0 power-of-two scale (8 bits) per :data:`MX_BLOCK` consecutive weights
  along K (OCP "Microscaling Formats (MX) v1.0", sections 5.1 and 5.3.3: block size 32), 4.25 bits a
  weight. Only the experts are quantised: vLLM's ``Mxfp4Config.get_quant_method`` gives every
  ``LinearBase`` layer ``UnquantizedLinearMethod`` ("MXFP4 linear layer is not implemented") and leaves
  attention unquantised, its ``Mxfp4MoEMethod`` stores ``w13_weight`` / ``w2_weight`` as two E2M1 values
  a byte with a ``uint8`` scale per ``mxfp4_block = 32`` along K and bf16 biases
  (``vllm/model_executor/layers/quantization/mxfp4.py`` @ 007d50058a06); GPT-OSS's ``quantization_config``
  names ``modules_to_not_convert``: the attention, the router, the embeddings and the LM head (Hugging Face
  Transformers docs, "MXFP4"). Every backend vLLM picks by default multiplies bf16 activations
  (``get_supported_act_dtypes``: bf16; Hopper: the Triton or FlashInfer ``SM90_FI_MXFP4_BF16`` kernels,
  Ampere: Marlin, Blackwell: ``SM100_FI_MXFP4_BF16`` unless ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8`` is set),
  so the experts are priced weight-only, as int4: the packed weights and scales are read and converted
  to bf16 in registers. A K that is not a multiple of 32 (a tensor-parallel shard) takes ``ceil(K / 32)``
  scales (vLLM pads the shard; the padding's bytes are not counted).
* KV cache (vLLM ``--kv-cache-dtype fp8``, ``fp8_e4m3`` / ``fp8_e5m2``): the cache tensors and
  what attention reads from them are stored at 1 byte per element; attention math stays at the
  activation dtype.

The pass records what it did in ``graph.meta["precision"]`` (JSON-able).

Example
-------
>>> import workloads
>>> from workloads.resolve import load_workload
>>> g = load_workload("llama-2-7b", phase="decode", context=1024)
>>> q = apply_precision(g, weight_dtype="int4", kv_dtype="fp8")
>>> q.meta["precision"]["weight_dtype"], q.meta["precision"]["group_size"]
('int4', 128)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeperf.suggest import did_you_mean
from workloads.dtypes import DType
from workloads.ir import Attrs, GraphError, Op, OpGraph, Role, TensorSpec
from workloads.semantics import gemm_dims, register, semantics_of

__all__ = [
    "fp8_weights",
    "fp8_weight_numel",
    "fp8_weight_units",
    "QUANT_MATMUL",
    "QUANT_GROUPED_MATMUL",
    "WEIGHT_DTYPES",
    "KV_DTYPES",
    "DEFAULT_GROUP_SIZE",
    "SCALE_DTYPE",
    "apply_precision",
    "parse_weight_dtype",
    "parse_kv_dtype",
    "quant_operands",
    "weight_only",
    "packed_weight_bytes",
    "MX_BLOCK",
    "MX_SCALE_DTYPE",
]

#: Op kind of a linear layer with quantised weights.
QUANT_MATMUL = "quant_matmul"
#: Op kind of MoE experts (a grouped matmul) with quantised weights.
QUANT_GROUPED_MATMUL = "quant_grouped_matmul"
#: Weight dtypes the pass knows, by option value.
WEIGHT_DTYPES: dict[str, DType] = {"int8": DType.INT8, "int4": DType.INT4, "fp8": DType.FP8_E4M3,
                                   "fp8_e4m3": DType.FP8_E4M3, "mxfp4": DType.FP4_E2M1,
                                   "fp4_e2m1": DType.FP4_E2M1}
#: KV-cache dtypes, by option value (vLLM's ``--kv-cache-dtype`` names).
KV_DTYPES: dict[str, DType] = {"fp8": DType.FP8_E4M3, "fp8_e4m3": DType.FP8_E4M3, "fp8_e5m2": DType.FP8_E5M2}
#: Group size of GPTQ/AWQ checkpoints when none is given (both default to 128).
DEFAULT_GROUP_SIZE = 128
#: dtype of the group scales of int4/int8 weights (GPTQ and AWQ store ``scales`` in fp16).
SCALE_DTYPE = DType.FP16
#: dtype of the per-channel scales of fp8 weights (vLLM's ``weight_scale`` is fp32).
FP8_SCALE_DTYPE = DType.FP32
#: Elements per E8M0 scale of an MXFP4 weight (OCP MX v1.0, table 1: MXFP4 block size k = 32; vLLM
#: ``Mxfp4MoEMethod.create_weights``: ``mxfp4_block = 32``).
MX_BLOCK = 32
#: dtype of an MXFP4 block's shared scale (OCP MX v1.0: E8M0; vLLM stores it as ``uint8``).
MX_SCALE_DTYPE = DType.FP8_E8M0
#: Activation dtypes the weight-only kernels take (Marlin, AWQ and GPTQ kernels: fp16 or bf16).
_ACTIVATION_DTYPES = (DType.FP16, DType.BF16)


def parse_weight_dtype(value: str | DType, where: str = "weight_dtype") -> DType:
    """The weight dtype named ``value`` (``int8``, ``int4``, ``fp8``, ``mxfp4``: ``fp4_e2m1``); a located ValueError
    otherwise."""
    return _parse(value, WEIGHT_DTYPES, where)


def parse_kv_dtype(value: str | DType, where: str = "kv_dtype") -> DType:
    """The KV-cache dtype named ``value`` (``fp8``, ``fp8_e4m3``, ``fp8_e5m2``); a located ValueError otherwise."""
    return _parse(value, KV_DTYPES, where)


def _parse(value: str | DType, table: Mapping[str, DType], where: str) -> DType:
    names = list(table)
    if isinstance(value, DType):
        if value in table.values():
            return value
        value = value.value
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: not a dtype name; got {value!r}; expected one of {', '.join(names)}")
    s = value.strip().lower()
    if s in table:
        return table[s]
    raise ValueError(f"{where}: unsupported dtype; got {value!r}; expected one of {', '.join(names)}"
                     + did_you_mean(s, names))


# ------------------------------------------------------------------------------------------------
# the quant_matmul op kind


def quant_operands(op: Op) -> dict[str, TensorSpec | None]:
    """The named inputs of a ``quant_matmul``: ``a``, ``weight``, ``scales``, ``zeros`` and ``bias``
    (None when absent)."""
    ins = list(op.inputs)
    out: dict[str, TensorSpec | None] = {"a": ins[0], "weight": ins[1], "scales": ins[2], "zeros": None, "bias": None}
    rest = ins[3:]
    if op.attrs.get("zero_point", False) and rest:
        out["zeros"] = rest.pop(0)
    if rest:
        out["bias"] = rest.pop(0)
    return out


def _matmul_view(inputs: tuple[TensorSpec, ...], attrs: Any) -> tuple[tuple[TensorSpec, ...], int]:
    """(the plain matmul's inputs, number of quantisation tensors) of a quant_matmul's inputs."""
    if len(inputs) < 3:
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected a, weight, scales[, zeros][, bias]")
    nq = 2 if attrs.get("zero_point", False) else 1
    plain = (inputs[0], inputs[1], *inputs[2 + nq:])
    if len(plain) > 3:
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected at most {3 + nq}")
    return plain, nq


def _scale_shape(w: TensorSpec, k: int, n: int, group: int, transpose_b: bool, per_channel: bool) -> tuple[int, ...]:
    if per_channel:
        return (n,)
    groups = -(-k // group) if w.dtype is DType.FP4_E2M1 else k // group  # MXFP4: a padded last block
    return (n, groups) if transpose_b else (groups, n)


def _infer_quant_matmul(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType]]:
    plain, nq = _matmul_view(inputs, attrs)
    outs = semantics_of("matmul").infer(plain, attrs)
    w = inputs[1]
    if len(w.shape) != 2:
        raise GraphError(f"quantised weight {w.name!r} has shape {w.shape}; expected a 2-D (K, N) weight")
    tb = bool(attrs.get("transpose_b", False))
    k, n = (w.shape[1], w.shape[0]) if tb else w.shape
    group = int(attrs["group_size"])
    per_channel = w.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
    if not per_channel and (group < 1 or (k % group and w.dtype is not DType.FP4_E2M1)):
        raise GraphError(f"group size {group} does not divide K={k} of weight {w.name!r}; expected a divisor of {k}")
    want = _scale_shape(w, k, n, group, tb, per_channel)
    for t in inputs[2:2 + nq]:
        if t.shape != want:
            raise GraphError(f"quantisation tensor {t.name!r} has shape {t.shape}; expected {want} for weight "
                             f"{w.name!r} {w.shape} at group size {group}")
    return outs


def _flops_quant_matmul(op: Op) -> int:
    bt, m, n, k = gemm_dims(op)
    bias = quant_operands(op)["bias"]
    return 2 * bt * m * n * k + (op.outputs[0].numel if bias is not None else 0)


def _macs_quant_matmul(op: Op) -> int:
    bt, m, n, k = gemm_dims(op)
    return bt * m * n * k


register(QUANT_MATMUL, "contraction", _infer_quant_matmul, _flops_quant_matmul, macs=_macs_quant_matmul,
         doc="a (...,M,K) @ dequant(weight (K,N) int4/int8/fp8, scales (K/G,N) [, zeros (K/G,N)]) [+ bias]; "
             "attrs group_size, zero_point, transpose_b, compute_dtype (fp8 weights: fp8_e4m3)")


def _infer_quant_grouped(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType]]:
    nq = 2 if attrs.get("zero_point", False) else 1
    if len(inputs) != 2 + nq:
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected x, weight, scales"
                         f"{', zeros' if nq == 2 else ''}")
    outs = semantics_of("grouped_matmul").infer(inputs[:2], attrs)
    w = inputs[1]
    e, k, n = w.shape
    group = int(attrs["group_size"])
    per_channel = w.dtype in (DType.FP8_E4M3, DType.FP8_E5M2)
    if not per_channel and (group < 1 or (k % group and w.dtype is not DType.FP4_E2M1)):
        raise GraphError(f"group size {group} does not divide K={k} of weight {w.name!r}; expected a divisor of {k}")
    want = (e, *_scale_shape(w, k, n, group, False, per_channel))
    for t in inputs[2:]:
        if t.shape != want:
            raise GraphError(f"quantisation tensor {t.name!r} has shape {t.shape}; expected {want} for weight "
                             f"{w.name!r} {w.shape} at group size {group}")
    return outs


def _grouped_tokens(op: Op) -> tuple[int, int, int, int, int]:
    x, w = op.inputs[0], op.inputs[1]
    e, c, k = x.shape
    return int(op.attrs.get("tokens", e * c)), int(op.attrs.get("experts_active", e)), k, w.shape[2], e


def _macs_quant_grouped(op: Op) -> int:
    tokens, _, k, n, _ = _grouped_tokens(op)
    return tokens * k * n


def _bytes_quant_grouped(op: Op) -> tuple[int, int]:
    """Routed rows of x, the active experts' packed weights with their scales, the routed outputs."""
    tokens, active, k, n, e = _grouped_tokens(op)
    x = op.inputs[0]
    weights = sum(t.nbytes for t in op.inputs[1:]) * active // e
    return (tokens * k * x.dtype.bits + 7) // 8 + weights, (tokens * n * op.outputs[0].dtype.bits + 7) // 8


register(QUANT_GROUPED_MATMUL, "contraction", _infer_quant_grouped, lambda op: 2 * _macs_quant_grouped(op),
         macs=_macs_quant_grouped, bytes_rw=_bytes_quant_grouped,
         doc="MoE experts with quantised weights: x (E,C,K) @ dequant(weight (E,K,N), scales (E,K/G,N) "
             "[, zeros]); attrs tokens, experts_active, group_size, zero_point, compute_dtype (fp8)")


# ------------------------------------------------------------------------------------------------
# the pass


def _is_lm_head(op: Op) -> bool:
    parts = op.group.split(".") if op.group else []
    return "lm_head" in parts or op.name.split(".")[0] == "lm_head"


def _group_for(k: int, group_size: int) -> int:
    return k if group_size == -1 else group_size


def apply_precision(graph: OpGraph, *, weight_dtype: str | DType | None = None, kv_dtype: str | DType | None = None,
                    group_size: int | None = None, zero_point: bool = False) -> OpGraph:
    """``graph`` with quantised linear-layer weights and/or an fp8 KV cache (a new graph).

    Parameters
    ----------
    graph
        An inference graph (forward, prefill or decode) whose activations are fp16 or bf16.
    weight_dtype
        ``"int4"`` or ``"int8"`` (weight-only: W4A16 / W8A16, math at the activation dtype after
        dequantisation in registers), ``"fp8"`` (W8A8 fp8: fp8 math, 16-bit outputs) or ``"mxfp4"``
        (the MoE experts only, E2M1 with an E8M0 scale per 32 weights, weight-only); None keeps the
        weights.
    kv_dtype
        ``"fp8"`` (e4m3), ``"fp8_e4m3"`` or ``"fp8_e5m2"``: the KV cache's storage dtype; None keeps it.
    group_size
        Weights per scale along K for int4/int8 (default :data:`DEFAULT_GROUP_SIZE`; -1: one scale per
        output column). It must divide every quantised layer's K. fp8 weights have one scale per
        output channel and take no group size; mxfp4 weights take only :data:`MX_BLOCK` (32).
    zero_point
        Asymmetric quantisation (AWQ; GPTQ ``sym=False``): one zero point per group as well, stored
        at the weight's width. int4/int8 only.

    Returns
    -------
    OpGraph
        The same graph when both dtypes are None; otherwise a new graph with
        ``meta["precision"]`` describing the change.

    Raises
    ------
    ValueError
        An unknown dtype (with a near match), a bad group size, a training graph, activations that
        are not fp16/bf16, a group size that does not divide a layer's K (naming the op), a KV dtype
        on a graph without a KV cache, or a graph quantised already.
    """
    if weight_dtype is None and kv_dtype is None:
        if group_size is not None or zero_point:
            raise ValueError(f"{graph.name}: --group-size/zero point describe quantised weights; got no weight dtype; "
                             "expected --weight-dtype int4 or int8 with them")
        return graph
    wdt = parse_weight_dtype(weight_dtype, "--weight-dtype") if weight_dtype is not None else None
    kdt = parse_kv_dtype(kv_dtype, "--kv-dtype") if kv_dtype is not None else None
    fp8_weights = wdt in (DType.FP8_E4M3, DType.FP8_E5M2)
    mx = wdt is DType.FP4_E2M1
    group = _validated_group(graph, wdt, group_size, zero_point)
    _check_inference_graph(graph)

    retyped: dict[str, TensorSpec] = {}
    quantised: dict[str, Op] = {}  # matmul op name -> op (weights re-typed)
    kept: list[str] = []
    act_dtype: DType | None = None
    if wdt is not None:
        quantised, kept, act_dtype = _quantise_weights(graph, wdt, group, retyped)
    if kdt is not None:
        _retype_kv_cache(graph, kdt, retyped)

    ops, unchanged, n_scales = _rebuild_ops(graph, retyped, quantised, wdt, group, zero_point)
    qweights = sorted({op.inputs[1].name for op in quantised.values()})
    info: dict[str, Any] = {
        "weight_dtype": wdt.value if wdt is not None else None,
        "kv_dtype": kdt.value if kdt is not None else None,
    }
    if wdt is not None:
        info.update({
            "scheme": "mxfp4" if mx else ("w8a8-fp8" if fp8_weights else f"w{wdt.bits}a16"),
            "activation_dtype": (act_dtype or DType.BF16).value,
            "group_size": None if fp8_weights else group,
            "zero_point": bool(zero_point),
            "scale_dtype": (FP8_SCALE_DTYPE if fp8_weights else MX_SCALE_DTYPE if mx else SCALE_DTYPE).value,
            "quantized_weights": len(qweights),
            "quantized_params": int(sum(graph.tensors[n].numel for n in qweights)),
            "scale_elements": int(n_scales),
            "kept_16bit": kept,
        })
    meta = {**dict(graph.meta), "precision": info}
    return OpGraph(graph.name, ops, meta, inferred=unchanged)


def _validated_group(graph: OpGraph, wdt: DType | None, group_size: int | None, zero_point: bool) -> int:
    """The group size to use (default or given), after checking it fits the weight dtype."""
    fp8_weights = wdt in (DType.FP8_E4M3, DType.FP8_E5M2)
    if wdt is None and (group_size is not None or zero_point):
        raise ValueError(f"{graph.name}: --group-size/zero point describe quantised weights; got no --weight-dtype; "
                         "expected --weight-dtype int4 or int8 with them")
    if fp8_weights and (group_size is not None or zero_point):
        raise ValueError(f"{graph.name}: --group-size: fp8 weights have one fp32 scale per output channel; got "
                         f"--group-size {group_size}{' and a zero point' if zero_point else ''}; expected no group size "
                         "with --weight-dtype fp8 (or int4/int8 weights)")
    if wdt is DType.FP4_E2M1:
        if (group_size is not None and group_size != MX_BLOCK) or zero_point:
            raise ValueError(f"{graph.name}: --group-size: mxfp4 weights have one E8M0 scale per {MX_BLOCK} weights and "
                             f"no zero point (OCP MX v1.0); got --group-size {group_size}"
                             f"{' and a zero point' if zero_point else ''}; expected no --group-size with mxfp4")
        return MX_BLOCK
    group = DEFAULT_GROUP_SIZE if group_size is None else group_size
    if isinstance(group, bool) or not isinstance(group, int) or (group < 1 and group != -1):
        raise ValueError(f"{graph.name}: --group-size: got {group_size!r}; expected a positive integer or -1 "
                         "(one group per output column)")
    return group


def _check_inference_graph(graph: OpGraph) -> None:
    """Reject a graph whose precision is set already or that is a training graph."""
    if "precision" in graph.meta:
        raise ValueError(f"{graph.name}: the graph's precision is set already ({dict(graph.meta['precision'])}); "
                         "expected a 16-bit graph")
    phase = graph.meta.get("phase")
    if phase in ("train", "train_step") or any(t.role in (Role.GRADIENT, Role.OPTIMIZER_STATE)
                                               for t in graph.tensors.values()):
        raise ValueError(f"{graph.name}: quantised weights and KV cache are inference settings; got a training "
                         f"graph (phase {phase!r}); expected --phase forward, prefill or decode")


def _quantise_weights(graph: OpGraph, wdt: DType, group: int,
                      retyped: dict[str, TensorSpec]) -> tuple[dict[str, Op], list[str], DType | None]:
    """Re-type the linear-layer weights into ``retyped``; the quantised ops, 16-bit weights kept, activation dtype."""
    fp8_weights = wdt in (DType.FP8_E4M3, DType.FP8_E5M2)
    mx = wdt is DType.FP4_E2M1
    quantised: dict[str, Op] = {}  # matmul op name -> op (weights re-typed)
    kept: list[str] = []
    problems: list[str] = []
    act_dtype: DType | None = None
    weight_users: dict[str, list[tuple[Op, int]]] = {}
    for op in graph.ops:
        for i, t in enumerate(op.inputs):
            if t.role is Role.WEIGHT and graph.producer(t.name) is None:
                weight_users.setdefault(t.name, []).append((op, i))
    for name in sorted(weight_users):
        users = weight_users[name]
        ndim = len(graph.tensors[name].shape)
        linear = [op for op, i in users if i == 1 and ((op.kind == "matmul" and ndim == 2) or
                                                       (op.kind == "grouped_matmul" and ndim == 3))]
        if not linear:
            continue
        if len(linear) != len(users) or any(_is_lm_head(op) for op in linear) or (mx and ndim != 3):
            kept.append(name)  # LM head, tied embedding tables, weights read by other ops (mxfp4: all but experts)
            continue
        for op in linear:
            a = op.inputs[0]
            if mx and a.dtype is not DType.BF16:
                problems.append(f"op {op.name!r}: activations are {a.dtype.value}; expected bf16 (vLLM's Mxfp4Config "
                                "takes bf16 activations only: get_supported_act_dtypes; choose --dtype bf16)")
                continue
            if a.dtype not in _ACTIVATION_DTYPES:
                problems.append(f"op {op.name!r}: activations are {a.dtype.value}; expected fp16 or bf16 "
                                f"(the {wdt.value} weight kernels take 16-bit activations; choose --dtype bf16)")
                continue
            act_dtype = act_dtype or a.dtype
            k = op.inputs[1].shape[1] if op.kind == "grouped_matmul" else gemm_dims(op)[3]
            g = _group_for(k, group)
            if not fp8_weights and not mx and k % g:
                divs = [d for d in (32, 64, 128, 256) if k % d == 0]
                problems.append(f"op {op.name!r}: --group-size {g} does not divide K={k} of weight {name!r}; "
                                f"expected a divisor of {k}" + (f" such as {', '.join(map(str, divs))}" if divs
                                                                else " or -1 (one group per column)"))
                continue
            quantised[op.name] = op
        w = graph.tensors[name]
        retyped[name] = TensorSpec(name, w.shape, wdt, Role.WEIGHT)
    if problems:
        more = f" (and {len(problems) - 1} more layers)" if len(problems) > 1 else ""
        raise ValueError(f"{graph.name}: {problems[0]}{more}")
    if not quantised and mx:
        raise ValueError(f"{graph.name}: --weight-dtype mxfp4: MXFP4 checkpoints quantise the MoE experts only (vLLM's "
                         "Mxfp4Config runs every linear layer unquantised); got a model without experts; expected an "
                         "MoE model (e.g. gpt-oss-120b) or --weight-dtype int4, int8 or fp8")
    if not quantised:
        raise ValueError(f"{graph.name}: --weight-dtype {wdt.value}: no linear layer with a weight to quantise; "
                         "got none; expected a model with matmul weights (transformer blocks, MLPs)")
    return quantised, kept, act_dtype


def _retype_kv_cache(graph: OpGraph, kdt: DType, retyped: dict[str, TensorSpec]) -> None:
    """Re-type the KV cache (and the in-place appends' results) into ``retyped`` as ``kdt``."""
    phase = graph.meta.get("phase")
    caches = [t for t in graph.tensors.values() if t.role is Role.KV_CACHE]
    if not caches:
        raise ValueError(f"{graph.name}: --kv-dtype: the graph has no KV cache; got phase {phase!r}; expected "
                         "--phase prefill or decode of a decoder model")
    for t in caches:
        retyped[t.name] = TensorSpec(t.name, t.shape, kdt, t.role)
    for op in graph.ops:  # decode: the in-place append's result is the cache attention reads
        if op.kind == "kv_append" and len(op.inputs) == 2 and op.inputs[0].role is Role.KV_CACHE:
            out = op.outputs[0]
            retyped[out.name] = TensorSpec(out.name, out.shape, kdt, out.role)


def _rebuild_ops(graph: OpGraph, retyped: dict[str, TensorSpec], quantised: dict[str, Op], wdt: DType | None,
                 group: int, zero_point: bool) -> tuple[list[Op], set[str], int]:
    """The graph's ops with re-typed tensors and quant matmuls; the names left unchanged; scale elements."""
    ops: list[Op] = []
    unchanged: set[str] = set()
    n_scales = 0
    for op in graph.ops:
        ins = tuple(retyped.get(t.name, t) for t in op.inputs)
        outs = tuple(retyped.get(t.name, t) for t in op.outputs)
        if op.name in quantised:
            ins, attrs = _quantise_inputs(op, ins, wdt, group, zero_point)
            n_scales += sum(t.numel for t in ins[2:] if t.name.endswith(".scales"))
            kind = QUANT_GROUPED_MATMUL if op.kind == "grouped_matmul" else QUANT_MATMUL
            ops.append(Op(op.name, kind, ins, outs, attrs, op.group))
        elif ins == op.inputs and outs == op.outputs:
            ops.append(op)
            unchanged.add(op.name)
        else:
            ops.append(Op(op.name, op.kind, ins, outs, op.attrs, op.group))
    return ops, unchanged, n_scales


def _quantise_inputs(op: Op, ins: tuple[TensorSpec, ...], wdt: DType, group: int,
                     zero_point: bool) -> tuple[tuple[TensorSpec, ...], Attrs]:
    """The inputs (a, weight, scales[, zeros][, bias]) and attributes of ``op`` as a quant_matmul."""
    a, w = ins[0], ins[1]
    bias = ins[2:]
    tb = bool(op.attrs.get("transpose_b", False))
    experts = w.shape[:-2]  # MoE experts: one set of scales per expert
    k, n = (w.shape[-1], w.shape[-2]) if tb else w.shape[-2:]
    fp8 = wdt in (DType.FP8_E4M3, DType.FP8_E5M2)
    g = k if fp8 else _group_for(k, group)
    shape = (*experts, *_scale_shape(w, k, n, g, tb, fp8))
    sdt = FP8_SCALE_DTYPE if fp8 else MX_SCALE_DTYPE if wdt is DType.FP4_E2M1 else SCALE_DTYPE
    qs: list[TensorSpec] = [TensorSpec(f"{w.name}.scales", shape, sdt, Role.WEIGHT)]
    if zero_point and not fp8:
        qs.append(TensorSpec(f"{w.name}.zeros", shape, wdt, Role.WEIGHT))
    attrs = dict(op.attrs)
    attrs.update(group_size=g, zero_point=bool(zero_point and not fp8))
    if fp8:
        attrs["compute_dtype"] = wdt.value
    return (a, w, *qs, *bias), Attrs(attrs)


def weight_only(op: Op) -> bool:
    """Whether a ``quant_matmul`` dequantises its weights to the activation dtype (int4/int8, and mxfp4
    as every default vLLM backend runs it: bf16 activations) rather than running fp8 math."""
    return op.inputs[1].dtype in (DType.INT4, DType.INT8, DType.FP4_E2M1)


def packed_weight_bytes(op: Op) -> int:
    """Bytes of a ``quant_matmul``'s weight side: packed weights, scales and zero points."""
    q = quant_operands(op)
    return sum(t.nbytes for t in (q["weight"], q["scales"], q["zeros"]) if t is not None)



# ------------------------------------------------------------------------------------------------
# fp8 linear layers in training (torchao Float8Linear, Transformer Engine)

#: Scaling recipes of fp8 linear layers in training (``--fp8-linears``):
#:
#: * ``tensorwise``: torchao ``Float8LinearConfig`` default / ``recipe_name="tensorwise"``
#:   (docs: torchao/float8/README.md): each operand of each of the three GEMMs (output, input gradient,
#:   weight gradient) is scaled by one dynamic scale, from an ``amax`` over the whole tensor just
#:   before its cast (e4m3 for inputs and weights, e5m2 for gradients in the hybrid default).
#: * ``rowwise``: torchao ``recipe_name="rowwise"``: one scale per row of each operand along its
#:   contraction axis, from an ``amax`` per row, so each operand is cast per GEMM it feeds.
#: * ``delayed``: Transformer Engine's ``DelayedScaling`` recipe (TE docs, "Using FP8 with Transformer
#:   Engine"): the scale comes from the amax history of earlier iterations, so the cast kernel computes
#:   the new amax as it casts (no separate reduction before it), one kernel of its own or the norm's
#:   (:data:`TE_NORM_FUSED_ATTR`); the fp8 weight and its transpose are
#:   cast once per step and cached for the following microbatches (``is_first_microbatch``), which
#:   keeps 2 bytes per linear parameter resident.
#:
#: * ``current``: Transformer Engine's ``Float8CurrentScaling`` (TE docs, features/low_precision_training/
#:   fp8_current_scaling, NVIDIA/TransformerEngine @ 41f6cbf): one fp32 scale per tensor from the amax of the
#:   tensor being cast, "a memory-bound operation that requires reading the tensor twice" (amax, then scale
#:   and cast), so each operand costs an ``amax`` reduction, a scale and a cast, kernels of their own as TE 2.9
#:   launches them (:data:`TE_QUANTIZE_RECIPES`); as with every TE recipe under Megatron-Core, the fp8 weight and
#:   its transpose are cached across a step's microbatches.
#: * ``mxfp8``: TE's ``MXFP8BlockScaling`` (TE docs, features/low_precision_training/mxfp8, same commit): e4m3
#:   values with one E8M0 scale per 32 consecutive elements along the contraction axis, each block's amax
#:   found by the quantising kernel itself (no separate reduction, no scale synchronisation); rowwise and
#:   columnwise copies are quantised independently, i.e. once per GEMM that reads the operand, which is how
#:   the graph casts every operand. The E8M0 scales (1 byte per 32 values, about 1 % of the cast's traffic)
#:   are not a tensor of their own. The block-scaled GEMM needs Blackwell tensor cores ("Supported devices:
#:   SM 10.0, SM 10.3"): :data:`BLACKWELL_ONLY`, refused elsewhere by the plan evaluation.
#: * ``int8``: MaxText ``quantization: int8`` (AQT; ``_get_int8_quant_config`` in
#:   src/maxtext/layers/quantizations.py, AI-Hypercomputer/maxtext @ e591f30): ``config_v3`` with 8-bit
#:   operands in the forward, input-gradient and (``quantization_local_shard_count`` -1, its default, set to
#:   the local device count; at 770fcf7d1, the v6e GPT-3 row's commit, to ``num_slices`` by MaxText/pyconfig.py
#:   ``get_quantization_local_shard_count``, 1 on one slice: nonzero either way) weight-gradient GEMMs, int32
#:   accumulation; AQT's default calibration scales each
#:   operand per channel from its absolute maximum along the contraction axis, so each operand costs an
#:   ``amax`` per row and a cast to int8 as ``rowwise``, and the GEMM runs at the device's int8 matrix rate
#:   (``compute.tensor_flops_per_s.int8``: TPU v6e 1836 TOP/s from Google's v6e page, v5p 918 and v5e 394 from the
#:   catalog's sources). The
#:   gradients are rounded stochastically (``rng_type="jax.uniform"``): :data:`STOCHASTIC_ROUNDING`.
#:
#: Only the weighted matmuls of the transformer layers run in fp8; attention, norms, the LM head and
#: the optimizer keep their precision (torchao converts ``nn.Linear`` modules and skips the output
#: layer by its ``module_filter_fn`` in torchtitan; TE converts its Linear layers).
FP8_RECIPES = ("tensorwise", "rowwise", "delayed", "current", "mxfp8", "int8")
#: recipes whose GEMMs need a device architecture: recipe -> (architectures, what)
BLACKWELL_ONLY = {"mxfp8": (("blackwell",), "MXFP8 block-scaled GEMMs run on Blackwell tensor cores (SM 10.0+)")}
#: recipes that keep TE's fp8 weight copies across a step's microbatches (``is_first_microbatch``)
TE_WEIGHT_CACHE = ("delayed", "current", "mxfp8")
#: Op attribute (True) of a GEMM whose Transformer Engine call swizzles its two operands' MXFP8 block scales
#: into cuBLASLt's layout before the GEMM, at every call (``swizzle_scaling_factors`` /
#: ``multi_tensor_swizzle_scaling_factors`` in transformer_engine/pytorch/csrc/extensions/gemm.cpp @ v2.9);
#: priced by the device rule (:func:`simulator.lowering.gpu._with_scale_swizzle`).
SCALE_SWIZZLE_ATTR = "scale_swizzle"
#: recipes whose TE GEMMs swizzle their block scales at each call
SCALE_SWIZZLE_RECIPES = ("mxfp8",)
#: Op attribute (the recipe) of a cast that is Transformer Engine's quantize kernel of its own, and of the second
#: output that kernel writes from the same read (with :data:`QUANTIZE_OUTPUT_ATTR`): under MXFP8 every linear's
#: 16-bit operand is quantised by one ``nvte_quantize_v2`` call (``MXFP8Quantizer::quantize``,
#: transformer_engine/pytorch/csrc/quantizer.cpp @ v2.9) whose kernel (``cast_mxfp8_2D_kernel``,
#: common/util/cast_kernels.cuh @ v2.9: 64 x 64 tiles, 64 threads, TMA double buffering) reads the tensor once and
#: writes the rowwise and the columnwise copies with their E8M0 scales; it fuses with nothing before it: the RMSNorm
#: of a ``LayerNormLinear`` writes its 16-bit output and the quantizer reads it back (``rmsnorm_fwd``'s
#: ``Impl::UNFUSED`` for an MXFP8 quantizer unless ``NVTE_NORM_FWD_USE_CUDNN`` is set,
#: pytorch/csrc/extensions/normalization.cpp @ v2.9), and a ``Linear`` quantizes the attention output and the
#: output gradient it is handed. The fusion walk keeps such a cast a kernel of its own
#: (:func:`simulator.engines.walk.FusionGroup.join`); the GPU lowering prices it at the device's
#: ``efficiency.mxfp8_quantize_stream_fraction`` of the streaming rate.
TE_QUANTIZE_ATTR = "te_quantize"
#: Op attribute ("columnwise") of the second copy a :data:`TE_QUANTIZE_ATTR` kernel writes
QUANTIZE_OUTPUT_ATTR = "quantize_output"
#: recipes whose casts are :data:`TE_QUANTIZE_ATTR` kernels. Current scaling (``Float8CurrentScalingQuantizer::
#: quantize_impl``, pytorch/csrc/quantizer.cpp @ v2.9) runs three kernels per operand: ``nvte_compute_amax_with_config``
#: (a read of the 16-bit tensor), ``nvte_compute_scale_from_amax`` (one value) and ``nvte_quantize_v2`` (a second read,
#: the fp8 write); delayed scaling (``Float8Quantizer::quantize``) one, ``nvte_quantize_v2`` with a scale known
#: beforehand. Neither fuses into the kernel that made its input, except a norm's (:data:`TE_NORM_FUSED_ATTR`).
TE_QUANTIZE_RECIPES = ("delayed", "current", "mxfp8")
#: Op attribute (True) of the part of a Transformer Engine quantisation that ``rmsnorm_fwd`` / ``layernorm_fwd``
#: computes inside the norm kernel when the norm made the operand (pytorch/csrc/extensions/normalization.cpp @ v2.9):
#: a ``Float8Quantizer`` (delayed scaling) takes ``Impl::FULLY_FUSED``, the norm writes the fp8 output itself (the
#: cast); a ``Float8CurrentScalingQuantizer`` takes ``Impl::FUSED_NORM_AMAX_FP8`` unless ``NVTE_NORM_FWD_USE_CUDNN``
#: is set, the norm writes its 16-bit output and its amax (the amax), ``quantize_with_amax`` then computes the scale
#: and casts in kernels of their own. (MXFP8's ``Impl::UNFUSED`` fuses nothing.)
TE_NORM_FUSED_ATTR = "te_norm_fused"


def fp8_gemm_reads_both_layouts(compute_capability: int) -> bool:
    """Whether Transformer Engine's per-tensor fp8 GEMMs read an operand's rowwise data in both layouts on a GPU
    of ``compute_capability`` (``nvte_is_non_tn_fp8_gemm_supported``: 10.0 to 11.x and 13.0 on,
    common/transformer_engine.cpp @ v2.9): then a quantizer with columnwise usage writes no transposed copy
    (``with_transpose = columnwise_usage && !nvte_is_non_tn_fp8_gemm_supported()``, pytorch/csrc/quantizer.cpp);
    on Hopper (9.0) it writes one, ``nvte_quantize_v2``'s cast-transpose kernel."""
    cc = int(compute_capability)
    return 100 <= cc < 120 or cc >= 130
#: torchao Float8Linear recipes (``Float8LinearConfig.from_recipe_name``): scales from an amax along each
#: GEMM's contraction axis, cast by Inductor-generated kernels under torch.compile
TORCHAO_RECIPES = ("tensorwise", "rowwise")
#: Transformer Engine recipes whose input- and weight-gradient GEMMs run with TE's split accumulator (no fast
#: accumulation; :func:`_accumulation`); MXFP8's block-scaled GEMMs (Blackwell) have no such promotion
TE_SPLIT_ACCUMULATION = ("delayed", "current")
#: Access pattern of Inductor's generated kernels that read a row-major activation along its outer axis and
#: write it transposed: torchao ``rowwise``'s casts of the weight-gradient GEMM's operands (the input and the
#: output gradient, scaled per column over the tokens and written K-major for ``torch._scaled_mm``; torchao
#: ``torchao/testing/float8/roofline_utils.py`` @ 6243040: "x_bf16_dim0 -> x_float8_dim0, x_bf16_dim1", then
#: "x_bf16_dim1 -> x_float8_dim1"). Their loads do not coalesce: the GPU lowering prices the op at the device's
#: ``efficiency.outer_axis_stream_fraction`` of the streaming rate (measured on an H100, pytorch/pytorch issue
#: #149982); the amax and the cast of such an operand both read it along the outer axis, so both carry it
#: (op attribute ``access``).
OUTER_AXIS_ACCESS = "outer_axis"
#: Recipes whose backward GEMMs round the output gradient stochastically, with a noise tensor of its own per GEMM:
#: MaxText's int8 (``_get_int8_quant_config``, MaxText/layers/quantizations.py @ 770fcf7d1, the v6e GPT-3 recipe's
#: commit) calls AQT's ``config_v3(..., rng_type="jax.uniform")``, which sets ``set_stochastic_rounding(cfg,
#: vjp_lhs_stochastic_rounding=True, vjp_rhs_stochastic_rounding=False, ...)`` ("vjp_lhs_stochastic_rounding is
#: referring to the gradient") for both backward dot_generals, ``dlhs`` and ``drhs`` (google/aqt
#: aqt/jax/v2/config.py); the noise is ``JaxUniform``: ``jax.random.uniform(key, noise_shape) - 0.5`` at the
#: operand's full shape (no ``noise_sharing_axes``; aqt/jax/v2/stochastic_rounding.py), fp32. MaxText trains with
#: ``jax_default_prng_impl = "unsafe_rbg"`` (MaxText/train.py @ 770fcf7d1), whose random bits come from XLA's
#: ``RngBitGenerator``, an instruction XLA's fusion lists among the "Expensive instructions or unusual instructions
#: for which fusion is nonsensical" (xla/service/instruction_fusion.cc ``IsExpensive``; XLA:TPU's own fusion
#: decisions are not published, so this is the generic pass's rule, not a TPU profile): the noise is taken as
#: written to memory by a generator op and read by the quantising cast. The generator is priced as what it moves: an
#: ``expand`` of a 4-byte generator state to the operand's shape (attribute ``rng``), one fp32 write per element;
#: its own arithmetic is not priced (XLA:TPU's algorithm for ``RngBitGenerator`` is not published).
STOCHASTIC_ROUNDING = ("int8",)
#: The stacks that run ``int8`` (AQT, a JAX library; its noise an XLA ``RngBitGenerator``): the MaxText profiles
#: (stack ``xla-spmd``) and the generic XLA program (``xla``); no framework stands for the recipe as described.
#: No GPU stack profiled here trains with AQT: Transformer Engine's recipes are fp8 and fp4 ones
#: (transformer_engine/common/recipe/__init__.py), torchao's Float8Linear fp8 (:data:`TORCHAO_RECIPES`).
AQT_STACKS = ("xla-spmd",)
AQT_PROFILES = ("xla",)


#: The ``--fp8-linears`` recipes each ``--framework`` profile's stack runs (and this model prices as that stack
#: runs them); another recipe under the profile is refused (:func:`fp8_stack_problem`). Without ``--framework``
#: every recipe is priced as stated.
#:
#: * Megatron-Core (``megatron-core``; Megatron-Bridge builds on it): ``--fp8-recipe`` delayed, tensorwise, mxfp8 or
#:   blockwise, each a Transformer Engine recipe: ``DelayedScaling``, ``Float8CurrentScaling`` (Megatron's
#:   ``tensorwise``: this project's ``current``), ``MXFP8BlockScaling``, ``Float8BlockScaling``
#:   (megatron/core/fp8_utils.py lines 451-466, megatron/core/enums.py ``Fp8Recipe`` @ core_v0.15.0 = 103851dc;
#:   Megatron-Bridge's ``bf16_with_fp8_current_scaling_mixed`` sets ``fp8_recipe = "tensorwise"``,
#:   src/megatron/bridge/training/mixed_precision.py @ 6ef21f8). ``blockwise`` (128 x 128 blocks) is not a recipe of
#:   this model. torchao's tensorwise and rowwise casts and AQT's int8 are not Megatron's.
#: * Megatron-LM of 2021-2022 (``megatron-lm``): no fp8 option (megatron/arguments.py @ d63c2541, 2022-08-16, has
#:   none; Transformer Engine's fp8 came to Megatron-LM later): none.
#: * torchtitan (``fsdp2``, ``fsdp2-compile``, ``fsdp2-compile-blocks``, ``torchtitan-eager``): torchao
#:   ``Float8Linear`` with ``float8.recipe_name`` tensorwise, rowwise or rowwise_with_gw_hp (torchtitan
#:   config_manager.py ``Float8`` @ 820504e, 2025-06-13; before ``recipe_name``, 9dec370 of 2024-12 states dynamic
#:   (tensorwise) or torchao's own delayed scaling); its ``MX`` section (``recipe_name = "mxfp8"``, torchao's
#:   ``MXLinear``, Blackwell) is torchao's MXFP8, which this model does not price (its ``mxfp8`` is Transformer
#:   Engine's): tensorwise, rowwise.
#: * NeMo AutoModel (``automodel``, ``automodel-compile``): torchao ``Float8Linear`` (``FP8Config.recipe_name``
#:   tensorwise, rowwise or rowwise_with_gw_hp, ``convert_to_float8_training``;
#:   nemo_automodel/components/quantization/fp8.py @ 102dece4): tensorwise, rowwise.
#: * MaxText (``maxtext``, ``maxtext-cf``, ``maxtext-sc``, ``maxtext-cf-sc``, ``maxtext-serial``) and a generic XLA program (``xla``): AQT int8
#:   (``quantization: int8``, :data:`AQT_STACKS`). MaxText's ``fp8`` and ``nanoo_fp8`` are Flax's fp8 dot-general
#:   ops (``Fp8Quantization``, ``NANOOFp8Quantization`` in MaxText/layers/quantizations.py
#:   ``configure_quantization``), a GPU path this model does not price: int8.
#: * PyTorch programs (``eager``, ``sdpa``, ``compile``, ``cuda-graphs``): Hugging Face model code as written; the
#:   profiles (docs/frameworks.md) state no fp8 training library: none.
#: * Inference engines (``tensorrt``, ``trt-llm``, ``trt-llm-pytorch``, ``vllm``, ``vllm-v0``, ``sglang``,
#:   ``sglang-0.3``) train nothing: none (their fp8 is a serving precision, ``--weight-dtype``).
_TE_RECIPES = ("delayed", "current", "mxfp8")
_TITAN = TORCHAO_RECIPES
STACK_RECIPES: dict[str, tuple[str, ...]] = {
    "megatron-core": _TE_RECIPES, "megatron-lm": (),
    "fsdp2": _TITAN, "fsdp2-compile": _TITAN, "fsdp2-compile-blocks": _TITAN, "torchtitan-eager": _TITAN,
    "automodel": _TITAN, "automodel-compile": _TITAN,
    "maxtext": ("int8",), "maxtext-cf": ("int8",), "maxtext-sc": ("int8",), "maxtext-cf-sc": ("int8",),
    "maxtext-serial": ("int8",), "xla": ("int8",),
    "eager": (), "sdpa": (), "compile": (), "cuda-graphs": (),
    "tensorrt": (), "trt-llm": (), "trt-llm-pytorch": (), "vllm": (), "vllm-v0": (), "sglang": (), "sglang-0.3": ()}
#: what a recipe is (named in a refusal)
_RECIPE_OF = {"tensorwise": "torchao Float8Linear tensorwise", "rowwise": "torchao Float8Linear rowwise",
              "delayed": "Transformer Engine DelayedScaling", "current": "Transformer Engine Float8CurrentScaling",
              "mxfp8": "Transformer Engine MXFP8BlockScaling", "int8": "MaxText's AQT int8"}
#: how a stack states its recipes (named in a refusal)
_TITAN_OPTION = "torchao Float8Linear, torchtitan's float8.recipe_name"
_AUTOMODEL_OPTION = "torchao Float8Linear, NeMo AutoModel's fp8 recipe_name"
_STACK_OPTION = {"megatron-core": "Transformer Engine through Megatron-Core's --fp8-recipe",
                 "fsdp2": _TITAN_OPTION, "fsdp2-compile": _TITAN_OPTION, "fsdp2-compile-blocks": _TITAN_OPTION,
                 "torchtitan-eager": _TITAN_OPTION, "automodel": _AUTOMODEL_OPTION,
                 "automodel-compile": _AUTOMODEL_OPTION, "maxtext": "AQT, MaxText's quantization: int8",
                 "maxtext-cf": "AQT, MaxText's quantization: int8", "maxtext-sc": "AQT, MaxText's quantization: int8",
                 "maxtext-cf-sc": "AQT, MaxText's quantization: int8", "maxtext-serial": "AQT, MaxText's quantization: int8",
                 "xla": "AQT"}
#: (stack, recipe) -> (the recipe of this project the stack runs in its place, why): Megatron-Core spells
#: Transformer Engine's current scaling ``tensorwise``; torchao's stacks scale per tensor from the current amax
#: (``current``'s scaling) as ``tensorwise``, cast by torchao's kernels for every GEMM that reads an operand
_CURRENT_AS_TORCHAO = ("tensorwise", "torchao's tensorwise is the current per-tensor scaling this stack runs "
                                     "(torchao Float8Linear, an operand cast for every GEMM that reads it)")
RECIPE_SPELLINGS = {("megatron-core", "tensorwise"): (
    "current", "Megatron-Core's --fp8-recipe tensorwise is Transformer Engine's current scaling "
               "(Float8CurrentScaling)"),
    **{(s, "current"): _CURRENT_AS_TORCHAO for s in ("fsdp2", "fsdp2-compile", "fsdp2-compile-blocks",
                                                     "torchtitan-eager", "automodel", "automodel-compile")}}


def stack_runs_recipe(recipe: str | None, framework: str | None) -> bool:
    """Whether ``--framework framework`` runs the linears' ``recipe`` (:data:`STACK_RECIPES`): always without a
    recipe (``None`` or ``"none"``), without a framework, or for a profile the table does not list."""
    if recipe in (None, "none") or not framework:
        return True
    from workloads.frameworks import get_profile

    name = get_profile(framework).name
    return name not in STACK_RECIPES or recipe in STACK_RECIPES[name]


def fp8_stack_problem(recipe: str | None, framework: str | None, flag: str = "fp8_linears") -> str:
    """The problem of running the linears' ``recipe`` under ``--framework framework`` ("" when none:
    :func:`stack_runs_recipe`), as one line: the flag and recipe, the stack, what the recipe is, the recipes the
    stack runs and, where the stack spells its own recipe as ``recipe`` (:data:`RECIPE_SPELLINGS`), the name to use.

    >>> fp8_stack_problem("current", "megatron-core")
    ''
    >>> fp8_stack_problem("tensorwise", "mcore", "--fp8-linears")
    "--fp8-linears tensorwise: --framework megatron-core does not run this recipe; got 'tensorwise' (torchao Float8Linear tensorwise); expected one of delayed, current, mxfp8 (Transformer Engine through Megatron-Core's --fp8-recipe) or no --fp8-linears; did you mean 'current'? Megatron-Core's --fp8-recipe tensorwise is Transformer Engine's current scaling (Float8CurrentScaling)"
    """
    if stack_runs_recipe(recipe, framework):
        return ""
    from nodeperf.suggest import did_you_mean
    from workloads.frameworks import get_profile

    name = get_profile(str(framework)).name
    runs = STACK_RECIPES[name]
    option = _STACK_OPTION.get(name, "")
    expected = (f"{'one of ' if len(runs) > 1 else ''}{', '.join(runs)} ({option}) or no --fp8-linears" if runs else
                f"no --fp8-linears (--framework {name} runs no fp8 or int8 linear recipe)")
    head = (f"{flag} {recipe}: --framework {name} does not run this recipe; got {recipe!r} "
            f"({_RECIPE_OF.get(str(recipe), 'a recipe')}); expected {expected}")
    if (name, recipe) in RECIPE_SPELLINGS:
        same, why = RECIPE_SPELLINGS[(name, str(recipe))]
        return f"{head}; did you mean '{same}'? {why}"
    return head + (did_you_mean(str(recipe), runs) if runs else "")
#: recipe -> (quantised dtype, amax reduction: "" none, "tensor" one per tensor, "row" one per row)
_QUANT = {"tensorwise": (DType.FP8_E4M3, "tensor"), "rowwise": (DType.FP8_E4M3, "row"),
          "delayed": (DType.FP8_E4M3, ""), "current": (DType.FP8_E4M3, "tensor"), "mxfp8": (DType.FP8_E4M3, ""),
          "int8": (DType.INT8, "row")}


def _check_fp8_recipe(recipe: str, gathered_weights: bool, fp8_params: bool = False) -> None:
    """:func:`fp8_linears`' arguments: a known recipe, gathered fp8 weights with ``tensorwise`` only, fp8
    parameters with a Transformer Engine recipe only."""
    if recipe not in FP8_RECIPES:
        raise ValueError(f"fp8_linears: got {recipe!r}; expected one of {', '.join(FP8_RECIPES)}"
                         + did_you_mean(str(recipe), FP8_RECIPES))
    if gathered_weights and recipe != "tensorwise":
        raise ValueError(f"fp8_linears: gathered fp8 weights with {recipe!r}; expected 'tensorwise' (torchao gathers "
                         "fp8 weights for tensorwise scaling only)")
    if fp8_params and recipe not in TE_WEIGHT_CACHE:
        raise ValueError(f"fp8_linears: fp8 parameters with {recipe!r}; expected one of "
                         f"{', '.join(TE_WEIGHT_CACHE)} (Transformer Engine's fp8 parameters)")


def _layer_linears(step: OpGraph) -> set[str]:
    """The names of ``step``'s layer GEMMs that read a parameter weight directly (the linears a recipe converts)."""
    from workloads.recompute import layer_key

    return {op.name for op in step.ops if op.kind == "matmul" and layer_key(op.group) is not None
            and any(t.role is Role.WEIGHT for t in op.inputs[1:2]) and step.producer(op.inputs[1].name) is None}


def _te_second_layout(op: Op, i: int, q: TensorSpec, shape: tuple[int, ...], recipe: str) -> Op:
    """The second layout Transformer Engine's quantize kernel writes beside operand ``i``'s cast ``q``: MXFP8's
    columnwise copy (quantised from the same read), or per-tensor scaling's transposed copy (written on Hopper
    only, :func:`fp8_gemm_reads_both_layouts`); a copy op that joins the cast's kernel."""
    layout = "columnwise" if recipe == "mxfp8" else "transpose"
    qc = TensorSpec(f"{op.name}.fp8_{i}.{layout}", shape, _QUANT[recipe][0], Role.ACTIVATION)
    return Op(f"{op.name}.{layout}_{i}", "elementwise", (q,), (qc,),
              Attrs({"op": "copy", TE_QUANTIZE_ATTR: recipe, QUANTIZE_OUTPUT_ATTR: layout}), op.group)


def fp8_linears(step: OpGraph, recipe: str, gathered_weights: bool = False, fp8_params: bool = False) -> OpGraph:
    """The training step ``step`` with its layers' linear GEMMs (forward, recomputed and backward)
    in fp8 (int8 for ``int8``) under ``recipe`` (:data:`FP8_RECIPES`): each 16-bit operand is cast by a
    cast op, preceded by its ``amax`` reduction where the recipe scales from a separate one, and the
    GEMM's compute dtype is the quantised one with 16-bit outputs.

    torchao and AQT cast an operand for every GEMM that reads it, and their backward reads the 16-bit
    tensors the forward saved (torchao's ``matmul_with_hp_or_float8_args`` saves ``input_hp``), except
    torchao ``tensorwise``'s weight, cast once in the forward and saved in fp8, and its output gradient, cast once
    for both backward GEMMs under torch.compile (:func:`_torchao_cast_once`). Transformer Engine's recipes (:data:`TE_WEIGHT_CACHE`) quantise an activation once: the
    forward's cast of a linear's input is what its weight-gradient GEMM reads, the output gradient is cast once
    for both backward GEMMs (``transformer_engine/pytorch/module/linear.py``: ``saved_inputmat = inputmat`` kept
    with columnwise usage; ``set_usage(rowwise=True, columnwise=True)``), so a linear's 16-bit input leaves the
    stash unless another op's backward reads it. Each cast is TE's quantize kernel of its own
    (:data:`TE_QUANTIZE_ATTR`) with its second layout (:func:`_te_second_layout`); current scaling's amax and
    scale are kernels before it, except a norm's output's amax (:data:`TE_NORM_FUSED_ATTR`). torchao's recipes
    (:data:`TORCHAO_RECIPES`) under torch.compile: :func:`_quantised_operand`, :func:`_float8_tp_gathers`,
    :func:`_accumulation`, :func:`_post_scaled`, :func:`_aot_cse`. No GEMM casts the linear weights under ``gathered_weights`` (``tensorwise``; FSDP2's fp8 all-gather,
    ``ParallelPlan.fsdp_fp8_all_gather``: :func:`_gathered_weight`) or ``fp8_params`` (TE recipes;
    ``ParallelPlan.fp8_param``, Megatron's ``fp8_param_gather``: :func:`_fp8_param_weight`); otherwise a cast
    per GEMM."""
    _check_fp8_recipe(recipe, gathered_weights, fp8_params)
    linear = _layer_linears(step)
    ops: list[Op] = []
    te = recipe in TE_WEIGHT_CACHE
    root: dict[str, str] = {}  # a view's name -> the tensor it views (TE: the quantised tensor is reused)
    cast_of: dict[str, TensorSpec] = {}
    gathers = _float8_tp_gathers(step, linear) if recipe in FP8_GATHER_RECIPES else set()
    cse: dict[tuple[Any, ...], tuple[TensorSpec, TensorSpec | None]] | None = {} if _aot_cse(step, recipe) else None
    fp8_of: dict[str, TensorSpec] = {}  # a gathered 16-bit tensor (or a view of it) -> its fp8 version
    for op in step.ops:
        if _float8_tp_op(op, gathers, fp8_of, ops, recipe) or (te and _fp8_experts(op, recipe, ops)):
            continue
        if op.kind == "reshape":
            root[op.outputs[0].name] = root.get(op.inputs[0].name, op.inputs[0].name)
        base = op.name.split("@recompute")[0].split(".bwd_")[0]
        if op.kind != "matmul" or base not in linear:
            ops.append(op)
            continue
        qdt, ins = _QUANT[recipe][0], []
        amaxes: list[TensorSpec | None] = [None, None]
        for i, t in enumerate(op.inputs[:2]):
            if t.name in fp8_of:  # sequence parallelism gathered it in fp8 already
                ins.append(_gathered_fp8(op, i, fp8_of[t.name], recipe, ops))
                continue
            if t.dtype not in (DType.BF16, DType.FP16):
                ins.append(t)
                continue
            if (gathered_weights or fp8_params) and t.role is Role.WEIGHT and step.producer(t.name) is None:
                ins.append((_gathered_weight if gathered_weights else _fp8_param_weight)(op, i, t, ops))
                continue
            src = root.get(t.name, t.name)
            made = next((cast_of[k] for k in _cast_keys(op, src, te) if k in cast_of), None)
            if made is not None:  # the quantised tensor an earlier GEMM reading it made (TE; Float8 TP: _tp_cast_once)
                q = _view(made, t.shape, f"{op.name}.fp8_{i}", op.group, ops)
                ins.append(q if te else _k_major(op, i, q, ops))
                continue
            key = _cse_key(op, i, t, src) if cse is not None else None
            if key is not None and key in cse:  # the same cast of the same tensor, once (AOTAutograd's CSE)
                q, amaxes[i] = cse[key]
            else:
                noise = _rounding_noise(op, i, t, src, recipe, step, root, ops)
                q, amaxes[i] = _quantised_operand(op, i, t, recipe, ops, noise,
                                                  _sharded_amax_group(step, op, i, t, recipe))
                if key is not None:
                    cse[key] = (q, amaxes[i])
            ins.append(q)
            if te and t.role is Role.ACTIVATION:  # weights: cast per GEMM (the cache is a buffer of its own)
                cast_of[src] = q
                ops.append(_te_second_layout(op, i, q, t.shape, recipe))
            elif _tp_cast_once(step, op, i, t, recipe) or _torchao_cast_once(step, op, i, t, recipe, cse is not None):
                cast_of[_cast_keys(op, src, te)[0]] = q
        attrs = Attrs({**dict(op.attrs), "compute_dtype": qdt.value, **_accumulation(op, recipe), **_swizzle(recipe)})
        if recipe == "rowwise" and ".bwd_" in op.name and None not in amaxes:
            ops.extend(_post_scaled(op, ins, attrs, amaxes))
            continue
        ops.append(Op(op.name, op.kind, (*ins, *op.inputs[2:]), op.outputs, attrs, op.group))
    meta = dict(step.meta)
    meta["fp8_linears"] = recipe
    return OpGraph(step.name, _without_unread_views(ops) if te or cast_of else ops, meta)



#: The MoE expert GEMMs (forward, input gradient, weight gradient).
GROUPED_GEMM_KINDS = ("grouped_matmul", "grouped_matmul_bwd_data", "grouped_matmul_bwd_weight")


def _fp8_experts(op: Op, recipe: str, ops: list[Op]) -> bool:
    """Whether ``op`` is a 16-bit MoE expert GEMM, appended to ``ops`` as a Transformer Engine recipe runs it
    (``GroupedLinear``): fp8 GEMMs (16-bit
    outputs) whose 16-bit operand is quantised one expert split at a time just before (attribute
    ``fp8_quantize`` = ``recipe``; priced with the GEMM by the device rule, e.g.
    :func:`simulator.lowering.gpu._experts_gemm`): the forward quantises its input, rowwise and columnwise
    (``tex.split_quantize(inp_view, m_splits, input_quantizers)``), the input-gradient GEMM the output
    gradient, rowwise and columnwise, once for both backward GEMMs; the weight-gradient GEMM reads the two
    columnwise copies and quantises nothing (transformer_engine/pytorch/module/grouped_linear.py @ release_v2.9).
    The weights are read as fp8 (Megatron-Bridge's fp8 recipes keep fp8 parameters, ``fp8_param_gather``;
    TE caches a weight's quantised copy across microbatches otherwise), no cast priced. The backward GEMMs run
    without fast accumulation as the linears' do (:func:`_accumulation`): ``GroupedLinear``'s backward calls
    ``general_grouped_gemm(..., use_split_accumulator=_2X_ACC_DGRAD)`` and ``_2X_ACC_WGRAD``."""
    if op.kind not in GROUPED_GEMM_KINDS or op.inputs[0].dtype not in (DType.BF16, DType.FP16):
        return False
    qdt, _ = _QUANT[recipe]
    quant = {} if op.kind == "grouped_matmul_bwd_weight" else {"fp8_quantize": recipe}
    ops.append(Op(op.name, op.kind, op.inputs, op.outputs,
                  Attrs({**dict(op.attrs), "compute_dtype": qdt.value, **quant, **_accumulation(op, recipe),
                         **_swizzle(recipe)}), op.group))
    return True


def _swizzle(recipe: str) -> dict[str, bool]:
    """The :data:`SCALE_SWIZZLE_ATTR` of a Transformer Engine GEMM under ``recipe`` (MXFP8's), else nothing."""
    return {SCALE_SWIZZLE_ATTR: True} if recipe in SCALE_SWIZZLE_RECIPES else {}


def _aot_cse(step: OpGraph, recipe: str) -> bool:
    """Whether the step is a torchtitan ``--compile`` run of a torchao recipe, whose identical casts are
    computed once: AOTAutograd "Applies CSE to the graph before partitioning" (``cse = True`` in
    ``torch/_functorch/config.py``), so the linears reading one tensor in one pass (q, k and v; gate and up)
    share its amax and cast, as torchao's ``hp_tensor_to_float8_dynamic`` emits the same ops for each."""
    fw = str(step.meta.get("framework") or "")
    if recipe not in TORCHAO_RECIPES or not fw:
        return False
    from workloads.frameworks import get_profile

    prof = get_profile(fw)
    return prof.stack == "fsdp2" and bool(prof.fusion)


def _cse_key(op: Op, i: int, t: TensorSpec, src: str) -> tuple[Any, ...] | None:
    """What makes two casts of operand ``t`` the same computation: the pass (forward, recomputation,
    backward: separate graphs), the tensor, its shape as read and the scaling axis; weights are not shared
    (one per linear)."""
    if t.role is not Role.ACTIVATION:
        return None
    phase = "bwd" if ".bwd_" in op.name else ("rec" if "@recompute" in op.name else "fwd")
    return phase, src, tuple(t.shape), _contraction_axis(op, i, len(t.shape))


def _float8_tp_gathers(step: OpGraph, linear: set[str]) -> set[str]:
    """The sequence-parallel all-gathers whose gathered 16-bit tensor only linear GEMMs read (directly or
    through views): torchtitan's tensor parallelism with tensorwise float8 (``Float8ColwiseParallel``,
    ``Float8RowwiseParallel``, ``PrepareFloat8ModuleInput`` from ``torchao.float8.float8_tensor_parallel``;
    ``torchtitan/parallelisms/parallelize_llama.py`` @ 9dec370 for every float8 run,
    ``torchtitan/models/llama3/parallelize_llama.py`` @ 820504e "float8 all-gather with TP is only supported
    for tensorwise float8 scaling recipes") casts the sequence shard to fp8 and all-gathers fp8: the inputs of
    the column-parallel linears in the forward and the output gradients of the row-parallel ones in the
    backward."""
    out: set[str] = set()
    for op in step.ops:
        if op.kind != "all_gather" or "axis" not in op.attrs or op.outputs[0].dtype not in (DType.BF16, DType.FP16):
            continue
        todo, ok = [op.outputs[0].name], True
        while todo and ok:
            for c in step.consumers(todo.pop()):
                if c.kind == "reshape":
                    todo.append(c.outputs[0].name)
                elif c.kind != "matmul" or c.name.split("@recompute")[0].split(".bwd_")[0] not in linear:
                    ok = False
        if ok and step.consumers(op.outputs[0].name):
            out.add(op.name)
    return out


#: recipes whose sequence-parallel all-gathers of a linear's input or output gradient move fp8 (the shard quantised
#: before the gather): torchao ``tensorwise`` (:func:`_fp8_gather`) and Transformer Engine's current scaling
#: (:func:`_te_fp8_gather`)
FP8_GATHER_RECIPES = ("tensorwise", "current")


def _float8_tp_op(op: Op, gathers: set[str], fp8_of: dict[str, TensorSpec], ops: list[Op],
                  recipe: str = "tensorwise") -> bool:
    """Whether ``op`` was one of the fp8 sequence-parallel gathers (:data:`FP8_GATHER_RECIPES`), or a view of one,
    re-emitted in fp8 into ``ops`` (``fp8_of`` maps the 16-bit tensors to their fp8 versions, and a TE gather's
    name plus ``#shard`` to the fp8 shard it gathered)."""
    if op.name in gathers:
        fp8_of[op.outputs[0].name] = _fp8_gather(op, ops) if recipe == "tensorwise" else _te_fp8_gather(op, ops, fp8_of)
        return True
    if op.kind == "reshape" and op.inputs[0].name in fp8_of:
        out = op.outputs[0]
        fp8_of[out.name] = v = TensorSpec(out.name, out.shape, DType.FP8_E4M3, out.role)
        ops.append(Op(op.name, op.kind, (fp8_of[op.inputs[0].name],), (v,), op.attrs, op.group))
        return True
    return False


def _k_major(op: Op, i: int, q: TensorSpec, ops: list[Op]) -> TensorSpec:
    """``q`` as ``op`` reads it: a weight-gradient GEMM (``.bwd_b``) contracts over the tokens, so an fp8
    tensor gathered row-major is copied into the layout ``torch._scaled_mm`` takes (row-major A,
    column-major B): torchao's ``preprocess_addmm`` (``torchao/float8/float8_ops.py`` @ eab345c) copies
    ``a_data.contiguous()`` / ``b_data.t().contiguous().t()``; a collective's output has a fixed layout, so
    the copy is a kernel of its own (read and write of the fp8 bytes)."""
    if ".bwd_b" not in op.name and not (".bwd_a" in op.name and i == 1):
        return q
    c = TensorSpec(f"{op.name}.fp8_{i}.k_major", q.shape, q.dtype, Role.ACTIVATION)
    ops.append(Op(f"{op.name}.k_major_{i}", "elementwise", (q,), (c,), Attrs({"op": "copy"}), op.group))
    return c


def _gathered_fp8(op: Op, i: int, q: TensorSpec, recipe: str, ops: list[Op]) -> TensorSpec:
    """An fp8 tensor a sequence-parallel gather made (``q``) as ``op`` reads it: torchao's weight-gradient GEMM
    through a layout copy (:func:`_k_major`); Transformer Engine's GEMMs read it as gathered, its weight-gradient GEMM
    after the columnwise usage is added to the gathered tensor (``update_usage(columnwise_usage=True)`` after
    ``gather_along_first_dim``, transformer_engine/pytorch/module/linear.py and layernorm_linear.py @ release_v2.9):
    on Hopper a transposed copy of the gathered bytes (a kernel of its own, priced at no bytes where
    :func:`fp8_gemm_reads_both_layouts`)."""
    if recipe not in TE_QUANTIZE_RECIPES:
        return _k_major(op, i, q, ops)
    if ".bwd_b" in op.name:
        ops.append(_te_second_layout(op, i, q, q.shape, recipe))
    return q


def _te_fp8_gather(op: Op, ops: list[Op], fp8_of: dict[str, TensorSpec]) -> TensorSpec:
    """A sequence-parallel all-gather as Transformer Engine's current scaling runs it (ops appended to ``ops``; the
    fp8 gathered tensor returned). ``_customize_quantizers_float8_current_scaling`` (module/linear.py,
    module/layernorm_linear.py @ release_v2.9) sets ``with_amax_reduction`` over the TP group for a column-parallel
    input and a row-parallel output gradient under sequence parallelism, and ``gather_along_first_dim(...,
    quantizer=...)`` quantises the local shard rowwise (``supports_only_rowwise_all_gather``) and gathers fp8: the
    shard's amax (in the norm kernel when a norm made the shard, :data:`TE_NORM_FUSED_ATTR`), its all-reduce, the scale
    and cast kernels over the shard, the fp8 gather. The backward's re-gather of a column-parallel input
    (``backward_input_needs_gather``: Megatron keeps the shard, ``recompute_in_backward``) gathers the saved fp8
    shard, quantising nothing."""
    shard, full = op.inputs[0], op.outputs[0]
    qf = TensorSpec(f"{op.name}.fp8", full.shape, DType.FP8_E4M3, full.role)
    saved = fp8_of.get(op.name.split("@recompute")[0] + "#shard")
    if "@recompute" in op.name and saved is not None:
        ops.append(Op(op.name, "all_gather", (saved,), (qf,), op.attrs, op.group))
        return qf
    te = {TE_QUANTIZE_ATTR: "current"}
    amax = TensorSpec(f"{op.name}.amax", (1,), DType.FP32, Role.ACTIVATION)
    gmax = TensorSpec(f"{op.name}.amax_group", (1,), DType.FP32, Role.ACTIVATION)
    scale = TensorSpec(f"{op.name}.scale", (1,), DType.FP32, Role.ACTIVATION)
    q = TensorSpec(f"{op.name}.fp8_shard", shard.shape, DType.FP8_E4M3, Role.ACTIVATION)
    ops += [Op(f"{op.name}.amax_shard", "reduction", (shard,), (amax,),
               Attrs({"op": "max", "axes": tuple(range(len(shard.shape))), "keepdims": False, "grid_reduction": True,
                      **te, TE_NORM_FUSED_ATTR: True}), op.group),
            Op(f"{op.name}.amax_group", "all_reduce", (amax,), (gmax,), Attrs({"group_size": op.attrs.get("group_size", 1)}),
               op.group),
            Op(f"{op.name}.scale_shard", "elementwise", (gmax,), (scale,), Attrs({"op": "copy", **te}), op.group),
            Op(f"{op.name}.cast_shard", "elementwise", (shard, scale), (q,), Attrs({"op": "cast", **te}), op.group),
            Op(op.name, "all_gather", (q,), (qf,), op.attrs, op.group)]
    fp8_of[op.name + "#shard"] = q
    return qf


def _fp8_gather(op: Op, ops: list[Op]) -> TensorSpec:
    """A sequence-parallel all-gather as Float8 tensor parallelism runs it (ops appended to ``ops``): the amax
    of the local shard, its maximum over the tensor-parallel group (an all-reduce of one value: the scale is
    the whole tensor's), the cast of the shard and the all-gather of fp8 (half the bytes); the fp8 gathered
    tensor is returned."""
    shard, full = op.inputs[0], op.outputs[0]
    n = op.attrs.get("group_size", 1)
    amax = TensorSpec(f"{op.name}.amax", (1,), DType.FP32, Role.ACTIVATION)
    gmax = TensorSpec(f"{op.name}.amax_group", (1,), DType.FP32, Role.ACTIVATION)
    q = TensorSpec(f"{op.name}.fp8_shard", shard.shape, DType.FP8_E4M3, Role.ACTIVATION)
    qf = TensorSpec(f"{op.name}.fp8", full.shape, DType.FP8_E4M3, full.role)
    # named as the gather plus ".amax_" / ".cast_" (the forward-op count of workloads.parallel reads them so)
    ops += [Op(f"{op.name}.amax_shard", "reduction", (shard,), (amax,),
               Attrs({"op": "max", "axes": tuple(range(len(shard.shape))), "keepdims": False, "grid_reduction": True}),
               op.group),
            Op(f"{op.name}.amax_group", "all_reduce", (amax,), (gmax,), Attrs({"group_size": n}), op.group),
            Op(f"{op.name}.cast_shard", "elementwise", (shard, gmax), (q,), Attrs({"op": "cast"}), op.group),
            Op(op.name, "all_gather", (q,), (qf,), op.attrs, op.group)]
    return qf


def _accumulation(op: Op, recipe: str) -> dict[str, str]:
    """``{"fp8_accumulation": "split"}`` for a backward GEMM of a stack that runs it without fast accumulation,
    as the stack's code states, so cuBLASLt promotes its partial sums to FP32 as it runs
    (``efficiency.fp8_promotion_interval`` of the device):

    - torchao: ``Float8LinearConfig`` runs the output GEMM with fast accumulation (``gemm_config_output =
      Float8GemmConfig(use_fast_accum=True)``) and the input- and weight-gradient GEMMs without
      (``gemm_config_grad_input`` / ``gemm_config_grad_weight``: ``Float8GemmConfig()``, ``use_fast_accum: bool =
      False``; torchao/float8/config.py @ eab345c and @ 6243040);
    - Transformer Engine's per-tensor recipes (:data:`TE_SPLIT_ACCUMULATION`): ``_2X_ACC_FPROP = False``,
      ``_2X_ACC_DGRAD = True``, ``_2X_ACC_WGRAD = True`` (transformer_engine/pytorch/module/base.py, the
      ``use_split_accumulator`` of the delayed-scaling GEMMs) and ``Float8CurrentScaling``'s ``fp8_gemm_fprop =
      MMParams(use_split_accumulator=False)``, ``fp8_gemm_dgrad`` / ``fp8_gemm_wgrad`` ``=
      MMParams(use_split_accumulator=True)`` (transformer_engine/common/recipe/__init__.py @ 799cf76); TE's
      GEMM sets ``CUBLASLT_MATMUL_DESC_FAST_ACCUM`` to ``use_split_accumulator ? 0 : 1``
      (transformer_engine/common/gemm/cublaslt_gemm.cu)."""
    split = recipe in TORCHAO_RECIPES or recipe in TE_SPLIT_ACCUMULATION
    return {"fp8_accumulation": "split"} if split and ".bwd_" in op.name else {}


def _contraction_axis(op: Op, i: int, ndim: int) -> int:
    """The axis of ``op``'s operand ``i`` (0: a, 1: b) its GEMM contracts over, as a non-negative index."""
    if i == 0:
        return ndim - (2 if op.attrs.get("transpose_a", False) else 1)
    return ndim - (1 if op.attrs.get("transpose_b", False) else 2)


def _rounding_noise(op: Op, i: int, t: TensorSpec, src: str, recipe: str, step: OpGraph, root: dict[str, str],
                    ops: list[Op]) -> tuple[TensorSpec, ...]:
    """The noise tensor of a stochastically rounded operand (appended to ``ops``; ``()`` for any other): under
    :data:`STOCHASTIC_ROUNDING` the output gradient a backward GEMM of linear ``op`` reads (``src``: the tensor it
    views; neither the layer's weight nor its forward input, recomputed or not) is rounded with its own uniform noise
    tensor of the operand's shape, fp32, written by a random-bit generator op of its own (:data:`STOCHASTIC_ROUNDING`).
    ``step``: the graph ``op`` is from; ``root``: a view's name -> the tensor it views (a recomputed tensor's views end
    in its ``@recompute`` copy)."""
    if recipe not in STOCHASTIC_ROUNDING or ".bwd_" not in op.name or t.role is Role.WEIGHT:
        return ()
    fwd = step.op(op.name.split("@recompute")[0].split(".bwd_")[0])  # the linear's forward GEMM
    x, w = (root.get(u.name, u.name) for u in fwd.inputs[:2])
    if src.split("@recompute")[0] in (x, w):
        return ()
    key = TensorSpec(f"{op.name}.rng_key_{i}", (1,) * len(t.shape), DType.FP32, Role.ACTIVATION)
    noise = TensorSpec(f"{op.name}.noise_{i}", t.shape, DType.FP32, Role.ACTIVATION)
    ops.append(Op(f"{op.name}.noise_{i}", "expand", (key,), (noise,),
                  Attrs({"shape": tuple(t.shape), "rng": "rng_bit_generator"}), op.group))
    return (noise,)


def _quantised_operand(op: Op, i: int, t: TensorSpec, recipe: str, ops: list[Op],
                       noise: tuple[TensorSpec, ...] = (), tp_group: int = 0) -> tuple[TensorSpec, TensorSpec | None]:
    """The cast of ``op``'s 16-bit operand ``i`` under ``recipe`` (ops appended to ``ops``): ``(quantised
    tensor, the amax its scale comes from or None)``.

    The cast reads the amax it scales by. torchao's recipes (``tensorwise``, ``rowwise``) scale along the
    GEMM's contraction axis (``rowwise``: one amax per row of the operand as the GEMM reads it, so the
    weight-gradient operands and the weight of the input-gradient GEMM are scaled per column of the tensor
    as stored). An amax over the whole tensor (``tensorwise``) or over an outer axis is a reduction across
    the kernel's grid: its value exists only when its kernel has ended, so the cast is a kernel of its own
    that reads the 16-bit tensor again (attribute ``grid_reduction``; torchao
    ``torchao/float8/roofline_utils.py`` @ eab345c and ``torchao/testing/float8/roofline_utils.py`` @ 6243040
    count the same kernels: "kernel 1: x_bf16 -> max_abs_stage_1 -> tmp; kernel 2: tmp -> max_abs_stage_2 ->
    max_abs; kernel 3: x_bf16, max_abs -> to_float8"). An amax per row along the innermost axis is the
    persistent row reduction Inductor fuses with the cast that follows (one read). ``rowwise``'s amax and
    cast of an activation along its outer axis (the weight-gradient operands) carry ``access =``
    :data:`OUTER_AXIS_ACCESS` (uncoalesced loads, priced at the device's ``efficiency.outer_axis_stream_fraction``).
    ``tp_group`` > 1: the amax spans a tensor-parallel shard, its maximum over the group an all-reduce between the
    amax and the cast (:func:`_sharded_amax_group`)."""
    qdt, scaling = _QUANT[recipe]
    q = TensorSpec(f"{op.name}.fp8_{i}", t.shape, qdt, Role.ACTIVATION)
    te: dict[str, Any] = {TE_QUANTIZE_ATTR: recipe} if recipe in TE_QUANTIZE_RECIPES else {}
    if not scaling:
        norm = {TE_NORM_FUSED_ATTR: True} if recipe == "delayed" else {}
        ops.append(Op(f"{op.name}.cast_{i}", "elementwise", (t,), (q,), Attrs({"op": "cast", **te, **norm}),
                      op.group))
        return q, None
    nd = len(t.shape)
    attrs: dict[str, Any] = {"op": "max"}
    if scaling == "row":
        axis = _contraction_axis(op, i, nd) if recipe in TORCHAO_RECIPES else nd - 1
        shape = tuple(1 if d == axis else n for d, n in enumerate(t.shape))
        attrs.update(axes=(axis,), keepdims=True)
        grid = axis != nd - 1
    else:
        shape, grid = (1,), recipe in TORCHAO_RECIPES
        attrs.update(axes=tuple(range(nd)), keepdims=False)
    cast: dict[str, Any] = {"op": "cast"}
    if grid:
        attrs["grid_reduction"] = True
        if scaling == "row" and recipe in TORCHAO_RECIPES and t.role is Role.ACTIVATION:
            attrs["access"] = cast["access"] = OUTER_AXIS_ACCESS
    amax = TensorSpec(f"{op.name}.amax_{i}", shape, DType.FP32, Role.ACTIVATION)
    if te:  # TE current scaling: amax, scale and cast kernels (TE_QUANTIZE_RECIPES)
        attrs.update(te, **{TE_NORM_FUSED_ATTR: True})
        cast.update(te)
    ops.append(Op(f"{op.name}.amax_{i}", "reduction", (t,), (amax,), Attrs(attrs), op.group))
    if tp_group > 1:  # DTensor: the local amax is Partial(max); the scale's clamp all-reduces it
        local, amax = amax, TensorSpec(f"{op.name}.amax_{i}_tp", shape, DType.FP32, Role.ACTIVATION)
        ops.append(Op(amax.name, "all_reduce", (local,), (amax,), Attrs({"group_size": tp_group}),
                      op.group))
    reads = ((t, amax) if recipe in TORCHAO_RECIPES else (t,)) + noise
    if te:
        scale = TensorSpec(f"{op.name}.scale_{i}", shape, DType.FP32, Role.ACTIVATION)
        ops.append(Op(f"{op.name}.scale_{i}", "elementwise", (amax,), (scale,), Attrs({"op": "copy", **te}), op.group))
        reads = (t, scale)
    ops.append(Op(f"{op.name}.cast_{i}", "elementwise", reads, (q,), Attrs(cast), op.group))
    return q, amax


def _tp_shard(step: OpGraph, op: Op, i: int, t: TensorSpec) -> int | None:
    """The axis of ``op``'s operand ``i`` (``t``) that torchtitan's tensor parallelism shards (None: replicated, or
    no tensor parallelism). torchtitan hands torchao's ``Float8Linear`` DTensors: the weight sharded by output
    columns (``ColwiseParallel``) or input rows (``RowwiseParallel``), a row-parallel linear's input sharded on its
    last axis and a column-parallel linear's output gradient too (``Float8ColwiseParallel`` /
    ``Float8RowwiseParallel`` / ``PrepareFloat8ModuleInput`` for ``tensorwise``, the plain classes for
    ``rowwise``; torchtitan parallelize_llama.py @ 9dec370 and @ 820504e); the graph stores a weight (d_in, d_out).
    The column-parallel inputs and row-parallel output gradients are gathered (replicated)."""
    if int(step.meta.get("tp") or 1) <= 1:
        return None
    par = step.op(op.name.split("@recompute")[0].split(".bwd_")[0]).attrs.get("tensor_parallel", "")
    if par not in ("column", "row"):
        return None
    nd = len(t.shape)
    if t.role is Role.WEIGHT and step.producer(t.name) is None:
        return nd - 1 if par == "column" else nd - 2
    grad = (".bwd_a" in op.name and i == 0) or (".bwd_b" in op.name and i == 1)  # the output gradient
    return nd - 1 if (par == "column") == grad else None


def _sharded_amax_group(step: OpGraph, op: Op, i: int, t: TensorSpec, recipe: str) -> int:
    """The tensor-parallel group over which the amax of ``op``'s operand ``i`` (``t``) is all-reduced (0: none).

    ``tensor_to_amax`` takes ``torch.max(torch.abs(x))`` (tensorwise) or ``torch.amax(torch.abs(x), dim,
    keepdim=True)`` (axiswise), and ``amax_to_scale`` clamps it (torchao/float8/float8_utils.py @ eab345c and @
    6243040): on a DTensor sharded on a reduced axis (:func:`_tp_shard`) the maximum is ``Partial`` and the clamp,
    dispatched through DTensor, issues an all-reduce (torchao's own comments on the same pattern in
    ``precompute_float8_dynamic_scale_for_fsdp``, torchao/float8/fsdp_utils.py @ 6243040: "max_weights =
    torch._foreach_norm(weights, ord=math.inf)  # Partial", "clamp is dispatched through DTensor, it will issue a
    single all-reduce"). So a tensorwise amax over a TP shard is all-reduced, and a rowwise one where the GEMM
    contracts over the sharded axis (one value per row)."""
    shard = _tp_shard(step, op, i, t) if recipe in TORCHAO_RECIPES else None
    if shard is None:
        return 0
    tp = int(step.meta["tp"])
    return tp if recipe == "tensorwise" or _contraction_axis(op, i, len(t.shape)) == shard else 0


def _cast_keys(op: Op, src: str, te: bool) -> tuple[str, ...]:
    """Where a GEMM ``op`` finds a cast of tensor ``src`` an earlier GEMM made, the most recent pass first: TE's
    quantised activation serves every later GEMM (its key the tensor); a Float8 tensor-parallel cast
    (:func:`_tp_cast_once`) serves its own pass, and the backward the cast of the backward, else of the
    recomputation (a recomputed region casts again: the cast is no saved op), else of the forward."""
    if te:
        return (src,)
    if ".bwd_" in op.name:
        return f"{src}|bwd", f"{src}|rec", f"{src}|fwd"
    return (f"{src}|rec",) if "@recompute" in op.name else (f"{src}|fwd",)


def _tp_cast_once(step: OpGraph, op: Op, i: int, t: TensorSpec, recipe: str) -> bool:
    """Whether ``op``'s activation operand ``i`` is cast once per pass and read in fp8 by the linear's later GEMMs:
    under ``tensorwise`` tensor parallelism the TP-sharded activations (:func:`_tp_shard`) are cast by the parallel
    styles, not by the GEMMs: ``Float8RowwiseParallel._prepare_input_fn`` casts a row-parallel linear's input, and
    ``matmul_with_hp_or_float8_args`` saves that ``Float8Tensor`` (``ctx.save_for_backward(input_hp, ...)``), whose
    weight-gradient GEMM takes it as is (``tensor_already_casted_to_fp8``); ``Float8ColwiseParallel._prepare_output_fn``
    wraps a column-parallel output in ``NoopFwToFloat8BwDynamic``, whose backward casts the output gradient once for
    both backward GEMMs (torchao/float8/float8_tensor_parallel.py, float8_linear.py @ 6243040; @ eab345c the same
    classes, with ``manual_float8_matmul_with_args_in_float8``). The weight-gradient GEMM reads such a tensor through
    ``preprocess_addmm``'s copy into ``torch._scaled_mm``'s layout (``a_data.contiguous()`` /
    ``b_data.t().contiguous().t()``, torchao/float8/float8_ops.py): :func:`_k_major`."""
    return recipe == "tensorwise" and t.role is Role.ACTIVATION and _tp_shard(step, op, i, t) is not None


def _torchao_cast_once(step: OpGraph, op: Op, i: int, t: TensorSpec, recipe: str, compiled: bool) -> bool:
    """Whether ``op``'s operand ``i`` (``t``) is cast once per pass under torchao ``tensorwise`` and read in fp8 by the
    linear's later GEMMs (:func:`_k_major` adds ``preprocess_addmm``'s layout copy where ``torch._scaled_mm`` needs
    one). The weight: ``Float8Linear.forward`` casts it before the autograd function (``_cast_weight_to_float8_t``,
    torchao/float8/float8_linear.py @ 6243040) and ``matmul_with_hp_or_float8_args.forward`` saves that
    ``Float8Tensor`` (``ctx.save_for_backward(input_hp, weight_hp_t)``), which the backward takes as is
    (``tensor_already_casted_to_fp8(weight_hp_t)``); @ eab345c ``manual_float8_matmul_with_args_in_float8`` saves
    ``weight_fp8_t``; ``force_recompute_fp8_weight_in_bwd`` defaults to False and torchtitan leaves it so (@ 9dec370
    not set, @ 820504e its own flag defaults to False). The output gradient, under torch.compile (``compiled``): the
    two ``hp_tensor_to_float8_dynamic`` calls of the backward (``_dim0`` and ``_dim1``) are the same computation
    for a tensorwise scale (``axiswise_dim`` None), which AOTAutograd's CSE merges (:func:`_aot_cse`); @ eab345c
    ``NoopFwToFloat8BwDynamic`` casts it once for both GEMMs."""
    if recipe != "tensorwise":
        return False
    if t.role is Role.WEIGHT:
        return step.producer(t.name) is None
    grad = (".bwd_a" in op.name and i == 0) or (".bwd_b" in op.name and i == 1)
    return compiled and grad and t.role is Role.ACTIVATION


def _post_scaled(op: Op, ins: list[TensorSpec], attrs: Attrs, amaxes: list[TensorSpec | None]) -> list[Op]:
    """A rowwise backward GEMM as torchao runs it: the GEMMs without fast accumulation
    (``Float8LinearConfig``'s ``gemm_config_grad_input`` / ``gemm_config_grad_weight`` default
    ``use_fast_accum=False``) call cuBLAS's tensorwise kernel with unit scales and multiply the 16-bit
    result by the outer product of the row and column scales afterwards, ``output *= post_inverse_scale``
    ("The rowwise CUTLASS-based kernel is so slow without fast-accum that we'd rather use the tensorwise
    cuBLAS-based kernel and do the scaling manually afterwards", ``addmm_float8_unwrapped`` in
    ``torchao/float8/float8_python_api.py`` @ eab345c and ``torchao/float8/float8_ops.py`` @ 6243040): an
    elementwise kernel over the output after the library GEMM."""
    out = op.outputs[0]
    raw = TensorSpec(f"{op.name}.unscaled", out.shape, out.dtype, out.role)
    rows, cols = (*out.shape[:-1], 1), out.shape[-1]
    sa = TensorSpec(f"{op.name}.row_scale", rows, DType.FP32, Role.ACTIVATION)
    sb = TensorSpec(f"{op.name}.col_scale", (cols,), DType.FP32, Role.ACTIVATION)
    a, b = amaxes
    return [Op(op.name, op.kind, (*ins, *op.inputs[2:]), (raw,), attrs, op.group),
            Op(f"{op.name}.row_scale", "reshape", (a,), (sa,), Attrs({"shape": rows}), op.group),
            Op(f"{op.name}.col_scale", "reshape", (b,), (sb,), Attrs({"shape": (cols,)}), op.group),
            Op(f"{op.name}.post_scale", "elementwise", (raw, sa, sb), (out,), Attrs({"op": "mul"}), op.group)]


def _gathered_weight(op: Op, i: int, w: TensorSpec, ops: list[Op]) -> TensorSpec:
    """The linear weight ``w`` as ``op`` reads it when FSDP2 gathered it in fp8 (ops appended to ``ops``): the
    gathered ``Float8Tensor`` (a view op of no bytes, ``<gemm>.fp8_<i>.view``: the gather and its buffer are the
    parallel composition's), cast by no GEMM: torchao's ``Float8Linear.forward`` takes no weight scale of a
    tensor already in fp8 and ``cast_weight_to_float8_t`` returns ``weight.t()`` (torchao/float8/float8_linear.py
    @ pytorch/ao eab345c). The forward GEMM reads ``weight.t()``, column-major as ``torch._scaled_mm`` takes its
    second operand; the input-gradient GEMM (``.bwd_a``) reads ``weight_fp8_t.t()``, the row-major weight, which
    ``preprocess_addmm`` copies (``b_data.t().contiguous().t()``, torchao/float8/float8_ops.py @ eab345c): a copy
    of the fp8 bytes (``<gemm>.k_major_<i>``)."""
    q = TensorSpec(f"{op.name}.fp8_{i}", w.shape, DType.FP8_E4M3, Role.ACTIVATION)
    ops.append(Op(f"{q.name}.view", "reshape", (w,), (q,), Attrs({"shape": tuple(w.shape)}), op.group))
    if ".bwd_a" not in op.name:
        return q
    c = TensorSpec(f"{op.name}.fp8_{i}.k_major", q.shape, q.dtype, Role.ACTIVATION)
    ops.append(Op(f"{op.name}.k_major_{i}", "elementwise", (q,), (c,), Attrs({"op": "copy"}), op.group))
    return c


def _fp8_param_weight(op: Op, i: int, w: TensorSpec, ops: list[Op]) -> TensorSpec:
    """The linear weight ``w`` as ``op`` reads it when it is a Transformer Engine fp8 parameter (ops appended to
    ``ops``): a view op of no bytes (``<gemm>.fp8_<i>.view``). ``Linear``'s forward takes ``weightmat = weight``
    and ``get_weight_workspace`` returns a ``QuantizedTensor`` after ``update_usage`` without quantising it
    (transformer_engine/pytorch/module/linear.py, module/base.py @ v2.9); the input-gradient GEMM reads the same
    parameter's columnwise data (MXFP8) or its cached transpose, made when the optimizer step writes the parameter,
    not per microbatch. The step's quantisation of the master weights into the parameters is not a GEMM's."""
    q = TensorSpec(f"{op.name}.fp8_{i}", w.shape, DType.FP8_E4M3, Role.ACTIVATION)
    ops.append(Op(f"{q.name}.view", "reshape", (w,), (q,), Attrs({"shape": tuple(w.shape)}), op.group))
    return q


def _view(q: TensorSpec, shape: tuple[int, ...], name: str, group: str, ops: list[Op]) -> TensorSpec:
    """``q`` viewed as ``shape`` (a reshape op appended to ``ops`` when the shapes differ)."""
    if tuple(q.shape) == tuple(shape):
        return q
    v = TensorSpec(name, tuple(shape), q.dtype, Role.ACTIVATION)
    ops.append(Op(f"{name}.view", "reshape", (q,), (v,), Attrs({"shape": tuple(shape)}), group))
    return v


def _without_unread_views(ops: list[Op]) -> list[Op]:
    """``ops`` without the reshapes nothing reads any more (the 16-bit views a TE GEMM no longer reads)."""
    read = {t.name for op in ops for t in op.inputs}
    return [op for op in ops if op.kind != "reshape" or any(t.name in read for t in op.outputs)]


def fp8_weights(g: OpGraph) -> dict[str, tuple[str, int]]:
    """The linear weights the graph's forward GEMMs read in fp8 (their ``.fp8_1`` casts, a recomputation's
    once): name -> (wrapping unit, a layer or a top-level module: the keys the plan model's parameter units use;
    elements)."""
    from workloads.recompute import layer_key

    seen: dict[str, tuple[str, int]] = {}
    for op in g.ops:
        if op.kind == "matmul" and op.attrs.get("compute_dtype") and ".bwd_" not in op.name:
            for t in op.inputs[1:2]:
                if t.name.endswith(".fp8_1"):
                    key = layer_key(op.group) or (op.group.split(".")[0] if op.group else op.name)
                    seen[t.name.replace("@recompute", "")] = (key, t.numel)
    return seen


def fp8_weight_numel(g: OpGraph) -> float:
    """Parameters of the linear weights the graph's forward GEMMs read in fp8 (:func:`fp8_weights`)."""
    return float(sum(n for _, n in fp8_weights(g).values()))


def fp8_weight_units(g: OpGraph) -> dict[str, float]:
    """:func:`fp8_weight_numel` per wrapping unit (:func:`fp8_weights`)."""
    units: dict[str, float] = {}
    for key, numel in fp8_weights(g).values():
        units[key] = units.get(key, 0.0) + float(numel)
    return units
