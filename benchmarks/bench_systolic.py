"""Times hwmodels.systolic against SCALE-Sim v3 on the same ResNet-50 topology and checks identical cycles.

Usage::

    python benchmarks/bench_systolic.py            # whole ResNet-50, 128x128, weight stationary
    python benchmarks/bench_systolic.py --quick    # first 5 layers only

SCALE-Sim runs once, as a subprocess of its own virtual environment (see
tests/hwmodels/scalesim_oracle.py), with trace writing off; its time is the subprocess wall time.
Ours is the in-process time of one broadcast call over all layers (median of repeated runs), and
separately the time including parsing the topology file. The script prints both, their ratio,
and asserts that every layer's cycle count (SCALE-Sim's "Total Cycles") is identical.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests/hwmodels"))

from scalesim_oracle import run_scalesim  # noqa: E402

from hwmodels.systolic import gemm_cycles  # noqa: E402
from hwmodels.topology import Topology, read_topology  # noqa: E402


def _ours(topo: Topology, rows: int, cols: int, dataflow: str):
    a = topo.gemm_arrays()
    return gemm_cycles(rows, cols, dataflow, a["m"], a["n"], a["k"], ifmap_words=a["ifmap_words"],
                       fold_average="scalesim")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--topology", default=str(REPO / "studies/topologies/resnet50.csv"))
    p.add_argument("--rows", type=int, default=128)
    p.add_argument("--cols", type=int, default=128)
    p.add_argument("--dataflow", default="ws", choices=("os", "ws", "is"))
    p.add_argument("--quick", action="store_true", help="first 5 layers only")
    p.add_argument("--repeats", type=int, default=50)
    args = p.parse_args(argv)

    src = Path(args.topology)
    if args.quick:
        lines = src.read_text().splitlines()
        quick = Path(tempfile.mkdtemp(prefix="bench-systolic-")) / "resnet50_quick.csv"
        quick.write_text("\n".join(lines[:6]) + "\n")
        src = quick

    # ours: parse + evaluate, and evaluate alone
    t0 = time.perf_counter()
    topo = read_topology(src)
    ours = _ours(topo, args.rows, args.cols, args.dataflow)
    first_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        ours = _ours(topo, args.rows, args.cols, args.dataflow)
        times.append(time.perf_counter() - t0)
    ours_s = statistics.median(times)

    theirs, scalesim_s = run_scalesim(args.rows, args.cols, args.dataflow, src, gemm=False,
                                      timeout_s=1800)
    if args.quick:
        src.unlink()
        src.parent.rmdir()

    mismatches = [
        (layer.name, int(ours.compute_cycles[i]), s.total_cycles)
        for i, (layer, s) in enumerate(zip(topo.layers, theirs, strict=True))
        if int(ours.compute_cycles[i]) != s.total_cycles or s.stall_cycles != 0
    ]
    total_ours = int(ours.compute_cycles.sum())
    total_theirs = sum(s.total_cycles for s in theirs)
    print(f"topology        {args.topology}{' (first 5 layers)' if args.quick else ''}")
    print(f"array           {args.rows}x{args.cols}, dataflow {args.dataflow}, {len(topo.layers)} layers")
    print(f"SCALE-Sim v3    {scalesim_s * 1e3:12.1f} ms   total cycles {total_theirs:,}")
    print(f"nodeperf        {ours_s * 1e3:12.3f} ms   total cycles {total_ours:,}"
          f"   (median of {args.repeats}; {first_s * 1e3:.2f} ms with parsing, first call)")
    print(f"speed-up        {scalesim_s / ours_s:12.0f}x")
    print(f"identical cycles: {not mismatches} ({len(topo.layers) - len(mismatches)}/{len(topo.layers)} layers)")
    assert not mismatches, f"cycle counts differ: {mismatches[:5]}"
    assert total_ours == total_theirs
    return 0


if __name__ == "__main__":
    sys.exit(main())
