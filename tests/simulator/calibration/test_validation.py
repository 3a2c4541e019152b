"""Validation against published GPU measurements: every row is predicted and errors stay at the achieved level.

Nothing is fitted to these rows. The bounds below are the achieved figures (docs/accuracy.md)
rounded up, and the issue's targets hold: op-level MAPE <= 15% (achieved 11.0%) and end-to-end
<= 20% (achieved 15.6%); the residual errors are explained per category in docs/accuracy.md.
"""

from __future__ import annotations

import csv
import dataclasses
import logging

import numpy as np
import pytest

from simulator.calibration.predict import run_options
from simulator.calibration.validation import DEFAULT_DATASET, validate_published


@pytest.fixture(scope="module")
def summaries():
    logging.disable(logging.WARNING)
    try:
        return validate_published()
    finally:
        logging.disable(logging.NOTSET)


def test_every_row_is_predicted(summaries):
    with DEFAULT_DATASET.open(newline="") as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    assert summaries["all"].n == n_rows
    assert summaries["op-level"].n + summaries["end-to-end"].n == n_rows


# achieved MAPE per group (docs/accuracy.md), rounded up to the next half percent
ACHIEVED_MAPE = {  # percent (GEMM pipeline edges per round of tiles: docs/contraction_paths.md)
    "gemm": 12.5, "bandwidth": 9.0, "attention": 12.0, "op-level": 11.5,  # L4 GEMMs under DVFS (docs/dvfs.md)
    # (OpenXLA's CUPTI kernel times priced without the host launch floor, EvalOptions.kernel_time_only: gemm 11.4% ->
    # 12.3%, op level 10.7% -> 11.3%; the three table rows under 5 us, already fast, faster: pub-115 -3.8% -> -39.9%,
    # pub-116 -24.2% -> -39.4%, pub-132 -15.8% -> -27.1%; docs/accuracy.md "Kernel-time rows")
    # (a Hopper GEMM whose last wave leaves SMs idle at one SM's own L2 intake, efficiency.l2_tile_sm_port_ratio:
    # gemm 10.5% -> 11.4%, op level 10.2% -> 10.7%, the small H100 rows already fast faster; docs/accuracy.md "A
    # per-SM L2 intake for Hopper")
    # (the B200 streaming at a B200 measurement, 0.850 of 8 TB/s instead of the H100's MT4G 0.821: bandwidth
    # 8.2% -> 8.7%, pub-095 -26.8% -> -29.2%, pub-097 -12.2% -> -15.2%, pub-096 +2.8% -> -0.7%; the costs those
    # rows lack, an old CUB int8 tuning and the division functor, docs/accuracy.md "The B200's streaming rate")
    # (the L4's tensor and SIMT energies from its own 4096^3 GEMMs at 72 W, docs/dvfs.md: the 8192^3 row
    # -13.7% -> +9.1%, the 2048^3 rows, whose ~9 ms runs end before the limiter acts, +6..+9% -> +20..+35%;
    # gemm 10.8% -> 11.7%, op level 11.0% -> 11.5%; with the A100's cp.async tile rate below: gemm 12.1%,
    # op level 11.7%)
    # (every GPU kernel's measured device time, efficiency.kernel_device_time_s, takes gemm 12.8% -> 10.8%,
    # op level 12.3% -> 11.0%, end to end 17.1% -> 16.8%, all 13.9% -> 13.0%, bias -9.1% -> -7.4%; pub-094's
    # static KV cache of 205 positions, its context from gpt-fast's generate.py, takes Llama decode to 8.9%)
    # (the 14 hipBLASLt skinny GEMMs on MI300X, pub-149..162, 8.4% MAPE, take gemm 14.0% -> 12.8%: more rows,
    # not a model change; the fused-attention backward's preprocess and dQ-convert kernels take attention
    # 13.0% -> 12.1%; op level 13.2% -> 12.3%)
    # eager convolutions' cuDNN call time and the T4's SGEMM clock (docs/frameworks.md); the H100 fp8
    # prefill rows move 27.6% -> 28.2% with the burn-derived tensor energies (docs/energy.md); the L40S decode
    # rows 9.9% -> 10.3% with the Ada GDDR6 streaming figure measured on an L40; eager PyTorch's nn.Module
    # calls and autocast's weight casts take the T4 ResNet-50 rows to 15.9% (docs/frameworks.md); fusion
    # building kernels as compilers do (RoPE and SwiGLU in the fused QKV / gate-up GEMM epilogues of
    # TensorRT-LLM) makes the prefill rows, already fast, faster: 28.3% -> 29.6%, end-to-end 16.9% -> 17.1%
    # (TensorRT-LLM's gptSessionBenchmark enqueues its kernels without CUDA graphs: prefill 28.8% -> 27.0%,
    # decode 8.9% -> 8.3%, end to end 16.7% -> 16.4%; the L40S tensor energies derived from measured 4096^3
    # GEMMs at its 350 W limit, as the T4's: prefill 27.0% -> 23.9%, end to end 16.4% -> 16.1%; the TensorRT-LLM fp8
    # rows as the engine runs them, fp8 only in the GEMMs and the KV cache: prefill 23.9% -> 21.7%, decode 8.3% -> 8.6%,
    # end to end 16.1% -> 15.9%; decode attention streaming its K/V cache at the rate measured for TensorRT-LLM's
    # decode kernels, efficiency.decode_attention_*bandwidth_fraction: decode 8.6% -> 5.7%, end to end 15.9% -> 15.6%;
    # the B200's L2 at the rate its decode kernels were measured to stream through it: attention 12.1% -> 11.8%;
    # PaddlePaddle's BERT attention as its program runs it, decomposed where no fusion pass applies (TF32
    # fine-tuning, inference): pub-086 -16.5% -> +0.4%, pub-088 -57.7% -> -46.1%, pub-089 -74.1% -> -67.4%,
    # e2e_bert 16.2% -> 15.0%, end to end 15.6% -> 15.0%; the A100's L2 tile copies at the cp.async rate, 0.755
    # of 5120 B/clk instead of the plain-load 0.353: gemm 10.8% -> 11.2%, e2e_cnn 15.8% -> 17.6%, prefill
    # 21.7% -> 24.2%, end to end 13.7% -> 15.3%, the A100 rows already fast getting faster: costs the low
    # rate stood in for, docs/accuracy.md "The A100 at its cp.async tile rate"; PaddlePaddle's dropout layers as
    # the ops its static programs run, a mask kernel in training and a copy at test time: pub-086 -14.6% -> -8.0%,
    # pub-088 -54.5% -> -49.4%, pub-089 -73.0% -> -70.0%, e2e_bert 14.1% -> 13.5%, end to end 15.3% -> 14.98%;
    # TensorRT-LLM v0.5's Llama engines run the gate and up projections as two GEMMs (built without
    # --use_fused_mlp): prefill 24.2% -> 22.8%, decode 5.5% -> 5.8%, end to end 14.98% -> 14.86%;
    # DeepLearningExamples' validation step timed as its code runs it, the loss, top-1/top-5 accuracy and three
    # .item() reads after the network (and autocast's cast of the loader's fp32 images): e2e_cnn 17.6% -> 17.1%,
    # end to end 14.98% -> 14.8%; a training batch norm reading its operands twice, the reduction pass first:
    # pub-058 -40.1% -> -32.1%, pub-059 -20.6% -> -10.3%, e2e_cnn 17.1% -> 16.0%, end to end 14.8% -> 14.5%;
    # PaddlePaddle's BERT programs as they run: O1 weight casts, three q/k/v GEMMs, bias adds apart, head
    # transposes, the O1 mask add in fp32: pub-086 -8.0% -> +0.9%, pub-087 -46.7% -> -45.5%, pub-088 -49.4% ->
    # -39.3%, pub-089 -70.0% -> -54.8%, e2e_bert 13.7% -> 12.5%, end to end 14.45% -> 13.85%;
    # TensorRT-LLM v0.5's first-token GEMMs run the tactics timed at the context profile's 65536 rows: prefill
    # 22.6% -> 13.1%, end to end 13.9% -> 12.8%; cuDNN's layout transforms around TF32 convolutions on NCHW
    # tensors (or its FFMA kernels on NCHW where faster): pub-058 -32.1% -> -3.1%, e2e_cnn 16.0% -> 14.2%;
    # the GEMM kernel chosen by its time under the board's power limit, hwmodels.gpu.GemmPower, and the
    # burn-derived tensor energies re-derived with it: gemm 11.9% -> 10.5%, op level 11.4% -> 10.5%, the A100
    # PCIe 40GB / L4 GEMM rows 20.1% / 22.5% -> 7.0% / 15.1%, rows already fast on capped A100/T4 boards a little
    # faster: e2e_bert 12.5% -> 12.8%, prefill 13.1% -> 13.7%, end to end 12.3% -> 12.5%, docs/accuracy.md
    # "GEMMs on power-limited boards"; PaddlePaddle's old Executor run without its program cache, 57.0 us per op of
    # the program from PR #18483's A/B, serial before the first kernel: pub-088 -41.5% -> -23.3%, pub-089 -54.9% ->
    # -23.4%, e2e_bert 12.7% -> 10.9%, end to end 12.5% -> 11.6%, docs/accuracy.md "PaddlePaddle's uncached
    # program run"; PaddlePaddle's cuDNN fused attention storing its scores and its fuse_gemm_epilogue pass folding
    # the GELU and its gradient into GEMMs, pub-087 -42.9% -> -44.7%: e2e_bert 10.96% -> 11.02% on its branch,
    # docs/accuracy.md "PaddlePaddle's cuDNN fused attention keeps its scores in memory"; merged with the demoBERT
    # graph launch, e2e_bert is 10.8%; the A100's DRAM at the stream triad of gpu-stream, 0.873, instead of MT4G's
    # read kernel, 0.758: e2e_bert 10.9% -> 11.4%, e2e_cnn 14.1% -> 15.2%, e2e_llama_decode 5.7% -> 7.1%, end to end
    # 11.5% -> 12.3%, A100 rows already fast getting faster: costs the low rate stood in for, docs/accuracy.md
    # "The A100 streaming figure: gpu-stream's triad, and the costs 0.758 stood in for"; cuBLAS's skinny GEMMs, up
    # to 64 rows, at the library's measured GEMV rate: pub-112 (TensorRT-LLM decode at batch 60) +1.2% -> +5.6%,
    # e2e_llama_decode 7.1% -> 7.9%; the A100's tensor-core convolutions at efficiency.conv_rate_fraction 0.903,
    # the median of cuDNN's measured 3-D kernels against the model: e2e_cnn 15.2% -> 15.0%)
    "e2e_bert": 11.5, "e2e_cnn": 15.1, "e2e_llama_decode": 8.0, "e2e_llama_prefill": 14.0,
    "end-to-end": 12.5,
}


