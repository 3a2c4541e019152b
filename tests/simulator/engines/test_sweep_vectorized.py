"""Vectorised hardware variants equal the scalar engine variant by variant; systolic network sweeps
equal the per-design path of `nodeperf systolic`."""

from __future__ import annotations

import numpy as np
import pytest

from hwmodels.paths import (
    SweepPathError,
    field_unit_of,
    get_path,
    known_paths,
    with_overrides,
)
from hwmodels.spec import SpecError
from hwmodels.topology import parse_topology, read_topology
from simulator.cli.systolic import evaluate_topology
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.engines.vectorized import VariantError, evaluate_variants
from simulator.hardware import load_hardware
from simulator.sweep.systolic import SystolicSweepError, network_layers, systolic_network_variants
from workloads.ir import GraphBuilder
from workloads.micro import build_micro
from workloads.zoo import build_model

RTOL = 1e-9
V = 4


def _rng_fields(seed: int, n: int = V) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "memory.hbm.read_bandwidth_bytes_per_s": rng.uniform(1.0e12, 6.0e12, n),
        "compute.tensor_flops_per_s.bf16": rng.uniform(2.0e14, 2.0e15, n),
        "compute.units": rng.integers(60, 160, n),
        "clock.sustained_hz": rng.uniform(1.0e9, 2.0e9, n),
        "memory.l2.read_bandwidth_bytes_per_s": rng.uniform(3.0e12, 1.5e13, n),
        "efficiency.launch_overhead_s": rng.uniform(1.0e-6, 2.0e-5, n),
    }


def _assert_parity(graph, spec, overrides, options=None, *, per_op=False):
    res = evaluate_variants(graph, spec, overrides, options, per_op=per_op)
    for i in range(len(res)):
        rep = evaluate(graph, with_overrides(spec, res.variant(i)), options)
        t = rep.totals
        assert res.latency_s[i] == pytest.approx(t.latency_s, rel=RTOL)
        assert res.energy_j[i] == pytest.approx(t.energy_j, rel=RTOL)
        assert res.dynamic_energy_j[i] == pytest.approx(t.dynamic_energy_j, rel=RTOL)
        assert res.power_w[i] == pytest.approx(t.avg_power_w, rel=RTOL)
        assert res.memory_bytes[i] == rep.memory.required_bytes
        assert res.power_capped_ops[i] == sum(r.power_capped for r in rep.records)
        if per_op:
            assert res.op_names == tuple(r.name for r in rep.records)
            np.testing.assert_allclose(res.op_time_s[:, i], [r.time_s for r in rep.records], rtol=RTOL, atol=0)
    return res


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


@pytest.fixture(scope="module")
def a100():
    return load_hardware("a100-sxm4-80gb")


# each field on a micro-workload whose time it moves (power cap off: a capped kernel's time is set by
# its energy over the TDP budget, whatever the field)
_MOVED_BY = {
    # (16 x 16384: 16 x 8192 at the faster HBM variants loads from L2 at the per-SM intake, 64 CTAs, so DRAM does
    # not set its time; efficiency.l2_tile_sm_port_ratio)
    "memory.hbm.read_bandwidth_bytes_per_s": "gemm:m=16,n=16384,k=4096",
    "compute.tensor_flops_per_s.bf16": "gemm:m=4096,n=4096,k=4096",
    "compute.units": "gemm:m=4096,n=4096,k=4096",
    "clock.sustained_hz": "attention:b=2,h=16,s=2048,d=64",  # FlashAttention-2: softmax (SFU) serialised
    "memory.l2.read_bandwidth_bytes_per_s": "gemm:m=4096,n=4096,k=4096",
    "efficiency.launch_overhead_s": "gemm:m=64,n=64,k=64",
}


@pytest.mark.parametrize("field", list(_MOVED_BY))
def test_each_field_on_a_micro_workload(h100, field):
    g = build_micro(_MOVED_BY[field])
    opts = EvalOptions(power_cap=False, attention_kernel="flash2")
    res = _assert_parity(g, h100, {field: _rng_fields(1)[field]}, opts)
    assert res.method == "vectorized" and res.looped_op_kinds == ()
    assert len(set(res.latency_s.tolist())) == V  # the field does move the prediction
    _assert_parity(g, h100, {field: _rng_fields(8)[field]})  # and with the power cap


