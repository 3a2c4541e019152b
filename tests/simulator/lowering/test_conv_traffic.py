"""An implicit-GEMM convolution's time, DRAM traffic and bound label agree (hwmodels.gpu.ImplicitOperand).

The GEMM model prices the A operand of a convolution as the tensor DRAM really delivers (the input,
halo included, once per wave column group of CTAs) inside every candidate's DRAM term, so the tile
choice, the memory time, the reported bytes and the bound term come from one count. The L2 and
shared-memory terms keep the im2col panels the CTAs load.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from hwmodels import gpu
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads.micro import build_micro
from workloads.training import training_graph
from workloads.zoo import build_model

REPRO = "conv2d:n=64,c=256,h=56,w=56,k=256,r=3,s=3,pad=1"
MEMORY_TERMS = ("dram", "l2", "smem")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-80gb")


def _term(notes: str) -> str:
    """The GEMM model's largest term, as the lowering notes it ("bound term <name>")."""
    assert "bound term " in notes, notes
    return notes.split("bound term ")[-1].split(";")[0].strip()


def _dram_rate(dev) -> float:
    return dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction


# ------------------------------------------------------------------------------------------------
# the geometry of the implicit operand


def test_touched_positions_by_brute_force():
    # 3x3 pad 1 stride 1 and 2: every input row is read; 1x1 stride 2: every other one
    assert gpu.ImplicitOperand.fprop(1, 8, (56, 56), (56, 56), (3, 3), (1, 1), (1, 1), (1, 1)).source == (56, 56)
    assert gpu.ImplicitOperand.fprop(1, 8, (56, 56), (28, 28), (3, 3), (2, 2), (1, 1), (1, 1)).source == (56, 56)
    assert gpu.ImplicitOperand.fprop(1, 8, (56, 56), (28, 28), (1, 1), (2, 2), (1, 1), (0, 0)).source == (28, 28)
    # ResNet stem 7x7/2 pad 3 on 224: all rows; halo 7 - 2 = 5
    stem = gpu.ImplicitOperand.fprop(1, 3, (224, 224), (112, 112), (7, 7), (2, 2), (1, 1), (3, 3))
    assert stem.source == (224, 224) and stem.halo == (5.0, 5.0)


def test_touched_positions_equal_a_brute_force_union():
    rng = np.random.default_rng(1)
    for _ in range(200):
        h, f, st, d, p = (int(rng.integers(1, 40)), int(rng.integers(1, 8)), int(rng.integers(1, 4)),
                          int(rng.integers(1, 3)), int(rng.integers(0, 4)))
        out = (h + 2 * p - (f - 1) * d - 1) // st + 1
        if out < 1:
            continue
        want = len({o * st + t * d - p for o in range(out) for t in range(f)} & set(range(h)))
        assert gpu._touched(h, out, f, st, d, p) == want


def test_panel_elements_hand_counted():
    op = gpu.ImplicitOperand.fprop(64, 256, (56, 56), (56, 56), (3, 3), (1, 1), (1, 1), (1, 1))
    # 128 output pixels = 128/56 output rows, which read 128/56 + 2 input rows of 56 pixels x 256 channels
    assert op.panel_elements(128.0) == pytest.approx((128 / 56 + 2) * 56 * 256, rel=1e-12)
    # 16 output pixels of one row read 3 input rows of 16 + 2 pixels
    assert op.panel_elements(16.0) == pytest.approx(3 * 18 * 256, rel=1e-12)
    # never more than the im2col panel: a 1x1 conv's panel is its own rows
    one = gpu.ImplicitOperand.fprop(8, 64, (14, 14), (14, 14), (1, 1), (1, 1), (1, 1), (0, 0))
    assert float(one.panel_scale(128.0, 64)) == 1.0
    assert op.unique_elements == 64 * 256 * 56 * 56
    # wgrad: a panel of 64 filter-tap rows of a 3x3 conv covers 64/9 channels of every image
    wg = gpu.ImplicitOperand.wgrad(2, 32, (8, 8), (8, 8), (3, 3), (1, 1), (1, 1), (1, 1))
    assert wg.panel_elements(64.0) == pytest.approx(64 / 9 * 2 * 64, rel=1e-12)


