"""Linear-algebra cost rules: GEMM parts equal the GEMM model, panel counts, n^3 growth, latency floors, fp64/fp32 rate ratio, CLI errors."""

from __future__ import annotations

import math

import pytest

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from simulator.lowering import LoweringContext, lower
from simulator.lowering.cpu import gemm_efficiency
from simulator.lowering.linalg import Gemm, linalg_breakdown, panel_count, plan
from workloads.ir import GraphBuilder, UnsupportedOpError
from workloads.micro import build_micro


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


@pytest.fixture(scope="module")
def l40s():
    return load_hardware("l40s")


def _op(spec, dtype="fp32"):
    return build_micro(spec, dtype).ops[0]


def _ctx(dev):
    return LoweringContext(dev, EvalOptions())


def test_panel_counts_and_plan_flops():
    op = _op("cholesky:n=1000")
    pl = plan(op, 64)
    assert pl.panels == panel_count(1000, 64) == 16
    assert sum(g.what == "syrk" for g in pl.gemms) == 15  # no trailing update after the last panel
    # level-3 FLOPs are nearly all of Cholesky's n^3/3 (the rest are the diagonal-block panels)
    assert 0.9 < pl.gemm_flops / op.flops <= 1.0
    # tridiagonalisation: half of the 4n^3/3 in level-3 syr2k updates (Dongarra et al. 1989)
    e = _op("eigh:n=1024,vectors=0")
    sytrd = [g for g in plan(e, 32).gemms if g.what == "syr2k"]
    assert sum(g.flops for g in sytrd) / (4 * 1024**3 / 3) == pytest.approx(0.5, abs=0.03)
    # bidiagonalisation: likewise half of 4mn^2 - 4n^3/3 in GEMMs
    s = _op("svd:m=2048,n=1024,vectors=0")
    assert plan(s, 32).gemm_flops / s.flops == pytest.approx(0.5, abs=0.03)
    # QR: larfb GEMMs carry all but the panels' share
    q = _op("qr:m=1024,n=1024")
    assert plan(q, 32).gemm_flops / q.flops == pytest.approx(1.0, abs=0.05)


def test_gemm_part_equals_gemm_model(h100):
    op = _op("cholesky:n=1024", "fp64")
    ctx = _ctx(h100)
    floor = h100.efficiency.launch_overhead_s
    want = 0.0
    for g in plan(op, h100.efficiency.linalg_block_size).gemms:
        b = GraphBuilder("g", dtype="fp64")
        b.op("matmul", [b.input("a", (g.m, g.k)), b.input("b", (g.k, g.n))])
        want += max(lower(b.build().ops[0], ctx).device_time_s * g.fraction, floor)
    assert linalg_breakdown(op, ctx)["gemm_s"] == pytest.approx(want, rel=1e-9)


def test_cpu_gemm_part_by_hand():
    dev = load_hardware("xeon-platinum-8480")
    op = _op("cholesky:n=512")
    rate = dev.compute.tensor_flops_per_s["fp32"]
    want = 0.0
    for j in range(0, 512, 32):
        t = 512 - j - 32
        if t > 0:
            for m, n, k in ((t, 32, 32), (t, t, 32)):
                e = dev.efficiency.tensor_peak_fraction if dev.cpu is None else gemm_efficiency(dev.cpu, m, n, k)
                want += 2 * m * n * k * 0.5 / (rate * e)
    got = linalg_breakdown(op, _ctx(dev))["gemm_s"]
    assert got == pytest.approx(want, rel=1e-9)


def test_small_problem_is_latency_bound(h100):
    # one 64 x 64 panel: a single potf2 step, far shorter than a launch
    r = evaluate(build_micro("cholesky:n=64", "fp32"), h100)
    assert r.totals.latency_s == pytest.approx(h100.efficiency.launch_overhead_s)
    # qr of 256 x 256: 4 panels x 64 column steps + 3 x 3 larfb GEMMs + orgqr, every one at the floor
    br = linalg_breakdown(_op("qr:m=256,n=256"), _ctx(h100))
    assert br["total_s"] == pytest.approx(br["kernels"] * h100.efficiency.launch_overhead_s)


