"""The paged KV cache of one replica: how many blocks fit, and the block arithmetic of a sequence.

Blocks available (per device, the worst pipeline stage; every device of a replica holds the same
number of blocks, as vLLM sizes them by the smallest)::

    blocks = floor((capacity * gpu_memory_utilization - weights - activations) / bytes_per_block)
    bytes_per_block = block_size * 2 * layers_per_stage * max(1, kv_heads / tp) * head_dim * kv_bytes

``weights`` and ``activations`` are what the engines predict for the largest iteration (a prefill step
of ``max_batched_tokens`` tokens), as vLLM profiles a dummy forward pass of that many tokens before it
sizes the cache (``gpu_memory_utilization`` is vLLM's setting of the same name: the fraction of the
device the engine may take). CUDA-graph buffers and the framework's other reserve are not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from simulator.serving.config import ServingError

__all__ = ["KVCacheSpec", "kv_cache_spec", "blocks_for"]


@dataclass(frozen=True)
class KVCacheSpec:
    """The KV cache of one replica: its blocks and the bytes behind them (per device)."""

    block_size: int
    blocks: int
    bytes_per_block: float
    capacity_bytes: float
    weights_bytes: float
    activations_bytes: float

    @property
    def tokens(self) -> int:
        """Tokens the cache can hold."""
        return self.blocks * self.block_size

    def to_json(self) -> dict[str, Any]:
        return {"block_size": self.block_size, "blocks": self.blocks, "tokens": self.tokens,
                "bytes_per_block_per_device": self.bytes_per_block, "capacity_bytes_per_device": self.capacity_bytes,
                "weights_bytes_per_device": self.weights_bytes, "activations_bytes_per_device": self.activations_bytes}


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks that ``tokens`` tokens occupy: ``ceil(tokens / block_size)``."""
    return -(-tokens // block_size)


def kv_cache_spec(cfg: Any, plan: Any, *, capacity_bytes: float, weights_bytes: float, activations_bytes: float,
                  block_size: int, gpu_memory_utilization: float, dtype: str) -> KVCacheSpec:
    """The cache a replica gets (module docstring); :class:`ServingError` when not one block fits."""
    from workloads.serving import kv_bytes_per_token

    per_block = block_size * kv_bytes_per_token(cfg, tp=plan.tp, pp=plan.pp, dtype=dtype)
    free = capacity_bytes * gpu_memory_utilization - weights_bytes - activations_bytes
    blocks = int(math.floor(free / per_block)) if free > 0 else 0
    if blocks < 1:
        gib = 2.0**30
        raise ServingError(f"KV cache: no block fits; got {capacity_bytes / gib:.2f} GiB x gpu_memory_utilization "
                           f"{gpu_memory_utilization} - weights {weights_bytes / gib:.2f} GiB - activations "
                           f"{activations_bytes / gib:.2f} GiB per device; expected room for at least one block of "
                           f"{per_block / 2**20:.2f} MiB (more tensor/pipeline parallelism, a smaller model or more "
                           "memory)")
    return KVCacheSpec(block_size=block_size, blocks=blocks, bytes_per_block=per_block, capacity_bytes=capacity_bytes,
                       weights_bytes=weights_bytes, activations_bytes=activations_bytes)
