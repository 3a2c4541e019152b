"""Arguments shared by commands that take a MODEL (graph, predict, ...) and the graph they build."""

from __future__ import annotations

import argparse

from workloads.ir import OpGraph

__all__ = ["add_model_args", "graph_from_args", "positive_int"]


def positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}; expected a positive integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"got {v}; expected a positive integer")
    return v


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", metavar="MODEL",
                   help="zoo name (see `nodeperf models`), micro-workload (gemm:m=..,n=..,k=..), .onnx file, "
                        "a graph saved with `nodeperf graph MODEL --save FILE.json` (fixed shapes), or config.json")
    p.add_argument("--batch", type=positive_int, help="batch size (default: the model's)")
    p.add_argument("--seq", type=positive_int, help="sequence length, or image side for vision models")
    p.add_argument("--phase", choices=("forward", "prefill", "decode", "train", "generate"),
                   help="LLM phase (default prefill for decoders); generate: a whole request, prefill then "
                        "--output-len decode steps (predict only)")
    p.add_argument("--context", type=positive_int, help="KV-cache length already present (decode)")
    p.add_argument("--train", action="store_true", help="a whole training step (forward, backward, optimizer)")
    p.add_argument("--optimizer", default="adamw", choices=("sgd", "sgd_momentum", "adam", "adamw"),
                   help="optimizer of the training step (default adamw)")
    p.add_argument("--recompute", default="none", choices=("none", "selective", "full"),
                   help="activation recomputation in training (default none)")
    p.add_argument("--dtype", help="compute/storage dtype (bf16, fp16, fp32, fp8_e4m3, ...)")
    p.add_argument("--no-strict", dest="strict", action="store_false",
                   help="importers: cost unknown operators by their bytes (with a warning) instead of failing")


def graph_from_args(args: argparse.Namespace) -> OpGraph:
    if args.phase == "generate":
        raise ValueError("--phase generate: a whole request (one prefill, then decode steps) is not one graph; "
                         "expected --phase prefill or decode here, or `nodeperf predict MODEL --phase generate "
                         "--input-len N --output-len M`")
    from workloads.resolve import load_workload

    return load_workload(args.model, batch=args.batch, seq=args.seq, phase=args.phase, context=args.context,
                         train=args.train, dtype=args.dtype, optimizer=args.optimizer, recompute=args.recompute,
                         strict=args.strict)
