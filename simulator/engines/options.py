"""Options of an evaluation (:class:`EvalOptions`), shared by the analytical walk, the vectorised
walk over hardware variants and the discrete-event engine, and recorded in every report's provenance."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["EvalOptions", "ALL_REDUCE_KERNELS", "CONV_LAYOUTS", "DECODE_ATTENTIONS", "SETTINGS", "SETTING_ALIASES", "Setting",
           "options_from_settings"]


@dataclass(frozen=True)
class EvalOptions:
    """Options of an evaluation (they are recorded in the report's provenance).

    Attributes
    ----------
    fusion
        None (default): fuse on TPUs, whose XLA compiler always fuses, and not on GPUs/CPUs (eager
        frameworks launch one kernel per op). True/False force it. Ops join the kernel being built
        as compilers such as torch.compile or XLA build them (:class:`FusionGroup`): an elementwise
        op that reads a tensor the kernel made, and in generated kernels also reductions,
        concatenations and ops sharing a read with it; fused ops cost the traffic of what the kernel
        does not hold yet and their vector work, and no launch.
    epilogue_fusion
        With fusion: elementwise ops may also fuse into a contraction's epilogue (GEMM, convolution,
        attention: TensorRT, XLA, Inductor's Triton GEMM templates under ``max-autotune``). False:
        they fuse only into generated pointwise / reduction kernels, and a contraction's output is
        read back by a separate kernel, as torch.compile's default and ``reduce-overhead`` modes run
        (cuBLAS / cuDNN / SDPA called as extern kernels, :data:`LIBRARY_KERNEL_KINDS`).
    gemv_generated
        With fusion: a matrix-vector product (a matmul with one row, :func:`is_gemv`) is a generated
        reduction kernel, not a library call, so it takes fused epilogues whatever
        ``epilogue_fusion`` says: Inductor decomposes ``mm`` with one row into a product and a sum
        when ``coordinate_descent_tuning`` is on (``torch/_inductor/decomposition.py`` ``mm``), as
        gpt-fast's and torchao's ``generate.py`` set it for batch-1 decoding.
    norm_fusion
        With fusion: a layer norm, RMS norm or softmax (a reduction kernel of the compiler's own) joins the
        generated kernel that made its input, as a reduction does (:data:`simulator.engines.walk.NORM_KINDS`):
        Inductor lowers them to reductions and pointwise ops and fuses a pointwise producer into the
        reduction that reads it (``torch/_inductor/codegen/triton.py`` ``TritonScheduling.can_fuse``:
        ``numel1 == numel2 * rnumel2``), so a residual add and the norm after it, or attention's score
        scale and its softmax, are one kernel. Off: such an op launches a kernel of its own.
    cuda_graphs
        Kernels are replayed from a captured CUDA graph: the per-kernel floor is
        ``efficiency.graph_launch_overhead_s`` instead of ``efficiency.launch_overhead_s``.
    power_cap
        Stretch ops whose average power would exceed the TDP (and say so in the report).
    allow_tf32
        fp32 contractions use the TF32 tensor path (PyTorch ``allow_tf32``); otherwise SIMT FP32.
    l2_residency
        Inputs just written by the previous kernel and no larger than L2 are read from L2.
    warm_repeats
        The timed work is the graph run back to back on the same tensors with nothing flushing L2 between
        runs (a benchmark loop such as ``for _ in range(30): torch.mm(a, b)``): where all the graph's tensors
        fit in L2 together (:func:`simulator.engines.walk.working_set_bytes`, the whole capacity assumed
        usable), every op reads its inputs from L2: streaming ops through their L2 bytes and plain matmuls
        through :attr:`hwmodels.gpu.GemmLaunch.resident_bytes`; convolutions, grouped, quantised and recurrent
        contractions and attention keep their DRAM operands (no row needs them yet); writes are still priced to
        DRAM. Needs ``l2_residency``. Off (default): one cold run.
    kernel_time_only
        The timed quantity is the kernels' own device time as a profiler records it (CUPTI kernel-activity
        durations, XLA's ``matmul_perf_table_gen``), which no host launch enters: every op costs its device
        time (its modelled work plus ``efficiency.kernel_device_time_s`` per kernel) with no host launch floor
        (``launch_overhead_s``, ``graph_launch_overhead_s``, the eager framework's per-op time). Off (default):
        the host's launch rate floors every kernel.
    streaming_kernel
        ``""`` (default): elementwise ops stream at the device's streaming rate. A name from
        :data:`hwmodels.tile_loop.TILE_LOOP_KERNELS`: every elementwise op runs that compiled tile-loop kernel
        (CUB's bulk-copy ``cub::DeviceTransform``), no faster than its tiles in flight and its instruction issue
        allow (:func:`hwmodels.tile_loop.tile_loop_time`); set by a measurement that states the kernel. An op of
        another dtype or functor than the kernel's, or a device of another compute capability, is a located error.
    attention_kernel
        Fused-attention kernel design: ``"auto"`` (the best the architecture supports),
        ``"flash2"`` (FlashAttention-2 style: warp-level ``mma.sync``, softmax serialised with the
        matmuls), ``"flash3"`` (warp-specialised, softmax overlapped with asynchronous matmuls:
        FlashAttention-3/4, cuDNN) or ``"trtllm-fmha"`` (TensorRT-LLM's own context-phase kernels: the
        ``"auto"`` design's estimate, a prompt's self-attention held at least at the device's measured
        ``efficiency.context_fmha_tensor_fraction`` of the 16-bit tensor peak). See :func:`hwmodels.gpu.attention`.
    eager_framework
        Ops are issued one by one by an eager framework (PyTorch eager): every op, fused or not,
        takes at least ``efficiency.framework_op_overhead_s`` of host time, so small ops are
        bound by the host rather than the GPU.
    eager_modules
        With ``eager_framework``: the ops are issued from ``nn.Module`` objects (eager PyTorch /
        Hugging Face, not a compiled program), so an op issued by a module holding parameters adds
        ``efficiency.framework_module_call_s`` to its host time and the first op of every container
        module (read from the graph's dotted op names, :func:`module_call_counts`) adds
        ``efficiency.framework_container_call_s`` per container entered.
    conv_layout
        Memory format of a convolution's activations: ``"nhwc"`` (default: channels last, what
        TensorRT, XLA/TensorFlow, DeepLearningExamples' AMP configurations and Inductor's layout
        optimisation give cuDNN) or ``"nchw"`` (PyTorch's default contiguous format). cuDNN's
        tensor-core convolutions are NHWC kernels: on an NCHW tensor they run between layout
        transforms of their operands and result (:data:`CONV_LAYOUTS`, ``simulator.lowering.gpu``).
    all_reduce_kernel
        Who runs a tensor-parallel all-reduce inside one node: ``"nccl"`` (the library's tuner over the fabric
        model, :func:`hwmodels.collectives.select_algorithm`) or a serving engine's own kernel
        (:data:`ALL_REDUCE_KERNELS`: ``"vllm-custom"``, vLLM's custom all-reduce, which SGLang also runs;
        ``"trtllm-custom"``, TensorRT-LLM's custom all-reduce plugin as its 0.9-era engines run it;
        ``"vllm-custom-2024"``, vLLM's kernel as builds before vLLM PR #8558 ship it: vLLM 0.5-0.6.1, SGLang 0.3) for the
        messages it takes where a published table covers the fabric (:func:`hwmodels.collectives.engine_all_reduce`;
        NCCL otherwise).
    decode_attention
        How a decode step's attention kernel reads a grouped K/V cache (:data:`DECODE_ATTENTIONS`):
        ``"grouped"`` (default: one CTA, or one split, per KV head reads its K/V once for the whole group of
        query heads, as flash-decoding, paged decode kernels and TensorRT-LLM's XQA do) or ``"per-query-head"``
        (a masked multi-head attention kernel: one CTA per sequence and query head, every CTA of a group reading
        the group's K/V, the products on the CUDA cores: TensorRT-LLM's generation kernel before its
        grouped-query kernels; :func:`hwmodels.gpu.masked_mha_decode`).

    fp8_activation_scale
        How an fp8 (W8A8) linear layer scales its 16-bit input before the fp8 GEMM: ``"dynamic"``
        (default: a per-token absmax reduction computes the scale, then the cast, as vLLM's and
        torchao's dynamic fp8 run it) or ``"static"`` (a scale calibrated offline: the cast only,
        as TensorRT-LLM's ``FP8Linear`` quantises its input with ``activation_scaling_factor``,
        ``tensorrt_llm/quantization/layers.py``; :data:`FP8_ACTIVATION_SCALES`).
    fp8_accumulation
        How the fp8 GEMMs that the training recipe does not mark (``attrs['fp8_accumulation']``, e.g. the forward
        GEMMs of an fp8 graph and W8A8 linears) accumulate: ``"fast"`` (default: the WGMMA accumulator only,
        cuBLASLt ``CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1``) or ``"split"`` (``FAST_ACCUM = 0``: partial sums promoted
        to FP32 every ``efficiency.fp8_promotion_interval`` K elements, priced by
        :func:`simulator.lowering.gpu.fp8_promotion`). A stack's value is
        :attr:`workloads.frameworks.FrameworkProfile.fp8_gemm_accumulation` (not stated: fast). Priced on the
        architectures of :data:`FP8_PROMOTION_ARCHS` only (Hopper, where the limited accumulator is measured,
        DeepSeek-V3 s.3.3.2); elsewhere ``"split"`` is ignored and the GEMM's notes say so (:data:`FP8_ACCUMULATIONS`).
    splash_blocks
        Block sizes of the Pallas splash-attention kernel on TPUs, as a MaxText workload sets them:
        (``sa_block_q``, ``sa_block_kv``, ``sa_block_q_dkv``, ``sa_block_kv_dkv``, ``sa_block_q_dq``,
        ``sa_block_kv_dq``); a causal mask is priced over the whole (query block, key block) tiles each kernel
        runs (:func:`simulator.lowering.tpu.splash_blocks`). Empty (default): 512 each, MaxText's ``base.yml``.
    fused_moe_configs
        The tuned kernel configs of vLLM's Triton ``fused_moe_kernel`` the stack ships, ``(local experts, N,
        device)`` (:attr:`workloads.frameworks.FrameworkProfile.fused_moe_configs`): a 16-bit expert GEMM of
        another ``(E, N)`` or device runs ``get_default_config``'s tile
        (:func:`simulator.lowering.gpu.fused_moe_kernel`). Empty (default): every expert GEMM's tile is searched.
    splash_fused_bwd
        The splash backward runs as one kernel over the dkv blocks (``sa_use_fused_bwd_kernel: True``, 5 GEMMs)
        instead of the dkv and dq kernels (7 GEMMs, MaxText's default).
    tpu_flash_2023
        On TPUs, attention runs as the 2023 Pallas ``flash_attention`` kernel (jax/experimental/pallas/ops/tpu/
        flash_attention.py; MaxText's ``attention: flash`` before splash attention, ``layers/attentions.py`` @
        76bd53b0f) rather than splash: its backward materialises the forward's row statistics broadcast across
        lanes for its two kernels (:func:`simulator.lowering.tpu.flash_row_stats_bytes`).
    tpu_segment_ids
        On TPUs, every attention kernel is given segment ids and masks each score by them (MaxText passes
        ``decoder_segment_ids``, the batch's ``inputs_segmentation``, to every attention call:
        :func:`simulator.lowering.tpu.mask_vector_ops`).
    embedding_onehot
        On TPUs, a token embedding is a one-hot ``[tokens, vocab]`` matrix times the table on the MXUs and its
        backward the transposed product (MaxText's ``use_iota_embed: True``: ``jnp.dot(one_hot, embedding)`` in
        ``layers/embeddings.py``) instead of a row gather and a scatter-add (the default).
    calibration_id
        Identifier of the calibration overlay applied to the spec, if any (recorded only).
    plan
        A :class:`workloads.parallel.ParallelPlan`: the graph's model (a zoo transformer or a
        Hugging Face config, named in its ``meta``) is split over the system's devices and the
        report is the whole step. :func:`simulator.evaluate` routes such options to
        :func:`simulator.parallel.evaluate_graph_with_plan`; the engines themselves refuse a plan.
    """

    fusion: bool | None = None
    epilogue_fusion: bool = True
    gemv_generated: bool = False
    norm_fusion: bool = False
    cuda_graphs: bool = False
    power_cap: bool = True
    allow_tf32: bool = False
    l2_residency: bool = True
    warm_repeats: bool = False
    attention_kernel: str = "auto"
    eager_framework: bool = False
    eager_modules: bool = False
    conv_layout: str = "nhwc"
    all_reduce_kernel: str = "nccl"
    decode_attention: str = "grouped"
    streaming_kernel: str = ""
    kernel_time_only: bool = False

    fp8_activation_scale: str = "dynamic"
    fp8_accumulation: str = "fast"
    splash_blocks: tuple[int, ...] = ()
    fused_moe_configs: tuple[tuple[int, int, str], ...] = ()
    splash_fused_bwd: bool = False
    tpu_flash_2023: bool = False
    tpu_segment_ids: bool = False
    embedding_onehot: bool = False
    calibration_id: str = ""
    plan: Any = None

    def __post_init__(self) -> None:
        if self.conv_layout not in CONV_LAYOUTS:
            from nodeperf.suggest import did_you_mean

            raise ValueError(f"options.conv_layout: unknown memory format; got {self.conv_layout!r}; expected one of "
                             f"{', '.join(CONV_LAYOUTS)}" + did_you_mean(str(self.conv_layout).lower(), CONV_LAYOUTS))
        if self.all_reduce_kernel not in ALL_REDUCE_KERNELS:
            from nodeperf.suggest import did_you_mean

            raise ValueError(f"options.all_reduce_kernel: unknown all-reduce kernel; got {self.all_reduce_kernel!r}; "
                             f"expected one of {', '.join(ALL_REDUCE_KERNELS)}"
                             + did_you_mean(str(self.all_reduce_kernel).lower(), ALL_REDUCE_KERNELS))

        _check_choice("decode_attention", self.decode_attention, DECODE_ATTENTIONS, "decode attention kernel")
        if self.streaming_kernel:
            from hwmodels.tile_loop import TILE_LOOP_KERNELS

            _check_choice("streaming_kernel", self.streaming_kernel, tuple(TILE_LOOP_KERNELS), "tile-loop kernel")
        if self.fp8_activation_scale not in FP8_ACTIVATION_SCALES:
            from nodeperf.suggest import did_you_mean

            got = str(self.fp8_activation_scale).lower()
            raise ValueError(f"options.fp8_activation_scale: unknown scaling; got {self.fp8_activation_scale!r}; "
                             f"expected one of {', '.join(FP8_ACTIVATION_SCALES)}" + did_you_mean(got, FP8_ACTIVATION_SCALES))
        if self.splash_blocks and (len(self.splash_blocks) != 6 or min(int(b) for b in self.splash_blocks) < 1):
            raise ValueError(f"options.splash_blocks: got {self.splash_blocks!r}; expected six positive block sizes "
                             "(q, kv, q_dkv, kv_dkv, q_dq, kv_dq) or none")
        if self.fp8_accumulation not in FP8_ACCUMULATIONS:
            from nodeperf.suggest import did_you_mean

            got = str(self.fp8_accumulation).lower()
            raise ValueError(f"options.fp8_accumulation: unknown accumulation; got {self.fp8_accumulation!r}; "
                             f"expected one of {', '.join(FP8_ACCUMULATIONS)}" + did_you_mean(got, FP8_ACCUMULATIONS))


def _check_choice(name: str, value: Any, choices: tuple[str, ...], what: str) -> None:
    """A located ValueError unless ``value`` is one of ``choices`` (the option ``name``)."""
    if value not in choices:
        from nodeperf.suggest import did_you_mean

        raise ValueError(f"options.{name}: unknown {what}; got {value!r}; expected one of {', '.join(choices)}"
                         + did_you_mean(str(value).lower(), choices))


#: How a decode step's attention kernel reads a grouped K/V cache (``EvalOptions.decode_attention``): once per KV
#: head, or once per query head (:func:`hwmodels.gpu.masked_mha_decode`).
DECODE_ATTENTIONS = ("grouped", "per-query-head")
#: How an fp8 linear layer scales its activations (``EvalOptions.fp8_activation_scale``).
FP8_ACTIVATION_SCALES = ("dynamic", "static")
#: How fp8 GEMMs not marked by their recipe accumulate (``EvalOptions.fp8_accumulation``, ``--fp8-accumulation``).
FP8_ACCUMULATIONS = ("fast", "split")
#: Architectures whose fp8 GEMMs without fast accumulation are priced with FP32 promotions under
#: ``EvalOptions.fp8_accumulation = "split"``: Hopper, whose fp8 WGMMA accumulator keeps about 14 bits and whose
#: promotion interval is stated (DeepSeek-V3, arXiv 2412.19437 s.3.3.2: H800, N_C = 128; CUTLASS's SM90
#: ``GmmaFP8Accumulation``). The catalog's Ada, Blackwell and CDNA3 intervals are assumed from Hopper's, not stated.
FP8_PROMOTION_ARCHS = ("hopper",)
#: Memory formats of convolution activations (``EvalOptions.conv_layout``, ``--conv-layout``).
CONV_LAYOUTS = ("nhwc", "nchw")
#: Who runs a one-node all-reduce (``EvalOptions.all_reduce_kernel``): NCCL, or an engine's own kernel
#: (:data:`hwmodels.collectives.ENGINE_ALL_REDUCE_KERNELS`).
ALL_REDUCE_KERNELS = ("nccl", "vllm-custom", "trtllm-custom", "vllm-custom-2024")


# ------------------------------------------------------------------------------------------------
# user settings -> EvalOptions (the one translator: CLI flags, sweep axes, tune spaces, realtime
# scenarios and study configurations all name engine settings by these names)


@dataclass(frozen=True)
class Setting:
    """One user-facing engine setting: the :class:`EvalOptions` field it sets, its kind (``"bool"``,
    ``"fusion"`` (true, false or ``"auto"``) or ``"str"``), the names it accepts and a line of help."""

    field: str
    kind: str
    choices: tuple[str, ...] = ()
    doc: str = ""


#: Engine settings by the name users give them (``[options]`` of an experiment or a scenario, a tune
#: space, a study configuration); ``allow_tf32`` is also accepted as ``tf32``. Adding an engine option
#: here makes it a sweep axis, a scenario option and a tune setting at once.
SETTINGS: dict[str, Setting] = {
    "fusion": Setting("fusion", "fusion", doc="true | false | \"auto\" (fuse on TPUs only)"),
    "epilogue_fusion": Setting("epilogue_fusion", "bool",
                               doc="with fusion: elementwise ops fuse into GEMM / convolution epilogues too "
                                   "(false: torch.compile's extern cuBLAS / cuDNN kernels)"),
    "gemv_generated": Setting("gemv_generated", "bool",
                              doc="with fusion: one-row matmuls are generated kernels taking epilogues "
                                  "(Inductor's coordinate_descent_tuning)"),
    "norm_fusion": Setting("norm_fusion", "bool",
                           doc="with fusion: a layer norm, RMS norm or softmax fuses with the pointwise op before "
                               "it (Inductor's reductions)"),
    "cuda_graphs": Setting("cuda_graphs", "bool", doc="kernels replayed from a CUDA graph"),
    "power_cap": Setting("power_cap", "bool", doc="stretch ops over the TDP"),
    "tf32": Setting("allow_tf32", "bool", doc="fp32 contractions on TF32 tensor cores"),
    "l2_residency": Setting("l2_residency", "bool", doc="inputs just written are read from L2"),
    "warm_repeats": Setting("warm_repeats", "bool",
                            doc="the graph runs again and again on the same tensors with no cache flush: when "
                                "every distinct tensor fits in L2, inputs (GEMM operands included) come from L2"),
    "eager_framework": Setting("eager_framework", "bool", doc="per-op host overhead of an eager framework"),
    "eager_modules": Setting("eager_modules", "bool",
                             doc="with eager_framework: ops issued from nn.Module calls (eager PyTorch)"),
    "attention_kernel": Setting("attention_kernel", "str", ("auto", "flash2", "flash3", "trtllm-fmha"),
                                doc="fused-attention kernel design"),
    "conv_layout": Setting("conv_layout", "str", CONV_LAYOUTS,
                           doc="memory format of convolution activations (nchw: cuDNN's layout transforms "
                               "around 16-bit tensor-core convolutions)"),
    "all_reduce_kernel": Setting("all_reduce_kernel", "str", ALL_REDUCE_KERNELS,
                                 doc="who runs a one-node all-reduce: nccl, or a serving engine's own kernel "
                                     "(vllm-custom: vLLM's custom all-reduce, also SGLang's; trtllm-custom: "
                                     "TensorRT-LLM's custom all-reduce plugin, 0.9-era rule; vllm-custom-2024: vLLM's kernel "
                                     "before vLLM PR #8558, as vLLM 0.5-0.6.1 and SGLang 0.3 ship it)"),
    "decode_attention": Setting("decode_attention", "str", DECODE_ATTENTIONS,
                                doc="how a decode attention kernel reads a grouped K/V cache: grouped (once per KV "
                                    "head) or per-query-head (masked multi-head attention, TensorRT-LLM before its "
                                    "grouped-query kernels)"),

    "fp8_activation_scale": Setting("fp8_activation_scale", "str", FP8_ACTIVATION_SCALES,
                                    doc="fp8 linear layers' input scale: dynamic (per-token absmax, then the cast) "
                                        "or static (calibrated offline: the cast only, TensorRT-LLM's FP8Linear)"),
    "fp8_accumulation": Setting("fp8_accumulation", "str", FP8_ACCUMULATIONS,
                                doc="fp8 GEMMs not marked by their recipe: fast (WGMMA accumulator only) or split "
                                    "(cuBLASLt FAST_ACCUM = 0: FP32 promotions, priced on Hopper only)"),
    "tpu_segment_ids": Setting("tpu_segment_ids", "bool",
                               doc="TPU attention kernels mask every score by segment ids (MaxText's "
                                   "decoder_segment_ids)"),
}
#: Other names a setting is known by (the :class:`EvalOptions` field name).
SETTING_ALIASES: dict[str, str] = {"allow_tf32": "tf32"}


def _setting_value(s: Setting, value: Any, where: str) -> Any:
    """``value`` as the field of ``s`` takes it, or a located ValueError."""
    if s.kind == "fusion" and (value is None or value == "auto"):
        return None
    if s.kind in ("bool", "fusion"):
        if isinstance(value, bool) or type(value).__name__ == "bool_":  # (numpy's bool from an axis array)
            return bool(value)
        expected = "true, false or \"auto\"" if s.kind == "fusion" else "true or false"
        raise ValueError(f"{where}: not a boolean; got {value!r}; expected {expected}")
    if not isinstance(value, str) or (s.choices and value not in s.choices):
        from nodeperf.suggest import did_you_mean

        raise ValueError(f"{where}: unknown value; got {value!r}; expected one of {', '.join(s.choices)}"
                         + (did_you_mean(value.lower(), s.choices) if isinstance(value, str) else ""))
    return value


def options_from_settings(settings: Mapping[str, Any], *, where: str = "options",
                          base: EvalOptions | None = None, **fields: Any) -> EvalOptions:
    """The :class:`EvalOptions` that user ``settings`` (names of :data:`SETTINGS`) ask for.

    Settings not given keep ``base``'s values (default :class:`EvalOptions`); ``fields`` set
    :class:`EvalOptions` fields directly (``calibration_id``, ``plan``). An unknown name or a value
    of the wrong kind is a ValueError located at ``where.name``.

    >>> options_from_settings({"fusion": "auto", "tf32": True}).allow_tf32
    True
    >>> options_from_settings({"fusoin": True})
    Traceback (most recent call last):
    ...
    ValueError: options.fusoin: unknown engine setting; got True; expected one of fusion, epilogue_fusion, gemv_generated, norm_fusion, cuda_graphs, power_cap, tf32, l2_residency, warm_repeats, eager_framework, eager_modules, attention_kernel, conv_layout, all_reduce_kernel, decode_attention, fp8_activation_scale, fp8_accumulation, tpu_segment_ids; did you mean 'fusion'?

    """
    values: dict[str, Any] = {}
    for name, value in settings.items():
        key = SETTING_ALIASES.get(name, name)
        s = SETTINGS.get(key)
        if s is None:
            from nodeperf.suggest import did_you_mean

            raise ValueError(f"{where}.{name}: unknown engine setting; got {value!r}; expected one of "
                             f"{', '.join(SETTINGS)}" + did_you_mean(str(name), tuple(SETTINGS)))
        values[s.field] = _setting_value(s, value, f"{where}.{name}")
    out = dataclasses.replace(base or EvalOptions(), **values, **fields)
    if out.warm_repeats and not out.l2_residency:
        raise ValueError(f"{where}.warm_repeats: got true with l2_residency false; expected l2_residency true (a "
                         "warm loop reads its inputs from L2), or warm_repeats false")
    return out
