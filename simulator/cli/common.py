"""Arguments shared by commands that take a MODEL (graph, predict, ...) and the graph they build."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from workloads.ir import OpGraph

__all__ = ["add_model_args", "finite_float", "graph_from_args", "nonempty", "nonnegative_int", "one_of", "positive_int",
           "profile_from_args",
           "recompute_policy"]


def nonempty(text: str) -> str:
    """An option's value that must name something (a file, a dtype, a mode): an empty one is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"empty value; got {text!r}; expected a name or a path")
    return text


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"got {v}; expected a positive integer")
    return v


def finite_float(low: float | None = None, high: float | None = None, *, low_open: bool = False,
                 high_open: bool = False) -> Callable[[str], float]:
    """An argparse ``type``: a finite number within ``[low, high]`` (``low_open``/``high_open``: strict).

    NaN, infinities and numbers outside the range are refused at argument parsing, so a command never
    starts work with them (exit 2, one line naming the option).
    """
    parts = []
    if low is not None:
        parts.append(f"{'>' if low_open else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if high_open else '<='} {high:g}")
    form = "a finite number" + (f" {' and '.join(parts)}" if parts else "")

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            v = math.nan
        ok = math.isfinite(v)
        if ok and low is not None:
            ok = v > low if low_open else v >= low
        if ok and high is not None:
            ok = v < high if high_open else v <= high
        if not ok:
            raise argparse.ArgumentTypeError(f"got {text!r}; expected {form}")
        return v

    parse.__name__ = "finite number"  # argparse names the type in some messages
    return parse


def one_of(names: Callable[[], Sequence[str]] | Sequence[str], what: str = "") -> Callable[[str], str]:
    """An argparse ``type``: a value from a set of names (``names``: the names, or a function returning
    them, so the module that defines them loads only when the option is given), refused with the set
    and a did-you-mean; ``what`` prefixes the message (e.g. "unknown scaling recipe")."""

    def parse(text: str) -> str:
        allowed = tuple(names() if callable(names) else names)
        if text not in allowed:
            from nodeperf.suggest import did_you_mean

            raise argparse.ArgumentTypeError(f"{what + '; ' if what else ''}got {text!r}; expected one of "
                                             f"{', '.join(allowed)}" + did_you_mean(text, allowed))
        return text

    parse.__name__ = "name"
    return parse


def nonnegative_int(text: str) -> int:
    """An argparse ``type``: an integer >= 0 (a seed)."""
    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected an integer >= 0")
    return v


def recompute_policy(text: str) -> str:
    """A recomputation policy name (:data:`workloads.recompute.POLICIES`), or a did-you-mean refusal."""
    from workloads.recompute import check_policy

    try:
        return check_policy(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).removeprefix("recompute: ")) from None