@pytest.mark.parametrize("group", sorted(ACHIEVED_MAPE))
def test_errors_stay_at_the_achieved_level(summaries, group):
    assert summaries[group].mape <= ACHIEVED_MAPE[group]


def test_issue_accuracy_targets_without_fitting(summaries):
    # the GPU issue's targets, on the catalog's sourced factors as shipped (nothing fitted)
    assert summaries["op-level"].mape <= 15.0
    assert summaries["end-to-end"].mape <= 20.0
    # the fidelity issue's op-level (<= 12%) and end-to-end (<= 15%) targets and its bias band (within +-8%)
    # over all rows
    assert summaries["op-level"].mape <= 12.0
    assert abs(summaries["all"].bias) <= 8.0


def test_fidelity_end_to_end_target(summaries):
    # 14.98%: met again, just, once PaddlePaddle's dropout ops are priced (15.3% since the A100's cp.async tile
    # rate); the unpriced host time of the PaddlePaddle and TensorRT-LLM timers is what remains
    # (docs/accuracy.md, "What the end-to-end timings cover")
    assert summaries["end-to-end"].mape <= 15.0


def test_run_options_follow_the_stated_software_stack():
    with DEFAULT_DATASET.open(newline="") as fh:
        rows = {r["id"]: r for r in csv.DictReader(fh)}
    kernel = {i: run_options(rows[i])[0].attention_kernel for i in ("pub-012", "pub-024", "pub-030", "pub-034", "pub-035")}
    # FlashAttention-2 (issue #1589, tritonbench flash_v2) vs FlashAttention-4, FlashAttention-3 and cuDNN
    assert kernel == {"pub-012": "flash2", "pub-024": "flash2", "pub-030": "flash3", "pub-034": "flash3",
                      "pub-035": "flash3"}
    eager, _ = run_options(rows["pub-046"])  # DeepLearningExamples eager PyTorch ResNet-50
    assert eager.eager_framework and not eager.fusion
    trt, _ = run_options(rows["pub-062"])  # TensorRT demoBERT engine
    assert trt.fusion and trt.cuda_graphs and not trt.eager_framework
    # TensorRT-LLM's gptSessionBenchmark: fused engine, kernels enqueued without CUDA graphs (the rows say so)
    for i in ("pub-090", "pub-093", "pub-108", "pub-114"):
        trtllm, _ = run_options(rows[i])
        assert trtllm.fusion and not trtllm.cuda_graphs and not trtllm.eager_framework, i
    # the convolutions' memory format, as DeepLearningExamples' configs.yml sets it per precision
    assert run_options(rows["pub-058"])[0].conv_layout == "nchw"  # TF32: default contiguous tensors
    assert run_options(rows["pub-059"])[0].conv_layout == "nhwc"  # AMP: memory_format nhwc
    _, overrides = run_options(rows["pub-094"])  # gpt-fast run power-limited to 330 W
    assert overrides == {"power.tdp_w": 330.0}


