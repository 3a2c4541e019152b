"""TPU presets and the systolic lowering rules: sourced catalog files, hand-computed MXU cycles, CLI runs."""

import json
import math

import pytest

from hwmodels.catalog import load_device
from hwmodels.loader import apply_overlay, device_from_dict, load_efficiency_defaults, numeric_paths
from hwmodels.spec import SpecError
from hwmodels.systolic import gemm_cycles
from simulator.cli import main
from simulator.engines.analytical import EvalOptions, evaluate
from simulator.lowering import rule_name_for
from simulator.lowering.tpu import (
    BACKWARD_KERNEL_GEMMS,
    map_gemm,
    pipelined_cycles,
    splash_block_pairs,
)
from workloads.resolve import load_workload
from workloads.semantics import attention_pairs

TPUS = ["tpu-v4", "tpu-v5e", "tpu-v5p", "tpu-v6e"]
# fields with a spec default that no TPU file needs to state (eager-framework host cost, GPU TMA
# copies) and link energy, which the catalog does not model
# spec.py defaults a TPU preset never uses (GPU/CPU-only terms: framework dispatch, L2 tiles, weight
# dequantisation in registers, blocked linear algebra, which TPUs refuse, GPU decode-attention kernels)
_DEFAULTED = ("efficiency.framework_op_overhead_s", "efficiency.framework_conv_op_overhead_s",
              "efficiency.framework_module_call_s", "efficiency.framework_container_call_s",
              "efficiency.l2_tile_bandwidth_fraction", "efficiency.l2_tile_sm_port_ratio",
              "efficiency.weight_dequant_ops_per_element", "efficiency.linalg_block_size",
              "efficiency.linalg_sweep_row_s", "efficiency.simt_gemm_peak_fraction",
              "efficiency.decode_attention_bandwidth_fraction", "efficiency.decode_attention_fp8_bandwidth_fraction",
              "efficiency.context_fmha_tensor_fraction",
              "efficiency.fp8_promotion_interval", "efficiency.host_sync_s", "efficiency.library_gemm_call_s", "efficiency.outer_axis_stream_fraction",
              "efficiency.gemv_bandwidth_fraction", "efficiency.gemv_max_rows", "efficiency.conv_rate_fraction",
              "efficiency.dropout_stream_fraction", "efficiency.mxfp8_quantize_stream_fraction")


def _cli_json(capsys, *argv: str) -> dict:
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name", TPUS + ["edge-64x64"])
def test_preset_loads_with_every_number_sourced(name):
    dev = load_device(name)
    assert dev.kind == "tpu" and dev.systolic is not None
    paths = numeric_paths(dev)
    unsourced = [p for p, _, _ in paths if dev.source_of(p) is None or not dev.source_of(p).source.strip()]
    assert unsourced == []
    defaulted = [p for p, _, _ in paths if dev.source_of(p).source.startswith("default of")]
    assert all(p in _DEFAULTED or (p.startswith("links.") and p.endswith("energy_j_per_byte")) for p in defaulted)
    # the arch has no section in the shared defaults: the device's own table is complete
    assert dev.arch not in load_efficiency_defaults()
    # the array geometry reproduces the bf16 (edge: int8) peak at the sustained clock, to 0.1 %
    s = dev.systolic
    geo = 2 * s.rows * s.cols * s.arrays_per_core * dev.compute.units * dev.clock.sustained_hz
    quoted = dev.compute.tensor_flops_per_s["int8" if name == "edge-64x64" else "bf16"]
    assert geo == pytest.approx(quoted, rel=1e-3)
    assert dev.power.idle_w < dev.power.tdp_w
    assert [lv.name for lv in dev.memory][1] == "vmem"


def test_published_figures_of_the_cloud_pages():
    v4, v5e, v5p, v6e = (load_device(n) for n in TPUS)
    # Cloud TPU pages: v4 2 TC x 4 MXU, 275 TF, 32 GiB at 1200 GBps, max 192 W
    assert (v4.compute.units, v4.systolic.arrays_per_core) == (2, 4)
    assert v4.compute.tensor_flops_per_s["bf16"] == 275e12 and v4.main_memory.capacity_bytes == 32 * 2**30
    assert v4.main_memory.read_bandwidth_bytes_per_s == 1200e9 and v4.power.tdp_w == 192.0
    assert v5e.compute.tensor_flops_per_s["bf16"] == 197e12 and v5e.main_memory.read_bandwidth_bytes_per_s == 819e9
    assert v5p.compute.tensor_flops_per_s["bf16"] == 459e12 and v5p.main_memory.read_bandwidth_bytes_per_s == 2765e9
    assert (v6e.systolic.rows, v6e.compute.tensor_flops_per_s["bf16"]) == (256, 918e12)
    # ICI: Cloud bidirectional per-chip figures halved (per direction)
    assert [d.link("ici").bandwidth_bytes_per_s for d in (v5e, v5p, v6e)] == [200e9, 600e9, 400e9]


def test_incomplete_own_efficiency_table_is_refused_for_an_arch_without_defaults():
    import tomllib

    from hwmodels.catalog import DEVICES_DIR

    data = tomllib.loads((DEVICES_DIR / "tpu-v5e.toml").read_text())
    del data["efficiency"]["launch_overhead_s"]
    with pytest.raises(SpecError, match="no efficiency defaults for arch 'tpu-v5e'"):
        device_from_dict(data, where="t.toml")


