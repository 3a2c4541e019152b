"""The speed work on parallel plans (kernel and record costs kept across calls, records copied
between ops of the same cost, graphs built without networkx, digests computed once) changes no
answer: predictions and graphs recorded before it, costs kept or cleared, records shared or made
one by one, and invalidation when the spec, the options or the rules change."""

from __future__ import annotations

import dataclasses
import hashlib
import json

import numpy as np
import pytest

import nodeperf as npf
import simulator.engines.analytical as an
import simulator.engines.walk as walk
from simulator.engines.analytical import (
    EvalOptions,
    clear_kernel_cost_cache,
    evaluate,
    graph_digest,
)
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan, generate_request
from workloads.ir import Attrs, GraphBuilder, GraphError, OpGraph
from workloads.parallel import ParallelPlan, plan_graphs

A100S = load_hardware("dgx-a100x128")
DGX = load_hardware("dgx-h100")
PLAN3D = ParallelPlan(tp=8, pp=16, dp=8, microbatch=1, global_batch=1536, sequence_parallel=True)
GPT3 = {"train": True, "seq": 2048, "recompute": "selective"}

#: per-op fields whose values a prediction is made of
_FIELDS = ("name", "kind", "group", "time_s", "energy_j", "dynamic_energy_j", "static_energy_j", "flops",
           "dram_bytes", "l2_bytes", "smem_bytes", "compute_s", "memory_s", "overhead_s", "bound", "rule", "kernels",
           "power_capped", "fused_into", "fallback")


def _sha(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=repr).encode()).hexdigest()[:16]


def _ops(rep: object) -> str:
    """Digest of every record's fields (floats at full precision)."""
    return _sha([[getattr(r, f) for f in _FIELDS] for r in rep.records])


def _reference_digest(graph: OpGraph) -> str:
    """graph_digest as first written: the SHA-256 updated op by op."""
    h = hashlib.sha256(graph.name.encode())
    for op in graph:
        tens = ";".join(f"{t.name}:{t.shape}:{t.dtype.value}:{t.role.value}" for t in (*op.inputs, *op.outputs))
        attrs = ",".join(f"{k}={op.attrs[k]!r}" for k in sorted(op.attrs))
        h.update(f"{op.name}|{op.kind}|{op.group}|{tens}|{attrs}\n".encode())
    h.update(json.dumps({k: graph.meta[k] for k in sorted(graph.meta)}, default=str).encode())
    return h.hexdigest()


# ------------------------------------------------------------------------------------------------
# graphs: built as before (digests recorded with the code before the speed work)

_GRAPHS = {
    # the GPT-3 step's three stage graphs: first (embedding), middle (14 stages), last (head, loss)
    "gpt3-first": "b8a289c9de8145804f192a2ed874aa41ceb410a815d1b0152459d396ca0d5b79",
    "gpt3-middle": "c53d2015995d9368ce600388f704b480059761deb0ba2d07a0eb658c612bd351",
    "gpt3-last": "9cf9cd8ebf7b292315bb5151ca3833beadbfd8fedc1926115986bd65d78240a4",
    # (llama-fsdp-full and llama-interleaved-chunk re-recorded when a RoPE op's gradient read only its output gradient,
    # workloads.training: was 1ccb6e67ab20... and e2f6dcec4fc3...)
    "llama-fsdp-full": "38af71d91af9b8318563bcfccb477fb3be0c653ab14fe02f76cd436f8f2068c3",
    "llama-interleaved-chunk": "af6417387e677c7fd84e952ba9899a63814c2f63a4f6d1cb7ee3f05c1dcaeb0c",
    "mixtral-ep-prefill": "041884da332f5f762ab8015d6f11f669ccb6c7a444e992ffa81f82aba1a8d25e",
    "llama-70b-decode": "c5194472d4532565960b044e24bc56a684a02b3fcc74d364655221fe609abb49",
}


