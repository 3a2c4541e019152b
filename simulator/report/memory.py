"""Device-memory capacity check: weights, live activations, KV cache, gradients and optimizer state."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from hwmodels.spec import DeviceSpec
from simulator.report import MemoryCheck
from workloads.analysis import INPLACE_KINDS, VIEW_KINDS
from workloads.ir import Op, OpGraph, Role

__all__ = ["check_memory", "peak_activation_bytes", "dropout_mask_ranges", "nccl_communicator_bytes", "NCCL_CONNECTION_PAIR_BYTES", "allocator_rounding_bytes", "CUDA_CONTEXT_BYTES",
           "CUBLAS_WORKSPACE_BYTES", "NCCL_BUFFSIZE_BYTES", "NCCL_LL_BUFFSIZE_BYTES", "NCCL_LL128_BUFFSIZE_BYTES", "NCCL_CHANNELS", "ALLOCATOR_ROUND_LARGE_BYTES",
           "FSDP_UNSHARDED_IN_FLIGHT", "fsdp_stream_pool_bytes", "hybridep_budget_rows", "graph_deferred_free_bytes",
           "HYBRIDEP_BUDGET_ALIGN_ROWS", "cross_stream_freed_inputs"]


def check_memory(graph: OpGraph, device: DeviceSpec) -> MemoryCheck:
    """What ``graph`` needs resident in ``device``'s main memory versus its capacity.

    Weights, KV cache, gradients and optimizer state count every distinct tensor of that role;
    activations count the peak of live activation tensors along the execution order
    (:func:`peak_activation_bytes`, computed once per graph object). The prediction is made whether
    or not it fits; the report marks it infeasible and says by how much.

    Examples
    --------
    >>> from workloads.ir import GraphBuilder
    >>> b = GraphBuilder("fc", dtype="bf16"); x = b.input("x", (8, 1024)); w = b.weight("w", (1024, 1024))
    >>> y = b.op("matmul", [x, w])
    >>> # check_memory(b.build(), device).weights_bytes == 2 * 1024 * 1024
    """
    return MemoryCheck(
        weights_bytes=int(graph.weight_bytes),
        activations_bytes=int(graph.memo("peak_activation_bytes", lambda: peak_activation_bytes(graph))),
        kv_cache_bytes=int(graph.role_bytes(Role.KV_CACHE)),
        gradients_bytes=int(graph.role_bytes(Role.GRADIENT)),
        optimizer_state_bytes=int(graph.role_bytes(Role.OPTIMIZER_STATE)),
        capacity_bytes=float(device.main_memory.usable),
        device=device.name,
    )


def peak_activation_bytes(graph: OpGraph, *, inputs_from_first_use: bool = False,
                          extra: Mapping[str, float] | None = None,
                          transient: Callable[[str], bool] | None = None,
                          at: Callable[[Op], bool] | None = None) -> int:
    """Peak bytes of live activation tensors: :func:`workloads.analysis.peak_live_bytes` with its
    default roles, in one pass over the ops.

    A tensor is live from its producer (from the start, for a graph input) to its last consumer
    (to the end, for a graph output); a view or an in-place update aliases its base tensor,
    extending its life and adding no bytes; at each op its inputs and outputs are live together.
    ``inputs_from_first_use``: a graph input is live from its first consumer instead, as a training
    step materialises the zero-filled gradients of its backward pass (a slice's padding) when it needs
    them, not at the start of the forward pass. The keep-masks of training dropouts, which are no graph
    tensors, are live as :func:`dropout_mask_ranges` gives them. ``extra``: op name -> bytes a stack holds while that op
    runs beyond the graph's tensors (a loss's residuals). ``transient``: tensors (by name) that live only
    at their producer, their bytes accounted elsewhere (an unsharded weight gradient XLA reduce-scatters
    as it is produced). ``at``: the peak over only the ops it accepts (the tensors' lives unchanged).
    """
    act = Role.ACTIVATION
    base: dict[str, str] = {}  # view / in-place output -> base tensor
    first: dict[str, int] = {}
    size: dict[str, int] = {}
    last: dict[str, int] = {}
    ops = graph.ops
    for i, op in enumerate(ops):
        for t in op.inputs:
            name = t.name
            r = base.get(name, name)
            if r == name and r not in first and t.role is act:
                first[r] = i if inputs_from_first_use else 0
                size[r] = t.nbytes
            last[r] = i  # ops come in order: the latest use so far
        if op.kind in VIEW_KINDS or op.kind in INPLACE_KINDS:
            src = op.inputs[0].name
            src = base.get(src, src)
            for t in op.outputs:
                base[t.name] = src
                last[src] = i
            continue
        for t in op.outputs:
            name = t.name
            if t.role is act:
                first[name] = i
                size[name] = t.nbytes
            last[name] = i
    n = len(ops)
    for name in graph.tensors:  # graph outputs (produced, never read) keep their base live to the end
        if graph.producer(name) is not None and not graph.consumer_names(name):
            r = base.get(name, name)
            if r in size:
                last[r] = n - 1
    delta = [0] * (n + 1)
    if transient is not None:
        for r in size:
            if transient(r):
                last[r] = first[r]
    if extra:
        for i, op in enumerate(ops):
            if op.name in extra:
                delta[i] += int(extra[op.name])
                delta[i + 1] -= int(extra[op.name])
    for a, b, m in dropout_mask_ranges(graph):
        delta[a] += m
        delta[b + 1] -= m
    for r, s in size.items():
        delta[first[r]] += s
        delta[last.get(r, first[r]) + 1] -= s
    peak = cur = 0
    for i, d in enumerate(delta[:n]):
        cur += d
        if cur > peak and (at is None or at(ops[i])):
            peak = cur
    return peak


def dropout_mask_ranges(graph: OpGraph) -> list[tuple[int, int, int]]:
    """(index of the writer, index of the last reader, bytes) of every keep-mask a training dropout writes
    (:func:`workloads.semantics.dropout_mask_bytes`: one byte per element, PyTorch's ``native_dropout`` and
    TorchScript's fused dropout save a bool mask for the backward; Korthikanti et al. 2022 Sec. 4.1 count
    it, ``sbh`` per dropout of an ``s x b x h`` tensor). The backward ``NAME.bwd`` reads the mask of the
    last dropout ``NAME`` (or its re-run ``NAME@recompute``) before it. A mask that a re-run supersedes
    lives only while its writer runs (a checkpointed forward runs without autograd and saves nothing), as
    does one no backward reads."""
    from workloads.semantics import dropout_mask_bytes

    out: list[tuple[int, int, int]] = []
    open_: dict[str, tuple[int, int]] = {}  # dropout name -> (index of its latest writer, mask bytes)
    for i, op in enumerate(graph.ops):
        if op.attrs.get("op") != "dropout":
            continue
        if op.kind == "elementwise" and op.attrs.get("training"):
            key = op.name.split("@recompute")[0]
            prev = open_.pop(key, None)
            if prev is not None:
                out.append((prev[0], prev[0], prev[1]))
            open_[key] = (i, dropout_mask_bytes(op))
        elif op.kind == "elementwise_bwd" and op.name.endswith(".bwd"):
            w = open_.pop(op.name[: -len(".bwd")], None)
            if w is not None:
                out.append((w[0], i, w[1]))
    out.extend((i, i, m) for i, m in open_.values())
    return out


# ------------------------------------------------------------------------------------------------
# memory of one device of a parallel plan, as the CUDA caching allocator sees it
# (docs/training_memory.md: every component, its formula and its source)

#: CUDA context of a process on one device (driver state, PyTorch's loaded kernels) with CUDA >= 11.7
#: lazy module loading, PyTorch's default: "around 400MB" (ptrblck, PyTorch maintainer,
#: github.com/pytorch/pytorch/issues/109888, 2023-09-23; ~300 MB in issues/107667). Not in the
#: allocator's reserved memory; counted against the device's capacity.
CUDA_CONTEXT_BYTES = 400 * 2**20
#: cuBLAS / cuBLASLt workspace PyTorch gives each handle on Hopper: CUBLAS_WORKSPACE_CONFIG ":4096:8"
#: (8 chunks of 4096 KiB) per handle and stream (PyTorch docs, "Reproducibility" / CUDA semantics
#: "cuBLAS workspaces"; aten/src/ATen/cuda/CublasHandlePool.cpp ``getChosenWorkspaceSize``: 4096 KiB x 8
#: for sm90). One compute stream.
CUBLAS_WORKSPACE_BYTES = 8 * 4096 * 2**10
#: NCCL's per-connection buffers, one per protocol, as NCCL 2.21 sizes them (NVIDIA/nccl @ tag v2.21.5-1, the NCCL
#: of PyTorch 2.6; the same defines at v2.18.3-1 .. v2.27.7-1): src/init.cc lines 542-544 ``DEFAULT_LL_BUFFSIZE
#: (NCCL_LL_LINES_PER_THREAD*NCCL_LL_MAX_NTHREADS*NCCL_STEPS*sizeof(union ncclLLFifoLine))`` = 8 x 512 x 8 x 16 B,
#: ``DEFAULT_LL128_BUFFSIZE (NCCL_LL128_ELEMS_PER_THREAD*NCCL_LL128_MAX_NTHREADS*NCCL_STEPS*sizeof(uint64_t))`` =
#: 120 x 640 x 8 x 8 B, ``DEFAULT_BUFFSIZE (1 << 22)`` (src/include/device.h lines 22, 57-58, 74-75); the NCCL
#: documentation's NCCL_BUFFSIZE "default is 4194304 (4 MiB)".
NCCL_LL_BUFFSIZE_BYTES = 8 * 512 * 8 * 16
NCCL_LL128_BUFFSIZE_BYTES = 120 * 640 * 8 * 8
NCCL_BUFFSIZE_BYTES = 4 * 2**20
#: A peer-to-peer (NVLink) connection's buffers are rounded up to ``CUDA_IPC_MIN`` 2 MiB on each side
#: (src/include/comm.h line 32; src/transport/p2p.cc ``p2pSendSetup``/``p2pRecvSetup``: ``ALIGN_SIZE(sendSize,
#: CUDA_IPC_MIN)``, with P2P read (NVLink, Ampere and later) the Simple buffer on the sender, LL and LL128 on the
#: receiver, beside a 4 KiB ``ncclSendMem``/``ncclRecvMem``); a network connection's device buffers (GPUDirect RDMA:
#: src/transport/net.cc lines 709 and 861, the sender's LL128 and Simple, the receiver's LL, LL128 and Simple) are
#: allocated with ``ncclCuMemAlloc``, rounded to the allocation granularity, 2 MiB on these GPUs.
NCCL_BUFFER_ALIGN_BYTES = 2 * 2**20
#: NVLink SHARP buffers (src/transport/nvls.cc ``ncclNvlsSetup`` @ v2.21.5-1, lines 310-314): ``buffSize =
#: NVLS_CHUNKSIZE (128 KiB) x NCCL_STEPS (8)``, ``memSize = NVLS_MEM_ALIGN_SIZE (1 << 21)``, ``nvlsPerRankSize =
#: nChannels x 2 x (buffSize + memSize)`` and the whole ``x nHeads``, one physical allocation a rank
#: (``nvlsGroupBindMem``: ``cuMemCreate`` of that size, bound to the multicast object).
NCCL_NVLS_BUFFER_BYTES = 128 * 2**10 * 8
NCCL_NVLS_MEM_ALIGN_BYTES = 2 * 2**20
#: Channels a communicator connects where the system's fabric entry states none (``ring_channels`` of
#: hwmodels/catalog/fabrics.toml): an assumption, half of NCCL's compile-time ``MAXCHANNELS 32``
#: (src/include/device.h). Stated in docs/training_memory.md.
NCCL_CHANNELS = 16


def _aligned(n: float, unit: float = NCCL_BUFFER_ALIGN_BYTES) -> float:
    return float(-(-int(n) // int(unit)) * int(unit))


#: bytes a rank holds for one connection to a peer and one from it (a ring channel's next and previous rank):
#: over NVLink (``p2p``) the sender's Simple buffer and the receiver's LL + LL128 buffers, each with its 4 KiB
#: header, each rounded to 2 MiB; over the network (``net``) the sender's LL128 + Simple and the receiver's
#: LL + LL128 + Simple in device memory, each rounded to 2 MiB
NCCL_CONNECTION_PAIR_BYTES = {
    "p2p": _aligned(4096 + NCCL_BUFFSIZE_BYTES) + _aligned(4096 + NCCL_LL_BUFFSIZE_BYTES + NCCL_LL128_BUFFSIZE_BYTES),
    "net": _aligned(NCCL_LL128_BUFFSIZE_BYTES + NCCL_BUFFSIZE_BYTES)
    + _aligned(NCCL_LL_BUFFSIZE_BYTES + NCCL_LL128_BUFFSIZE_BYTES + NCCL_BUFFSIZE_BYTES),
}


def nccl_communicator_bytes(ranks: int, local_ranks: int, channels: int, nvls_channels: int = 0) -> dict[str, float]:
    """Device bytes NCCL 2.21 allocates on one rank of a communicator of ``ranks`` ranks, ``local_ranks`` of them
    on the rank's node, when it is created (``initTransportsRank``, src/init.cc @ v2.21.5-1 lines 1256-1288: every
    ring and tree channel is connected at init; runtime connection came with NCCL 2.22), by part:

    * ``ring``: ``channels`` x one connection to the next rank and one from the previous
      (:data:`NCCL_CONNECTION_PAIR_BYTES`, over NVLink when the whole communicator is on one node, else over the
      network: the worst rank's hops);
    * ``tree``: with more than 2 ranks, ``channels`` x one more pair (a middle rank of the tree's chain sends to and
      receives from both neighbours, the ring one way only; the chain follows the ring's order, as NCCL's
      ``Trees [c] 4/-1/-1->2->1`` beside ``Channel 00/16 : 0 3 1 2 4 7 5 6`` prints it); 2 ranks: the ring's
      connections are the tree's;
    * ``nvls``: where NVLink SHARP is on (``nvls_channels`` > 0: ``NCCL_NVLS_ENABLE`` not 0 on a system with it)
      and more than 2 ranks share the node (``ncclNvlsInit``: ``gpuCount <= 2`` returns without it),
      ``channels' x 2 x (1 MiB + 2 MiB) x local_ranks`` heads (one head per GPU of the node: ``ncclTopoCompute``
      forces the NVLS graph's channels to the GPU count), with ``channels' = max(channels, nvls_channels)``, which
      also becomes the ring's and tree's count (``ncclTopoPostset``: ``copyChannels`` up to ``nvlsChannels``).

    A 1-rank communicator holds nothing. Not counted: the multicast object's rounding to its recommended
    granularity (``cuMulticastGetGranularity``, a driver figure no source states), the NVLS tree's network
    connections of a communicator across nodes, and peer-to-peer (send/receive) connections, which NCCL makes
    on the first send to a peer."""
    if ranks <= 1:
        return {"ring": 0.0, "tree": 0.0, "nvls": 0.0}
    nvls = nvls_channels > 0 and local_ranks > 2
    ch = max(channels, nvls_channels) if nvls else channels
    pair = NCCL_CONNECTION_PAIR_BYTES["p2p" if local_ranks >= ranks else "net"]
    return {"ring": ch * pair, "tree": ch * pair if ranks > 2 else 0.0,
            "nvls": float(ch * 2 * (NCCL_NVLS_BUFFER_BYTES + NCCL_NVLS_MEM_ALIGN_BYTES) * local_ranks) if nvls else 0.0}


#: The caching allocator rounds a large block (> 1 MiB) up to a multiple of 2 MiB (c10/cuda/
#: CUDACachingAllocator.cpp: ``kRoundLarge = 2097152``, ``kSmallSize = 1048576``): on average half a
#: rounding unit is left unused per live large tensor.
ALLOCATOR_ROUND_LARGE_BYTES = 2 * 2**20
#: FSDP2 unsharded parameter groups in flight: the module computing and the one whose all-gather is
#: prefetched (torch.distributed.fsdp.fully_shard documentation: implicit prefetching issues the next
#: all-gather while the current module runs, and ``reshard_after_forward=True`` frees a module's
#: unsharded parameters after its forward; FSDP2 RFC pytorch/pytorch#114299).
FSDP_UNSHARDED_IN_FLIGHT = 2


def fsdp_stream_pool_bytes(largest_group_bytes: float, reduce_scale: float, shard: int) -> dict[str, float]:
    """What FSDP2's side streams leave reserved in the caching allocator (bytes by stream), beyond the
    tensors the default stream holds.

    The allocator reuses a freed block only for an allocation on the stream it was allocated on
    (c10/cuda/CUDACachingAllocator.cpp: ``BlockComparatorSize`` orders a pool by stream first and
    ``get_free_block`` takes a block of the requesting stream only; with ``expandable_segments:True``,
    which torchtitan's run_llama_train.sh sets, each stream maps its own segment and unmaps nothing until
    ``empty_cache`` or an allocation retry). FSDP2 allocates two buffers per group off the default stream
    (torch/distributed/_composable/fsdp/_fsdp_collectives.py): ``foreach_all_gather`` the flat
    ``all_gather_output`` (the group's unsharded 16-bit parameters) under ``all_gather_copy_in_stream``, and
    ``foreach_reduce`` the sharded ``reduce_output`` (the group's gradient in the fp32 ``reduce_dtype``,
    ``1/shard`` of it) under ``reduce_scatter_stream``. Each is freed after its copy-out, and its block
    stays in its stream's pool: the largest group's size, once per stream (the unsharded copies the
    default stream holds are ``buffers.fsdp_*``). The reduce-scatter input is the default stream's in the
    stored late-2024 ``_fsdp_collectives.py`` (allocated before ``reduce_scatter_stream`` is entered; earlier
    versions allocated it on that stream, which would leave the whole fp32 input reserved there): PyTorch at
    the rows' 1963fc8 was not read. ``reduce_scale``: fp32 bytes per 16-bit parameter byte."""
    return {"fsdp_all_gather_stream": float(largest_group_bytes),
            "fsdp_reduce_scatter_stream": float(largest_group_bytes) * reduce_scale / max(1, shard)}


def allocator_rounding_bytes(large_tensors: float) -> float:
    """Expected bytes the caching allocator's 2 MiB rounding leaves unused under ``large_tensors`` live
    large tensors (half a rounding unit each)."""
    return float(large_tensors) * ALLOCATOR_ROUND_LARGE_BYTES / 2.0


#: HybridEP's permuted-token budget is rounded up to this many rows whenever a rank capacity factor is set
#: (``get_align_size_for_quantization``: "CUTLASS kernel for grouped GEMM assumes 256 alignment" under
#: ``use_transformer_engine_op_fuser``, megatron/core/transformer/moe/moe_utils.py @ NVIDIA/Megatron-LM 6513e3e23,
#: the submodule of Megatron-Bridge 9c0cd2575^). It applies to every plan that sets one: Megatron-Core refuses
#: ``moe_expert_rank_capacity_factor`` with the ``hybridep`` backend unless the op fuser is on ("requires
#: use_transformer_engine_op_fuser to be enabled", ``TransformerConfig.__post_init__``,
#: megatron/core/transformer/transformer_config.py @ 6513e3e23), and with any backend but ``hybridep``/``ncclep``
#: (:func:`workloads.parallel._cuda_graph_problems` refuses it without ``moe_dispatch`` ``hybridep``)
HYBRIDEP_BUDGET_ALIGN_ROWS = 256


def cross_stream_freed_inputs(dispatch: str, fp8: bool, local_experts: int) -> int:
    """Inputs of one MoE layer's forward that Megatron-Core's combined 1F1B schedule frees across streams, as
    ``should_free_input`` decides them (megatron/core/models/common/utils.py @ 6513e3e23) for the schedule nodes
    that ``TransformerLayerSchedulePlan`` puts on the other stream than their input's maker
    (models/common/model_chunk_schedule_plan.py: ``moe_dispatch`` and ``moe_combine`` on the communication stream,
    ``mlp`` on the computation stream); ``ScheduleNode._forward`` records each on its node's stream, then
    ``untyped_storage().resize_(0)`` (pipeline_parallel/utils.py):

    * ``moe_dispatch`` (the permuted local tokens): only the ``alltoall`` dispatcher (``dispatch`` ``sparse``), and
      only while ``moe_preprocess`` is outside the per-layer graph scope, which a full-iteration graph's empty
      ``cuda_graph_modules`` always is; DeepEP's and HybridEP's keep it for the backward;
    * ``mlp`` (the dispatched tokens): under fp8 ("the casted tensors are saved"); in 16 bits only where the
      dispatcher's ``dispatch_postprocess`` copies them (``alltoall`` with more than one local expert, DeepEP),
      not HybridEP's or the one-expert ``alltoall``'s identity, whose output the grouped GEMM saves;
    * ``moe_combine`` (the experts' output): always.

    ``dispatch``: :attr:`workloads.parallel.ParallelPlan.moe_dispatch` (``sparse``, ``deepep``, ``hybridep``).

    >>> [cross_stream_freed_inputs("hybridep", fp8, 16) for fp8 in (True, False)]
    [2, 1]
    >>> [cross_stream_freed_inputs("sparse", False, n) for n in (1, 16)], cross_stream_freed_inputs("deepep", False, 1)
    ([2, 3], 2)
    """
    free_dispatch = dispatch == "sparse"
    free_mlp = fp8 or (dispatch != "hybridep" and (local_experts > 1 or dispatch != "sparse"))
    return int(free_dispatch) + int(free_mlp) + 1


def hybridep_budget_rows(local_tokens: int, top_k: int, rank_capacity_factor: float | None) -> int:
    """Rows of a HybridEP dispatch output: ``int(tokens x top_k x factor)`` rounded up to
    :data:`HYBRIDEP_BUDGET_ALIGN_ROWS` with a rank capacity factor (``_HybridEPManager.setup_metadata``,
    token_dispatcher.py @ 6513e3e23); without one the routed count, ``tokens x top_k`` when balanced.

    >>> hybridep_budget_rows(16384, 8, 1.5), hybridep_budget_rows(4096, 8, None), hybridep_budget_rows(100, 3, 1.5)
    (196608, 32768, 512)
    """
    if rank_capacity_factor is None:
        return local_tokens * top_k
    budget = int(local_tokens * top_k * rank_capacity_factor)
    return budget + (-budget % HYBRIDEP_BUDGET_ALIGN_ROWS)


def graph_deferred_free_bytes(microbatches: int, moe_layers: Sequence[tuple[int, int, int, int]],
                              rank_capacity_factor: float | None, itemsize: float = 2.0) -> float:
    """Bytes a full-iteration CUDA graph's capture holds of the blocks freed across streams: during a capture
    the caching allocator defers a block with recorded stream uses until the capture ends
    (``needs_events_deferred_until_no_capture``, c10/cuda/CUDACachingAllocator.cpp ``free``; PyTorch
    PR #158352: "the CUDA caching allocator currently defers reclaiming blocks until capture ends", reuse only
    under the opt-in ``graph_capture_record_stream_reuse``, default False), so every microbatch's cross-stream
    freed inputs (:func:`cross_stream_freed_inputs`) of every MoE layer stay in the graph's pool until the
    capture's end. ``moe_layers``: (local tokens, top-k, hidden, freed inputs) of each MoE layer; each input
    dispatch-sized (:func:`hybridep_budget_rows` rows; the ``alltoall`` dispatcher's permuted local tokens are
    the routed rows too), 16-bit. The backward's cross-stream gradients (``g.record_stream``) are not counted: a
    lower bound.

    >>> graph_deferred_free_bytes(2, [(4096, 8, 2048, 1)], None) == 2 * 1 * 32768 * 2048 * 2
    True
    """
    per_mb = sum(n * hybridep_budget_rows(t, k, rank_capacity_factor) * h for t, k, h, n in moe_layers)
    return float(microbatches) * per_mb * itemsize


def te_graph_static_bytes(*, hidden: int, local_seq: int, microbatch: int, seq_per_cp: int, seq: int,
                          attn_samples: float, sent_outputs: float, grad_outputs: int,
                          itemsize: float = 2.0) -> dict[str, float]:
    """Bytes Transformer Engine's per-layer CUDA graphs (Megatron-Core ``cuda_graph_impl="transformer_engine"``)
    keep beside what the eager step holds, by part (docs/training_memory.md, "Transformer Engine's per-layer CUDA
    graphs"; megatron/core/transformer/cuda_graphs.py and transformer_layer.py @ NVIDIA/Megatron-LM 3758b54b2,
    transformer_engine/pytorch/graph.py @ NVIDIA/TransformerEngine 71bbefbf1):

    * ``attention_masks``: a graph whose scope holds the attention takes a boolean ``attention_mask`` static input
      of (microbatch, 1, seq / cp, seq), made anew for every static sample
      (``TransformerLayer.get_layer_static_inputs``); ``attn_samples`` distinct samples stay allocated, the
      in-flight (layer, microbatch) forwards once ``TECudaGraphHelper._get_sample_arguments`` reuses the samples
      whose backward has run. The eager step passes no mask (causal attention).
    * ``sent_outputs``: a graph whose output is the layer's output keeps it in the graphs' memory pool from its
      forward capture to its backward capture (``_make_graphed_callables`` weak-references static outputs only
      then), where the eager step frees a pipeline chunk's output once sent (Megatron-Bridge
      ``deallocate_pipeline_outputs`` True); ``sent_outputs`` such outputs in flight, (local_seq, microbatch,
      hidden) each, ``local_seq`` the sequence over cp (and tp with sequence parallelism).
    * ``grad_outputs``: one static gradient buffer per output signature, kept for the step
      (``static_grad_outputs_dict`` with ``_reuse_graph_input_output_buffers``, which Megatron-Core sets from
      TE 2.7); ``grad_outputs`` hidden-sized buffers.

    The static hidden-state inputs and the outputs a following layer saves stand in for tensors the eager step
    keeps (the copy into a static input frees the eager tensor), so they add nothing.

    >>> p = te_graph_static_bytes(hidden=8192, local_seq=1024, microbatch=1, seq_per_cp=4096, seq=4096,
    ...                           attn_samples=0, sent_outputs=23, grad_outputs=1)
    >>> p["sent_outputs"] == 23 * 1024 * 8192 * 2, p["grad_outputs"] == 1024 * 8192 * 2, p["attention_masks"]
    (True, True, 0.0)
    """
    act = float(local_seq) * microbatch * hidden * itemsize
    return {"attention_masks": float(attn_samples) * microbatch * seq_per_cp * seq,
            "sent_outputs": float(sent_outputs) * act, "grad_outputs": float(grad_outputs) * act}