def test_rules_are_registered_for_tpu_devices():
    assert rule_name_for("tpu", "matmul") == "tpu_gemm"
    assert rule_name_for("tpu", "conv2d") == "tpu_conv"
    assert rule_name_for("tpu", "attention") == "tpu_attention"
    assert rule_name_for("tpu", "rmsnorm") == "tpu_vector"
    assert rule_name_for("tpu", "embedding") == "tpu_gather"
    assert rule_name_for("tpu", "lstm") == "tpu_rnn"  # GEMMs on the arrays, gates on the vector unit
    assert rule_name_for("tpu", "rnn_bwd") is None  # roofline fallback, marked in the report


def test_gemm_1024_on_v5e_matches_the_closed_form_by_hand():
    # v5e: one TensorCore x 4 MXUs of 128x128, weight stationary. M = N = K = 1024, bf16.
    # Best split: N over the 4 MXUs -> each array (M, N, K) = (1024, 256, 1024).
    # ws maps K to rows (8 row folds) and N to columns (2 column folds): 16 folds.
    # One fold: preload 128 + stream T = M = 1024 + skew 128 + 128 - 2 = 1406 cycles.
    # Closed form (SCALE-Sim): 16 x 1406 - 1 = 22495 cycles.
    # Folds overlap on an MXU: 22495 - 15 x (1406 - max(1024, 128)) = 16765 cycles.
    r = gemm_cycles(128, 128, "ws", 1024, 256, 1024)
    assert (int(r.folds), int(r.fold_cycles), int(r.compute_cycles)) == (16, 1406, 22495)
    assert int(pipelined_cycles(r)) == 16765
    dev = load_device("tpu-v5e")
    # isolate the array model: no derating, HBM far faster than the arrays
    dev = apply_overlay(dev, {"efficiency.tensor_peak_fraction": 1.0,
                              "memory.hbm.read_bandwidth_bytes_per_s": "1000 TB/s"}, source="test")
    rep = evaluate(load_workload("gemm:m=1024,n=1024,k=1024", dtype="bf16"), dev)
    (rec,) = rep.records
    s = dev.systolic
    factor = dev.compute.tensor_flops_per_s["bf16"] / (2 * s.rows * s.cols * s.arrays_per_core * dev.clock.sustained_hz)
    assert rec.time_s * dev.clock.sustained_hz * factor == pytest.approx(16765, rel=1e-12)
    assert rec.bound == "compute" and rec.rule == "mxu-gemm"
    assert "16 folds" in rec.notes and "128x128 ws" in rec.notes and "split batch/M/N 1/1/4" in rec.notes
    # HBM traffic: A, B read once and C written once (each fits a VMEM third): 3 x 2 MiB
    assert rec.dram_bytes == 3 * 1024 * 1024 * 2


def test_large_gemm_reproduces_the_measured_v5e_point():
    # JAX Pallas matmul guide, XLA bf16 8192^3 on one v5e: 6.047 ms (the calibration point of
    # efficiency.tensor_peak_fraction), and 4096^3: 0.827 ms including ~0.08-0.1 ms of host dispatch
    dev = load_device("tpu-v5e")
    t8 = evaluate(load_workload("gemm:m=8192,n=8192,k=8192", dtype="bf16"), dev).latency_s
    t4 = evaluate(load_workload("gemm:m=4096,n=4096,k=4096", dtype="bf16"), dev).latency_s
    assert t8 == pytest.approx(6.047e-3, rel=0.01)
    assert 0.827e-3 - 0.11e-3 < t4 < 0.827e-3


def test_large_gemm_reproduces_the_measured_v6e_point():
    # tpu-recipes microbenchmarks README (c8cfe2f): XLA bf16 8192^3 on one v6e, device time from the trace
    # 1.328756 ms = 827.47 TFLOP/s (the calibration point of tpu-v6e's efficiency.tensor_peak_fraction)
    dev = load_device("tpu-v6e")
    assert dev.efficiency.tensor_peak_fraction == 0.902
    rec = evaluate(load_workload("gemm:m=8192,n=8192,k=8192", dtype="bf16"), dev)
    assert rec.latency_s == pytest.approx(1.328756e-3, rel=0.005)
    # the model's cycles for that GEMM: 4 MXUs of 256x256, 2,097,917 cycles for 2,097,152 ideal
    mp = map_gemm(dev, 1, 8192, 8192, 8192, in_bytes=2, out_bytes=2)
    assert mp.cycles == 2_097_917


def test_head_dim_128_attention_gemms_use_half_of_a_v6e_mxu():
    # Splash attention's QK^T contracts over head_dim 128 and its PV has 128 output columns. On v6e's
    # 256x256 MXUs (Cloud TPU v6e page; tpu_info mxu_column_size 256) the 128-long dimension fills half the
    # array; v5e's 128x128 MXUs are full. Eight heads of (2048, 2048, 128), bf16, weight stationary:
    # split batch/M/N 4/1/1 -> two GEMMs per array. v6e: K = 128 -> 1 row fold, N = 2048 -> 8 column folds;
    # one fold = preload 256 + stream 2048 + skew 256 + 256 - 2 = 2814 cycles, later folds max(2048, 256):
    # 2814 + 7 x 2048 = 17,150 - 1 = 17,149 cycles per GEMM (closed form 8 x 2814 - 1 = 22,511, less
    # 7 x (2814 - 2048)); utilisation 8 x 2048 x 2048 x 128 / (2 x 17,149 x 65,536 x 4) = 47.77 %.
    # v5e: 1 x 16 folds of 128 + 2048 + 128 + 128 - 2 = 2430 -> 2430 + 15 x 2048 - 1 = 33,149 per GEMM, 98.85 %.
    v6e, v5e = load_device("tpu-v6e"), load_device("tpu-v5e")
    for m, n, k in ((2048, 2048, 128), (2048, 128, 2048)):  # QK^T, PV
        a6 = map_gemm(v6e, 8, m, n, k, in_bytes=2, out_bytes=2)
        a5 = map_gemm(v5e, 8, m, n, k, in_bytes=2, out_bytes=2)
        assert (a6.split, a6.per_array_batch, a6.folds, a6.cycles) == ((4, 1, 1), 2, 8, 2 * 17_149)
        assert (a5.split, a5.folds, a5.cycles) == ((4, 1, 1), 16, 2 * 33_149)
        assert a6.util_pct == pytest.approx(100 * 8 * 2048 * 2048 * 128 / (2 * 17_149 * 65_536 * 4), rel=1e-12)
        assert round(a6.util_pct, 2) == 47.77 and round(a5.util_pct, 2) == 98.85
    # a 256-multiple GEMM of the same FLOPs keeps the v6e array full
    assert map_gemm(v6e, 8, 2048, 2048, 256, in_bytes=2, out_bytes=2).util_pct > 95.0