def _plan_graph(name: str) -> OpGraph:
    if name.startswith("gpt3-"):
        gs = plan_graphs("gpt3-175b", PLAN3D, **GPT3)
        return {"gpt3-first": gs[0], "gpt3-middle": gs[1], "gpt3-last": gs[-1]}[name].graph
    if name == "llama-fsdp-full":
        return plan_graphs("llama-2-7b", ParallelPlan(tp=2, dp=4, fsdp=True, microbatch=2, global_batch=16),
                           train=True, seq=512, recompute="full")[0].graph
    if name == "llama-interleaved-chunk":
        return plan_graphs("llama-2-7b", ParallelPlan(pp=2, schedule="interleaved", interleave=2, dp=2, microbatch=1,
                                                      global_batch=8, zero_stage=1), train=True, seq=512)[1].graph
    if name == "mixtral-ep-prefill":
        return plan_graphs("mixtral-8x7b", ParallelPlan(ep=8, dp=8), phase="prefill", seq=512, batch=2)[0].graph
    return plan_graphs("llama-2-70b", ParallelPlan(tp=8), phase="decode", context=4096, batch=16)[0].graph


@pytest.mark.parametrize("name", sorted(_GRAPHS))
def test_plan_graphs_are_the_graphs_built_before_the_speed_work(name: str) -> None:
    g = _plan_graph(name)
    assert _reference_digest(g) == _GRAPHS[name]
    assert graph_digest(g) == _GRAPHS[name]


def test_graph_digest_is_the_op_by_op_definition_and_kept_with_the_graph() -> None:
    graphs = [npf.load_workload("resnet50"), npf.load_workload("bert_base", train=True, batch=2, seq=64),
              npf.load_workload("gpt2", phase="decode", context=64), _plan_graph("gpt3-last")]
    for g in graphs:
        d = graph_digest(g)
        assert d == _reference_digest(g)
        assert graph_digest(g) is d  # computed once per graph object


# ------------------------------------------------------------------------------------------------
# predictions: the values recorded before the speed work (same model files)