# ------------------------------------------------------------------------------------------------
# DRAM traffic, hand-checked


def test_small_conv_reads_input_filter_and_writes_output_once(a100):
    """Everything fits in L2: DRAM sees x once, w once and y once."""
    g = build_micro("conv2d:n=1,c=64,h=56,w=56,k=64,r=3,s=3,pad=1", "fp16")
    rec = evaluate(g, a100).records[0]
    x, w, y = 64 * 56 * 56 * 2, 64 * 64 * 9 * 2, 64 * 56 * 56 * 2
    assert rec.dram_bytes == x + w + y


def test_panel_reuse_rule_when_the_operands_do_not_fit_in_l2():
    """Four resident CTAs (a 2 x 2 block of 128 x 128 tiles) per wave, four waves: each wave reads two
    A panels (the input rows they touch, halo included) and two B panels; C is written once."""
    tile = gpu.TileCandidate(128, 128, 32, 3, 2, 2, 128)
    op = gpu.ImplicitOperand.fprop(1, 64, (32, 32), (32, 32), (3, 3), (1, 1), (1, 1), (1, 1))
    m, n, k = 32 * 32, 256, 64 * 9
    launch = gpu.gemm_launch(m, n, k, (tile,), (1,), a_operand=op)
    a_panel = (128 / 32 + 2) * 32 * 64 * 2  # 6 input rows x 32 pixels x 64 channels, fp16
    b_panel = 128 * k * 2
    c = m * n * 2
    assert launch.a_elements == 64 * 32 * 32
    assert gpu.gemm_dram_bytes(launch, 4.0, 1.0, 100_000.0)[0] == pytest.approx(4 * (2 * a_panel + 2 * b_panel) + c,
                                                                                 rel=1e-12)
    # with room in L2: the input once, the filter once, the output once
    assert gpu.gemm_dram_bytes(launch, 4.0, 1.0, 1e9)[0] == 64 * 32 * 32 * 2 + k * n * 2 + c
    # the plain GEMM of the same im2col matrix reads every A panel whole
    plain = gpu.gemm_launch(m, n, k, (tile,), (1,))
    assert gpu.gemm_dram_bytes(plain, 4.0, 1.0, 100_000.0)[0] == 4 * (2 * 128 * k * 2 + 2 * b_panel) + c


def test_dgrad_and_wgrad_read_their_source_once_when_it_fits(a100):
    p = gpu.gpu_params(a100, "fp16")
    cands = gpu.tile_candidates(a100.arch, True, 2.0)
    # dgrad of a 3x3 stride-1 conv, C = K = 64 on 28x28, batch 4: dY, w and dX once
    dg = gpu.ImplicitOperand.dgrad(4, 64, (28, 28), (28, 28), (3, 3), (1, 1), (1, 1))
    e = gpu.gemm(4 * 28 * 28, 64, 64 * 9, p, cands, a_operand=dg)
    act = 4 * 64 * 28 * 28 * 2
    assert e.dram_bytes == act + 64 * 9 * 64 * 2 + act
    # wgrad: dW^T[C*R*S, K] = im2col(x)^T @ dY: x, dY and dW once
    wg = gpu.ImplicitOperand.wgrad(4, 64, (28, 28), (28, 28), (3, 3), (1, 1), (1, 1), (1, 1))
    e = gpu.gemm(64 * 9, 64, 4 * 28 * 28, p, cands, a_operand=wg)
    assert e.dram_bytes == act + act + 64 * 9 * 64 * 2


# ------------------------------------------------------------------------------------------------
# the reproduction of the defect and the ResNet-50 check