def test_splash_attention_runs_whole_blocks_of_a_causal_mask():
    # The splash kernel skips the (query block, key block) tiles a causal mask leaves empty and computes a
    # partly masked tile in full (qk = lax.dot_general over the whole block, then jnp.where):
    # 8192 queries over 8192 keys in blocks of 512 run 16 x 17 / 2 = 136 of 256 tiles, not 8192 x 8193 / 2 pairs
    assert splash_block_pairs(8192, 8192, 0, 512, 512) == 136 * 512 * 512
    # MaxText's Trillium Llama 3.1 workloads set 2048 blocks: 4 x 5 / 2 = 10 of 16 tiles (62.5 %)
    assert splash_block_pairs(8192, 8192, 0, 2048, 2048) == 10 * 2048 * 2048
    # a query block over a cache (1024 queries at positions 3072..4095 of 4096 keys): block 0 reaches key
    # 3583 -> key blocks up to 3584, block 1 all 4096 keys; the causal band alone is (3073 + 4096) x 1024 / 2
    assert splash_block_pairs(1024, 4096, 0, 512, 512) == 512 * (3584 + 4096) == 3_932_160
    assert attention_pairs(1024, 4096, causal=True) == (3073 + 4096) * 1024 // 2 == 3_670_528
    # a block size that does not divide the sequence: 1000 queries in blocks of 512 (512 + 488 rows)
    assert splash_block_pairs(1000, 1000, 0, 512, 512) == 512 * 512 + 488 * 1000
    # the attention rule prices that fraction: 4096 causal queries, 8 x 9 / 2 of 64 tiles
    g = load_workload("attention:b=1,h=8,s=4096,d=128,causal=1", dtype="bf16")
    (rec,) = [r for r in evaluate(g, load_device("tpu-v6e")).records if r.kind == "attention"]
    assert "causal kept fraction 0.562;" in rec.notes


def test_splash_forward_softmax_runs_between_its_gemms_and_the_backward_overlaps_it():
    # The splash forward computes qk = dot(q, k), its row max, exp and row sum, then dot(s_curr, v) for each
    # kv_compute chunk, one chunk a grid step, the steps one after another: the vector unit's softmax adds to the
    # arrays' time. The backward kernels have array work (dP = dO V^T, dV = P^T dO) beside each vector stage.
    # Eight heads of 2048 x 2048, head_dim 128, not causal, on v6e: each GEMM 2 x 17,149 cycles per array
    # (test_head_dim_128_attention_gemms_use_half_of_a_v6e_mxu) at 918 TFLOP/s x 0.902 of the geometry's clock;
    # softmax 5 vector ops a score at 7.17 TFLOP/s x 0.99.
    dev = load_device("tpu-v6e")
    s = dev.systolic
    geometry = 2.0 * s.rows * s.cols * s.arrays_per_core * dev.compute.units * dev.clock.sustained_hz
    gemm_s = 2 * 17_149 / (dev.clock.sustained_hz * dev.compute.tensor_flops_per_s["bf16"] / geometry
                           * dev.efficiency.tensor_peak_fraction)
    vec_rate = dev.compute.vector_flops_per_s["fp32"] * dev.efficiency.vector_peak_fraction
    scores = 8 * 2048 * 2048
    g = load_workload("attention:b=1,h=8,s=2048,d=128", dtype="bf16")
    (fwd,) = [r for r in evaluate(g, dev).records if r.kind == "attention"]
    assert fwd.compute_s == pytest.approx(2 * gemm_s + 5 * scores / vec_rate, rel=1e-9)
    assert "between the GEMMs (serial)" in fwd.notes
    # 2 x 34,298 cycles / (1751 MHz x 0.902) = 43.4 us of GEMMs, 167.8 M vector ops / 7.10 TFLOP/s = 23.6 us of
    # softmax: 67.1 us, where overlapping them gave 43.4 us
    assert 2 * gemm_s == pytest.approx(43.4e-6, rel=2e-3) and 5 * scores / vec_rate == pytest.approx(23.6e-6, rel=2e-3)
    # the backward: seven GEMMs of the same size (dkv: S, dV, dP, dK; dq: S, dP, dQ) against 10 ops a score
    train = load_workload("llama-3-8b", batch=1, seq=2048, train=True)
    (bwd, *_) = [r for r in evaluate(train, dev).records if r.kind == "attention_bwd"]
    arrays = float(bwd.notes.split(" vs arrays ")[1].split(" us")[0]) * 1e-6
    # then the XLA pass di = sum(o * do) before the kernels: o and do (32 heads x 2048 x 128 bf16 each) read, a
    # float32 per head and query row written, at the achieved HBM rate
    di_s = (2 * 32 * 2048 * 128 * 2 + 4 * 32 * 2048) / (1638e9 * 0.830)
    # and the slice of the forward's logsumexp (saved as float32 over 128 lanes) to one float32 a row: 32 x 2048 rows,
    # 128 x 4 B read and 4 B written each
    lse_s = 32 * 2048 * (128 * 4 + 4) / (1638e9 * 0.830)
    assert bwd.compute_s == pytest.approx(arrays + di_s + lse_s, rel=1e-3) and "overlapped" in bwd.notes