_PLANS = {
    # (all but tpu re-recorded when the GEMM kernel was chosen by its time under the board's power limit,
    # hwmodels.gpu.GemmPower, and the burn-derived A100/H100 tensor energies re-derived with the tile it takes:
    # gpt3 18.4353 -> 18.0692 s (its A100 GEMMs at 400 W take lower-traffic tiles), moe 46.45 -> 46.35 ms,
    # fsdp 269.24 -> 269.26 ms, decode-fused latency unchanged; energies with the H100's 0.509 pJ/FLOP bf16)
    "gpt3": lambda: evaluate_plan("gpt3-175b", A100S, PLAN3D, **GPT3),
    "gpt3-des": lambda: evaluate_plan("gpt3-175b", A100S, PLAN3D, engine="des", **GPT3),
    "fsdp": lambda: evaluate_plan("llama-2-7b", DGX, ParallelPlan(tp=2, dp=4, fsdp=True, microbatch=2, global_batch=16),
                                  train=True, seq=512, recompute="full"),
    "generate": lambda: generate_request("llama-2-70b", DGX, ParallelPlan(tp=8), input_len=128, output_len=64, batch=4),
    "decode-fused": lambda: evaluate_plan("llama-2-70b", DGX, ParallelPlan(tp=8), EvalOptions(fusion=True, cuda_graphs=True),
                                          phase="decode", context=4096, batch=16),
    "tpu": lambda: evaluate_plan("llama-2-7b", load_hardware("tpu-v5e-8"), ParallelPlan(tp=8), phase="decode",
                                 context=512, batch=8),
    "moe": lambda: evaluate_plan("mixtral-8x7b", DGX, ParallelPlan(ep=8, dp=8), phase="prefill", seq=512, batch=2),
}
_PLAN_VALUES: dict[str, tuple[float, float, float, str, str]] = {
    # latency_s, step energy_j, memory per device (bytes), digest of ParallelResult.to_json(), of every record
    # (memory and to_json re-recorded when a GPU device's memory gained its buffers, the caching allocator's
    # rounding, fp32 main gradients and the fp32 loss, and to_json its memory_breakdown; times unchanged)
    # (re-recorded when the A100/H100 tensor energies came from sustained burns instead of (TDP - idle) / peak,
    # gpt3 / fsdp when a fused-attention backward launched its preprocess and dQ-convert kernels (and their
    # vector work joined its energy), and gpt3 again
    # when the Ampere tensor fraction became the A100's measured MAMF instead of the Hopper figure; all but tpu
    # when every GPU kernel carried its architecture's measured device time, efficiency.kernel_device_time_s)
    # (gpt3 and gpt3-des re-recorded when the A100's L2 tile copies ran at the cp.async rate, 0.755 of 5120 B/clk)
    # (gpt3, gpt3-des and fsdp re-recorded when the gradients of gelu/silu/exp/... were charged the FP32
    # instructions and MUFU ops of eager PyTorch's backward formulas, hwmodels.gpu.ELEMENTWISE_BWD_INSTRUCTIONS:
    # the A100's gelu backward turns compute-bound at its power limit, gpt3 18.4381 -> 18.4527 s)
    # (gpt3 and gpt3-des re-recorded when the FlashAttention-2 forward ran at its mma.sync rate without the GEMM
    # library fraction, hwmodels.gpu.FLASH2_LIBRARY_FRACTION = {bwd}: gpt3 18.4527 -> 18.4353 s)
    # (gpt3 and gpt3-des re-recorded when the GA100's per-kernel device time became the A100's measured
    # 1.337 us, RRZE gpu-small-kernels, for the RTX 3060's 0.556 us: gpt3 18.0692 -> 18.0963 s)
    # (gpt3 and gpt3-des re-recorded when each CTA of a FlashAttention-2 launch paid its pipeline edges on sm80 and
    # later, hwmodels.gpu.attention_edges_s: gpt3 18.0692 -> 18.0865 s, its A100 attention cores)
    # (both together: gpt3 18.1135 s)
    # (gpt3 and gpt3-des re-recorded when two co-resident FlashAttention-2 forward CTAs exposed one edge a round,
    # hwmodels.gpu.flash2_ctas_per_sm: gpt3 18.1135 -> 18.1091 s, its A100 attention cores, and when a causal
    # forward computed whole key blocks, hwmodels.gpu.attention_grid block_kv: 18.1091 -> 18.1198 s, and when a
    # forward's output rescale joined its softmax, hwmodels.gpu.flash2_rescale_ops_per_score: 18.1198 -> 18.1353 s)
    # (gpt3 and gpt3-des energy and record digest re-recorded when those rescale multiplies joined the attention
    # cores' vector flops: gpt3 5.7804 -> 5.7823 MJ, latency unchanged)
    # (gpt3 and gpt3-des re-recorded when the A100 files took the GA100 V-f line, [dvfs], and the die's measured SGEMM
    # energy: GEMMs over the 400 W limit lower clock and voltage instead of stretching at constant energy,
    # 18.1353 -> 18.1008 s, 5.7823 -> 5.7926 MJ)
    # (gpt3 and gpt3-des re-recorded, and resnet50-a100 below, when the Ampere DRAM figure became gpu-stream's
    # triad, 0.873 for MT4G's read 0.758)
    # (gpt3 and gpt3-des JSON digests re-recorded when the stage graphs' power-cap warnings, "36 op(s) ..." and
    # "37 op(s) ...", became one "36-37 op(s) per stage ...": latency, energy and memory unchanged;
    # were 'dce16f2bbd6d1391' and '9bf3192a4242f63c')
    # (the memories and JSON digests of decode-fused, fsdp, generate, gpt3, gpt3-des and moe re-recorded when NCCL's
    # buffers were sized per communicator as NCCL 2.21 allocates them, simulator/report/memory.py
    # nccl_communicator_bytes: fsdp 16310177794 -> 17551691778, gpt3 37853640704 -> 39934015488 bytes; latencies,
    # energies and record digests unchanged)
    # (gpt3 and gpt3-des re-recorded, and resnet50-a100 below, when the 80 GB A100 took its own HBM2e triad, gpu-stream
    # a100_80.txt 0.880 for the 40 GB board's 0.873: 18.06798 -> 18.06654 s, 5.78790 -> 5.78777 MJ)
    "gpt3": (18.066540931787294, 5787769.503171261, 39934015488.0, 'f6250360263f15fa', 'c0fbb8aad3a23fa3'),
    "gpt3-des": (17.955028400368807, 5777355.481677127, 39934015488.0, '84ca5059e24c2582', 'c0fbb8aad3a23fa3'),
    # (fsdp, generate and decode-fused re-recorded when collectives ran on NCCL's per-size channel count and
    # NVLS chunking, hwmodels.collectives ring_channels_used / nvls_loop_bytes; memories and digests of all
    # when a GPU's memory became the allocator's: buffers, rounding, fp32 main gradients and loss)
    # (fsdp's memory re-recorded when FSDP2's root group stayed unsharded beside two blocks, its side streams'
    # buffers stayed reserved and the eager loss ran under loss_parallel(): 15589261314 -> 16310177794 bytes;
    # its JSON digest with the reserve.fsdp_* keys)
    # (the record digests of fsdp, generate, moe, bert-train-h100 and vit-fused-tf32-h100 re-recorded when the
    # FlashAttention-3 forward on Hopper paid its exp2 on the SFU, hwmodels.gpu.attention_pair_s: the attention
    # cores' compute_s only; latencies, energies and memories unchanged)
    # (fsdp re-recorded when the ZeRO/FSDP all-gathers moved each parameter once, not also the optimizer's
    # updated copies: was 0.26926328650908193 s, 796.2445986840773 J, digest '70cb1ec68d1108a8')
    # (fsdp re-recorded when a RoPE op's gradient read only its output gradient (Transformer Engine's FusedRoPEFunc,
    # a rotation linear in its input): was 0.19906868384241527 s, 706.6201299992777 J, digests '1b80af9b8905247f',
    # 'ee38cce3a8c87079')
    # (fsdp, generate, decode-fused, moe, and bert-train-h100 / vit-fused-tf32-h100 below, re-recorded when the Hopper
    # DRAM figure became gpu-stream's triad, 0.946 of the GH200's HBM3 for MT4G's read 0.821: fsdp 0.19891 -> 0.19620 s,
    # generate 0.97811 -> 0.92858 s, decode-fused 12.893 -> 12.039 ms, moe 48.585 -> 47.967 ms)
    # (fsdp's JSON digest re-recorded when each stage's optimizer_s became its devices' sharded update, as the
    # step's breakdown counts it, not the whole stage's: latency, energy and memory unchanged; was 'ec81e51985603e03')
    # (fsdp's energy re-recorded when each rank's optimizer energy became its shard's update, 1/4 of the stage's with
    # FSDP over dp 4, as the step's time counts it: was 702.563554877627 J)
    # (decode-fused, fsdp, generate and moe re-recorded, and bert-train-h100 / vit-fused-tf32-h100 below, when a GEMM's
    # last wave that leaves SMs idle loaded its L2 panels at one SM's own intake, efficiency.l2_tile_sm_port_ratio:
    # fsdp 0.19620 -> 0.19405 s, generate 1.00840 -> 1.00534 s, decode-fused 13.346 -> 13.250 ms, moe 47.987 -> 47.901 ms)
    # (fsdp: the per-SM L2 intake and NCCL's per-communicator buffers together; memory as with NCCL's buffers,
    # time and energy as with the intake, the JSON digest of both)
    "fsdp": (0.19404251666026606, 642.787208729289, 17551691778.0, '54ca6a31765a27d5', 'e713c46cc22415bc'),
    # (generate's record digest and decode-fused re-recorded when decode attention streamed its K/V cache at
    # the measured decode-kernel rate, efficiency.decode_attention_bandwidth_fraction)
    # (generate and decode-fused re-recorded when one-node rings and trees were ranked by NCCL's estimate:
    # generate 0.9116 -> 0.9781 s, its 64 KiB decode all_reduces 16.1 -> 22.7 us)
    # (generate, decode-fused and moe re-recorded when the H100 SXM's library GEMVs and skinny GEMMs took cuBLAS's
    # measured Hopper GEMV rate, 0.762 (docs/accuracy.md "The Hopper library GEMV rate"): generate 0.92858 -> 1.00840 s,
    # decode-fused 12.039 -> 13.346 ms, moe 47.967 -> 47.987 ms)
    # (the JSON digests of decode-fused, fsdp, generate, gpt3, gpt3-des, moe and tpu re-recorded when to_json's
    # memory gained runtime_buffers_bytes and allocator_reserve_bytes at both levels; times, energies and
    # memories unchanged)
    # (generate: the per-SM L2 intake and NCCL's per-communicator buffers together; memory as with NCCL's buffers,
    # time and energy as with the intake, the JSON digest of both)
    "generate": (1.0051720226205498, 2249.711622330281, 19557531648.0, '27b1479b44a67f8e', 'b77b81c0e9ce20e1'),
    # (decode-fused and tpu re-recorded when fusion built kernels as compilers do: RoPE and the SwiGLU joining
    # the fused QKV / gate-up GEMM's epilogue over views of its output, reductions and concatenations in
    # generated kernels: simulator.engines.analytical.FusionGroup)
    # (decode-fused, fsdp, generate, gpt3, gpt3-des and moe re-recorded when transcendental elementwise ops were
    # charged their compiled instructions and the FlashAttention-3 backward serialised its softmax on Hopper)
    # (decode-fused and generate re-recorded when NCCL's one-node rings and trees were ranked by NCCL's own
    # estimate, hwmodels.collectives tuner.tree: the 8x H100 tensor-parallel all_reduces of 8-512 KiB run NCCL's
    # ring LL on its few channels instead of the model's faster tree, decode-fused 12.40 -> 13.03 ms)
    # (decode-fused re-recorded when the CUDA-graph floor became the Hopper chip's measured 1.3 us a tiny kernel,
    # efficiency.graph_launch_overhead_s, for a 2.5 us derivation: 13.03 -> 12.89 ms)
    # (decode-fused: the per-SM L2 intake and NCCL's per-communicator buffers together; memory as with NCCL's buffers,
    # time and energy as with the intake, the JSON digest of both)
    # (decode-fused, fsdp, generate, moe, and bert-train-h100 / vit-fused-tf32-h100 below, re-recorded when a split-K
    # hand-off's read and a first K-slice taken in by SMs that read alone ran at their intake,
    # hwmodels.gpu.gemm_serial_l2_s_per_byte: decode-fused 13.2496 -> 13.2405 ms, fsdp 0.194049 -> 0.194043 s,
    # generate 1.00534 -> 1.00517 s, moe 47.9012 -> 47.9006 ms)
    "decode-fused": (0.013240492626487348, 34.74552293341319, 22196900864.0, 'ba1b7e647bcd47c7', '02ded917c27022db'),
    # re-recorded when ICI collectives took the torus axes their group spans (a v5e-8 is a 2x4 torus without
    # wraparounds: one link per axis, not four ports)
    # and at the scaling book's 4.5e10 B/s one-way per v5e link (fabrics.toml ici-v5e bandwidth_fraction 0.9)
    # (its records re-recorded when the TPU attention forward priced its softmax between its two GEMMs,
    # simulator.lowering.tpu.splash_compute_s: the decode attention stays bound by HBM, times unchanged)
    "tpu": (0.0037700081522726086, 2.4370644689485483, 1954081280.0, '86c2e2207fad01ae', '56dcf6921b74ff47'),
    # (moe re-recorded when the one-node all-to-all ran on NCCL's p2p channels with its protocol by size and the
    # copy of its last p2p chunk, hwmodels.collectives: 46.35 -> 48.58 ms, 228.33 -> 231.19 J)
    # (moe: the per-SM L2 intake and NCCL's per-communicator buffers together; memory as with NCCL's buffers,
    # time and energy as with the intake, the JSON digest of both)
    "moe": (0.04790056526093327, 230.31687998687102, 18939924480.0, 'e49eb024a6b5b791', '0619cf9e02e940d6'),
}