def _group_size(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive integer or -1") from None
    if v < 1 and v != -1:
        raise argparse.ArgumentTypeError(f"got {v}; expected a positive integer or -1 (one group per column)")
    return v


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="zoo name (see `nodeperf models`), micro-workload (gemm:m=..,n=..,k=..), .onnx file, "
                        "a graph saved with `nodeperf graph MODEL --save FILE.json` (fixed shapes), or config.json")
    p.add_argument("--batch", type=positive_int, help="batch size (default: the model's)")
    p.add_argument("--seq", type=positive_int, help="sequence length, or image side for vision models")
    p.add_argument("--phase", choices=("forward", "prefill", "decode", "train", "generate"),
                   help="LLM phase (default prefill for decoders); generate: a whole request, prefill then "
                        "--output-len decode steps (predict only); train: the forward pass alone, in training mode "
                        "(dropout on); the whole training step is --train")
    p.add_argument("--context", type=positive_int,
                   help="KV-cache length already present (--phase decode only; refused with another phase, which reads "
                        "no cache)")
    p.add_argument("--train", action="store_true", help="a whole training step (forward, backward, optimizer)")
    p.add_argument("--optimizer", default="adamw", choices=("sgd", "sgd_momentum", "adam", "adamw", "none"),
                   help="optimizer of the training step (default adamw); none: the timed loop is forward and "
                        "backward only")
    p.add_argument("--recompute", default="none", type=recompute_policy, metavar="POLICY",
                   help="activation recomputation in training (default none): none, selective (Megatron's attention "
                        "core), full, selective-op (torchtitan's op-level policy) or a MaxText remat policy "
                        "(minimal, minimal_with_context, save_dot_with_context_except_mlp, save_dot_except_mlpwi, "
                        "save_dot_except_mlp, save_qkv_proj, save_out_proj, qkv_proj_offloaded, minimal_offloaded), "
                        "or MaxText's custom policy as custom:NAME=CHOICE,... (CHOICE remat, device or offload per "
                        "checkpoint name, e.g. custom:decoder_layer_input=offload,query_proj=offload), "
                        "or Megatron-Core's selective recompute_modules as modules:NAME,... (core_attn, moe_act, "
                        "layernorm, mla_up_proj, mlp, moe, shared_experts; e.g. modules:layernorm,moe_act); "
                        "with --framework only that stack's own names (megatron-core: selective, full, modules:...; "
                        "fsdp2: full, selective-op; maxtext: full, the MaxText names, custom); "
                        "see docs/training_memory.md")
    p.add_argument("--dtype", help="compute/storage dtype (bf16, fp16, fp32, fp8_e4m3, ...)")
    p.add_argument("--weight-dtype", metavar="DTYPE",
                   help="quantised linear-layer weights as serving stacks run them: int4 or int8 (weight-only, "
                        "W4A16/W8A16 with fp16 group scales), fp8 (W8A8 fp8), mxfp4 (MoE experts only: E2M1 with "
                        "an E8M0 scale per 32, weight-only), bf16 (16-bit weights); the LM head stays 16-bit; "
                        "default for inference: the published checkpoint's format (mxfp4 experts for gpt-oss-*) "
                        "with bf16, else --dtype")
    p.add_argument("--kv-dtype", metavar="DTYPE", help="KV-cache storage dtype: fp8 (e4m3), fp8_e4m3 or fp8_e5m2")
    p.add_argument("--group-size", type=_group_size, metavar="N",
                   help="int4/int8 weights per fp16 scale along K (default 128; -1: one scale per output column)")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="importers: cost unknown operators by their bytes (with a warning) instead of failing")
    p.add_argument("--framework", metavar="NAME", default=None,
                   help="software stack the prediction stands for: eager (PyTorch/Hugging Face, attention "
                        "unfused), sdpa, compile, cuda-graphs, tensorrt, trt-llm, trt-llm-pytorch, vllm, vllm-v0, "
                        "sglang, sglang-0.3, xla; training "
                         "stacks for parallel plans: fsdp2 (torchtitan), fsdp2-compile (torchtitan --compile), "
                         "fsdp2-compile-blocks (torchtitan --compile before 2025-04: loss eager), torchtitan-eager "
                         "(torchtitan without --compile before 2025-03-19: its RMSNorm and RoPE op by op), "
                         "automodel (NeMo AutoModel's FSDP2), automodel-compile (FSDP2 under torch.compile, "
                         "real-valued RoPE), megatron-core, megatron-lm (Megatron-LM of 2021-2022), "
                         "maxtext, maxtext-cf, maxtext-sc, maxtext-cf-sc, maxtext-serial (TPUs; all-gathers overlapped, "
                         "gradient reductions serial as XLA:TPU's defaults run them; -cf: XLA continuation fusion of "
                         "all-gathers; -sc: reductions offloaded to the SparseCore and overlapped; -serial: no "
                         "collective overlapped with compute); changes the "
                        "graph (transformers), the costing and a plan's sharding and overlap (see "
                        "docs/frameworks.md, docs/training.md); default: none, the inference-engine graph as before")
    p.add_argument("--attention", choices=("fused", "decomposed"),
                   help="attention as one fused kernel or decomposed over the full s x s scores (transformers; "
                        "default: the framework's, else fused)")
    p.add_argument("--autocast", action="store_true",
                   help="PyTorch under torch.autocast (with --framework eager, sdpa or compile, a 16-bit --dtype, "
                        "inference): the weights stay fp32 and every convolution / linear layer casts its weight "
                        "to --dtype once per forward (a compiled program runs the casts on every call)")


def check_training_flags(args: argparse.Namespace) -> None:
    """``--recompute`` and ``--optimizer`` shape a training step's backward pass and update: without ``--train``
    they are refused, not dropped (an inference step, or ``--phase train``'s forward pass, has neither). A
    ``--recompute`` policy the ``--framework`` stack does not have (:data:`workloads.recompute.STACK_POLICIES`) is
    refused with the names it has."""
    if args.train:
        recompute = getattr(args, "recompute", "none")
        profile = profile_from_args(args)
        if profile is not None:
            from workloads.frameworks import check_profile_trains

            check_profile_trains(profile)
        if getattr(args, "context", None) is not None:  # a decode step's KV cache: a training step reads none
            raise ValueError(f"--context {args.context}: the KV cache a decode step reads; got --train; "
                             "expected no --context (a training step's length is --seq)")
        if recompute not in (None, "none") and profile is not None:
            from workloads.recompute import check_stack_policy

            check_stack_policy(recompute, profile.name)
        return
    optimizer = getattr(args, "optimizer", "adamw")
    if optimizer == "none":
        raise ValueError("--optimizer none: only a training step has an optimizer; got no --train; expected --train")
    if optimizer != "adamw":  # adamw is the default: given or not, nothing is dropped
        raise ValueError(f"--optimizer {optimizer}: only a training step has an optimizer; got no --train; expected "
                         "--train")
    recompute = getattr(args, "recompute", "none")
    if recompute not in (None, "none"):
        got = ("--phase train without --train (--phase train is the forward pass of a training step, without its "
               "backward)") if getattr(args, "phase", None) == "train" else "no --train"
        raise ValueError(f"--recompute {recompute}: activation recomputation is a training option; got {got}; "
                         "expected --train")


