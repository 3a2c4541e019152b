"""Software-stack profiles: what a framework launches for a network, and how its kernels are issued.

A prediction names the stack it stands for (``--framework``). A :class:`FrameworkProfile` says two
things about that stack:

* what it changes in the **graph** the transformer builder emits (:mod:`workloads.zoo.transformer`):
  attention as one fused kernel or decomposed over the full ``s x s`` score matrix, logits for every
  position, activations and RMSNorm / RoPE issued op by op as the Hugging Face model code writes
  them, dropout kernels in training;
* what it changes in **costing** (the engine's existing options, :meth:`FrameworkProfile.cost_options`):
  elementwise fusion into producers, CUDA-graph replay, the fused-attention kernel design and the
  per-op host dispatch cost of an eager framework.

The empty name ``""`` is "no profile": graphs and options exactly as before profiles existed (the
inference-engine view the catalog was validated with). Every profile cites the framework code it
reads; ``docs/frameworks.md`` lists them with the validation table.

Hugging Face model code differs by family; :data:`HF_MODEL_CODE` records, per zoo family, what its
``modeling_*.py`` issues (activation, dropout probabilities of the released config, softmax dtype).

Example
-------
>>> from workloads.frameworks import get_profile
>>> p = get_profile("eager")
>>> p.attention, p.logits, p.cost_options()["eager_framework"]
('decomposed', 'all', True)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from nodeperf.errors import NodeperfError
from nodeperf.suggest import did_you_mean

__all__ = [
    "check_profile_hardware",
    "check_profile_trains",
    "FUSED_MOE_DEFAULT_TILES",
    "fused_moe_default_tile",
    "FrameworkProfile",
    "PADDLE_GLOBAL_NORM_CLIP",
    "clip_grad_by_global_norm",
    "PADDLE_AMP_UNSCALE",
    "amp_unscale_pass",
    "FrameworkError",
    "GRAPH_LAUNCH_FORMS",
    "GRAPH_LAUNCH_SOURCE",
    "graph_launch_s",
    "PROFILES",
    "INFERENCE_ONLY",
    "COMPILE_MODES",
    "mode_cost_options",
    "compile_conv_layout",
    "INDUCTOR_LAYOUT_ROCM",
    "INDUCTOR_CONV_LAYOUT_COPIES",
    "inductor_layout_copies",
    "ALIASES",
    "HF_MODEL_CODE",
    "HF_MODEL_TYPES",
    "HFModelCode",
    "ACTIVATION_KERNELS",
    "get_profile",
    "profile_names",
    "parse_framework_field",
    "drop_optimizer",
    "megatron_optimizer_passes",
    "main_grad_accumulation",
    "WGRAD_ACCUMULATION",
    "with_profile_meta",
    "EXTRA_MODULE_CALLS_META",
    "MODULE_TREES",
    "MODULE_TREE_NOTE",
    "module_tree_of",
    "with_module_tree",
    "split_gated_mlp",
    "split_qkv_projection",
    "PADDLE_SEPARATE_QKV",
    "unfuse_linear_bias",
    "PADDLE_STATIC_LINEAR",
    "head_transposes",
    "PADDLE_HEAD_TRANSPOSES",
    "fp32_score_add",
    "PADDLE_O1_MASK_ADD",
    "o1_fp32_embeddings",
    "PADDLE_O1_FP32_EMBEDDINGS",
    "PADDLE_UNCACHED_RUN_S_PER_OP",
    "PADDLE_UNCACHED_RUN_SOURCE",
    "paddle_uncached_run_s",
    "PADDLE_GRAPH_EXECUTOR_S_PER_OP",
    "PADDLE_GRAPH_EXECUTOR_SOURCE",
    "TRTLLM_V05_UNFUSED_MLP",
    "gemm_tactics_at",
    "TRTLLM_V05_TACTIC_PROFILE",
]

# Sources read for the profiles (repository @ commit, path, symbol).
_HF_GPT2 = ("huggingface/transformers @ 0010f60284ab4b9d14b7df9c6525b1a2ad44e640 "
            "src/transformers/models/gpt2/modeling_gpt2.py: GPT2Attention._attn (matmul, divide by sqrt(d), "
            "torch.where causal mask, softmax, type cast, attn_dropout, matmul), _merge_heads (permute + "
            "contiguous), GPT2MLP (c_fc, act, c_proj, dropout)")
_HF_ACT = ("huggingface/transformers @ d60525f3595f8214576d6b8f1c54ac7cd0b5c42c src/transformers/activations.py: "
           "NewGELUActivation.forward = 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3)))), "
           "GELUActivation = nn.functional.gelu, SiLU = nn.functional.silu")
_HF_LLAMA = ("huggingface/transformers src/transformers/models/llama/modeling_llama.py: LlamaRMSNorm.forward "
             "(to float32, pow(2).mean(-1), + eps, rsqrt, multiply, to input dtype, multiply by weight), "
             "apply_rotary_pos_emb / rotate_half (q*cos + cat(-x2, x1)*sin), eager_attention_forward (matmul * "
             "scaling, + causal mask, softmax(dtype=float32).to(q dtype), dropout, matmul), LlamaForCausalLM.forward "
             "(lm_head over hidden_states[:, slice(-logits_to_keep, None)], logits_to_keep=0: every position)")
_TORCH_SDPA = ("pytorch/pytorch torch/nn/functional.py scaled_dot_product_attention: one call dispatching to the "
               "FlashAttention-2 / memory-efficient / math backends (flash for fp16/bf16 on sm80+)")
_INDUCTOR = ("pytorch/pytorch torch/_inductor: pointwise and reduction ops are fused into generated Triton kernels; "
             "CUDA graphs only with mode='reduce-overhead'")
_INDUCTOR_EXTERN = ("pytorch/pytorch torch/_inductor/scheduler.py: convolution, mm, bmm and addmm run as extern "
                    "kernels (kernel_name_to_op: extern_kernels.convolution / mm / bmm / addmm, cuDNN and cuBLAS calls) "
                    "scheduled as ExternKernelSchedulerNode, which is never fused: a contraction's norm / activation / "
                    "residual run in a separate generated Triton kernel that reads its output back; "
                    "config.epilogue_fusion applies to Triton templates, chosen only under max-autotune")
_INDUCTOR_WRAPPER = ("pytorch/pytorch torch/_inductor/codegen/wrapper.py: the default-mode program is a generated "
                     "Python function that launches every Triton kernel and extern (cuDNN/cuBLAS) call from Python, "
                     "one host call per kernel, like an eager op; mode='reduce-overhead' replays it from a CUDA graph")
_INDUCTOR_NORM = ("pytorch/pytorch torch/_inductor/codegen/triton.py TritonScheduling.can_fuse (torch 2.0): a pointwise "
                  "node fuses into a reduction that reads it when numel1 == numel2 * rnumel2 (layer norm and softmax "
                  "are decomposed into reductions and pointwise ops), so a residual add and the LayerNorm after it, "
                  "or the score scale and its softmax, are one generated kernel")
_INDUCTOR_MATMUL = ("pytorch/pytorch aten/src/ATen/native/LinearAlgebra.cpp _matmul_impl is CompositeImplicitAutograd: "
                    "AOTAutograd traces its decomposition, so the reshape of a permuted 4-d head view to (batch x "
                    "heads, rows, cols) at batch > 1 is a clone in the compiled graph, which Inductor runs as a copy "
                    "kernel before the extern bmm (q, k^T and v of the decomposed attention; none at batch 1)")
_COMPILE_CALL_HOST = ("pytorch/pytorch issue #150488 ('Lightweight CUDAGraph backend', 2025-04-01), one compiled "
                      "program with fullgraph=True replayed from one CUDA graph: 'Other torch.compile overhead (e.g., "
                      "TorchDynamoCacheLookup): 176 us', 'Cudagraph tree overhead: 128 us', 'cudaGraphLaunch time: "
                      "41 us' per call (host and model not stated); pull request #98529 (2023) names the same "
                      "CUDA-graph tree costs (tensor and storage reconstruction, liveness checks) for ResNet-50")
_TORCH_NCHW = ("pytorch/pytorch: tensors are created in torch.contiguous_format (NCHW for a 4-d activation) and "
               "convolutions keep their input's memory format (aten/src/ATen/native/ConvUtils.h "
               "cudnn_conv_suggest_memory_format: channels last only when input or weight already is)")
_INDUCTOR_LAYOUT = ("pytorch/pytorch pull request #99773 ('[inductor] layout optimization for conv', 2023, first "
                    "released in torch 2.1): torch/_inductor/graph.py decide_layout_opt gives convolutions "
                    "channels-last inputs (config.layout_optimization, on by default for CUDA); torch 2.0.x has "
                    "no such pass")
_VLLM = ("vllm-project/vllm vllm/model_executor/models/llama.py: QKVParallelLinear (one q/k/v GEMM), "
         "MergedColumnParallelLinear (gate/up), SiluAndMul and fused_add_rms_norm custom kernels, attention "
         "backends FlashAttention/FlashInfer; LogitsProcessor computes logits of the sampled positions only; "
         "decode batches replayed from captured CUDA graphs unless enforce_eager")
_TRT = "NVIDIA TensorRT developer guide, 'Layer fusion': elementwise, activation and bias fused into GEMM/conv epilogues"
_TRTLLM = ("NVIDIA/TensorRT-LLM docs: fused multi-head attention (context FMHA, masked MHA for generation), "
           "gated-MLP and norm plugins, CUDA graphs in the generation phase")
#: TensorRT-LLM's context phase runs its own fused attention kernels, not FlashAttention: ``EvalOptions.attention_kernel
#: = "trtllm-fmha"`` (the rate ``efficiency.context_fmha_tensor_fraction`` measured for them).
TRTLLM_CONTEXT_FMHA = ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/kernels/contextFusedMultiHeadAttention/ (fmha_v2 cubins per "
                       "architecture, e.g. fmha_v2_flash_attention_bf16_128_128_S_pagedKV_64_sm90.cubin.cpp), the context "
                       "kernels of its attention op in both the TensorRT engine's gpt_attention plugin and the PyTorch "
                       "backend's TRTLLM attention; their rate as aiconfigurator timed that op (context_attention_perf "
                       "tables, hwmodels/catalog/defaults/efficiency.toml @aicctx)")
#: TensorRT-LLM's fp8 linear layer (``--enable_fp8``; ``quant_algo FP8`` in a checkpoint config) scales its input with a
#: per-tensor scale calibrated offline, not a per-token reduction: ``EvalOptions.fp8_activation_scale = "static"``.
TRTLLM_FP8_STATIC_SCALE = ("NVIDIA/TensorRT-LLM tensorrt_llm/quantization/layers.py (release/0.5.0 and later) FP8Linear: "
                           "activation_scaling_factor = Parameter(shape=(1,)), a calibrated per-tensor scale; forward "
                           "quantises its input with it before the fp8 GEMM (no absmax pass at run time)")
#: How TensorRT-LLM's fp8 GEMMs accumulate on Hopper, from its code (``FrameworkProfile.fp8_gemm_accumulation``).
#: The TensorRT engine path: with ``--gemm_plugin fp8`` the fp8 linears call the gemm plugin (``FP8Linear`` /
#: ``multiply_collect(..., gemm_plugin='fp8', use_fp8=True)``), whose ``runGemm`` calls
#: ``CublasMMWrapper::createDescriptors`` without ``fastAcc``, whose default is 0, written to
#: ``CUBLASLT_MATMUL_DESC_FAST_ACCUM``: the split accumulator. Without a gemm plugin (the rows' v0.5 and v0.9
#: builds, the NIM engines' flags unpublished) the fp8 GEMMs are TensorRT's own tactics, whose accumulation no
#: TensorRT document found states: priced as fast (no promotions), not as split.
TRTLLM_FP8_ACCUM_ENGINE = (
    "NVIDIA/TensorRT-LLM cpp/tensorrt_llm/plugins/gemmPlugin/gemmPlugin.cpp @ 7ed07f0691dff2c1 runGemm: "
    "createDescriptors(transa, transb, m, n, k, lda, ldb, ldc) (no fastAcc; likewise @ 027cd518, the 0.5-era "
    "plugin); cpp/tensorrt_llm/common/cublasMMWrapper.h createDescriptors(..., int8_t fastAcc = 0); "
    "cublasMMWrapper.cpp @ 087b7d26 sets CUBLASLT_MATMUL_DESC_FAST_ACCUM to fastAcc: '--gemm_plugin fp8' engines run "
    "the split accumulator; without it TensorRT's own fp8 tactics, accumulation not stated (priced fast)")
#: The values of ``FrameworkProfile.fp8_gemm_accumulation`` ("": not stated, priced as fast).
FP8_GEMM_ACCUMULATIONS = ("", "fast", "split")
#: The PyTorch backend's fp8 linears: ``cublas_scaled_mm`` passes fast accumulation.
TRTLLM_FP8_ACCUM_TORCH = ("NVIDIA/TensorRT-LLM cpp/tensorrt_llm/thop/cublasScaledMM.cpp @ 0846822: "
                          "fast_acc = true (CUBLASLT_MATMUL_DESC_FAST_ACCUM = 1)")
_XLA = "openxla/xla docs 'XLA:GPU architecture overview': fusion of elementwise/reduction ops into producer kernels"
_FSDP2 = ("pytorch/pytorch torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: foreach_all_gather copies "
          "each parameter's local shard into one flat all-gather input (torch._foreach_copy_, on the all-gather "
          "copy-in stream), foreach_all_gather_copy_out splits the gathered buffer into the unsharded parameters "
          "(torch.ops.fsdp.split_with_sizes_copy) on the current (compute) stream after waiting for the all-gather, "
          "foreach_reduce concatenates the unsharded gradients into the reduce-scatter input in the reduce dtype "
          "(torch._chunk_cat) on the reduce-scatter stream; _fsdp_param_group.py: reshard_after_forward frees the "
          "unsharded parameters after forward and gathers them again for backward, the next unit's all-gather is "
          "prefetched while the current one computes")
_TORCHTITAN_COMPILE = ("pytorch/torchtitan torchtitan/models/llama3/infra/parallelize.py apply_compile (2025): "
                       "torch.compile(transformer_block, backend=compile_config.backend, fullgraph=True) for each "
                       "TransformerBlock, registered back in model.layers (embedding, final norm and output stay eager)")
_TORCHTITAN_LOSS = ("pytorch/torchtitan torchtitan/components/loss.py build_cross_entropy_loss: with "
                    "--training.compile, loss_fn = torch.compile(cross_entropy_loss) (since bbb1b616e, 2025-04-02, "
                    "PR #1033; e7c0cae has it); at 9dec370 (2024-12-26) train.py's compile of the loss is commented out")
_TORCHTITAN = ("pytorch/torchtitan torchtitan/parallelisms/parallelize_llama.py (Dec 2024): fully_shard on every "
               "TransformerBlock and on the root module, MixedPrecisionPolicy(param_dtype=bfloat16, "
               "reduce_dtype=float32) from training.mixed_precision_param / mixed_precision_reduce (defaults bfloat16 / "
               "float32 in torchtitan/config_manager.py); attention through F.scaled_dot_product_attention(is_causal=True), "
               "the FlashAttention-2 backend on H100 (" + _TORCH_SDPA.split(": ", 1)[1] + ")")
_TORCHTITAN_EAGER_MODEL = (
    "pytorch/torchtitan @ 9dec370 (2024-12-26): train_configs/llama3_{8b,70b,405b}.toml set norm_type = \"rmsnorm\", "
    "which torchtitan/models/norms.py build_norm maps to its Python RMSNorm: forward = "
    "self._norm(x.float()).type_as(x) * self.weight, _norm = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) "
    "(lines 96-101), eight eager ops; replaced by torch's nn.RMSNorm in 3b39d7ab0 (2025-03-19, PR #985). "
    "torchtitan/models/llama/model.py apply_rotary_emb (lines 87-113): xq_ = torch.view_as_complex(xq.float()"
    ".reshape(...)), torch.view_as_real(xq_ * freqs_cis).flatten(3), .type_as(xq), likewise for xk. Without "
    "--training.compile these run as one kernel per op (parallelize_llama.py compiles only under "
    "training.compile)")
_TORCHTITAN_FINAL_NORM = (
    "pytorch/torchtitan @ 9dec370 (2024-12-26): torchtitan/parallelisms/parallelize_llama.py apply_compile (lines "
    "297-306) compiles each TransformerBlock (torch.compile(transformer_block, fullgraph=True)) and nothing else, so "
    "the model's final norm (train_configs/llama3_{8b,70b,405b}.toml norm_type = \"rmsnorm\", torchtitan/models/"
    "norms.py RMSNorm: self._norm(x.float()).type_as(x) * self.weight) runs op by op under --compile; autograd keeps "
    "the fp32 upcast (read by pow's and the multiply's backward) and the 16-bit normalised tensor (read by the "
    "weight's gradient)")
_INDUCTOR_COMPLEX = (
    "pytorch/pytorch torch/_inductor/lowering.py unsupported_input_tensor: a complex tensor (other than the input of "
    "view.dtype / convert_element_type) warns 'Torchinductor does not support code generation for complex "
    "operators. Performance may be worse than eager.' and fallback_node_due_to_unsupported_type makes the node an "
    "ATen FallbackKernel; Inductor decomposes complex addition only (pull request #110740, 2023-10: 'complex "
    "operations will mostly end up taken care of by the aten runtime'); pytorch/torchtitan issue #15 (2024-01-25, "
    "open): compiling torchtitan's Llama prints that warning from its complex RoPE, which apply_rotary_emb keeps at "
    "9dec370 (torchtitan/models/llama/model.py) and at 820504e and e7c0cae (torchtitan/models/llama3/model.py "
    "lines 155-156)")
_TORCHTITAN_MODEL = (
    "pytorch/torchtitan torchtitan/models/llama3/model.py @ 820504e and e7c0cae (2025-06-13): apply_rotary_emb "
    "(view_as_complex(xq.float()...) * freqs_cis, view_as_real, type_as) and repeat_kv (expand, then reshape to "
    "n_kv_heads * n_rep heads) before F.scaled_dot_product_attention, with or without --compile; "
    "torchtitan/models/llama/model.py @ 9dec370 likewise")
_AUTOMODEL_MODEL = (
    "NVIDIA-NeMo/Automodel @ cb9765441e5127b8100879ca1f7ff5920f825887: nemo_automodel/_transformers/registry.py maps "
    "LlamaForCausalLM to its own nemo_automodel/components/models/llama/model.py (nn.Linear q/k/v/o and MLP "
    "projections; LlamaAttention.forward applies apply_rotary_pos_emb_fused when backend.rope_fusion, which "
    "components/models/llama/rope_utils.py runs as transformer_engine.pytorch.attention.rope.apply_rotary_pos_emb("
    "fused=True), one kernel per tensor each way; attention through the configured attention interface over the "
    "key/value heads); likewise Qwen3MoeForCausalLM and DeepseekV3ForCausalLM (components/models/qwen3_moe/layers.py, "
    "deepseek_v3/layers.py: rope_fusion=backend.rope_fusion); components/models/common/utils.py BackendConfig: rope_fusion defaults to True with Transformer "
    "Engine on CUDA, rms_norm 'torch_fp32' (Float32RMSNorm, torch.compiled) by default; "
    "components/loss/masked_ce.py MaskedCrossEntropy(fp32_upcast=True): logits.float() then F.cross_entropy")
_AUTOMODEL_COMPILE = (
    "NVIDIA-NeMo/Automodel @ cb9765441e5127b8100879ca1f7ff5920f825887 nemo_automodel/components/distributed/"
    "config.py (enable_compile, lines 184-187): 'Apply per-layer torch.compile to transformer decoder layers ... "
    "Skips whole-model compile': the loss outside the decoder layers runs eagerly")
_MCORE = ("NVIDIA/Megatron-LM megatron/core/transformer (TransformerLayer with TE specs: TELayerNormColumnParallelLinear "
          "fuses the RMSNorm into the QKV / FC1 GEMM, TEDotProductAttention runs cuDNN fused attention or "
          "FlashAttention, fused bias-SwiGLU and RoPE kernels); megatron/core/distributed/distributed_data_parallel_config.py "
          "grad_reduce_in_fp32 default False, overlap_grad_reduce / overlap_param_gather overlap the data-parallel "
          "collectives with backward / forward; TE userbuffers (tp_comm_overlap) overlap tensor-parallel communication "
          "with the GEMMs")
_TP_OVERLAP = ("Wang et al., 'Overlap Communication with Dependent Computation via Decomposition in Large Deep "
               "Learning Models', ASPLOS 2023: an all-gather feeding a matmul (and a reduce-scatter fed by one) is "
               "decomposed into tp steps, each step's transfer overlapped with the partial matmul of the chunk already "
               "present; NVIDIA/TransformerEngine transformer_engine/pytorch/module/base.py initialize_ub (userbuffers "
               "ring-exchange / pipelined overlap of the sequence-parallel all-gather and reduce-scatter with the "
               "TP GEMMs), enabled in Megatron-LM by --tp-comm-overlap (requires --sequence-parallel)")
#: RoPE and the QKV split as Megatron-Core runs them with Transformer Engine (``fused_rope``, ``split_qkv_copies``).
_MCORE_ROPE = (
    "NVIDIA/Megatron-LM core_v0.15.0 megatron/core/transformer/attention.py: get_query_key_value_tensors views the "
    "QKV output as [sq, b, ng, (np/ng + 2) hn], splits it into views (TE SplitAlongDim, whose backward concatenates "
    "the gradients) and reshapes the query to [sq, b, np, hn] (line 1105: a copy when ng > 1 and np/ng > 1, the "
    "view's group stride being (np/ng + 2) hn), then q_layernorm / k_layernorm; Attention.forward applies "
    "apply_rotary_pos_emb to the query and the key separately (fused_single_qkv_rope defaults to False, "
    "transformer_config.py line 292); models/common/embeddings/rope_utils.py apply_rotary_pos_emb: with "
    "apply_rope_fusion TE's apply_rotary_pos_emb(tensor_format='sbhd', fused=True), one kernel per tensor each way "
    "(extensions/transformer_engine.py fused_apply_rotary_pos_emb), else _apply_rotary_pos_emb_bshd (cos, sin, "
    "* mscale and the casts of freqs; t * cos, -x2, cat, * sin, add, cat with the empty pass-through part). "
    "NVIDIA-NeMo/Megatron-Bridge v0.2.0 (the NeMo 25.11 release): scripts/performance/utils/helpers.py "
    "set_common_perf_overrides sets recipe.model.apply_rope_fusion = True; models/gpt_provider.py provide() turns "
    "it off when training/utils fusions.validate_rope_fusion_compatibility fails, which it does for a "
    "position_embedding_type other than 'rope' (gpt_oss/gpt_oss_provider.py: 'yarn'). NVIDIA/TransformerEngine "
    "v2.9 pytorch/attention/dot_product_attention/utils.py get_qkv_layout: q, k and v in separate memory need "
    "k's and v's strides to match (check_strides_kv), else all three are made contiguous (the value, a view of "
    "the QKV output, is copied); pytorch/ops/basic/rmsnorm.py op_forward: input_.contiguous() (line 182)")
_MCORE_ATTN = ("NVIDIA TransformerEngine docs 'Attention' (examples/attention/attention.ipynb): on sm90 the cuDNN fused "
               "attention backend (FusedAttention, cuDNN >= 9) is preferred; FlashAttention-3 paper (Shah et al. 2024, "
               "arXiv:2407.08608) Fig. 5-7 place cuDNN's Hopper kernels beside FA3, both warp-specialised wgmma kernels")
_MAXTEXT = ("AI-Hypercomputer/maxtext MaxText/layers/attentions.py (attention_kernel 'flash': the Pallas splash "
            "attention kernel on TPU), MaxText/configs/base.yml (remat_policy, ici_fsdp_parallelism, "
            "collective_matmul via XLA flags in the tpu-recipes scripts); openxla/xla: the SPMD partitioner issues "
            "the FSDP all-gathers and reduce-scatters as asynchronous collectives that the latency-hiding scheduler "
            "overlaps with the layer's matmuls")
_MAXTEXT_DTYPES = ("AI-Hypercomputer/maxtext MaxText/configs/base.yml @ 000e93554a02 (2024): 'dtype: \"bfloat16\"' "
                   "(activations and matmuls) and 'weight_dtype: float32' (the parameters, their gradients and the AdamW "
                   "state are float32); MaxText/layers/linears.py DenseGeneral @ 76bd53b0f (and src/MaxText/layers/linears.py "
                   "@ 3eb77db3c): 'kernel = jnp.asarray(kernel, self.dtype)' then lax.dot_general with no "
                   "preferred_element_type, so each weight gradient is a bfloat16 dot whose partial sums the SPMD "
                   "partitioner reduces (reduce-scatter over the fsdp axes, all-reduce over the DCN data axis) before "
                   "the cast's transpose widens them to float32; MaxText docs/guides/optimization/sharding.md, 'DP "
                   "Arithmetic Intensity': 'All reduce size of params (bf16)'. None of the stated recipes overrides "
                   "weight_dtype except where a row says so")
_MEGABLOX = ("AI-Hypercomputer/maxtext src/MaxText/configs/base.yml @ 3eb77db3c: 'megablox: True', 'sparse_matmul: True', "
             "'tile_batch_seq: 512' (the m tile of the Megablox grouped matmul; tile_embed_dim and tile_mlp_dim 1024); "
             "src/MaxText/layers/moe.py sparse_matmul pads the routed rows to a multiple of tile_batch_seq and calls "
             "mblx.gmm with that tiling; src/MaxText/kernels/megablox/backend.py make_group_metadata: an m tile is "
             "visited once by the group that owns it and once more by each group that starts inside it, "
             "'tiles_m <= group_tiles.sum() <= tiles_m + num_groups - 1', every visit a full tm x tk x tn tile")
_MAXTEXT_PERMUTE = ("AI-Hypercomputer/maxtext src/MaxText/layers/moe.py @ 3eb77db3c: RoutedMoE.permute "
                    "'replicated_inputs_2d = jnp.repeat(inputs_2d, self.num_experts_per_tok, axis=0)' then "
                    "'_sort_activations(replicated_inputs_2d, sorted_selected_experts, ...)' (inputs[sort_indices, ...], "
                    "a gather of the replicated rows); RoutedMoE.unpermute '_sort_activations(intermediate, "
                    "jnp.argsort(sorted_selected_experts), ...)' then 'jnp.einsum(\"BKE,BK -> BE\", "
                    "reshaped_intermediate.astype(jnp.float32), reshaped_weights.astype(jnp.float32))'; the backward "
                    "of each sort is a gather (use_custom_sort_vjp) or the gather's transpose. AI-Hypercomputer/maxtext "
                    "PR #4913 ('MoE: remove the replicated-activation repeat in RoutedMoE.permute', 2026-08): the repeat "
                    "is 'an activation buffer that is 6x the dispatch input for DeepSeek-V4-284B' (top-k 6), i.e. "
                    "the copies are written to HBM; the PR (open, not merged) also reports 'Step time changed by ~1% "
                    "on v6e-128' (DeepSeek-V4-Flash 284B LoRA fine-tuning, seq 16384), 'the benefit of the change "
                    "is the removed activation buffer'")
_JAX_REMAT = ("jax-ml/jax jax/_src/ad_checkpoint.py remat_partial_eval (at 732fd15, Dec 2023, and since): the recomputation "
              "of a jax.checkpoint is staged as a jaxpr and 'DCE jaxpr_staged, keeping only instantiated outputs which "
              "are unknown' (pe.dce_jaxpr), so only the residuals the backward reads are recomputed, before XLA's SPMD partitioner adds "
              "collectives (none for the dropped ops); MaxText scans its decoder "
              "layers under nn.remat (MaxText/layers/models.py @ 76bd53b0f), the scan carry (the layer input) saved")
_MAXTEXT_CF = ("AI-Hypercomputer/maxtext benchmarks/xla_flags_library.py: 'Continuation Fusion (CF) for All Gather "
               "Collectives. Continuation Fusion is a form of parallelizing compute work with collectives.' CF_FOR_ALL_GATHER = "
               "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_fuse_all_gather=true "
               "--xla_tpu_enable_async_collective_fusion_multiple_steps=true --xla_tpu_overlap_compute_collective_tc=true "
               "--xla_enable_async_all_gather=true, the LIBTPU_INIT_ARGS of MaxText/configs/v5e/*.sh @ 76bd53b0f (2023) and of "
               "the Trillium benchmark workloads; AI-Hypercomputer/maxtext PR #368 (2024-01-23) added fuse_all_gather back to "
               "the v5p configs ('This flag significantly improves performance'), which the v5p scripts of 76bd53b0f lack. "
               "The decomposition is that of Wang et al., ASPLOS 2023 (XLA on TPU v4): the all-gather's consumer matmul "
               "computes on the chunks already arrived")
_MAXTEXT_SERIAL = ("AI-Hypercomputer/maxtext docs/guides/optimization/benchmark_and_performance.md @ e591f30cb, "
                   "'Communication overlaps and tuning': 'There are two methods for asynchronous collective offloading: "
                   "1. Offload Collectives to Sparse Core ... 2. Overlap Collective Using Continuation Fusion: This method is "
                   "recommended for v5p and v6e. To enable it, set the following flags ... CF_FOR_ALL_GATHER, "
                   "CF_FOR_ALL_REDUCE. Those XLA can be set via LIBTPU_INIT_ARGS'; src/maxtext/configs/README.md @ "
                   "e591f30cb: xla_tpu_overlap_compute_collective_tc 'Enables the overlap of compute and communication on "
                   "a single TensorCore', xla_tpu_enable_async_collective_fusion 'Enables the pass which fuses async "
                   "collective communications with compute ops', xla_tpu_enable_data_parallel_all_reduce_opt "
                   "'Optimization to increase overlap opportunities for DCN ... all-reduces used for data parallel "
                   "sharding'. Read at first as 'a run whose flags set none of these has neither method'; libtpu's dumped "
                   "defaults (_LIBTPU_DEFAULTS) turn the all-gathers' asynchronous collective fusion on without a flag, so "
                   "this profile is a bound, not a run's defaults")
_LIBTPU_DEFAULTS = ("patrick-toulme/justabyte maxtext_pretraining/ir_dumps/module_1258.jit_true_divide.cl_873080440."
                    "tpu_comp_env.txt @ 4b28527db0763f02af56ee3b47a16a163ebe0ffd: the TPU compilation environment XLA dumped "
                    "for a MaxText training run on TPU v6e (libtpu build cl/873080440, 2026), every flag's value with the "
                    "non-default ones marked ('in the current tpu_comp_env has a non-default value. Default flag value: ...'). "
                    "Unmarked, hence defaults: xla_tpu_enable_async_collective_fusion true, "
                    "xla_tpu_enable_async_collective_fusion_multiple_steps true, xla_tpu_overlap_compute_collective_tc true, "
                    "xla_tpu_enable_async_collective_fusion_fuse_reduce_scatter false, "
                    "xla_tpu_enable_async_collective_fusion_fuse_all_reduce false, xla_enable_async_reduce_scatter_fusion "
                    "DISABLED, xla_enable_async_all_reduce DISABLED, xla_tpu_enable_data_parallel_all_reduce_opt true; marked: "
                    "xla_enable_async_all_gather ENABLED and _fuse_all_gather ENABLED (default auto, 'enabled based on the "
                    "target', src/maxtext/configs/README.md @ e591f30cb). AI-Hypercomputer/maxtext "
                    "benchmarks/xla_flags_library.py @ 05d3525e834959775d417fd65c3d7aadd213a3f7: CF_FOR_ALL_GATHER '# Enabled by default but lets make sure.'; the "
                    "library's only flags that make a gradient reduction asynchronous are CF_FOR_ALL_REDUCE "
                    "(--xla_tpu_enable_async_collective_fusion_fuse_all_reduce=true --xla_enable_async_all_reduce=true) and "
                    "the SparseCore offloads (ENABLE_SPARECORE_OFFLOADING_FOR_ALL_REDUCE: 'useful for reducing the gradient "
                    "reduction all-reduce time with overlapping with compute during that time')")
_MAXTEXT_SC = ("AI-Hypercomputer/maxtext benchmarks/xla_flags_library.py @ 05d3525e8 (spelled so there; "
               "ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE at 9f1820b47 and 14b5876ea): ENABLE_SPARECORE_OFFLOADING_FOR_ALL_REDUCE "
               "(--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true ...), described there as 'useful for "
               "reducing the gradient reduction all-reduce time with overlapping with compute during that time'; the "
               "DeepSeek-V3 v5p workload's ENABLE_SPARSECORE_OFFLOADING_FOR_RS_AG_AR offloads reduce-scatters, all-gathers "
               "and all-reduces (benchmarks/maxtext_v5p_model_configs.py @ 3eb77db3c)")
_VLLM_V06 = ("vLLM v0.6.0 announcement, https://blog.vllm.ai/2024/09/05/perf-update.html: scheduling and input "
             "preparation block the GPU in the V0 engine (29% of the time for Llama 3 8B on one H100 in v0.5.3); v0.6.0 "
             "adds multi-step scheduling (--num-scheduler-steps) and asynchronous output processing (output of step n "
             "processed while step n+1 runs)")
_VLLM_V0_FA2 = ("vLLM ran FlashAttention-2 (its vllm-flash-attn build) on every NVIDIA GPU until FlashAttention-3 "
                "support for Hopper was merged (vllm-project/vllm pull request #12093, 2025-01-15, first released in "
                "v0.7.0; issue #12429: 'Flash Attention 3 is now supported in vLLM for Hopper GPUs (SM 9.0)'), so "
                "0.5 / 0.6 prefill attention on an H100 or H200 is a flash2 kernel")
_VIDUR_CPU = ("fixed 0.28 ms + 0.0296 ms per sequence per scheduling pass: the line through the SCHEDULE_MEAN + "
              "PREPARE_INPUTS_E2E_MEAN CPU times of a vLLM-scheduler engine (Sarathi's vLLM fork, Llama-2-7B, TP1, A100 "
              "host) at batch 8 (0.165 + 0.352 ms) and 64 (0.854 + 1.323 ms), microsoft/vidur "
              "data/profiling/a100/cpu_overheads.csv (Agrawal et al., 'Vidur', MLSys 2024); output processing is left "
              "out (overlapped with the next step by v0.6.0's asynchronous output processing, "
              "https://blog.vllm.ai/2024/09/05/perf-update.html); the engine measured predates v0.6.0's CPU "
              "optimisations, so this is an upper bound")
_VIDUR_SAMPLER = ("derived: 0.617 ms + 0.00708 ms per sequence of every iteration, the host part of the sampler call of "
                  "the same vLLM-scheduler engine as iteration_host_s (Sarathi's vLLM fork, Llama-2-7B, TP1): its "
                  "SAMPLER_E2E_MEAN in microsoft/vidur data/profiling/a100/cpu_overheads.csv (stored version 0633efae; "
                  "Agrawal et al., 'Vidur', MLSys 2024), 0.8792 ms at batch 8 and 1.3195 ms at 64, less the device time "
                  "this model gives the call's GPU work there (Sarathi's Sampler takes lm_head.weight and runs the LM "
                  "head GEMM inside the call, sarathi/worker/model_runner.py; with the V0 sampler kernels: 0.2058 / "
                  "0.2495 ms on the a100-pcie-80gb, the board of Vidur's a100_pairwise_nvlink node SKU), 0.6734 / 1.0700 ms, "
                  "the line through the two. The call is host-bound (its time is 3.5-5x its device work) and its timer "
                  "synchronises at its exit (sarathi/metrics/cpu_timer.py), so the remainder is the host's serial part. "
                  "Sarathi's sampler is not V0 0.6's, and the engine measured predates v0.6.0's CPU optimisations: an "
                  "upper bound, as iteration_host_s")
_VLLM_V0_GRAPHS = ("vllm-project/vllm v0.6.0 vllm/worker/model_runner.py ModelRunner.execute_model: '# Currently cuda "
                    "graph is only supported by the decode phase.' - the captured graph runs when prefill_metadata is None "
                    "and decode_metadata.use_cuda_graph, else model_executable = self.model (the eager nn.Module)")
_VLLM_V0_ASYNC_OUT = ("vllm-project/vllm V0 vllm/engine/llm_engine.py LLMEngine.step: with async output processing "
                      "(on by default from v0.6.0, PR #7049) step n's outputs join ctx.output_queue and are processed "
                      "by the async callback that the model runner calls inside step n + 1 "
                      "(ModelRunner.execute_model: model_input.async_callback() after the forward launch), and "
                      "step() returns those ctx.request_outputs when step n + 1 ends; AsyncLLMEngine.engine_step "
                      "streams what step_async returned. Multi-step runs return after every step and process a "
                      "prompt step's outputs the same way (PR #7921 and #8050, 'Optimize Async + Multi-step', "
                      "Aug-Sep 2024; their presence in the v0.6.0 tag is not checked here). When nothing is left "
                      "to run the queue is drained at once")
_SGLANG_GRAPHS = ("sgl-project/sglang v0.3.0 python/sglang/srt/model_executor/model_runner.py: only forward_decode replays "
                  "the CUDA graph (cuda_graph_runner.can_run(len(batch.reqs))); forward_extend calls self.model.forward")
_TRTLLM_KV_FREE = ("NVIDIA/TensorRT-LLM: KV cache = free_gpu_memory_fraction (KvCacheConfig, default 0.9) of the "
                   "memory free after loading: PyTorch backend tensorrt_llm/_torch/pyexecutor/_util.py "
                   "KvCacheCreator.configure_kv_cache_capacity / _cal_max_memory ((total - peak of a max_num_tokens "
                   "dummy context pass) x fraction); C++ runtime cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp "
                   "BaseKVCacheManager::calculateFreeMemBytes (cudaMemGetInfo free after the engine x fraction)")
_TRTLLM_PT_GRAPHS = ("NVIDIA/TensorRT-LLM tensorrt_llm/_torch/pyexecutor/model_engine.py PyTorchModelEngine."
                     "_maybe_get_cuda_graph: no graph (None) unless the batch is generation-only "
                     "(batch.is_generation_only; later batch.can_run_cuda_graph); the LLM API's default backend from 1.0")
_VLLM_V0_SAMPLER = ("vllm-project/vllm V0 vllm/model_executor/layers/sampler.py Sampler.forward: outside the "
                    "captured graph (ModelRunner.execute_model calls self.model.sample after the graph replay), "
                    "logits.to(torch.float), logits.div_(temperatures), torch.softmax(logits, dtype=float), "
                    "torch.log_softmax(logits, dtype=float), then _sample_with_torch's greedy path "
                    "torch.argmax(logprobs[long_sample_indices], dim=-1) (a row gather, then the argmax); the "
                    "benchmark clients send temperature 0 (greedy). Read at the stored V0 sampler.py, not at the "
                    "v0.6.0 tag; the rank computation of get_logprobs (skipped when no logprobs are requested in "
                    "that copy) is left out")
_SGLANG_03_SAMPLER = ("sgl-project/sglang, SGLang 0.3-era copies (read in the stored code index, not at the v0.3.0 tag): "
                      "python/sglang/srt/layers/logits_processor.py LogitsProcessor.forward casts the decode logits "
                      "to fp32 (last_logits[:, : self.config.vocab_size].float()); python/sglang/srt/layers/sampler.py "
                      "Sampler.forward_cuda, run after the model: logits.div_(sampling_info.temperatures), "
                      "torch.softmax(logits, dim=-1), then flashinfer.sampling.top_k_top_p_sampling_from_probs over the "
                      "n x vocab probabilities (no greedy shortcut in that copy: the benchmark's temperature 0 runs "
                      "the same path, SGLang setting top_k = 1; the torch.argmax shortcut for greedy batches came "
                      "with sgl-project/sglang PR #1589, merged 2024-10-06, after v0.3.0). The FlashInfer kernel is priced as one pass over the probabilities (a row "
                      "reduction, 'argmax'): its rejection loop reads them up to max_top_k_round = 32 times, one pass "
                      "is the least it reads; torch.rand of 32 x n uniforms, the penalizer (none requested) and the "
                      "NaN check over the probabilities some copies of that period carry are left out. The cast runs inside the replayed graph (the logits processor is part of the "
                      "model's forward), priced here with the sampler's kernels")
_VLLM_V0_GRAPH_BS = ("vllm-project/vllm v0.6.0 vllm/worker/model_runner.py: _BATCH_SIZE_ALIGNMENT = 8, "
                     "_BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + [8 * i for i in range(1, 1025)], captured up to "
                     "_get_max_graph_batch_size(max_num_seqs), 256 at the default max_num_seqs (1, 2, 4, 8, 16, "
                     "..., 256); _get_graph_batch_size pads a decode batch to the next captured size")
_SGLANG_GRAPH_BS = ("sgl-project/sglang v0.3-era python/sglang/srt/model_executor/cuda_graph_runner.py / model_runner.py "
                    "init_cuda_graphs: capture_bs = [1, 2, 4] + [i * 8 for i in range(1, 21)] unless "
                    "--disable-cuda-graph-padding; a decode batch is padded to the next captured size (bisect)")
_SGLANG_03_HOST = ("0.0101 ms per sequence of every iteration, exposed (SGLang <= 0.3 runs the scheduler, the "
                   "GPU step and the output processing one after another: python/sglang/srt/managers/tp_worker.py "
                   "ModelTpServer.forward_decode_batch (a v0.3-era copy read, not the tag) calls "
                   "batch.prepare_for_decode(), the model, the sampler, next_token_ids.tolist() (a sync), then walks "
                   "every request (output_ids.append, check_finished) and handle_finished_requests (per request: the "
                   "detokenizer message, filter_batch) before the next batch is formed). Derived: sgl-project/sglang PR #1738 ('Faster overlap mode "
                   "scheduler', 2024-10-21): the overlap scheduler 'can bring 10% throughput improvement even when radix "
                   "cache is turned off' (the SGLang v0.4 blog, https://lmsys.org/blog/2024-12-04-sglang-v0-4/: "
                   "'Zero-overhead batch scheduler: 1.1x increase in throughput'); its overlap run (Llama-3.1-8B-Instruct, "
                   "--disable-radix, sglang.bench_serving ShareGPT, 3000 prompts at once) took 58.79 s for 581,627 "
                   "generated tokens, so the normal loop exposed 0.1 x 58.79 s = 5.88 s of host time; every generated "
                   "token is one sequence in one iteration, so 5.88 s / 581,627 = 10.1 us per sequence and iteration. "
                   "The source does not separate a fixed per-iteration part (at the run's batches of hundreds it is "
                   "lost in the per-sequence term): 0, not modelled. Measured on the PR's normal loop (v0.3.4 era), not "
                   "at the v0.3.0 tag")
#: SGLang 0.3.0's decode step outside its captured graph, counted in the sglang==0.3.0 wheel (python/sglang/srt).
_SGLANG_03_DECODE_HOST = (
    "26 eager ops and 6 host synchronisations a decode step, counted in the sglang==0.3.0 wheel (python/sglang/srt); "
    "ModelTpServer.forward_decode_batch (managers/tp_worker.py) runs them serially with the GPU: "
    "ScheduleBatch.prepare_for_decode (managers/schedule_batch.py): torch.tensor(input_ids, device='cuda'), "
    "seq_lens.add_(1), seq_lens - 1 and the req_to_token index assignment (4 ops); CudaGraphRunner.replay "
    "(model_executor/cuda_graph_runner.py): on a padded batch seq_lens.zero_(), position_ids_offsets.fill_(1), "
    "out_cache_loc.zero_() (3) and five input copies (5); update_flashinfer_indices "
    "(model_executor/forward_batch_info.py): torch.zeros, torch.cumsum, the kv_indptr[1:] assignment, the "
    "create_flashinfer_kv_indices_triton launch and torch.ones (5), and torch.empty(kv_indptr[-1]), whose size "
    "is read from the device (1 sync); FlashInfer 0.1's CUDAGraphBatchDecodeWithPagedKVCacheWrapper.begin_forward: "
    "three copies into its buffers and the planning call (4), which plans on the host (1 sync); "
    "SamplingBatchInfo.inplace_assign: three copies (3); torch.cuda.synchronize() before and after "
    "graph.replay() (2 syncs); then ScheduleBatch.check_sample_results' torch.all and its truth value (1 op, "
    "1 sync) and next_token_ids.tolist() (1 op, 1 sync). Views, slices and the per-request Python (inside "
    "iteration_host_per_seq_s) are not counted; nor, with tensor parallelism, the controller's per-step "
    "broadcast_recv_input over the gloo CPU group (ControllerSingle.loop_for_forward; no sourced figure)")
_SGLANG_03_PROMPT_HOST = (
    "38 eager ops and 6 host synchronisations a prompt (extend) step, and 2 ops more a request in it, counted in the "
    "sglang==0.3.0 wheel (python/sglang/srt); ModelTpServer.forward_step (managers/tp_worker.py) runs them serially "
    "with the GPU, before and after the eager forward: ScheduleBatch.prepare_for_extend (managers/schedule_batch.py): "
    "the req_to_token slice assignment (1 a request), torch.tensor of input_ids, req_pool_indices and seq_lens and "
    "torch.zeros of position_ids_offsets (4); SamplingBatchInfo.from_schedule_batch (sampling/sampling_batch_info.py): "
    "four torch.tensor of the sampling parameters (4), and BatchedPenalizerOrchestrator's cumulate_input_tokens, "
    "whose _TokenIDs makes a torch.tensor of each request's prompt (1 a request; sampling/penaltylib/orchestrator.py); "
    "ModelRunner.forward_extend -> InputMetadata.from_schedule_batch (model_executor/forward_batch_info.py): "
    "compute_positions' torch.tensor (1; its .to(torch.int64) is a no-op on NumPy's int64), compute_extend_infos' two "
    "torch.tensor, torch.zeros_like, torch.cumsum and the slice assignment (5), int(torch.sum(seq_lens)) twice "
    "(total_num_tokens and the ragged-kernel test: 2 ops, 2 syncs), update_flashinfer_indices as in a decode step "
    "(torch.zeros, torch.cumsum, the kv_indptr[1:] assignment, the create_flashinfer_kv_indices_triton launch and "
    "torch.ones: 5, and torch.empty(kv_indptr[-1]): 1 sync) plus the extend part's qo_indptr (torch.zeros, the "
    "subtraction, torch.cumsum and the assignment: 4) and FlashInfer's paged prefill begin_forward planning on the "
    "host (1 op, 1 sync, as in the decode step's count); LogitsProcessor.forward (layers/logits_processor.py): the "
    "last positions' torch.cumsum, the - 1 and the gather (3); after the forward, check_sample_results' torch.all "
    "and its truth value (1 op, 1 sync) and next_token_ids.tolist() (1 op, 1 sync); then, before the step returns "
    "its outputs to the detokenizer (ControllerSingle.loop_for_forward sends out_pyobjs after exposed_step), "
    "ScheduleBatch.merge into the running batch: SamplingBatchInfo.merge's four torch.concat and three torch.concat "
    "of the batch tensors (7). Not counted: views, slices and per-request Python (iteration_host_per_seq_s), the KV "
    "pool's prefetch refill (TokenToKVPool.alloc: torch.nonzero and three ops when its 512-slot buffer runs short), "
    "the sampler's kernels (sampler_kernels, priced with the eager step), and the 7 merge ops' absence when no batch "
    "is running")
_SGLANG = ("sgl-project/sglang python/sglang/srt/models/llama.py: the same fused QKV / gate-up GEMMs, SiluAndMul "
           "and RMSNorm kernels as vLLM; FlashInfer attention; CUDA graphs for decode")


#: How a stack runs an MoE grouped GEMM (:attr:`FrameworkProfile.grouped_gemm`).
GROUPED_GEMM_MODES = ("fused", "per_expert")
#: Megatron-LM before FlashAttention (integrated 2022-12-08, d693034e), the code of the Narayanan et al. 2021 and
#: Korthikanti et al. 2022 runs.
_MEGATRON_LM = ("NVIDIA/Megatron-LM @ d63c254127da916a49f4a9d8f0821b9141c9723e (2022-08-16) megatron/model/transformer.py: "
                "CoreAttention.forward (torch.baddbmm of Q and K^T with alpha=1/norm_factor, FusedScaleMaskSoftmax, "
                "attention_dropout, torch.bmm with V; checkpointed as a whole under --recompute-granularity selective), "
                "bias_gelu_impl, bias_dropout_add_fused_train; megatron/arguments.py: --attention-dropout and "
                "--hidden-dropout default 0.1 (examples/pretrain_gpt3_175B.sh sets neither)")

_MEGATRON_LM_OPT = ("NVIDIA/Megatron-LM @ d63c254127da916a49f4a9d8f0821b9141c9723e megatron/optimizer/optimizer.py "
                    "Float16OptimizerWithFloat16Params.step (_copy_model_grads_to_main_grads, "
                    "_unscale_main_grads_and_check_for_nan with a grad scaler (fp16 only), clip_grad_norm_fp32's "
                    "amp_C.multi_tensor_l2norm, apex FusedAdam on the fp32 main parameters, "
                    "_copy_main_params_to_model_params); megatron/arguments.py: --bf16 forces "
                    "accumulate_allreduce_grads_in_fp32 (fp32 main_grad buffers), --clip-grad default 1.0")

#: What Megatron-Core with Transformer Engine runs in a GEMM's epilogue (``FrameworkProfile.epilogue_bias_only``):
#: only a linear's bias. Its MLP builds ``linear_fc1`` and ``linear_fc2`` with ``skip_bias_add=True`` and runs the
#: activation as a kernel of its own over the GEMM's output (``bias_swiglu_impl`` / ``weighted_bias_swiglu_impl`` /
#: ``bias_gelu_impl`` under ``jit_fuser``: one read of the gate and up halves, the bias and, weighted, the routing
#: probabilities, one write); ``TEGroupedMLP`` does the same after its grouped GEMM; each residual add is
#: ``bias_dropout_add`` (its own fused kernel: the branch output, its bias and the residual read, the sum
#: written). A TE linear built with its bias added (``skip_bias_add=False``: the QKV projection) passes the bias
#: to the GEMM, which cuBLASLt adds in its ``CUBLASLT_EPILOGUE_BIAS`` epilogue.
_MCORE_EPILOGUE = (
    "NVIDIA/Megatron-LM core_v0.14.0 (23e00ed0) and 0d8e0714: megatron/core/transformer/mlp.py (MLP.__init__: "
    "linear_fc1 and linear_fc2 with skip_bias_add=True; MLP.forward: bias_swiglu_impl / weighted_bias_swiglu_impl / "
    "bias_gelu_impl on the fc1 output when bias_activation_fusion), megatron/core/fusions/fused_bias_swiglu.py "
    "(bias_swiglu, weighted_swiglu under jit_fuser), megatron/core/transformer/moe/experts.py (TEGroupedMLP.forward: "
    "the same activation kernels on the grouped GEMM's output), megatron/core/fusions/fused_bias_dropout.py "
    "(bias_dropout_add, called by TransformerLayer as self_attn_bda / mlp_bda on the residual); "
    "NVIDIA/TransformerEngine v2.9 transformer_engine/pytorch/module/linear.py, layernorm_linear.py, "
    "grouped_linear.py (general_gemm / general_grouped_gemm with bias= when the module adds its bias), "
    "transformer_engine/common/gemm/cublaslt_gemm.cu (CUBLASLT_EPILOGUE_BIAS)")

#: How Megatron-Core with Transformer Engine writes a linear weight's gradient (``FrameworkProfile.wgrad_accumulation``
#: ``"te-fused"``).
_MCORE_WGRAD_FUSION = (
    "NVIDIA-NeMo/Megatron-Bridge v0.2.0 src/megatron/bridge/models/gpt_provider.py line 181 "
    "(gradient_accumulation_fusion defaults to utils/fusions.py can_enable_gradient_accumulation_fusion: True when "
    "apex's fused_weight_gradient_mlp_cuda imports), training/config.py lines 1259-1261 (set False under Megatron "
    "FSDP); NVIDIA/Megatron-LM core_v0.15.0 megatron/core/extensions/transformer_engine.py lines 396, 567, 1158 "
    "(TELinear, TELayerNormColumnParallelLinear, TEGroupedLinear: fuse_wgrad_accumulation="
    "config.gradient_accumulation_fusion), lines 424-428 (is_first_microbatch passed to TE, then False), "
    "pipeline_parallel/schedules.py lines 383-384 (set_is_first_microbatch on each step's first microbatch); "
    "NVIDIA/TransformerEngine v2.9 transformer_engine/pytorch/module/linear.py lines 823-853 (the wgrad GEMM's out "
    "is main_grad, out_dtype main_grad.dtype, accumulate = fuse_wgrad_accumulation and not is_first_microbatch), "
    "module/grouped_linear.py lines 337-341, 385, 422-424 (the same per expert), common/gemm/cublaslt_gemm.cu line "
    "775 (beta = accumulate ? 1 : 0: C, the main gradient, read and D written in its dtype); Megatron-Core's "
    "output layer (tensor_parallel/layers.py lines 553-566, ColumnParallelLinear) calls apex's "
    "fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32 / _fp16 on main_grad, which always accumulates")
#: The same in Megatron-LM of 2022 (``FrameworkProfile.wgrad_accumulation`` ``"megatron-fused-fp32"``).
_MEGATRON_LM_WGRAD_FUSION = (
    "NVIDIA/Megatron-LM @ d63c254127da916a49f4a9d8f0821b9141c9723e megatron/arguments.py lines 618-622 "
    "(--no-gradient-accumulation-fusion: on by default) and 164-191 (turned off unless the gradients accumulate in "
    "fp32: --bf16 forces accumulate_allreduce_grads_in_fp32, --fp16 does not); megatron/mpu/layers.py lines 297-299 "
    "(fused_dense_cuda.wgrad_gemm_accum_fp32 into weight.main_grad); megatron/fused_kernels/"
    "fused_weight_gradient_dense.cu lines 128-152 (cublasGemmEx with beta = 1, C and D CUDA_R_32F: every call "
    "reads and writes the fp32 main gradient); added 2022-02-13 (83b1e42f, 'gradient accumulation fusion'), so "
    "not in the 2021 code")

#: Transformer Engine's GroupedLinear as Megatron-Core's TEGroupedMLP runs it (``moe_grouped_gemm`` with TE).
_TE_GROUPED = ("NVIDIA/TransformerEngine release_v2.9 (Megatron-Bridge v0.2.0, the NeMo 25.11 release, pins "
               "transformer-engine >=2.9,<2.10 and megatron-core 0.15) and f031cf87 (v2.14, 2026-04-06, pinned by "
               "Megatron-Bridge 270536cc): pytorch/module/grouped_linear.py _GroupedLinear.forward/backward call "
               "general_grouped_gemm for fc1/fc2 forward, dgrad and wgrad; common/gemm/cublaslt_gemm.cu "
               "nvte_multi_tensor_gemm runs multi_stream_cublas_gemm (CUTLASS grouped GEMM only on Hopper with "
               "NVTE_USE_CUTLASS_GROUPED_GEMM, default false), which launches one cuBLASLt GEMM per expert, GEMM i "
               "on compute stream i % 4 (common/util/multi_stream.cpp num_compute_streams = 4); "
               "pytorch/csrc/extensions/cast.cpp split_quantize -> multi_tensor_quantize_impl quantises each expert's "
               "split with its own kernel(s) unless every quantizer is delayed scaling (the fused "
               "nvte_multi_cast_transpose); NVIDIA/Megatron-LM core_v0.15.0 megatron/core/transformer/moe/experts.py "
               "TEGroupedMLP: linear_fc1 / linear_fc2 are TE grouped linears over tokens_per_expert.tolist(); "
               "token_dispatcher.py MoEAlltoAllTokenDispatcher: dispatch_postprocess sorts the received tokens by "
               "local expert (sort_chunks_by_idxs, TE's fused_sort_chunks_by_index with moe_permute_fusion) when "
               "num_local_experts > 1, combine_preprocess restores the order the same way; TEGroupedMLP builds "
               "linear_fc1 with bias=add_bias_linear, skip_bias_add=False (the bias goes to general_grouped_gemm) "
               "and linear_fc2 with skip_bias_add=True, then _apply_bias adds fc2's bias as torch.cat([t + b * p "
               "for t, b, p in zip(torch.split(out, tokens_per_expert), biases, torch.split(probs, "
               "tokens_per_expert))]) (experts.py @ core_v0.15.0, at 0d8e0714, the core_dev_r0.15.0 commit "
               "Megatron-Bridge v0.2.0 pins, and at 580d53a8, the commit Megatron-Bridge 270536cc pins)")


#: The SMs Megatron-Core's dispatchers' kernels hold: DeepEP's, HybridEP's, and NCCL's channels for the alltoall one.
_MCORE_DEEPEP_SMS = (
    "NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py: moe_deepep_num_sms: int = 20 ('Number of "
    "SMs to use for DeepEP') at core_v0.15.0, core_v0.16.0, core_v0.17.0 and core_v0.18.0; "
    "megatron/core/transformer/moe/fused_a2a.py set_deepep_num_sms -> deep_ep Buffer.set_num_sms, the SMs DeepEP's "
    "dispatch and combine kernels launch on. NVIDIA, 'Scalable Training of Mixture-of-Experts Models with Megatron "
    "Core', arXiv 2603.07685 (2026), section 4.2.3: with the all-to-alls overlapped, DeepEP takes 20 SMs per GPU on "
    "DeepSeek-V3 (H100) and costs about 20% of the GEMMs' efficiency (132 / 112 SMs = 1.18). The alltoall "
    "dispatcher's all-to-all is torch.distributed.all_to_all_single (token_dispatcher.py @ core_v0.15.0), an NCCL "
    "grouped send/receive: NVIDIA/nccl src/enqueue.cc ncclLaunchKernel launches grid = {plan->channelCount}, one "
    "thread block per channel, each on an SM of its own. HybridEP: transformer_config.py moe_hybridep_num_sms: int = "
    "16 ('Number of SMs to use for HybridEP. In pure NVL scenarios, 16 SMs can generally achieve good bandwidth') at "
    "0d8e0714 (core_dev_r0.15.0, pinned by Megatron-Bridge v0.2.0; also core_v0.16.0 and core_v0.17.0; None, "
    "DeepEP HybridEPBuffer's own default, from core_v0.17.1), which token_dispatcher.py passes to hybrid_ep_dispatch as num_sms_dispatch_api and "
    "num_sms_combine_api (HybridEPBuffer, fused_a2a.py)"
)
#: Megatron-Core's clamped quick-GEGLU of GPT-OSS's experts (``FrameworkProfile.clamped_glu_families``)
_MCORE_CLAMPED_GLU = (
    "NVIDIA/Megatron-LM 0d8e0714 (Megatron-Bridge v0.2.0's submodule, the 25.11 container) and 580d53a8 (26.04): "
    "megatron/core/transformer/moe/experts.py TEGroupedMLP.forward, with bias_activation_fusion and "
    "activation_func quick_gelu and gated_linear_unit, calls weighted_bias_quick_geglu_impl(..., "
    "config.glu_linear_offset, config.activation_func_clamp_value) inside the moe_act checkpoint (bias_act_func); "
    "megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl: with a clamp value, "
    "input.chunk(2, -1), x_glu.clamp(max=v), x_linear.clamp(min=-v, max=v) and torch.cat of the two, eagerly, "
    "then linear_offset = torch.tensor(linear_offset, dtype=..., device=input.device) before "
    "WeightedQuickGeGLUFunction.apply (weighted_quick_geglu and its backward under jit_fuser = torch.compile, "
    "megatron/core/jit.py); unchanged on Megatron-LM main @ d98e8a64 (2026-08-22). A CPU scalar copied to the "
    "device without non_blocking synchronises the stream: PyTorch aten/src/ATen/native/cuda/Copy.cu copy_kernel_cuda "
    "calls at::cuda::memcpy_and_sync (cudaMemcpyAsync then cudaStreamSynchronize, c10/cuda/CUDAFunctions.h); "
    "pytorch/pytorch issue #120996 (torch 2.1: torch.tensor(3.14, device=dev) reported as 'a synchronizing CUDA "
    "operation' by torch.cuda.set_sync_debug_mode, torch.full does not) and issue #190217 (2026-07-16, open: "
    "'torch.tensor(3.14., device=\"cuda\") should avoid h2d sync when the input is a scalar', reproduced on torch "
    "2.11). "
    "NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/models/gpt_oss/gpt_oss_provider.py @ v0.2.0 (GPTOSSProvider: "
    "activation_func quick_gelu, glu_linear_offset 1.0, activation_func_clamp_value 7.0, bias_activation_fusion "
    "True) and gpt_oss_bridge.py @ 270536cc (the same four settings); use_te_activation_func defaults to False "
    "(transformer_config.py at both commits)"
)
#: The collectives of Megatron-Core's alltoall dispatcher beside the token all-to-alls.
_MCORE_DISPATCH_COLLECTIVES = (
    "NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py at 0d8e0714 (core_dev_r0.15.0, pinned by "
    "Megatron-Bridge v0.2.0, the 25.11 release), the same at core_v0.14.0 (Megatron-Bridge v0.1.0, the 25.09 "
    "release) and 580d53a8 (0.18.0): MoEAlltoAllTokenDispatcher.preprocess, without drop_and_pad, gathers "
    "num_local_tokens_per_expert (routing_map.sum(dim=0).long(): one int64 per global expert) from every rank of "
    "the tensor-and-expert group with gather_from_sequence_parallel_region (megatron/core/tensor_parallel/"
    "mappings.py _gather_along_first_dim: torch.distributed.all_gather_into_tensor, an NCCL all-gather on the "
    "current stream), before the device-to-host copies and the wait at before_ep_alltoall; token_dispatch runs "
    "all_to_all(self.ep_group, permuted_probs, output_splits, input_splits) after the tokens' all_to_all, in both "
    "modes, and _AllToAll.backward runs the reverse all-to-all of the probabilities' gradient "
    "(mappings.py _AllToAll, torch.distributed.all_to_all_single)")
#: The framework ops of Megatron-Core's dropless dispatchers beside the permute and the token all-to-all.
_MCORE_DISPATCH_HOST = (
    "NVIDIA/Megatron-LM megatron/core/transformer/moe/token_dispatcher.py at 0d8e0714 (core_dev_r0.15.0, pinned by "
    "Megatron-Bridge v0.2.0, the 25.11 release) and 580d53a8 (0.18.0, pinned by Megatron-Bridge 270536cc), identical "
    "in these paths. MoEAlltoAllTokenDispatcher, expert parallelism without tensor parallelism, no capacity: "
    "preprocess runs routing_map.sum(dim=0), .long(), the input splits' reshape().sum(axis=1), "
    "gather_from_sequence_parallel_region of the counts (an all-gather over the EP group), the local experts' "
    "slice .contiguous(), the output splits' sum(axis=2) and sum(axis=1) and num_tokens_per_local_expert's "
    "sum(dim=(0, 1)): 8, of which the all-gather is a collective of the graph (count_all_gather, "
    "moe_dispatch_collectives), 7 host-only; _maybe_dtoh_and_synchronize copies tokens_per_expert, input_splits, "
    "output_splits and output_splits_tp to the host (maybe_move_tensor_to_cpu, non_blocking): 4; 11 host-only "
    "before d2h_event.synchronize() (the permute is the graph's moe_dispatch); token_dispatch then runs a second "
    "all_to_all for the permuted probabilities, a collective of the graph (probs_all_to_all): none after. "
    "Flex dispatcher with the HybridEP backend (_HybridEPManager): the metadata are "
    "views, hybrid_ep_dispatch is the graph's dispatch and all-to-all, then self.tokens_per_expert.sum(): 1 after "
    "(the probabilities' .float() runs only when the router's dtype is not fp32, not read from the recipes)")


#: Host time of one replay of a captured CUDA graph (``cudaGraphLaunch`` of an instantiated, uploaded graph
#: of kernel nodes): ``(base s, s per node)`` by the CUDA driver branch that runs it. The launch is the
#: driver's work (``cuGraphLaunch``), so the form follows the driver, not the toolkit a wheel was built with.
#: ``"pre-12.6"``: CUDA 11.8 and its driver, launch time linear in the nodes; ``"12.6"``: CUDA 12.6 and its
#: driver, a straight-line graph (each node depending on the one before, as a one-stream capture is) in
#: near-constant time. Source: :data:`GRAPH_LAUNCH_SOURCE`.
GRAPH_LAUNCH_FORMS: dict[str, tuple[float, float]] = {
    "pre-12.6": (2.0e-6, 200e-9),
    "12.6": (2.5e-6, 1e-9),
}
GRAPH_LAUNCH_SOURCE = ("NVIDIA Technical Blog, H. Hoffman and F. Oh, 'Constant Time Launch for Straight-Line CUDA "
                       "Graphs and Other Performance Enhancements' (2024-09-11), https://developer.nvidia.com/blog/"
                       "constant-time-launch-for-straight-line-cuda-graphs-and-other-performance-enhancements/: "
                       "repeat-launch CPU overhead of a straight-line graph, 2 us + 200 ns per node with CUDA 11.8, "
                       "2.5 us + ~1 ns per node with CUDA 12.6 and its driver (Intel Xeon Silver 4208 at 2.1 GHz, "
                       "GeForce RTX 3060, Ubuntu 22.04, default clocks); the per-node forms as the post's summary "
                       "states them (its figures' rows not read)")


def graph_launch_s(form: str, nodes: int) -> float:
    """Host time (s) of one replay of a captured graph of ``nodes`` kernel nodes under the driver ``form``
    (a key of :data:`GRAPH_LAUNCH_FORMS`; ``""``: not stated, 0).

    >>> round(graph_launch_s("pre-12.6", 1000) * 1e6, 1), round(graph_launch_s("12.6", 1000) * 1e6, 1)
    (202.0, 3.5)
    """
    if not form:
        return 0.0
    base, per_node = GRAPH_LAUNCH_FORMS[form]
    return base + per_node * max(int(nodes), 0)


_GRAPH_LAUNCH_V0_SGL03 = ("not modelled: vLLM 0.6.0 and SGLang 0.3.0 (which pins vllm==0.5.5 in python/pyproject.toml) "
                          "run torch 2.4.0, whose PyPI wheels carry the CUDA 12.1 runtime; the launch time of a CUDA "
                          "graph follows the driver (cuGraphLaunch, GRAPH_LAUNCH_FORMS), and the published rows of "
                          "these engines state no driver version (settings: graph_launch = 'pre-12.6' or '12.6')")
_GRAPH_LAUNCH_UNSTATED = ("not modelled: the launch time of a CUDA graph follows the driver (GRAPH_LAUNCH_FORMS), and "
                          "no stated driver version is recorded for this stack's deployments")
#: SGLang >= 0.4 keeps every layer at full context for GPT-OSS and Gemma 3 (layout "full"; docs/serving.md).
_SGLANG_SWA_OFF = ("full: sglang 0.4.0 (the release the v0.4 blog names) has one MHATokenToKVPool of every layer; the "
                   "window pool (SWAKVPool, swa_full_tokens_ratio 0.8) of 0.5.1 and 0.5.5 is forced off for "
                   "GptOssForCausalLM and Gemma 2/3 (server_args.py _handle_model_specific_adjustments: "
                   "disable_hybrid_swa_memory = True); serve --kv-window-layout sglang-swa models it where it is on")
#: vLLM V1's hybrid KV cache manager (simulator.serving.kvcache, layout "vllm-hybrid").
_VLLM_HYBRID_KV = ("vllm-project/vllm vllm/v1/core/kv_cache_utils.py @ 001cabc1be16a59a70d720ed61a13b678c060a18 "
                   "(_get_kv_cache_groups_uniform_page_size: groups of group_size layers, group_size the fewest "
                   "layers of an attention type, or the most when under 1.5 x the fewest; "
                   "get_kv_cache_config_from_groups: num_blocks = available_memory // page_size // group_size, one "
                   "pool shared by every group) and vllm/v1/core/single_type_kv_cache_manager.py @ "
                   "002f34915134cfd1a7d6ed777edd67dcc2289466 (SlidingWindowManager.remove_skipped_blocks frees the "
                   "blocks before (num_computed_tokens - sliding_window + 1) // block_size); off with "
                   "--disable-hybrid-kv-cache-manager, a KV connector (--kv-transfer-config), KV events or a "
                   "platform without support (VllmConfig.__post_init__)")
_ENGINE_AR = ("vLLM's custom all-reduce (hwmodels.collectives.VLLM_CUSTOM_AR_RULE: vllm-project/vllm "
              "csrc/custom_all_reduce.cuh and vllm/distributed/device_communicators/custom_all_reduce.py, from PR "
              "#2192, v0.2.7): on by default unless --disable-custom-all-reduce; SGLang's model runner enables it "
              "(set_custom_all_reduce(not server_args.disable_custom_all_reduce)), with vLLM's communicator in the 0.3 "
              "era and its own copy of the same kernels later")

_ENGINE_AR_2024 = (_ENGINE_AR + "; the build before vllm-project/vllm PR #8558 (2024-09, the two-stage kernel's "
                   "__threadfence_system, 6~7 us a call on H100 by the PR's author): 'vllm-custom-2024', "
                   "hwmodels.collectives.VLLM_CUSTOM_AR_2024. vLLM 0.6.0 (2024-09-05) and the CI builds of about "
                   "2024-09-17 predate it, as does SGLang 0.3.0 (Requires-Dist vllm==0.5.5)")
#: vLLM V0's per-step broadcast of the model input from the driver to the other tensor-parallel ranks.
_VLLM_V0_INPUT_BROADCAST = (
    "vllm 0.6.0 wheel: vllm/worker/multi_step_worker.py MultiStepWorker._get_driver_input_and_broadcast (every step "
    "of a multi-step block: on steps after the first it re-sends the cached model input with the last sampled token "
    "ids) and vllm/worker/worker_base.py LocalOrDistributedWorkerBase (single-step) call "
    "vllm/distributed/parallel_state.py GroupCoordinator.broadcast_tensor_dict: the metadata by broadcast_object, "
    "then one torch.distributed.broadcast on the NCCL device group for every non-empty GPU tensor, waited on "
    "before the step. A decode step's tensors (FlashAttention backend): input_tokens, input_positions "
    "(model_runner.ModelInputForGPU.as_broadcastable_tensor_dict); slot_mapping, seq_lens_tensor, "
    "query_start_loc, seq_start_loc, context_lens_tensor, block_tables (FlashAttentionMetadata via "
    "asdict_zerocopy); selected_token_indices (_add_sampling_metadata_broadcastable_dict); "
    "last_sampled_token_ids (multi_step_model_runner.StatefulModelInput); the swap / copy block lists are empty "
    "in these runs and skipped: 10 broadcasts, each of a few KB")


_TRTLLM_AR = ("NCCL priced: TensorRT-LLM's engines do run its custom all-reduce (AUTO strategy; trtllm-build 0.9.0 "
              "defaults --use_custom_all_reduce to enable, and later releases select it at run time), but the "
              "releases this profile stands for (1.x, in-flight batching) pick the kernel from per-GPU lookup tables "
              "and Lamport one-shot kernels (NVIDIA/TensorRT-LLM issue #2575: TWOSHOT disabled in "
              "selectImplementation by late 2024), a rule not read here; the 0.9-era rule is EvalOptions "
              "all_reduce_kernel 'trtllm-custom' (hwmodels.collectives.TRTLLM_CUSTOM_AR_RULE), switched on for a "
              "published row whose notes state the plugin")


class FrameworkError(NodeperfError, ValueError):
    """An unknown framework name or a malformed framework field (one located line)."""


@dataclass(frozen=True)
class FrameworkProfile:
    """One software stack: its graph changes and its costing options.

    Attributes
    ----------
    name
        The ``--framework`` name.
    title
        One line: what the stack is.
    attention
        ``"fused"`` (one attention kernel) or ``"decomposed"`` (QK^T, scale, mask, softmax, PV over
        the full ``s x s`` scores); ``""`` keeps the builder's default (fused).
    logits
        ``"all"``: the LM head runs for every position of a prefill (a Hugging Face ``forward``);
        ``""`` keeps the builder's default (last position only in prefill).
    eager_ops
        Issue activations, RMSNorm and RoPE op by op as the Hugging Face model code writes them
        (``gelu_new`` is 8 kernels), and the head merge as a ``contiguous`` copy.
    eager_norm
        The model code's RMSNorm runs op by op (upcast to fp32, ``pow``, ``mean``, ``+ eps``, ``rsqrt``,
        multiply, downcast, ``* weight``) without the rest of ``eager_ops``: torchtitan's ``RMSNorm``
        (``norm_type = "rmsnorm"``) before it switched to ``nn.RMSNorm`` (source: ``_TORCHTITAN_EAGER_MODEL``).
    eager_final_norm
        The model's final norm alone runs op by op as ``eager_norm`` issues it, the transformer blocks' norms as
        the rest of the profile does: torchtitan's ``--compile`` of December 2024 compiled each ``TransformerBlock``
        only, so its Python ``RMSNorm`` after the last block ran eagerly and kept its fp32 input and 16-bit
        normalised output for the backward (source: ``_TORCHTITAN_FINAL_NORM``).
    complex_rope
        RoPE as torchtitan's ``apply_rotary_emb`` runs it: the query and the key each upcast to fp32,
        multiplied as complex numbers by ``freqs_cis`` and cast back (three kernels per tensor; the
        ``view_as_complex`` / ``view_as_real`` reshapes are views), also under torch.compile, where the complex
        product is an ATen fallback kernel (source: ``_INDUCTOR_COMPLEX``).
    repeat_kv
        The model code copies each key/value head to its query heads before SDPA (torchtitan's ``repeat_kv``:
        ``expand`` then ``reshape``, a materialised copy; torchtitan/models/llama/model.py @ 9dec370 lines 201-202,
        torchtitan/models/llama3/model.py @ 820504e and e7c0cae lines 250-251), so the attention runs over ``hq``
        key/value heads and its key/value gradients are summed back over the copies.
    fused_rope
        RoPE runs as a library kernel per tensor, each way: Transformer Engine's fused RoPE
        (``apply_rotary_pos_emb(..., fused=True)``, NeMo AutoModel's ``BackendConfig.rope_fusion``; source
        ``_AUTOMODEL_MODEL``): under torch.compile nothing fuses into it or it into a generated kernel (the op
        is marked ``aten_fallback``), so the query's and the key's RoPE are two kernels, not one.
    unfused_rope_families
        Model families (``ModelEntry.family``) whose position embedding the stack runs op by op although
        ``fused_rope`` is set: Megatron-Bridge turns ``apply_rope_fusion`` off for a position embedding other
        than plain RoPE (GPT-OSS's YaRN), and Megatron-Core's ``_apply_rotary_pos_emb_bshd`` runs instead
        (source: ``_MCORE_ROPE``; the transformer builder's ``mcore_unfused_rope``).
    clamped_glu_families
        Model families (``ModelEntry.family``) whose experts' gated activation clamps both halves first
        (GPT-OSS: the gate at most 7, the linear half within +-7, then ``quick_gelu(gate) * (up + 1)``) and
        whose stack runs the clamps apart from its activation kernel: Megatron-Core's
        ``weighted_bias_quick_geglu_impl`` clamps each half and concatenates them eagerly (three kernels each
        way: two clamps and a ``torch.cat``; backward two clamp gradients and the chunk's concatenation), then
        copies the linear offset to the device from a CPU scalar, which synchronises the host with the stream
        (the ``host_sync`` of the concatenation, also in its ``moe_act`` recomputation); source
        ``_MCORE_CLAMPED_GLU``. The activation and the gated product stay one compiled kernel.
    split_qkv_copies
        The copies Megatron-Core's split of the fused QKV output costs before Transformer Engine's attention
        (source: ``_MCORE_ROPE``): with grouped queries (more than one query group on the rank, more than one
        query head a group) the query's ``reshape`` to heads copies it; a Transformer Engine RMSNorm (QK-norm)
        makes its strided input contiguous; and with RoPE or QK-norm ``DotProductAttention`` finds no supported
        layout for the value's strided view beside the query and key tensors they wrote, so it copies the
        value (``get_qkv_layout``). Each copy's gradient is the gradient itself (no kernel). Not modelled: the
        copies ``get_qkv_layout`` makes of a grouped-query model without RoPE or QK-norm.
    matmul_copies
        The model code's ``torch.matmul`` runs the decomposed attention's products (eagerly, or traced
        into a compiled program by AOTAutograd, which keeps the reshape's clone: :data:`_INDUCTOR_MATMUL`):
        at batch > 1 it copies the permuted q, k and v head views before the products (``at::matmul`` reshapes both 4-d operands, pytorch/pytorch
        ``aten/src/ATen/native/LinearAlgebra.cpp``, ``_matmul_impl``); only with ``eager_ops``.
    dropout
        Training graphs carry the dropout kernels of the model's Hugging Face config (p > 0 only).
    fusion, epilogue_fusion, norm_fusion, cuda_graphs, eager_dispatch, attention_kernel, conv_layout
        Costing: ``EvalOptions.fusion`` / ``epilogue_fusion`` / ``norm_fusion`` / ``cuda_graphs`` / ``eager_framework`` /
        ``attention_kernel`` / ``conv_layout`` (the memory format convolutions receive: ``"nchw"`` for
        PyTorch programs that keep the default contiguous format).
    iteration_host_s
        Serving: host time of one engine iteration (scheduling, input preparation, sampling, output
        processing) not overlapped with the device, in seconds (:mod:`simulator.serving`); 0 where no
        sourced figure is recorded (``iteration_host_source`` says where a value comes from).
    iteration_host_per_seq_s
        Serving: host time per sequence of the batch, added to ``iteration_host_s`` (input
        preparation grows with the sequences); 0 where no sourced figure is recorded.
    iteration_host_source
        The source of ``iteration_host_s`` and ``iteration_host_per_seq_s``.
    call_host_s, graph_call_host_s, call_host_source
        A compiled program's host time per call outside its kernels, serial with them when the caller waits
        for each call: ``call_host_s`` in every mode (TorchDynamo's cache lookup and guards, the AOTAutograd
        wrapper), ``graph_call_host_s`` added when the program is replayed from a CUDA graph (the CUDA-graph
        tree's run-time checks and the graph launch); 0 where no sourced figure is recorded.
    graph_launch, graph_launch_source
        Serving: the CUDA driver form (a key of :data:`GRAPH_LAUNCH_FORMS`) of the host time of one decode-graph
        replay (``cudaGraphLaunch``: base + per node x the graph's kernels), serial with the step where the
        engine waits for each step; ``""``: the driver the stack's deployments ran is not stated, not modelled
        (``graph_launch_source`` says why).
    waits_each_step
        Serving: the engine waits for each step's sampled tokens on the host before it launches the next
        step (vLLM V0 without multi-step, SGLang <= 0.3), so a graph launch sits on the critical path; False:
        the engine launches step n + 1 while step n runs (vLLM V1, SGLang's overlap scheduler from 0.4,
        TensorRT-LLM's overlap scheduler) and a graph launch shorter than the step is hidden.
    decode_host_ops, decode_host_syncs
        Serving: the framework ops (each launching a kernel or a copy) a synchronous engine dispatches
        eagerly outside the captured decode graph every decode step, and the host synchronisations of that
        step, counted from its code (``decode_host_source``). The engine waits on the host before and after
        the replay, so the GPU is idle while they run: each op is priced at the device's
        ``efficiency.framework_op_overhead_s``, each synchronisation at ``efficiency.host_sync_s``, charged
        with the host time of every iteration replayed from a graph
        (:meth:`simulator.serving.iteration.IterationPricer.decode_host_time`); 0: none counted.
    decode_host_source
        Where ``decode_host_ops`` and ``decode_host_syncs`` are counted.
    prompt_host_ops, prompt_host_syncs, prompt_host_ops_per_seq
        Serving: the framework ops and host synchronisations a synchronous engine runs outside the model's forward
        in a step that carries prompts (building the batch's tensors, the attention planner's metadata, reading the
        sampled tokens back, merging the new requests into the running batch), counted from its code
        (``prompt_host_source``); ``prompt_host_ops_per_seq`` more ops for each prompt in the step. Serial with the
        GPU as ``decode_host_ops`` are, at the same device figures, charged with the host time of every iteration
        that carries a prompt (:meth:`simulator.serving.iteration.IterationPricer.prompt_host_time`); 0: none
        counted.
    prompt_host_source
        Where ``prompt_host_ops``, ``prompt_host_syncs`` and ``prompt_host_ops_per_seq`` are counted.
    graphs_decode_only
        Serving: CUDA graphs replay decode-only iterations only; an iteration that carries a prompt (or a
        chunk of one) runs the model's ``nn.Module`` forward eagerly (per-op framework dispatch, no graph),
        as vLLM V0, SGLang and TensorRT-LLM's PyTorch backend run it (``graphs_decode_source``).
    graphs_decode_source
        The code that decides it.
    output_lag_steps
        Serving: the engine hands the client a token this many iterations after the one that sampled it
        (vLLM V0's asynchronous output processing: the outputs of step n are processed while step n + 1 runs
        and returned when step n + 1 ends; in a multi-step block, when its first step is launched); every
        delivery, first token and last, moves by that lag, so TTFT and end-to-end latency grow and TPOT does
        not (``output_lag_source``).
    output_lag_source
        The code that decides it.
    fp8_gemm_accumulation
        How the stack's forward fp8 GEMMs accumulate on Hopper, from its code: ``"fast"`` (the WGMMA accumulator
        only), ``"split"`` (cuBLASLt ``CUBLASLT_MATMUL_DESC_FAST_ACCUM = 0``: FP32 promotions,
        :func:`simulator.lowering.gpu.fp8_promotion`) or ``""`` (not stated for the default build; priced as
        fast). Which builds run which path, and the code: ``fp8_gemm_accumulation_source``. Priced through
        ``EvalOptions.fp8_accumulation`` (:meth:`cost_options`; ``""`` gives ``"fast"``); no validated row's build
        is stated to run a split forward path.
    fp8_gemm_accumulation_source
        The code that decides it.
    sources
        The framework code or documentation each choice follows.
    devices
        The devices the stack runs on: ``(kind, vendor)`` pairs (kind as a device spec's ``kind``,
        vendor a case-insensitive prefix of its ``vendor``; ``""`` any); see :meth:`applies_to`.
    stack
        The training stack's plan-level behaviour (:mod:`simulator.parallel.stacks`): ``"fsdp2"``
        (per-parameter sharding, copy-out kernels on the compute stream, prefetched all-gathers),
        ``"megatron-core"`` or ``"xla-spmd"``; ``""``: the plan's generic composition.
    grad_reduce_dtype
        The dtype gradients are reduced in across data-parallel ranks (``"fp32"``: FSDP2's
        ``reduce_dtype=float32``); ``""``: the parameters' dtype.
    compiled_loss
        The training loss runs under torch.compile (torchtitan's ``build_cross_entropy_loss`` with
        ``--compile``): Inductor fuses the fp32 upcast of the logits, the log-softmax and the NLL, and
        their backward, so no fp32 logit-sized tensor is materialised (eager PyTorch holds three).
    tp_comm_overlap
        Sequence-parallel all-gathers and reduce-scatters are decomposed into ``tp`` chunks pipelined
        with the GEMM they feed or follow (Transformer Engine userbuffers, ``--tp-comm-overlap``; XLA's
        continuation fusion on TPUs).
    tp_overlap_collectives
        Which of them ``tp_comm_overlap`` overlaps (``"all_gather"``, ``"reduce_scatter"``).
    collective_overlap
        Under a sharded stack, the FSDP all-gathers and gradient reductions (and the data-parallel all-reduce
        across replicas) run concurrently with compute; False: each runs serial with the device's compute
        (:func:`simulator.parallel.stacks.sharded_step`; ``maxtext-serial``, a bound: XLA:TPU's defaults overlap
        the all-gathers).
    reduce_overlap
        With ``collective_overlap``, the gradient reductions overlap compute as well; False: the all-gathers
        overlap compute and the FSDP gradient reductions run serial with it, as XLA:TPU runs them unless a flag
        makes them asynchronous or offloads them to the SparseCore (``maxtext``, ``maxtext-cf``).
    traced_remat
        Training: the stack's activation recomputation is traced and compiled (``jax.checkpoint`` under XLA), so
        recomputed ops whose results the backward never reads are dead code that never runs, and the next layer
        reads a layer's saved output rather than a recomputed copy (:func:`workloads.training.prune_dead_recompute`);
        False: every recomputed op runs (an eager re-run of the layer).
    sampler_kernels
        Serving: the kernels the stack's sampler launches every step over the ``n x vocab`` logits of the
        ``n`` sequences that sample, outside the CUDA graph (:func:`workloads.serving.sampler_graph` names:
        ``to_fp32``, ``temperature``, ``softmax``, ``log_softmax``, ``gather_rows``, ``argmax``); empty: not
        modelled. Source in ``sampler_source``.
    sampler_host_s, sampler_host_per_seq_s, sampler_host_source
        Serving: the host time of the stack's sampler call in an iteration, ``sampler_host_s +
        sampler_host_per_seq_s x`` its sequences (its launches, Python and tensor set-up), serial with the step
        where the engine waits for the sampled tokens; the ``sampler_kernels`` stay device time. Charged with the
        iteration's host time by ``nodeperf serve`` (:meth:`simulator.serving.iteration.IterationPricer.host_time`)
        and the software-stack validation's decode rows
        (:func:`simulator.calibration.frameworks_validation.decode_sampler_s`); 0: not modelled
        (``sampler_host_source`` says where a value comes from).
    all_reduce_kernel
        Who runs the stack's one-node tensor-parallel all-reduces (``EvalOptions.all_reduce_kernel``): ``"nccl"``
        or the engine's own kernel (``"vllm-custom"``: vLLM's custom all-reduce, which vLLM and SGLang run by
        default on 2 GPUs or a fully NVLink-connected node for messages below 8 MiB; ``"trtllm-custom"``:
        TensorRT-LLM's custom all-reduce plugin with its 0.9-era one-shot / two-shot rule). Source in
        ``all_reduce_source``; ``"vllm-custom-2024"``: vLLM's kernel as builds before vLLM PR #8558 ship it.
    step_broadcasts, step_broadcast_source
        Serving: the NCCL broadcasts over the tensor-parallel group that carry each step's model input from the
        driver rank to the others before the step runs (vLLM V0's ``broadcast_tensor_dict``: one a non-empty
        tensor), device time serial with every step, each priced as one small broadcast by the fabric model
        (:meth:`simulator.serving.iteration.IterationPricer.step_broadcast_time`); 0: none (one device, or an
        engine whose ranks schedule for themselves). Counted in ``step_broadcast_source``.
    graph_batch_sizes
        Serving: the batch sizes the stack captures decode CUDA graphs for; a decode-only iteration of
        ``B`` sequences replays the graph of the smallest captured size ``>= B`` (its token-wise work runs
        at the padded batch); empty: no padding modelled. Source in ``graph_batch_source``.
    kv_window_layout
        Serving: how the KV cache holds sliding-window layers (:data:`simulator.serving.kvcache.KV_WINDOW_LAYOUTS`):
        ``"full"`` (every layer at the full context), ``"vllm-hybrid"`` (vLLM V1's hybrid KV cache manager: layer
        groups sharing one pool of pages, window groups freeing the blocks behind their window) or ``"sglang-swa"``
        (SGLang's pools of full-attention and window tokens; no profile's default). Source in
        ``kv_window_layout_source``.
    kv_cache_sizing
        Serving: how the engine sizes its KV cache (:mod:`simulator.serving.kvcache`): ``"device"`` (vLLM:
        ``gpu_memory_utilization`` of the device less weights and activations) or ``"free"`` (TensorRT-LLM:
        ``free_gpu_memory_fraction`` of the memory left once weights and the profiling pass's activations are
        allocated). Source in ``kv_cache_sizing_source``.
    grouped_gemm_tile_rows
        Rows of one m tile of the stack's MoE grouped matmul when every expert's group of rows starts a new
        pass over a tile (MaxText's Megablox ``gmm``: ``tile_batch_seq``); 0: not modelled (rows priced as
        evenly shared by the active experts).
    grouped_gemm_tile_cols
        Columns of one n tile of that grouped matmul (MaxText's Megablox ``gmm``: ``tile_mlp_dim`` for the
        up-projection's calls, ``tile_embed_dim`` for the down-projection's, both 1024 in ``configs/base.yml``
        and in every MoE workload of the training dataset), the kernel's only grid axis marked ``"parallel"``
        and so the one split over a megacore's TensorCores; 0: not modelled.
    grouped_gemm
        How the stack runs an MoE layer's grouped GEMM (:data:`GROUPED_GEMM_MODES`): ``"fused"`` (one kernel
        over every local expert, the default) or ``"per_expert"`` (one GEMM kernel per local expert, issued
        from one library call round-robin on ``grouped_gemm_streams`` CUDA streams: Transformer Engine's
        ``GroupedLinear`` through ``multi_stream_cublas_gemm``, source in ``grouped_gemm_source``); the
        per-expert fp8 quantisation of the inputs runs one kernel per expert likewise.
    grouped_gemm_streams
        The streams ``"per_expert"`` GEMMs run on (concurrently, as the GPU admits); 0 with ``"fused"``.
    grouped_gemm_source
        The code that decides ``grouped_gemm``.
    moe_sort_chunks
        With expert parallelism and several local experts, the sparse (all-to-all) dispatcher sorts the rows
        it receives from expert-major per source rank into one block per local expert after the dispatch
        all-to-all, and back before the combine all-to-all: a copy of the received rows each way, and one
        each way again in the backward (Megatron-Core's ``alltoall`` dispatcher, ``sort_chunks_by_idxs``,
        source in ``grouped_gemm_source``); False: the experts read the received rows in place.
    moe_sort_copies
        The sparse (dropless) dispatch as MaxText's ``sparse_matmul`` runs it as separate XLA ops
        (``_MAXTEXT_PERMUTE``): with ``top_k`` > 1 the ``top_k`` copies of every token are written (``jnp.repeat``)
        before the sort's gather reads them, and the gather back to token order writes the routed rows before
        the float32 weighted sum reads them; each is a pass of the routed rows through HBM that a fused
        permute (one gather from the tokens, one gather-and-sum into them) does not make, in the forward and,
        as the gathers' transposes, in the backward. False: the dispatch and combine are one pass each.
    epilogue_bias_only, epilogue_bias_only_source
        With ``epilogue_fusion``: only a linear's bias add (an elementwise ``add`` of one value per output column)
        may run in a library GEMM's epilogue; the builder marks every other elementwise op
        (:data:`simulator.engines.walk.OUTSIDE_EPILOGUE`), so an activation and the gated product run as one
        generated kernel of their own (the two halves read, one output written) and a residual add as another.
        Megatron-Core (``_MCORE_EPILOGUE``). False: any elementwise op may join the epilogue.
    moe_bias_per_expert
        On a model with expert biases (``expert_bias``): the second expert GEMM's bias is added, weighted
        by each row's routing probability, by a loop over the local experts after the GEMM (a multiply and
        an add per expert, then a concatenation of the rows; Megatron-Core's ``TEGroupedMLP._apply_bias``,
        source in ``grouped_gemm_source``); False: biases inside the GEMM's epilogue (no op of their own).
        The first GEMM's bias is always in its epilogue (Transformer Engine's grouped GEMM takes it).
    segment_ids
        Every attention kernel on a TPU is given segment ids and masks each score by them: MaxText's train step
        passes ``decoder_segment_ids=data["inputs_segmentation"]`` (all ones on synthetic data) to every attention
        call (``MaxText/train.py`` @ 14b5876ea and 9f1820b47, ``src/MaxText/train.py`` @ 50bafeb98), which
        ``tpu_flash_attention`` wraps in ``SegmentIds`` (``layers/attentions.py``); costed as
        ``EvalOptions.tpu_segment_ids`` (:func:`simulator.lowering.tpu.mask_vector_ops`).
    fused_moe_configs
        Serving, a stack whose MoE layers run vLLM's Triton ``fused_moe_kernel``: the tuned kernel configs it
        ships for 16-bit weights, as ``(local experts, N, device)`` with ``N`` the expert width per
        tensor-parallel rank and ``device`` the catalog name of the GPU the file names. An expert GEMM of any
        other ``(E, N)`` or device runs ``get_default_config``'s tile (:data:`FUSED_MOE_DEFAULT_TILES`) instead
        of the tuned one (which the model's tile search stands for). Empty: not modelled. Source in
        ``fused_moe_source``.
    moe_dispatch_host_ops
        ``(dispatch, before, after)``: framework ops a host-synchronising MoE dispatcher issues beside the ops
        the graph prices (the gather of routed rows, the all-to-all), counted from its code for each
        ``moe_dispatch`` mode (source in ``moe_dispatch_host_source``): ``before`` the host waits (token
        counting, the count all-gather, the device-to-host copies), ``after`` it (a second all-to-all of
        the probabilities, a sum of the received counts). Priced at ``efficiency.framework_op_overhead_s``
        each, only in the host-sync intervals (:mod:`simulator.parallel.host_sync`); a mode not listed
        issues none.
    moe_dispatch_host_source
        Where ``moe_dispatch_host_ops`` is counted.
    moe_dispatch_collectives
        ``moe_dispatch`` modes whose dispatcher, with expert parallelism, runs two small NCCL collectives of
        its own beside the token all-to-alls: with ``moe_host_sync`` the all-gather of every rank's per-expert
        token counts over the EP group before the host waits (``count_all_gather``, one int64 a global expert
        a rank), and in every mode a second all-to-all that carries the routed tokens' probabilities
        (``probs_all_to_all``, one value a routed token, and its backward). Each is priced as the collective
        it is (its kernels on the stream, its framework op on the host); a mode not listed runs none. Source
        in ``moe_dispatch_collectives_source``.
    moe_dispatch_collectives_source
        Where ``moe_dispatch_collectives`` is read.
    moe_dispatch_sms
        ``(dispatch, SMs)``: streaming multiprocessors a ``moe_dispatch`` mode's communication kernels hold
        while they run: a number (DeepEP's dispatch and combine kernels are launched on a fixed number of SMs)
        or ``"p2p_channels"`` (NCCL launches one thread block per channel, and an all-to-all of large messages
        runs on every peer-to-peer channel: the system's ``p2p_channels`` in the fabric catalog). Under
        ``ParallelPlan.moe_a2a_overlap`` the compute beside such an all-to-all runs on the others only
        (:func:`simulator.parallel.compose._paired_layers_hidden`); a mode not listed takes none from the
        compute (not modelled). Source in ``moe_dispatch_sms_source``.
    moe_dispatch_sms_source
        Where ``moe_dispatch_sms`` is read.
    fused_scale_mask_softmax
        The attention core runs unfused over the full ``s x s`` scores whatever attention the caller asks
        for, as Megatron-LM's ``CoreAttention`` did before FlashAttention: the score GEMM carries the
        ``1/sqrt(d)`` scale (``torch.baddbmm(..., alpha=1/norm_factor)``) and one kernel scales, masks and
        normalises (``FusedScaleMaskSoftmax``), so no scale or mask kernel of its own (source: ``_MEGATRON_LM``).
    dropout_p
        Training: every dropout layer of the model runs as a kernel at this probability, the stack's default
        (Megatron-LM's ``--attention-dropout`` and ``--hidden-dropout``, 0.1); 0: only an eager profile's
        Hugging Face probabilities.
    megatron_optimizer
        Training: each 16-bit parameter's update also carries the passes Megatron-LM's mixed-precision
        optimizer makes over it beside the Adam update (:func:`megatron_optimizer_passes`).
    wgrad_accumulation
        Training: how the stack's linear layers write their weight gradients (:data:`WGRAD_ACCUMULATION`):
        ``"te-fused"`` (Megatron-Core with Transformer Engine's ``fuse_wgrad_accumulation``) and
        ``"megatron-fused-fp32"`` (Megatron-LM's fused kernel, with fp32 main gradients only) have the weight-gradient
        GEMM accumulate into the main-gradient buffer (:func:`main_grad_accumulation`); ``""``: the graph's gradient,
        written once in its dtype. Source: ``wgrad_accumulation_source``.
    """

    name: str
    title: str
    attention: str = ""
    logits: str = ""
    eager_ops: bool = False
    eager_norm: bool = False
    eager_final_norm: bool = False
    complex_rope: bool = False
    repeat_kv: bool = False
    fused_rope: bool = False
    unfused_rope_families: tuple[str, ...] = ()
    clamped_glu_families: tuple[str, ...] = ()
    split_qkv_copies: bool = False
    matmul_copies: bool = False
    dropout: bool = False
    fusion: bool | None = None
    epilogue_fusion: bool = True
    norm_fusion: bool = False
    cuda_graphs: bool = False
    eager_dispatch: bool = False
    module_calls: bool = False
    attention_kernel: str = "auto"
    conv_layout: str = "nhwc"
    fp8_activation_scale: str = "dynamic"
    sources: tuple[str, ...] = ()
    devices: tuple[tuple[str, str], ...] = (("", ""),)
    stack: str = ""
    grad_reduce_dtype: str = ""
    tp_comm_overlap: bool = False
    compiled_loss: bool = False
    tp_overlap_collectives: tuple[str, ...] = ("all_gather", "reduce_scatter")
    collective_overlap: bool = True
    reduce_overlap: bool = True
    traced_remat: bool = False
    grouped_gemm_tile_rows: int = 0
    grouped_gemm_tile_cols: int = 0
    grouped_gemm: str = "fused"
    grouped_gemm_streams: int = 0
    grouped_gemm_source: str = ""
    moe_sort_chunks: bool = False
    moe_sort_copies: bool = False
    moe_bias_per_expert: bool = False
    epilogue_bias_only: bool = False
    epilogue_bias_only_source: str = ""
    segment_ids: bool = False
    fused_moe_configs: tuple[tuple[int, int, str], ...] = ()
    fused_moe_source: str = ""
    moe_dispatch_host_ops: tuple[tuple[str, int, int], ...] = ()
    moe_dispatch_host_source: str = ""
    moe_dispatch_collectives: tuple[str, ...] = ()
    moe_dispatch_collectives_source: str = ""
    moe_dispatch_sms: tuple[tuple[str, int | str], ...] = ()
    moe_dispatch_sms_source: str = ""
    iteration_host_s: float = 0.0
    call_host_s: float = 0.0
    graph_call_host_s: float = 0.0
    call_host_source: str = "not modelled: no sourced per-call host time recorded for this stack"
    iteration_host_per_seq_s: float = 0.0
    iteration_host_source: str = "not modelled: no sourced per-iteration host time recorded for this stack"
    graphs_decode_only: bool = False
    graphs_decode_source: str = ""
    graph_launch: str = ""
    waits_each_step: bool = False
    decode_host_ops: int = 0
    decode_host_syncs: int = 0
    decode_host_source: str = ""
    prompt_host_ops: int = 0
    prompt_host_syncs: int = 0
    prompt_host_ops_per_seq: int = 0
    prompt_host_source: str = ""
    graph_launch_source: str = _GRAPH_LAUNCH_UNSTATED
    output_lag_steps: int = 0
    output_lag_source: str = ""
    fp8_gemm_accumulation: str = ""
    fp8_gemm_accumulation_source: str = ""
    sampler_kernels: tuple[str, ...] = ()
    sampler_source: str = ""
    sampler_host_s: float = 0.0
    sampler_host_per_seq_s: float = 0.0
    sampler_host_source: str = "not modelled: no sourced host time of the sampler call recorded for this stack"
    all_reduce_kernel: str = "nccl"
    all_reduce_source: str = ""
    step_broadcasts: int = 0
    step_broadcast_source: str = ""
    graph_batch_sizes: tuple[int, ...] = ()
    graph_batch_source: str = ""
    kv_cache_sizing: str = "device"
    kv_cache_sizing_source: str = ("vLLM vllm/v1/worker/gpu_worker.py Worker.determine_available_memory: "
                                   "total x gpu_memory_utilization - (weights + peak activations of the profile run)")
    kv_window_layout: str = "full"
    kv_window_layout_source: str = ("one block table for every layer: a sliding-window layer's cache is sized at the "
                                    "full context like a global one's")
    fused_scale_mask_softmax: bool = False
    dropout_p: float = 0.0
    megatron_optimizer: bool = False
    wgrad_accumulation: str = ""
    wgrad_accumulation_source: str = ""

    def applies_to(self, kind: str, vendor: str) -> bool:
        """Whether the stack runs on a device of ``kind`` (``"gpu"``, ``"tpu"``, ``"cpu"``) by ``vendor``."""
        k, v = str(kind).lower(), str(vendor).lower()
        return any((not dk or dk == k) and (not dv or v.startswith(dv)) for dk, dv in self.devices)

    def describe_devices(self) -> str:
        """The devices :meth:`applies_to` accepts, in words (``NVIDIA gpu, AMD gpu``)."""
        return ", ".join(_KIND_NAMES.get((dk, dv)) or " ".join(x for x in (dv and _VENDOR_NAMES.get(dv, dv),
                                                                           dk or "device") if x)
                         for dk, dv in self.devices) if self.devices != (("", ""),) else "any device"

    @property
    def changes_graph(self) -> bool:
        """True when the profile changes what the transformer builder emits."""
        return bool(self.attention or self.logits or self.eager_ops or self.dropout or self.eager_norm
                    or self.eager_final_norm or self.complex_rope or self.repeat_kv or self.fused_rope
                    or self.split_qkv_copies or self.epilogue_bias_only or bool(self.clamped_glu_families))

    def cost_options(self) -> dict[str, Any]:
        """Keyword arguments of ``simulator.engines.analytical.EvalOptions`` this stack implies."""
        return {"fusion": self.fusion, "epilogue_fusion": self.epilogue_fusion, "norm_fusion": self.norm_fusion,
                "cuda_graphs": self.cuda_graphs,
                "eager_framework": self.eager_dispatch,
                "eager_modules": self.module_calls, "attention_kernel": self.attention_kernel,
                "conv_layout": self.conv_layout, "all_reduce_kernel": self.all_reduce_kernel,
                "fp8_activation_scale": self.fp8_activation_scale,
                "fp8_accumulation": self.fp8_gemm_accumulation or "fast", "tpu_segment_ids": self.segment_ids}

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary (graph changes, costing, sources)."""
        return {"name": self.name, "title": self.title,
                "graph": {"attention": self.attention or "fused", "logits": self.logits or "last",
                          "eager_ops": self.eager_ops, "dropout": self.dropout,
                          "eager_norm": self.eager_norm, "eager_final_norm": self.eager_final_norm,
                          "complex_rope": self.complex_rope,
                          "repeat_kv": self.repeat_kv, "fused_rope": self.fused_rope,
                          "split_qkv_copies": self.split_qkv_copies},
                "cost": self.cost_options(), "sources": list(self.sources),
                "stack": self.stack or "generic", "grad_reduce_dtype": self.grad_reduce_dtype or "param",
                "tp_comm_overlap": self.tp_comm_overlap, "collective_overlap": self.collective_overlap,
                "reduce_overlap": self.reduce_overlap, "compiled_loss": self.compiled_loss,
                "grouped_gemm": self.grouped_gemm, "wgrad_accumulation": self.wgrad_accumulation or "none"}


_V0_GRAPH_BS = (1, 2, 4) + tuple(8 * i for i in range(1, 33))
#: The tiles of vLLM's ``get_default_config`` (vllm/model_executor/layers/fused_moe/fused_moe.py, vllm==0.6.1 and
#: 0.6.2 wheels): ``BLOCK_SIZE_M`` x ``BLOCK_SIZE_N`` x ``BLOCK_SIZE_K`` = 16 x 32 x 64 when the step's tokens
#: ``M <= E`` (the local experts), else 64 x 64 x 32; no ``num_warps`` / ``num_stages`` in the config, so the
#: launch takes Triton's ``CUDAOptions`` defaults, 4 warps and 3 stages (triton-lang/triton
#: python/triton/backends/nvidia/compiler.py, the same in Triton 3.0, the release torch 2.4 and vLLM 0.6 ran);
#: no split-K (one program per output tile).
FUSED_MOE_DEFAULT_TILES = {"small": (16, 32, 64), "large": (64, 64, 32)}
FUSED_MOE_TRITON_WARPS = 4
FUSED_MOE_TRITON_STAGES = 3
_FUSED_MOE_DEVICES = {"NVIDIA_A100-SXM4-80GB": "a100-sxm4-80gb", "NVIDIA_A100-SXM4-40GB": "a100-sxm4-40gb",
                      "NVIDIA_H100_80GB_HBM3": "h100-sxm5-80gb", "AMD_Instinct_MI300X": "mi300x"}
#: The 16-bit configs in vllm/model_executor/layers/fused_moe/configs/ of the vllm==0.6.1 wheel (PyPI, 2024-09-11;
#: the 0.6.2 wheel of 2024-09-25 has the same NVIDIA set and no H200 file of any kind), files named
#: ``E={E},N={N},device_name={torch device name}.json`` with ``E, _, N = w2.shape`` (local experts, expert width
#: per tensor-parallel rank; ``try_get_optimal_moe_config``), the device names mapped to catalog names.
_VLLM_06_MOE_FILES = (
    (1, 14336, "NVIDIA_A100-SXM4-80GB"), (1, 1792, "NVIDIA_A100-SXM4-80GB"), (1, 3072, "NVIDIA_H100_80GB_HBM3"),
    (1, 3584, "NVIDIA_A100-SXM4-80GB"), (1, 7168, "NVIDIA_A100-SXM4-80GB"), (16, 1344, "NVIDIA_A100-SXM4-40GB"),
    (16, 1344, "NVIDIA_A100-SXM4-80GB"), (16, 1344, "NVIDIA_H100_80GB_HBM3"), (16, 14336, "NVIDIA_A100-SXM4-80GB"),
    (16, 1792, "NVIDIA_A100-SXM4-80GB"), (16, 2688, "NVIDIA_A100-SXM4-80GB"), (16, 2688, "NVIDIA_H100_80GB_HBM3"),
    (16, 3584, "NVIDIA_A100-SXM4-80GB"), (16, 7168, "NVIDIA_A100-SXM4-80GB"), (64, 1280, "NVIDIA_A100-SXM4-80GB"),
    (64, 1280, "NVIDIA_H100_80GB_HBM3"), (64, 640, "NVIDIA_A100-SXM4-80GB"), (64, 640, "NVIDIA_H100_80GB_HBM3"),
    (8, 14336, "AMD_Instinct_MI300X"), (8, 1792, "AMD_Instinct_MI300X"), (8, 1792, "NVIDIA_A100-SXM4-40GB"),
    (8, 1792, "NVIDIA_A100-SXM4-80GB"), (8, 1792, "NVIDIA_H100_80GB_HBM3"), (8, 2048, "NVIDIA_A100-SXM4-80GB"),
    (8, 2048, "NVIDIA_H100_80GB_HBM3"), (8, 3584, "AMD_Instinct_MI300X"), (8, 3584, "NVIDIA_A100-SXM4-40GB"),
    (8, 3584, "NVIDIA_A100-SXM4-80GB"), (8, 3584, "NVIDIA_H100_80GB_HBM3"), (8, 4096, "NVIDIA_A100-SXM4-80GB"),
    (8, 4096, "NVIDIA_H100_80GB_HBM3"), (8, 7168, "AMD_Instinct_MI300X"), (8, 7168, "NVIDIA_A100-SXM4-80GB"),
    (8, 7168, "NVIDIA_H100_80GB_HBM3"),
)
_VLLM_06_MOE_CONFIGS = tuple((e, n, _FUSED_MOE_DEVICES[d]) for e, n, d in _VLLM_06_MOE_FILES)
_VLLM_06_MOE_SOURCE = ("vllm==0.6.1 wheel (PyPI), vllm/model_executor/layers/fused_moe/fused_moe.py: fused_experts -> "
                       "try_get_optimal_moe_config(w1.shape, w2.shape, topk, dtype, M): E, _, N = w2_shape; "
                       "get_moe_configs(E, N, dtype) opens configs/E={E},N={N},device_name={torch device name}.json "
                       "and picks the entry of the batch key nearest M; without the file get_default_config(M, E, ...) "
                       "(16x32x64 for M <= E, else 64x64x32, GROUP_SIZE_M 8), num_warps / num_stages left to "
                       "Triton's defaults (4, 3). The configs directory of that wheel has no H200 file (nor 0.6.2's)")


def fused_moe_default_tile(tokens: int, experts: int) -> tuple[int, int, int]:
    """The (M, N, K) tile of vLLM's ``get_default_config`` for a step of ``tokens`` tokens over ``experts`` local
    experts (:data:`FUSED_MOE_DEFAULT_TILES`): the small tile when ``tokens <= experts``.

    >>> fused_moe_default_tile(8, 8), fused_moe_default_tile(200, 8)
    ((16, 32, 64), (64, 64, 32))
    """
    return FUSED_MOE_DEFAULT_TILES["small" if tokens <= experts else "large"]


def fused_moe_steps(graph: Any) -> Any:
    """``graph`` with each expert GEMM (``grouped_matmul``) of an MoE layer without expert parallelism (no
    ``all_to_all`` in its group) carrying the M and N by which vLLM picks its fused-MoE kernel config
    (``try_get_optimal_moe_config``): ``moe_tokens``, the rows of the layer's router input (the step's tokens), and
    ``moe_width``, the input width of the layer's ``experts_out`` GEMM (each expert's intermediate size on this
    rank, ``w2``'s N). Read from the graph's own ops, so the graph as built (and its digest) is unchanged; the
    engine applies it under ``EvalOptions.fused_moe_configs`` (:func:`simulator.lowering.gpu.fused_moe_kernel`)."""
    from workloads.ir import Attrs, Op, OpGraph

    facts: dict[str, dict[str, int]] = {}
    for op in graph.ops:
        f = facts.setdefault(op.group, {})
        if op.kind == "moe_router":
            f["moe_tokens"] = int(op.inputs[0].shape[0])
        elif op.kind == "all_to_all":
            f["ep"] = 1
        elif op.kind == "grouped_matmul" and op.name.rsplit(".", 1)[-1] == "experts_out":
            f["moe_width"] = int(op.inputs[1].shape[1])
    ops = [Op(op.name, op.kind, op.inputs, op.outputs, Attrs({**dict(op.attrs), "moe_tokens": f["moe_tokens"],
                                                              "moe_width": f["moe_width"]}), op.group)
           if op.kind == "grouped_matmul" and "ep" not in (f := facts[op.group]) and len(f) == 2 else op
           for op in graph.ops]
    return OpGraph(graph.name, ops, dict(graph.meta))


_SGLANG_BS = (1, 2, 4) + tuple(8 * i for i in range(1, 21))
_HF_GRAPH = dict(logits="all", eager_ops=True, dropout=True)
_VENDOR_NAMES = {"nvidia": "NVIDIA", "amd": "AMD", "google": "Google"}
# XLA compiles for GPUs, CPUs, Google's TPUs and a systolic design point of this catalog (lowered as a TPU);
# not for a Jetson's DLA, which runs TensorRT loadables only
_XLA_DEVICES = (("gpu", ""), ("cpu", ""), ("tpu", "google"), ("tpu", "design point"))
# the catalog files a Jetson's deep-learning accelerator (DLA) under kind "tpu": say what it is
_KIND_NAMES = {("tpu", "nvidia"): "NVIDIA DLA (Jetson)"}
# PyTorch runs on CUDA and ROCm GPUs and on CPUs (TPUs through PyTorch/XLA: the xla profile)
_TORCH_DEVICES = (("gpu", ""), ("cpu", ""))
# torch.cuda.graph captures CUDA graphs, and HIP graphs on ROCm builds
_GRAPH_DEVICES = (("gpu", "nvidia"), ("gpu", "amd"))
# TensorRT builds engines for NVIDIA GPUs and for the DLAs of Jetson (kind "tpu" in this catalog)
_TRT_DEVICES = (("gpu", "nvidia"), ("tpu", "nvidia"))

def _maxtext(name: str, description: str, extra_sources: tuple[str, ...], **fields: Any) -> FrameworkProfile:
    """A MaxText profile: what every variant shares (XLA's SPMD stack on TPUs, Megablox tiles, traced remat), its
    own sources after the common ones, and the fields that make it the variant it is."""
    return FrameworkProfile(name, description, fusion=True,
                            sources=(_MAXTEXT, _MAXTEXT_DTYPES, _MEGABLOX, _MAXTEXT_PERMUTE, *extra_sources, _XLA,
                                     _JAX_REMAT),
                            devices=(("tpu", "google"),), stack="xla-spmd", grad_reduce_dtype="bf16",
                            grouped_gemm_tile_rows=512, grouped_gemm_tile_cols=1024, moe_sort_copies=True,
                            segment_ids=True, traced_remat=True, **fields)


#: The profile registry (``--framework NAME``).
PROFILES: dict[str, FrameworkProfile] = {p.name: p for p in (
    FrameworkProfile("eager", "PyTorch eager / Hugging Face transformers with attn_implementation='eager'",
                     attention="decomposed", **_HF_GRAPH, matmul_copies=True, fusion=False, eager_dispatch=True,
                     module_calls=True, conv_layout="nchw", sources=(_HF_GPT2, _HF_ACT, _HF_LLAMA, _TORCH_NCHW),
                     devices=_TORCH_DEVICES),
    FrameworkProfile("sdpa", "PyTorch eager / Hugging Face transformers with attn_implementation='sdpa' "
                     "(the library default on torch >= 2.1.1)",
                     attention="fused", **_HF_GRAPH, matmul_copies=True, fusion=False, eager_dispatch=True,
                     module_calls=True, attention_kernel="flash2", conv_layout="nchw",
                     sources=(_TORCH_SDPA, _HF_ACT, _HF_LLAMA, _TORCH_NCHW),
                     devices=_TORCH_DEVICES),
    FrameworkProfile("compile", "torch.compile (Inductor, default mode) of a Hugging Face model",
                     attention="fused", **_HF_GRAPH, matmul_copies=True, fusion=True, epilogue_fusion=False,
                     norm_fusion=True, eager_dispatch=True, attention_kernel="flash2",
                     call_host_s=176e-6, graph_call_host_s=128e-6 + 41e-6, call_host_source=_COMPILE_CALL_HOST,
                     sources=(_INDUCTOR, _INDUCTOR_EXTERN, _INDUCTOR_NORM, _INDUCTOR_MATMUL, _INDUCTOR_WRAPPER,
                              _TORCH_SDPA, _INDUCTOR_LAYOUT),
                     devices=_TORCH_DEVICES),
    FrameworkProfile("cuda-graphs", "PyTorch eager program captured once and replayed as a CUDA graph",
                     attention="fused", **_HF_GRAPH, matmul_copies=True, fusion=False, cuda_graphs=True,
                     attention_kernel="flash2", conv_layout="nchw",
                     sources=("pytorch/pytorch torch/cuda/graphs.py: torch.cuda.graph / make_graphed_callables",
                              _TORCH_SDPA, _TORCH_NCHW), devices=_GRAPH_DEVICES),
    FrameworkProfile("tensorrt", "TensorRT engine (fused epilogues, CUDA graphs)", fusion=True, cuda_graphs=True,
                     sources=(_TRT,), devices=_TRT_DEVICES),
    FrameworkProfile("trt-llm", "TensorRT-LLM engine", fusion=True, cuda_graphs=True, fp8_activation_scale="static",
                     all_reduce_source=_TRTLLM_AR, fp8_gemm_accumulation_source=TRTLLM_FP8_ACCUM_ENGINE,
                     attention_kernel="trtllm-fmha", sources=(_TRTLLM, TRTLLM_FP8_STATIC_SCALE, TRTLLM_CONTEXT_FMHA),
                     devices=(("gpu", "nvidia"),), iteration_host_s=0.0, kv_cache_sizing="free",
                     kv_cache_sizing_source=_TRTLLM_KV_FREE,
                     iteration_host_source="0 exposed: the overlap scheduler (enabled by default) launches step n+1 "
                     "on the GPU while the CPU finishes step n (TensorRT-LLM docs, features/overlap-scheduler, "
                     "https://nvidia.github.io/TensorRT-LLM/latest/features/overlap-scheduler.html)"),
    FrameworkProfile("trt-llm-pytorch", "TensorRT-LLM PyTorch backend (the LLM API's default from 1.0: the model as "
                     "PyTorch modules, CUDA graphs for generation-only batches)", fusion=True, cuda_graphs=True,
                     attention_kernel="trtllm-fmha", sources=(_TRTLLM, _TRTLLM_PT_GRAPHS, TRTLLM_CONTEXT_FMHA),
                     devices=(("gpu", "nvidia"),), iteration_host_s=0.0,
                     iteration_host_source="0 exposed: the overlap scheduler (enabled by default) launches step n+1 "
                     "on the GPU while the CPU finishes step n (TensorRT-LLM docs, features/overlap-scheduler, "
                     "https://nvidia.github.io/TensorRT-LLM/latest/features/overlap-scheduler.html)",
                     graphs_decode_only=True, graphs_decode_source=_TRTLLM_PT_GRAPHS, kv_cache_sizing="free",
                     all_reduce_source=_TRTLLM_AR, fp8_gemm_accumulation="fast",
                     fp8_gemm_accumulation_source=TRTLLM_FP8_ACCUM_TORCH,
                     kv_cache_sizing_source=_TRTLLM_KV_FREE),
    FrameworkProfile("vllm", "vLLM (fused QKV / gate-up GEMMs, custom fused kernels, CUDA graphs for decode)",
                     fusion=True, epilogue_fusion=False, cuda_graphs=True, sources=(_VLLM,),
                     devices=(("gpu", "nvidia"), ("gpu", "amd"), ("tpu", "google")), iteration_host_s=0.0,
                     iteration_host_source="not modelled: the vLLM V1 announcement (blog.vllm.ai/2025/01/27/"
                     "v1-alpha-release.html) states the goal 'near-zero CPU overhead' but gives no per-iteration "
                     "figure; none found elsewhere",
                     all_reduce_kernel="vllm-custom", all_reduce_source=_ENGINE_AR,
                     kv_window_layout="vllm-hybrid", kv_window_layout_source=_VLLM_HYBRID_KV),
    FrameworkProfile("vllm-v0", "vLLM V0 engine (0.5 / 0.6: Python scheduler and input preparation on the engine's "
                     "critical path, kernels as vllm)",
                     fusion=True, epilogue_fusion=False, cuda_graphs=True, attention_kernel="flash2",
                     sources=(_VLLM, _VLLM_V06, _VLLM_V0_FA2),
                     devices=(("gpu", "nvidia"), ("gpu", "amd")), iteration_host_s=0.28e-3,
                     iteration_host_per_seq_s=0.0296e-3, iteration_host_source=_VIDUR_CPU,
                     graphs_decode_only=True, graphs_decode_source=_VLLM_V0_GRAPHS,
                     output_lag_steps=1, output_lag_source=_VLLM_V0_ASYNC_OUT,
                     sampler_kernels=("to_fp32", "temperature", "softmax", "log_softmax", "gather_rows", "argmax"),
                     sampler_source=_VLLM_V0_SAMPLER, graph_batch_sizes=_V0_GRAPH_BS,
                     sampler_host_s=0.617e-3, sampler_host_per_seq_s=0.00708e-3, sampler_host_source=_VIDUR_SAMPLER,
                     all_reduce_kernel="vllm-custom-2024", all_reduce_source=_ENGINE_AR_2024,
                     step_broadcasts=10, step_broadcast_source=_VLLM_V0_INPUT_BROADCAST,
                     graph_batch_source=_VLLM_V0_GRAPH_BS,
                     graph_launch_source=_GRAPH_LAUNCH_V0_SGL03, waits_each_step=True,
                     fused_moe_configs=_VLLM_06_MOE_CONFIGS, fused_moe_source=_VLLM_06_MOE_SOURCE),
    FrameworkProfile("sglang", "SGLang runtime (same kernel structure as vLLM)", fusion=True, epilogue_fusion=False,
                     cuda_graphs=True,
                     sources=(_SGLANG,), devices=(("gpu", "nvidia"), ("gpu", "amd")), iteration_host_s=0.0,
                     iteration_host_source="0 exposed from v0.4: the zero-overhead batch scheduler runs one batch "
                     "ahead; an Nsight profile of 5 consecutive decode batches shows no GPU idle time (SGLang v0.4 "
                     "blog, https://lmsys.org/blog/2024-12-04-sglang-v0-4/). Earlier versions (0.3.x) did not "
                     "overlap: profile sglang-0.3",
                     graphs_decode_only=True, graphs_decode_source=_SGLANG_GRAPHS,
                     graph_batch_sizes=_SGLANG_BS, all_reduce_kernel="vllm-custom", all_reduce_source=_ENGINE_AR,
                     graph_batch_source=_SGLANG_GRAPH_BS, kv_window_layout_source=_SGLANG_SWA_OFF),
    FrameworkProfile("sglang-0.3", "SGLang 0.3.x runtime (kernels as sglang; no overlap scheduler: scheduling and "
                     "output processing on the host between GPU steps)", fusion=True, epilogue_fusion=False,
                     cuda_graphs=True, sources=(_SGLANG,), devices=(("gpu", "nvidia"), ("gpu", "amd")),
                     iteration_host_s=0.0, iteration_host_per_seq_s=10.1e-6, iteration_host_source=_SGLANG_03_HOST,
                     decode_host_ops=26, decode_host_syncs=6, decode_host_source=_SGLANG_03_DECODE_HOST,
                     prompt_host_ops=38, prompt_host_syncs=6, prompt_host_ops_per_seq=2,
                     prompt_host_source=_SGLANG_03_PROMPT_HOST,
                     sampler_kernels=("to_fp32", "temperature", "softmax", "argmax"), sampler_source=_SGLANG_03_SAMPLER,
                     graphs_decode_only=True, graphs_decode_source=_SGLANG_GRAPHS,
                     graph_batch_sizes=_SGLANG_BS, all_reduce_kernel="vllm-custom-2024",
                     all_reduce_source=_ENGINE_AR_2024, graph_batch_source=_SGLANG_GRAPH_BS,
                     graph_launch_source=_GRAPH_LAUNCH_V0_SGL03, waits_each_step=True),
    FrameworkProfile("xla", "XLA (JAX / TensorFlow / PyTorch-XLA) compiled program", fusion=True, sources=(_XLA,),
                     devices=_XLA_DEVICES),
    FrameworkProfile("fsdp2", "PyTorch FSDP2 training as torchtitan runs it (fully_shard per block, eager modules, "
                     "the model code's complex RoPE and repeat_kv, SDPA FlashAttention-2, fp32 gradient reduce-scatter)",
                     fusion=False, eager_dispatch=True, module_calls=True, attention_kernel="flash2",
                     complex_rope=True, repeat_kv=True,
                     sources=(_FSDP2, _TORCHTITAN, _TORCHTITAN_MODEL), devices=(("gpu", "nvidia"), ("gpu", "amd")),
                     stack="fsdp2", grad_reduce_dtype="fp32"),
    FrameworkProfile("automodel", "PyTorch FSDP2 training as NeMo AutoModel runs it without compile: its own model "
                     "code (one RMSNorm kernel, Transformer Engine's fused RoPE kernel per tensor, attention over the "
                     "key/value heads), eager modules, fp32 gradient reduce-scatter",
                     fusion=False, eager_dispatch=True, module_calls=True, attention_kernel="flash2", fused_rope=True,
                     sources=(_FSDP2, _AUTOMODEL_MODEL), devices=(("gpu", "nvidia"), ("gpu", "amd")),
                     stack="fsdp2", grad_reduce_dtype="fp32"),
    FrameworkProfile("torchtitan-eager", "PyTorch FSDP2 training as torchtitan ran it without --compile before "
                     "2025-03-19: as fsdp2, with the model code's RMSNorm and complex RoPE issued op by op",
                     fusion=False, eager_dispatch=True, module_calls=True, attention_kernel="flash2",
                     eager_norm=True, complex_rope=True, repeat_kv=True,
                     sources=(_FSDP2, _TORCHTITAN, _TORCHTITAN_EAGER_MODEL), devices=(("gpu", "nvidia"), ("gpu", "amd")),
                     stack="fsdp2", grad_reduce_dtype="fp32"),
    FrameworkProfile("fsdp2-compile", "PyTorch FSDP2 training as torchtitan runs it with --compile (torch.compile "
                     "of every transformer block: Inductor fuses the pointwise and reduction ops, cuBLAS GEMMs and "
                     "SDPA FlashAttention-2 stay library calls; the cross entropy loss compiled too; FSDP2 as fsdp2)",
                     fusion=True, epilogue_fusion=False, eager_dispatch=True, attention_kernel="flash2", complex_rope=True, repeat_kv=True,
                     sources=(_FSDP2, _TORCHTITAN, _TORCHTITAN_COMPILE, _TORCHTITAN_LOSS, _INDUCTOR, _INDUCTOR_EXTERN,
                              _TORCH_SDPA, _INDUCTOR_COMPLEX),
                     devices=(("gpu", "nvidia"), ("gpu", "amd")), stack="fsdp2", grad_reduce_dtype="fp32",
                     compiled_loss=True),
    FrameworkProfile("fsdp2-compile-blocks", "PyTorch FSDP2 training as torchtitan ran it with --compile before "
                     "2025-04-02 (the transformer blocks under torch.compile, the cross entropy loss eager; "
                     "otherwise as fsdp2-compile, with the model code's final RMSNorm eager)",
                     fusion=True, epilogue_fusion=False, eager_dispatch=True, attention_kernel="flash2", complex_rope=True, repeat_kv=True,
                     eager_final_norm=True,
                     sources=(_FSDP2, _TORCHTITAN, _TORCHTITAN_COMPILE, _TORCHTITAN_LOSS, _INDUCTOR, _INDUCTOR_EXTERN,
                              _TORCH_SDPA, _INDUCTOR_COMPLEX, _TORCHTITAN_FINAL_NORM),
                     devices=(("gpu", "nvidia"), ("gpu", "amd")), stack="fsdp2", grad_reduce_dtype="fp32"),
    FrameworkProfile("automodel-compile", "PyTorch FSDP2 training as NeMo AutoModel runs it with enable_compile: "
                     "as automodel (its own model code, Transformer Engine's fused RoPE kernel per tensor), each "
                     "decoder layer under torch.compile (Inductor fuses its pointwise and reduction ops; cuBLAS GEMMs "
                     "and SDPA stay library calls); the fp32-upcast cross entropy loss eager",
                     fusion=True, epilogue_fusion=False, eager_dispatch=True, attention_kernel="flash2", fused_rope=True,
                     sources=(_FSDP2, _AUTOMODEL_MODEL, _AUTOMODEL_COMPILE, _INDUCTOR, _INDUCTOR_EXTERN, _TORCH_SDPA),
                     devices=(("gpu", "nvidia"), ("gpu", "amd")), stack="fsdp2", grad_reduce_dtype="fp32"),
    FrameworkProfile("megatron-core", "Megatron-Core training with Transformer Engine layers (fused norm/GEMM, "
                     "cuDNN fused attention, overlapped data- and tensor-parallel communication)",
                     fusion=True, epilogue_fusion=True, sources=(_MCORE, _MCORE_ATTN, _TP_OVERLAP, _TE_GROUPED, _MCORE_ROPE,
                                                               _MCORE_CLAMPED_GLU),
                     fused_rope=True, unfused_rope_families=("gpt-oss",), split_qkv_copies=True,
                     clamped_glu_families=("gpt-oss",),
                     devices=(("gpu", "nvidia"),), stack="megatron-core", tp_comm_overlap=True,
                     grouped_gemm="per_expert", grouped_gemm_streams=4, grouped_gemm_source=_TE_GROUPED,
                     moe_sort_chunks=True, moe_bias_per_expert=True,
                     epilogue_bias_only=True, epilogue_bias_only_source=_MCORE_EPILOGUE,
                     moe_dispatch_host_ops=(("sparse", 11, 0), ("hybridep", 0, 1)),
                     moe_dispatch_host_source=_MCORE_DISPATCH_HOST,
                     moe_dispatch_collectives=("sparse",),
                     moe_dispatch_collectives_source=_MCORE_DISPATCH_COLLECTIVES,
                     moe_dispatch_sms=(("deepep", 20), ("hybridep", 16), ("sparse", "p2p_channels")),
                     moe_dispatch_sms_source=_MCORE_DEEPEP_SMS, wgrad_accumulation="te-fused",
                     wgrad_accumulation_source=_MCORE_WGRAD_FUSION),
    FrameworkProfile("megatron-lm", "Megatron-LM training as of 2021-2022 (before FlashAttention, Dec 2022): "
                     "unfused attention core (baddbmm, fused scale-mask-softmax, attention dropout, bmm), "
                     "dropout 0.1, Apex fused layer norm, fused bias-GeLU and bias-dropout-add; eager PyTorch: "
                     "its fused kernels are ops of the graph, nothing else fuses",
                     fusion=False, epilogue_fusion=True, dropout=True, dropout_p=0.1, fused_scale_mask_softmax=True,
                     megatron_optimizer=True, sources=(_MEGATRON_LM, _MEGATRON_LM_OPT), devices=(("gpu", "nvidia"),),
                     wgrad_accumulation="megatron-fused-fp32", wgrad_accumulation_source=_MEGATRON_LM_WGRAD_FUSION),
    _maxtext("maxtext", "MaxText (JAX/XLA) training on TPUs: splash attention, remat policies, FSDP "
             "all-gathers overlapped by XLA's scheduler, gradient reductions serial with compute (XLA:TPU's "
             "defaults: no asynchronous reduce-scatter or all-reduce), float32 parameters, gradients reduced in bf16",
             (_LIBTPU_DEFAULTS,), reduce_overlap=False),
    _maxtext("maxtext-cf", "MaxText (JAX/XLA) as maxtext, with XLA's continuation fusion of all-gathers "
             "(CF_FOR_ALL_GATHER flags): each sequence-parallel all-gather pipelined with the matmul it feeds",
             (_MAXTEXT_CF, _TP_OVERLAP, _LIBTPU_DEFAULTS), tp_comm_overlap=True,
             tp_overlap_collectives=("all_gather",), reduce_overlap=False),
    _maxtext("maxtext-sc", "MaxText (JAX/XLA) as maxtext, with the gradient reductions offloaded to the "
             "SparseCore (a SparseCore all-reduce or reduce-scatter offload flag) and overlapped with compute",
             (_MAXTEXT_SC,)),
    _maxtext("maxtext-cf-sc", "MaxText (JAX/XLA) as maxtext-cf, with the gradient reductions offloaded to the "
             "SparseCore and overlapped with compute (CF_FOR_ALL_GATHER and a SparseCore all-reduce offload)",
             (_MAXTEXT_CF, _TP_OVERLAP, _MAXTEXT_SC), tp_comm_overlap=True, tp_overlap_collectives=("all_gather",)),
    _maxtext("maxtext-serial", "MaxText (JAX/XLA) as maxtext with no collective overlapped: every FSDP "
             "all-gather, gradient reduction and data-parallel all-reduce serial with the TensorCore's compute "
             "(a bound; XLA:TPU's defaults overlap the all-gathers, maxtext)",
             (_MAXTEXT_SERIAL,), collective_overlap=False),
)}

#: The profiles of inference engines, which run no training step (no backward pass, no optimizer): TensorRT
#: builds inference engines ("an SDK for high-performance deep learning inference", NVIDIA TensorRT documentation,
#: overview), TensorRT-LLM runs LLM inference ("optimizing Large Language Model (LLM) inference", NVIDIA/TensorRT-LLM
#: README), vLLM and SGLang serve models ("a fast and easy-to-use library for LLM inference and serving",
#: vllm-project/vllm README; "a fast serving framework for large language models", sgl-project/sglang README).
#: ``predict --train`` and ``tune --train`` refuse them (:func:`check_profile_trains`).
INFERENCE_ONLY = ("tensorrt", "trt-llm", "trt-llm-pytorch", "vllm", "vllm-v0", "sglang", "sglang-0.3")

#: Other spellings people use for the same stacks.
ALIASES: dict[str, str] = {
    "pytorch": "eager", "torch": "eager", "hf": "eager", "hf-eager": "eager", "huggingface": "eager",
    "torch.compile": "compile", "inductor": "compile", "torch-compile": "compile",
    "cudagraphs": "cuda-graphs", "cuda_graphs": "cuda-graphs",
    "trt": "tensorrt", "tensorrt-llm": "trt-llm", "trtllm": "trt-llm", "jax": "xla",
    "torchtitan": "fsdp2", "torchtitan-compile": "fsdp2-compile", "mcore": "megatron-core", "megatron": "megatron-core",
}


def profile_names() -> list[str]:
    """The registered profile names, sorted."""
    return sorted(PROFILES)


def get_profile(name: str, where: str = "--framework") -> FrameworkProfile:
    """The profile called ``name`` (or one of its :data:`ALIASES`).

    Raises
    ------
    FrameworkError
        ``<where>: unknown framework; got 'x'; expected one of ...; did you mean 'y'?``
    """
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key in PROFILES:
        return PROFILES[key]
    choices = [*PROFILES, *ALIASES]
    if not key:
        raise FrameworkError(f"{where}: empty framework name; got {name!r}; expected one of {', '.join(profile_names())}")
    raise FrameworkError(f"{where}: unknown framework; got {name!r}; expected one of {', '.join(profile_names())}"
                         + did_you_mean(key, choices))


def profiles_for(kind: str, vendor: str) -> list[str]:
    """Names of the profiles that run on a device of ``kind`` by ``vendor``, sorted."""
    return sorted(n for n, p in PROFILES.items() if p.applies_to(kind, vendor))


def _device_words(kind: str, vendor: str) -> str:
    """A device's vendor and kind in words (``NVIDIA gpu``; a Jetson DLA by name)."""
    return _KIND_NAMES.get((str(kind).lower(), str(vendor).lower())) or f"{vendor} {kind}"


def check_profile_device(profile: FrameworkProfile, device: str, kind: str, vendor: str,
                         where: str = "--framework", optional: bool = True) -> None:
    """Refuse ``profile`` on a device it does not run on (a TensorRT engine on a TPU).

    Raises
    ------
    FrameworkError
        ``<where> NAME: does not run on DEVICE (a VENDOR KIND); got ...; expected one of <the profiles
        for that device>`` (one line).
    """
    if profile.applies_to(kind, vendor):
        return
    valid = profiles_for(kind, vendor)
    raise FrameworkError(f"{where} {profile.name}: does not run on {device} ({_device_words(kind, vendor)}); got {profile.name!r}, "
                         f"which runs on {profile.describe_devices()}; expected one of {', '.join(valid) or 'none'} "
                         f"for this device" + (f", or no {where}" if optional else ""))


def check_profile_trains(profile: FrameworkProfile) -> None:
    """Refuse a training step under an inference-only stack (:data:`INFERENCE_ONLY`): it would be priced with the
    stack's costing as if the stack ran a backward pass and an optimizer (one located line, :class:`FrameworkError`)."""
    if profile.name in INFERENCE_ONLY:
        trains = ", ".join(sorted(n for n in PROFILES if n not in INFERENCE_ONLY))
        raise FrameworkError(f"--framework {profile.name}: an inference engine, it runs no training step; got --train; "
                             f"expected a stack that trains ({trains}) or no --train")


def check_profile_hardware(profile: FrameworkProfile, hw: Any, where: str = "--framework",
                           optional: bool = True) -> None:
    """Refuse ``profile`` on ``hw`` (:func:`check_profile_device`): a device or a system of one device kind (named
    by the system) must run it; a node of several devices (GPU + DLA + CPU) must have at least one that does (the
    stack runs where it can; the refusal names the node and each device). The one check behind ``predict``,
    ``partition``, ``plot``, ``serve`` and training plans."""
    devices = getattr(hw, "devices", None)
    if not devices:
        dev = getattr(hw, "device", hw)
        if getattr(dev, "kind", None) is not None:
            name = getattr(hw, "name", None) if hasattr(hw, "device") else None
            check_profile_device(profile, name or dev.name, dev.kind, dev.vendor, where, optional)
        return
    specs = [getattr(d, "device", d) for d in devices]
    specs = [d for d in specs if getattr(d, "kind", None) is not None]
    if len({d.name for d in specs}) == 1:  # a node of one device type: that device's own refusal
        check_profile_device(profile, specs[0].name, specs[0].kind, specs[0].vendor, where, optional)
    if not specs or any(profile.applies_to(d.kind, d.vendor) for d in specs):
        return
    held = ", ".join(dict.fromkeys(f"{d.name} ({_device_words(d.kind, d.vendor)})" for d in specs))
    raise FrameworkError(f"{where} {profile.name}: runs on no device of {getattr(hw, 'name', 'the node')} ({held}); "
                         f"got {profile.name!r}, which runs on {profile.describe_devices()}; expected one of "
                         f"{', '.join(sorted({n for d in specs for n in profiles_for(d.kind, d.vendor)}))}"
                         + (f", or no {where}" if optional else ""))


#: torch.compile's modes (``torch.compile(model, mode=...)``).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


def mode_cost_options(cost: dict[str, Any], mode: str | None) -> dict[str, Any]:
    """The costing of the ``compile`` profile (``cost``, :meth:`FrameworkProfile.cost_options`) under
    torch.compile's ``mode``: ``reduce-overhead`` and ``max-autotune`` replay the program from CUDA graphs
    (no per-kernel Python launch, no module call: ``torch/_inductor/config.py`` ``triton.cudagraphs`` is on
    in both), and ``max-autotune`` may run GEMMs and convolutions as Triton templates, which take fused
    epilogues (``config.epilogue_fusion``). ``None`` or ``default``: ``cost`` unchanged."""
    out = dict(cost)
    if mode in ("reduce-overhead", "max-autotune"):
        out.update(cuda_graphs=True, eager_framework=False, eager_modules=False)
    if mode == "max-autotune":
        out["epilogue_fusion"] = True
    return out


def stack_settings(profile: FrameworkProfile, mode: str | None = None, *, fusion: bool | None = None,
                   cuda_graphs: bool = False, conv_layout: str = "", gemv_generated: bool = False) -> dict[str, Any]:
    """The engine settings (:data:`simulator.engines.options.SETTINGS` names) ``profile``'s costing implies, as
    ``predict --framework`` and ``tune --framework`` apply it: :meth:`FrameworkProfile.cost_options` under
    torch.compile's ``mode`` (:func:`mode_cost_options`), with what the caller states winning: ``fusion`` (None:
    the profile's), ``cuda_graphs`` (a program replayed from a CUDA graph has no per-op dispatch), ``conv_layout``
    ("": the profile's) and ``gemv_generated`` (Inductor's coordinate-descent tuning)."""
    cost = mode_cost_options(profile.cost_options(), mode)
    graphs = bool(cuda_graphs or cost["cuda_graphs"])
    return {"fusion": cost["fusion"] if fusion is None else fusion, "epilogue_fusion": cost["epilogue_fusion"],
            "norm_fusion": cost["norm_fusion"], "gemv_generated": gemv_generated, "cuda_graphs": graphs,
            "attention_kernel": cost["attention_kernel"], "eager_framework": cost["eager_framework"] and not graphs,
            "eager_modules": cost["eager_modules"] and not graphs, "conv_layout": conv_layout or cost["conv_layout"],
            "all_reduce_kernel": cost["all_reduce_kernel"], "fp8_activation_scale": cost["fp8_activation_scale"],
            "fp8_accumulation": cost["fp8_accumulation"], "tpu_segment_ids": cost["tpu_segment_ids"]}


_TORCH_2_0 = re.compile(r"\b(?:torch|pytorch) 2\.0(?:\.\d+)?\b", re.IGNORECASE)


#: Inductor's layout optimisation is off by default on ROCm: pytorch/pytorch pull request #111474 ('Disable
#: inductor layout_opt on ROCm', 2023-10-18; after #107812 had kept it on MI200 only) sets
#: torch/_inductor/config.py ``layout_opt_default = "1" if not torch.version.hip else "0"``; #116329 (2024-01)
#: makes it an opt-in there (``TORCHINDUCTOR_LAYOUT_OPTIMIZATION=1``). #171082 (2025-12, '[ROCm] Add Inductor
#: optimizations with architecture-aware defaults') turns it back on for MI300-class devices (gfx942, gfx950)
#: only, in builds later than the torch releases of the measured rows (ROCm nightlies of torch 2.4), so an AMD
#: device is given the contiguous layout here.
INDUCTOR_LAYOUT_ROCM = ("pytorch/pytorch #111474 (2023-10-18): torch/_inductor/config.py layout_opt_default = "
                        "\"1\" if not torch.version.hip else \"0\" (opt-in on ROCm since #116329; #171082, 2025-12, "
                        "re-enables it on MI300-class devices only, later than the torch versions modelled)")


def compile_conv_layout(version: str, vendor: str = "") -> str:
    """The memory format torch.compile gives convolutions under the PyTorch release named in ``version``
    (a measurement's ``framework_version``) on a device by ``vendor``: ``"nchw"`` for torch 2.0.x, which has
    no layout optimisation pass, and for AMD devices, where the pass is off by default
    (:data:`INDUCTOR_LAYOUT_ROCM`); ``"nhwc"`` otherwise (Inductor's ``decide_layout_opt``, from torch 2.1:
    :data:`_INDUCTOR_LAYOUT`)."""
    if str(vendor).strip().lower().startswith("amd"):
        return "nchw"
    return "nchw" if _TORCH_2_0.search(str(version)) else "nhwc"


#: Inductor's convolution lowering under layout optimisation (torch >= 2.1) asks for channels-last operands,
#: the weight included, and a graph input in another layout is copied on every call: pytorch/pytorch
#: torch/_inductor/kernel/conv.py ``convolution``: ``if V.graph.layout_opt and ndim == 2: x =
#: ir.ExternKernel.require_channels_last(x)`` and, under "TODO maybe we can convert weights to channels last
#: just once before running the model", ``weight = ir.ExternKernel.require_channels_last(weight)``;
#: ``require_stride_order`` copies a fixed-layout input whose strides are not in that order
#: (``Layout.is_stride_ordered``: a contiguous k x k weight with k > 1 is not, a 1 x 1 weight is). Parameters
#: are graph inputs unless ``config.freezing`` is on (off by default).
INDUCTOR_CONV_LAYOUT_COPIES = ("pytorch/pytorch torch/_inductor/kernel/conv.py convolution (torch >= 2.1): under "
                               "V.graph.layout_opt, require_channels_last(x) and require_channels_last(weight) "
                               "('TODO maybe we can convert weights to channels last just once before running the "
                               "model'): a contiguous graph-input weight with a k x k kernel (k > 1), and a "
                               "graph-input image, are copied to channels last on every call")


def inductor_layout_copies(graph: Any) -> Any:
    """An inference graph as torch.compile's layout optimisation runs it (:data:`INDUCTOR_CONV_LAYOUT_COPIES`):
    before each 2-d convolution, a copy kernel (a ``transpose`` of unchanged shape) of every operand that is a
    graph input in the contiguous (NCHW) layout and not already channels last: the image, and each weight
    whose kernel is larger than 1 x 1. A weight or image some op makes first (a ``torch.autocast`` cast,
    :func:`autocast_weight_casts`) is made channels last by that kernel and needs no copy. A weight read by
    several convolutions is copied once. ``meta["layout_copies"]`` records the transform; twice is refused."""
    from workloads.ir import GraphBuilder, Op, Role

    if graph.meta.get("layout_copies"):
        raise ValueError(f"graph {graph.name!r}: layout copies already applied; expected a graph without them")
    made = {t.name for op in graph for t in op.outputs}
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", "fp16"))
    copies: dict[str, Any] = {}
    for op in graph:
        if op.kind != "conv2d":
            b.add(op)
            continue
        inputs = list(op.inputs)
        for i, t in enumerate(inputs[:2]):
            spatial = int(t.shape[2]) * int(t.shape[3]) if len(t.shape) == 4 else 0
            weight = t.role == Role.WEIGHT
            if t.name in made or len(t.shape) != 4 or (weight and spatial <= 1):
                continue
            if t.name not in copies:
                name = f"{op.name}.{'weight' if weight else 'input'}_channels_last"
                copies[t.name] = b.op("transpose", [t], name=name, perm=(0, 1, 2, 3))
            inputs[i] = copies[t.name]
        b.add(Op(op.name, op.kind, tuple(inputs), op.outputs, op.attrs, op.group))
    return b.build({**dict(graph.meta), "layout_copies": True})


def parse_framework_field(text: str, where: str) -> tuple[FrameworkProfile, dict[str, str]]:
    """``NAME[;key=value...]`` of a measurement row's ``framework`` column -> (profile, options).

    Options: ``optimizer=none`` (the timed training loop has no optimizer step) or the name of an
    optimizer; ``attention=fused|decomposed`` (overrides the profile's); ``mode=reduce-overhead``
    (``compile`` only: torch.compile's mode that replays the compiled program from CUDA graphs).
    """
    head, *rest = [s.strip() for s in str(text).split(";")]
    prof = get_profile(head, where=where)
    opts: dict[str, str] = {}
    for item in rest:
        k, sep, v = item.partition("=")
        if not sep or k not in ("optimizer", "attention", "mode"):
            raise FrameworkError(f"{where}: framework option {item!r}; expected optimizer=NAME, "
                                 "attention=fused|decomposed or mode=reduce-overhead after the name "
                                 "(e.g. 'sdpa;optimizer=none')")
        if k == "attention" and v not in ("fused", "decomposed"):
            raise FrameworkError(f"{where}: attention; got {v!r}; expected fused or decomposed")
        if k == "mode" and (prof.name != "compile" or v not in COMPILE_MODES):
            raise FrameworkError(f"{where}: mode; got {v!r} for framework {prof.name!r}; expected "
                                 "default, reduce-overhead or max-autotune with framework compile")
        opts[k] = v
    return prof, opts


# ------------------------------------------------------------------------------------------------
# what Hugging Face model code issues, per family


@dataclass(frozen=True)
class HFModelCode:
    """What a family's Hugging Face ``modeling_*.py`` launches in eager mode.

    ``activation`` is the config's activation name (a key of :data:`ACTIVATION_KERNELS`);
    ``attn_dropout``/``resid_dropout``/``embd_dropout`` the released config's probabilities (a
    dropout of p = 0 launches no kernel: ATen's ``dropout`` returns its input); ``softmax_fp32``: the
    attention softmax is computed in float32 and cast back (Llama's ``eager_attention_forward``);
    ``separate_projections``: query, key and value (and a gated MLP's gate and up) are separate
    ``nn.Linear`` modules, one GEMM each (BERT, ViT, OPT, Llama), not one fused GEMM (GPT-2's ``c_attn``).
    """

    activation: str
    attn_dropout: float = 0.0
    resid_dropout: float = 0.0
    embd_dropout: float = 0.0
    softmax_fp32: bool = False
    separate_projections: bool = True
    source: str = ""


#: Zoo family -> its Hugging Face model code (families without a transformers implementation are absent).
HF_MODEL_CODE: dict[str, HFModelCode] = {
    "gpt2": HFModelCode("gelu_new", 0.1, 0.1, 0.1, separate_projections=False, source="openai-community/gpt2 config.json: activation_function "
                        "gelu_new, attn_pdrop/resid_pdrop/embd_pdrop 0.1; " + _HF_GPT2),
    "bert": HFModelCode("gelu", 0.1, 0.1, 0.1, source="google-bert/bert-base-uncased config.json: hidden_act gelu, "
                        "attention_probs_dropout_prob 0.1, hidden_dropout_prob 0.1; modeling_bert.py "
                        "BertSelfAttention: query, key, value nn.Linear"),
    "opt": HFModelCode("relu", 0.0, 0.1, 0.0, source="facebook/opt-1.3b config.json: activation_function relu, "
                       "dropout 0.1, attention_dropout 0.0 (modeling_opt.py)"),
    "llama": HFModelCode("silu", softmax_fp32=True, source="meta-llama config.json: hidden_act silu, "
                         "attention_dropout 0.0; " + _HF_LLAMA),
    "mistral": HFModelCode("silu", softmax_fp32=True, source="mistralai/Mistral-7B-v0.1 config.json: hidden_act silu,"
                           " attention_dropout 0.0 (modeling_mistral.py follows modeling_llama.py)"),
    "mixtral": HFModelCode("silu", softmax_fp32=True, source="mistralai/Mixtral-8x7B-v0.1 config.json: hidden_act "
                           "silu, attention_dropout 0.0"),
    "gpt_neox": HFModelCode("gelu", separate_projections=False, source="EleutherAI/pythia config.json: hidden_act "
                            "gelu, attention/hidden dropout 0.0; modeling_gpt_neox.py: one query_key_value "
                            "nn.Linear"),
    "vit": HFModelCode("gelu", source="google/vit-base-patch16-224 config.json: hidden_act gelu, dropout 0.0; "
                       "modeling_vit.py ViTSelfAttention: query, key, value nn.Linear"),
}

#: config.json ``model_type`` -> the :data:`HF_MODEL_CODE` family whose model code it runs
#: (Qwen2's modeling file follows Llama's: separate projections, RMSNorm, RoPE, fp32 softmax).
HF_MODEL_TYPES: dict[str, str] = {"gpt2": "gpt2", "bert": "bert", "opt": "opt", "llama": "llama", "mistral": "mistral",
                                  "mixtral": "mixtral", "qwen2": "llama", "vit": "vit", "gpt_neox": "gpt_neox"}

#: Activation name -> the elementwise kernels eager PyTorch launches for it, in order: (op, inputs),
#: inputs naming "x" (the activation's input) or "prev" (the previous kernel's output) or "t<i>" (kernel i's output).
ACTIVATION_KERNELS: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    # 0.5 * x * (1.0 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3.0)))): Python evaluates 0.5 * x first
    "gelu_new": (("scale", ("x",)),            # t0 = 0.5 * x
                 ("pow", ("x",)),              # t1 = pow(x, 3)
                 ("scale", ("t1",)),           # t2 = 0.044715 * t1
                 ("add", ("x", "t2")),         # t3 = x + t2
                 ("scale", ("t3",)),           # t4 = sqrt(2/pi) * t3
                 ("tanh", ("t4",)),            # t5 = tanh(t4)
                 ("add", ("t5",)),             # t6 = 1.0 + t5 (scalar add)
                 ("mul", ("t0", "t6"))),       # t7 = t0 * t6
    "gelu": (("gelu", ("x",)),),               # nn.functional.gelu: one kernel
    "gelu_pytorch_tanh": (("gelu", ("x",)),),  # nn.functional.gelu(approximate='tanh'): one kernel
    "silu": (("silu", ("x",)),),
    "relu": (("relu", ("x",)),),
}


def drop_optimizer(graph: Any) -> Any:
    """A training-step graph without its ``optimizer_update`` ops (a timed loop of forward + backward only).

    The gradients are still computed; ``meta["optimizer"]`` becomes ``"none"``.
    """
    from workloads.ir import OpGraph

    ops = [op for op in graph if op.kind != "optimizer_update"]
    meta = {**dict(graph.meta), "optimizer": "none"}
    return OpGraph(graph.name, ops, meta)


#: Bytes per parameter (read, write) of Megatron-LM's optimizer passes beside the Adam update, by the 16-bit
#: dtype (``_MEGATRON_LM_OPT``): fp16 (gradients accumulated in fp16 unless --accumulate-allreduce-grads-in-fp32):
#: ``main_grad.float()`` (2 + 4), the unscale and inf check (4 + 4), the gradient norm's l2norm (4 + 0), the fp32
#: main parameters cast into the model's (4 + 2); bf16 (fp32 main_grad buffers, no grad scaler): the norm and the
#: cast back only. Both add the zeroing of the gradient buffer before each iteration's forward
#: (:data:`MEGATRON_GRAD_BUFFER_ZERO_BYTES`, written). Not counted: the clipping scale, run only when the norm
#: exceeds --clip-grad. (The ``optimizer_update`` op also reads and writes the 16-bit parameter, 2 + 2 that
#: FusedAdam on the fp32 copy does not.)
MEGATRON_OPTIMIZER_PASS_BYTES = {"fp16": (2 + 4 + 4 + 4, 4 + 4 + 2), "bf16": (4 + 4, 2)}
#: Bytes per parameter written by Megatron-LM's ``DistributedDataParallel.zero_grad_buffer`` (megatron/model/
#: distributed.py: ``MemoryBuffer.zero`` runs ``self.data.zero_()`` on each contiguous main-gradient buffer;
#: megatron/training.py train_step calls ``model.zero_grad_buffer()`` at the start of every iteration), by the
#: 16-bit dtype: the buffer holds ``param.dtype`` gradients (fp16: 2 bytes) unless
#: --accumulate-allreduce-grads-in-fp32, which --bf16 forces (fp32: 4 bytes).
MEGATRON_GRAD_BUFFER_ZERO_BYTES = {"fp16": 2, "bf16": 4}


def megatron_optimizer_passes(graph: Any) -> Any:
    """``graph`` (a training step) with every 16-bit parameter's ``optimizer_update`` carrying the bytes of
    Megatron-LM's passes beside the update (:data:`MEGATRON_OPTIMIZER_PASS_BYTES`, with the gradient buffer's
    zeroing, :data:`MEGATRON_GRAD_BUFFER_ZERO_BYTES`; apex ``multi_tensor_apply``
    runs them over chunks of many tensors, memory-bound, so they are priced as bytes of the update, no op or
    launch of their own). Other graphs are returned unchanged."""
    from dataclasses import replace as dc_replace

    from workloads.ir import Attrs, OpGraph

    ops, changed = [], False
    for op in graph:
        dt = op.inputs[0].dtype.value if op.kind == "optimizer_update" else ""
        rw = MEGATRON_OPTIMIZER_PASS_BYTES.get(dt)
        if rw:
            write = rw[1] + MEGATRON_GRAD_BUFFER_ZERO_BYTES[dt]
            op = dc_replace(op, attrs=Attrs({**op.attrs, "pass_read_bytes": rw[0], "pass_write_bytes": write}))
            changed = True
        ops.append(op)
    return OpGraph(graph.name, ops, dict(graph.meta)) if changed else graph


#: Values of ``FrameworkProfile.wgrad_accumulation``: ``""`` (the gradient written once), ``"te-fused"``,
#: ``"megatron-fused-fp32"`` (:func:`main_grad_accumulation`).
WGRAD_ACCUMULATION = ("", "te-fused", "megatron-fused-fp32")
#: Attribute of a weight-gradient GEMM that accumulates into the main-gradient buffer: the buffer's dtype.
MAIN_GRAD_DTYPE_ATTR = "main_grad_dtype"
#: Attribute beside it: the share of the GEMM's calls over a step that read the buffer (beta = 1); the others
#: overwrite it (beta = 0: cuBLAS reads no C).
MAIN_GRAD_READ_ATTR = "main_grad_read"
#: Attribute of a weight-gradient GEMM whose gradient is then added to the main-gradient buffer by a separate kernel
#: (Megatron-LM's ``DistributedDataParallel`` hook ``param.main_grad.add_(param.grad.data)``): the buffer's dtype.
MAIN_GRAD_ADD_ATTR = "main_grad_add"


def _wgrad_gemms(graph: Any) -> list[Any]:
    """The ops of ``graph`` that are a weight's gradient GEMM: a ``matmul`` or ``grouped_matmul_bwd_weight`` whose
    output is the weight's whole gradient (``grad:NAME``, role gradient, as :func:`workloads.training.training_graph`
    names a weight's sole contribution), directly or through the one view that renames it (``reshape`` to
    ``grad:NAME``); a weight with several contributions keeps its adds."""
    from workloads.ir import Role

    def whole(t: Any) -> bool:
        return t.role is Role.GRADIENT and t.name.startswith("grad:")

    gemms = {op.outputs[0].name: op for op in graph
             if op.kind in ("matmul", "grouped_matmul_bwd_weight") and len(op.outputs) == 1}
    readers: dict[str, int] = {}
    for op in graph:
        for t in op.inputs:
            readers[t.name] = readers.get(t.name, 0) + 1
    viewed = {op.inputs[0].name for op in graph if op.kind == "reshape" and len(op.inputs) == 1
              and len(op.outputs) == 1 and whole(op.outputs[0]) and readers.get(op.inputs[0].name) == 1}
    return [op for name, op in gemms.items() if whole(op.outputs[0]) or name in viewed]


def main_grad_accumulation(graph: Any, mode: str, main_grad_dtype: str, microbatches: int) -> Any:
    """The training step ``graph`` (one microbatch) with its weight-gradient GEMMs accumulating into the
    main-gradient buffer as ``mode`` (:data:`WGRAD_ACCUMULATION`) runs them: each carries
    ``main_grad_dtype`` (:data:`MAIN_GRAD_DTYPE_ATTR`; the GEMM writes D in it) and the share of its calls that
    read C, the buffer, first (:data:`MAIN_GRAD_READ_ATTR`), which the GPU lowering prices as C read and D written
    in that dtype where the graph writes a gradient in its own once (a weight with several gradient contributions
    keeps the graph's adds and is left as it is).

    * ``"te-fused"``: Transformer Engine's linears (``_MCORE_WGRAD_FUSION``) run the GEMM with ``accumulate`` False
      on a step's first microbatch of each model chunk and True on the others: ``(microbatches - 1) /
      microbatches`` of the calls read C; the output layer (group ``lm_head``, Megatron-Core's own
      ``ColumnParallelLinear`` through apex's kernel) reads it on every call.
    * ``"megatron-fused-fp32"``: Megatron-LM's kernel (``_MEGATRON_LM_WGRAD_FUSION``) reads C on every call, and
      only with fp32 main gradients. With 16-bit ones the GEMM writes the gradient in the graph's dtype and the
      data-parallel wrapper's hook adds it to the buffer, ``param.main_grad.add_(param.grad.data)``, a kernel of its
      own on every microbatch (megatron/model/distributed.py lines 188-197 @ d63c2541; since b4bc51b1, 2021-03-08):
      the GEMM carries :data:`MAIN_GRAD_ADD_ATTR` (the buffer's dtype, the parameters' own) instead.

    ``microbatches`` are the step's per model chunk (``ParallelPlan.microbatches``). Unchanged for ``""``.

    Raises
    ------
    ValueError
        For an unknown ``mode`` or a ``microbatches`` below 1.
    """
    from dataclasses import replace as dc_replace

    from workloads.ir import Attrs, OpGraph

    if mode not in WGRAD_ACCUMULATION:
        raise ValueError(f"main_grad_accumulation: mode; got {mode!r}; expected one of "
                         f"{', '.join(repr(m) for m in WGRAD_ACCUMULATION)}{did_you_mean(str(mode), WGRAD_ACCUMULATION[1:])}")
    if int(microbatches) < 1:
        raise ValueError(f"main_grad_accumulation: microbatches; got {microbatches!r}; expected an integer >= 1")
    if not mode:
        return graph
    hook = mode == "megatron-fused-fp32" and main_grad_dtype != "fp32"
    later = (int(microbatches) - 1) / int(microbatches)
    fused = {op.name for op in _wgrad_gemms(graph)}
    if not fused:
        return graph
    ops = []
    for op in graph:
        if op.name in fused and hook:
            op = dc_replace(op, attrs=Attrs({**op.attrs, MAIN_GRAD_ADD_ATTR: main_grad_dtype}))
        elif op.name in fused:
            read = 1.0 if mode == "megatron-fused-fp32" or op.group.split(".")[0] == "lm_head" else later
            op = dc_replace(op, attrs=Attrs({**op.attrs, MAIN_GRAD_DTYPE_ATTR: main_grad_dtype,
                                             MAIN_GRAD_READ_ATTR: read}))
        ops.append(op)
    return OpGraph(graph.name, ops, dict(graph.meta))

def with_profile_meta(graph: Any, profile: FrameworkProfile) -> Any:
    """``graph`` with ``meta["framework"]`` naming ``profile`` (graphs the profile does not change)."""
    from workloads.ir import OpGraph

    if graph.meta.get("framework") == profile.name:
        return graph
    return OpGraph(graph.name, list(graph), {**dict(graph.meta), "framework": profile.name})


#: The name of a weight's autocast cast op is its consumer's name plus this suffix (module_call_counts in
#: simulator.engines.analytical reads it: the cast belongs to the consumer's module call).
AUTOCAST_CAST_SUFFIX = "/autocast"

#: Op kinds ``torch.autocast`` runs in the low-precision dtype (its "lower_precision_fp" list:
#: convolutions, linear layers and matmuls), whose fp32 weights it casts first.
AUTOCAST_WEIGHT_KINDS = frozenset({"conv1d", "conv2d", "matmul"})


def autocast_weight_casts(graph: Any) -> Any:
    """An inference graph as eager PyTorch runs it under ``torch.autocast``: the weights stay fp32
    (the model is not converted) and every convolution or linear layer first casts its weight to the
    graph's low-precision dtype.

    Autocast keeps a cast weight only until the autocast region ends (``cached_cast`` in PyTorch's
    ``aten/src/ATen/autocast_mode.cpp`` caches leaf tensors that require grad, and the cache is cleared
    when the outermost ``autocast`` context exits), so a timed loop that enters ``autocast`` once per
    forward -- as DeepLearningExamples' validation step does -- pays one cast kernel per weight per
    forward: it reads 4 bytes and writes 2 per element. The weights' memory is their fp32 size.
    Ops of other kinds (embeddings and norms keep the graph's dtype here, although autocast runs them
    on fp32 parameters), weights they share (a tied LM head), and weights that are not 16-bit, are left
    as they are. ``meta["autocast"]``
    records the transform; applying it twice is refused.

    PaddlePaddle's O1 mixed precision of a static program (``fp16_utils.rewrite_program``) runs the same
    kernels: it inserts a ``cast`` op before each white-list op for every fp32 input, parameters included,
    and leaves the parameters fp32, so every run of the program casts every linear weight and bias again.
    """
    from workloads.dtypes import DType
    from workloads.ir import GraphBuilder, Op, Role, TensorSpec

    if graph.meta.get("autocast"):
        raise ValueError(f"graph {graph.name!r}: autocast weight casts already applied; expected a graph without them")
    if any(op.kind == "optimizer_update" or op.kind.endswith(("_bwd", "bwd_data", "bwd_weight")) for op in graph):
        raise ValueError(f"graph {graph.name!r}: autocast weight casts: got a training graph; expected an "
                         "inference graph (training keeps its casts inside the step)")
    # a weight another kind of op also reads (GPT-2's LM head tied to the token embedding) keeps its
    # dtype: the graph has one tensor per name
    shared = {t.name for op in graph if op.kind not in AUTOCAST_WEIGHT_KINDS for t in op.inputs if t.role == Role.WEIGHT}
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", "fp16"))
    cast: dict[str, TensorSpec] = {}
    for op in graph:
        weights = [t for t in op.inputs if t.role == Role.WEIGHT and t.dtype.bits == 16 and t.name not in shared]
        if op.kind not in AUTOCAST_WEIGHT_KINDS or not weights:
            b.add(op)
            continue
        inputs = list(op.inputs)
        for i, t in enumerate(inputs):
            if t in weights:
                if t.name not in cast:  # named after the op whose call casts it (no new module path)
                    master = TensorSpec(t.name, t.shape, DType.FP32, Role.WEIGHT)
                    suffix = "" if t is weights[0] else f"_{weights.index(t)}"
                    cast[t.name] = b.op("elementwise", [master], name=f"{op.name}{AUTOCAST_CAST_SUFFIX}{suffix}", op="cast",
                                        out_dtype=t.dtype.value)
                inputs[i] = cast[t.name]
        b.add(Op(op.name, op.kind, tuple(inputs), op.outputs, op.attrs, op.group))
    return b.build({**dict(graph.meta), "autocast": True})


#: TensorRT-LLM v0.5's Llama engines run the gate and up projections of the gated MLP as two GEMMs unless
#: the engine is built with ``--use_fused_mlp``: NVIDIA/TensorRT-LLM docs/source/performance.md @ 138f96d45f90,
#: 'Known Issues', 'Fused Matmul + Gated-SiLU (LLaMA)': "The current implementation combines two Matmul
#: operations into one Matmul followed by a separate SwiGLU kernel (when `--use_fused_mlp` is enabled)"; the
#: same page's Llama build commands (section 'Benchmarking per Model') do not pass that flag, and
#: ``GatedMLP.forward`` (tensorrt_llm/layers/mlp.py of that era) calls ``self.fc`` and ``self.gate``, two
#: ``ColumnLinear`` layers on the same input.
TRTLLM_V05_UNFUSED_MLP = ("NVIDIA/TensorRT-LLM docs/source/performance.md @ 138f96d45f90b9667426f7c47297d8c06bafac73, "
                          "'Known Issues' (--use_fused_mlp combines the two Matmuls into one) and the Llama build "
                          "commands, which do not pass --use_fused_mlp")

_GATE_UP = "gate_up"


def split_gated_mlp(graph: Any) -> Any:
    """``graph`` with every fused gate/up projection (an op named ``*.gate_up``, ``matmul`` or ``quant_matmul``,
    whose only consumer splits its last axis) run as one GEMM per part on the same input, as TensorRT-LLM v0.5
    builds a Llama engine without ``--use_fused_mlp`` (:data:`TRTLLM_V05_UNFUSED_MLP`). The parts' weights (and a
    per-output-channel scale vector) partition the fused ones, so the parameters and bytes are unchanged; the
    parts' outputs are the split's outputs, so every consumer is unchanged. The first part takes the fused op's
    place and each later part is issued just before the first op that reads its output (so the activation follows
    the gate GEMM and the product the up GEMM, as epilogues when the stack fuses them). Other ops are kept."""
    return _split_fused_projection(graph, _GATE_UP)


#: TensorRT-LLM v0.5's Llama engines time each GEMM's tactic at the context profile's opt token count. The build
#: of performance.md @ 138f96d ('Benchmarking per Model', Llama2-7b) passes neither ``--use_gemm_plugin`` nor
#: ``--paged_kv_cache``, so ``GenerationMixin.prepare_basic_inputs`` (tensorrt_llm/models/generation_mixin.py of
#: the 2023 releases) enables two optimisation profiles (``use_gemm_plugin == False`` and no in-flight batching),
#: the context one with ``num_tokens`` in ``[1, (max_input_len * max_batch_size + 1) // 2, max_input_len *
#: max_batch_size]`` = [1, 65536, 131072] for ``--max_batch_size 64 --max_input_len 2048`` (``max_num_tokens``
#: not passed); and TensorRT's builder "selects the kernels that result in the lowest runtime for the optimum
#: input tensor dimensions, and are valid for all input tensor sizes in the valid range between minimum and
#: maximum dimensions" (TensorRT API reference, ``IOptimizationProfile``, https://docs.nvidia.com/deeplearning/
#: tensorrt/api/python_api/infer/Core/OptimizationProfile.html; the same text in the 8.6.1 C++ reference); TensorRT-LLM's
#: own tuning guide says the same ("TensorRT optimizes for the optimal shape while supporting the range between min
#: and max", nvidia.github.io/TensorRT-LLM/performance/performance-tuning-guide/useful-build-time-flags.html,
#: 'Multiple Profiles'), and a maintainer, days after v0.5.0, that the kernels TensorRT generates are chosen
#: "automatically by TensorRT when building the TensorRT engine" (NVIDIA/TensorRT-LLM issue #129, 2023-10-26).
#: ``GptSession::createContexts`` makes one execution context per profile (quoted in NVIDIA/TensorRT-LLM issue #980).
TRTLLM_V05_TACTIC_PROFILE = ("NVIDIA/TensorRT-LLM docs/source/performance.md @ 138f96d45f90 (Llama2-7b build: "
                             "--max_batch_size 64 --max_input_len 2048, no --use_gemm_plugin, no --paged_kv_cache); "
                             "tensorrt_llm/models/generation_mixin.py prepare_basic_inputs (two profiles, context "
                             "num_tokens opt (max_input_len * max_batch_size + 1) // 2); TensorRT IOptimizationProfile "
                             "(kernels selected for the opt dimensions); TensorRT-LLM performance tuning guide, "
                             "'Multiple Profiles'; NVIDIA/TensorRT-LLM issues #129 and #980")


def gemm_tactics_at(graph: Any, tokens: int) -> Any:
    """``graph`` with every linear-layer GEMM (``matmul`` or ``quant_matmul`` on a 2-D weight) whose rows are the
    step's tokens (``batch x seq`` of ``graph.meta``; more than one row) run with the kernel picked for ``tokens``
    rows (``attrs['tactic_m']``, which :func:`simulator.lowering.gpu._gemm_cost` honours): a TensorRT engine's
    tactic, timed once at its optimisation profile's opt shape and run at every shape of the profile
    (:data:`TRTLLM_V05_TACTIC_PROFILE`). Other GEMMs are kept: the LM head of a prefill, which TensorRT-LLM v0.5
    runs after ``gather_last_token_logits`` on one row per sequence (its M is the batch, outside the num_tokens
    dimension of the profile), and batched GEMMs; a graph without ``batch`` / ``seq`` meta marks every GEMM of more
    than one row. Shapes, bytes and FLOPs are unchanged."""
    from workloads.ir import Attrs, Op, OpGraph
    from workloads.semantics import gemm_dims

    if int(tokens) < 1:
        raise ValueError(f"gemm_tactics_at: tokens must be positive; got {tokens}; expected >= 1")
    meta = graph.meta
    step = int(meta["batch"]) * int(meta.get("seq") or 1) if meta.get("batch") else None
    ops: list[Op] = []
    for op in graph.ops:
        linear = op.kind in ("matmul", "quant_matmul") and len(op.inputs) >= 2 and len(op.inputs[1].shape) == 2
        rows = gemm_dims(op)[1] if linear else 0
        if rows > 1 and (step is None or rows == step):
            op = Op(op.name, op.kind, op.inputs, op.outputs, Attrs({**dict(op.attrs), "tactic_m": int(tokens)}),
                    op.group)
        ops.append(op)
    return OpGraph(graph.name, ops, dict(graph.meta))


#: PaddlePaddle's ``paddle.nn.MultiHeadAttention`` projects the query, key and value with three ``Linear`` layers
#: (``q_proj``, ``k_proj``, ``v_proj``; ``_prepare_qkv`` calls ``self.q_proj(query)`` and ``compute_kv`` the other
#: two: python/paddle/nn/layer/transformer.py), which a static program runs as three matmul ops with their bias adds.
PADDLE_SEPARATE_QKV = ("PaddlePaddle/Paddle python/paddle/nn/layer/transformer.py (stored version "
                       "029ad7b4813980bd7ede5777f14080b128e00c45): MultiHeadAttention's q_proj, k_proj and v_proj")

_QKV = "qkv"


def split_qkv_projection(graph: Any) -> Any:
    """``graph`` with every fused query/key/value projection (an op named ``*.qkv`` whose only consumer splits its
    last axis) run as one GEMM per part on the same input, as a framework whose attention layer holds three
    projections runs it (:data:`PADDLE_SEPARATE_QKV`). Weights and bias partition the fused ones (parameters and
    bytes unchanged) and the parts' outputs are the split's, as in :func:`split_gated_mlp`. A forward graph: a
    training step is derived from the split forward graph (:func:`workloads.training.training_graph`)."""
    return _split_fused_projection(graph, _QKV)


#: PaddlePaddle's static ``paddle.nn.functional.linear`` appends a ``matmul_v2`` op and then, with a bias, an
#: ``elementwise_add`` op (python/paddle/nn/functional/common.py, ``linear``, the static-graph branch); only the
#: ``fuse_gemm_epilogue`` build pass folds the add into the GEMM (``fused_gemm_epilogue``).
PADDLE_STATIC_LINEAR = ("PaddlePaddle/Paddle python/paddle/nn/functional/common.py: linear appends matmul_v2 and, with "
                        "a bias, elementwise_add; BuildStrategy.fuse_gemm_epilogue fuses them")


def unfuse_linear_bias(graph: Any) -> Any:
    """``graph`` with the bias of every linear layer added by its own elementwise kernel after the GEMM, as a static
    PaddlePaddle program runs ``nn.Linear`` without the ``fuse_gemm_epilogue`` pass (:data:`PADDLE_STATIC_LINEAR`):
    a ``matmul`` whose third input holds one value per output column (the bias) loses it, writes its
    product to a new tensor, and an ``elementwise`` add (``<name>.bias_add``) of that product and the bias writes the
    op's old output, so every consumer is unchanged. A forward graph: a training step derived from it gets the add's
    gradient (the bias gradient a reduction of the output gradient). Other ops are kept."""
    from workloads.ir import Attrs, Op, OpGraph, TensorSpec

    ops: list[Op] = []
    for op in graph.ops:
        bias = op.inputs[2] if op.kind == "matmul" and len(op.inputs) == 3 and len(op.outputs) == 1 else None
        # the bias: one value per output column (a weight, or its cast when the weights are cast first)
        if bias is None or bias.shape != op.outputs[0].shape[-1:]:
            ops.append(op)
            continue
        (y,) = op.outputs
        product = TensorSpec(f"{y.name}.product", y.shape, y.dtype, y.role)
        ops.append(Op(op.name, op.kind, op.inputs[:2], (product,), op.attrs, op.group))
        ops.append(Op(f"{op.name}.bias_add", "elementwise", (product, bias), (y,), Attrs({"op": "add"}), op.group))
    return OpGraph(graph.name, ops, dict(graph.meta))


#: PaddlePaddle's gradient clipping by the global norm in a static program (``paddle.nn.ClipGradByGlobalNorm``,
#: ``_static_clip``): a ``squared_l2_norm`` op per gradient, ``add_n`` of those norms, ``sqrt``, a ``full`` of
#: clip_norm, ``maximum`` and ``divide`` for the scale, then an in-place ``elementwise_mul`` of every gradient by it,
#: all before the optimizer's update ops. DeepLearningExamples' BERT passes it to every optimizer it builds.
PADDLE_GLOBAL_NORM_CLIP = ("PaddlePaddle/Paddle python/paddle/nn/clip.py (stored version "
                           "327414bd3ec27b562bde5c8130671eaabfbdb439): ClipGradByGlobalNorm._static_clip; "
                           "NVIDIA/DeepLearningExamples PaddlePaddle/LanguageModeling/BERT/optimizer.py @ "
                           "a5388a45f71a949639b35cc5b990bd130d2d8164: AdamW.__call__ passes "
                           "grad_clip=paddle.nn.ClipGradByGlobalNorm(clip_norm=1.0) to paddle.optimizer.AdamW")


def clip_grad_by_global_norm(graph: Any) -> Any:
    """A training step with its gradients clipped by their global norm before the update, as a static
    PaddlePaddle program runs ``ClipGradByGlobalNorm`` (:data:`PADDLE_GLOBAL_NORM_CLIP`): for every
    ``optimizer_update`` a ``reduction`` (``<update>.grad_sq_norm``: the gradient's sum of squares, 2 FLOPs per
    element), then the scale from those norms (``optimizer.grad_norm.*``: their ``add_n``, the square root, the
    maximum with clip_norm and the division, one small kernel each), then an ``elementwise`` multiply
    (``<update>.grad_clip``) of the gradient by the scale, whose result the update reads. A graph without
    ``optimizer_update`` ops is refused."""
    from workloads.ir import Attrs, Op, OpGraph, TensorSpec

    updates = [op for op in graph.ops if op.kind == "optimizer_update"]
    if not updates:
        raise ValueError(f"graph {graph.name!r}: gradient clipping: got no optimizer_update op; expected a training step")
    ops = [op for op in graph.ops if op.kind != "optimizer_update"]
    norms = []
    for u in updates:
        g = u.inputs[1]
        sq = TensorSpec(f"{g.name}.sq_norm", (1,), g.dtype, g.role)
        ops.append(Op(f"{u.name}.grad_sq_norm", "reduction", (g,), (sq,),
                      Attrs({"op": "sum", "flops_per_element": 2}), "optimizer"))
        norms.append(sq)
    dt, role = norms[0].dtype, norms[0].role
    stacked = TensorSpec("optimizer.grad_norm.norms", (len(norms),), dt, role)
    ops.append(Op("optimizer.grad_norm.add_n", "concat", tuple(norms), (stacked,), Attrs({"axis": 0}), "optimizer"))
    prev = TensorSpec("optimizer.grad_norm.sum", (1,), dt, role)
    ops.append(Op("optimizer.grad_norm.sum", "reduction", (stacked,), (prev,), Attrs({"op": "sum"}), "optimizer"))
    for fn in ("sqrt", "max", "div"):
        out = TensorSpec(f"optimizer.grad_norm.{fn}", (1,), dt, role)
        ops.append(Op(f"optimizer.grad_norm.{fn}", "elementwise", (prev,), (out,), Attrs({"op": fn}), "optimizer"))
        prev = out
    for u in updates:
        g = u.inputs[1]
        clipped = TensorSpec(f"{g.name}.clipped", g.shape, g.dtype, g.role)
        ops.append(Op(f"{u.name}.grad_clip", "elementwise", (g, prev), (clipped,), Attrs({"op": "mul"}), "optimizer"))
        ops.append(Op(u.name, u.kind, (u.inputs[0], clipped, *u.inputs[2:]), u.outputs, u.attrs, u.group))
    return OpGraph(graph.name, ops, {**dict(graph.meta), "grad_clip": "global_norm"})


#: PaddlePaddle's static mixed precision with a loss scale (``OptimizerWithMixedPrecision.apply_gradients`` unless
#: the optimizer checks for inf itself): ``check_finite_and_unscale`` over every gradient, one multi-tensor kernel
#: that reads each gradient element and writes it divided by the scale, then ``update_loss_scaling``, whose
#: ``FusedFillIf`` kernel returns at once unless a gradient overflowed.
PADDLE_AMP_UNSCALE = ("PaddlePaddle/Paddle python/paddle/fluid/contrib/mixed_precision/decorator.py (stored version "
                      "e65d9a13c106193f6b17bc3ccd43b4ee8eabc381): apply_gradients, _check_finite_and_unscale; "
                      "paddle/phi/kernels/gpu/amp_kernel.cu (stored version 33ac1d3482ee7e2de27ecb8ed4f5acf2c100a451): "
                      "CheckFiniteAndUnscale, FusedFillIf")


def amp_unscale_pass(graph: Any) -> Any:
    """A training step whose gradients are unscaled and checked for inf by one pass over all of them before the
    update (:data:`PADDLE_AMP_UNSCALE`): every ``optimizer_update`` carries one more read and one more write of its
    gradient per element (``pass_read_bytes`` / ``pass_write_bytes``, as :func:`megatron_optimizer_passes` prices
    multi-tensor passes: bytes of the update, no launch of their own). A graph without ``optimizer_update`` ops is
    refused."""
    from dataclasses import replace as dc_replace

    from workloads.ir import Attrs, OpGraph

    if not any(op.kind == "optimizer_update" for op in graph.ops):
        raise ValueError(f"graph {graph.name!r}: loss-scale unscaling: got no optimizer_update op; expected a training step")
    ops = []
    for op in graph.ops:
        if op.kind == "optimizer_update":
            b = op.inputs[1].dtype.bits // 8  # per updated parameter: one gradient element each (dense or sparse)
            attrs = {**op.attrs, "pass_read_bytes": float(op.attrs.get("pass_read_bytes", 0)) + b,
                     "pass_write_bytes": float(op.attrs.get("pass_write_bytes", 0)) + b}
            op = dc_replace(op, attrs=Attrs(attrs))
        ops.append(op)
    return OpGraph(graph.name, ops, {**dict(graph.meta), "amp_unscale": True})


#: PaddlePaddle's ``paddle.nn.MultiHeadAttention`` splits and merges heads with ``tensor.transpose`` (perm
#: ``[0, 2, 1, 3]``) after reshaping the query, key and value and before reshaping the output
#: (python/paddle/nn/layer/transformer.py, ``_prepare_qkv``, ``compute_kv`` and ``forward``); a static program
#: runs each as a ``transpose2`` op, whose kernel writes the permuted tensor.
PADDLE_HEAD_TRANSPOSES = ("PaddlePaddle/Paddle python/paddle/nn/layer/transformer.py (stored version "
                          "029ad7b4813980bd7ede5777f14080b128e00c45): MultiHeadAttention's tensor.transpose of q, k, v "
                          "and of the output, perm [0, 2, 1, 3]")

_SPLIT_HEADS = (".q_heads", ".k_heads", ".v_heads")
_MERGE_HEADS = ".merge_heads"


def head_transposes(graph: Any) -> Any:
    """``graph`` with the head split and merge of every attention layer as transpose kernels, as a framework that
    permutes ``(B, S, H, D)`` to ``(B, H, S, D)`` with a copy runs them (:data:`PADDLE_HEAD_TRANSPOSES`): each
    ``*.q_heads`` / ``*.k_heads`` / ``*.v_heads`` reshape to ``(B, H, S, D)`` becomes a reshape to ``(B, S, H, D)``
    followed by a ``transpose`` (``<name>.transpose``), and each ``*.merge_heads`` reshape of a ``(B, H, S, D)``
    tensor is preceded by the inverse ``transpose``. Tensor names seen by other ops are unchanged; other ops are
    kept. A forward graph: a training step derived from it gets the transposes' gradients (transposes too)."""
    from workloads.ir import Attrs, Op, OpGraph, TensorSpec

    ops: list[Op] = []
    perm = Attrs({"perm": (0, 2, 1, 3)})
    for op in graph.ops:
        if op.kind == "reshape" and op.name.endswith(_SPLIT_HEADS) and len(op.outputs[0].shape) == 4:
            y = op.outputs[0]
            b, h, s, d = y.shape
            mid = TensorSpec(f"{y.name}.bshd", (b, s, h, d), y.dtype, y.role)
            ops.append(Op(op.name, "reshape", op.inputs, (mid,), Attrs({"shape": (b, s, h, d)}), op.group))
            ops.append(Op(f"{op.name}.transpose", "transpose", (mid,), (y,), perm, op.group))
        elif op.kind == "reshape" and op.name.endswith(_MERGE_HEADS) and len(op.inputs[0].shape) == 4:
            x = op.inputs[0]
            b, h, s, d = x.shape
            mid = TensorSpec(f"{x.name}.bshd", (b, s, h, d), x.dtype, x.role)
            ops.append(Op(f"{op.name}.transpose", "transpose", (x,), (mid,), perm, op.group))
            ops.append(Op(op.name, "reshape", (mid,), op.outputs, op.attrs, op.group))
        else:
            ops.append(op)
    return OpGraph(graph.name, ops, dict(graph.meta))


#: PaddlePaddle's O1 rewrite (``fp16_utils.rewrite_program``) puts an op none of its lists names in the black (fp32)
#: set, and a gray op with an input from the black set there too (``rewrite_program_by_amp_lists``; lists in
#: ``fp16_lists.py``: ``unsqueeze2`` in none, ``cast`` and ``scale`` and ``elementwise_add`` gray, ``matmul`` white).
#: BERT's attention mask (``modeling.py``: ``unsqueeze`` of an int32 comparison; ``_convert_attention_mask``: a cast
#: and two scales) is therefore fp32 from the black set, and each layer's ``product + attn_mask`` runs in fp32 between
#: a cast of the fp16 scores and the cast back before the (white) softmax.
PADDLE_O1_MASK_ADD = ("PaddlePaddle/Paddle python/paddle/fluid/contrib/mixed_precision/fp16_utils.py "
                      "(rewrite_program_by_amp_lists, _insert_cast_op) and fp16_lists.py (stored version "
                      "02c53c2deaa4a3752e53a80f278729600eaa084a)")


def fp32_score_add(graph: Any) -> Any:
    """``graph`` with each attention layer's elementwise op on the scores (``*.core.scale``, which a framework that
    folds the scale into the score GEMM runs as its mask add) computed in fp32 between two casts, as PaddlePaddle's
    O1 rewrite runs the mask add (:data:`PADDLE_O1_MASK_ADD`): the scores are cast up, the op writes fp32, and its
    result is cast back to the graph's dtype before the softmax. Tensor names seen by other ops are unchanged;
    graphs already in fp32 and other ops are kept."""
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, OpGraph, TensorSpec

    ops: list[Op] = []
    for op in graph.ops:
        x = op.inputs[0] if op.kind == "elementwise" and op.name.endswith(".core.scale") else None
        if x is None or x.dtype is DType.FP32:
            ops.append(op)
            continue
        (y,) = op.outputs
        x32 = TensorSpec(f"{x.name}.cast_fp32", x.shape, DType.FP32, x.role)
        y32 = TensorSpec(f"{y.name}.fp32", y.shape, DType.FP32, y.role)
        ops.append(Op(f"{op.name}.cast_fp32", "elementwise", (x,), (x32,), Attrs({"op": "cast", "out_dtype": "fp32"}),
                      op.group))
        ops.append(Op(op.name, op.kind, (x32, *op.inputs[1:]), (y32,), op.attrs, op.group))
        ops.append(Op(f"{op.name}.cast_back", "elementwise", (y32,), (y,),
                      Attrs({"op": "cast", "out_dtype": y.dtype.value}), op.group))
    return OpGraph(graph.name, ops, dict(graph.meta))


#: PaddlePaddle's O1 rewrite puts ``lookup_table_v2`` (an embedding lookup) on its default black list ("fp16 is
#: slower than fp32, though fp16 is supported", ``fp16_lists.py``), and DeepLearningExamples' BERT passes
#: ``custom_white_list=['softmax', 'layer_norm', 'gelu']`` and no custom black list under O1 (``program.py``
#: ``dist_optimizer`` for the fine-tuning step, ``run_squad.py`` for its evaluation program). So the three lookups
#: read fp32 tables and write fp32 rows, the gray ``elementwise_add`` ops that sum them take an input from the black set
#: and run in fp32 too (``rewrite_program_by_amp_lists``), and the white ``layer_norm`` after them gets a cast of the
#: fp32 sum to fp16 (``_insert_cast_op``); from that layer norm on, every op of the encoder is white or a gray op fed
#: by white ones: fp16. The tables are fp32 parameters without a master copy.
PADDLE_O1_FP32_EMBEDDINGS = ("PaddlePaddle/Paddle python/paddle/fluid/contrib/mixed_precision/fp16_lists.py (stored "
                             "version 02c53c2deaa4a3752e53a80f278729600eaa084a: black_list holds lookup_table_v2) and "
                             "fp16_utils.py (stored version 00c410494eab73b9cebe0747a007919a8bd397eb: "
                             "rewrite_program_by_amp_lists, _insert_cast_op); NVIDIA/DeepLearningExamples "
                             "PaddlePaddle/LanguageModeling/BERT program.py and run_squad.py @ "
                             "a5388a45f71a949639b35cc5b990bd130d2d8164 (custom_white_list softmax, layer_norm, gelu)")

#: Elementwise ops O1's gray list holds (``elementwise_add``, ``elementwise_mul``, ``scale``, ``dropout``, ...): fp32
#: when an input comes from the black set.
_O1_GRAY_ELEMENTWISE = frozenset({"add", "sub", "mul", "div", "scale", "dropout"})


def o1_fp32_embeddings(graph: Any) -> Any:
    """``graph`` with its embedding lookups run as PaddlePaddle's O1 rewrite runs them (:data:`PADDLE_O1_FP32_EMBEDDINGS`):
    each ``embedding`` op reads an fp32 table and writes fp32 rows, the gray elementwise ops fed by them compute in
    fp32, and the first other op that reads their fp32 result (the layer norm) reads it through one cast to the
    graph's dtype, shared by every such reader. A forward graph only (a training step derives from it: the cast's
    gradient casts back, the tables' gradients and updates are fp32); a graph without embedding ops, or already in
    fp32, is returned as it is."""
    from workloads.dtypes import DType
    from workloads.ir import Attrs, Op, OpGraph, Role, TensorSpec

    if any(op.kind == "optimizer_update" or op.kind.endswith("_bwd") for op in graph.ops):
        raise ValueError(f"graph {graph.name!r}: O1 fp32 embeddings: got a training graph; expected a forward graph "
                         "(the step is derived from it)")
    fp32: dict[str, TensorSpec] = {}  # an fp16 activation's name -> its fp32 tensor (same name)
    cast: dict[str, TensorSpec] = {}  # an fp32 activation's name -> its cast to the graph's dtype
    ops: list[Op] = []

    def up(t: TensorSpec) -> TensorSpec:
        return TensorSpec(t.name, t.shape, DType.FP32, t.role)

    for op in graph.ops:
        black = op.kind == "embedding" and any(t.role == Role.WEIGHT and t.dtype.bits == 16 for t in op.inputs)
        gray = op.kind == "elementwise" and op.attrs.get("op") in _O1_GRAY_ELEMENTWISE \
            and any(t.name in fp32 for t in op.inputs)
        if black or gray:
            ins = tuple(up(t) if (t.name in fp32 or (black and t.role == Role.WEIGHT)) and t.dtype.bits == 16 else t
                        for t in op.inputs)
            outs = tuple(up(t) if t.dtype.bits == 16 else t for t in op.outputs)
            fp32.update({t.name: u for t, u in zip(op.outputs, outs, strict=True) if u is not t})
            ops.append(Op(op.name, op.kind, ins, outs, op.attrs, op.group))
            continue
        ins = list(op.inputs)
        for i, t in enumerate(ins):
            if t.name in fp32:
                if t.name not in cast:
                    c = TensorSpec(f"{t.name}.cast_fp16", t.shape, t.dtype, t.role)
                    ops.append(Op(f"{op.name}.cast_fp16", "elementwise", (fp32[t.name],), (c,),
                                  Attrs({"op": "cast", "out_dtype": t.dtype.value}), op.group))
                    cast[t.name] = c
                ins[i] = cast[t.name]
        ops.append(op if ins == list(op.inputs) else Op(op.name, op.kind, tuple(ins), op.outputs, op.attrs, op.group))
    return OpGraph(graph.name, ops, dict(graph.meta))


#: PaddlePaddle's old ``Executor`` run without its program cache (``exe.run(program, ...)`` with the default
#: ``use_program_cache=False``): every call clones the program and appends its feed and fetch ops
#: (``executor.py`` ``_add_feed_fetch_ops``), then the C++ executor creates every op and every variable in a new local
#: scope and runs ops that have never run (``core.Executor.run(program.desc, scope, 0, True, True, ...)``), all host
#: work, before the first kernel when the previous call ended by copying its fetches to the host. PaddlePaddle PR
#: #18483 timed it against the cached path on one program: PaddingRNN 'small', rnn_model 'static' (PaddlePaddle/models
#: @ b1851df54ac5bd85a84026c25b8598d3f2d34d43 PaddleNLP/language_model, fetching four variables every step),
#: 210.17610 s per epoch with use_program_cache=False against 44.67472 s with it (fluid.Executor). One epoch is
#: (929,589 // 20 - 1) // 20 = 2,323 steps (reader.py get_data_iter, batch 20, 20 steps; ptb.train.txt's 929,589
#: training words with <eos>: Edward's observations.ptb documentation, 42,068 sentences of 887,521 words). The step's program has 1,250 ops: 1,235 counted in the training program that lm_model.py and
#: train.py build (forward, append_backward, GradientClipByGlobalNorm, SGD; built with PaddlePaddle 2.6.2's static
#: graph builder), 7 more for fluid 1.x's pow and reduce_sum per gradient where 2.6 has one squared_l2_norm
#: (python/paddle/fluid/clip.py GradientClipByGlobalNorm.process_context), one read op of the DataLoader and 3 feed and
#: 4 fetch ops. (210.17610 - 44.67472) / 2,323 / 1,250 = 57.0 us per op. The host of that run is not stated (a 2019
#: PaddlePaddle develop build); the figure holds the clone, the op and variable creation and the first run of each new
#: op together, all of it serial in that host-bound program.
PADDLE_UNCACHED_RUN_SOURCE = (
    "PaddlePaddle/Paddle PR #18483 ('Refine the cache of program, context and scope in executor', 2019): PaddingRNN "
    "small, static, fluid.Executor, 210.17610 s/epoch with use_program_cache=False, 44.67472 s/epoch with True; "
    "PaddlePaddle/models @ b1851df54ac5bd85a84026c25b8598d3f2d34d43 PaddleNLP/language_model (train.py, reader.py, "
    "config.py small) and PaddleNLP/models/language_model/lm_model.py: 2,323 steps per epoch, 1,250 ops per step")
_PTB_EPOCH_S = (210.17610, 44.67472)  # PR #18483: use_program_cache False, True
_PTB_STEPS, _PTB_OPS = (929_589 // 20 - 1) // 20, 1_235 + 7 + 1 + 3 + 4
PADDLE_UNCACHED_RUN_S_PER_OP = (_PTB_EPOCH_S[0] - _PTB_EPOCH_S[1]) / _PTB_STEPS / _PTB_OPS


def paddle_uncached_run_s(graph: Any) -> float:
    """Host time (s) of one uncached ``Executor.run`` of ``graph``'s program before its first kernel: every op of the
    graph (kernel or view) is a program op the executor clones, creates and runs anew
    (:data:`PADDLE_UNCACHED_RUN_S_PER_OP`, :data:`PADDLE_UNCACHED_RUN_SOURCE`)."""
    return len(graph.ops) * PADDLE_UNCACHED_RUN_S_PER_OP


#: PaddlePaddle's ParallelExecutor with one thread (a ``CompiledProgram`` ``with_data_parallel`` and
#: ``ExecutionStrategy.num_threads = 1``; the default executor type is kExperimental, "the fastest in most models",
#: paddle/fluid/framework/details/execution_strategy.h): FastThreadedSSAGraphExecutor records the order its ops ran in
#: during the first step and then runs them one after another on the calling thread (PaddlePaddle/Paddle PR #17405,
#: '[Speed] Refine the Executor when the num_thread=1', 2019; PR #36201 prepares the order beforehand), each op's host
#: work (scope lookups, shape inference, kernel choice, the launch) before its kernels. The same PR #18483 table timed
#: it on the same program, script and host as the uncached run: PaddingRNN 'small', 'static', fluid.ParallelExecutor
#: (``--parallel True``, one GPU, so ``num_threads = device_count = 1``), 47.91100 s per epoch. Its step has 1,241
#: ops: the 1,250 of :data:`PADDLE_UNCACHED_RUN_S_PER_OP` less the 3 feed ops (ParallelExecutor copies its feeds into
#: the scope without ops; its 4 fetches stay, as fetch op handles) and less 6 of the 7 ``sgd`` ops, which
#: ``build_strategy.fuse_all_optimizer_ops = True`` (train.py) fuses into one. 47.91100 / 2,323 / 1,241 = 16.6 us per
#: op. It is the whole step per op, so at most the host time per op: it also holds the device time of that host-bound
#: program's small kernels, the feed copies, the four fetches and the Python loop around ``exe.run``.
PADDLE_GRAPH_EXECUTOR_SOURCE = (
    "PaddlePaddle/Paddle PR #18483 ('Refine the cache of program, context and scope in executor', 2019): PaddingRNN "
    "small, static, fluid.ParallelExecutor, 47.91100 s/epoch (one GPU: num_threads 1); PaddlePaddle/models @ "
    "b1851df54ac5bd85a84026c25b8598d3f2d34d43 PaddleNLP/language_model train.py (fuse_all_optimizer_ops, four "
    "fetches per step): 2,323 steps per epoch, 1,241 ops per step; PR #17405 (ops run in traced order on one thread)")
_PTB_PE_EPOCH_S = 47.91100  # PR #18483: fluid.ParallelExecutor
_PTB_PE_OPS = _PTB_OPS - 3 - (7 - 1)  # no feed ops; 7 sgd ops fused into 1
PADDLE_GRAPH_EXECUTOR_S_PER_OP = _PTB_PE_EPOCH_S / _PTB_STEPS / _PTB_PE_OPS


def _split_fused_projection(graph: Any, suffix: str) -> Any:
    """``graph`` with every ``matmul``/``quant_matmul`` named ``*.<suffix>`` whose only consumer splits its last
    axis run as one GEMM per part (:func:`split_gated_mlp`, :func:`split_qkv_projection`)."""
    from workloads.ir import Op, OpGraph, TensorSpec

    ops: list[Op] = []
    drop: set[str] = set()
    pending: dict[str, Op] = {}  # a later part, issued just before the first op reading its output
    for op in graph.ops:
        if op.name in drop:
            continue
        for t in op.inputs:
            if t.name in pending:
                ops.append(pending.pop(t.name))
        cons = graph.consumers(op.outputs[0].name) if op.name.rsplit(".", 1)[-1] == suffix else []
        if op.kind not in ("matmul", "quant_matmul") or len(cons) != 1 or cons[0].kind != "split" \
                or int(cons[0].attrs.get("axis", -1)) not in (-1, len(op.outputs[0].shape) - 1):
            ops.append(op)
            continue
        sp = cons[0]
        drop.add(sp.name)
        n = int(op.inputs[1].shape[-1])
        for i, y in enumerate(sp.outputs):
            width = int(y.shape[-1])
            ins = [op.inputs[0]]
            for t in op.inputs[1:]:  # weight, then scales / bias: split the ones with one entry per output column
                shape = (*t.shape[:-1], width) if t.shape and int(t.shape[-1]) == n else t.shape
                ins.append(TensorSpec(f"{t.name}.part{i}", shape, t.dtype, t.role))
            part = Op(f"{op.name}.part{i}", op.kind, tuple(ins), (y,), op.attrs, op.group)
            if i == 0:
                ops.append(part)
            else:
                pending[y.name] = part
    ops += pending.values()
    return OpGraph(graph.name, ops, dict(graph.meta))
#: What DeepLearningExamples' image-classification validation step times beyond the network
#: (NVIDIA/DeepLearningExamples @ 291f0d02e815b148fa5c2b81bf07aa3552142895,
#: PyTorch/Classification/ConvNets/image_classification/training.py ``validate`` and
#: ``Executor._forward_fn``; ``utils.accuracy``; ``mixup.NLLMultiLabelSmooth``): the compute time runs from
#: the loader's yield to after ``torch.cuda.synchronize()``, and holds the forward under
#: ``torch.no_grad(), autocast(enabled=amp)``, the loss (``NLLMultiLabelSmooth`` in eval mode:
#: ``F.cross_entropy`` = ``log_softmax`` + ``nll_loss``), ``accuracy(output, target, topk=(1, 5))`` (``topk``,
#: ``eq``, then per k a ``float`` copy, a ``sum`` and a ``mul_``) and three ``.item()`` reads (top-1, top-5,
#: loss), each a device-to-host copy the host waits for.
DLE_VALIDATION_SOURCE = ("NVIDIA/DeepLearningExamples @ 291f0d02e815b148fa5c2b81bf07aa3552142895 "
                         "PyTorch/Classification/ConvNets/image_classification/training.py: validate, "
                         "Executor._forward_fn; utils.py: accuracy; mixup.py: NLLMultiLabelSmooth.forward (eval: "
                         "F.cross_entropy); dataloaders.py: PrefetchedWrapper (input.float(), normalised, fp32)")
#: Marker a graph carries once the validation step's ops are added (applying them twice is refused).
DLE_VALIDATION_META = "dle_validation_step"


def classification_validation_step(graph: Any, topk: int = 5) -> Any:
    """An image-classification inference graph as DeepLearningExamples' ``validate()`` times it
    (:data:`DLE_VALIDATION_SOURCE`): after the network, the loss (``log_softmax`` and ``nll_loss``, in
    fp32 under autocast, which first casts the 16-bit logits), the top-1/top-``topk`` accuracy (``topk``,
    ``eq``, and per k a ``float`` copy, ``sum`` and ``mul_``) and three ``.item()`` reads, one small
    device-to-host copy each. Under autocast (``meta["autocast"]``: :func:`autocast_weight_casts`), the
    loader's fp32 images are cast to the low precision at the first convolution (autocast's
    ``cached_cast`` keeps no copy of a tensor that is not a leaf requiring grad).

    Every added op is one ATen call issuing one kernel, so under the eager profile each pays the per-op
    host time. The ``nll_loss`` and ``topk`` ops are priced as reductions reading the logits they index
    (an upper bound on their traffic, a few kilobytes to 1 MB). ``meta["dle_validation_step"]`` records
    the transform; applying it twice is refused, as is a training graph or one without a 2-d logits output.
    """
    from workloads.dtypes import DType
    from workloads.ir import GraphBuilder, Op, Role, TensorSpec

    if graph.meta.get(DLE_VALIDATION_META):
        raise ValueError(f"graph {graph.name!r}: validation-step ops already added; expected a graph without them")
    ops = list(graph)
    if any(op.kind == "optimizer_update" or op.kind.endswith(("_bwd", "bwd_data", "bwd_weight")) for op in ops):
        raise ValueError(f"graph {graph.name!r}: validation step: got a training graph; expected an inference graph")
    logits = ops[-1].outputs[0] if ops else None
    if logits is None or len(logits.shape) != 2:
        raise ValueError(f"graph {graph.name!r}: validation step: got last output "
                         f"{None if logits is None else logits.shape}; expected logits of shape (batch, classes)")
    autocast = bool(graph.meta.get("autocast"))
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", logits.dtype.value))
    inputs = {t.name for t in graph.inputs if t.role == Role.ACTIVATION}
    image: dict[str, TensorSpec] = {}
    for op in ops:
        ins = list(op.inputs)
        for i, t in enumerate(ins):
            if autocast and t.name in inputs and t.dtype.bits == 16 and op.kind in AUTOCAST_WEIGHT_KINDS:
                if t.name not in image:  # the loader's fp32 batch, cast once per forward
                    master = TensorSpec(t.name, t.shape, DType.FP32, Role.ACTIVATION)
                    image[t.name] = b.op("elementwise", [master], name=f"{op.name}{AUTOCAST_CAST_SUFFIX}_input",
                                         op="cast", out_dtype=t.dtype.value)
                ins[i] = image[t.name]
        b.add(Op(op.name, op.kind, tuple(ins), op.outputs, op.attrs, op.group))
    # the loss module's call (NLLMultiLabelSmooth, eval mode: F.cross_entropy); under autocast log_softmax
    # runs in fp32 and casts the 16-bit logits first
    x = b.op("elementwise", [logits], name="loss.log_softmax/autocast", op="cast", out_dtype="fp32") \
        if autocast and logits.dtype.bits == 16 else logits
    logp = b.op("softmax", [x], name="loss.log_softmax", axis=-1)
    loss = b.op("reduction", [logp], name="loss.nll_loss", op="mean", axes=(0, 1))
    # utils.accuracy is a function, not a module: its ops carry no module path
    top = b.op("reduction", [logits], name="accuracy_topk", op="max", axes=(1,), keepdims=True,
               flops_per_element=topk)
    # pred.eq(target): a comparison, one operation per element, priced as a binary elementwise op
    correct = b.op("elementwise", [top, top], name="accuracy_eq", op="sub")
    reads = []
    for k in (1, topk):
        f = b.op("elementwise", [correct], name=f"accuracy_top{k}_float", op="cast", out_dtype="fp32")
        s = b.op("reduction", [f], name=f"accuracy_top{k}_sum", op="sum", axes=(0, 1))
        reads.append((f"top{k}", b.op("elementwise", [s], name=f"accuracy_top{k}_mul", op="scale")))
    for what, t in (*reads, ("loss", loss)):  # .item(): one scalar copied to the host, which waits for it
        b.op("elementwise", [t], name=f"item_{what}", op="copy")
    return b.build({**dict(graph.meta), DLE_VALIDATION_META: True})


#: What DeepLearningExamples' image-classification training loop runs on the GPU for each batch besides the
#: network's step, inside the time its throughput counts (``train``: the loader's yield, ``train_step``, which
#: ends in ``torch.cuda.synchronize()``, a device-wide wait that covers every stream). ``PrefetchedWrapper`` copies
#: the next batch's uint8 images and int64 labels to the GPU and, on a side stream, runs ``next_input.float()``,
#: ``sub_(mean)``, ``div_(std)`` over the fp32 batch and, with one-hot targets (mixup), ``expand``: a
#: ``torch.zeros`` of (batch, classes) then ``scatter``. ``MixUpWrapper`` (``mixup: 0.2`` in every ResNet-50
#: configuration of ``configs.yml``) then runs, on the main stream, ``c * data + (1 - c) * data[perm, :]`` and the
#: same over the targets: a row gather, two scalar multiplies and an add for each.
DLE_TRAIN_LOADER_SOURCE = ("NVIDIA/DeepLearningExamples @ 291f0d02e815b148fa5c2b81bf07aa3552142895 "
                           "PyTorch/Classification/ConvNets/image_classification/dataloaders.py: PrefetchedWrapper."
                           "prefetched_loader, expand; mixup.py: mixup, MixUpWrapper; training.py: train, "
                           "Trainer.train_step (torch.cuda.synchronize()); main.py: MixUpWrapper around the train "
                           "loader when --mixup > 0; configs.yml: resnet_params mixup 0.2, num_classes 1000")
#: Marker a graph carries once the training loader's GPU ops are added (applying them twice is refused).
DLE_TRAIN_LOADER_META = "dle_train_loader"


def classification_train_loader(graph: Any, image: str = "image") -> Any:
    """An image-classification training graph with the GPU work DeepLearningExamples' training loader adds to
    each step (:data:`DLE_TRAIN_LOADER_SOURCE`), before the network: the batch's normalisation (the uint8
    images, one byte an element, cast to fp32, minus the mean, over the standard deviation; the one-hot targets
    as a fill and a scatter) and mixup (for the images and for the targets: a row gather, two scalar multiplies,
    an add). The mixed fp32 images reach the first convolution as its input: under autocast (a 16-bit ``image``)
    through the cast autocast issues there (named as :func:`classification_validation_step` names it), else as
    they are. The normalisation runs on a side stream and the engine adds it serially (its overlap with the
    previous kernels is not modelled). The host-to-device copies (copy engine) and ``torch.randperm`` (host) are
    not kernels and are not priced.

    ``meta[DLE_TRAIN_LOADER_META]`` records the transform; applying it twice, to a graph that is not a training
    step, or to one without the ``image`` input or a (batch, classes) loss input, is a ValueError naming it.
    """
    from workloads.dtypes import DType
    from workloads.ir import GraphBuilder, Op, Role, TensorSpec

    where = f"graph {graph.name!r}: training loader"
    if graph.meta.get(DLE_TRAIN_LOADER_META):
        raise ValueError(f"{where}: its ops are already added; expected a graph without them")
    ops = list(graph)
    if not any(op.kind.endswith(("_bwd", "bwd_data", "bwd_weight")) for op in ops):
        raise ValueError(f"{where}: got an inference graph; expected a training step")
    found = [t for t in graph.inputs if t.name == image and t.role == Role.ACTIVATION and len(t.shape) == 4]
    if not found:
        names = sorted(t.name for t in graph.inputs if t.role == Role.ACTIVATION)
        raise ValueError(f"{where}: no 4-d activation input {image!r}; got {names}")
    x = found[0]
    losses = [op for op in ops if op.kind == "cross_entropy" and len(op.inputs[0].shape) == 2]
    if not losses:
        raise ValueError(f"{where}: no cross_entropy op over (batch, classes) logits; expected one")
    n, classes = losses[0].inputs[0].shape
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", x.dtype.value))
    channels = (1, x.shape[1], 1, 1)
    # PrefetchedWrapper: the uint8 batch (one byte an element) to fp32, normalised per channel in place
    raw = TensorSpec("loader.uint8_images", x.shape, DType.INT8, Role.ACTIVATION)
    mean = TensorSpec("loader.mean", channels, DType.FP32, Role.ACTIVATION)
    std = TensorSpec("loader.std", channels, DType.FP32, Role.ACTIVATION)
    imgs = b.op("elementwise", [raw], name="loader.float", op="cast", out_dtype="fp32")
    imgs = b.op("elementwise", [imgs, mean], name="loader.sub_mean", op="sub")
    imgs = b.op("elementwise", [imgs, std], name="loader.div_std", op="div")
    # expand(): torch.zeros(batch, classes), then scatter of the labels into it (out of place: a copy, then
    # the scatter), each written over (batch, classes) fp32
    labels = TensorSpec("loader.labels", (n, 1), DType.INT64, Role.ACTIVATION)
    row = TensorSpec("loader.class_row", (1, classes), DType.FP32, Role.ACTIVATION)
    tgt = b.op("elementwise", [labels, row], name="loader.one_hot_zeros", op="where", out_dtype="fp32")
    tgt = b.op("elementwise", [labels, tgt], name="loader.one_hot_scatter", op="where", out_dtype="fp32")
    # mixup: c * t + (1 - c) * t[perm, :], for the images, then the targets
    mixed = {}
    for what, t in (("images", imgs), ("targets", tgt)):
        perm = b.op("elementwise", [t], name=f"mixup.{what}_gather", op="copy")
        a = b.op("elementwise", [t], name=f"mixup.{what}_scale", op="scale")
        c = b.op("elementwise", [perm], name=f"mixup.{what}_perm_scale", op="scale")
        # the mixed fp32 images as the first convolution reads them when autocast casts nothing (TF32 and fp32
        # graphs: the same four-byte storage)
        out = x.dtype.value if what == "images" and x.dtype.bits != 16 else "fp32"
        mixed[what] = b.op("elementwise", [a, c], name=f"mixup.{what}_add", op="add", out_dtype=out)
    first = True
    for op in ops:
        ins = list(op.inputs)
        for i, t in enumerate(ins):
            if t.name != image:
                continue
            if first and x.dtype.bits == 16:  # autocast's cast of the fp32 batch at the first convolution
                mixed["images"] = b.op("elementwise", [mixed["images"]], out_dtype=x.dtype.value, op="cast",
                                       name=f"{op.name}{AUTOCAST_CAST_SUFFIX}_input")
            first = False
            ins[i] = mixed["images"]
        b.add(Op(op.name, op.kind, tuple(ins), op.outputs, op.attrs, op.group))
    return b.build({**dict(graph.meta), DLE_TRAIN_LOADER_META: True})


# ------------------------------------------------------------------------------------------------
# Hugging Face BERT under the SDPA training benchmark (transformers PR #28802)

#: What the BERT rows of the transformers SDPA training benchmark run. The PR's description benchmarks
#: ``BertLMHeadModel`` with fxmarty's training script, which builds ``AutoModelForMaskedLM`` from ``input_ids``
#: alone and times ``model.zero_grad(); outputs = model(**inputs); loss = outputs.logits.sum(); loss.backward()``;
#: either class is ``BertModel(config, add_pooling_layer=False)`` and ``BertOnlyMLMHead`` (``transform.dense``,
#: the activation, ``transform.LayerNorm``, then ``decoder``: the word-embedding matrix tied, with a bias over the
#: vocabulary) (transformers ``models/bert/modeling_bert.py``).
HF_MLM_SUM_SOURCE = ("huggingface/transformers PR #28802 (description: 'using BertLMHeadModel'; training benchmark of "
                     "gist fxmarty/7e75cc3942d6974e4849093ebea0a331: zero_grad, forward, loss = outputs.logits.sum(), "
                     "backward; input_ids only); models/bert/modeling_bert.py: BertOnlyMLMHead, "
                     "BertModel(add_pooling_layer=False), get_extended_attention_mask, "
                     "_prepare_4d_attention_mask_for_sdpa")

#: ``meta`` key naming the op a training graph's forward ends with when it is not a loss kind (the module-call
#: count stops there: :func:`simulator.engines.walk.module_call_counts`).
LOSS_OP_META = "loss_op"

_DROPPED_HEAD_GROUPS = ("pooler", "head", "loss")


def hf_masked_lm_forward(graph: Any, profile: str) -> Any:
    """A BERT training forward graph (zoo ``phase="train"``) as the SDPA training benchmark runs it
    (:data:`HF_MLM_SUM_SOURCE`): the pooler, classifier and cross-entropy are replaced by the masked-LM head
    (``cls.predictions.transform.dense`` with its bias, the activation, ``LayerNorm``, and ``cls.predictions.decoder``
    over the tied word-embedding matrix with the vocabulary bias), and the attention mask ``BertModel`` makes when
    no ``attention_mask`` is passed (``torch.ones(batch, seq)``) is prepared as the profile's code prepares it:

    * ``eager``: ``get_extended_attention_mask`` casts it to the model dtype and computes ``(1.0 - mask) *
      finfo.min`` (three kernels), and every layer adds it to the scaled scores before the softmax (one kernel
      over the scores per layer; its gradient passes through);
    * ``sdpa``: ``_prepare_4d_attention_mask_for_sdpa`` tests ``torch.all(mask == 1)`` (a comparison and a
      reduction whose value the host reads) and passes no mask, so attention stays one fused call.

    (Under ``eager`` at batch > 1 the graph already copies the head views ``torch.matmul`` reshapes:
    ``workloads.zoo.transformer``, ``decomposed_core``.)

    The graph still ends in a ``cross_entropy`` over the logits, a stand-in from which the training step is
    derived; :func:`sum_loss` then makes it the benchmark's ``logits.sum()``."""
    from workloads.ir import GraphBuilder, Op

    if profile not in ("eager", "sdpa"):
        raise ValueError(f"graph {graph.name!r}: masked-LM benchmark step: profile {profile!r}; expected eager or sdpa")
    ops = list(graph)
    kept = [op for op in ops if op.group.split(".")[0] not in _DROPPED_HEAD_GROUPS]
    if not kept or not any(op.name == "head.classifier" for op in ops):
        raise ValueError(f"graph {graph.name!r}: masked-LM benchmark step: no 'head.classifier' op to replace; "
                         "expected a BERT training forward graph (an encoder with its classification head)")
    table = next((t for op in kept if op.name == "embed.tokens" for t in op.inputs[1:2]), None)
    if table is None:
        raise ValueError(f"graph {graph.name!r}: masked-LM benchmark step: no 'embed.tokens' embedding; expected "
                         "a BERT training forward graph")
    hidden = kept[-1].outputs[0]
    bsz, s, d = hidden.shape
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", hidden.dtype.value))
    mask = None
    for i, op in enumerate(kept):
        if i and kept[i - 1].group.startswith("embed") and not op.group.startswith("embed"):
            mask = _bert_mask_ops(b, profile, (bsz, s), hidden.dtype.value)  # BertModel.forward, after embeddings
        if mask is not None and op.kind == "softmax" and op.name.endswith(".core.softmax"):
            added = b.op("elementwise", [op.inputs[0], mask], name=f"{op.name[:-len('.softmax')]}.mask_add", op="add")
            b.add(Op(op.name, op.kind, (added, *op.inputs[1:]), op.outputs, op.attrs, op.group))
        else:
            b.add(op)
    with b.group("cls.predictions.transform"):
        h = b.op("matmul", [hidden, b.weight("cls.predictions.transform.dense.weight", (d, d)),
                            b.weight("cls.predictions.transform.dense.bias", (d,))], name="dense")
        h = b.op("elementwise", [h], name="act", op="gelu")
        h = b.op("layernorm", [h, b.weight("cls.predictions.transform.LayerNorm.weight", (d,)),
                               b.weight("cls.predictions.transform.LayerNorm.bias", (d,))], name="LayerNorm")
    with b.group("cls.predictions"):
        logits = b.op("matmul", [h, table, b.weight("cls.predictions.bias", (table.shape[0],))], name="decoder",
                      transpose_b=True)
    with b.group("loss"):
        flat = b.op("reshape", [logits], name="flatten", shape=(bsz * s, table.shape[0]))
        b.op("cross_entropy", [flat, b.input("labels", (bsz * s,), "int32")], name="logits_sum")
    return b.build({**dict(graph.meta), "mlm_sum_forward": profile})


def _bert_mask_ops(b: Any, profile: str, shape: tuple[int, int], dtype: str) -> Any:
    """The all-ones attention mask's preparation (:func:`hf_masked_lm_forward`); the extended mask under eager."""
    bsz, s = shape
    with b.group("mask"):
        ones = b.op("elementwise", [b.input("mask.shape", (bsz, s), "fp32")], name="ones", op="copy")
        if profile != "eager":
            eq = b.op("elementwise", [ones], name="eq_one", op="scale")
            every = b.op("reduction", [eq], name="all", op="max", axes=(0, 1))
            b.op("elementwise", [every], name="item", op="copy")  # bool(): the host reads the value
            return None
        m = b.op("elementwise", [ones], name="to_dtype", op="cast", out_dtype=dtype)
        m = b.op("elementwise", [m], name="rsub", op="scale")
        m = b.op("elementwise", [m], name="mul_min", op="scale")
        return b.op("reshape", [m], name="extended", shape=(bsz, 1, 1, s))


def sum_loss(train_graph: Any) -> Any:
    """A training step derived from :func:`hf_masked_lm_forward` with its stand-in loss made ``logits.sum()``:
    the forward ``cross_entropy`` becomes a sum reduction of the logits, and its backward the sum's gradient, a
    ``ones`` expanded over the logits that the decoder's two GEMMs read as dense matrices (ATen's cuBLAS path makes
    a stride-0 operand contiguous: a copy kernel writing the logits' size for each). It is priced as one binary
    elementwise kernel over the logits (one read and one write of their size, the two copies' bytes).
    ``meta[LOSS_OP_META]`` names the sum, where the forward's module calls end."""
    from workloads.ir import Attrs, Op, OpGraph

    ops = []
    name = ""
    total = None
    for op in train_graph:
        if op.kind == "cross_entropy" and op.name == "loss.logits_sum":
            name, total = op.name, op.outputs[0]
            ops.append(Op(op.name, "reduction", op.inputs[:1], op.outputs, Attrs({"op": "sum", "axes": (0, 1)}),
                          op.group))
        elif op.kind == "cross_entropy_bwd" and op.name == "loss.logits_sum.bwd":
            ops.append(Op(op.name, "elementwise", (total, op.inputs[0]), op.outputs, Attrs({"op": "mul"}),
                          op.group))
        else:
            ops.append(op)
    if not name:
        raise ValueError(f"graph {train_graph.name!r}: sum loss: no 'loss.logits_sum' op; expected a step derived "
                         "from hf_masked_lm_forward")
    return OpGraph(train_graph.name, ops, {**dict(train_graph.meta), LOSS_OP_META: name})


#: Op kinds ``torch.autocast`` runs in float32 whatever their input (the "fp32" list of
#: ``aten/src/ATen/autocast_mode.cpp``, and PyTorch's AMP documentation, "CUDA Ops that can autocast to float32":
#: ``layer_norm``, ``softmax``, ``log_softmax``, ``group_norm`` ...), casting a 16-bit input up first.
AUTOCAST_FP32_KINDS = frozenset({"layernorm", "softmax", "groupnorm"})

AUTOCAST_ACTIVATION_SOURCE = ("pytorch/pytorch aten/src/ATen/autocast_mode.cpp: lower_precision_fp ops (conv*, linear, "
                              "matmul, bmm, addmm) cast every floating input to the autocast dtype; fp32 ops (layer_norm, "
                              "softmax, group_norm ...) cast to float32; cached_cast keeps only leaf tensors that require "
                              "grad (the parameters); other ops follow type promotion")


def autocast_activation_casts(graph: Any) -> Any:
    """An inference graph of an fp32 model as eager PyTorch runs it inside one ``torch.autocast`` region whose
    weight casts are cached (:data:`AUTOCAST_ACTIVATION_SOURCE`): the activations' casts. Each tensor's run-time
    dtype is followed from the fp32 graph inputs: a convolution or matmul casts each fp32 activation operand to
    the low precision, one kernel per consumer (activations are not cached), and runs low; a LayerNorm or
    softmax casts a low-precision input up and runs in fp32; any other op runs in fp32 when an operand is fp32
    (type promotion: a residual add of a 16-bit projection to the fp32 stream, a weight it reads), else low;
    batch norm keeps its input's dtype (its kernels take 16-bit data with fp32 parameters).
    Weights cast by autocast are cached, so a weight operand of a convolution or matmul costs nothing.

    The graph's tensors keep their (16-bit) dtypes: each cast is priced as a 16-bit elementwise kernel over its
    tensor and the fp32 ops' traffic at 16 bits (an under-count of bytes; in the small-batch runs these rows
    hold, each kernel's host time dominates). ``meta["autocast_activations"]`` records the transform."""
    from workloads.ir import GraphBuilder, Op, Role

    if graph.meta.get("autocast_activations"):
        raise ValueError(f"graph {graph.name!r}: autocast activation casts already added")
    ops = list(graph)
    if any(op.kind.endswith(("_bwd", "bwd_data", "bwd_weight")) or op.kind == "optimizer_update" for op in ops):
        raise ValueError(f"graph {graph.name!r}: autocast activation casts: got a training graph; expected an "
                         "inference graph")
    low = {}  # tensor name -> True when it is 16-bit at run time
    b = GraphBuilder(graph.name, dtype=graph.meta.get("dtype", "bf16"))
    for op in ops:
        acts = [t for t in op.inputs if t.role != Role.WEIGHT]
        ins = list(op.inputs)
        if op.kind in AUTOCAST_WEIGHT_KINDS or op.kind in AUTOCAST_FP32_KINDS:
            want_low = op.kind in AUTOCAST_WEIGHT_KINDS
            for i, t in enumerate(ins):
                if t.role != Role.WEIGHT and t.dtype.is_float and low.get(t.name, False) != want_low:
                    ins[i] = b.op("elementwise", [t], name=f"{op.name}{AUTOCAST_CAST_SUFFIX}_in{i}", op="cast",
                                  out_dtype=t.dtype.value)
            out_low = want_low
        else:  # batch norm takes a 16-bit input with fp32 parameters and keeps the input's dtype (cuDNN, MIOpen)
            fp32_weight = op.kind != "batchnorm" and any(t.role == Role.WEIGHT and t.dtype.is_float for t in op.inputs)
            out_low = not fp32_weight and all(low.get(t.name, False) for t in acts if t.dtype.is_float)
        b.add(Op(op.name, op.kind, tuple(ins), op.outputs, op.attrs, op.group))
        for t in op.outputs:
            low[t.name] = out_low
    return b.build({**dict(graph.meta), "autocast_activations": True})


# --- module calls the zoo graph's op names do not show -------------------------------------------------------

#: ``graph.meta`` key: ``{op name: module calls}`` issued with that op beyond the containers its dotted name shows
#: (:func:`simulator.engines.walk.module_call_counts` adds them to the op's containers; each is charged
#: ``efficiency.framework_container_call_s``, the @nnmodule figure of an almost empty module's call).
EXTRA_MODULE_CALLS_META = "extra_module_calls"

#: A validation row's notes name its model code with this phrase followed by a :data:`MODULE_TREES` key and a
#: full stop (``Module tree: transformers ViTForImageClassification.``).
MODULE_TREE_NOTE = "Module tree: "
_MODULE_TREE_AT = re.compile(r"(?i)\bmodule tree:")


def _by_pattern(names: list[str], rules: tuple[tuple[str, int], ...]) -> dict[str, int]:
    """``{op name: calls}``: each op whose name fully matches a rule's pattern gets the rule's calls (summed)."""
    out: dict[str, int] = {}
    for pattern, calls in rules:
        rx = re.compile(pattern)
        for n in names:
            if rx.fullmatch(n):
                out[n] = out.get(n, 0) + calls
    return out


#: transformers ``modeling_vit.py`` as the 2021-2023 releases write it (4.31 among them; the attention-interface
#: refactor read @ 005db820 later made the attention dropout a functional call): per ``ViTLayer`` the graph's names
#: show ``layers.N`` (ViTLayer), ``attn`` (ViTAttention), ``attn.core`` (ViTSelfAttention) and ``mlp``
#: (ViTIntermediate); not shown: ``ViTSelfAttention``'s ``self.dropout(attention_probs)`` (called before PV),
#: ``ViTSelfOutput`` and its ``nn.Dropout`` (around the output projection), the ``GELUActivation`` module
#: (``ACT2FN["gelu"]``) and ``ViTOutput`` with its ``nn.Dropout`` (around the down projection): 6 calls a layer.
#: Above the layers: ``ViTForImageClassification`` and ``ViTModel`` (the graph's ``head`` prefix stands for
#: ``ViTPatchEmbeddings``, as the classifier is a bare ``nn.Linear``), and ``ViTEmbeddings``' ``nn.Dropout`` after
#: the position embeddings. Dropout in eval mode launches nothing (ATen ``dropout`` returns its input).
_VIT_HF_RULES = (
    (r"embed\.patch", 2), (r"layers\.0\.attn_norm", 1),
    (r"layers\.\d+\.attn\.core\.pv", 1), (r"layers\.\d+\.attn\.out", 2),
    (r"layers\.\d+\.mlp\.act", 1), (r"layers\.\d+\.mlp\.down", 2),
)

#: transformers ``modeling_resnet.py`` (@ 00cbbe53) on the graph's torchvision-style names: per bottleneck the
#: names show ``layerX`` (ResNetStage), ``layerX.Y`` (ResNetBottleNeckLayer) and ``downsample``
#: (ResNetShortCut); not shown: the ``nn.Sequential`` ``layer`` and its three ``ResNetConvLayer`` modules, each
#: with its activation module (``nn.ReLU``, ``nn.ReLU``, ``nn.Identity``), the ``nn.Identity`` shortcut of a
#: block without projection, and the block's ``nn.ReLU``: 8 calls (9 without projection). Above:
#: ``ResNetForImageClassification``, ``ResNetModel``, ``ResNetEmbeddings`` and the stem's ``ResNetConvLayer`` with
#: its ``nn.ReLU``, ``nn.MaxPool2d``, ``ResNetEncoder`` (its ``ModuleList`` of stages and each stage's
#: ``nn.Sequential`` are iterated, not called), ``nn.AdaptiveAvgPool2d``, and the classifier's ``nn.Sequential``
#: and ``nn.Flatten``: 10 calls.
_RESNET_HF_RULES = (
    (r"conv1", 4), (r"relu", 1), (r"maxpool", 1), (r"layer1\.0\.conv1", 1), (r"avgpool", 1), (r"fc", 2),
    (r"layer\d\.\d+\.conv1", 2), (r"layer\d\.\d+\.(relu|relu_1|relu_2|conv2|conv3|add)", 1),
)

#: torchvision ``models/resnet.py`` (read @ 054e54c5): the graph's names show ``layerX`` (``nn.Sequential``), each ``Bottleneck``
#: and its ``downsample``; not shown: the root ``ResNet`` module, the one ``nn.ReLU`` a block calls three times
#: (``self.relu``) and the stem's, ``nn.MaxPool2d`` and ``nn.AdaptiveAvgPool2d``.
_RESNET_TORCHVISION_RULES = (
    (r"conv1", 1), (r"(layer\d\.\d+\.)?relu(_\d+)?", 1), (r"maxpool", 1), (r"avgpool", 1),
)


#: NVIDIA DeepLearningExamples ``PyTorch/Classification/ConvNets/image_classification/models/resnet.py`` @ 291f0d0
#: (``ResNet``, ``Bottleneck``; ``LayerBuilder.activation()`` is an ``nn.ReLU`` module): the graph's names show each
#: stage (``layerX``: the ``nn.Sequential`` of ``_make_layer``), each ``Bottleneck`` and its ``downsample``; not
#: shown: the root ``ResNet`` module, the ``nn.Sequential`` ``self.layers`` holding the four stages, the stem's
#: ``nn.ReLU`` and a block's ``self.relu`` called three times, ``nn.MaxPool2d`` and ``nn.AdaptiveAvgPool2d``
#: (``stem`` and ``classifier`` are methods, the flatten an ``x.view``): 53 calls for ResNet-50.
_RESNET_DLE_RULES = (
    (r"conv1", 1), (r"relu", 1), (r"maxpool", 1), (r"layer1\.0\.conv1", 1), (r"layer\d\.\d+\.relu(_\d+)?", 1),
    (r"avgpool", 1),
)


def _resnet_hf_calls(names: list[str]) -> dict[str, int]:
    out = _by_pattern(names, _RESNET_HF_RULES)
    for n in names:  # a block without a projection shortcut calls nn.Identity as its shortcut
        if re.fullmatch(r"layer\d\.\d+\.add", n) and n.rsplit(".", 1)[0] + ".downsample.0" not in names:
            out[n] += 1
    return out


#: ``{tree: (calls of a graph's op names, source)}``: the module calls of a model's own code that the graph's op
#: names do not show (the root module, containers the graph does not name, parameter-free modules).
MODULE_TREES: dict[str, tuple[Any, str]] = {
    "transformers ViTForImageClassification": (
        lambda names: _by_pattern(names, _VIT_HF_RULES),
        "huggingface/transformers src/transformers/models/vit/modeling_vit.py, 2021-2023 form (ViTSelfAttention.forward "
        "calls self.dropout(attention_probs); ViTSelfOutput, ViTIntermediate, ViTOutput)"),
    "transformers ResNetForImageClassification": (
        _resnet_hf_calls,
        "huggingface/transformers src/transformers/models/resnet/modeling_resnet.py @ 00cbbe53 (ResNetConvLayer, "
        "ResNetBottleNeckLayer, ResNetStage; the rows' 2023 release was not re-read)"),
    "DeepLearningExamples ResNet": (
        lambda names: _by_pattern(names, _RESNET_DLE_RULES),
        "NVIDIA/DeepLearningExamples PyTorch/Classification/ConvNets/image_classification/models/resnet.py @ "
        "291f0d02e815b148fa5c2b81bf07aa3552142895 (ResNet.forward: stem, self.layers, classifier; Bottleneck.forward "
        "calls self.relu three times; training.py Executor holds the model unwrapped on one GPU)"),
    "torchvision ResNet": (
        lambda names: _by_pattern(names, _RESNET_TORCHVISION_RULES),
        "pytorch/vision torchvision/models/resnet.py read @ 054e54c5 (Bottleneck.relu called three times, ResNet.relu, "
        "ResNet.maxpool, ResNet.avgpool); the v0.17.2 hub model of the rows was not re-read"),
}


def module_tree_of(notes: str | None, where: str = "notes") -> str | None:
    """The :data:`MODULE_TREES` key a row's notes name after :data:`MODULE_TREE_NOTE` (the marker matched in any case,
    the name exactly); None when they name none.

    Raises
    ------
    FrameworkError
        ``<where>: unknown module tree; got 'x'; expected one of ...; did you mean 'y'?``.
    """
    m = _MODULE_TREE_AT.search(notes or "")  # any case: a misspelt marker must not drop the module calls silently
    if m is None:
        return None
    got = m.string[m.end():].split(".", 1)[0].strip()
    if got not in MODULE_TREES:
        raise FrameworkError(f"{where}: unknown module tree; got {got!r}; expected one of "
                             f"{', '.join(sorted(MODULE_TREES))}{did_you_mean(got, MODULE_TREES)}")
    return got


def with_module_tree(graph: Any, tree: str, where: str = "notes") -> Any:
    """``graph`` with ``meta[EXTRA_MODULE_CALLS_META]`` holding the module calls of ``tree``'s code that its op
    names do not show (:data:`MODULE_TREES`); charged only where the engine counts module calls (the eager
    profiles).

    Raises
    ------
    FrameworkError
        ``<where>: module tree 'x' matches no op of graph 'g'; ...`` (a tree named for another model's graph).
    """
    from workloads.ir import OpGraph

    calls = MODULE_TREES[tree][0]([op.name for op in graph])
    if not calls:
        raise FrameworkError(f"{where}: module tree {tree!r} matches no op of graph {graph.name!r}; expected a "
                             f"graph of the model that code builds (transformers ViT, ResNet)")
    return OpGraph(graph.name, list(graph), {**dict(graph.meta), EXTRA_MODULE_CALLS_META: calls})


#: Under ``mode="max-autotune"`` Inductor times every candidate of a GEMM or convolution -- the ATen extern kernel
#: (``bias_addmm`` / ``addmm`` / ``mm`` / ``convolution``: the vendor library's call) and its Triton templates --
#: and keeps the fastest, printing each choice as ``AUTOTUNE addmm(197x768, 197x768, 768x768)`` followed by the
#: candidates' times (pytorch/pytorch torch/_inductor/select_algorithm.py, ``AlgorithmSelectorCache.log_results``).
#: Only a Triton template takes a fused epilogue: an extern kernel is an ``ExternKernelSchedulerNode``, which the
#: scheduler never fuses (:data:`_INDUCTOR_EXTERN`). A run whose printed log shows the extern kernel winning at a
#: shape therefore runs that contraction as the library call, with its norm / activation / residual after it.
AUTOTUNE_EXTERN_SOURCE = ("pytorch/pytorch torch/_inductor/select_algorithm.py AlgorithmSelectorCache.log_results "
                          "('AUTOTUNE <op>(<shapes>)' and each candidate's time; the fastest is kept); "
                          "torch/_inductor/scheduler.py ExternKernelSchedulerNode (never fused)")

_AUTOTUNE_SHAPE = re.compile(r"\b(addmm|mm|convolution)\(((?:\d+(?:x\d+)*)(?:, \d+(?:x\d+)*)*)\)")


def autotune_extern_shapes(text: str) -> tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]:
    """The contractions a row's notes say max-autotune ran as the extern kernel: every ``op(shape, shape...)``
    after ``AUTOTUNE log, extern kernel won:`` up to the next period, as the log prints them (``addmm``: bias or
    output, mat1, mat2; ``mm``: mat1, mat2; ``convolution``: input, weight). ``()`` when the notes say nothing."""
    key = "AUTOTUNE log, extern kernel won:"
    at = text.find(key)
    if at < 0:
        return ()
    span = text[at + len(key):].split(". ", 1)[0]
    return tuple((op, tuple(tuple(int(d) for d in s.split("x")) for s in shapes.split(", ")))
                 for op, shapes in _AUTOTUNE_SHAPE.findall(span))


def _extern_match(op: Any, shapes: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...]) -> int | None:
    """The index of the logged extern shape ``op`` (a linear layer's ``matmul`` or a ``conv2d``) is, or None:
    a linear layer by (rows of its input, input features) and its weight's (in, out) against the log's mat1
    and mat2; a convolution by its input and weight shapes."""
    if len(op.inputs) < 2:
        return None
    x, w = tuple(op.inputs[0].shape), tuple(op.inputs[1].shape)
    rows = 1
    for d in x[:-1]:
        rows *= int(d)
    for i, (kind, dims) in enumerate(shapes):
        if op.kind == "conv2d" and kind == "convolution" and dims[:2] == (x, w):
            return i
        mats = dims[1:] if kind == "addmm" else dims
        if op.kind == "matmul" and kind in ("addmm", "mm") and len(mats) == 2 and len(w) == 2 \
                and mats == ((rows, int(x[-1])), w):
            return i
    return None


def autotuned_extern(graph: Any, shapes: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...],
                     where: str = "notes") -> Any:
    """``graph`` with each linear layer and convolution that max-autotune ran as the extern kernel
    (:func:`autotune_extern_shapes`, :data:`AUTOTUNE_EXTERN_SOURCE`) marked as an ATen call inside the compiled
    program (``aten_fallback``: nothing fuses into it), so its epilogue runs as a kernel of its own. Only ops
    with a weight operand (a parameter, or its ``torch.autocast`` cast) are linear layers; attention products
    are left as they are.

    Raises
    ------
    FrameworkError
        ``<where>: AUTOTUNE shape 'addmm(...)' matches no linear layer or convolution of graph 'g'; ...`` (a
        logged shape of another model, batch or sequence length).
    """
    from dataclasses import replace

    from workloads.ir import Attrs, OpGraph, Role

    if not shapes:
        return graph
    weights = {t.name for op in graph for t in op.inputs if t.role == Role.WEIGHT}
    # a weight's torch.autocast cast (autocast_weight_casts) stands for the weight
    weights |= {o.name for op in graph if op.attrs.get("op") == "cast" and op.inputs
                and all(t.role == Role.WEIGHT for t in op.inputs) for o in op.outputs}
    ops, matched = [], set()
    for op in graph:
        hit = _extern_match(op, shapes) if op.kind in ("matmul", "conv2d") and len(op.inputs) > 1 \
            and op.inputs[1].name in weights else None
        if hit is not None:
            op = replace(op, attrs=Attrs({**dict(op.attrs), "aten_fallback": True}))
            matched.add(hit)
        ops.append(op)
    missed = [f"{kind}({', '.join('x'.join(map(str, d)) for d in dims)})"
              for i, (kind, dims) in enumerate(shapes) if i not in matched]
    if missed:
        raise FrameworkError(f"{where}: AUTOTUNE shape {missed[0]!r} matches no linear layer or convolution of graph "
                             f"{graph.name!r}; expected the shapes of this graph's contractions (addmm: bias, mat1 "
                             "[rows, in], mat2 [in, out]; mm: mat1, mat2; convolution: input, weight)")
    return OpGraph(graph.name, ops, dict(graph.meta))