_EVALS = {
    "resnet50-a100": lambda: evaluate(npf.load_workload("resnet50", batch=8), load_hardware("a100-sxm4-80gb")),
    # (bert-train-h100 and vit-fused-tf32-h100 re-recorded when the H100's burn-derived bf16/tf32 tensor energies
    # were re-derived with the tile chosen under the power limit, hwmodels.gpu.GemmPower: energy only)
    "bert-train-h100": lambda: evaluate(npf.load_workload("bert_base", train=True, batch=4, seq=128),
                                        load_hardware("h100-sxm5-80gb")),
    "vit-fused-tf32-h100": lambda: evaluate(npf.load_workload("vit_b16", batch=8), load_hardware("h100-sxm5-80gb"),
                                            EvalOptions(fusion=True, allow_tf32=True)),
    "gpt2-decode-tpu": lambda: evaluate(npf.load_workload("gpt2", phase="decode", batch=4, context=512),
                                        load_hardware("tpu-v5e")),
    "llama-decode-cpu": lambda: evaluate(npf.load_workload("llama-2-7b", phase="decode", batch=1, context=256),
                                         load_hardware("xeon-platinum-8480")),
    "effnet-eager-mi300x": lambda: evaluate(npf.load_workload("efficientnet_b0", batch=16), load_hardware("mi300x"),
                                            EvalOptions(eager_framework=True, power_cap=False)),
}
_EVAL_VALUES: dict[str, tuple[float, float, int, str]] = {
    # (bert-train-h100, effnet-eager-mi300x and vit-fused-tf32-h100 re-recorded when transcendental elementwise
    # ops were charged their compiled FP32 instructions and MUFU ops, hwmodels.gpu.ELEMENTWISE_INSTRUCTIONS)
    # latency_s, energy_j, memory required (bytes), digest of every record (bert-train-h100 re-recorded when
    # the fused-attention backward launched its preprocess and dQ-convert kernels; the GPU rows when every
    # kernel carried its architecture's measured device time, efficiency.kernel_device_time_s)
    # (resnet50-a100 re-recorded when the A100's L2 tile copies ran at the cp.async rate, and when SIMT
    # tiles' shared-memory feed counted per-lane register returns (op memory_s only), and when the Ampere
    # SGEMM fraction became FlagPerf's measured 0.9605 (was the 0.99 placeholder): 5.3145 -> 5.3157 ms)
    # (and when the GA100's per-kernel device time became the A100's measured 1.337 us: 5.3157 -> 5.3781 ms)
    # (and when the A100 files took the GA100 V-f line, [dvfs], and the 80 GB file the die's measured SGEMM energy,
    # 11.94 pJ/FLOP in place of the (TDP - idle) / peak bound: 5.3781 -> 5.0752 ms, 1.8532 -> 1.5703 J)
    # (and when the 80 GB board took its own HBM2e triad, 0.880: 4.9896 -> 4.9852 ms)
    "resnet50-a100": (0.004985150531031701, 1.562035828630274, 179298464, 'b65be163df2988d6'),
    # (bert-train-h100 re-recorded when gelu's gradient was charged eager PyTorch's backward instructions:
    # energy 1.4172 -> 1.4242 J, latency unchanged)
    # (bert-train-h100 and vit-fused-tf32-h100 re-recorded when a GEMM's last wave that leaves SMs idle loaded its L2
    # panels at one SM's own intake, efficiency.l2_tile_sm_port_ratio: 4.6190 -> 4.2805 ms, 1.11492 -> 0.97828 ms)
    # (both re-recorded when a split-K hand-off's read and a first K-slice taken in by SMs that read alone ran at their
    # intake, hwmodels.gpu.gemm_serial_l2_s_per_byte: 4.2805 -> 4.2436 ms, 0.97828 -> 0.97497 ms)
    "bert-train-h100": (0.004243613914590423, 1.3400921164045823, 1907853350, '76f4e1ad67fee0e1'),
    "vit-fused-tf32-h100": (0.0009749740256472586, 0.45473876556619824, 194921936, 'd42067f17ea9dd53'),  # FusionGroup
    # (re-recorded when the TPU attention forward priced its softmax between its two GEMMs, splash_compute_s:
    # 0.59255 -> 0.59279 ms)
    "gpt2-decode-tpu": (0.0005927934148828792, 0.048144763220134223, 324785288, "997f0444bbf9a788"),
    "llama-decode-cpu": (0.03306909657254465, 3.3318817101563463, 13611145216, "06f65ba812c802b6"),
    # re-recorded when eager forward convolutions took the cuDNN call time (framework_conv_op_overhead_s), and
    # when the MI300X's HBM bytes were charged its memory-side Infinity Cache (energy only; latency unchanged),
    # and when they were charged the package path (IOD/XCD wires, IOD-IOD crossing: energy.dram_path_j_per_byte
    # 12.5 -> 86.3 pJ/B; energy 1.4364 -> 1.5861 J, latency unchanged: this case runs with power_cap=False)
    "effnet-eager-mi300x": (0.007399207391066209, 1.5860854566687375, 175294864, 'fec4438d5312ff4a'),
}