def test_time_grows_as_n_cubed(l40s):
    t = [linalg_breakdown(_op(f"cholesky:n={n}", "fp64"), _ctx(l40s))["total_s"] for n in (2048, 4096)]
    assert 6.5 < t[1] / t[0] < 8.5
    host = load_hardware("xeon-platinum-8480")
    t = [linalg_breakdown(_op(f"eigh:n={n}", "fp32"), _ctx(host))["total_s"] for n in (1024, 2048)]
    assert 6.0 < t[1] / t[0] < 9.0


def test_fp64_slower_by_rate_ratio_on_consumer_gpu(l40s):
    ratio = l40s.compute.vector_flops_per_s["fp32"] / l40s.compute.vector_flops_per_s["fp64"]
    assert ratio > 50  # Ada: FP64 at 1/64 of FP32
    c32 = lower(_op("cholesky:n=4096", "fp32"), _ctx(l40s))
    c64 = lower(_op("cholesky:n=4096", "fp64"), _ctx(l40s))
    # the SGEMM updates reach simt_gemm_peak_fraction of the FP32 peak (issue slots shared with loads),
    # the FP64 ones vector_peak_fraction of theirs (hwmodels.gpu.simt_gemm_fraction)
    from hwmodels.gpu import simt_gemm_fraction

    fractions = simt_gemm_fraction(l40s, "fp32") / simt_gemm_fraction(l40s, "fp64")
    assert c64.compute_s / c32.compute_s == pytest.approx(ratio * fractions, rel=0.15)
    assert c64.device_time_s > 8 * c32.device_time_s


def test_every_amortises_and_batch_scales(h100):
    ctx = _ctx(h100)
    one = lower(_op("eigh:n=256"), ctx)
    b = GraphBuilder("t", dtype="fp32")
    b.op("eigh", [b.input("a", (256, 256))], every=8)
    amort = lower(b.build().ops[0], ctx)
    assert amort.device_time_s == pytest.approx(one.device_time_s / 8)
    assert lower(_op("eigh:n=256,b=16"), ctx).device_time_s >= one.device_time_s
    assert one.matrix_flops + one.vector_flops == pytest.approx(_op("eigh:n=256").flops)


def test_tpu_refused_with_located_error():
    tpu = load_hardware("tpu-v5e")
    with pytest.raises(UnsupportedOpError, match="op 'svd' \\(svd\\): no cost model for dense linear algebra"):
        evaluate(build_micro("svd:m=64,n=64", "fp32"), tpu)