def test_summary_statistics_by_hand():
    from simulator.calibration import summarize_errors
    from simulator.calibration.measurements import Measurement, MeasurementSet

    ms = MeasurementSet(tuple(Measurement(f"r{i}", "gemm:m=1,n=1,k=1", "t4", "fp16", 1.0, category="gemm")
                              for i in range(4)), "by-hand")
    s = summarize_errors(np.array([1.1, 0.8, 1.0, 1.5]), ms, worst=2)
    assert s.n == 4
    assert s.mape == pytest.approx(100 * (0.1 + 0.2 + 0.0 + 0.5) / 4)
    assert s.bias == pytest.approx(100 * ((1.1 * 0.8 * 1.0 * 1.5) ** 0.25 - 1))  # geometric mean ratio - 1
    assert s.max_ape == pytest.approx(50.0) and s.median_ape == pytest.approx(15.0)
    assert [w[0] for w in s.worst] == ["r3", "r1"]


def test_mi300x_skinny_gemms_follow_the_weight_stream():
    # hipBLASLt's own skinny fp16 GEMMs on MI300X (ROCm/rocm-libraries PR #12329, M = 1): the weight stream
    # sets the time, so the large matrices (0.47-2.0 GB) are within 9.5%; the smallest (90-237 MB) run
    # 9-16% slower than the model predicts: the PR's times carry a fixed cost of roughly 10-14 us per call
    # (the line through its 1.0 and 2.0 GB rows is 14 us + bytes / 4.19 TB/s), of which the model carries
    # the 3.865 us of device time per HIP dispatch (efficiency.kernel_device_time_s; 15-28% before it)
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict

    ms = MeasurementSet.load(DEFAULT_DATASET)
    dev = load_device("mi300x")
    graphs = GraphCache()
    err = {}
    for m in ms:
        if m.device == "mi300x" and m.workload.startswith("gemm:m=1,"):
            err[m.id] = 100.0 * (default_predict(graphs.get(m), dev, m) - m.median_s) / m.median_s
    assert len(err) == 14
    big = [e for i, e in err.items() if int(i[4:]) in (149, 150, 151, 152, 153, 154, 155, 162)]
    small = [err[i] for i in ("pub-157", "pub-158", "pub-159", "pub-160", "pub-161")]
    assert max(abs(e) for e in big) < 9.5
    assert all(-17.0 < e < -9.0 for e in small)
    assert np.mean(np.abs(list(err.values()))) < 6.5