def _plan_row(r: object) -> tuple[float, float, float, str, str]:
    cost = r.to_cost_report()
    return (r.latency_s, cost.totals.energy_j, r.memory_per_device_bytes, _sha(r.to_json()),
            _sha([_ops(rep) for rep in r.reports] + [_ops(cost)]))


def _eval_row(r: object) -> tuple[float, float, int, str]:
    return r.latency_s, r.totals.energy_j, r.memory.required_bytes, _ops(r)


@pytest.mark.parametrize("name", sorted(_PLANS))
def test_plan_predictions_equal_the_values_recorded_before_the_speed_work(name: str) -> None:
    assert _plan_row(_PLANS[name]()) == _PLAN_VALUES[name]


@pytest.mark.parametrize("name", sorted(_EVALS))
def test_graph_predictions_equal_the_values_recorded_before_the_speed_work(name: str) -> None:
    assert _eval_row(_EVALS[name]()) == _EVAL_VALUES[name]


# ------------------------------------------------------------------------------------------------
# costs kept across calls are transparent


def _full(rep: object) -> list[object]:
    return [dataclasses.astuple(r) for r in rep.records] + [rep.totals, rep.memory, rep.warnings,
                                                             rep.provenance["spec_sha256"]]


def test_kept_costs_give_the_answers_of_a_cleared_cache() -> None:
    clear_kernel_cost_cache()
    cold = evaluate_plan("gpt3-175b", A100S, PLAN3D, **GPT3)
    warm = evaluate_plan("gpt3-175b", A100S, PLAN3D, **GPT3)
    assert warm.to_json() == cold.to_json()
    assert [_full(r) for r in warm.reports] == [_full(r) for r in cold.reports]
    g = npf.load_workload("bert_base", train=True, batch=2, seq=128)
    h100 = load_hardware("h100-sxm5-80gb")
    for opts in (EvalOptions(), EvalOptions(fusion=True), EvalOptions(cuda_graphs=True, power_cap=False)):
        warm = evaluate(g, h100, opts)
        clear_kernel_cost_cache()
        assert _full(evaluate(g, h100, opts)) == _full(warm)


