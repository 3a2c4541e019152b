"""The paged KV cache of one replica: how many blocks fit, and the block arithmetic of a sequence.

Blocks available (per device, the worst pipeline stage; every device of a replica holds the same
number of blocks, as vLLM and TensorRT-LLM size them by the smallest), by the engine's sizing rule
(the framework profile's ``kv_cache_sizing``, :data:`KV_SIZINGS`)::

    device:  blocks = floor((capacity * gpu_memory_utilization - weights - activations) / bytes_per_block)
    free:    blocks = floor((capacity - context - weights - activations) * free_gpu_memory_fraction / bytes_per_block)
    bytes_per_block = block_size * 2 * layers_per_stage * max(1, kv_heads / tp) * head_dim * kv_bytes

``capacity`` is the device's memory as its runtime reports it (``MemoryLevel.usable``: the catalog's
``memory.hbm.usable_bytes``, the ``total_memory`` vLLM and TensorRT-LLM read through torch and
``cudaMemGetInfo``), not the marketed size; the driver's reserve is already outside it and the CUDA context
inside it. ``device`` is vLLM's rule (``gpu_memory_utilization`` of the whole device for everything the engine
holds). ``free`` is TensorRT-LLM's: a fraction of the memory still free once the engine is loaded and has
run its profiling pass (``KvCacheConfig.free_gpu_memory_fraction``, default 0.9, trtllm-bench's
``--kv_cache_free_gpu_mem_fraction``). The PyTorch backend (``tensorrt_llm/_torch/pyexecutor/_util.py``
``KvCacheCreator.configure_kv_cache_capacity`` / ``_cal_max_memory``) runs dummy context requests of
``max_num_tokens`` tokens, takes the peak memory (weights + activations, plus what CUDA allocated outside
PyTorch) and sizes ``(total - peak) * fraction``; the C++ runtime
(``cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp`` ``BaseKVCacheManager::calculateFreeMemBytes``) takes
``cudaMemGetInfo``'s free memory after the engine and its runtime buffers are allocated, times the fraction.
Both read the device's free memory after the process's CUDA context exists (the PyTorch backend's peak is
``total - free`` from ``torch.cuda.mem_get_info``, the C++ runtime's ``cudaMemGetInfo``), so the context is not
free: ``context`` is :data:`simulator.report.memory.CUDA_CONTEXT_BYTES` (the figure the training memory model
charges each GPU process), passed by the serving set-up for the ``free`` rule. vLLM's ``device`` rule takes
``gpu_memory_utilization`` of the total and subtracts only what its own profiling run added (the context is part
of its baseline), so it keeps ``context`` 0. What TensorRT-LLM allocates besides (its NCCL communicators, the
custom all-reduce workspace, the runtime and decoder buffers) scales with build limits NIM 1.8.0 and the
benchmark rows do not state, and is not counted.

``weights`` and ``activations`` are what the engines predict for the largest iteration (a prefill step
of ``max_batched_tokens`` tokens), as vLLM profiles a dummy forward pass of that many tokens before it
sizes the cache (``gpu_memory_utilization`` is vLLM's setting of the same name: the fraction of the
device the engine may take). CUDA-graph buffers and the framework's other reserve are not modelled.

Sliding-window layers (the profile's ``kv_window_layout``, :data:`KV_WINDOW_LAYOUTS`):

* ``full`` (every profile but ``vllm``): one block table for every layer, each block holding
  ``block_size`` tokens of every layer, a request holding ``ceil(tokens / block_size)`` blocks; a local
  layer's cache is sized at the full context like a global one's (the engines without a per-window pool).
* ``vllm-hybrid`` (vLLM V1's hybrid KV cache manager): the layers are split by attention type into groups
  of ``group_size`` layers each (``vllm/v1/core/kv_cache_utils.py``
  ``_get_kv_cache_groups_uniform_page_size`` @ 001cabc1be16a59a70d720ed61a13b678c060a18: ``group_size`` is
  the fewest layers of any type, or the most when that is under 1.5 x the fewest; a type of ``n`` layers makes
  ``ceil(n / group_size)`` groups). Every group draws from one pool of pages of ``group_size`` layers
  (``get_kv_cache_config_from_groups``: ``num_blocks = available // page_size // group_size``), so a block
  here is ``block_size`` tokens of ``group_size`` layers. A request holds ``ceil(tokens / block_size)``
  blocks in each full-attention group and, in each sliding-window group, those blocks less the ones wholly
  before its window: ``SlidingWindowManager.remove_skipped_blocks`` (``vllm/v1/core/
  single_type_kv_cache_manager.py`` @ 002f34915134cfd1a7d6ed777edd67dcc2289466) frees the blocks before
  ``(computed - window + 1) // block_size`` before each allocation, so a prompt prefilled in one chunk
  holds all its blocks in every group for that step, and a decoding request about ``ceil(window /
  block_size) + 1`` per window group. Without windows this is ``full``; a model whose every layer is local
  has one group of every layer, freeing as a window group (vLLM's ``SlidingWindowManager`` for a uniform
  sliding-window model, vllm-project/vllm PR #14097).
  Pipeline stages: each stage's layers of each type are ``ceil(n / pp)``.
* ``sglang-swa`` (SGLang's hybrid SWA memory, ``--disable-hybrid-swa-memory`` off): two pools of tokens, one
  for the full-attention layers and one for the sliding-window layers. The per-layer tokens ``T`` the memory
  holds at every layer are split so that ``swa x swa_layers + full x full_layers = T x layers`` with
  ``swa = full x swa_full_tokens_ratio`` (default 0.8), each then page-aligned (``ModelRunner.set_num_token_hybrid``,
  ``python/sglang/srt/model_executor/model_runner.py``, sglang 0.5.1; ``swa_full_tokens_ratio: float = 0.8`` in
  ``server_args.py``). A request holds ``ceil(tokens / block_size)`` blocks of the full pool and, of the window
  pool, those blocks less the ones wholly before its window (:func:`held_blocks` of one window group; the SWA
  radix cache lets the window pool evict a request's tokens outside its window). Admission needs room in both
  pools (``PrefillAdder.rem_total_tokens``: the smaller of the two pools' available tokens,
  ``managers/schedule_policy.py``, 0.5.1). ``blocks`` is the full pool, ``swa_blocks`` the window pool. One
  window size and at least one full-attention layer (GPT-OSS, Gemma 3); other models keep ``full``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.serving.config import ServingError

__all__ = ["KVCacheSpec", "kv_cache_spec", "blocks_for", "held_blocks", "kv_groups", "KV_SIZINGS",
           "KV_WINDOW_LAYOUTS", "DEFAULT_FREE_GPU_MEMORY_FRACTION", "SGLANG_SWA_FULL_TOKENS_RATIO", "sglang_swa_layers",
           "sglang_swa_pools"]

#: KV-cache sizing rules (module docstring): ``device`` (vLLM) and ``free`` (TensorRT-LLM).
KV_SIZINGS = ("device", "free")
#: TensorRT-LLM's default ``free_gpu_memory_fraction``: ``KvCacheConfig.free_gpu_memory_fraction`` 0.9
#: (``tensorrt_llm/llmapi/llm_args.py``; ``executor::KvCacheConfig::kDefaultGpuMemFraction`` in C++), which
#: trtllm-bench keeps unless ``--kv_cache_free_gpu_mem_fraction`` is given (docs/source/performance/
#: perf-overview.md: "the default setting of 0.90").
DEFAULT_FREE_GPU_MEMORY_FRACTION = 0.9
#: How the cache holds sliding-window layers (module docstring): ``full`` (every layer at full context) and
#: ``vllm-hybrid`` (vLLM V1's hybrid KV cache manager).
KV_WINDOW_LAYOUTS = ("full", "vllm-hybrid", "sglang-swa")
#: SGLang's default ``swa_full_tokens_ratio`` (window-layer tokens / full-layer tokens): ``server_args.py``
#: ``swa_full_tokens_ratio: float = 0.8`` (sglang 0.5.1 and 0.5.5 wheels on PyPI)
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
#: vLLM's group size takes the most layers of a type when that is under this many times the fewest
#: (``_get_kv_cache_groups_uniform_page_size`` @ 001cabc1: ``max_num_layers < min_num_layers * 1.5``).
VLLM_GROUP_SIZE_SLACK = 1.5


@dataclass(frozen=True)
class KVCacheSpec:
    """The KV cache of one replica: its blocks and the bytes behind them (per device)."""

    block_size: int
    blocks: int
    bytes_per_block: float
    capacity_bytes: float
    weights_bytes: float
    activations_bytes: float
    sizing: str = "device"
    memory_fraction: float = 0.9
    context_bytes: float = 0.0
    #: bytes per block of a speculative draft model's cache, which holds as many blocks as the target's (0: none)
    draft_bytes_per_block: float = 0.0
    #: the cache's layer groups as ((window, groups), ...): window 0 for full attention (:func:`kv_groups`);
    #: ((0, 1),): one group of every layer
    groups: tuple[tuple[int, int], ...] = ((0, 1),)
    #: layers per group on the worst stage (the layers behind one block)
    group_layers: int = 0
    window_layout: str = "full"
    #: ``sglang-swa``: blocks of the window pool, their window, the bytes of one (per device) and the ratio
    #: that split the memory (module docstring); 0 without a window pool
    swa_blocks: int = 0
    swa_window: int = 0
    swa_bytes_per_block: float = 0.0
    swa_full_tokens_ratio: float = 0.0

    @property
    def tokens(self) -> int:
        """Tokens the cache can hold."""
        return self.blocks * self.block_size

    def to_json(self) -> dict[str, Any]:
        return {"block_size": self.block_size, "blocks": self.blocks, "tokens": self.tokens,
                "bytes_per_block_per_device": self.bytes_per_block, "capacity_bytes_per_device": self.capacity_bytes,
                "weights_bytes_per_device": self.weights_bytes, "activations_bytes_per_device": self.activations_bytes,
                "sizing": self.sizing, "memory_fraction": self.memory_fraction,
                "context_bytes_per_device": self.context_bytes,
                "draft_bytes_per_block_per_device": self.draft_bytes_per_block,
                "window_layout": self.window_layout, "group_layers": self.group_layers,
                "groups": [{"window": w, "groups": g} for w, g in self.groups],
                "swa_blocks": self.swa_blocks, "swa_window": self.swa_window,
                "swa_bytes_per_block_per_device": self.swa_bytes_per_block,
                "swa_full_tokens_ratio": self.swa_full_tokens_ratio}

    @property
    def hybrid(self) -> bool:
        """True when a request's blocks follow :func:`held_blocks` rather than ``ceil(tokens / block_size)``."""
        return self.groups != ((0, 1),)


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that ``tokens`` tokens occupy: ``ceil(tokens / block_size)``."""
    return -(-tokens // block_size)


def held_blocks(tokens: int, computed: int, block_size: int, groups: tuple[tuple[int, int], ...]) -> int:
    """Blocks a request holds with slots for ``tokens`` tokens of which ``computed`` are computed, over the
    cache's ``groups`` (module docstring): ``ceil(tokens / block_size)`` per full-attention group, less
    ``max(0, computed - window + 1) // block_size`` skipped blocks per sliding-window group.

    >>> held_blocks(8192, 8191, 16, ((0, 1), (128, 1))), held_blocks(8192, 0, 16, ((0, 1), (128, 1)))
    (520, 1024)
    """
    full = -(-tokens // block_size)
    out = 0
    for window, n in groups:
        if window:
            out += n * (full - min(full, max(0, computed - window + 1) // block_size))
        else:
            out += n * full
    return out


def kv_groups(cfg: Any, *, pp: int = 1, layout: str = "full") -> tuple[int, tuple[tuple[int, int], ...]]:
    """(layers per group, ((window, groups), ...)) of the worst pipeline stage's cache by ``layout``
    (module docstring; window 0: full attention).

    >>> from workloads.zoo.transformer import zoo_config
    >>> kv_groups(zoo_config("gemma3-12b"), layout="vllm-hybrid"), kv_groups(zoo_config("gemma3-12b"))
    ((8, ((1024, 5), (0, 1))), (48, ((0, 1),)))
    """
    from workloads.serving import layer_windows

    if layout not in KV_WINDOW_LAYOUTS:
        raise ServingError(f"kv_window_layout: got {layout!r}; expected one of {', '.join(KV_WINDOW_LAYOUTS)}")
    per = {w: -(-n // pp) for w, n in layer_windows(cfg).items()}
    if layout in ("full", "sglang-swa") or per.keys() == {0}:
        return -(-int(cfg.layers) // pp), ((0, 1),)
    if len(per) == 1:  # every layer local (Mistral 7B v0.1): one group, its blocks behind the window freed
        (window, n), = per.items()
        return n, ((window, 1),)
    fewest, most = min(per.values()), max(per.values())
    size = most if most < fewest * VLLM_GROUP_SIZE_SLACK else fewest
    return size, tuple((w, -(-n // size)) for w, n in per.items())


def kv_cache_spec(cfg: Any, plan: Any, *, capacity_bytes: float, weights_bytes: float, activations_bytes: float,
                  block_size: int, gpu_memory_utilization: float, dtype: str, sizing: str = "device",
                  free_gpu_memory_fraction: float | None = None, context_bytes: float = 0.0,
                  window_layout: str = "full") -> KVCacheSpec:
    """The cache a replica gets by the ``sizing`` rule (module docstring); :class:`ServingError` when not one
    block fits. ``free_gpu_memory_fraction`` (``free`` only; None: :data:`DEFAULT_FREE_GPU_MEMORY_FRACTION`);
    ``context_bytes``: the CUDA context, not free when the ``free`` rule reads the device (module docstring);
    ``window_layout``: how sliding-window layers are held (:data:`KV_WINDOW_LAYOUTS`)."""
    from workloads.serving import kv_bytes_per_token

    if sizing not in KV_SIZINGS:
        raise ServingError(f"kv_cache_sizing: got {sizing!r}; expected one of {', '.join(KV_SIZINGS)}")
    group_layers, groups = kv_groups(cfg, pp=plan.pp, layout=window_layout)
    swa = sglang_swa_layers(cfg, pp=plan.pp) if window_layout == "sglang-swa" else None
    if groups == ((0, 1),):
        per_block = block_size * kv_bytes_per_token(cfg, tp=plan.tp, pp=plan.pp, dtype=dtype)
    else:  # a page of group_layers layers (kv_bytes_per_token's expression for that many layers)
        from workloads.dtypes import parse_dtype

        per_block = block_size * (2.0 * group_layers * max(1, cfg.n_kv_heads // plan.tp) * cfg.d_head
                                  * parse_dtype(dtype).bits / 8.0)
    gib = 2.0**30
    if sizing == "free":
        fraction = DEFAULT_FREE_GPU_MEMORY_FRACTION if free_gpu_memory_fraction is None else free_gpu_memory_fraction
        free = (capacity_bytes - context_bytes - weights_bytes - activations_bytes) * fraction
        ctx = f" - CUDA context {context_bytes / gib:.2f} GiB" if context_bytes else ""
        rule = (f"({capacity_bytes / gib:.2f} GiB{ctx} - weights {weights_bytes / gib:.2f} GiB - activations "
                f"{activations_bytes / gib:.2f} GiB) x free_gpu_memory_fraction {fraction}")
    else:
        fraction = gpu_memory_utilization
        free = capacity_bytes * gpu_memory_utilization - weights_bytes - activations_bytes
        rule = (f"{capacity_bytes / gib:.2f} GiB x gpu_memory_utilization {gpu_memory_utilization} - weights "
                f"{weights_bytes / gib:.2f} GiB - activations {activations_bytes / gib:.2f} GiB")
    blocks = int(math.floor(free / per_block)) if free > 0 else 0
    extra: dict[str, Any] = {}
    if swa is not None:  # SGLang's two pools (module docstring)
        (window, n_swa), n_full = swa
        per_layer = per_block / group_layers  # a block of one layer
        tokens = int(free // (per_block / block_size)) // block_size * block_size if free > 0 else 0
        full, swa_blocks = sglang_swa_pools(tokens, n_full, n_swa, block_size)
        blocks = full
        per_block = per_layer * n_full
        extra = {"swa_blocks": swa_blocks, "swa_window": window, "swa_bytes_per_block": per_layer * n_swa,
                 "swa_full_tokens_ratio": SGLANG_SWA_FULL_TOKENS_RATIO}
        if swa_blocks < 1:
            blocks = 0
    if blocks < 1:
        raise ServingError(f"KV cache: no block fits; got {rule} per device; expected room for at least one block of "
                           f"{per_block / 2**20:.2f} MiB (more tensor/pipeline parallelism, a smaller model or more "
                           "memory)")
    return KVCacheSpec(block_size=block_size, blocks=blocks, bytes_per_block=per_block, capacity_bytes=capacity_bytes,
                       weights_bytes=weights_bytes, activations_bytes=activations_bytes, sizing=sizing,
                       memory_fraction=fraction, context_bytes=context_bytes if sizing == "free" else 0.0,
                       groups=groups, group_layers=group_layers,
                       window_layout=window_layout, **extra)


def sglang_swa_layers(cfg: Any, *, pp: int = 1) -> tuple[tuple[int, int], int] | None:
    """((window, window layers), full-attention layers) of the worst stage when SGLang's hybrid SWA pools apply
    (one window size and at least one full-attention layer, module docstring); None: one pool (``full``)."""
    from workloads.serving import layer_windows

    per = {w: -(-n // pp) for w, n in layer_windows(cfg).items()}
    wins = [w for w in per if w]
    if len(wins) != 1 or not per.get(0):
        return None
    return (wins[0], per[wins[0]]), per[0]


def sglang_swa_pools(tokens: int, full_layers: int, swa_layers: int, block_size: int,
                     ratio: float = SGLANG_SWA_FULL_TOKENS_RATIO) -> tuple[int, int]:
    """(full-pool blocks, window-pool blocks) from ``tokens`` per-layer tokens of every layer (module docstring:
    ``full = int(tokens x layers / (ratio x swa_layers + full_layers))``, ``swa = int(full x ratio)``, each
    page-aligned to ``block_size``).

    >>> sglang_swa_pools(1_000_000, 12, 12, 1)
    (1111111, 888888)
    """
    full = int(tokens * (full_layers + swa_layers) / (ratio * swa_layers + full_layers))
    swa = int(full * ratio)
    return full // block_size, swa // block_size