def test_reproduction_time_bytes_and_label_agree():
    """The 3x3 conv of the issue: L2-bound (the im2col panels at the catalog's L2 tile bandwidth); its
    DRAM bytes are x + w + y once and the memory time is not the DRAM time of any im2col count. On a
    V100 (plain-load tile copies, no cp.async): on an A100 the cp.async tile rate makes it compute-bound."""
    v100 = load_hardware("v100-sxm2-32gb")
    rec = evaluate(build_micro(REPRO, "fp16"), v100).records[0]
    x = 64 * 256 * 56 * 56 * 2
    assert rec.dram_bytes == x + 256 * 256 * 9 * 2 + x
    assert _term(rec.notes) == "l2" and rec.bound == "memory"
    # the busiest of the 80 SMs runs ceil(ctas / 80) CTAs, each loading its panels at 1/80 of the L2
    per_cta = rec.l2_bytes / rec.ctas
    l2_rate = v100.memory[1].read_bandwidth_bytes_per_s * v100.efficiency.l2_tile_bandwidth_fraction
    assert v100.compute.units == 80 and v100.memory[1].name.lower() == "l2"
    assert rec.memory_s == pytest.approx(np.ceil(rec.ctas / 80) * per_cta * 80 / l2_rate, rel=1e-12)
    assert rec.memory_s > rec.dram_bytes / _dram_rate(v100) * 4  # far from DRAM-bound


def test_reproduction_is_compute_bound_on_an_a100(a100):
    """At the A100's cp.async tile rate (0.755 of 5120 B/clk) the same conv's L2 panels take less time
    than its math: the label is compute, the term the main loop."""
    rec = evaluate(build_micro(REPRO, "fp16"), a100).records[0]
    assert _term(rec.notes) == "main-loop" and rec.bound == "compute"
    l2_rate = a100.memory[1].read_bandwidth_bytes_per_s * a100.efficiency.l2_tile_bandwidth_fraction
    assert np.ceil(rec.ctas / 108) * rec.l2_bytes / rec.ctas * 108 / l2_rate < rec.compute_s


@pytest.mark.parametrize("hw", ["a100-sxm4-80gb", "h100-sxm5-80gb", "t4"])
def test_resnet50_convs_time_traffic_and_label_agree(hw):
    """Every conv of ResNet-50 (inference and training, fp16, batch 32): achieved DRAM bandwidth within
    the device's peak; the memory time covers the reported DRAM bytes, and equals their DRAM time where
    DRAM is the model's largest term; the engine's compute/memory label is the class of that term."""
    dev = load_hardware(hw)
    peak, rate = dev.main_memory.read_bandwidth_bytes_per_s, _dram_rate(dev)
    fwd = build_model("resnet50", batch=32, phase="forward", dtype="fp16")
    train = training_graph(build_model("resnet50", batch=32, phase="train", dtype="fp16"))
    seen = {"dram": 0, "compute": 0, "memory": 0}
    for g in (fwd, train):
        for rec in evaluate(g, dev, EvalOptions(power_cap=False)).records:
            if not rec.kind.startswith("conv"):
                continue
            term = _term(rec.notes)
            assert rec.dram_bytes / rec.time_s <= peak, rec.name
            assert rec.memory_s >= rec.dram_bytes / rate * (1 - 1e-12), rec.name
            if term == "dram":
                seen["dram"] += 1
                assert rec.memory_s == pytest.approx(rec.dram_bytes / rate, rel=1e-9), rec.name
            if rec.bound in ("compute", "memory"):
                seen[rec.bound] += 1
                assert (term == "main-loop") if rec.bound == "compute" else (term in MEMORY_TERMS), rec.name
    assert seen["memory"] > 0 and seen["dram"] + seen["compute"] > 0  # the checks above did run


# ------------------------------------------------------------------------------------------------
# the pruned vectorised path equals the scalar path