def test_attention_backward_runs_the_dkv_and_dq_kernels():
    # MaxText's TPU attention backward is two Pallas kernels, each recomputing S = Q K^T: dkv (S, dV, dP, dK)
    # and dq (S, dP, dQ), 7 GEMMs (the 2023 flash kernel, and splash with sa_use_fused_bwd_kernel False,
    # its default). gpt2 at 1024 tokens: 12 heads of head_dim 64, causal over blocks of 512: 3 of 4 tiles,
    # 768 of the 1024 keys per query on average.
    dev = load_device("tpu-v5e")
    rep = evaluate(load_workload("gpt2", batch=1, seq=1024, train=True), dev)
    bwd = [r for r in rep.records if r.kind == "attention_bwd"]
    fwd = [r for r in rep.records if r.kind == "attention"]
    assert BACKWARD_KERNEL_GEMMS == 7
    assert bwd and all(r.notes.startswith("7 GEMMs over 12 batch x heads") for r in bwd)
    assert all(r.notes.startswith("2 GEMMs over 12 batch x heads") for r in fwd)
    assert "causal kept fraction 0.750" in bwd[0].notes and "causal kept fraction 0.750" in fwd[0].notes
    # the arrays' time: seven GEMMs of the same 12 x (1024 x 768 x 64) size against the forward's two
    arrays = [float(r.notes.split(" vs arrays ")[1].split(" us")[0]) for r in (bwd[0], fwd[0])]
    assert arrays[0] / arrays[1] == pytest.approx(7 / 2, rel=0.05)


def test_hbm_copy_reproduces_the_measured_v6e_point():
    # tpu-recipes microbenchmarks README (c8cfe2f): a 33,554,432-byte bf16 copy on one v6e, device time from the
    # trace 0.049359414 ms, read + write = 1359.596 GB/s (the calibration point of tpu-v6e's
    # efficiency.dram_bandwidth_fraction, 1359.596 / 1638 = 0.830)
    dev = load_device("tpu-v6e")
    assert dev.efficiency.dram_bandwidth_fraction == 0.830
    rec = evaluate(load_workload("copy:bytes=33554432", dtype="bf16"), dev)
    assert rec.latency_s == pytest.approx(0.049359414e-3, rel=0.005)
    assert load_device("tpu-v5e").efficiency.dram_bandwidth_fraction == 0.758  # no v5e copy measured


def test_slice_topology_and_wraparounds():
    from simulator.lowering.tpu import slice_topology

    assert slice_topology("tpu-v5p", 64) == ((4, 4, 4), (True, True, True))   # v5p-128: a full cube
    assert slice_topology("tpu-v5p", 4) == ((2, 2, 1), (False, False, False))  # v5p-8: below a cube
    assert slice_topology("tpu-v5e", 256) == ((16, 16), (True, True))
    assert slice_topology("tpu-v6e", 8) == ((2, 4), (False, False))
    assert slice_topology("tpu-v5e", 3) is None and slice_topology("h100-sxm5-80gb", 8) is None


def test_tensor_parallel_collective_on_a_v5p_slice_runs_over_one_torus_axis():
    # MaxText 32B on v5p-128 (4x4x4), tp 4: the sequence-parallel all-gather runs over the one axis of 4
    # (2 links of 100 GB/s), not over all six ports
    from simulator.hardware import load_hardware
    from simulator.parallel import evaluate_plan
    from workloads.parallel import ParallelPlan

    plan = ParallelPlan(tp=4, dp=16, fsdp=True, sequence_parallel=True, microbatch=1, global_batch=16)
    r = evaluate_plan("gpt2", load_hardware("tpu-v5p-128"), plan, train=True, seq=512)
    from hwmodels.collectives import collective_time, load_collective_system, torus_group_system

    rec = next(x for x in r.reports[0].records if x.kind == "all_gather")
    size = rec.dram_bytes / (2 * 3 / 4)  # the op's traffic is 2 x (n-1)/n of its size
    pod = load_collective_system("tpu-v5p-pod")
    one_axis = collective_time("all_gather", size, 4, torus_group_system(pod, (4, 4, 4), 4, 1, (True,) * 3))
    assert rec.time_s == pytest.approx(one_axis.time_s, rel=1e-9)
    assert rec.time_s > collective_time("all_gather", size, 4, pod).time_s


def test_more_hbm_bandwidth_is_never_slower():
    base = load_device("tpu-v5e")
    fast = apply_overlay(base, {"memory.hbm.read_bandwidth_bytes_per_s": "1638 GB/s"}, source="test")
    g = load_workload("llama-2-7b", phase="decode", context=512)
    a, b = evaluate(g, base), evaluate(g, fast)
    assert b.latency_s < a.latency_s
    assert all(rb.time_s <= ra.time_s * (1 + 1e-12) for ra, rb in zip(a.records, b.records, strict=True))