def test_rows_whose_notes_state_dropout_kernels_pay_their_traffic():
    # PaddlePaddle's static BERT programs run every dropout layer as an op (DeepLearningExamples modeling.py:
    # embeddings, attention probabilities, attention output, MLP output, p = 0.1), a device-to-device copy at
    # test time (dropout_impl.cu.h). pub-089 (fp16, 32 x 384): 24 copies of the 32 x 16 x 384 x 384 scores,
    # 48 of the 32 x 384 x 1024 activations and the embeddings' one, each read and written once
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict, dropout_kernels
    from simulator.hardware import known_devices

    ms = {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}
    assert sorted(i for i, m in ms.items() if dropout_kernels(m.notes)) == ["pub-086", "pub-087", "pub-088", "pub-089"]
    assert {dropout_kernels(ms[i].notes) for i in ("pub-086", "pub-089")} == {0.1}
    # device time only: the uncached program run's host time per op (serial_host_s) left out of both
    m = dataclasses.replace(ms["pub-089"], notes=ms["pub-089"].notes.replace("program prepared again in every run", ""))
    plain = dataclasses.replace(m, notes=m.notes.replace("dropout kernels at p", "dropout at p"))
    graphs, dev = GraphCache(), load_device(m.device)
    with_drop, without = default_predict(graphs.get(m), dev, m), default_predict(graphs.get(plain), dev, plain)
    act, scores = 32 * 384 * 1024 * 2, 32 * 16 * 384 * 384 * 2
    moved = 2 * (24 * scores + 49 * act)  # bytes read and written
    hbm = 2039e9  # A100 80GB SXM HBM2e, the catalog's datasheet figure
    assert moved / hbm < with_drop - without < 2 * moved / hbm  # at most half the peak rate, launches included


