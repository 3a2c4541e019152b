"""`nodeperf measure --device cpu|cuda --out FILE.csv`: time microbenchmarks and networks on this machine."""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
import time

#: Interleaved rounds of ``nodeperf measure --device cpu`` by default (a GPU: one round, one case's
#: tensors on the device at a time). Five rounds of the quick suite at the default budget: 50 ms of
#: timed runs per case per round (simulator.calibration.harness: why rounds).
DEFAULT_CPU_PASSES = 5


def register(sub: argparse._SubParsersAction) -> None:
    from simulator.cli.common import finite_float, nonnegative_int, positive_int

    p = sub.add_parser("measure", help="time microbenchmarks (and zoo networks) on this machine's CPU or GPU",
                       description="Run a microbenchmark suite (GEMM shape sweep per dtype, batched GEMM, conv, "
                                   "copy/elementwise bandwidth, softmax, layernorm, attention) and whole networks "
                                   "executed from their graphs with random inputs; write one CSV row per case.")
    p.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    p.add_argument("--suite", choices=("quick", "full"), default="quick", help="quick (default) or full")
    p.add_argument("--out", required=True, metavar="FILE.csv", help="measurement CSV to write (- for standard output; "
                                                                    "the summary then goes to standard error)")
    p.add_argument("--backend", choices=("auto", "torch", "numpy"), default="auto",
                   help="execution framework (auto: torch when installed, else NumPy on the CPU)")
    p.add_argument("--threads", type=positive_int, help="CPU threads (default: all usable cores); calibrate "
                   "such a file with --hardware host:N")
    p.add_argument("--device-name", help="device column for GPU runs: a catalog name, e.g. h100-sxm5-80gb "
                   "(default: detected from the name and memory the GPU reports)")
    p.add_argument("--no-networks", dest="networks", action="store_false", help="microbenchmarks only")
    p.add_argument("--budget", type=finite_float(0.0, low_open=True), default=0.25, metavar="S",
                   help="timed seconds per case after warm-up, all rounds together (default 0.25)")
    p.add_argument("--passes", type=positive_int, metavar="N",
                   help="time the cases in N interleaved rounds, each case's budget shared among them, in a new "
                        "random order each round (default: 5 on the CPU, 1 on a GPU); lowers run-to-run variance "
                        "on shared machines, keeps every case's tensors allocated until the last round")
    p.add_argument("--seed", type=nonnegative_int, default=0,
                   help="seed of the random inputs and of the rounds' order (default 0)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nodeperf.suggest import near_match
    from simulator.calibration.harness import TimingPolicy, run_cases, suite
    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.hardware import known_devices

    device = args.device.strip().lower()
    if not re.fullmatch(r"cpu|cuda(:\d+)?", device):
        raise ValueError(f"measure: --device; got {args.device!r}; expected cpu, cuda or cuda:N")
    check_outputs(("--out", args.out))  # before any case is timed
    report = sys.stderr if to_stdout(args.out) else sys.stdout
    name = None  # the CPU is "host"; a GPU's catalog name is detected unless given
    if device == "cpu":
        if args.device_name:  # the whole suite had run and written rows named "host", the name dropped
            raise ValueError(f"measure: --device-name {args.device_name}: the device column of a GPU run; got "
                             "--device cpu, whose rows are named host; expected --device cuda (or no --device-name)")
        name = "host"
    elif args.device_name:
        name = args.device_name.strip().lower()
        known = [d for d in known_devices() if d != "host"]
        if name not in known:
            near = near_match(name, known, n=3, prefix=True)
            raise ValueError(f"measure: --device-name; got {args.device_name!r}; expected a catalog device name "
                             "(`nodeperf hardware` lists them)" + (f"; did you mean {' or '.join(map(repr, near))}?"
                                                                    if near else ""))
    cases = suite(args.suite, device, networks=args.networks)
    passes = args.passes or (DEFAULT_CPU_PASSES if device == "cpu" else 1)
    t0 = time.perf_counter()

    def progress(i: int, n: int, case, m) -> None:  # noqa: ANN001 - Case, Measurement | None
        what = f"{m.median_s * 1e3:.4g} ms (+/- {m.iqr_s / 2 * 1e3:.2g}, {m.repetitions} reps)" if m else "skipped"
        print(f"[{i + 1:>3}/{n}] {case.label}: {what}", file=sys.stderr, flush=True)

    ms, skipped = run_cases(cases, device=device, device_name=name, backend=args.backend,
                            policy=TimingPolicy(budget_s=args.budget, passes=passes), seed=args.seed,
                            progress=progress,
                            threads=args.threads)
    if len(ms):
        if args.threads:
            ms = ms.replace(measurements=tuple(dataclasses.replace(m, notes=f"threads={args.threads}") for m in ms))
        write_output("--out", args.out, ms.to_csv_text())
        took = time.perf_counter() - t0
        print(f"{len(ms)} cases measured on {device} ({ms[0].device}) in {took:.1f} s ({len(skipped)} skipped) "
              f"-> {args.out}", file=report)
    for case, reason in skipped:
        print(f"  skipped {case.label}: {reason}", file=report)
    if not len(ms):
        print(f"nodeperf: measure: no case could be measured on {device}; nothing written", file=sys.stderr)
        return 1
    return 0
