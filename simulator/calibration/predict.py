"""Predicting a measured case: the run conditions a measurement states, its graph, and the engine call.

Both the calibrator and the published-set validation predict a measurement through
:func:`default_predict` under :func:`run_options`, so a row is always predicted the same way.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np

from hwmodels.spec import DeviceSpec, SystemSpec, replace_path
from simulator.calibration.measurements import Measurement

__all__ = ["gemm_epilogues", "gemv_generated", "timed_under_autocast", "static_amp_weight_casts", "timed_validation_step",
           "train_loader_stated",
           "attention_decomposed", "dropout_kernels", "qkv_unfused", "linear_bias_unfused",
           "head_transposes_stated", "fp32_mask_add", "grad_clip_stated", "amp_unscale_stated", "run_options",
           "uncached_program_run", "stored_scores_stated", "gelu_epilogue_stated", "serial_host_s",
           "graph_executor_stated", "graph_executor_host_s",
           "graph_launch_stated", "graph_launch_host_s", "stated_module_tree",
           "gated_mlp_unfused", "gemm_tactic_tokens", "default_predict", "GraphCache", "quiet_engine"]

_FUSED_STACKS = ("TensorRT", "torch.compile", "gpt-fast")
# Stacks that fuse elementwise epilogues into their GEMM kernels (TensorRT's layer fusion, TensorRT-LLM's
# GEMM plugins, DeepSpeed-Inference's fused GEMM + GeLU) and stacks whose GEMMs are cuBLAS calls with the
# bias / activation / norm in separate (often fused) kernels: torch.compile and gpt-fast (Inductor's extern
# mm), vLLM and SGLang (F.linear, then SiluAndMul / fused_add_rms_norm kernels), FasterTransformer
# (FfnLayer: cublas Gemm, then invokeGenericActivation), TGI (torch linear layers).
_EPILOGUE_STACKS = ("TensorRT", "DeepSpeed")
_LIBRARY_GEMM_STACKS = ("torch.compile", "gpt-fast", "vLLM", "SGLang", "FasterTransformer", "TGI",
                        "text-generation-inference")
_POWER_LIMIT = re.compile(r"power-limited to (\d+(?:\.\d+)?) W")
# Attention kernels named by a row's source or notes: FlashAttention-2 (warp-level mma.sync, softmax
# between the matmuls) versus the warp-specialised designs (FlashAttention-3 on Hopper,
# FlashAttention-4 on Blackwell, cuDNN fused attention).
_FLASH2 = re.compile(r"Flash2 |FlashAttention-2|flash_v2|flash_attn 2\.")
_FLASH3 = re.compile(r"Flash3 |FlashAttention-3|FlashAttention-4|cuDNN")
# Stacks that issue every op from eager PyTorch (host-bound at small sizes).
_EAGER = re.compile(r"Eager PyTorch")
# a row whose notes state that its kernels were launched one by one although the stack fuses (TensorRT-LLM's
# gptSessionBenchmark without --enable_cuda_graph)
_NO_GRAPHS = re.compile(r"\bno CUDA graphs\b")
# a row built with TensorRT-LLM's fp8 linear layers (v0.5 / v0.6.1 `--enable_fp8`, v0.9.0 checkpoint `quant_algo FP8`):
# their input scale is a calibrated constant (workloads.frameworks.TRTLLM_FP8_STATIC_SCALE), no per-token absmax
_FP8_STATIC_SCALE = re.compile(r"--enable_fp8\b|\bquant_algo FP8\b")
# a TensorRT-LLM row (framework column) whose notes state, in this sentence form (the v0.9.0 rows multi-137..157),
# that its engine's all-reduces ran TensorRT-LLM's custom all-reduce plugin (EvalOptions all_reduce_kernel
# "trtllm-custom": hwmodels.collectives.TRTLLM_CUSTOM_AR_RULE); the plugin named in any other sentence does not switch
_TRTLLM_CUSTOM_AR = re.compile(r"(?:^|\.\s+)All-reduces by the TensorRT-LLM custom all-reduce plugin \(AUTO strategy\):")
_TRTLLM_FRAMEWORK = re.compile(r"^\s*TensorRT-LLM\b")
#: TensorRT-LLM releases (framework column) whose generation phase runs the masked multi-head attention kernel, one
#: CTA per sequence and query head (EvalOptions.decode_attention "per-query-head"): v0.5 has no other generation kernel
#: (hwmodels.gpu.MASKED_MHA_SOURCE), and the grouped-query generation kernels came after v0.6
#: (TRTLLM_PRE_XQA_SOURCE); later releases keep the grouped read.
_TRTLLM_PRE_XQA = re.compile(r"^\s*TensorRT-LLM v0\.[56](?:\.\d+)*\b")
TRTLLM_PRE_XQA_SOURCE = (
    "NVIDIA/TensorRT-LLM docs/source/blogs/Falcon180B-H200.md @ 3c44cb974badec8966108b16054a99c0923e410d (2023-12-04): "
    "'TensorRT-LLM has improved its Group Query Attention (GQA) kernels, in the generation phase, providing up to 2.4x "
    "improvement on Llama-70B over TensorRT-LLM v0.5' (figure: 'TensorRT-LLM v0.7a vs TensorRT-LLM v0.6a', Llama2-70B, "
    "1xH200, FP8, BS 192); 'These improvements ... will be included in the v0.7 & v0.8 releases'. The v0.7.1 code "
    "gates them behind TRTLLM_ENABLE_XQA (cpp/tensorrt_llm/plugins/gptAttentionCommon/gptAttentionCommon.cpp "
    "initialize(), DecoderXQARunner; glqglq/TensorRT-LLM @ 8f352c074275d1e075733a3a79fb6e245b756d08, version 0.7.1)")
# a TensorRT-LLM engine built with the fp8 gemm plugin runs cuBLASLt without fast accumulation (the split accumulator,
# workloads.frameworks.TRTLLM_FP8_ACCUM_ENGINE): EvalOptions.fp8_accumulation = "split"; no row states it today
_TRTLLM_FP8_GEMM_PLUGIN = re.compile(r"--gemm_plugin[ =]fp8\b")
# a row whose notes state that it timed the kernels alone, as a profiler records them (OpenXLA's matmul table: CUPTI
# kernel-activity durations, "GPU kernel time only, no launch overhead"): EvalOptions.kernel_time_only
_KERNEL_TIME_ONLY = re.compile(r"\bGPU kernel time only\b")
# a row whose notes state that its convolutions ran on PyTorch's default NCHW tensors (EvalOptions.conv_layout)
_NCHW = re.compile(r"memory format NCHW", re.IGNORECASE)
# a row timed under torch.autocast: fp32 weights cast to the low precision (autocast_weight_casts)
_AUTOCAST = re.compile(r"\bautocast\b")
# a row whose notes state that its static program keeps fp32 weights and casts them to fp16 in every run:
# PaddlePaddle's O1 mixed precision (paddle.fluid.contrib.mixed_precision.fp16_utils.rewrite_program inserts, for
# each fp32 input of a white-list op such as matmul_v2, a cast op to a '<name>.cast_fp16' variable; the parameter
# itself stays fp32), so each forward pays one cast kernel per weight, as under torch.autocast
_STATIC_AMP_CASTS = re.compile(r"\bfp32 weights cast to fp16 in every run\b")
# a row whose notes state that its time is DeepLearningExamples' image-classification validation step, which also
# runs the loss, a top-1/top-5 accuracy and three .item() reads (workloads.frameworks.classification_validation_step)
_DLE_VALIDATION = re.compile(r"\bTimed step: DeepLearningExamples validate\(\)")
# a row whose notes state that its time holds DeepLearningExamples' training loader's GPU work (the batch's
# normalisation and mixup: workloads.frameworks.classification_train_loader)
_DLE_TRAIN_LOADER = re.compile(r"\bTimed step: DeepLearningExamples train\(\) with the loader's normalisation and "
                               r"mixup on the GPU\b")
# a row whose notes state that its stack ran attention as separate kernels over the full score tensors
# (matmul, mask add, softmax, dropout, matmul), e.g. PaddlePaddle's nn.MultiHeadAttention in a program run
# without the fuse_dot_product_attention build pass
_DECOMPOSED_ATTENTION = re.compile(r"\battention decomposed\b")
# a row whose notes state that its stack runs the model's dropout layers as kernels in every phase, at the
# probability they give: PaddlePaddle's static programs, whose dropout op draws a mask in training and, at test
# time with upscale_in_train, copies its input (cudaMemcpyAsync device to device, dropout_impl.cu.h)
_DROPOUT_KERNELS = re.compile(r"\bdropout kernels at p = (0\.\d+)\b")
# a row whose notes state that its engine ran the gated MLP's gate and up projections as two GEMMs (TensorRT-LLM
# v0.5 Llama engines built without --use_fused_mlp: workloads.frameworks.split_gated_mlp)
_UNFUSED_MLP = re.compile(r"\bgate and up projections as two GEMMs\b")
# a row whose notes state the token count its engine timed its GEMM tactics at (a TensorRT engine's optimisation
# profile opt shape: workloads.frameworks.gemm_tactics_at, TRTLLM_V05_TACTIC_PROFILE)
_TACTIC_TOKENS = re.compile(r"\bGEMM tactics timed at (\d+) tokens\b")
# a row whose notes state that its model code projects the query, key and value with three separate linear layers
# (PaddlePaddle's paddle.nn.MultiHeadAttention: q_proj, k_proj, v_proj; workloads.frameworks.split_qkv_projection)
_UNFUSED_QKV = re.compile(r"\bquery, key and value projections as three GEMMs\b")
# a row whose notes state that its program adds each linear layer's bias in a kernel of its own after the GEMM (a
# static PaddlePaddle program without the fuse_gemm_epilogue pass: workloads.frameworks.unfuse_linear_bias)
_BIAS_ADDS = re.compile(r"\blinear bias adds as separate kernels\b")
# a row whose notes state that its attention layers split and merge heads with transpose kernels (PaddlePaddle's
# MultiHeadAttention: transpose2 of q, k, v and of the output; workloads.frameworks.head_transposes)
_HEAD_TRANSPOSES = re.compile(r"\bhead split and merge as transpose kernels\b")
# a row whose notes state that its O1 mixed-precision program adds the attention mask to the scores in fp32 between
# two casts (PaddlePaddle's rewrite_program with an fp32 mask from the black set: workloads.frameworks.fp32_score_add)
_FP32_MASK_ADD = re.compile(r"\bmask add in fp32 between casts\b")
# a row whose notes state that its O1 mixed-precision program looks its embeddings up and sums them in fp32 before a cast
# to fp16 (PaddlePaddle's rewrite_program: lookup_table_v2 on the black list, layer_norm white through the program's
# custom white list: workloads.frameworks.o1_fp32_embeddings)
_O1_FP32_EMBEDDINGS = re.compile(r"\bembedding lookups and their sums in fp32\b")
# a row whose notes state that its training step clips the gradients by their global norm before the update
# (PaddlePaddle's ClipGradByGlobalNorm in a static program: workloads.frameworks.clip_grad_by_global_norm)
_GLOBAL_NORM_CLIP = re.compile(r"\bgradients clipped by their global norm\b")
# a row whose notes state that its mixed-precision step unscales every gradient and checks it for inf in a pass of
# its own (PaddlePaddle's check_finite_and_unscale: workloads.frameworks.amp_unscale_pass)
_AMP_UNSCALE = re.compile(r"\bgradients unscaled in one pass over all of them\b")

# a row whose notes state that its fused attention keeps the whole score matrix in memory between its forward and
# backward (PaddlePaddle's cuDNN fused_dot_product_self_attention: workloads.paddle_fmha.stored_score_attention)
_STORED_SCORES = re.compile(r"\bsoftmax stored between the fused attention kernels\b")
# a row whose notes state that its training program runs each GELU and its gradient in the epilogues of the GEMMs
# around it (PaddlePaddle's fuse_gemm_epilogue pass: workloads.paddle_epilogue.fold_gelu_into_gemms)
_GELU_EPILOGUE = re.compile(r"\bGELU and its gradient in the GEMM epilogues\b")
# a row whose notes state that its static program runs through PaddlePaddle's old Executor without the program cache,
# which clones the program and creates and runs every op anew in every call, before the first kernel
# (workloads.frameworks.paddle_uncached_run_s)
_UNCACHED_RUN = re.compile(r"\bprogram prepared again in every run\b")
# a row whose notes state that its static program runs as a graph compiled once whose ops one executor thread issues
# in program order, from a device idle after the previous step's fetch (PaddlePaddle's ParallelExecutor with
# num_threads = 1: simulator.calibration.predict.paddle_graph_executor_exposed_s)
_GRAPH_EXECUTOR = re.compile(r"\bops issued in program order by one executor thread\b")
# a row whose notes state that its timed loop calls the same op on the same tensors with nothing flushing L2 between
# the calls (a torch.mm loop over two fixed tensors): EvalOptions.warm_repeats
_WARM_REPEATS = re.compile(r"\bsame tensors with no L2 flush between calls\b")
# a row whose notes state that each timed iteration launches the engine's captured CUDA graph once after the start
# event on the idle stream, and the CUDA driver's launch form (workloads.frameworks.GRAPH_LAUNCH_FORMS): the launch's
# host time lies between the start event and the graph's first kernel (graph_launch_host_s)
# (the marker in any case, any value after it: an unknown form is a located error, never a silent miss)
_GRAPH_LAUNCH = re.compile(r"\bone cudaGraphLaunch of the engine per timed iteration, CUDA driver\s+([^\s,;()]*)", re.I)
# a row whose notes name the compiled tile-loop kernel its elementwise op ran (CUB's bulk-copy DeviceTransform at a
# stated cccl commit, hwmodels.tile_loop.TILE_LOOP_KERNELS): EvalOptions.streaming_kernel
# (the marker in any case, any cub-* name after it: an unknown kernel is a located error)
_TILE_LOOP_KERNEL = re.compile(r"\bkernel:\s*(cub-[^\s,;()]*)", re.I)

def attention_decomposed(text: str) -> bool:
    """True when ``text`` (a row's notes) says its attention ran decomposed (the graph is then built with
    ``attention="decomposed"``: :class:`GraphCache`)."""
    return bool(_DECOMPOSED_ATTENTION.search(text))


def dropout_kernels(text: str) -> float:
    """The dropout probability ``text`` (a row's notes) says its stack runs as kernels in every phase, else 0
    (the graph is then built with ``dropout=p``: :class:`GraphCache`)."""
    m = _DROPOUT_KERNELS.search(text)
    return float(m.group(1)) if m else 0.0


def gemm_tactic_tokens(text: str) -> int:
    """The token count ``text`` (a row's notes) says its engine timed its GEMM tactics at, else 0 (the graph's
    linear-layer GEMMs then run the kernel picked for that many rows: :func:`workloads.frameworks.gemm_tactics_at`,
    :class:`GraphCache`)."""
    m = _TACTIC_TOKENS.search(text)
    return int(m.group(1)) if m else 0


def gated_mlp_unfused(text: str) -> bool:
    """True when ``text`` (a row's notes) says its engine ran the gate and up projections as two GEMMs (the graph
    is then rewritten by :func:`workloads.frameworks.split_gated_mlp`: :class:`GraphCache`)."""
    return bool(_UNFUSED_MLP.search(text))


def qkv_unfused(text: str) -> bool:
    """True when ``text`` (a row's notes) says its model code runs the query, key and value projections as three
    GEMMs (the forward graph is then rewritten by :func:`workloads.frameworks.split_qkv_projection`, before a
    training step is derived from it: :class:`GraphCache`)."""
    return bool(_UNFUSED_QKV.search(text))


def linear_bias_unfused(text: str) -> bool:
    """True when ``text`` (a row's notes) says each linear layer's bias is added by a kernel of its own
    (:func:`workloads.frameworks.unfuse_linear_bias`: in :class:`GraphCache` before a training step is derived, and
    in :func:`default_predict` after the weight casts of an inference graph, so that a cast bias stays cast)."""
    return bool(_BIAS_ADDS.search(text))


def head_transposes_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its attention layers split and merge heads with transpose kernels
    (the forward graph is then rewritten by :func:`workloads.frameworks.head_transposes`: :class:`GraphCache`)."""
    return bool(_HEAD_TRANSPOSES.search(text))


def fp32_mask_add(text: str) -> bool:
    """True when ``text`` (a row's notes) says its program adds the attention mask in fp32 between two casts (an
    inference graph then gets :func:`workloads.frameworks.fp32_score_add` in :func:`default_predict`)."""
    return bool(_FP32_MASK_ADD.search(text))


def o1_fp32_embeddings_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its O1 program looks its embeddings up and sums them in fp32
    (:func:`workloads.frameworks.o1_fp32_embeddings`)."""
    return bool(_O1_FP32_EMBEDDINGS.search(text))


def grad_clip_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its training step clips the gradients by their global norm
    (:func:`workloads.frameworks.clip_grad_by_global_norm`)."""
    return bool(_GLOBAL_NORM_CLIP.search(text))


def amp_unscale_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its mixed-precision step unscales and checks every gradient in a pass
    of its own (:func:`workloads.frameworks.amp_unscale_pass`)."""
    return bool(_AMP_UNSCALE.search(text))


def stored_scores_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its fused attention stores the score matrix between its kernels (the
    graph's attention ops are then marked by :func:`workloads.paddle_fmha.stored_score_attention`:
    :class:`GraphCache`)."""
    return bool(_STORED_SCORES.search(text))


def gelu_epilogue_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its training program runs each GELU and its gradient in GEMM
    epilogues (the step is then rewritten by :func:`workloads.paddle_epilogue.fold_gelu_into_gemms`:
    :class:`GraphCache`)."""
    return bool(_GELU_EPILOGUE.search(text))


def uncached_program_run(text: str) -> bool:
    """True when ``text`` (a row's notes) says its program is prepared again in every run (PaddlePaddle's old
    ``Executor`` without the program cache: :func:`serial_host_s`)."""
    return bool(_UNCACHED_RUN.search(text))


def serial_host_s(graph: Any, measurement: Measurement) -> float:
    """Host time (s) of ``measurement``'s timed call outside the device model and serial with it, that its notes
    state: the uncached program run (:func:`workloads.frameworks.paddle_uncached_run_s`) over ``graph``, the graph
    as it is costed; 0 otherwise."""
    if not uncached_program_run(measurement.notes):
        return 0.0
    from workloads.frameworks import paddle_uncached_run_s

    return paddle_uncached_run_s(graph)


def graph_executor_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its compiled program's ops are issued in program order by one executor
    thread (PaddlePaddle's one-thread ParallelExecutor: :func:`graph_executor_host_s`)."""
    return bool(_GRAPH_EXECUTOR.search(text))


def graph_executor_host_s(report: Any, measurement: Measurement) -> float:
    """Host time (s) of ``measurement``'s step that its kernels do not hide, where its notes state a one-thread graph
    executor: :func:`paddle_graph_executor_exposed_s` over ``report``'s op records; 0 otherwise."""
    if not graph_executor_stated(measurement.notes):
        return 0.0
    return paddle_graph_executor_exposed_s(report.records)


def paddle_graph_executor_exposed_s(records: Any, per_op_s: float | None = None) -> float:
    """Host time (s) a one-thread ParallelExecutor step adds to its kernels' time: the step's ``records`` (op costs in
    program order: ``time_s``, ``kernels``) as one in-order stream that starts with the device idle (the previous
    step's fetch waited for it), each op issued ``per_op_s`` (default :data:`workloads.frameworks.PADDLE_GRAPH_EXECUTOR_S_PER_OP`) after the one before it, kernel or view
    (:func:`simulator.parallel.host_sync.interval_time`), less the records' own time; never below zero.

    >>> from types import SimpleNamespace as R
    >>> round(paddle_graph_executor_exposed_s([R(time_s=1e-3, kernels=1)] + [R(time_s=2e-6, kernels=1)] * 100,
    ...                                       16e-6) * 1e6, 1)  # 101 x 16 + 2 - (1000 + 100 x 2) us
    418.0
    """
    from simulator.parallel.host_sync import interval_time
    from workloads.frameworks import PADDLE_GRAPH_EXECUTOR_S_PER_OP

    if per_op_s is None:
        per_op_s = PADDLE_GRAPH_EXECUTOR_S_PER_OP
    own = float(sum(r.time_s for r in records))
    return max(0.0, interval_time([(per_op_s, float(r.time_s), int(r.kernels)) for r in records]) - own)


def _stated_choice(pattern: re.Pattern[str], text: str, choices: Any, what: str, where: str) -> str:
    """The value ``pattern``'s marker names in ``text`` (a row's notes; a sentence's closing full stop dropped), or
    ``""`` without the marker; a value not among ``choices`` is a located ValueError with a near match."""
    m = pattern.search(text)
    if m is None:
        return ""
    got = m.group(1).rstrip(".")
    if got not in choices:
        from nodeperf.suggest import did_you_mean

        raise ValueError(f"{where}: unknown {what}; got {got!r}; expected one of {', '.join(choices)}"
                         + did_you_mean(got.lower(), tuple(choices)))
    return got


def graph_launch_stated(text: str, where: str = "notes") -> str:
    """The CUDA driver's graph-launch form (a key of :data:`workloads.frameworks.GRAPH_LAUNCH_FORMS`) when ``text``
    (a row's notes) says each timed iteration launches the engine's captured graph once, else ``""``. The marker
    is matched in any case; a form not in the table is a located ValueError (``<where>: unknown ...``)."""
    from workloads.frameworks import GRAPH_LAUNCH_FORMS

    return _stated_choice(_GRAPH_LAUNCH, text, tuple(GRAPH_LAUNCH_FORMS), "CUDA driver graph-launch form", where)


def graph_launch_host_s(report: Any, measurement: Measurement, cuda_graphs: bool) -> float:
    """Host time (s) of the one ``cudaGraphLaunch`` a timed iteration of ``measurement`` holds, serial with the
    graph's kernels: :func:`workloads.frameworks.graph_launch_s` of the form its notes state
    (:func:`graph_launch_stated`) over the kernels of ``report`` (the engine as costed, one graph node each); 0 when
    the notes state none. Notes that state a launch of a run not costed as a graph replay (``cuda_graphs`` false)
    are a located ValueError."""
    where = f"{measurement.where or measurement.id}: notes"
    form = graph_launch_stated(measurement.notes, where)
    if not form:
        return 0.0
    if not cuda_graphs:
        raise ValueError(f"{where}: a cudaGraphLaunch per timed iteration; got a run costed without CUDA graphs (its "
                         "stack, or 'no CUDA graphs' in its notes); expected a stack that replays a captured graph")
    from workloads.frameworks import graph_launch_s

    return graph_launch_s(form, sum(r.kernels for r in report.records))


def stated_module_tree(graph: Any, measurement: Measurement, eager_modules: bool) -> Any:
    """``graph`` with the module calls of the model code ``measurement``'s notes name (``Module tree: <key>.``:
    :func:`workloads.frameworks.with_module_tree`) where the run counts module calls (``eager_modules``), else
    ``graph``. An unknown tree, or one that matches no op of ``graph``, is a located error (FrameworkError)."""
    from workloads.frameworks import module_tree_of, with_module_tree

    where = "notes"  # the validation prefixes the row's location
    tree = module_tree_of(measurement.notes, where)
    if tree is None or not eager_modules:
        return graph
    return with_module_tree(graph, tree, where)


def timed_validation_step(text: str) -> bool:
    """True when ``text`` (a row's notes) says its time is DeepLearningExamples' classification validation
    step (the graph then gets :func:`workloads.frameworks.classification_validation_step`)."""
    return bool(_DLE_VALIDATION.search(text))


def train_loader_stated(text: str) -> bool:
    """True when ``text`` (a row's notes) says its time holds DeepLearningExamples' training loader's GPU work
    (the training graph then gets :func:`workloads.frameworks.classification_train_loader`)."""
    return bool(_DLE_TRAIN_LOADER.search(text))


def timed_under_autocast(text: str) -> bool:
    """True when ``text`` (a row's source and notes) says the run was timed under ``torch.autocast``."""
    return bool(_AUTOCAST.search(text))


def static_amp_weight_casts(text: str) -> bool:
    """True when ``text`` (a row's notes) says its static program casts its fp32 weights to fp16 in every run
    (PaddlePaddle's O1 ``rewrite_program``; the inference graph then gets
    :func:`workloads.frameworks.autocast_weight_casts`)."""
    return bool(_STATIC_AMP_CASTS.search(text))


# Runs that set Inductor's coordinate_descent_tuning, under which a matmul with one row is decomposed into a
# generated product-and-sum kernel (pytorch-labs/gpt-fast generate.py line 25; pytorch/ao
# torchao/quantization/utils.py recommended_inductor_config_setter, called by torchao/_models/llama/generate.py)
_GEMV_STACKS = ("gpt-fast", "torchao")


def gemv_generated(text: str) -> bool:
    """True when ``text`` (a row's source, notes or framework version) names a run whose batch-1
    matrix-vector products are generated Inductor kernels (``EvalOptions.gemv_generated``)."""
    low = text.lower()
    return any(s in low for s in _GEMV_STACKS)


def gemm_epilogues(text: str) -> bool:
    """True unless ``text`` (a row's source and notes) names a stack that runs its GEMMs as library calls
    without fused epilogues (and no stack that fuses them): ``EvalOptions.epilogue_fusion``."""
    low = text.lower()
    if any(s.lower() in low for s in _EPILOGUE_STACKS):
        return True
    return not any(s.lower() in low for s in _LIBRARY_GEMM_STACKS)


def run_options(row: Mapping[str, str]) -> tuple[Any, dict[str, Any]]:
    """(EvalOptions, spec overrides by dotted path) implied by a measurement's stated run conditions.

    ``row`` needs ``source``, ``notes``, ``metric_reported`` and ``dtype`` (any may be empty; ``framework``, the
    multi-GPU rows' stack column, is optional: TensorRT-LLM's custom all-reduce needs it to name TensorRT-LLM): the
    software stack they name decides fusion, CUDA graphs, the attention kernel design, eager
    per-op costs, TF32, CUDA graphs (off where the notes say "no CUDA graphs"), the convolutions' memory format ("memory format NCHW" in the notes), a
    timed loop over the same tensors without an L2 flush ("same tensors with no L2 flush between calls"), kernel
    time as a profiler records it with no host launch ("GPU kernel time only"), a
    stated power limit and the compiled tile-loop kernel an elementwise benchmark ran ("Kernel:
    cub-ublkcp@<commit>:<functor>-<dtype>"). Both the published-set validation and the
    calibrator use it, so a measurement is always predicted under the same conditions.
    """
    from simulator.engines.analytical import EvalOptions

    text = f"{row.get('source', '')} {row.get('notes', '')}"
    fused = any(s in text for s in _FUSED_STACKS)
    # the metric column names the kernel of a comparison table (e.g. 'cuDNN fwd' vs 'Flash3 fwd')
    metric = row.get("metric_reported", "")
    kernel = "auto"
    for where in (metric, text):
        if _FLASH3.search(where):
            kernel = "flash3"
            break
        if _FLASH2.search(where):
            kernel = "flash2"
            break
    trtllm_ar = bool(_TRTLLM_FRAMEWORK.search(row.get("framework") or "")) and any(
        _TRTLLM_CUSTOM_AR.search(row.get(k) or "") for k in ("source", "notes"))
    opts = EvalOptions(fusion=fused, epilogue_fusion=gemm_epilogues(text), gemv_generated=gemv_generated(text),
                       cuda_graphs=fused and not _NO_GRAPHS.search(text),
                       allow_tf32=row.get("dtype") == "tf32",
                       attention_kernel=kernel, eager_framework=bool(_EAGER.search(text)),
                       eager_modules=bool(_EAGER.search(text)),
                       conv_layout="nchw" if _NCHW.search(text) else "nhwc",
                       fp8_activation_scale="static" if _FP8_STATIC_SCALE.search(text) else "dynamic",
                       all_reduce_kernel="trtllm-custom" if trtllm_ar else "nccl",
                       decode_attention="per-query-head" if _TRTLLM_PRE_XQA.search(row.get("framework") or "")
                       else "grouped",
                       fp8_accumulation="split" if _trtllm_fp8_plugin(row, text) else "fast",
                       warm_repeats=bool(_WARM_REPEATS.search(text)),
                       kernel_time_only=bool(_KERNEL_TIME_ONLY.search(text)),
                       streaming_kernel=_tile_loop_kernel(row.get("notes") or "",
                                                          f"{row['id']}: notes" if row.get("id") else "notes"))
    overrides: dict[str, Any] = {}
    m = _POWER_LIMIT.search(text)
    if m:
        overrides["power.tdp_w"] = float(m.group(1))
    return opts, overrides


def _tile_loop_kernel(notes: str, where: str = "notes") -> str:
    """The tile-loop kernel a row's notes name (``Kernel: cub-ublkcp@<commit>:<functor>-<dtype>``, the marker in any
    case), or ``""``; a ``cub-*`` name not in :data:`hwmodels.tile_loop.TILE_LOOP_KERNELS` is a located ValueError."""
    from hwmodels.tile_loop import TILE_LOOP_KERNELS

    return _stated_choice(_TILE_LOOP_KERNEL, notes, tuple(TILE_LOOP_KERNELS), "tile-loop kernel", where)


def _trtllm_fp8_plugin(row: Mapping[str, Any], text: str) -> bool:
    """Whether ``row`` is a TensorRT-LLM engine whose source or notes state ``--gemm_plugin fp8``."""
    return bool(_TRTLLM_FRAMEWORK.search(row.get("framework") or "")) and bool(_TRTLLM_FP8_GEMM_PLUGIN.search(text))


@contextmanager
def quiet_engine() -> Any:
    """Silence the engine's per-evaluation warnings while the optimiser calls it hundreds of times."""
    names = ("simulator.engines.analytical", "simulator.lowering")
    saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in names]
    for lg, _ in saved:
        lg.setLevel(logging.ERROR)
    with np.errstate(all="ignore"):
        try:
            yield
        finally:
            for lg, lvl in saved:
                lg.setLevel(lvl)


def default_predict(graph: Any, system: DeviceSpec | SystemSpec, measurement: Measurement | None = None) -> float:
    """Predicted latency (s) of ``graph`` on ``system`` by the analytical engine.

    With a ``measurement``, it runs under the conditions the measurement states (software stack,
    attention kernel, power limit: :func:`run_options`), plus the serial host time its notes state
    (:func:`serial_host_s`, :func:`graph_launch_host_s`) and the host issue time its kernels do not hide
    (:func:`graph_executor_host_s`).
    """
    import simulator.lowering.cpu  # noqa: F401 - registers the CPU rules
    from simulator.engines.analytical import evaluate

    opts = None
    if measurement is not None:
        opts, overrides = run_options({"id": measurement.where or measurement.id, "source": measurement.source,
                                       "notes": measurement.notes,
                                       "metric_reported": measurement.metric_reported, "dtype": measurement.dtype})
        for path, value in overrides.items():
            system = replace_path(system, path if isinstance(system, DeviceSpec) else f"device.{path}", value)
        eager_autocast = opts.eager_framework and timed_under_autocast(f"{measurement.source} {measurement.notes}")
        if not measurement.train and not graph.meta.get("autocast") \
                and (eager_autocast or static_amp_weight_casts(measurement.notes)):
            from workloads.frameworks import autocast_weight_casts

            graph = autocast_weight_casts(graph)
        if not measurement.train and o1_fp32_embeddings_stated(measurement.notes):
            from workloads.frameworks import o1_fp32_embeddings

            graph = o1_fp32_embeddings(graph)
        if not measurement.train and linear_bias_unfused(measurement.notes):
            from workloads.frameworks import unfuse_linear_bias

            graph = unfuse_linear_bias(graph)
        if not measurement.train and fp32_mask_add(measurement.notes):
            from workloads.frameworks import fp32_score_add

            graph = fp32_score_add(graph)
        if not measurement.train and timed_validation_step(measurement.notes):
            from workloads.frameworks import classification_validation_step

            graph = classification_validation_step(graph)
        graph = stated_module_tree(graph, measurement, opts.eager_modules)
    report = evaluate(graph, system, opts)
    host = 0.0 if measurement is None else \
        serial_host_s(graph, measurement) + graph_launch_host_s(report, measurement, opts.cuda_graphs) \
        + graph_executor_host_s(report, measurement)
    return float(report.totals.latency_s) + host


def _optimizer_passes(m: Measurement) -> tuple[bool, bool]:
    """(clip, unscale): the passes a training row's notes state its step runs beside the update."""
    return (bool(m.train) and grad_clip_stated(m.notes), bool(m.train) and amp_unscale_stated(m.notes))


def _with_optimizer_passes(graph: Any, passes: tuple[bool, bool]) -> Any:
    """``graph`` with the stated passes (:func:`_optimizer_passes`): the global-norm clip, the loss-scale unscale."""
    clip, unscale = passes
    if clip:
        from workloads.frameworks import clip_grad_by_global_norm

        graph = clip_grad_by_global_norm(graph)
    if unscale:
        from workloads.frameworks import amp_unscale_pass

        graph = amp_unscale_pass(graph)
    return graph


def _with_stored_scores(graph: Any, stored: tuple[bool, bool], m: Measurement) -> Any:
    """``graph`` with what ``m``'s notes state of PaddlePaddle's fused kernels: attention ops storing their score
    matrix (:func:`stored_scores_stated`) and, in a training step, each GELU and its gradient folded into GEMMs
    (:func:`gelu_epilogue_stated`); a graph without the ops is a located error."""
    scores, gelu = stored
    from workloads.paddle_epilogue import fold_gelu_into_gemms
    from workloads.paddle_fmha import stored_score_attention

    try:
        graph = stored_score_attention(graph) if scores else graph
        return fold_gelu_into_gemms(graph) if gelu else graph
    except ValueError as exc:
        raise ValueError(f"{m.where or m.id}: notes: {exc}") from None


class GraphCache:
    """Graphs of the measured cases, built once each (located errors on failure)."""

    def __init__(self) -> None:
        self.cache: dict[tuple[Any, ...], Any] = {}

    def get(self, m: Measurement) -> Any:
        decomposed = attention_decomposed(m.notes)
        dropout = dropout_kernels(m.notes)
        unfused_mlp = gated_mlp_unfused(m.notes)
        unfused_qkv = qkv_unfused(m.notes)
        bias_adds = bool(m.train) and linear_bias_unfused(m.notes)  # inference graphs: default_predict
        transposes = head_transposes_stated(m.notes)
        amp_casts = bool(m.train) and static_amp_weight_casts(m.notes)  # inference graphs: default_predict
        fp32_embed = bool(m.train) and o1_fp32_embeddings_stated(m.notes)  # inference graphs: default_predict
        passes = _optimizer_passes(m)
        stored = (stored_scores_stated(m.notes), bool(m.train) and gelu_epilogue_stated(m.notes))
        tactic_stated = not m.train and bool(_TACTIC_TOKENS.search(m.notes))  # a forward pass of the engine
        tactic_tokens = gemm_tactic_tokens(m.notes) if tactic_stated else 0
        loader = bool(m.train) and train_loader_stated(m.notes)
        key = (*m.case, decomposed, dropout, unfused_mlp, unfused_qkv, bias_adds, transposes, amp_casts, tactic_stated,
               tactic_tokens, passes, stored, loader, fp32_embed)
        if key not in self.cache:
            from workloads.resolve import load_workload

            extra: dict[str, Any] = {"attention": "decomposed"} if decomposed else {}
            if dropout:
                extra["dropout"] = dropout
            args = m.workload_args()
            train = (unfused_qkv or bias_adds or transposes or amp_casts or fp32_embed) and args.get("train")
            if train:  # split the forward graph, then derive the step from it
                args.update(train=False, phase="train")
            try:
                graph = load_workload(m.workload, **args, **extra)
            except (ValueError, KeyError, NotImplementedError, FileNotFoundError) as exc:
                msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
                raise type(exc)(f"{m.where or m.id}: workload: {msg}") from None
            if unfused_mlp:
                from workloads.frameworks import split_gated_mlp

                graph = split_gated_mlp(graph)
            if tactic_stated:
                from workloads.frameworks import gemm_tactics_at

                try:
                    graph = gemm_tactics_at(graph, tactic_tokens)
                except ValueError as exc:
                    raise ValueError(f"{m.where or m.id}: notes: {exc}") from None
            if unfused_qkv:
                from workloads.frameworks import split_qkv_projection

                graph = split_qkv_projection(graph)
            if bias_adds:
                from workloads.frameworks import unfuse_linear_bias

                graph = unfuse_linear_bias(graph)
            if transposes:
                from workloads.frameworks import head_transposes

                graph = head_transposes(graph)
            if amp_casts:  # the forward's casts; the step then casts each weight gradient back to fp32
                from workloads.frameworks import autocast_weight_casts

                graph = autocast_weight_casts(graph)
            if fp32_embed:  # O1's black lookups and the gray sums after them; the step derives from it
                from workloads.frameworks import o1_fp32_embeddings

                graph = o1_fp32_embeddings(graph)
            if train:
                from workloads.training import training_graph

                graph = training_graph(graph)
            graph = _with_stored_scores(_with_optimizer_passes(graph, passes), stored, m)
            if loader:
                from workloads.frameworks import classification_train_loader

                try:
                    graph = classification_train_loader(graph)
                except ValueError as exc:
                    raise ValueError(f"{m.where or m.id}: notes: {exc}") from None
            self.cache[key] = graph
        return self.cache[key]
