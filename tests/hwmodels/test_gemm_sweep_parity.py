"""The GEMM model over hardware variants that vary the SM count (and everything else) equals each
variant timed alone, bit for bit, though each variant times only the candidates its bound keeps."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device

# the GpuParams fields a sweep varies here, with the spread around the catalog value
_SPREAD = {
    "sms": None,  # drawn as integers (below)
    "dram_bytes_per_s": (0.3, 3.0),
    "matrix_flops_per_s": (0.3, 3.0),
    "l2_bytes_per_s": (0.5, 2.0),
    "dram_latency_s": (0.5, 3.0),
    "l2_latency_s": (0.5, 3.0),
}


def _variants(p: gpu.GpuParams, n: int, seed: int, *, fields=tuple(_SPREAD), capacity: bool = False) -> gpu.GpuParams:
    rng = np.random.default_rng(seed)
    kw = {}
    for f in fields:
        if f == "sms":
            kw[f] = rng.integers(20, 200, n).astype(float)  # many distinct SM counts, some repeated
        else:
            lo, hi = _SPREAD[f]
            kw[f] = getattr(p, f) * rng.uniform(lo, hi, n)
    if capacity:  # a few L2 capacities around the operands of the larger shapes
        kw["l2_capacity_bytes"] = rng.choice([8e6, 40e6, 80e6, 256e6], n)
    return dataclasses.replace(p, **kw)


def _alone(pv: gpu.GpuParams, i: int) -> gpu.GpuParams:
    return dataclasses.replace(pv, **{f.name: getattr(pv, f.name)[i] for f in dataclasses.fields(pv)
                                      if isinstance(getattr(pv, f.name), np.ndarray)})


def _assert_fields_equal(many: gpu.GemmEstimate, i: int, one: gpu.GemmEstimate) -> None:
    for f in dataclasses.fields(one):
        if f.name == "details":
            continue
        got = np.asarray(getattr(many, f.name))
        assert (got[i] if got.ndim else got.item()) == getattr(one, f.name), (f.name, i)


def _bounded_taken(monkeypatch) -> list[int]:
    """Counts the calls of the bounded path that returned a choice."""
    taken = []
    real = gpu._bounded_choice

    def spy(*args):
        got = real(*args)
        taken.append(got is not None)
        return got

    monkeypatch.setattr(gpu, "_bounded_choice", spy)
    return taken


_SHAPES = ((4096, 4096, 4096), (16, 4096, 4096), (2048, 11008, 4096), (100, 300, 1000), (8192, 8192, 512),
           (8192, 16384, 8192))


@pytest.mark.parametrize(("device", "dtype"), [("h100-sxm5-80gb", "bf16"), ("h100-sxm5-80gb", "fp32"),
                                               ("a100-sxm4-80gb", "bf16"), ("b200", "bf16")])
def test_sm_count_sweep_equals_each_variant_alone(device, dtype, monkeypatch):
    # fp32 runs on the SIMT tiles, whose choices expose K-loop stalls (those variants are re-timed)
    dev = load_device(device)
    # the bounded and pruned paths serve devices without a per-SM L2 intake figure (gpu._has_port: the
    # Hopper boards state one, and their sweeps time every candidate); the sweep machinery is tested without it
    p = dataclasses.replace(gpu.gpu_params(dev, dtype), l2_port_ratio=1.0)
    cands = gpu.tile_candidates(dev.arch, matrix_unit=p.uses_matrix_unit, in_bytes=2.0 if dtype == "bf16" else 4.0)
    n = 40
    pv = _variants(p, n, seed=len(device) + len(dtype))
    taken = _bounded_taken(monkeypatch)
    stalled = 0
    for m, nn, k in _SHAPES:
        many = gpu.gemm(m, nn, k, pv, cands)
        stalled += int(np.count_nonzero(np.asarray(many.stall_s) > 0))
        for i in range(n):
            _assert_fields_equal(many, i, gpu.gemm(m, nn, k, _alone(pv, i), cands))
    # the shapes whose operands exceed L2 (their DRAM waves depend on the SM count) took the bounded path
    assert taken.count(True) >= 1
    if dtype == "fp32":
        assert stalled > 0  # the re-timing of stalled variants was exercised


@pytest.mark.parametrize("capacity", [False, True])
def test_bounded_choice_equals_timing_every_candidate(capacity, monkeypatch):
    # 3,000 variants (every field of _SPREAD, and the L2 capacity), compared with _select's full
    # arrays (every candidate timed on every variant): the chosen kernel and every term, bit for bit;
    # the bounded path never gives way here
    monkeypatch.setattr(gpu, "BOUNDED_MAX_PAIRS", np.inf)
    dev = load_device("h100-sxm5-80gb")
    p = dataclasses.replace(gpu.gpu_params(dev, "bf16"), l2_port_ratio=1.0)  # (as above: gpu._has_port)
    cands = gpu.tile_candidates(dev.arch)
    pv = _variants(p, 3000, seed=7, capacity=capacity)
    hw = gpu._hardware(pv)
    for m, nn, k in _SHAPES + ((1, 8192, 8192), (64, 64, 64)):
        key = (m, nn, k, cands, gpu.SPLIT_K_FACTORS, 1, 2.0, 2.0, False, None)
        launch = gpu.gemm_launch(m, nn, k, cands)
        got = gpu._bounded_choice(key, launch, pv, hw)
        want = gpu._select(launch, pv, hw)
        assert got is not None
        for name in gpu._CHOICE:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name} of {m}x{nn}x{k}")


def test_one_sm_count_per_variant_and_repeated_counts_agree():
    # all variants of one SM count take one group; a sweep with few counts gives each variant what a
    # sweep of distinct counts gives it
    dev = load_device("h100-sxm5-80gb")
    p = gpu.gpu_params(dev, "bf16")
    cands = gpu.tile_candidates(dev.arch)
    pv = _variants(p, 64, seed=3)
    few = dataclasses.replace(pv, sms=np.where(np.arange(64) % 2 == 0, 132.0, 78.0))
    e_few = gpu.gemm(4096, 4096, 4096, few, cands)
    for i in (0, 1, 62, 63):
        _assert_fields_equal(e_few, i, gpu.gemm(4096, 4096, 4096, _alone(few, i), cands))
    assert len(set(np.asarray(e_few.ctas_per_sm).tolist())) >= 1 and e_few.time_s.shape == (64,)


def test_sweep_with_the_per_sm_l2_intake_equals_each_variant_alone(monkeypatch):
    # the H100's per-SM L2 intake (efficiency.l2_tile_sm_port_ratio, 2.04) moves a sweep onto timing every
    # candidate (the bounded path is not taken), and each variant still gets what it gets alone
    dev = load_device("h100-sxm5-80gb")
    p = gpu.gpu_params(dev, "bf16")
    assert float(p.l2_port_ratio) == pytest.approx(2.040, abs=5e-4)
    cands = gpu.tile_candidates(dev.arch)
    n = 12
    pv = _variants(p, n, seed=11)
    taken = _bounded_taken(monkeypatch)
    for m, nn, k in ((1024, 1024, 1024), (2048, 512, 512), (100, 300, 1000), (4096, 4096, 4096)):
        many = gpu.gemm(m, nn, k, pv, cands)
        for i in range(n):
            _assert_fields_equal(many, i, gpu.gemm(m, nn, k, _alone(pv, i), cands))
    assert taken == []
