"""`nodeperf predict MODEL --hardware NAME`: per-op latency, energy and memory of a workload on a device."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from simulator.cli.common import (
    add_model_args,
    check_profile_hardware,
    checkpoint_weights,
    graph_from_args,
    nonempty,
    one_of,
    positive_int,
)
from simulator.cli.parallel import (
    add_parallel_args,
    check_request_flags,
    mode_suffix,
    run_parallel,
    suggest_plan,
    wants_plan,
)
from simulator.engines.analytical import CONV_LAYOUTS
from simulator.engines.options import FP8_ACCUMULATIONS

#: Help of ``--fp8-accumulation`` (predict and serve).
FP8_ACCUMULATION_HELP = ("how fp8 GEMMs not marked by their training recipe accumulate: fast (the WGMMA accumulator "
                         "only, cuBLASLt CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1) or split (FAST_ACCUM = 0: partial sums "
                         "promoted to FP32 every efficiency.fp8_promotion_interval K elements, DeepSeek-V3 s.3.3.2; "
                         "priced on Hopper only, noted and ignored elsewhere); default: the --framework profile's "
                         "(trt-llm-pytorch fast, from TensorRT-LLM's cublasScaledMM.cpp; not stated: fast)")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "predict",
        help="predict latency, energy and memory of a model on a device",
        description="Predict latency, energy and memory of MODEL on a device or system, op by op. "
                    "Prints the top ops and the totals; --json prints one JSON object, --csv writes every op.",
    )
    add_model_args(p)
    p.add_argument("--hardware", required=True, metavar="NAME",
                   help="catalog device or system name (see `nodeperf hardware`), a device/system TOML path, "
                        "or host / host:N (this machine's CPU)")
    p.add_argument("--calibration", type=nonempty, metavar="OVERLAY.toml",
                   help="apply a calibration overlay written by `nodeperf calibrate`")
    p.add_argument("--top", type=positive_int, default=None, help="rows of the op table (default 15)")
    p.add_argument("--no-aggregate", dest="aggregate", action="store_false",
                   help="one row per op instead of summing ops that differ only by layer index")
    p.add_argument("--json", action="store_true", help="print exactly one JSON object (the whole report)")
    p.add_argument("--csv", metavar="FILE", help="write one CSV row per op to FILE (- for standard output, "
                                                 "instead of the table)")
    p.add_argument("--fusion", action=argparse.BooleanOptionalAction, default=None,
                   help="fuse elementwise ops into their producer kernel (default: on for TPUs, as XLA does; off for GPUs)")
    p.add_argument("--cuda-graphs", action="store_true", help="kernels replayed from a CUDA graph (lower launch floor)")
    p.add_argument("--compile-mode", choices=("default", "reduce-overhead", "max-autotune"),
                   help="with --framework compile: torch.compile's mode; reduce-overhead and max-autotune replay "
                        "CUDA graphs (no per-kernel Python launch), max-autotune also fuses epilogues into Triton "
                        "GEMM templates (default: default)")
    p.add_argument("--coordinate-descent-tuning", action="store_true",
                   help="with --framework compile: Inductor's coordinate_descent_tuning, as gpt-fast's and torchao's "
                        "generate.py set it: a matmul with one row (batch-1 decode) becomes a generated "
                        "product-and-sum kernel that takes fused epilogues")
    p.add_argument("--no-power-cap", dest="power_cap", action="store_false",
                   help="do not stretch ops whose average power would exceed the TDP")
    p.add_argument("--tf32", action="store_true", help="fp32 contractions use TF32 tensor cores")
    p.add_argument("--conv-layout", choices=CONV_LAYOUTS,
                   help="memory format of convolution activations: nhwc (channels last) or nchw (PyTorch's default "
                        "contiguous format, under which cuDNN runs each tensor-core convolution between layout "
                        "transforms); default: the --framework profile's (nchw for eager, sdpa and cuda-graphs), "
                        "else nhwc")
    p.add_argument("--fp8-accumulation", type=one_of(FP8_ACCUMULATIONS, "unknown fp8 accumulation"),
                   metavar="fast|split", help=FP8_ACCUMULATION_HELP)
    p.add_argument("--engine", choices=("analytical", "des"), default="analytical",
                   help="analytical: ops back to back on one stream (default); des: discrete-event schedule "
                        "with host launches, concurrent streams and a link for collectives")
    p.add_argument("--streams", type=positive_int, metavar="N",
                   help="compute streams of the discrete-event engine (default 1; needs --engine des)")
    p.add_argument("--trace", metavar="FILE.json",
                   help="write the schedule as a Chrome trace to FILE.json (chrome://tracing, Perfetto; "
                        "- for standard output, instead of the table)")
    add_parallel_args(p)
    p.set_defaults(func=run)


#: Graph-changing --framework profiles a parallel plan builds every stage with (the Hugging Face
#: model code under torch.compile: fused attention, logits, training dropout; the same code run op by op,
#: ``eager`` with its attention decomposed over the full scores, ``sdpa`` with one SDPA call, as
#: ``torch.distributed.pipelining`` stages or DDP replicas of the unchanged ``nn.Module`` run it; Megatron-LM of
#: 2021-2022: unfused attention core, dropout, its optimizer's mixed-precision passes). A profile with a training
#: ``stack`` (torchtitan's: its RMSNorm, complex RoPE and repeat_kv) is built by plans too (:func:`plan_builds`).
PLAN_PROFILES = ("compile", "eager", "sdpa", "megatron-lm")


def plan_builds(profile: Any) -> bool:
    """Whether a parallel plan builds the graph ``profile`` launches: no graph change, one of
    :data:`PLAN_PROFILES`, or a training stack's profile (``stack`` set: the plan composer passes its
    model-code changes to every stage, as the published-row validation does)."""
    return not profile.changes_graph or profile.name in PLAN_PROFILES or bool(profile.stack)


def run(args: argparse.Namespace) -> int:
    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.engines.analytical import evaluate
    from simulator.hardware import load_hardware

    if not args.verbose:  # the report's warnings are printed below; do not repeat them as log lines
        logging.getLogger("simulator").setLevel(logging.ERROR)
    if args.streams is not None and args.engine != "des":
        raise ValueError(f"predict: --streams: only the discrete-event engine has streams; got --engine {args.engine}; "
                         "expected --engine des --streams N")
    check_outputs(("--csv", args.csv), ("--trace", args.trace), json_flag=args.json)
    hw = load_hardware(args.hardware, args.calibration)
    check_profile_hardware(args, hw)
    check_request_flags(args)
    sys.stderr.write(checkpoint_weights(args, inference=not args.train and args.phase != "train"))
    if wants_plan(args):
        given = [f for f, k in (("--weight-dtype", "weight_dtype"), ("--kv-dtype", "kv_dtype"))
                 if getattr(args, k, None) is not None]
        if given and args.train:
            raise ValueError(f"predict: {'/'.join(given)}: serving precision applies to inference steps; got --train "
                             "with a parallel plan; expected --phase prefill, decode or generate (or --fp8-linears "
                             "for training)")
        if getattr(args, "group_size", None) is not None:
            raise ValueError("predict: --group-size: a parallel plan quantises with the default group size; got "
                             f"--group-size {args.group_size} with a plan; expected no --group-size (or no plan)")
        from simulator.cli.common import profile_from_args

        profile = profile_from_args(args)
        if profile is not None and not plan_builds(profile):
            raise ValueError(f"predict: --framework {profile.name}: this stack changes the graph it launches, which "
                             "parallel plans do not build yet; got a parallel plan; expected "
                             f"{' or '.join(PLAN_PROFILES)}, a training stack (e.g. fsdp2, torchtitan-eager), a "
                             "profile that changes costing only (e.g. tensorrt, vllm) or no plan")
        if getattr(args, "attention", None):
            raise ValueError("predict: --attention: parallel plans build the fused attention (or the --framework "
                             "profile's); got --attention with a plan; expected no --attention")
        if args.trace is not None and args.phase == "generate":
            raise ValueError("predict: --trace: a plan's trace draws one step; got --trace with --phase generate; "
                             "expected --phase prefill, decode or --train (or no --trace)")
        return run_parallel(args, hw, eval_options(args))
    _check_training_stack(args, hw)
    graph = _check_policy_offload(args, graph_from_args(args), hw)
    opts = eval_options(args)
    if args.engine == "des":
        from simulator.engines.discrete_event import simulate

        report = simulate(graph, hw, opts, streams=args.streams or 1)
    else:
        report = evaluate(graph, hw, opts)
    unused = getattr(hw, "count", 1) - 1
    if unused > 0 and not graph.meta.get("collective"):  # once the prediction stands (an error comes alone)
        hint = suggest_plan(args, hw)
        print(f"nodeperf: warning: {hw.name} has {hw.count} devices; the model runs on one of them and "
              f"{unused} stay unused" + (f"; a plan that fits: {hint}" if hint else "; add a plan (--tp, --pp, --dp)"),
              file=sys.stderr)
    sys.stderr.write(_phase_train_note(args))  # once the prediction stands (an error comes alone)
    if args.trace is not None:
        import json

        from simulator.report.trace import report_to_chrome_trace

        write_output("--trace", args.trace, json.dumps(report_to_chrome_trace(report), sort_keys=True) + "\n")
    if args.csv is not None:
        write_output("--csv", args.csv, report.to_csv())
    if to_stdout(args.csv, args.trace):  # that output is all standard output shows
        return 0
    if args.json:
        sys.stdout.write(report.to_json() + "\n")
        return 0
    meta = dict(graph.meta)
    desc = ", ".join(f"{k} {meta[k]}" for k in ("phase", "batch", "seq", "context", "dtype") if meta.get(k) is not None)
    how = f", discrete-event engine, {args.streams or 1} stream(s)" if args.engine == "des" else ""
    print(f"{graph.name}{f' ({desc})' if desc else ''} on {report.hardware}{mode_suffix(args.hardware)}: {len(graph)} ops{how}")
    print()
    print(report.to_table(top=15 if args.top is None else args.top, aggregate=args.aggregate))
    if args.csv is not None:
        print(f"\nwrote {len(report.records)} rows to {args.csv}")
    if args.trace is not None:
        print(f"wrote a Chrome trace of {len(report.records)} ops to {args.trace}")
    return 0


def _check_policy_offload(args: argparse.Namespace, graph: Any, hw: Any) -> Any:
    """``graph``, once checked: a recomputation policy that keeps activations on the host (``*_offloaded``,
    ``custom``) on one device, with no plan, is refused as a plan refuses it where the device has no host link;
    elsewhere a warning says the one-device report does not price the offload (a plan's step does)."""
    from simulator.parallel.compose import POLICY_OFFLOAD, host_link_bandwidth

    if not graph.meta.get("offloaded_activations"):
        return graph
    host_link_bandwidth(getattr(hw, "device", hw), f"predict: --recompute {args.recompute}: offload {POLICY_OFFLOAD}")
    print(f"nodeperf: warning: --recompute {args.recompute}: the one-device report keeps the offloaded activations "
          "on the device and prices no host-link time; a plan prices both (e.g. --dp 1 --microbatch B "
          "--global-batch B)", file=sys.stderr)
    return graph


def _check_training_stack(args: argparse.Namespace, hw: Any) -> None:
    """A profile whose ``stack`` field names a training stack's plan-level behaviour (fsdp2, megatron-core,
    xla-spmd: :class:`workloads.frameworks.FrameworkProfile`) describes a training step: refused for one device's
    inference step, which it would cost with a training stack's kernels; the refusal names the inference profiles
    that run on ``hw``'s device."""
    from simulator.cli.common import profile_from_args
    from workloads.frameworks import PROFILES, profiles_for

    profile = profile_from_args(args)
    if profile is None or not profile.stack or args.train or args.phase == "train":
        return
    dev = getattr(hw, "device", hw)
    names = [n for n in profiles_for(getattr(dev, "kind", ""), getattr(dev, "vendor", "")) if not PROFILES[n].stack]
    phase = f" (--phase {args.phase})" if args.phase else ""
    raise ValueError(f"predict: --framework {profile.name}: a training stack (stack {profile.stack!r}); got an "
                     f"inference step{phase} on one device; expected --train, or an inference profile"
                     + (f" that runs on {dev.name}: {', '.join(names)}" if names else ""))


def eval_options(args: argparse.Namespace) -> Any:
    """The evaluation options the flags ask for (with the calibration overlay's identity)."""
    from simulator.engines.options import options_from_settings

    cal_id = ""
    if args.calibration:
        import hashlib
        from pathlib import Path

        cal_id = f"{Path(args.calibration).name}:sha256:{hashlib.sha256(Path(args.calibration).read_bytes()).hexdigest()[:16]}"
    from simulator.cli.common import conv_layout_of, profile_from_args
    from workloads.frameworks import stack_settings

    profile = profile_from_args(args)
    mode = getattr(args, "compile_mode", None)
    got = f"--framework {profile.name}" if profile is not None else "no --framework"
    if mode is not None and (profile is None or profile.name != "compile"):
        raise ValueError(f"--compile-mode {mode}: a torch.compile mode; got {got}; expected --framework compile")
    cdt = bool(getattr(args, "coordinate_descent_tuning", False))
    if cdt and (profile is None or profile.name != "compile"):
        raise ValueError(f"--coordinate-descent-tuning: an Inductor setting; got {got}; expected --framework compile")
    layout = getattr(args, "conv_layout", None)
    settings = {"fusion": args.fusion, "cuda_graphs": args.cuda_graphs, "power_cap": args.power_cap,
                "tf32": args.tf32, "conv_layout": layout or "nhwc"}
    if profile is not None:
        # the stack's costing (workloads.frameworks); explicit --fusion / --cuda-graphs still win
        # (a program replayed from a CUDA graph, e.g. torch.compile mode='reduce-overhead', has no per-op dispatch)
        settings.update(stack_settings(profile, mode, fusion=args.fusion, cuda_graphs=bool(args.cuda_graphs),
                                       conv_layout=conv_layout_of(args, profile), gemv_generated=cdt))
    if getattr(args, "fp8_accumulation", None) is not None:  # explicit --fp8-accumulation wins over the profile
        settings["fp8_accumulation"] = args.fp8_accumulation
    moe = profile.fused_moe_configs if profile is not None else ()  # the stack's tuned fused-MoE kernels
    return options_from_settings(settings, where="options", calibration_id=cal_id, fused_moe_configs=moe)


def _phase_train_note(args: argparse.Namespace) -> str:
    """The note ``--phase train`` without ``--train`` gets: it prices the forward pass alone."""
    if args.phase == "train" and not args.train:
        return ("note: --phase train prices the forward pass of a training step alone (dropout on); "
                "--train prices the whole step (forward, backward, optimizer)\n")
    return ""