def test_predict_cli(capsys):
    from simulator.cli.main import main

    assert main(["predict", "svd:m=512,n=256", "--hardware", "h100-sxm5-80gb", "--dtype", "fp32"]) == 0
    assert "linalg-gesvd-reduced" in capsys.readouterr().out
    for bad in ("svd:m=0,n=4", "eigh:n=8,vectors=2", "qr:m=4"):
        assert main(["predict", bad, "--hardware", "h100-sxm5-80gb", "--dtype", "fp32"]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "micro-workload" in err


def test_gemm_piece_flops():
    assert Gemm(3, 4, 5, 0.5).flops == 60.0
    # the back-transformation's GEMMs carry 2n^3 to leading order (blocking adds O(n^2 nb))
    assert math.isclose(sum(g.flops for g in plan(_op("eigh:n=2000", "fp64"), 32).gemms
                            if g.what.startswith("ormtr")), 2 * 2000**3, rel_tol=0.05)


def test_sweeps_priced_per_row_sweep(h100):
    # values-only eigh: n (n + 1) row-sweeps (two sweeps per eigenvalue over blocks n..1) at linalg_sweep_row_s
    n = 300
    op = _op(f"eigh:n={n},vectors=0")
    host = load_hardware("xeon-platinum-8480")
    row_s = host.efficiency.linalg_sweep_row_s
    assert linalg_breakdown(op, _ctx(host))["sweep_s"] == pytest.approx(n * (n + 1) * row_s)
    # on a GPU the chain runs on the host: one launch floor for the round trip
    gpu_row = h100.efficiency.linalg_sweep_row_s
    got = linalg_breakdown(op, _ctx(h100))["sweep_s"]
    assert got == pytest.approx(n * (n + 1) * gpu_row + h100.efficiency.launch_overhead_s)


def test_inverse_root_and_triangular_solve_costs(h100):
    ctx = _ctx(h100)
    b = GraphBuilder("t", dtype="fp32")
    a = b.input("a", (512, 512))
    b.op("matrix_inverse_root", [a], name="newton", p=4, method="newton", iterations=10)
    b.op("matrix_inverse_root", [a], name="eig", p=4)
    b.op("triangular_solve", [a, b.input("r", (512, 64))], name="trsm")
    newton, eig, trsm = b.build().ops
    kn = lower(newton, ctx)
    # coupled Newton: 10 iterations x (p + 1) = 50 GEMMs of 512^3, plus one elementwise step per iteration
    g = GraphBuilder("g", dtype="fp32")
    g.op("matmul", [g.input("x", (512, 512)), g.input("y", (512, 512))])
    eff = h100.efficiency
    one = max(lower(g.build().ops[0], ctx).device_time_s + eff.kernel_device_time_s, eff.launch_overhead_s)
    assert linalg_breakdown(newton, ctx)["gemm_s"] == pytest.approx(50 * one)
    assert kn.kernels == 60 and kn.matrix_flops + kn.vector_flops == pytest.approx(newton.flops)
    assert kn.matrix_flops == 0.0  # fp32 GEMMs run on the SIMT units of an H100 (no TF32 unless allowed)
    k64 = lower(_op("cholesky:n=1024", "fp64"), ctx)
    assert k64.matrix_flops > 0.9 * _op("cholesky:n=1024", "fp64").flops and k64.matrix_dtype == "fp64"
    # the eigendecomposition route ends with one Q D Q^T product on top of eigh's pieces
    assert linalg_breakdown(eig, ctx)["gemm_s"] > linalg_breakdown(_op("eigh:n=512"), ctx)["gemm_s"] + one * 0.99
    kt = lower(trsm, ctx)
    assert kt.rule == "linalg-trsm" and kt.device_time_s > 0
    cpu = lower(trsm, _ctx(load_hardware("xeon-platinum-8480")))
    assert cpu.rule == "cpu-lapack-trsm" and cpu.kernels == 1


def test_two_sided_reductions_count_lapack_calls(h100):
    # small problems: every column step of dlatrd (11 calls) / dlabrd (18 calls) is launch-bound
    floor = h100.efficiency.launch_overhead_s
    n = 128
    br = linalg_breakdown(_op(f"eigh:n={n},vectors=0"), _ctx(h100))
    assert br["level2_s"] == pytest.approx(11 * (n - 1) * floor)
    br = linalg_breakdown(_op(f"svd:m={n},n={n},vectors=0"), _ctx(h100))
    assert br["level2_s"] == pytest.approx(18 * n * floor)


def test_divide_and_conquer_merges_sum_to_four_thirds_n_cubed():
    # n = 25 * 2^5: five merge levels; level l has 2^l merges of size s = n / 2^l, each two (s/2 x s x s/2)
    # GEMMs = s^3 FLOPs, so the levels sum to n^3 (1 + 1/4 + ... + 1/4^4) -> 4n^3/3 as the levels grow
    n = 800
    merges = [g for g in plan(_op(f"eigh:n={n}"), 64).gemms if g.what == "stedc merge"]
    assert len(merges) == 10 and {g.count for g in merges} == {1, 2, 4, 8, 16}
    assert sum(g.flops for g in merges) == pytest.approx(n**3 * sum(4.0**-lv for lv in range(5)))
