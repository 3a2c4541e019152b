"""`nodeperf tune MODEL --hardware A,B --objective ... --constraint ...`: the best configurations of a
model (batch, precision, fusion, recomputation, parallel plan (tp, pp, dp, ep, cp) and its training recipe: fp8 linears, stack
profile, sharding, interleaving; device) or of a systolic array
(``--systolic``: rows, columns, dataflow, SRAM budget and split) under constraints, and why the
configurations next to the best were rejected."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from simulator.cli.common import positive_int

__all__ = ["register", "run"]

_COST_METRICS = ("cost_per_hour", "cost_per_million_samples", "cost_per_million_tokens", "cost_per_step")
_MODEL_ONLY = ("batch", "dtype", "fusion", "recompute", "tp", "pp", "dp", "global_batch", "phase", "seq", "context",
               "input_len", "output_len", "prices", "weight_dtype", "kv_dtype", "fp8_linears", "framework", "sharding",
               "interleave", "sequence_parallel", "fill", "pipeline_microbatches", "ep", "cp", "microbatch",
               "capacity_factor", "price", "tco_years", "tco_utilization", "pue", "electricity_usd_per_kwh")
_SYSTOLIC_ONLY = ("rows", "cols", "dataflow", "sram_kib", "sram_split", "dram_words_per_cycle", "clock")
#: Model-search options a serving search (``--serve``) reads: the candidates' devices, tensor-parallel degrees, dtypes,
#: serving stack and prices (:mod:`simulator.cli.tune_serve`); every other option of _MODEL_ONLY is refused with it.
_SERVE_READS = ("tp", "dtype", "framework", "prices", "price", "tco_years", "tco_utilization", "pue",
                "electricity_usd_per_kwh")
#: Options ``--serve`` does not read: given with it, they would be dropped without a word.
_NOT_SERVE = (*(n for n in _MODEL_ONLY if n not in _SERVE_READS), "train", "devices", "constraint", "csv",
              *_SYSTOLIC_ONLY, "systolic", "search", "trials", "all_rejected", "optimizer", "word_bytes")
#: Options only a serving search (``--serve``) reads: without it, the model search would drop them without a word.
_SERVE_ONLY = ("slo", "lengths", "scheduler", "replicas", "max_num_seqs", "chunk", "probe_requests", "probe_seconds",
               "qps_min", "qps_max", "kv_window_layout")
#: The argparse defaults of options :func:`_given` tells apart from a value the user typed.
_DEFAULTS = {"optimizer": "adamw", "word_bytes": 1, "price": "cloud", "tco_utilization": 1.0, "constraint": [],
             "search": "auto", "trials": 64, "slo": [], "lengths": "sharegpt", "scheduler": "vllm",
             "probe_requests": 200, "probe_seconds": 30.0, "qps_min": 0.25, "qps_max": 1024.0,
             "kv_window_layout": "auto"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "tune",
        help="search batch, precision, fusion, plan and device (or a systolic design) under constraints",
        description="Find the best configurations of MODEL under constraints: searches batch size, precision, "
                    "fusion, activation recomputation (--train), the parallel plan (tp x pp x dp, ep, cp on multi-device "
                    "systems) and the device, or with --systolic the rows, columns, dataflow and SRAM split of a "
                    "systolic array for a network. Exhaustive over small spaces (configurations that do not fit in "
                    "memory are rejected before evaluation), Gaussian-process Bayesian optimisation or seeded "
                    "random sampling over large ones. Prints the best configurations and, for the rejected "
                    "neighbours of the best, why; --json prints one JSON object (best, rejected).",
    )
    p.add_argument("model", metavar="MODEL",
                   help="zoo name, micro-workload (gemm:m=..,n=..,k=..), .onnx or config.json; with --systolic a "
                        "SCALE-Sim topology CSV or gemm:m=..,n=..,k=..")
    p.add_argument("--hardware", metavar="NAME[,NAME...]",
                   help="devices/systems to choose from (catalog names, see `nodeperf hardware`)")
    p.add_argument("--devices", metavar="NAME[,NAME...]", help="more devices to choose from (added to --hardware)")
    p.add_argument("--objective", default=None,
                   help="latency | throughput | energy | cost (default latency; cost: the lowest USD per million "
                        "samples, priced by --price, needs device prices); with --serve max-qps | min-cost (default "
                        "max-qps)")
    p.add_argument("--constraint", action="append", default=[], metavar="EXPR",
                   help="METRIC OP VALUE with OP <=, <, >=, > and VALUE a number with an optional unit "
                        "('ttft_s<=0.2', 'ttft_s<=200 ms', 'power_w<=700 W') or k*capacity "
                        "('memory_per_device<=0.9*capacity'); repeatable")
    g = p.add_argument_group("model search space (lists are comma-separated)")
    g.add_argument("--batch", metavar="LIST", help="batch sizes (default 1,2,4,8,16,32,64)")
    g.add_argument("--dtype", metavar="LIST", help="precisions (default fp32,tf32,bf16,fp16,fp8,int8; also int4)")
    g.add_argument("--weight-dtype", metavar="LIST",
                   help="serving weight precisions to search besides 16-bit: none,int8,int4,fp8,mxfp4 (int4/int8: "
                        "weight-only W4A16/W8A16 at group size 128, with --dtype bf16/fp16; fp8: W8A8 fp8; mxfp4: MoE "
                        "experts, with --dtype bf16; none or bf16: 16-bit weights; default: the published checkpoint's "
                        "format (mxfp4 for gpt-oss-*), else none: the weights take --dtype)")
    g.add_argument("--kv-dtype", metavar="DTYPE", help="KV-cache storage dtype of every configuration (fp8)")
    g.add_argument("--fusion", metavar="LIST", help="on,off (default both)")
    g.add_argument("--recompute", metavar="LIST",
                   help="activation recomputation policies (--train only; default none,selective,full): none, "
                        "selective, full, selective-op or a MaxText remat policy (minimal, save_qkv_proj, "
                        "save_dot_except_mlp, minimal_offloaded, ...; as `predict --recompute`) or custom:NAME=CHOICE,... "
                        "(MaxText's custom policy: its NAME=CHOICE items continue it) or modules:NAME,... (Megatron-Core's "
                        "recompute_modules: the module names after it continue it); with --framework a policy a "
                        "stack does not have is skipped under it, one no listed stack has refused")
    _plan_arguments(g)
    _recipe_arguments(g)
    g.add_argument("--prices", metavar="FILE.toml", help="device prices: hourly rents, and purchase prices under --price tco (default "
                        "hwmodels/catalog/prices.toml)")
    from simulator.cli.pricing import add_price_arguments

    add_price_arguments(p.add_argument_group("cost (--objective cost, cost constraints, --serve's min-cost)"),
                        prices_flag=False)  # --prices above is the price file
    w = p.add_argument_group("workload (as for `nodeperf predict`)")
    w.add_argument("--phase", choices=("forward", "prefill", "decode", "generate"),
                   help="LLM phase; generate: a whole request (--input-len, --output-len) with TTFT and TPOT")
    w.add_argument("--seq", type=positive_int, help="sequence length, or image side for vision models")
    w.add_argument("--context", type=positive_int, help="KV-cache length already present (decode)")
    w.add_argument("--train", action="store_true", help="a whole training step")
    w.add_argument("--optimizer", default="adamw", choices=("sgd", "sgd_momentum", "adam", "adamw"),
                   help="optimizer of the training step (default adamw)")
    w.add_argument("--input-len", type=positive_int, help="prompt tokens of a request (--phase generate)")
    w.add_argument("--output-len", type=positive_int, help="generated tokens of a request (--phase generate)")
    _systolic_arguments(p.add_argument_group("systolic design (--systolic)"))
    r = p.add_argument_group("search")
    r.add_argument("--search", default="auto", help="auto | exhaustive | random | bayes (default auto: exhaustive "
                                                    "when the space has at most --trials configurations)")
    r.add_argument("--trials", type=positive_int, default=64, help="evaluations of random/bayes (default 64)")
    r.add_argument("--seed", type=int, default=0, help="seed of the random draws (default 0)")
    r.add_argument("--top", type=positive_int, default=5, help="best configurations to list (default 5)")
    r.add_argument("--rejected", type=int, default=5, metavar="N",
                   help="rejected neighbours of the best to list (default 5)")
    r.add_argument("--all-rejected", action="store_true", help="--json: list every rejected configuration")
    r.add_argument("--json", action="store_true", help="print exactly one JSON object")
    from simulator.cli.tune_serve import add_arguments  # light: argparse only

    add_arguments(p)
    r.add_argument("--csv", metavar="FILE", help="write one CSV row per visited configuration to FILE (feasible ones "
                                                 "ranked best first, then the rejected with their reason; - for "
                                                 "standard output)")
    p.set_defaults(func=run)


def _systolic_arguments(s: argparse._ArgumentGroup) -> None:
    """The systolic-array design space (--systolic)."""
    s.add_argument("--systolic", action="store_true", help="tune a systolic array for the network MODEL")
    s.add_argument("--rows", metavar="LIST", help="array rows (default 8,16,32,64,128)")
    s.add_argument("--cols", metavar="LIST", help="array columns (default 8,16,32,64,128)")
    s.add_argument("--dataflow", metavar="LIST", help="os,ws,is (default all)")
    s.add_argument("--sram-kib", metavar="LIST", help="total scratchpad sizes in KiB (default 256)")
    s.add_argument("--sram-split", metavar="LIST",
                   help="ifmap:filter:ofmap shares (default 1:1:1,2:1:1,1:2:1,1:1:2,2:2:1,1:2:2,2:1:2)")
    s.add_argument("--word-bytes", type=positive_int, default=1, help="bytes per word (default 1)")
    s.add_argument("--dram-words-per-cycle", metavar="W", help="DRAM bandwidth in words per cycle (required)")
    s.add_argument("--clock", metavar="FREQ", help="array clock, e.g. '1 GHz' (gives latency_s)")


def _plan_arguments(g: argparse._ArgumentGroup) -> None:
    """The parallel plan's degrees and the training step's batch (as `predict`'s flags of the same names)."""
    g.add_argument("--tp", metavar="LIST", help="tensor-parallel degrees (systems; default every divisor)")
    g.add_argument("--pp", metavar="LIST", help="pipeline-parallel degrees (systems; default every divisor)")
    g.add_argument("--dp", metavar="LIST", help="data-parallel degrees (systems; default every divisor)")
    g.add_argument("--ep", metavar="LIST|auto",
                   help="expert-parallel degrees (MoE, systems; default 1): the experts split over that many "
                        "data-parallel ranks (ep divides the experts and dp, adds no devices); auto: every divisor "
                        "of the experts up to the devices")
    g.add_argument("--cp", metavar="LIST|auto",
                   help="context-parallel degrees (decoders, systems; default 1): devices = tp x pp x dp x cp, seq a "
                        "multiple of 2 x cp; auto: every divisor of the devices that splits --seq so")
    g.add_argument("--capacity-factor", metavar="LIST",
                   help="MoE plans: expert capacity factors to search, none for dropless (as `predict "
                        "--capacity-factor`; tokens beyond it are dropped), e.g. none,1.25")
    g.add_argument("--microbatch", metavar="LIST",
                   help="--train: sequences per microbatch on each data-parallel rank (as `predict --microbatch`; "
                        "the batch axis, so not with --batch)")
    g.add_argument("--global-batch", type=positive_int, help="training with a plan: sequences per step "
                   "(default dp x batch); plans whose dp x batch does not divide it are skipped")


def _recipe_arguments(g: argparse._ArgumentGroup) -> None:
    """The training-recipe axes of parallel plans."""
    g.add_argument("--fp8-linears", metavar="LIST",
                   help="plans, --train: fp8 linears' scaling recipes to search: none, tensorwise, rowwise, delayed, "
                        "current, mxfp8, int8 (recipes are skipped on devices without fp8 or int8 tensor rates, "
                        "mxfp8 off Blackwell; with --framework a recipe a stack does not run is skipped under it, one no "
                        "listed stack runs refused)")
    g.add_argument("--framework", metavar="LIST",
                   help="plans: software-stack profiles to search, e.g. megatron-core,fsdp2 (GPUs) or maxtext "
                        "(TPUs); a profile is skipped on devices it does not run on; with --serve: the one serving "
                        "stack (default vllm)")
    g.add_argument("--sharding", metavar="LIST",
                   help="plans: data-parallel sharding to search: none, zero1, zero2, zero3, fsdp (PyTorch FSDP full "
                        "sharding, as `predict --fsdp`); sharded plans need dp x cp > 1")
    g.add_argument("--interleave", metavar="LIST",
                   help="plans, --train: virtual stages per device (1: 1F1B; more: the interleaved schedule, pp > 1)")
    g.add_argument("--pipeline-microbatches", metavar="LIST",
                   help="plans, --train with --global-batch: microbatches of one pipeline schedule run, the step "
                        "running the schedule once per N (torch.distributed.pipelining, as NeMo AutoModel accumulates "
                        "gradients; as `predict --pipeline-microbatches`); 0: all in one run (Megatron-Core's); N "
                        "exists with pp > 1 and dividing the rank's microbatches")
    g.add_argument("--sequence-parallel", action="store_true",
                   help="plans: Megatron sequence parallelism wherever tp > 1")
    g.add_argument("--fill", type=float, metavar="SHARE",
                   help="plans may leave devices idle: a plan occupies between SHARE (0-1] of a system's devices and "
                        "all of them (default: tp x pp x dp divides the device count)")


def _items(flag: str, text: str | None) -> list[str] | None:
    if text is None:
        return None
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        from simulator.sweep.tune import TuneError

        raise TuneError(f"{flag}: empty search space entry; got {text!r}; expected a comma-separated list of values")
    return items


def _policies(items: list[str] | None) -> list[str] | None:
    """``--recompute`` items with each ``custom:NAME=CHOICE,...`` and ``modules:NAME,...`` policy joined again: an
    item holding ``=`` continues the custom policy before it (a policy name never holds one), a Megatron-Core
    module name the module policy before it (no policy is named like a module)."""
    if items is None:
        return None
    from workloads.recompute import MEGATRON_MODULES

    out: list[str] = []
    for t in items:
        if "=" in t and not t.startswith("custom:") and out and out[-1].startswith("custom:"):
            out[-1] += "," + t
        elif t in MEGATRON_MODULES and out and out[-1].startswith("modules:"):  # modules:NAME,NAME,...
            out[-1] += "," + t
        else:
            out.append(t)
    return out


def _ints(flag: str, text: str | None, least: int = 1) -> list[int] | None:
    from simulator.sweep.tune import TuneError

    items = _items(flag, text)
    if items is None:
        return None
    out = []
    for t in items:
        if not t.isdigit() or int(t) < least:
            what = "a positive integer" if least == 1 else f"an integer >= {least}"
            raise TuneError(f"{flag}: {t!r} is not {what}; got {text!r}; expected e.g. {least},2,4,8")
        out.append(int(t))
    return out


def _degrees(flag: str, text: str | None) -> list[int] | str | None:
    """A plan degree list, or ``auto`` (every legal degree)."""
    from simulator.sweep.tune import TuneError

    if text is not None and text.strip().lower() == "auto":
        return "auto"
    try:
        return _ints(flag, text)
    except TuneError as exc:
        raise TuneError(f"{exc} or auto") from None


def _capacities(text: str | None) -> list[float | str] | None:
    """``--capacity-factor``: ``none`` (dropless) or numbers > 0."""
    import math

    from simulator.sweep.tune import TuneError

    out: list[float | str] = []
    for t in _items("--capacity-factor", text) or []:
        try:
            v = "none" if t.lower() == "none" else float(t)
        except ValueError:
            v = math.nan
        if v != "none" and not 0 < v < math.inf:
            raise TuneError(f"--capacity-factor: {t!r} is not none or a number > 0; got {text!r}; expected e.g. "
                            "none,1.0,1.25")
        out.append(v)
    return out if text is not None else None


def _batches(args: argparse.Namespace) -> list[int] | None:
    """The batch axis: ``--batch``, or with --train ``--microbatch`` (predict's name for a training plan's batch)."""
    from simulator.sweep.tune import TuneError

    if args.microbatch is None:
        return _ints("--batch", args.batch)
    if not args.train:
        raise TuneError(f"--microbatch: sequences per training microbatch; got --microbatch {args.microbatch} without "
                        "--train; expected --train, or --batch for inference")
    if args.batch is not None:
        raise TuneError(f"--microbatch: the batch axis of a training search; got --batch {args.batch} and --microbatch "
                        f"{args.microbatch}; expected one of them")
    return _ints("--microbatch", args.microbatch)


def _floats(flag: str, text: str | None) -> list[float] | None:
    import math

    from simulator.sweep.tune import TuneError

    items = _items(flag, text)
    if items is None:
        return None
    out = []
    for t in items:
        try:
            v = float(t)
        except ValueError:
            v = math.nan
        if not math.isfinite(v) or v <= 0:
            raise TuneError(f"{flag}: {t!r} is not a positive number; got {text!r}; expected e.g. 128,256")
        out.append(v)
    return out


def _fusion(text: str | None) -> list[bool] | None:
    from simulator.sweep.tune import TuneError

    items = _items("--fusion", text)
    if items is None:
        return None
    table = {"on": True, "off": False, "true": True, "false": False, "yes": True, "no": False}
    bad = [t for t in items if t.lower() not in table]
    if bad:
        raise TuneError(f"--fusion: {bad[0]!r}; got {text!r}; expected on, off or on,off")
    return [table[t.lower()] for t in items]


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    return [n for n in names if getattr(args, n, None) not in (None, False, _DEFAULTS.get(n, None))]


def run(args: argparse.Namespace) -> int:
    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.sweep.tune import TuneError

    if not args.verbose:  # fallback and memory warnings of every configuration would drown the answer
        logging.getLogger("simulator").setLevel(logging.ERROR)
    if args.rejected < 0:
        raise TuneError(f"--rejected: got {args.rejected}; expected a count >= 0")
    if args.serve:  # serving capacity planning: simulator/sweep/tune_serving.py
        from simulator.cli.tune_serve import run_serve

        wrong = _given(args, _NOT_SERVE)
        if wrong:
            flag = "--" + wrong[0].replace("_", "-")
            raise TuneError(f"tune --serve: {flag} is a model-search option; got {flag} with --serve; expected the "
                            "serving search's own options (--hardware, --tp, --dtype, --framework, --slo, --replicas, "
                            "--max-num-seqs, --chunk, the price options), or no --serve")

        return run_serve(args)
    wrong = _given(args, _SERVE_ONLY)
    if wrong:
        flag = "--" + wrong[0].replace("_", "-")
        raise TuneError(f"tune: {flag} is a serving-search option; got {flag} without --serve; expected --serve "
                        "(a search of serving deployments under --slo), or no " + flag)
    args.objective = args.objective or "latency"
    check_outputs(("--csv", args.csv), json_flag=args.json)
    if args.systolic:
        wrong = _given(args, _MODEL_ONLY) + (["hardware"] if args.hardware else []) + \
            (["devices"] if args.devices else []) + (["train"] if args.train else [])
        if wrong:
            flag = "--" + wrong[0].replace("_", "-")
            raise TuneError(f"tune --systolic: {flag} is a model-search option; got {flag} with --systolic; expected "
                            "--rows/--cols/--dataflow/--sram-kib/--sram-split")
        problem, metric, direction = _systolic_problem(args)
    else:
        wrong = _given(args, _SYSTOLIC_ONLY)
        if wrong:
            flag = "--" + wrong[0].replace("_", "-")
            raise TuneError(f"tune: {flag} describes a systolic design; got it without --systolic; expected --systolic")
        problem, metric, direction = _model_problem(args)
    constraints = _constraints(args, problem)
    from simulator.sweep.tune import tune

    result = tune(problem, constraints, metric, direction, objective=args.objective, search=args.search,
                  trials=args.trials, seed=args.seed, top=args.top)
    if "cost_per_hour" in getattr(problem, "metrics", ()):  # candidates priced by different providers: one line
        from simulator.cli.pricing import warn_mixed_providers

        warn_mixed_providers(problem.pricing, sorted({str(d.name) for d in problem.device.values()}), problem.prices)
    if args.csv is not None:
        write_output("--csv", args.csv, _csv(problem, result))
        if to_stdout(args.csv):
            return 0 if result.best else 1
    if args.json:
        doc = result.to_json(rejected=args.rejected, all_rejected=args.all_rejected)
        doc["model"] = args.model
        _with_plans(problem, doc)
        _with_costs(problem, doc)
        sys.stdout.write(json.dumps(doc, sort_keys=True, indent=1) + "\n")
    else:
        print(_text(args, problem, result))
        if args.csv is not None:
            print(f"\nwrote {len(result.visited)} rows to {args.csv}")
    return 0 if result.best else 1


def _with_plans(problem: Any, doc: dict[str, Any]) -> None:
    """Each best and rejected entry of a plan search with its ``plan`` as `predict --json` states it (``tp`` .. ``cp``,
    ``microbatch``, ``global_batch``, ``microbatches``)."""
    plan_json = getattr(problem, "plan_json", None)
    for entry in (*doc["best"], *doc["rejected"]) if plan_json else ():
        plan = plan_json(entry["config"])
        if plan is not None:
            entry["plan"] = plan


def _with_costs(problem: Any, doc: dict[str, Any]) -> None:
    """Each evaluated best and rejected entry with its ``cost`` object, as ``nodeperf serve --json``'s (mode, inputs,
    parts, usd_per_device_hour, usd_total; power_w and power_from for --price tco), where the search is priced."""
    if "cost_per_hour" not in getattr(problem, "metrics", ()):
        return
    for entry in (*doc["best"], *doc["rejected"]):
        if "latency_s" in entry.get("metrics", {}):
            entry["cost"] = problem.cost(entry["config"], entry["metrics"])


def _objective(name: str, table: dict[str, tuple[str, str]], extra: str = "") -> tuple[str, str]:
    from nodeperf.suggest import did_you_mean
    from simulator.sweep.tune import TuneError

    if name not in table:
        raise TuneError(f"--objective: unknown objective {name!r}; got {name!r}; expected one of "
                        f"{', '.join(table)}{extra}{did_you_mean(name, list(table))}")
    return table[name]


def _model_problem(args: argparse.Namespace) -> tuple[Any, str, str]:
    from hwmodels.cost import load_price_entries
    from simulator.cli.pricing import pricing_from_args
    from simulator.sweep.tune import OBJECTIVES, TuneError
    from simulator.sweep.tune_model import (
        DEFAULT_BATCHES,
        DEFAULT_DTYPES,
        ModelProblem,
    )

    metric, direction = _objective(args.objective, OBJECTIVES)
    names = (_items("--hardware", args.hardware) or []) + (_items("--devices", args.devices) or [])
    if not names:
        raise TuneError("tune: --hardware missing; got no device; expected --hardware NAME[,NAME...] (see "
                        "`nodeperf hardware`), or --systolic for a systolic design")
    if args.weight_dtype is None and not args.train:  # the weights as the published checkpoint ships them
        from workloads.zoo import checkpoint_weight_dtype

        ckpt = checkpoint_weight_dtype(args.model)
        if ckpt is not None:
            args.weight_dtype = ckpt[0]
            sys.stderr.write(f"note: {args.model}: weights priced as the published checkpoint ships them (--weight-dtype "
                             f"{ckpt[0]}, with --dtype bf16 only); --weight-dtype bf16 prices 16-bit weights\n")
    problem = ModelProblem(
        args.model, names, batch=_batches(args) or DEFAULT_BATCHES,
        dtypes=_items("--dtype", args.dtype) or DEFAULT_DTYPES, fusion=_fusion(args.fusion) or (False, True),
        recompute=_policies(_items("--recompute", args.recompute)), phase=args.phase, seq=args.seq, context=args.context,
        train=args.train, optimizer=args.optimizer, input_len=args.input_len, output_len=args.output_len,
        tp=_ints("--tp", args.tp), pp=_ints("--pp", args.pp), dp=_ints("--dp", args.dp),
        global_batch=args.global_batch, prices=load_price_entries(args.prices), pricing=pricing_from_args(args, []),
        weight_dtypes=_items("--weight-dtype", args.weight_dtype) or ("none",), kv_dtype=args.kv_dtype,
        fp8_linears=_items("--fp8-linears", args.fp8_linears), frameworks=_items("--framework", args.framework),
        sharding=_items("--sharding", args.sharding), interleave=_ints("--interleave", args.interleave),
        sequence_parallel=args.sequence_parallel, fill=args.fill,
        pipeline_microbatches=_ints("--pipeline-microbatches", args.pipeline_microbatches, least=0),
        ep=_degrees("--ep", args.ep), cp=_degrees("--cp", args.cp), capacity_factor=_capacities(args.capacity_factor))
    if problem.pricing.mode == "tco":  # every candidate's purchase price, as serve checks it: one located line
        pricing_from_args(args, sorted({str(d.name) for d in problem.device.values()}))
    if args.objective == "cost":
        problem.require_cost("--objective cost")
    return problem, metric, direction


def _systolic_problem(args: argparse.Namespace) -> tuple[Any, str, str]:
    from hwmodels.units import parse_quantity
    from simulator.sweep.tune import TuneError
    from simulator.sweep.tune_systolic import (
        DEFAULT_SIDES,
        DEFAULT_SPLITS,
        SYSTOLIC_OBJECTIVES,
        SystolicProblem,
        load_network,
    )

    metric, direction = _objective(args.objective, SYSTOLIC_OBJECTIVES, " (a systolic design has no price model)")
    if args.dram_words_per_cycle is None:
        raise TuneError("tune --systolic: --dram-words-per-cycle missing; expected the DRAM bandwidth in words per "
                        "cycle (e.g. 16): without it memory is ideal and the SRAM split does not matter")
    bw = _floats("--dram-words-per-cycle", args.dram_words_per_cycle)
    clock = None
    if args.clock is not None:
        try:
            clock = parse_quantity(args.clock, "Hz")
        except ValueError as exc:
            raise TuneError(f"--clock: {exc}") from None
        metric = "latency_s" if metric == "cycles" else metric
    problem = SystolicProblem(
        load_network(args.model), rows=_ints("--rows", args.rows) or DEFAULT_SIDES,
        cols=_ints("--cols", args.cols) or DEFAULT_SIDES, dataflows=_items("--dataflow", args.dataflow) or
        ("os", "ws", "is"), sram_kib=_floats("--sram-kib", args.sram_kib) or (256.0,),
        splits=_items("--sram-split", args.sram_split) or DEFAULT_SPLITS, dram_words_per_cycle=bw[0] if bw else 0.0,
        word_bytes=args.word_bytes, clock_hz=clock)
    return problem, metric, direction


def _constraints(args: argparse.Namespace, problem: Any) -> list[Any]:
    from simulator.sweep.tune import parse_constraint

    allowed = set(problem.metrics)
    if hasattr(problem, "require_cost"):
        allowed |= set(_COST_METRICS)
    out = []
    for text in args.constraint:
        c = parse_constraint(text, allowed)
        if c.metric in _COST_METRICS and c.metric not in problem.metrics:
            problem.require_cost(f"--constraint {text!r}")
            _require_metric(problem, c.metric, text)
        out.append(c)
    return out


def _require_metric(problem: Any, metric: str, text: str) -> None:
    """A priced metric this search does not produce (cost_per_step without --train, cost_per_million_tokens of a
    model without tokens) is one located line."""
    from simulator.sweep.tune import TuneError

    if metric not in problem.metrics:
        what = "a training step's (--train)" if metric == "cost_per_step" else "an LLM's tokens (tokens_per_s)"
        raise TuneError(f"--constraint {text!r}: {metric} prices {what}; got a search without it; expected one of "
                        f"{', '.join(m for m in _COST_METRICS if m in problem.metrics)}")


def _fmt_config_value(v: Any) -> str:
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def _columns(problem: Any, metric: str) -> list[str]:
    if hasattr(problem, "require_cost"):
        cols = ["latency_s", "throughput_per_s", "energy_per_sample_j", "power_w", "memory_per_device",
                "ttft_s", "tpot_s", "cost_per_million_samples", "cost_per_million_tokens", "cost_per_step"]
    else:
        cols = ["cycles", "latency_s", "energy_j", "util_pct", "stall_cycles", "dram_words", "pes", "sram_bytes"]
    cols = [c for c in cols if c in problem.metrics]
    return [metric] + [c for c in cols if c != metric]


_HEADS = {"latency_s": "latency", "throughput_per_s": "throughput", "energy_per_sample_j": "energy/sample",
          "power_w": "power/device", "memory_per_device": "memory/device", "ttft_s": "TTFT", "tpot_s": "TPOT",
          "cost_per_million_samples": "cost/1M samples", "cost_per_million_tokens": "cost/1M tokens",
          "cost_per_step": "cost/step", "cycles": "cycles", "util_pct": "util",
          "stall_cycles": "stall cycles", "dram_words": "DRAM words", "pes": "PEs", "sram_bytes": "SRAM",
          "energy_j": "energy"}


#: CSV column of a metric whose name carries no unit.
_CSV_NAMES = {"memory_per_device": "memory_per_device_bytes", "capacity": "capacity_bytes",
              "cost_per_hour": "cost_usd_per_hour", "cost_per_million_samples": "cost_usd_per_million_samples",
              "cost_per_million_tokens": "cost_usd_per_million_tokens", "cost_per_step": "cost_usd_per_step",
              "mfu": "mfu_fraction", "devices": "devices_count"}


def _csv(problem: Any, result: Any) -> str:
    """Every visited configuration: ``rank`` (feasible ones, best first), ``status``, the search axes, each
    metric (column named with its unit) and ``reason`` (why a configuration was rejected)."""
    from simulator.cli.output import csv_text

    axes = [a.name for a in result.space.axes]
    first = _columns(problem, result.metric)
    metrics = first + sorted(set(problem.metrics) - set(first))
    feasible = result.feasible
    others = sorted((t for t in result.visited if t.status != "ok"), key=lambda t: t.index)
    plans = getattr(problem, "plans", False) and getattr(problem, "train", False)
    steps = tuple(k for k in _PLAN_STEP if k not in axes) if plans else ()
    rows = [[k + 1 if t.status == "ok" else None, t.status, *(_fmt_config_value(t.config[a]) for a in axes),
             *(repr(float(t.metrics[m])) if m in t.metrics else None for m in metrics),
             *_plan_cells(problem, t.config, steps), t.reason or None]
            for k, t in enumerate([*feasible, *others])]
    return csv_text(["rank", "status", *axes, *(_CSV_NAMES.get(m, m) for m in metrics), *steps, "reason"], rows)


#: CSV columns of a training plan's step (its ``plan`` JSON fields): the microbatch is the batch axis.
_PLAN_STEP = ("ep", "cp", "microbatch", "global_batch", "microbatches")


def _plan_cells(problem: Any, config: dict[str, Any], steps: tuple[str, ...]) -> list[Any]:
    """A configuration's ``steps`` fields of its training plan (empty cells on one device or a plan that cannot be
    built)."""
    plan = problem.plan_json(config) if steps else None
    return [plan.get(k) if plan else None for k in steps]


def _priced_line(pricing: Any, problem: Any = None) -> str:
    """How the search's cost metrics price a device-hour (one line of the text report): in cloud mode with each
    candidate device's provider (whose rent it is), in TCO mode with its purchase basis (what its purchase price
    covers)."""
    where = pricing.prices or "hwmodels/catalog/prices.toml"
    prices = getattr(problem, "prices", {}) or {}
    names = sorted({str(d.name).lower() for d in getattr(problem, "device", {}).values()})
    if pricing.mode != "tco":
        rents = ", ".join(f"{n} {prices[n].provider or 'unstated'}" for n in names
                          if n in prices and prices[n].usd_per_hour is not None)
        return f"cost: cloud on-demand price per device-hour ({where}{'; provider ' + rents if rents else ''})"
    bases = ", ".join(f"{n} {prices[n].purchase_basis}" for n in names if n in prices and prices[n].purchase_basis)
    return (f"cost: tco per device-hour: purchase_usd ({where}{'; basis ' + bases if bases else ''}) over {pricing.years:g} y x 8760 h at "
            f"{pricing.utilization:.0%} utilization + each configuration's own average power x PUE {pricing.pue:g} "
            f"x {pricing.usd_per_kwh:g} "
            "USD/kWh")


def _describe(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={_fmt_config_value(v)}" for k, v in config.items())


def _text(args: argparse.Namespace, problem: Any, result: Any) -> str:
    from simulator.report.formatting import table
    from simulator.sweep.tune import format_metric

    word = "lower" if result.direction == "min" else "higher"
    valid = result.valid_size if result.valid_size is not None else result.space.size
    lines = [f"tune {args.model}: objective {result.objective} ({result.metric}, {word} is better); "
             f"{result.method} search over {valid:,} configurations (seed {result.seed})",
             f"visited {len(result.visited):,}: {result.evaluations:,} evaluated, {result.pruned:,} pruned before "
             f"evaluation, {len(result.feasible):,} meet the constraints"]
    if result.constraints:
        lines.append("constraints: " + "; ".join(c.text for c in result.constraints))
    if "cost_per_hour" in problem.metrics and getattr(problem, "pricing", None) is not None:
        lines.append(_priced_line(problem.pricing, problem))
    for name, n in sorted(getattr(problem, "count", {}).items()):
        if n > 1 and not getattr(problem, "is_transformer", True):
            lines.append(f"note: {name} has {n} devices; {args.model} is not a transformer that parallel plans split, "
                         "so it runs on one of them")
    lines.append("")
    best = result.best
    if best:
        axes = [a.name for a in result.space.axes]
        cols = _columns(problem, result.metric)
        rows = [[str(k + 1), *(_fmt_config_value(t.config[a]) for a in axes),
                 *(format_metric(c, t.metrics[c]) for c in cols)] for k, t in enumerate(best)]
        lines.append("Best configurations:")
        lines.append(table(rows, ["#", *axes, *(_HEADS.get(c, c) for c in cols)],
                           align="r" + "l" * len(axes) + "r" * len(cols)))
    else:
        lines.append("No configuration meets the constraints.")
    near = result.nearest_rejected(args.rejected)
    if near:
        what = "Rejected neighbours of the best" if best else "Rejected configurations closest to feasible"
        lines += ["", f"{what} ({len(near)} of {len(result.rejected):,}; --json --all-rejected lists all):"]
        for t in near:
            lines.append(f"  {_describe(t.config)}: {t.reason}")
    return "\n".join(lines)