def check_context_phase(args: argparse.Namespace) -> None:
    """--context is the KV cache a decode step reads: outside --phase decode no builder reads it, so it is refused,
    not dropped (--train has its own message; a saved graph or ONNX file is answered by its loader)."""
    context = getattr(args, "context", None)
    if context is None or getattr(args, "train", False) or getattr(args, "phase", None) == "decode":
        return
    if getattr(args, "phase", None) is None:
        if str(args.model).lower().endswith((".json", ".onnx")):
            return
        got = "no --phase (the model's default: prefill for a decoder, else forward)"
    else:
        got = f"--phase {args.phase}" + (" (its prompt is --input-len)" if args.phase == "generate" else "")
    raise ValueError(f"--context {context}: the KV cache a decode step reads; got {got}; expected "
                     "--phase decode, or no --context")


def graph_from_args(args: argparse.Namespace) -> OpGraph:
    if args.phase == "generate":
        raise ValueError("--phase generate: a whole request (one prefill, then decode steps) is not one graph; "
                         "expected --phase prefill or decode here, or `nodeperf predict MODEL --phase generate "
                         "--input-len N --output-len M`")
    from workloads.resolve import load_workload

    profile = profile_from_args(args)
    optimizer = getattr(args, "optimizer", "adamw")
    check_training_flags(args)
    check_context_phase(args)
    extra: dict[str, Any] = {}
    attention = getattr(args, "attention", None)
    if (profile is not None and profile.changes_graph) or attention:
        if not _takes_stack_options(args.model):
            if attention:
                raise ValueError(f"--attention {attention}: model {args.model!r} is not a transformer the builder "
                                 "emits (zoo transformer or Hugging Face config.json); expected no --attention")
        else:
            if profile is not None:
                extra["framework"] = profile.name
            if attention:
                extra["attention"] = attention
    graph = load_workload(args.model, batch=args.batch, seq=args.seq, phase=args.phase, context=args.context,
                          train=args.train, dtype=args.dtype, optimizer="adamw" if optimizer == "none" else optimizer,
                          recompute=args.recompute, strict=args.strict, **extra)
    if optimizer == "none":
        from workloads.frameworks import drop_optimizer

        graph = drop_optimizer(graph)
    if profile is not None and "framework" not in extra:
        from workloads.frameworks import with_profile_meta

        graph = with_profile_meta(graph, profile)
    if getattr(args, "autocast", False):
        graph = _with_autocast(graph, args, profile)
    if profile is not None and profile.name == "compile" and not args.train and conv_layout_of(args, profile) == "nhwc":
        # Inductor's layout optimisation copies contiguous input weights to channels last on every call
        from workloads.frameworks import inductor_layout_copies

        graph = inductor_layout_copies(graph)
    return _with_precision(graph, args)


def _with_autocast(graph: OpGraph, args: argparse.Namespace, profile: Any) -> OpGraph:
    """``graph`` as eager PyTorch runs it under ``torch.autocast`` (--autocast; located errors)."""
    from workloads.frameworks import autocast_weight_casts

    if profile is None or profile.name not in ("eager", "sdpa", "compile"):
        got = profile.name if profile is not None else "no --framework"
        raise ValueError(f"--autocast: a torch.autocast region of PyTorch; got {got}; expected --framework "
                         "eager, sdpa or compile (engines and serving stacks keep their weights in the low "
                         "precision)")
    dtypes = {t.dtype.value for op in graph for t in op.inputs if t.role == "weight"}
    if not dtypes & {"fp16", "bf16"}:
        raise ValueError(f"--autocast: casts fp32 weights to a 16-bit dtype; got weights in {', '.join(sorted(dtypes))}; "
                         "expected --dtype fp16 or bf16")
    if args.train:
        raise ValueError("--autocast: an inference forward; got --train; expected no --train (a training step's "
                         "casts are a small part of it and not modelled)")
    quant = [f for f in ("weight_dtype", "kv_dtype") if getattr(args, f, None)]
    if quant:
        raise ValueError(f"--autocast: fp32 weights cast per forward; got --{quant[0].replace('_', '-')} as well; "
                         "expected one of them (a quantised serving model is not run under autocast)")
    return autocast_weight_casts(graph)


