"""Per-kernel device time (``efficiency.kernel_device_time_s``) recomputed from the measurements it cites.

RRZE-HPC/gpu-benches @ 1038c5d gpu-small-kernels: 30,000 dependent SCALE kernels on 4,096 doubles (65,536 B
read + written per kernel), queued back to back in one stream or replayed as one graph; the first row of
each result file gives GB/s of 65,536 B per kernel at the best block size.
"""

from __future__ import annotations

import pytest

from hwmodels.catalog import load_device
from simulator.engines.analytical import evaluate
from simulator.engines.options import EvalOptions
from workloads.micro import build_micro

KERNEL_BYTES = 2 * 8 * 4096  # one SCALE kernel: 4,096 doubles read and 4,096 written


def per_kernel_s(gb_per_s: float) -> float:
    """Seconds per kernel from the benchmark's printed GB/s at 4,096 elements."""
    return KERNEL_BYTES / (gb_per_s * 1e9)


@pytest.mark.parametrize("name", ["a100-sxm4-80gb", "a100-sxm4-40gb", "a100-pcie-40gb", "a100-pcie-80gb"])
def test_ga100_parts_take_the_a100_graph_chain(name: str) -> None:
    # a100_80_graph.txt, first row: 49 GB/s at the best block size
    assert load_device(name).efficiency.kernel_device_time_s == pytest.approx(per_kernel_s(49), rel=1e-3)
    assert per_kernel_s(49) == pytest.approx(1.337e-6, rel=1e-3)


def test_a10_takes_the_ga102_figure_and_orin_keeps_the_ga106_one() -> None:
    # a40_graph.txt, first row: 60 GB/s (the A40 is the A10's die, GA102)
    assert load_device("a10").efficiency.kernel_device_time_s == pytest.approx(per_kernel_s(60), rel=1e-3)
    # Constant Time Launch blog, RTX 3060: (567 - 53) us over (1025 - 100) graph nodes
    for name in ("jetson-agx-orin-64gb", "jetson-orin-nano"):
        assert load_device(name).efficiency.kernel_device_time_s == pytest.approx((567 - 53) / 925 * 1e-6, rel=1e-3)


def test_hopper_figure_agrees_with_the_h200_graph_chain() -> None:
    # h200_graph.txt, first row: 52 GB/s = 1.26 us; the catalog keeps Hazy Research's 1.3 us (H100)
    h100 = load_device("h100-sxm5-80gb").efficiency.kernel_device_time_s
    assert h100 == pytest.approx(1.3e-6)
    assert abs(h100 / per_kernel_s(52) - 1) < 0.05


def test_the_graph_floor_not_the_device_time_sets_a_tiny_kernel_on_the_a100() -> None:
    """In graph replay the A100 runs the chain at 1.337 us a kernel; the model prices the same kernel at
    its modelled work plus the device time, under the graph floor (2.5 us): the floor is the larger, so
    the model is above the measurement, never below it."""
    dev = load_device("a100-sxm4-80gb")
    g = build_micro("elementwise:numel=4096,op=relu", dtype="fp64")  # 32 kB in, 32 kB out, as SCALE
    rec = evaluate(g, dev, EvalOptions(cuda_graphs=True)).records[0]
    work = max(rec.compute_s, rec.memory_s)
    assert work + dev.efficiency.kernel_device_time_s < dev.efficiency.graph_launch_overhead_s
    assert rec.time_s == pytest.approx(dev.efficiency.graph_launch_overhead_s)
    assert rec.time_s > per_kernel_s(49)
    # from a stream the chain runs at 25 GB/s (2.62 us a kernel); the model's eager launch floor is 5 us
    eager = evaluate(g, dev, EvalOptions()).records[0]
    assert eager.time_s == pytest.approx(dev.efficiency.launch_overhead_s)
    assert eager.time_s > per_kernel_s(25)
