"""Per-kernel device time (``efficiency.kernel_device_time_s``) and the CUDA/HIP-graph floor
(``efficiency.graph_launch_overhead_s``) recomputed from the measurements they cite.

RRZE-HPC/gpu-benches @ 1038c5d gpu-small-kernels: 30,000 dependent SCALE kernels on 4,096 doubles (65,536 B
read + written per kernel), queued back to back in one stream or replayed as one graph; the first row of
each result file gives GB/s of 65,536 B per kernel at the best block size.
"""

from __future__ import annotations

import dataclasses

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


@pytest.mark.parametrize(("name", "floor_s"), [
    # RRZE graph files, first row, best block size (GB/s of 65,536 B per kernel)
    ("a100-sxm4-80gb", per_kernel_s(49)), ("a100-pcie-40gb", per_kernel_s(49)),  # a100_80_graph.txt (GA100)
    ("a10", per_kernel_s(60)),  # a40_graph.txt (GA102, the A10's die)
    ("l40s", per_kernel_s(70)), ("l4", per_kernel_s(70)),  # l40_graph.txt (AD102; no AD104 figure)
    ("mi210", per_kernel_s(32)), ("mi250x", per_kernel_s(32)),  # mi210_graph.txt (CDNA2, HIP graph)
    # Hazy Research: a no-work kernel under CUDA graphs on an H100; the B200's no-work kernel from aiconfigurator's
    # vLLM cast rows of <= 100 kB (2.181 us less 0.620 us of modelled work, test_b200_kernel_device_time.py);
    # Constant Time Launch blog: (567 - 53) us over (1025 - 100) nodes
    ("h100-sxm5-80gb", 1.3e-6), ("h200-sxm-141gb", 1.3e-6), ("b200", 1.56e-6),
    ("jetson-orin-nano", (567 - 53) / 925 * 1e-6), ("jetson-agx-orin-64gb", (567 - 53) / 925 * 1e-6),
    # no chain measured on the chip: Volta and Turing take the GA100 chain, CDNA3 the CDNA2 one
    ("v100-sxm2-32gb", per_kernel_s(49)), ("t4", per_kernel_s(49)), ("mi300x", per_kernel_s(32)),
])
def test_the_graph_floor_is_the_chips_graph_replayed_chain(name: str, floor_s: float) -> None:
    assert load_device(name).efficiency.graph_launch_overhead_s == pytest.approx(floor_s, rel=5e-3)


def test_the_h200_chain_agrees_with_the_hopper_floor() -> None:
    # h200_graph.txt, first row: 52 GB/s = 1.26 us against the H100's 1.3 us the Hopper floor takes
    assert abs(load_device("h200-sxm-141gb").efficiency.graph_launch_overhead_s / per_kernel_s(52) - 1) < 0.04


def _scale_kernel(name: str, cuda_graphs: bool) -> tuple[float, float, object]:
    """(priced time, device time, efficiency) of one SCALE-sized kernel: the device time is its modelled work and
    latency plus ``kernel_device_time_s``, priced with both launch floors at 0."""
    dev = load_device(name)
    g = build_micro("elementwise:numel=4096,op=relu", dtype="fp64")  # 32 kB in, 32 kB out, as SCALE
    opts = EvalOptions(cuda_graphs=cuda_graphs)
    bare = dataclasses.replace(dev, efficiency=dataclasses.replace(
        dev.efficiency, graph_launch_overhead_s=0.0, launch_overhead_s=0.0))
    return evaluate(g, dev, opts).records[0].time_s, evaluate(g, bare, opts).records[0].time_s, dev.efficiency


def test_where_the_device_time_is_the_chain_the_floor_adds_nothing() -> None:
    """On the A100 the floor and the device time are the same measurement (1.337 us a kernel): the kernel is
    priced at its modelled work plus the device time, never at floor plus device time; that sum is above the
    measured period (the modelled work and latency of an L2-resident 64 kB kernel, 0.84 us, come on top)."""
    t, device, eff = _scale_kernel("a100-sxm4-80gb", cuda_graphs=True)
    assert eff.graph_launch_overhead_s == pytest.approx(eff.kernel_device_time_s)
    assert device > eff.kernel_device_time_s
    assert t == pytest.approx(device)
    assert t < eff.graph_launch_overhead_s + eff.kernel_device_time_s
    assert t > per_kernel_s(49)
    # from a stream the chain runs at 25 GB/s (2.62 us a kernel); the model's eager launch floor is 5 us
    eager, _, _ = _scale_kernel("a100-sxm4-80gb", cuda_graphs=False)
    assert eager == pytest.approx(eff.launch_overhead_s)
    assert eager > device
    assert eager > per_kernel_s(25)


def test_where_the_device_time_is_a_gap_the_floor_sets_a_tiny_kernel() -> None:
    """The V100's device time is a gap beyond a profiled kernel (0.5 us), below the assumed floor (the GA100
    chain): the V100's SCALE kernel takes the floor exactly, not the floor plus anything."""
    t, device, eff = _scale_kernel("v100-sxm2-32gb", cuda_graphs=True)
    assert eff.kernel_device_time_s < device < eff.graph_launch_overhead_s
    assert t == pytest.approx(eff.graph_launch_overhead_s)
    assert t == pytest.approx(per_kernel_s(49), rel=2e-3)