#: ``--weight-dtype`` values that ask for the 16-bit weights (the activations' dtype) instead of a checkpoint's format
SIXTEEN_BIT_WEIGHTS = ("bf16", "fp16", "16-bit", "none")


def checkpoint_weights(args: argparse.Namespace, *, inference: bool) -> str:
    """Resolve ``args.weight_dtype`` in place as ``predict`` / ``serve`` price a model: a stated 16-bit name
    (:data:`SIXTEEN_BIT_WEIGHTS`) becomes None (the weights at ``--dtype``); none stated on an inference run of a
    zoo model whose published checkpoint ships quantised weights (:func:`workloads.zoo.checkpoint_weight_dtype`:
    GPT-OSS's MXFP4 experts) becomes that format, when the activations are bf16 (the format's kernels take
    bf16). Returns the note to print (a line) when the checkpoint's format was applied, else ""."""
    wd = getattr(args, "weight_dtype", None)
    if wd is not None:
        if str(wd).strip().lower() in SIXTEEN_BIT_WEIGHTS:
            args.weight_dtype = None
        return ""
    if not inference or str(getattr(args, "dtype", None) or "bf16").strip().lower() not in ("bf16", "bfloat16"):
        return ""
    from workloads.zoo import checkpoint_weight_dtype

    ck = checkpoint_weight_dtype(getattr(args, "model", None))
    if ck is None:
        return ""
    args.weight_dtype = ck[0]
    return (f"note: {args.model}: weights priced as the published checkpoint ships them (--weight-dtype {ck[0]}); "
            "--weight-dtype bf16 prices 16-bit weights\n")


def _with_precision(graph: OpGraph, args: argparse.Namespace) -> OpGraph:
    """``graph`` with the serving precision of --weight-dtype/--kv-dtype/--group-size (when given)."""
    wd, kd, gs = (getattr(args, k, None) for k in ("weight_dtype", "kv_dtype", "group_size"))
    if wd is None and kd is None and gs is None:
        return graph
    from workloads.precision import apply_precision

    return apply_precision(graph, weight_dtype=wd, kv_dtype=kd, group_size=gs)


def profile_from_args(args: argparse.Namespace) -> Any:
    """The :class:`workloads.frameworks.FrameworkProfile` named by ``--framework`` (None when not given)."""
    name = getattr(args, "framework", None)
    if name is None:
        return None
    from workloads.frameworks import get_profile

    return get_profile(name)  # '' included: refused as an empty name


def conv_layout_of(args: argparse.Namespace, profile: Any) -> str:
    """The memory format convolutions receive: ``--conv-layout``, else the profile's; torch.compile's
    depends on the device's vendor (Inductor's layout optimisation is off by default on ROCm:
    :data:`workloads.frameworks.INDUCTOR_LAYOUT_ROCM`)."""
    given = getattr(args, "conv_layout", None)
    if given:
        return str(given)
    if profile.name != "compile":
        return str(profile.conv_layout)
    from workloads.frameworks import compile_conv_layout

    return compile_conv_layout("", hardware_vendor(args))


def hardware_vendor(args: argparse.Namespace) -> str:
    """The vendor of the device ``--hardware`` names ("" without one)."""
    name = getattr(args, "hardware", None)
    if not name:
        return ""
    from simulator.hardware import load_hardware

    hw = load_hardware(name, getattr(args, "calibration", None))
    devices = getattr(hw, "devices", None)
    dev = getattr(devices[0], "device", devices[0]) if devices else getattr(hw, "device", hw)
    return str(getattr(dev, "vendor", "") or "")


def check_profile_hardware(args: argparse.Namespace, hw: Any) -> None:
    """Refuse ``--framework`` on hardware whose device it does not run on (one located line)."""
    profile = profile_from_args(args)
    if profile is None:
        return
    from workloads.frameworks import check_profile_hardware as check

    check(profile, hw)


def _takes_stack_options(model: str) -> bool:
    """True when ``model`` is built by the transformer builder (a zoo transformer or a Hugging Face config)."""
    from workloads.micro import is_micro

    if is_micro(model) or model.lower().endswith(".onnx"):
        return False
    if model.lower().endswith(".json"):
        from workloads.resolve import saved_graph_json
        from workloads.serialize import is_saved_graph

        try:
            return not is_saved_graph(saved_graph_json(Path(model)))
        except (OSError, ValueError):
            return True  # load_workload reports the file's problem
    from workloads.zoo.transformer import zoo_config

    try:
        zoo_config(model)
    except (KeyError, ValueError):
        return False
    return True