def test_gemm_micro_workloads_all_fields(h100):
    for spec in ("gemm:m=16,n=8192,k=4096", "gemm:b=8,m=512,n=512,k=64", "attention:b=2,h=16,s=2048,d=128,causal=1"):
        _assert_parity(build_micro(spec), h100, _rng_fields(2), per_op=True)


def _mixed_graph():
    """A small block: matmul, GELU, attention, softmax, layernorm (every array-safe GPU rule family)."""
    b = GraphBuilder("mixed", dtype="bf16")
    x = b.input("x", (256, 1024))
    w = b.weight("w", (1024, 1024))
    y = b.op("matmul", [x, w], name="proj")
    z = b.op("elementwise", [y], name="gelu", op="gelu")
    q = b.input("q", (1, 8, 256, 64))
    k = b.input("k", (1, 8, 256, 64))
    v = b.input("v", (1, 8, 256, 64))
    b.op("attention", [q, k, v], name="attn", causal=True)
    b.op("softmax", [z], name="softmax", axis=-1)
    b.op("layernorm", [z, b.weight("g", (1024,)), b.weight("bt", (1024,))], name="ln")
    return b.build()


def test_every_numeric_path_of_a_gpu(h100):
    """Each numeric spec path, varied alone over three values, matches the scalar engine (with fusion
    and FlashAttention-2, which read the most fields)."""
    g = _mixed_graph()
    opts = EvalOptions(fusion=True, attention_kernel="flash2")
    looped_paths = []
    for path in known_paths(h100):
        v = get_path(h100, path)
        if v == 0:
            vals = [0.0, 1e-6, 2e-6]  # additive times whose 0 means "not modelled"
        elif field_unit_of(h100, path) == "count":
            vals = [max(1, int(v) * 3 // 4), v, v + 1]
        else:
            vals = [v * 0.8, v, v * 0.9]
        res = _assert_parity(g, h100, {path: vals}, opts)
        assert res.method == ("vectorized-grouped" if path == "memory.l2.capacity_bytes" else "vectorized")
        if res.looped_op_kinds:
            looped_paths.append(path)
    assert looped_paths == []  # every numeric GPU field broadcasts (LOOPED_PATH_RULES is empty)


def test_sm_thread_and_cta_limits_as_arrays(h100):
    """sm.max_threads_per_sm and sm.max_ctas_per_sm vary as arrays in the GEMM occupancy (no op lowered
    variant by variant): parity with the scalar engine per variant, alone and together, on a GEMM whose
    choice they move (256 threads per SM hold none of the 384-thread Hopper tiles) and on the mixed
    block (attention and streaming ops alongside)."""
    threads = [2048, 1024, 384, 256, 512, 2048]
    ctas = [32, 1, 2, 1, 3, 4]
    big = build_micro("gemm:m=16384,n=16384,k=4096")
    for ov in ({"sm.max_threads_per_sm": threads}, {"sm.max_ctas_per_sm": ctas},
               {"sm.max_threads_per_sm": threads, "sm.max_ctas_per_sm": ctas,
                "memory.hbm.read_bandwidth_bytes_per_s": [2e12, 3e12, 4e12, 3e12, 2e12, 5e12]}):
        for g in (big, _mixed_graph()):
            res = _assert_parity(g, h100, ov, EvalOptions(power_cap=False), per_op=True)
            assert res.method == "vectorized" and res.looped_op_kinds == ()
    res = evaluate_variants(big, h100, {"sm.max_threads_per_sm": threads}, EvalOptions(power_cap=False))
    assert res.latency_s[3] > res.latency_s[0]  # the field does move the prediction


def test_many_variants_equal_the_scalar_engine_exactly(h100):
    """From hwmodels.gpu.PRUNE_MIN_VARIANTS variants on, the GEMM model sets aside candidate tiles no
    variant can choose, and times the rest in blocks: every variant's time must still be the scalar
    engine's, to the last bit on single-kernel graphs, and to rounding on a network."""
    from hwmodels.gpu import PRUNE_MIN_VARIANTS

    n = PRUNE_MIN_VARIANTS + 4
    ov = _rng_fields(12, n)
    del ov["compute.units"]  # the SM count changes the waves: those sweeps time every candidate
    for spec in ("gemm:m=4096,n=4096,k=4096", "gemm:m=16,n=4096,k=4096", "gemm:m=2048,n=11008,k=4096",
                 "gemm:b=8,m=512,n=512,k=64"):
        g = build_micro(spec)
        res = evaluate_variants(g, h100, ov)
        for i in range(n):
            assert res.latency_s[i] == evaluate(g, with_overrides(h100, res.variant(i))).totals.latency_s
    _assert_parity(build_model("resnet18", batch=2, dtype="bf16"), h100, ov, per_op=True)


def test_many_variants_with_distinct_sm_counts_equal_the_scalar_engine_exactly(h100):
    """With the SM count varied too, each variant times only the candidates its own bounds keep
    (hwmodels.gpu._bounded_choice): every variant's time must still be the scalar engine's, to the last
    bit on single-kernel graphs."""
    from hwmodels.gpu import PRUNE_MIN_VARIANTS

    n = PRUNE_MIN_VARIANTS + 16
    ov = _rng_fields(21, n)  # SM count, HBM and L2 bandwidth, bf16 rate, clock, launch overhead
    assert len(set(ov["compute.units"].tolist())) > n // 2
    for spec in ("gemm:m=4096,n=4096,k=4096", "gemm:m=2048,n=11008,k=4096", "gemm:m=8192,n=16384,k=8192",
                 "gemm:b=16,m=2048,n=2048,k=2048", "conv2d:n=64,c=256,h=56,w=56,k=256,r=3,s=3,pad=1"):
        g = build_micro(spec, dtype="bf16")  # (the convolution: an implicit GEMM, its input streamed from DRAM)
        res = evaluate_variants(g, h100, ov)
        for i in range(n):
            assert res.latency_s[i] == evaluate(g, with_overrides(h100, res.variant(i))).totals.latency_s


def test_power_cap_is_applied_per_variant(h100):
    # a dense bf16 GEMM at a quarter of the tensor rate stays under the TDP; at the datasheet rate and
    # above it would draw more, so it is stretched to exactly the TDP and no faster rate helps
    g = build_micro("gemm:m=8192,n=8192,k=8192")
    peak = h100.compute.tensor_flops_per_s["bf16"]
    res = _assert_parity(g, h100, {"compute.tensor_flops_per_s.bf16": [peak / 4, peak, 4 * peak]})
    assert res.power_capped_ops.tolist() == [0, 1, 1]
    assert res.power_w[0] < h100.power.tdp_w
    assert res.power_w[1] == pytest.approx(h100.power.tdp_w, rel=1e-9)
    assert res.latency_s[2] == res.latency_s[1]


def test_transformer_decode(h100):
    g = build_model("gpt2", phase="decode", batch=4, context=512)
    res = _assert_parity(g, h100, _rng_fields(3), per_op=True)
    assert res.method == "vectorized"


def test_cnn_with_fusion_and_eager_floor(a100):
    g = build_model("resnet18", batch=2, dtype="bf16")
    _assert_parity(g, a100, _rng_fields(4), EvalOptions(fusion=True, eager_framework=True))
    _assert_parity(g, a100, _rng_fields(5), EvalOptions(cuda_graphs=True, power_cap=False))


def test_l2_capacity_groups_variants(a100):
    g = build_model("resnet18", batch=2, dtype="bf16")
    ov = _rng_fields(6, 6) | {"memory.l2.capacity_bytes": [20e6, 40e6, 20e6, 1e6, 40e6, 1e6]}
    res = _assert_parity(g, a100, ov)
    assert res.method == "vectorized-grouped"


def test_collectives_loop_per_variant_inside_the_pass():
    dgx = load_hardware("dgx-h100")
    g = build_micro("allreduce:bytes=67108864,n=8")
    res = _assert_parity(g, dgx, {"memory.hbm.read_bandwidth_bytes_per_s": [2e12, 3e12, 4e12]})
    assert res.method == "vectorized" and res.looped_op_kinds == ("all_reduce",)


def test_rnn_op_loops_per_variant(h100):
    b = GraphBuilder("lstm-cell", dtype="bf16")
    x = b.input("x", (8, 256))
    h = b.input("h", (8, 512))
    c = b.input("c", (8, 512))
    wi = b.weight("wi", (2048, 256))
    wh = b.weight("wh", (2048, 512))
    b.op("lstm_cell", [x, h, c, wi, wh])
    g = b.build()
    res = _assert_parity(g, h100, _rng_fields(7, 3))
    assert "lstm_cell" in res.looped_op_kinds


def test_system_fields_and_other_devices_fall_back_per_variant():
    dgx = load_hardware("dgx-h100")
    g = build_micro("allreduce:bytes=1048576")
    res = _assert_parity(g, dgx, {"count": [2, 4, 8]})
    assert res.method == "per-variant"
    tpu = load_hardware("tpu-v4")
    res = _assert_parity(build_micro("gemm:m=1024,n=1024,k=1024"), tpu,
                         {"memory.hbm.read_bandwidth_bytes_per_s": [5e11, 1e12], "compute.units": [1, 2]})
    assert res.method == "per-variant"
    cpu = load_hardware("xeon-platinum-8480")
    res = _assert_parity(build_micro("gemm:m=256,n=256,k=256,dtype=fp32"), cpu,
                         {"memory.dram.read_bandwidth_bytes_per_s": ["200 GB/s", "300 GB/s"]})
    assert res.method == "per-variant"


def test_unit_strings_dedupe_chunks_and_capacity(h100):
    g = build_micro("gemm:m=2048,n=2048,k=2048")
    ov = {"memory.hbm.read_bandwidth_bytes_per_s": ["1 TB/s", "2 TB/s", "1 TB/s", "3 TB/s", "2 TB/s"],
          "memory.hbm.capacity_bytes": "1 GB"}
    res = evaluate_variants(g, h100, ov)
    assert res.overrides["memory.hbm.read_bandwidth_bytes_per_s"].tolist() == [1e12, 2e12, 1e12, 3e12, 2e12]
    assert res.latency_s[0] == res.latency_s[2] and res.latency_s[1] == res.latency_s[4]
    chunked = evaluate_variants(g, h100, ov, chunk=2, dedupe=False)
    np.testing.assert_array_equal(chunked.latency_s, res.latency_s)
    np.testing.assert_array_equal(chunked.energy_j, res.energy_j)
    # three 2048^2 bf16 matrices: 25,165,824 B, within 1 GB
    assert res.memory_bytes[0] == 3 * 2048 * 2048 * 2 and res.fits.all()
    small = evaluate_variants(g, h100, {"memory.hbm.capacity_bytes": [1e6, 1e9]})
    assert small.fits.tolist() == [False, True]
    assert small.latency_s[0] == small.latency_s[1]  # capacity moves no time


def test_errors_are_located(h100):
    g = build_micro("gemm:m=64,n=64,k=64")
    with pytest.raises(SweepPathError, match="did you mean 'memory.hbm.read_bandwidth_bytes_per_s'"):
        evaluate_variants(g, h100, {"memory.hbm.read_bandwith_bytes_per_s": [1e12]})
    with pytest.raises(SweepPathError, match="different lengths"):
        evaluate_variants(g, h100, {"compute.units": [100, 120], "clock.sustained_hz": [1e9, 1.2e9, 1.5e9]})
    with pytest.raises(SweepPathError, match=r"compute.units\[2\]: not a whole number"):
        evaluate_variants(g, h100, {"compute.units": [100, 120, 130.5]})
    with pytest.raises(SweepPathError, match=r"memory.hbm.read_bandwidth_bytes_per_s\[1\]: wrong dimension"):
        evaluate_variants(g, h100, {"memory.hbm.read_bandwidth_bytes_per_s": ["1 TB/s", "3 GHz"]})
    with pytest.raises(SweepPathError, match=r"\[1\]: must be positive"):
        evaluate_variants(g, h100, {"memory.hbm.read_bandwidth_bytes_per_s": [1e12, -1.0]})
    with pytest.raises(SweepPathError, match="expected one value or a 1-D"):
        evaluate_variants(g, h100, {"compute.units": [[100, 120]]})


def test_a_variant_that_cannot_run_is_named(h100):
    # 20,000 B of shared memory per SM holds no GEMM tile: the scalar engine refuses that variant,
    # and the sweep names it (its index in the caller's order, after dedupe, grouping and chunks)
    g = build_micro("gemm:m=256,n=1024,k=1024")
    ov = {"sm.shared_mem_per_sm_bytes": [233472, 233472, 20000, 233472],
          "memory.l2.capacity_bytes": [1e6, 2e6, 2e6, 1e6]}
    with pytest.raises(SpecError):
        evaluate(g, with_overrides(h100, {p: v[2] for p, v in ov.items()}))
    for kw in ({}, {"chunk": 1}, {"dedupe": False}):
        with pytest.raises(VariantError, match=r"^variant 2 \(sm.shared_mem_per_sm_bytes=20000.0, "
                                               r"memory.l2.capacity_bytes=2000000.0\): op 'gemm': .*no candidate "
                                               r"tile fits") as e:
            evaluate_variants(g, h100, ov, **kw)
        assert e.value.index == 2


# ------------------------------------------------------------------------------------------------
# systolic network sweeps


@pytest.fixture(scope="module")
def resnet50_topology():
    return read_topology("studies/topologies/resnet50.csv")


def test_systolic_network_matches_per_design_path(resnet50_topology):
    rng = np.random.default_rng(11)
    n = 60
    rows = rng.choice([8, 16, 32, 64, 128, 256], n)
    cols = rng.choice([8, 16, 32, 64, 128, 256], n)
    df = rng.choice(["os", "ws", "is"], n)
    srams = [rng.choice([16, 64, 256, 1024], n) * 1024 for _ in range(3)]
    bw = rng.choice([2.0, 8.0, 32.0], n)
    res = systolic_network_variants(resnet50_topology, rows, cols, df, *srams, bw, per_layer=True)
    for i in rng.choice(n, 12, replace=False):
        one = evaluate_topology(resnet50_topology, int(rows[i]), int(cols[i]), str(df[i]),
                                sram_words=tuple(int(s[i]) for s in srams), dram_words_per_cycle=float(bw[i]))
        assert res.total_cycles[i] == int(np.sum(one.total_cycles))
        assert res.compute_cycles[i] == int(np.sum(one.compute_cycles))
        assert res.stall_cycles[i] == int(np.sum(one.stall_cycles))
        assert res.dram_ifmap_reads[i] == int(np.sum(one.dram_ifmap_reads))
        assert res.dram_filter_reads[i] == int(np.sum(one.dram_filter_reads))
        assert res.dram_ofmap_writes[i] + res.dram_ofmap_reads[i] == int(np.sum(one.dram_ofmap_writes)
                                                                        + np.sum(one.dram_ofmap_reads))
        np.testing.assert_array_equal(res.layer_total_cycles[:, i], np.asarray(one.total_cycles, dtype=np.int64))
        assert res.memory_bound_layers[i] == int(np.sum(np.asarray(one.bound) == "memory"))


def test_systolic_worked_example():
    # hwmodels/systolic.py docstring: 64^3 GEMM on 8x8 os, 1 KiB scratchpads, 10 words/cycle:
    # 64 folds of 78 cycles -> 4991 compute cycles, no stall, 7 drain cycles: 4998 in all
    topo = parse_topology("Layer name, M, N, K,\ng, 64, 64, 64,\n")
    res = systolic_network_variants(topo, 8, 8, "os", 1024, 1024, 1024, 10.0, clock_hz=1e9)
    assert res.compute_cycles.tolist() == [4991]
    assert res.total_cycles.tolist() == [4998]
    assert res.dram_ifmap_reads.tolist() == [32768] and res.dram_filter_reads.tolist() == [4096]
    assert res.macs == 64**3
    assert res.overall_util_pct[0] == pytest.approx(100 * 64**3 / (4998 * 64))
    assert res.latency_s[0] == pytest.approx(4998e-9)
    # words are bytes / word_bytes: 2 KiB of 2-byte words is the same scratchpad
    same = systolic_network_variants(topo, 8, 8, "os", 2048, 2048, 2048, 10.0, word_bytes=2)
    assert same.total_cycles.tolist() == [4998] and same.dram_bytes[0] == 2 * res.dram_bytes[0]


def test_systolic_graph_layers_count_every_mac():
    g = build_model("resnet50", batch=1)
    lay = network_layers(g)
    assert len(lay.names) == 54  # 53 convolutions + the classifier (He et al. 2016, Table 1)
    expect = sum(op.macs for op in g if op.kind in ("conv2d", "matmul"))
    res = systolic_network_variants(g, [64, 128], [64, 128], ["ws", "os"])
    assert res.macs == expect
    assert res.total_cycles[0] > res.total_cycles[1]  # a 4x larger array is faster on ResNet-50


def test_systolic_errors(resnet50_topology):
    with pytest.raises(SystolicSweepError, match="did you mean 'ws'"):
        systolic_network_variants(resnet50_topology, 8, 8, "wss")
    with pytest.raises(SystolicSweepError, match="different lengths"):
        systolic_network_variants(resnet50_topology, [8, 16], [8, 16, 32], "ws")
    with pytest.raises(SystolicSweepError, match="all three or none"):
        systolic_network_variants(resnet50_topology, 8, 8, "ws", 1024)
    with pytest.raises(SystolicSweepError, match="rows; got"):
        systolic_network_variants(resnet50_topology, [8, 0], 8, "ws")
    with pytest.raises(SystolicSweepError, match="smaller than one word"):
        systolic_network_variants(resnet50_topology, 8, 8, "ws", 1, 1, 1, word_bytes=2)


def test_a_board_with_dvfs_data_matches_the_engine_per_variant():
    """The T4 ships a [dvfs] table: over the TDP the engine runs a kernel at the clock that fits; every
    variant of a sweep must equal evaluate() on that variant (power-capped GEMMs and uncapped ops alike)."""
    from hwmodels.catalog import load_device
    from hwmodels.paths import with_overrides
    from simulator.engines.analytical import evaluate
    from simulator.engines.vectorized import evaluate_variants
    from workloads.resolve import load_workload

    t4 = load_device("t4")
    assert t4.dvfs is not None
    tdps = [40.0, 55.0, 70.0, 120.0]
    for model in ("gemm:m=4096,n=4096,k=4096", "bert_base"):
        g = load_workload(model, dtype="fp16")
        res = evaluate_variants(g, t4, {"power.tdp_w": tdps})
        for i, tdp in enumerate(tdps):
            r = evaluate(g, with_overrides(t4, {"power.tdp_w": tdp}))
            assert res.latency_s[i] == pytest.approx(r.latency_s, rel=1e-9), (model, tdp)
            assert res.energy_j[i] == pytest.approx(r.energy_j, rel=1e-9), (model, tdp)
        assert res.latency_s[0] > res.latency_s[2] >= res.latency_s[3]  # a lower limit throttles harder


def test_unique_rows_equals_numpy_unique_over_rows() -> None:
    from simulator.engines.vectorized import unique_rows

    rng = np.random.default_rng(3)
    for _ in range(50):
        keys = rng.integers(0, 3, (int(rng.integers(1, 40)), int(rng.integers(1, 4)))).astype(float)
        keys[rng.random(keys.shape) < 0.1] = -0.0  # equal to 0.0, as np.unique takes it
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        got_first, got_inverse = unique_rows(keys)
        assert got_first.tolist() == first.tolist()
        assert got_inverse.tolist() == np.asarray(inverse).reshape(-1).tolist()
    assert unique_rows(np.array([[2.0, 1.0], [1.0, 5.0], [2.0, 1.0]]))[0].tolist() == [1, 0]