def test_a_changed_spec_or_option_is_another_context() -> None:
    g = npf.load_workload("gpt2", batch=4, seq=256)
    a100 = load_hardware("a100-sxm4-80gb")
    hbm = a100.memory[0]
    slow = dataclasses.replace(a100, memory=(dataclasses.replace(hbm, read_bandwidth_bytes_per_s=hbm.read_bandwidth_bytes_per_s / 4),
                                             *a100.memory[1:]))
    base = evaluate(g, a100)
    after = evaluate(g, slow)  # the first spec's costs are kept: none may leak into the second's
    clear_kernel_cost_cache()
    assert _full(evaluate(g, slow)) == _full(after)
    assert after.latency_s > base.latency_s
    # a calibration id is recorded only: the same costs; tf32 changes fp32 contractions
    fp32 = npf.load_workload("gpt2", batch=4, seq=256, dtype="fp32")
    plain = evaluate(fp32, a100)
    tagged = evaluate(fp32, a100, EvalOptions(calibration_id="fit-1"))
    assert _full(tagged)[:-4] == _full(plain)[:-4] and tagged.provenance["calibration_id"] == "fit-1"
    assert evaluate(fp32, a100, EvalOptions(allow_tf32=True)).latency_s < plain.latency_s


def test_a_replaced_rule_is_another_context(monkeypatch: pytest.MonkeyPatch) -> None:
    from simulator.lowering import KernelCost
    from simulator.lowering.common import ruleset

    g = npf.load_workload("gpt2", batch=2, seq=128)
    h100 = load_hardware("h100-sxm5-80gb")
    before = evaluate(g, h100)
    rules = ruleset("gpu").rules
    monkeypatch.setitem(rules, "layernorm", lambda op, ctx: KernelCost(1e-3, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
                                                                       rule="test-norm"))
    swapped = evaluate(g, h100)
    norms = [r for r in swapped.records if r.kind == "layernorm"]
    assert norms and all(r.rule == "test-norm" and r.time_s >= 1e-3 for r in norms)
    monkeypatch.undo()
    assert _full(evaluate(g, h100)) == _full(before)