def test_larger_gemm_is_never_faster():
    dev = load_device("tpu-v4")
    cyc = [map_gemm(dev, 1, m, 1024, 1024, in_bytes=2, out_bytes=2).cycles for m in (1, 64, 128, 129, 1000, 4096)]
    assert cyc == sorted(cyc)


def test_resnet50_batch128_on_v4_via_cli(capsys):
    out = _cli_json(capsys, "resnet50", "--hardware", "tpu-v4", "--batch", "128", "--no-fusion")
    assert out["hardware"] == "tpu-v4"
    assert math.isfinite(out["latency_s"]) and out["latency_s"] > 0
    assert math.isfinite(out["energy_j"]) and out["energy_j"] > 0
    dev = load_device("tpu-v4")
    assert out["totals"]["peak_flops_per_s"] == 275e12  # fp32 contractions: one bf16 pass (XLA default)
    # MFU band, bounded from the graph itself: the ops are not fused (XLA would fuse the
    # elementwise ones), so every non-contraction op moves its bytes through HBM. Upper bound:
    # contractions at the derated peak plus the others at full HBM bandwidth.
    g = load_workload("resnet50", batch=128)
    conv_s = sum(op.flops for op in g if op.category == "contraction") / (275e12 * dev.efficiency.tensor_peak_fraction)
    other = sum(op.bytes_read + op.bytes_written for op in g
                if op.category != "contraction" and op.kind not in ("reshape",))
    floor_s = conv_s + other / dev.main_memory.read_bandwidth_bytes_per_s
    assert out["latency_s"] >= floor_s
    assert 0.05 <= out["mfu"] <= sum(op.flops for op in g) / floor_s / 275e12
    convs = [r for r in out["ops"] if r["kind"] == "conv2d"]
    assert convs and all(r["rule"] == "mxu-conv" and "128x128 ws" in r["notes"] for r in convs)
    # no conv runs above the derated peak
    assert all(r["flops"] / r["time_s"] <= 275e12 * 0.923 * (1 + 1e-9) for r in convs)
    # by default TPUs fuse (as XLA does): faster than unfused, never faster than the convs alone
    fused = _cli_json(capsys, "resnet50", "--hardware", "tpu-v4", "--batch", "128")
    assert conv_s <= fused["latency_s"] < out["latency_s"]
    assert fused["provenance"]["options"]["fusion"] is None
    assert any(r["fused_into"] for r in fused["ops"] if r["kind"] == "batchnorm")


def test_llama2_7b_decode_on_v5e_is_memory_bound(capsys):
    out = _cli_json(capsys, "llama-2-7b", "--hardware", "tpu-v5e", "--phase", "decode", "--context", "2048")
    assert math.isfinite(out["energy_j"]) and out["energy_j"] > 0
    g = load_workload("llama-2-7b", phase="decode", context=2048)
    dev = load_device("tpu-v5e")
    weight_s = g.weight_bytes / dev.main_memory.read_bandwidth_bytes_per_s
    assert out["latency_s"] >= weight_s  # every weight crosses HBM once per token
    assert out["latency_s"] <= 1.5 * (g.weight_bytes + 2**30) / (819e9 * dev.efficiency.dram_bandwidth_fraction)
    assert out["bound_breakdown"]["memory"] > 0.9
    assert out["mfu"] < 0.01


def test_edge_design_point_predicts_a_small_cnn(capsys):
    out = _cli_json(capsys, "resnet18", "--hardware", "hwmodels/catalog/devices/edge-64x64.toml",
                    "--batch", "1", "--dtype", "int8")
    assert out["latency_s"] > 0 and out["energy_j"] > 0
    peak = 8.192e12
    assert out["latency_s"] >= out["flops"] / peak  # never above the array's peak
    convs = [r for r in out["ops"] if r["kind"] == "conv2d"]
    assert convs and all("64x64 ws" in r["notes"] for r in convs)


def test_fp32_contraction_runs_at_the_bf16_rate_and_missing_dtypes_are_noted():
    dev = load_device("edge-64x64")  # no fp32 matrix rate: the slowest listed (bf16) is used, noted
    rep = evaluate(load_workload("gemm:m=256,n=256,k=256", dtype="fp32"), dev, EvalOptions())
    (rec,) = rep.records
    assert "fp32 not in compute.tensor_flops_per_s; costed at the bf16 rate" in rec.notes
    v5e = load_device("tpu-v5e")
    t32 = evaluate(load_workload("gemm:m=2048,n=2048,k=2048", dtype="fp32"), v5e).records[0].compute_s
    t16 = evaluate(load_workload("gemm:m=2048,n=2048,k=2048", dtype="bf16"), v5e).records[0].compute_s
    assert t32 == pytest.approx(t16)


