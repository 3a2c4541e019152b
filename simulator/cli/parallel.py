"""Parallel-plan flags of `nodeperf predict` (--tp, --pp, --dp, ...) and the report they print.

Flag names are a public contract: ``--tp --pp --dp --ep --cp --sequence-parallel --microbatch
--global-batch --schedule --interleave --stage-layers --pipeline-split --zero --fsdp --shard-group --offload
--fp8-linears --capacity-factor --moe-dispatch --moe-routing --grad-reduce-dtype --param-dtype --loss-chunks
--fp8-params --etp --moe-host-sync --moe-a2a-overlap --pipeline-microbatches --grad-sync-per-step --p2p-host-sync
--recompute-output-copy --input-len --output-len``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from simulator.cli.common import check_context_phase, one_of, positive_int

__all__ = ["add_parallel_args", "plan_from_args", "wants_plan", "run_parallel", "suggest_plan"]

_PLAN_FLAGS = ("tp", "pp", "dp", "ep", "cp", "microbatch", "global_batch", "interleave", "zero", "shard_group",
               "offload", "capacity_factor", "fp8_linears", "stage_layers", "pipeline_split", "moe_dispatch",
               "moe_routing", "grad_reduce_dtype", "param_dtype", "loss_chunks", "etp", "pipeline_microbatches",
               "cuda_graph", "moe_rank_capacity_factor", "cuda_graph_scope")
_PLAN_SWITCHES = ("sequence_parallel", "fsdp", "fp8_params", "moe_host_sync", "moe_a2a_overlap", "grad_sync_per_step",
                  "p2p_host_sync", "fsdp_fp8_all_gather", "recompute_output_copy")


def add_parallel_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("parallel plan (a system's devices; see docs: tensor, pipeline, data parallelism)")
    g.add_argument("--tp", type=positive_int, help="tensor-parallel degree (Megatron-style)")
    g.add_argument("--pp", type=positive_int, help="pipeline-parallel stages")
    g.add_argument("--dp", type=positive_int, help="data-parallel replicas (inference: --batch is per replica)")
    g.add_argument("--ep", type=positive_int, help="expert-parallel degree (MoE): experts split over that many "
                   "data-parallel replicas (default --dp = --ep), with all-to-alls around the experts")
    g.add_argument("--etp", type=positive_int, help="expert tensor parallelism (Megatron-Core "
                   "expert_tensor_parallel_size; default --tp): 1 with --tp > 1 keeps whole experts per rank and "
                   "takes the --ep ranks from tp x dp (needs --sequence-parallel)")
    g.add_argument("--cp", type=positive_int, help="context-parallel degree")
    g.add_argument("--sequence-parallel", action="store_true", help="Megatron sequence parallelism (with --tp)")
    g.add_argument("--microbatch", type=positive_int, help="sequences per microbatch (training; default 1)")
    g.add_argument("--global-batch", type=positive_int, help="sequences per training step over all replicas")
    g.add_argument("--schedule", choices=("gpipe", "1f1b", "interleaved"), help="pipeline schedule (default 1f1b)")
    g.add_argument("--interleave", type=positive_int,
                   help="virtual stages per device (--schedule interleaved; more than 1 without --schedule selects it)")
    g.add_argument("--stage-layers", type=_layer_counts, metavar="LIST",
                   help="decoder layers of each pipeline stage in model order, comma-separated, pp x interleave "
                        "counts (e.g. 15,16,16,16,16,16,16,15); default: --pipeline-split")
    g.add_argument("--pipeline-split", type=one_of(_split_names), metavar="RULE",
                   help="a framework's split of the layers over the stages: even (default), megatron-embedding-loss, "
                        "megatron-embedding, megatron-loss (Megatron-Core account_for_*_in_pipeline_split), "
                        "torchtitan (its generated split points), automodel (NeMo AutoModel's)")
    g.add_argument("--zero", type=int, choices=(1, 2, 3), help="ZeRO stage over the data-parallel replicas")
    g.add_argument("--fsdp", action="store_true", help="PyTorch FSDP full sharding (ZeRO-3)")
    g.add_argument("--shard-group", type=positive_int, metavar="N",
                   help="with --fsdp: hybrid sharding (HSDP), states sharded within groups of N data-parallel ranks")
    g.add_argument("--offload", type=_offload_targets, metavar="WHAT",
                   help="keep in host memory, over the device's host link: activations, optimizer, params "
                        "(comma-separated)")
    g.add_argument("--fp8-linears", metavar="RECIPE", type=one_of(_fp8_names, "unknown scaling recipe"),
                   help="training: the layers' linear GEMMs in fp8 with this scaling recipe: tensorwise or rowwise "
                        "(torchao Float8Linear), delayed or current (Transformer Engine DelayedScaling, "
                        "Float8CurrentScaling), mxfp8 (TE MXFP8BlockScaling, Blackwell only), or in int8: int8 "
                        "(MaxText AQT int8); attention, norms, LM head and optimizer keep their precision; with "
                        "--framework only the stack's own recipes (megatron-core: delayed, current (Megatron's "
                        "tensorwise), mxfp8; torchtitan and automodel profiles: tensorwise, rowwise; maxtext, xla: "
                        "int8; others none; docs/training_memory.md)")
    g.add_argument("--capacity-factor", type=_capacity_factor, metavar="F",
                   help="MoE expert capacity factor (tokens beyond it are dropped; default: dropless)")
    g.add_argument("--moe-dispatch", type=one_of(("sparse", "einsum", "deepep", "hybridep")), metavar="MODE",
                   help="how MoE tokens reach their experts: sparse (routed rows gathered and scattered, default), "
                        "einsum (MaxText's dense one-hot dispatch over capacity-padded experts; needs "
                        "--capacity-factor) or deepep (sparse over DeepEP's kernels: each token sent once per "
                        "rank, between nodes once per node, holding its experts) or hybridep (sparse as "
                        "Megatron-Core's flex dispatcher with HybridEP runs it: no separate sort by local expert)")
    g.add_argument("--moe-routing", type=one_of(("uniform", "round-robin")), metavar="ROUTING",
                   help="how the router spreads a token's experts: uniform (a learned gate, default) or "
                        "round-robin (NeMo AutoModel's fake balanced gate: neighbouring experts)")
    g.add_argument("--grad-reduce-dtype", type=one_of(("fp32", "bf16")), metavar="DTYPE",
                   help="training: the dtype data-parallel gradients are kept and reduced in (Megatron "
                        "grad_reduce_in_fp32; default: the stack's)")
    g.add_argument("--param-dtype", type=one_of(("fp32", "bf16")), metavar="DTYPE",
                   help="training on TPUs, or with --fsdp on GPUs: the dtype the parameters, their gradients and "
                        "AdamW's moments are stored in (MaxText weight_dtype; bf16: NeMo AutoModel's bf16 FSDP2 "
                        "parameters; default: the stack's, float32 for MaxText)")
    g.add_argument("--loss-chunks", type=positive_int, metavar="N",
                   help="training: the loss computed over N chunks of the tokens, one chunk's logits live at a "
                        "time (MaxText num_vocab_tiling on TPUs; priced on GPUs too; default 1)")
    g.add_argument("--fp8-params", action="store_true",
                   help="with --fp8-linears: the linear weights are kept in fp8 (Transformer Engine "
                        "fp8_param_gather): no separate fp8 weight copy")
    g.add_argument("--fsdp-fp8-all-gather", action="store_true",
                   help="training with --fsdp and --fp8-linears tensorwise: FSDP2 gathers the fp8 linear weights in "
                        "fp8, 1 byte each, with scales precomputed once a step (torchao/torchtitan "
                        "enable_fsdp_float8_all_gather with precompute_float8_dynamic_scale_for_fsdp)")
    g.add_argument("--moe-host-sync", action="store_true",
                   help="training: the MoE dispatcher copies its token counts to the host and waits for them in "
                        "every MoE layer (Megatron-Core's dropless dispatchers): the step is priced per sync "
                        "interval, max(host issue, GPU) plus the sync's round trip")
    g.add_argument("--p2p-host-sync", action="store_true",
                   help="training with --pp: the device is synchronised after every stage exchange (Megatron-Core's "
                        "batch_p2p_comm with batch_p2p_sync, pipelines without virtual stages): each pipeline send "
                        "ends a host-sync interval")
    _recompute_copy_arg(g)
    _schedule_recipe_args(g)
    g.add_argument("--input-len", type=positive_int, help="prompt tokens of a request (--phase generate)")
    g.add_argument("--output-len", type=positive_int, help="generated tokens of a request (--phase generate)")


def _recompute_copy_arg(g: argparse._ArgumentGroup) -> None:
    """--recompute-output-copy (ParallelPlan.recompute_output_copy)."""
    g.add_argument("--recompute-output-copy", action="store_true",
                   help="training with --recompute modules:... naming layernorm, moe_act or mla_up_proj: each "
                        "recomputed output is copied back into the storage the forward released, one device copy "
                        "per output (Megatron-Core's CheckpointWithoutOutput before Megatron-LM f54403492e: the "
                        "NeMo 25.09 and 25.11 containers)")


def _schedule_recipe_args(g: argparse._ArgumentGroup) -> None:
    """The training flags of how the stack runs its pipeline schedule (ParallelPlan fields of the same names)."""
    g.add_argument("--moe-a2a-overlap", action="store_true",
                   help="training, MoE with --ep > 1: Megatron-Core's combined 1F1B schedule "
                        "(overlap_moe_expert_parallel_comm, Megatron-Bridge moe_a2a_overlap; "
                        "megatron/core/pipeline_parallel/combined_1f1b.py): one microbatch's all-to-alls run beside "
                        "another's compute in each steady forward-backward pair; with --pp > 1 it needs "
                        "--schedule interleaved (engine analytical)")
    g.add_argument("--cuda-graph", type=one_of(("full_iteration", "transformer_engine")), metavar="IMPL",
                   help="training: full_iteration, Megatron-Core's cuda_graph_impl full_iteration (the whole "
                        "forward-backward in one CUDA graph); memory only: with --moe-a2a-overlap the capture keeps "
                        "every microbatch's cross-stream-freed MoE tensors; transformer_engine, its per-layer "
                        "Transformer Engine graphs of --cuda-graph-scope (memory only: their static buffers; "
                        "docs/training_memory.md)")
    g.add_argument("--cuda-graph-scope", type=_graph_scopes, metavar="S[,S...]",
                   help="with --cuda-graph transformer_engine: the parts of each layer graphed, Megatron-Core's "
                        "cuda_graph_scope (attn, mlp, moe, moe_router, moe_preprocess, mamba; default: the whole "
                        "layer)")
    g.add_argument("--moe-rank-capacity-factor", type=_capacity_factor, metavar="F",
                   help="training, MoE: Megatron-Core's moe_expert_rank_capacity_factor, HybridEP's static "
                        "per-rank budget of tokens x top-k x F rows, with --moe-dispatch hybridep; memory only (default: "
                        "sized per step)")
    g.add_argument("--pipeline-microbatches", type=positive_int, metavar="N",
                   help="training with --pp > 1: the microbatches of one pipeline schedule run, the step running "
                        "the schedule once per N microbatches, each run with its own fill and drain "
                        "(torch.distributed.pipelining: one schedule.step per local batch, as NeMo AutoModel "
                        "accumulates gradients); a divisor of the step's microbatches; default: all in one run "
                        "(Megatron-Core's; engine analytical)")
    g.add_argument("--grad-sync-per-step", action="store_true",
                   help="with --fsdp and --pipeline-microbatches: FSDP2's gradient reduce-scatter and reshard "
                        "once a step, on its last schedule run (NeMo AutoModel's "
                        "patched_backward_maybe_with_nosync, components/moe/fsdp_mixin.py); default: once a run "
                        "(torch.distributed.pipelining's own)")


def _offload_targets(text: str) -> tuple[str, ...]:
    from workloads.parallel import OFFLOAD_TARGETS

    items = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    for t in items or (text,):
        if t not in OFFLOAD_TARGETS:
            from nodeperf.suggest import did_you_mean

            raise argparse.ArgumentTypeError(f"got {t!r}; expected one of {', '.join(OFFLOAD_TARGETS)}"
                                             + did_you_mean(t, OFFLOAD_TARGETS))
    return items


def _layer_counts(text: str) -> tuple[int, ...]:
    items = [t.strip() for t in text.split(",")]
    if not all(t.isdigit() and int(t) > 0 for t in items):
        raise argparse.ArgumentTypeError(f"got {text!r}; expected positive layer counts separated by commas "
                                         "(e.g. 15,16,16,15)")
    return tuple(int(t) for t in items)


def _split_names() -> tuple[str, ...]:
    from workloads.parallel import PIPELINE_SPLITS

    return PIPELINE_SPLITS


def _fp8_names() -> tuple[str, ...]:
    from workloads.precision import FP8_RECIPES

    return FP8_RECIPES


def _capacity_factor(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a number > 0 (e.g. 1.25)") from None
    if not 0 < v < float("inf"):
        raise argparse.ArgumentTypeError(f"got {text}; expected a finite number > 0 (e.g. 1.25; omit it for "
                                         "dropless)")
    return v


def _plan_cause(args: argparse.Namespace) -> str:
    """`` (FLAG prices the step as a plan)`` when no degree (--tp ... --cp) was given and a plan-only flag made the
    command a parallel plan (a user who typed --fp8-linears on one device sees why --batch is refused); else ""."""
    if any(getattr(args, f, None) is not None for f in ("tp", "pp", "dp", "ep", "cp")):
        return ""
    given = [f for f in _PLAN_FLAGS if getattr(args, f, None) is not None]
    given += [f for f in _PLAN_SWITCHES if getattr(args, f, False)]
    return f" (--{given[0].replace('_', '-')} prices the step as a one-device plan)" if given else ""


def wants_plan(args: argparse.Namespace) -> bool:
    """Whether the command line asks for a parallel prediction."""
    return (any(getattr(args, f, None) is not None for f in _PLAN_FLAGS)
            or any(bool(getattr(args, f, False)) for f in _PLAN_SWITCHES)
            or getattr(args, "phase", None) == "generate" or getattr(args, "schedule", None) is not None)


def plan_from_args(args: argparse.Namespace) -> Any:
    from workloads.parallel import ParallelPlan

    schedule = args.schedule or ("interleaved" if (args.interleave or 1) > 1 else "1f1b")
    # expert parallelism takes its ranks from the data-parallel replicas (Megatron-LM): --ep alone
    # means that many replicas, each with its own --batch, sharing their experts
    dp = args.dp or (args.ep or 1)
    return ParallelPlan(tp=args.tp or 1, pp=args.pp or 1, dp=dp, ep=args.ep or 1, cp=args.cp or 1,
                        sequence_parallel=args.sequence_parallel, microbatch=args.microbatch or 1,
                        global_batch=args.global_batch, schedule=schedule, interleave=args.interleave or 1,
                        zero_stage=args.zero or 0, fsdp=args.fsdp, shard_group=args.shard_group or 0,
                        offload=args.offload or (), capacity_factor=args.capacity_factor,
                        stage_layers=args.stage_layers or (), pipeline_split=args.pipeline_split or "even",
                        moe_dispatch=args.moe_dispatch or "sparse",
                        moe_routing=args.moe_routing or "uniform", grad_reduce_dtype=args.grad_reduce_dtype or "",
                        fp8_param=bool(args.fp8_params), param_dtype=args.param_dtype or "",
                        fsdp_fp8_all_gather=bool(getattr(args, "fsdp_fp8_all_gather", False)),
                        loss_chunks=args.loss_chunks or 1, etp=getattr(args, "etp", None) or 0,
                        moe_host_sync=bool(getattr(args, "moe_host_sync", False)),
                        moe_a2a_overlap=bool(getattr(args, "moe_a2a_overlap", False)),
                        pipeline_microbatches=getattr(args, "pipeline_microbatches", None) or 0,
                        grad_sync_per_step=bool(getattr(args, "grad_sync_per_step", False)),
                        p2p_host_sync=bool(getattr(args, "p2p_host_sync", False)),
                        recompute_output_copy=bool(getattr(args, "recompute_output_copy", False)),
                        cuda_graph=getattr(args, "cuda_graph", None) or "",
                        cuda_graph_scope=getattr(args, "cuda_graph_scope", None) or (),
                        moe_rank_capacity_factor=getattr(args, "moe_rank_capacity_factor", None))


def check_request_flags(args: argparse.Namespace) -> None:
    """--input-len/--output-len describe a request: refused outside --phase generate, with or without a plan; --context
    outside --phase decode (:func:`simulator.cli.common.check_context_phase`)."""
    if args.phase != "generate" and (args.input_len is not None or args.output_len is not None):
        raise ValueError(f"predict: --input-len/--output-len: they describe a request; got "
                         f"{'no --phase' if args.phase is None else '--phase ' + args.phase}; "
                         "expected --phase generate")
    check_context_phase(args)


def _check_fp8_stack(args: argparse.Namespace) -> None:
    """A ``--fp8-linears`` recipe the ``--framework`` stack does not run (:data:`workloads.precision.STACK_RECIPES`)
    is refused with the recipes it runs (and the name of its own spelling, Megatron-Core's tensorwise: current)."""
    from simulator.cli.common import profile_from_args
    from workloads.precision import fp8_stack_problem

    profile = profile_from_args(args) if args.train and args.fp8_linears else None
    problem = fp8_stack_problem(args.fp8_linears, profile.name, "--fp8-linears") if profile is not None else ""
    if problem:
        raise ValueError(problem)


def _check_flags(args: argparse.Namespace) -> None:
    from simulator.cli.common import check_training_flags

    check_request_flags(args)
    if args.train and args.phase not in (None, "train", "generate"):  # as one device refuses it (workloads.resolve)
        raise ValueError(f"predict: --train conflicts with --phase {args.phase}; expected no --phase (a training "
                         "step) or no --train")
    if args.schedule in ("gpipe", "1f1b") and (args.pp or 1) == 1:  # interleaved: the plan's own line says so
        raise ValueError(f"predict: --schedule {args.schedule}: a pipeline schedule; got --pp 1, which runs no "
                         "pipeline; expected --pp > 1 (or no --schedule)")
    table = [f for f, on in (("--top", getattr(args, "top", None) is not None),
                             ("--no-aggregate", not getattr(args, "aggregate", True))) if on]
    if table:
        what = "--phase generate" if args.phase == "generate" else "a parallel plan"
        raise ValueError(f"predict: {table[0]}: shapes the op table of one device's step; got {what}, whose summary "
                         f"lists its stages; expected no {table[0]} with {what} (every op: --csv FILE)")
    if args.pipeline_split and (args.pp or 1) == 1:  # a split of the layers over pipeline stages: none to split
        raise ValueError(f"predict: --pipeline-split {args.pipeline_split}: how a framework splits the layers over "
                         "pipeline stages; got --pp 1; expected --pp > 1 (or no --pipeline-split)")
    if getattr(args, "autocast", False):  # one device's inference forward under torch.autocast only
        raise ValueError("predict: --autocast: fp32 weights cast per forward on one device; got a parallel plan; "
                         "expected no --autocast with a plan")
    check_training_flags(args)
    _check_fp8_stack(args)
    if args.fp8_params and args.fp8_linears is None:
        raise ValueError("predict: --fp8-params: keeps the fp8 linears' weights in fp8; got no --fp8-linears; expected "
                         "--fp8-linears RECIPE with --train")
    _check_fp8_linears_dtype(args)
    if args.phase == "generate":
        missing = [f for f in ("input_len", "output_len") if getattr(args, f) is None]
        if missing:
            flags = " and ".join("--" + f.replace("_", "-") for f in missing)
            raise ValueError(f"predict: --phase generate: {flags} missing; expected --input-len N --output-len M")
        if args.train:
            raise ValueError("predict: --phase generate conflicts with --train; expected one of them")
    if not args.train and args.fp8_linears is not None:
        raise ValueError(f"predict: --fp8-linears {args.fp8_linears}: a training recipe; got no --train; expected "
                         "--train (serving precision: --weight-dtype fp8 without a plan)")
    if not args.train and (args.microbatch is not None or args.global_batch is not None):
        raise ValueError("predict: --microbatch/--global-batch: training options; got no --train; expected --train "
                         "(inference uses --batch per replica)")
    if args.train and args.batch is not None:
        raise ValueError(f"predict: --batch with --train and a parallel plan{_plan_cause(args)}; got --batch "
                         f"{args.batch}; expected --microbatch and --global-batch")
    if args.train and getattr(args, "optimizer", "adamw") == "none":  # one device's timed loop (drop_optimizer)
        raise ValueError("predict: --optimizer none: a forward-and-backward loop on one device; got a parallel plan, "
                         "whose step syncs gradients and shards optimizer state; expected --optimizer sgd, "
                         "sgd_momentum, adam or adamw with a plan, or --optimizer none on one device")


def _check_fp8_linears_dtype(args: argparse.Namespace) -> None:
    """``--fp8-linears`` keeps attention, norms, LM head and optimizer at ``--dtype``: with an 8-bit or narrower
    ``--dtype`` those run in it too, so the recipe's promise that they keep a 16-bit precision is broken and the
    two flags contradict each other: refused (an all-fp8 what-if is ``--dtype fp8`` alone)."""
    from workloads.dtypes import dtype_bytes

    if args.fp8_linears is None or not args.dtype or dtype_bytes(args.dtype) >= 2:
        return
    raise ValueError(f"predict: --fp8-linears {args.fp8_linears}: the other layers keep --dtype; got --dtype "
                     f"{args.dtype}; expected a 16- or 32-bit --dtype (bf16, fp16, fp32), or --dtype {args.dtype} "
                     "without --fp8-linears")


def _check_schedule_flags(args: argparse.Namespace) -> None:
    """The schedule-recipe flags are refused where they would change nothing: outside a training step, a pipeline
    schedule run without pipeline stages, a deferred FSDP sync without FSDP or several runs a step. The training
    step's own synchronisation and capture flags (--p2p-host-sync, --cuda-graph, --moe-rank-capacity-factor) are
    refused outside a training step too."""
    given = [f for f in ("moe_a2a_overlap", "pipeline_microbatches", "grad_sync_per_step", "p2p_host_sync",
                         "cuda_graph", "moe_rank_capacity_factor", "cuda_graph_scope", "recompute_output_copy")
             if getattr(args, f, None)]
    if not given:
        return
    flag = "--" + given[0].replace("_", "-")
    if not args.train:
        raise ValueError(f"predict: {flag}: a training recipe; got no --train; expected --train")
    _check_output_copy(args)
    if getattr(args, "moe_a2a_overlap", False) and _dense(args.model):
        raise ValueError(f"predict: --moe-a2a-overlap: overlaps the expert-parallel all-to-alls; got {args.model}, "
                         "a model with no experts; expected an MoE model with --ep > 1")
    k = getattr(args, "pipeline_microbatches", None)
    if k and (args.pp or 1) == 1:
        raise ValueError(f"predict: --pipeline-microbatches {k}: the microbatches of one pipeline schedule run; got "
                         "--pp 1; expected --pp > 1")
    if getattr(args, "grad_sync_per_step", False) and not (args.fsdp and k):
        missing = " and ".join(f for f, on in (("--fsdp", args.fsdp), ("--pipeline-microbatches", k)) if not on)
        raise ValueError(f"predict: --grad-sync-per-step: defers FSDP's gradient sync to a step's last schedule run; "
                         f"got no {missing}; expected --fsdp and --pipeline-microbatches N with --pp > 1")


#: Flags naming a setting of Megatron-Core (and the Transformer Engine and NCCL kernels it launches on NVIDIA GPUs):
#: cuda_graph_impl / cuda_graph_scope, overlap_moe_expert_parallel_comm, moe_expert_rank_capacity_factor,
#: batch_p2p_sync, its dropless dispatchers' host sync, CheckpointWithoutOutput's recompute output copy
MEGATRON_FLAGS = ("cuda_graph", "cuda_graph_scope", "moe_a2a_overlap", "moe_rank_capacity_factor", "p2p_host_sync",
                  "moe_host_sync", "recompute_output_copy")
#: The stacks those flags belong to (a plan without --framework is priced as the default graph: taken there too)
MEGATRON_STACKS = ("megatron-core", "megatron-lm")


def _check_megatron_flags(args: argparse.Namespace, hw: Any) -> None:
    """A Megatron-Core setting under another --framework (``fsdp2``, ``maxtext`` ...) or on a device that is not an
    NVIDIA GPU (CUDA graphs on a TPU) was taken and changed the step: refused, naming the flag."""
    from simulator.engines.analytical import spec_of

    given = [f for f in MEGATRON_FLAGS if getattr(args, f, None)]
    if not given:
        return
    flag = "--" + given[0].replace("_", "-")
    stack = getattr(args, "framework", None)
    if stack and stack not in MEGATRON_STACKS:
        raise ValueError(f"predict: {flag}: a Megatron-Core setting; got --framework {stack}; expected --framework "
                         f"{' or '.join(MEGATRON_STACKS)} (or no --framework), or no {flag}")
    device = spec_of(hw)[0]
    if device.kind != "gpu" or str(getattr(device, "vendor", "")).lower() != "nvidia":
        raise ValueError(f"predict: {flag}: a Megatron-Core setting of NVIDIA GPUs; got {device.name} "
                         f"({getattr(device, 'vendor', '')} {device.kind}); expected an NVIDIA GPU, or no {flag}")


def _check_output_copy(args: argparse.Namespace) -> None:
    """--recompute-output-copy is refused without a --recompute modules:... policy naming a module whose output
    Megatron-Core releases and recomputes (layernorm, moe_act, mla_up_proj): there would be nothing to copy."""
    if not getattr(args, "recompute_output_copy", False):
        return
    from workloads.recompute import module_names

    policy = getattr(args, "recompute", None) or "none"
    names = module_names(policy) if policy.startswith("modules:") else ()
    if not set(names) & {"layernorm", "moe_act", "mla_up_proj"}:
        raise ValueError(f"predict: --recompute-output-copy: copies the recomputed outputs of Megatron-Core's "
                         f"CheckpointWithoutOutput modules; got --recompute {policy}; expected --recompute "
                         "modules:NAME,... naming layernorm, moe_act or mla_up_proj")


def _graph_scopes(text: str) -> tuple[str, ...]:
    """An argparse ``type``: comma-separated :data:`workloads.parallel.CUDA_GRAPH_SCOPES` names, each refused
    with the names and a did-you-mean."""
    from workloads.parallel import CUDA_GRAPH_SCOPES

    pick = one_of(CUDA_GRAPH_SCOPES, "unknown CUDA graph scope")
    names = tuple(pick(x.strip()) for x in text.split(","))
    return names


def _dense(model: str) -> bool:
    """Whether ``model`` names a zoo transformer or Hugging Face config without experts (False where it names
    neither: the plan's own checks say what it is)."""
    from workloads.parallel import resolve_config

    try:
        cfg = resolve_config(model)[0]
    except (KeyError, ValueError, OSError):
        return False
    return not getattr(cfg, "experts", 0)


def run_parallel(args: argparse.Namespace, hw: Any, opts: Any) -> int:
    """Predict the plan the flags describe on ``hw`` and print it (table or --json)."""
    from simulator.parallel.compose import evaluate_plan, generate_request

    _check_flags(args)
    _check_schedule_flags(args)
    _check_megatron_flags(args, hw)
    plan = plan_from_args(args)
    engine = args.engine
    if args.streams is not None:
        raise ValueError("predict: --streams: a parallel plan runs one stream per device; got --streams with a plan; "
                         "expected no --streams")
    # serving precision of every step (--weight-dtype / --kv-dtype, inference only: simulator.cli.predict.run)
    quant = {k: getattr(args, k) for k in ("weight_dtype", "kv_dtype") if getattr(args, k, None) is not None}
    if args.phase == "generate":
        res = generate_request(args.model, hw, plan, opts, input_len=args.input_len, output_len=args.output_len,
                               batch=args.batch or 1, dtype=args.dtype, **quant)
        from simulator.serving.served import served_generate

        res = served_generate(res, args.model, hw, plan, opts, getattr(args, "framework", None),
                              batch=args.batch or 1, input_len=args.input_len, output_len=args.output_len,
                              dtype=args.dtype, **quant)
    else:
        res = evaluate_plan(args.model, hw, plan, opts, phase=args.phase, train=args.train, seq=args.seq,
                            context=args.context, dtype=args.dtype, batch=args.batch, recompute=args.recompute,
                            optimizer=args.optimizer, engine=engine, fp8_linears=args.fp8_linears,
                            framework=_plan_framework(args.framework), **quant)
    unused = int(getattr(hw, "count", 1)) - plan.devices
    if unused > 0:  # as one device on a system warns (simulator.cli.predict), once the prediction stands
        print(f"nodeperf: warning: {hw.name} has {hw.count} devices; the plan occupies {plan.devices} of them and "
              f"{unused} stay unused", file=sys.stderr)
    from simulator.cli.output import to_stdout, write_output

    report = res.to_cost_report()
    trace = getattr(args, "trace", None)
    if trace is not None:  # one process per pipeline stage, compute / communication / data-parallel tracks
        from simulator.report.trace import plan_to_chrome_trace

        write_output("--trace", trace, json.dumps(plan_to_chrome_trace(res), sort_keys=True) + "\n")
    if args.csv is not None:
        write_output("--csv", args.csv, report.to_csv())
    if to_stdout(args.csv, trace):
        return 0
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
        return 0
    print(format_result(res, mode=mode_suffix(args.hardware)))
    if args.csv is not None:
        print(f"\nwrote {len(report.records)} rows to {args.csv}")
    if trace is not None:
        print(f"wrote a Chrome trace of {len(res.stages)} pipeline stage(s) to {trace}")
    return 0


#: the breakdown keys that add up to a step's time (the rest, ``dp_sync_s``, ``fsdp_gather_s`` ..., detail them):
#: the fully sharded stacks' copy-out kernels, the HBM contention of hidden collectives and their reductions on
#: the vector unit are on the compute stream (:class:`simulator.parallel.stacks.ShardedStep`)
STEP_PARTS = {"compute_s": "compute", "communication_s": "communication", "bubble_s": "bubble",
              "optimizer_s": "optimizer", "offload_exposed_s": "offload exposed", "fsdp_copy_out_s": "FSDP copy-out",
              "fsdp_hbm_contention_s": "FSDP HBM contention", "fsdp_vpu_reduce_s": "FSDP VPU reduce",
              "host_s": "host"}


def mode_suffix(hardware: str | None) -> str:
    """``"@MODE"`` of a ``--hardware NAME@MODE`` (a power mode or board power limit), else "": a spec keeps its
    catalog name in a mode (:func:`hwmodels.loader.apply_power_mode`), so the summary's header names the mode."""
    base, at, mode = str(hardware or "").rpartition("@")
    return f"@{mode.strip().lower()}" if at and base.strip() and mode.strip() else ""


def format_result(res: Any, mode: str = "") -> str:
    """A human summary: the plan, where the time goes, per-stage times and memory (``mode``: the ``@MODE`` of
    the hardware, :func:`mode_suffix`)."""
    from simulator.report.formatting import binary_bytes, si, table

    plan = res.plan
    deg = ", ".join(f"{k} {getattr(plan, k)}" for k in ("tp", "pp", "dp", "cp", "ep")
                    if getattr(plan, k, 1) > 1) or "1 device"
    if getattr(plan, "etp", 0) and plan.etp != plan.tp:  # experts not split like the other layers (Megatron ETP)
        deg += f", etp {plan.etp}"
    extras = [k for k, on in (("sequence parallel", plan.sequence_parallel), (f"ZeRO-{plan.zero}", plan.zero > 0))
              if on]
    head = f"{res.model} ({res.phase}) on {res.hardware}{mode}: plan {deg}" + (f" ({', '.join(extras)})" if extras else "")
    head += f", {plan.devices} device(s)"
    lines = [head, ""]
    if res.phase == "train":
        lines.append(f"Iteration: {si(res.latency_s, 's')}, {plan.microbatches} microbatch(es) of {plan.microbatch}, "
                     f"{plan.schedule} schedule; MFU {100 * res.mfu:.1f}%, "
                     f"{si(res.model_flops_per_s_per_device, 'FLOP/s')} model FLOP/s per device, "
                     f"{si(res.tokens_per_s, 'tokens/s')}")
    elif res.phase == "generate":
        x = res.extra
        lines.append(f"Request: TTFT {si(x['ttft_s'], 's')}, TPOT {si(x['tpot_s'], 's')}, end to end "
                     f"{si(x['e2e_latency_s'], 's')}; {si(res.tokens_per_s, 'tokens/s')} (input + output), "
                     f"{si(x['output_tokens_per_s'], 'tokens/s')} output")
    else:
        lines.append(f"Step: {si(res.latency_s, 's')}, {si(res.tokens_per_s, 'tokens/s')}, MFU {100 * res.mfu:.1f}%")
    b = res.breakdown
    parts = ", ".join(f"{STEP_PARTS[k]} {si(b[k], 's')} ({100 * b[k] / res.latency_s:.1f}%)"
                      for k in STEP_PARTS if b.get(k))
    lines.append(f"Where the time goes: {parts}")
    rows = []
    for s in res.stages:
        layers = ", ".join(f"{a}-{z - 1}" for a, z in s.layers)
        rows.append([str(s.stage), layers, si(s.forward_s, "s"), si(s.backward_s, "s") if s.backward_s else "-",
                     si(s.communication_s, "s"), binary_bytes(s.weights_bytes), binary_bytes(s.activations_bytes),
                     binary_bytes(s.kv_cache_bytes) if s.kv_cache_bytes else "-", binary_bytes(s.memory_bytes)])
    lines += ["", table(rows, ["stage", "layers", "forward", "backward", "comm", "weights", "activations",
                               "KV cache", "memory"], align="llrrrrrrr")]
    lines += ["", f"Memory per device: {res.memory_message()}"]
    b = max(res.stages, key=lambda st: st.memory_bytes).memory_breakdown()
    keys = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "buffers", "reserve", "offloaded_to_host")
    parts = [f"{k.replace('_', ' ')} {binary_bytes(b[k])}" for k in keys if b.get(k)]
    if parts:
        lines.append("  " + ", ".join(parts) + " (docs/training_memory.md)")
    for w in res.warnings:
        lines.append(f"warning: {w}")
    return "\n".join(lines)


def suggest_plan(args: argparse.Namespace, hw: Any) -> str:
    """For a system given without a plan: the smallest tensor-parallel degree that fits (or '')."""
    from hwmodels.spec import SystemSpec
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan, PlanError

    if not isinstance(hw, SystemSpec) or hw.count <= 1:
        return ""
    tp = 1
    while tp * 2 <= hw.count:
        tp *= 2
        try:
            res = evaluate_plan(args.model, hw, ParallelPlan(tp=tp), phase=args.phase, seq=args.seq,
                                context=args.context, dtype=args.dtype, batch=args.batch)
        except (PlanError, ValueError, KeyError):
            return ""
        if res.fits_in_memory:
            return f"--tp {tp}"
    return ""


def _plan_framework(name: str | None) -> str:
    """The profile a plan is built and composed with: one that changes the graph (``predict`` admits only
    those a plan can build) or one whose training stack shapes the step (fsdp2, megatron-core, maxtext);
    a costing-only profile reaches the engines through the options alone."""
    if not name:
        return ""
    from workloads.frameworks import get_profile

    prof = get_profile(name)
    return prof.name if prof.changes_graph or getattr(prof, "stack", "") else ""

