"""A request fits the KV cache when its blocks, the shared prefix's included, fit the cache: the prefix's blocks
are resident once (the pool starts at blocks - shared) and each request holds need - shared of its own. The
check had subtracted the shared blocks twice: Llama 3.1 8B on an L4 (2,373 blocks of 16 tokens) refused a
30,010-token request (1,876 blocks) with a 20,000-token shared prefix under --prefix-cache, and ran it without."""

from __future__ import annotations

import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving


def test_request_fitting_beside_its_shared_prefix_runs() -> None:
    cfg = ServeConfig(arrival="poisson:qps=1", lengths="fixed:in=30000,out=10,prefix=20000", prefix_cache=True,
                      requests=3)
    s = simulate_serving("llama-3.1-8b", "l4", cfg).summary
    assert s["kv_cache"]["blocks"] == 2373
    assert -(-30010 // 16) == 1876 <= 2373
    assert s["requests"] == 3 and s["output_tokens"] == 30


def test_request_beyond_the_cache_is_still_refused() -> None:
    cfg = ServeConfig(arrival="poisson:qps=1", lengths="fixed:in=38000,out=10,prefix=20000", prefix_cache=True,
                      requests=3)
    with pytest.raises(ServingError, match="38010 tokens need 2376 KV blocks of 16; got a cache of 2373 blocks"):
        simulate_serving("llama-3.1-8b", "l4", cfg)