def test_megablox_tile_visits_by_hand():
    """MaxText's Megablox gmm (tile_batch_seq 512): 393,216 routed rows (DeepSeek-V3 on v5p, 6 x 8192 tokens
    x top-8) over 256 experts visit ceil(393216 / 512) = 768 m tiles plus one for every group starting inside
    a tile, 255 x 511/512 expected: 393,216 + 255 x 511 = 523,521 rows, 2046 per expert (1536 without
    the tiles). The maxtext profiles build the experts' grouped matmuls with that tile; a GPU stack does not."""
    import dataclasses

    from simulator.lowering.tpu import _grouped_rows
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, TensorSpec
    from workloads.zoo.transformer import build, zoo_config

    x = TensorSpec("x", (256, 1536, 7168), DType("bf16"))
    w = TensorSpec("w", (256, 7168, 4096), DType("bf16"))
    y = TensorSpec("y", (256, 1536, 4096), DType("bf16"))
    attrs = {"tokens": 393216, "experts_active": 256}
    op = Op("experts_in", "grouped_matmul", (x, w), (y,), Attrs(attrs), "moe")
    assert _grouped_rows(op) == (1536, 256)
    tiled = Op("experts_in", "grouped_matmul", (x, w), (y,), Attrs({**attrs, "tile_rows": 512}), "moe")
    assert _grouped_rows(tiled) == (math.ceil((393216 + 255 * 511) / 256), 256) == (2046, 256)
    cfg = dataclasses.replace(zoo_config("mixtral-8x7b"), layers=1)
    for framework, tile in (("maxtext", 512), ("maxtext-cf", 512), ("megatron-core", None)):
        g = build(cfg, batch=1, seq=512, phase="forward", name="m", framework=framework)
        gmm = [op for op in g.ops if op.kind == "grouped_matmul"]
        assert len(gmm) == 2 and all(op.attrs.get("tile_rows") == tile for op in gmm)


def test_router_backward_runs_its_two_matmuls_on_the_matrix_units():
    """The router's backward is a dense layer's: dx = dlogits W^T and dW = x^T dlogits, 2 x 2 T D E flops
    (Llama 4 Maverick on one v5p chip: 16,384 tokens, D 5120, 128 experts: 85.9 GFLOP) on the MXU (TPU)
    and the tensor cores (H100), not on the vector units; the softmax and top-k backward stays vector work."""
    from simulator.lowering.common import LoweringContext, lower
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, TensorSpec

    bf16 = DType("bf16")
    t, d, e = 16384, 5120, 128
    x, w = TensorSpec("x", (t, d), bf16), TensorSpec("w", (d, e), bf16)
    dwts = TensorSpec("dwts", (t, 1), bf16)
    op = Op("router.bwd", "moe_router_bwd", (x, w, dwts), (TensorSpec("dx", (t, d), bf16),
                                                             TensorSpec("dw", (d, e), bf16)), Attrs({"top_k": 1}),
            "moe")
    assert op.flops == 4 * t * d * e + 4 * t * e
    for dev, rule in (("tpu-v5p", "mxu-router-bwd"), ("h100-sxm5-80gb", "gemm+gemm+softmax-topk-bwd")):
        cost = lower(op, LoweringContext(load_device(dev), EvalOptions()))
        assert cost.rule == rule and cost.matrix_flops == 4 * t * d * e
        assert cost.vector_flops == pytest.approx(4 * t * e, rel=0.01)


def test_splash_blocks_of_the_workload_set_each_kernels_tiles():
    # A MaxText workload's sa_block_* sizes (EvalOptions.splash_blocks: q, kv, q_dkv, kv_dkv, q_dq, kv_dq) set the
    # tiles of each kernel. Gemma 3's dkv tiles (512 x 2048) over 4096 causal queries: query blocks 0-3 stop in key
    # block 0 (2048 keys), 4-7 run both (4096), 512 x (4 x 2048 + 4 x 4096) pairs, 0.75 of the scores.
    from dataclasses import replace

    from simulator.lowering.tpu import splash_blocks

    assert splash_block_pairs(4096, 4096, 0, 1024, 1024) == 10 * 1024 * 1024
    assert splash_block_pairs(4096, 4096, 0, 512, 2048) == 512 * (4 * 2048 + 4 * 4096) == 12_582_912
    # gpt2 at 1024 tokens: forward tiles of 256 run 1 + 2 + 3 + 4 = 10 of 16 (0.625); the dkv kernel's 512 x 256
    # tiles 512 x (512 + 1024) pairs (0.750); the dq kernel's one 1024 block everything (1.000)
    opts = EvalOptions(splash_blocks=(256, 256, 512, 256, 1024, 1024))
    assert splash_blocks(opts) == ((256, 256, 512, 256, 1024, 1024), False)
    g = load_workload("gpt2", batch=1, seq=1024, train=True)
    dev = load_device("tpu-v6e")
    recs = {r.kind: r for r in evaluate(g, dev, opts).records if r.kind.startswith("attention")}
    assert "causal kept fraction 0.625;" in recs["attention"].notes
    bwd = recs["attention_bwd"].notes
    assert bwd.startswith("7 GEMMs") and "causal kept fraction 0.750;" in bwd
    # the dkv kernel's four GEMMs over 768 keys a query and the dq kernel's three over 1024: 4 x 768 + 3 x 1024
    # key-rows against the split default's 7 x 768 (512 blocks, 0.750)
    default = {r.kind: r for r in evaluate(g, dev).records if r.kind == "attention_bwd"}["attention_bwd"]
    arrays = [float(n.split(" vs arrays ")[1].split(" us")[0]) for n in (bwd, default.notes)]
    assert arrays[0] / arrays[1] == pytest.approx((4 * 768 + 3 * 1024) / (7 * 768), rel=0.03)
    fused = {r.kind: r for r in evaluate(g, dev, replace(opts, splash_fused_bwd=True)).records}["attention_bwd"]
    assert fused.notes.startswith("5 GEMMs") and "(fused backward)" in fused.notes
    # the default is MaxText's base.yml: 512 everywhere, the split backward
    assert splash_blocks(EvalOptions()) == ((512,) * 6, False)
    with pytest.raises(ValueError, match="options.splash_blocks"):
        EvalOptions(splash_blocks=(1024, 512))