def test_specs_holding_arrays_are_never_kept() -> None:
    h100 = load_hardware("h100-sxm5-80gb")
    assert an._spec_digest(h100) == (an.spec_digest(h100), True)
    variants = dataclasses.replace(h100, power=dataclasses.replace(h100.power, tdp_w=np.array([500.0, 700.0])))
    digest, plain = an._spec_digest(variants)
    assert not plain and digest == an.spec_digest(variants)
    clear_kernel_cost_cache()
    ctx = an.LoweringContext(variants.device if hasattr(variants, "device") else variants, EvalOptions())
    an._costs_of(digest, plain, h100, EvalOptions(), ctx)
    assert an._COSTS == {}
    an._costs_of(*an._spec_digest(h100), h100, EvalOptions(), ctx)
    assert len(an._COSTS) == 1


def test_kept_contexts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(an, "KERNEL_COST_CONTEXTS", 2)
    clear_kernel_cost_cache()
    g = npf.load_workload("gpt2", phase="decode", context=32)
    h100 = load_hardware("h100-sxm5-80gb")
    for power_cap in (True, False):
        for cuda_graphs in (True, False):
            evaluate(g, h100, EvalOptions(power_cap=power_cap, cuda_graphs=cuda_graphs))
    assert len(an._COSTS) == 2
    clear_kernel_cost_cache()


