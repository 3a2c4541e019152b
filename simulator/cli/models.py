"""`nodeperf models`: list the model zoo with one-line descriptions."""

from __future__ import annotations

import argparse
import json

from simulator.report.formatting import table


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="list the model zoo", description="List the model zoo.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from workloads.zoo import list_models

    entries = list_models()
    if args.json:
        print(json.dumps({"models": [{"name": e.name, "family": e.family, "description": e.description,
                                      "source": e.source, "phases": list(e.phases), "defaults": e.defaults}
                                     for e in entries]}, indent=2))
        return 0
    rows = [[e.name, e.family, e.description] for e in entries]
    print(table(rows, ["model", "family", "description"], align="lll"))
    print("\nAlso accepted wherever a model is: micro-workloads such as gemm:m=4096,n=4096,k=4096, "
          "attention:b=2,h=16,s=8192,d=128,causal=1, conv2d:..., copy:bytes=..., an .onnx file or a config.json.")
    return 0