def test_onehot_embedding_is_the_gemm_maxtext_runs_with_use_iota_embed():
    # MaxText's Embed with use_iota_embed: True computes jnp.dot(one_hot, embedding): Llama 3 8B's 8192 tokens
    # against its 128256 x 4096 table are an (8192, 4096, 128256) GEMM, 2 x 8192 x 4096 x 128256 = 8.6 TFLOP, and
    # the table's gradient one_hot^T @ grad a (128256, 4096, 8192) one; each costs what that plain GEMM costs
    dev = load_device("tpu-v6e")
    g = load_workload("llama-3-8b", batch=1, seq=8192, train=True)
    recs = {r.kind: r for r in evaluate(g, dev, EvalOptions(embedding_onehot=True)).records
            if r.kind.startswith("embedding")}
    (fwd_gemm,) = evaluate(load_workload("gemm:m=8192,n=4096,k=128256", dtype="bf16"), dev).records
    (bwd_gemm,) = evaluate(load_workload("gemm:m=128256,n=4096,k=8192", dtype="bf16"), dev).records
    assert recs["embedding"].rule == "mxu-onehot-embedding"
    assert recs["embedding"].time_s == pytest.approx(fwd_gemm.time_s, rel=1e-9)
    assert recs["embedding_bwd"].time_s == pytest.approx(bwd_gemm.time_s, rel=1e-9)
    # about 2 x 8192 x 4096 x 128256 FLOP at the measured 90.2% of 918 TFLOP/s: 10.4 ms, where the row gather
    # the default prices moves 8192 rows of 8 KiB (0.1 ms)
    assert fwd_gemm.time_s == pytest.approx(2 * 8192 * 4096 * 128256 / (918e12 * 0.902), rel=0.01)
    default = {r.kind: r for r in evaluate(g, dev).records if r.kind.startswith("embedding")}
    assert default["embedding"].rule == "gather" and default["embedding"].time_s < 0.2e-3



def test_splash_backward_xla_passes_di_and_the_fused_kernels_partial_dq_sum():
    # sa_use_fused_bwd_kernel True (the Llama 3.1 / Mistral v6e workloads, 2,048 blocks): the dkv kernel writes
    # dq_unreduced of shape (8192 // 2048, *q.shape) in bf16 and XLA sums it over axis 0 afterwards. Llama 3 8B at
    # 8,192 tokens: q is 32 heads x 8192 x 128 bf16 = 64 MiB; the kernel writes 4 partials (256 MiB) beside its
    # GEMMs, the sum reads them and writes dQ (320 MiB) at the chip's achieved HBM rate (1638 GB/s x 0.830), serial.
    from dataclasses import replace

    dev = load_device("tpu-v6e")
    g = load_workload("llama-3-8b", batch=1, seq=8192, train=True)
    split = EvalOptions(splash_blocks=(2048,) * 6)
    # Both backwards first compute di = sum(o * do) over head_dim in XLA: o and do (64 MiB each) read, a float32 per
    # head and query row (1 MiB) written.
    q_bytes = 32 * 8192 * 128 * 2
    hbm = 1638e9 * 0.830
    sum_s, di_s = 5 * q_bytes / hbm, (2 * q_bytes + 4 * 32 * 8192) / hbm
    rec, base = ([r for r in evaluate(g, dev, o).records if r.kind == "attention_bwd"][0]
                 for o in (replace(split, splash_fused_bwd=True), split))
    assert "(fused backward)" in rec.notes and "partial dQ" not in base.notes
    # the op's own bytes (q, k, v, o, do in; dq, dk, dv out: 320 MiB), the di pass; fused: the 4 partials, the
    # sum's 4 reads and 1 write
    # and the logsumexp's slice from 128 float32 lanes to one (516 B a head and query row)
    assert base.dram_bytes == 335_544_320 + 2 * q_bytes + 4 * 32 * 8192 + 516 * 32 * 8192
    assert rec.dram_bytes == base.dram_bytes + 9 * q_bytes
    assert f"partial dQ summed after the kernel {sum_s * 1e6:.2f} us" in rec.notes
    assert f"di = sum(o * do) before the kernels {di_s * 1e6:.2f} us" in rec.notes
    # compute-bound kernels (their arrays' time, overlapped with the softmax), then the XLA passes
    lse_s = 516 * 32 * 8192 / hbm
    for r, extra in ((rec, sum_s + di_s + lse_s), (base, di_s + lse_s)):
        arrays_s = float(r.notes.split(" vs arrays ")[1].split(" us")[0]) * 1e-6
        assert r.compute_s == pytest.approx(arrays_s + extra, rel=1e-5)


def test_the_2023_flash_backward_writes_its_broadcast_row_statistics_before_its_kernels():
    # MaxText 76bd53b0f's attention: flash (the 2023 v5e/v5p rows) runs jax's flash_attention.py, whose backward
    # broadcasts m, l and di (float32) to 128 lanes for the dkv kernel, m and l to 128 and di to block_k_major (512)
    # for the dq kernel: (5 x 128 + 512) x 4 B written and 3 x 4 B read a head and query row. gpt2 at 1024 tokens:
    # 12 heads x 1024 rows = 12,288 rows, 56.8 MB more before the kernels at v5e's achieved HBM rate.
    from dataclasses import replace

    from simulator.lowering.tpu import flash_row_stats_bytes

    dev = load_device("tpu-v5e")
    g = load_workload("gpt2", batch=1, seq=1024, train=True)
    base = EvalOptions()
    rec, ref = ([r for r in evaluate(g, dev, o).records if r.kind == "attention_bwd"][0]
                for o in (replace(base, tpu_flash_2023=True), base))
    # and its forward saved l and m over 128 float32 lanes (the splash kernel: the logsumexp alone), which XLA slices
    # to a float32 a row before the kernels: one statistic more, 516 B a row
    extra = flash_row_stats_bytes(12 * 1024, 512) + 12 * 1024 * 516.0
    assert extra == 12 * 1024 * (4620.0 + 516.0)
    assert rec.dram_bytes == pytest.approx(ref.dram_bytes + extra, rel=1e-12)
    hbm = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    assert rec.compute_s == pytest.approx(ref.compute_s + extra / hbm, rel=1e-9)
    assert "m, l, di broadcast over lanes (2023 flash kernel)" in rec.notes
    # the forward is unchanged
    fwd = [[r for r in evaluate(g, dev, o).records if r.kind == "attention"][0].time_s
           for o in (replace(base, tpu_flash_2023=True), base)]
    assert fwd[0] == fwd[1]