# ------------------------------------------------------------------------------------------------
# records copied between ops of one cost are the records made one by one


def test_shared_records_equal_records_made_op_by_op(monkeypatch: pytest.MonkeyPatch) -> None:
    cases = [(_plan_graph("gpt3-middle"), A100S, EvalOptions()),
             (npf.load_workload("bert_base", train=True, batch=2, seq=128), load_hardware("h100-sxm5-80gb"),
              EvalOptions(fusion=True)),
             (npf.load_workload("resnet50", batch=4), load_hardware("tpu-v5e"), EvalOptions())]
    shared = [evaluate(g, hw, o) for g, hw, o in cases]
    sig = walk.op_signature
    monkeypatch.setattr(walk, "op_signature", lambda op, resident: (op.name, *sig(op, resident)))  # no two ops alike
    for g, _, _ in cases:  # the walks kept with the graphs were made with the shared signatures
        for key in [k for k in g._cache if isinstance(k, tuple) and k[0] == "walk"]:
            del g._cache[key]
    one_by_one = [evaluate(g, hw, o) for g, hw, o in cases]
    for a, b in zip(shared, one_by_one, strict=True):
        assert _full(a) == _full(b)
        assert [r.__dict__ for r in a.records] == [r.__dict__ for r in b.records]
    clear_kernel_cost_cache()


# ------------------------------------------------------------------------------------------------
# the graph IR's faster paths keep its behaviour


def test_attrs_freeze_values_as_before() -> None:
    from enum import Enum

    class Mode(Enum):
        FAST = "fast"

    a = Attrs({"k": [1, [2, 3]], "d": {"x": [4]}, 5: Mode.FAST, "s": "v", "b": True, "n": None})
    assert a == {"k": (1, (2, 3)), "d": {"x": (4,)}, "5": "fast", "s": "v", "b": True, "n": None}
    assert isinstance(a["d"], Attrs) and list(a) == ["k", "d", "5", "s", "b", "n"]
    assert Attrs(iter([("x", [1])])) == {"x": (1,)} and Attrs([("x", 1), ("x", 2)]) == {"x": 2}
    assert hash(Attrs({"a": 1, "b": 2})) == hash(Attrs({"b": 2, "a": 1}))
    with pytest.raises(TypeError, match="immutable"):
        a["k"] = 1


def test_graph_order_and_predecessors_without_networkx_until_asked() -> None:
    b = GraphBuilder("g", dtype="bf16")
    x = b.input("x", (4, 8))
    y = b.op("elementwise", [x], name="a", op="relu")
    z = b.op("elementwise", [y, x], name="b", op="add")
    b.op("elementwise", [z, y], name="c", op="mul")
    ops = list(b.ops)
    g = OpGraph("g", [ops[2], ops[0], ops[1]])  # not topological: sorted, insertion order kept where free
    assert [op.name for op in g] == ["a", "b", "c"]
    assert g.predecessors("c") == ["b", "a"] and g.predecessors("a") == []
    assert sorted(g.nx_graph.edges) == [("a", "b"), ("a", "c"), ("b", "c")]
    assert g.consumer_names("a") == ("c", "b") == tuple(op.name for op in g.consumers("a"))  # in the order given
    loop = dataclasses.replace(ops[0], inputs=(ops[0].outputs[0],))
    with pytest.raises(GraphError, match="consumes its own output"):
        OpGraph("loop", [loop])
    c1 = dataclasses.replace(ops[0], inputs=(ops[1].outputs[0],))
    with pytest.raises(GraphError, match="cycle through ops"):
        OpGraph("cycle", [c1, ops[1]])


def test_peak_activation_bytes_is_the_analysis_definition() -> None:
    from simulator.report.memory import peak_activation_bytes
    from workloads.analysis import peak_live_bytes

    graphs = [npf.load_workload("resnet50", train=True, batch=2), npf.load_workload("bert_base", train=True, batch=2),
              npf.load_workload("gpt2", phase="decode", context=64, batch=2),
              npf.load_workload("llama-2-7b", phase="prefill", seq=128),  # KV appends in place
              npf.load_workload("mixtral-8x7b", phase="prefill", seq=64), npf.load_workload("gnmt", batch=4),
              _plan_graph("gpt3-first"), _plan_graph("llama-fsdp-full")]
    for g in graphs:
        assert peak_activation_bytes(g) == peak_live_bytes(g) > 0, g.name