def test_rows_whose_notes_state_static_amp_casts_pay_one_cast_per_weight():
    # run_squad.py's AMP inference rewrites its program with PaddlePaddle's O1 rewrite_program: every fp32 input of
    # a white-list op gets a cast op and the parameters stay fp32, so each step casts BERT-Large's linear weights
    # and biases: 24 x (3 x 1024^2 + 1024^2 + 2 x 1024 x 4096 + 3 x 1024 + 1024 + 4096 + 1024) + 1024^2 + 1024 (the
    # graph's 1024 x 1024 dense after the encoder) = 303,260,672 elements, 4 bytes read and 2 written each, in
    # 24 x 12 + 2 = 290 cast kernels (q, k, v, out, up, down weights and biases); the TF32 rows run no casts
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict, static_amp_weight_casts
    from simulator.hardware import known_devices
    from workloads.frameworks import autocast_weight_casts

    ms = {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}
    assert [i for i, m in ms.items() if static_amp_weight_casts(m.notes)] == ["pub-087", "pub-089"]
    # device time only: the uncached program run's host time per op (serial_host_s) left out of both
    m = dataclasses.replace(ms["pub-089"], notes=ms["pub-089"].notes.replace("program prepared again in every run", ""))
    plain = dataclasses.replace(m, notes=m.notes.replace("fp32 weights cast to fp16 in every run", ""))
    graphs, dev = GraphCache(), load_device(m.device)
    delta = default_predict(graphs.get(m), dev, m) - default_predict(graphs.get(plain), dev, plain)
    moved = 303_260_672 * (4 + 2)
    hbm = 2039e9  # A100 80GB SXM HBM2e, the catalog's datasheet figure
    casts = sum(op.attrs.get("op") == "cast" for op in autocast_weight_casts(graphs.get(m)).ops)
    assert casts == 290
    launch = 5e-6  # efficiency.launch_overhead_s, the per-kernel floor of a stack without CUDA graphs
    assert moved / hbm < delta < moved / hbm + casts * launch


def test_amp_fine_tuning_step_casts_weights_forward_and_their_gradients_back():
    # fleet's AMP decorator without use_pure_fp16 runs the same O1 rewrite on the training program (pub-087): one
    # cast per weight in the forward (fused QKV, out, up, down and their biases per layer, the dense and the
    # classifier: 24 x 8 + 4 = 196) and, in the backward, each weight gradient cast back to the fp32 parameter
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache
    from simulator.hardware import known_devices

    m = {x.id: x for x in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}["pub-087"]
    g = GraphCache().get(m)
    casts = [op for op in g.ops if op.attrs.get("op") == "cast" and "/autocast" in op.name]
    back = [op for op in casts if op.name.endswith(".bwd")]
    assert len(casts) == 2 * 196 and len(back) == 196
    assert {(op.inputs[0].dtype.value, op.outputs[0].dtype.value) for op in back} == {("fp16", "fp32")}
    # the cast elements: the encoder's and the dense's 303,260,672 and the classifier's 1024 x 2 + 2
    linear = sum(op.inputs[0].numel for op in casts if not op.name.endswith(".bwd"))
    assert linear == 303_260_672 + 1024 * 2 + 2


def test_rows_whose_notes_state_decomposed_attention_get_the_decomposed_graph():
    # PaddlePaddle's BERT (DeepLearningExamples modeling.py: paddle.nn.TransformerEncoderLayer, self.fuse =
    # False) runs attention as matmul, mask add, softmax (dropout) and matmul unless the fuse_dot_product_attention
    # build pass applies: only its AMP fine-tuning step sets it; the TF32 step and inference (a plain
    # Executor.run of the cloned program) keep the decomposed ops
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, attention_decomposed
    from simulator.hardware import known_devices

    ms = {m.id: m for m in MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())}
    assert sorted(i for i, m in ms.items() if attention_decomposed(m.notes)) == ["pub-086", "pub-088", "pub-089"]
    graphs = GraphCache()
    kinds = {i: {op.kind for op in graphs.get(ms[i])} for i in ("pub-086", "pub-087", "pub-088")}
    assert "attention" not in kinds["pub-088"] and "softmax" in kinds["pub-088"]
    assert "attention" in kinds["pub-087"]  # AMP fine-tuning: the fusion pass
    # the same case with and without the statement are two graphs in the cache, not one
    plain = dataclasses.replace(ms["pub-088"], notes="")
    assert "attention" in {op.kind for op in graphs.get(plain)}