def test_vectorised_conv_gemm_equals_the_scalar_model(a100):
    """Over PRUNE_MIN_VARIANTS+ hardware variants (one axis; DRAM bandwidth and tensor rate vary, so
    some variants are DRAM-bound), the candidates are pruned and every variant's result is the scalar
    model's, bit for bit."""
    p = gpu.gpu_params(a100, "fp16")
    cands = gpu.tile_candidates(a100.arch, True, 2.0)
    nvar = gpu.PRUNE_MIN_VARIANTS + 8
    rng = np.random.default_rng(19)
    bw = p.dram_bytes_per_s * rng.uniform(0.02, 1.5, nvar)
    rate = p.matrix_flops_per_s * rng.uniform(0.5, 2.0, nvar)
    pv = dataclasses.replace(p, dram_bytes_per_s=bw, matrix_flops_per_s=rate)
    for geo, (m, n, k) in (
        (gpu.ImplicitOperand.fprop(64, 256, (56, 56), (56, 56), (3, 3), (1, 1), (1, 1), (1, 1)),
         (64 * 56 * 56, 256, 256 * 9)),
        (gpu.ImplicitOperand.fprop(32, 3, (224, 224), (112, 112), (7, 7), (2, 2), (1, 1), (3, 3)),
         (32 * 112 * 112, 64, 3 * 49)),
    ):
        launch = gpu.gemm_launch(m, n, k, cands, a_operand=geo)
        hw = gpu._hardware(pv)
        key = (m, n, k, cands, gpu.SPLIT_K_FACTORS, 1, 2.0, 2.0, False, geo)
        assert gpu._survivors(key, launch, pv, hw) is not None  # the pruned path is the one tested
        vec = gpu.gemm(m, n, k, pv, cands, a_operand=geo)
        kinds = set()
        for i in range(nvar):
            one = gpu.gemm(m, n, k, dataclasses.replace(p, dram_bytes_per_s=float(bw[i]),
                                                        matrix_flops_per_s=float(rate[i])), cands, a_operand=geo)
            assert vec.time_s[i] == one.time_s and vec.dram_bytes[i] == one.dram_bytes
            assert vec.tile[i] == one.tile and vec.bound_term[i] == one.bound_term
            kinds.add(one.bound_term)
        assert "dram" in kinds and len(kinds) > 1  # the variants do move the choice between terms


def test_sweep_of_a_cnn_equals_the_scalar_engine():
    """The engine's vectorised sweep (pruned candidates, implicit operands in the launch key) gives each
    variant's ResNet-18 per-op times as the scalar engine does, to rounding."""
    from hwmodels.paths import with_overrides
    from simulator.engines.vectorized import evaluate_variants

    h100 = load_hardware("h100-sxm5-80gb")
    rng = np.random.default_rng(7)
    n = gpu.PRUNE_MIN_VARIANTS + 2
    ov = {"memory.hbm.read_bandwidth_bytes_per_s": rng.uniform(0.3e12, 6.0e12, n),
          "compute.tensor_flops_per_s.bf16": rng.uniform(2.0e14, 2.0e15, n)}
    g = build_model("resnet18", batch=8, dtype="bf16")
    res = evaluate_variants(g, h100, ov, EvalOptions(power_cap=False), per_op=True)
    assert res.method == "vectorized"
    for i in range(n):
        rep = evaluate(g, with_overrides(h100, res.variant(i)), EvalOptions(power_cap=False))
        np.testing.assert_allclose(res.op_time_s[:, i], [r.time_s for r in rep.records], rtol=1e-12, atol=0)


def test_report_shows_the_bandwidth_of_the_level_that_binds(capsys):
    """The issue's case: time, traffic and label agree in the table too: an L2-bound conv shows its L2
    bandwidth, named, not its DRAM bandwidth under a "memory" label."""
    from simulator.cli import main

    assert main(["predict", "conv2d:n=64,c=256,h=56,w=56,k=256,r=3,s=3,pad=1", "--hardware", "v100-sxm2-32gb",
                 "--dtype", "fp16", "--json"]) == 0
    import json

    rec = json.loads(capsys.readouterr().out)["ops"][0]
    assert rec["bound"] == "memory" and rec["memory_level"] == "l2"
    l2_tbs = rec["l2_bytes"] / rec["time_s"] / 1e12
    assert main(["predict", "conv2d:n=64,c=256,h=56,w=56,k=256,r=3,s=3,pad=1", "--hardware", "v100-sxm2-32gb",
                 "--dtype", "fp16"]) == 0
    row = next(ln for ln in capsys.readouterr().out.splitlines() if "implicit-gemm" in ln)
    assert f"{l2_tbs:.2f} TB/s L2" in row and "memory" in row