def test_a_causal_splash_kernel_masks_every_score_it_computes():
    # _apply_mask_and_soft_cap runs on every block a splash kernel computes: the key positions (k_offset + iota), the
    # causal compare and jnp.where (3 vector ops a score); with segment ids (MaxText passes decoder_segment_ids to
    # every call) their compare and the logical_and of the two masks (2 more). Eight causal heads of 2048 x 2048 on
    # v6e, 512 blocks: 10 of 16 tiles run, 0.625 of the scores; the forward's softmax (5 ops) and mask sit between
    # its GEMMs.
    from dataclasses import replace

    from simulator.lowering.tpu import mask_vector_ops

    dev = load_device("tpu-v6e")
    vec_rate = dev.compute.vector_flops_per_s["fp32"] * dev.efficiency.vector_peak_fraction
    scores = 8 * 2048 * 2048 * 0.625
    g = load_workload("attention:b=1,h=8,s=2048,d=128,causal=1", dtype="bf16")
    plain, seg = ([r for r in evaluate(g, dev, o).records if r.kind == "attention"][0]
                  for o in (EvalOptions(), replace(EvalOptions(), tpu_segment_ids=True)))
    assert plain.flops and mask_vector_ops(True, None) == 3.0
    arrays = float(plain.notes.split(" vs arrays ")[1].split(" us")[0]) * 1e-6
    assert plain.compute_s == pytest.approx(arrays + (5 + 3) * scores / vec_rate, rel=1e-3)
    assert seg.compute_s == pytest.approx(arrays + (5 + 5) * scores / vec_rate, rel=1e-3)
    # no mask, no segment ids: the softmax alone (the non-causal case of the test above)
    assert mask_vector_ops(False, None) == 0.0
    assert mask_vector_ops(False, EvalOptions(tpu_segment_ids=True)) == 2.0
    # a causal sliding window (MaxText's CausalMask & LocalMask, loaded as partial mask blocks): or and where
    win = load_workload("attention:b=1,h=8,s=2048,d=128,causal=1,window=512", dtype="bf16")
    (rec,) = [r for r in evaluate(win, dev, replace(EvalOptions(), tpu_segment_ids=True)).records
              if r.kind == "attention"]
    kept = float(rec.notes.split("causal kept fraction ")[1].split(" ")[0])
    arrays = float(rec.notes.split(" vs arrays ")[1].split(" us")[0]) * 1e-6
    assert rec.compute_s == pytest.approx(arrays + (5 + 2 + 2) * 8 * 2048 * 2048 * kept / vec_rate, rel=2e-3)


def test_splash_backward_slices_the_forwards_lane_wide_logsumexp_before_its_kernels():
    # The splash forward saves its logsumexp as float32 over 128 lanes (num_q_heads, q_seq_len, NUM_LANES), as the
    # compiled MaxText step of patrick-toulme/justabyte @ 4b28527d shows (splash_mha_fwd_segmented_residuals.6 returns
    # f32[32,1024,128] beside its bf16[32,1024,64] output); _splash_attention_forward then takes logsumexp[..., 0] in
    # XLA: every (8, 128) tile read, a float32 a head and query row written. Hand count for gpt2 at 1,024 tokens on
    # v6e, one layer's attention backward (12 heads of 64, batch 1):
    dev = load_device("tpu-v6e")
    g = load_workload("gpt2", batch=1, seq=1024, train=True)
    (bwd, *_) = [r for r in evaluate(g, dev).records if r.kind == "attention_bwd"]
    t = 12 * 1024 * 64 * 2              # one bf16 [heads, seq, head_dim] tensor: 1,572,864 B
    rows = 12 * 1024                    # head x query rows
    kernels = 8 * t                     # q, k, v, o, do read; dq, dk, dv written
    di = 2 * t + 4 * rows               # di = sum(o * do): o and do read, a float32 a row written
    lse = rows * (128 * 4 + 4)          # the slice: 512 B read, 4 B written a row
    assert (kernels, di, lse) == (12_582_912, 3_194_880, 6_340_608)
    assert bwd.dram_bytes == kernels + di + lse
    # at head_dim 64 the slice moves twice di's bytes; both run at the achieved HBM rate after the compute-bound
    # kernels
    hbm = 1638e9 * 0.830
    arrays_s = float(bwd.notes.split(" vs arrays ")[1].split(" us")[0]) * 1e-6
    assert bwd.compute_s == pytest.approx(arrays_s + (di + lse) / hbm, rel=1e-4)
    assert f"saved row statistics sliced from 128 lanes {lse / hbm * 1e6:.2f} us" in bwd.notes
