"""A decode batch of mixed contexts priced as the split-KV kernel runs it: the splits and the heaviest CTA follow
the longest sequence, the K/V traffic the sum (hand-computed two-sequence batch)."""

from __future__ import annotations

import math

from hwmodels.gpu import attention_grid


def test_two_sequence_grid_by_hand():
    # Llama 3.1 8B decode on an H100 SXM (132 SMs): 32 query heads over 8 KV heads (4 rows a CTA), two
    # sequences of 101 and 2001 keys (mean 1051). CTAs per split 2 x 8 = 16; splits = min(floor(132 / 16) = 8,
    # ceil(longest / 256)): the longest, ceil(2001 / 256) = 8, allows 8; its CTAs hold 2001 / 8 keys each,
    # 4 query rows -> 1000.5 pairs. At the mean alone: min(8, ceil(1051 / 256) = 5) = 5, 1051 x 4 / 5 = 840.8.
    ragged = attention_grid(2, 32, 8, 1, 1051, 132, causal=True, seq_kv_max=2001)
    mean = attention_grid(2, 32, 8, 1, 1051, 132, causal=True)
    assert (ragged.kv_splits, ragged.ctas, ragged.heaviest_pairs) == (8.0, 128.0, 1000.5)
    assert (mean.kv_splits, mean.ctas, mean.heaviest_pairs) == (5.0, 80.0, 840.8)
    # the pairs are the batch's sum either way: 2 x 32 x 1051
    assert ragged.pairs == mean.pairs == 67264.0
    # a longest no longer than the mean is the uniform batch
    assert attention_grid(2, 32, 8, 1, 1051, 132, causal=True, seq_kv_max=1051) == mean


def _kernel(kv_max: int):
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import EvalOptions, evaluate
    from simulator.serving.iteration import resolve_config
    from workloads.serving import attention_graph

    cfg, _ = resolve_config("llama-3.1-8b")
    g = attention_graph(cfg, batch=2, query_tokens=1, kv_tokens=1051, kv_tokens_max=kv_max)
    return evaluate(g, load_device("h100-sxm5-80gb"), EvalOptions()).records[0]


def test_two_sequence_kernel_compute_follows_the_longest():
    ragged, mean = _kernel(2001), _kernel(0)
    # both launches fit one wave (128 and 80 CTAs on 132 SMs), so the compute term is the heaviest CTA's pairs
    # at the same time a pair: 1000.5 / 840.8 of the mean's
    assert math.isclose(ragged.compute_s / mean.compute_s, 1000.5 / 840.8, rel_tol=1e-9)
    # the K/V cache read is the sequences' sum; only the fp32 partial outputs grow with the splits (8 vs 5):
    # 2 sequences x 32 heads x 128 dims x 4 B x (8 - 5) splits, written and read
    assert math.isclose(ragged.dram_bytes - mean.dram_bytes, 2 * 32 * 128 * 4.0 * 3 * 2, rel_tol=1e-9)


def test_one_sequence_is_todays_price():
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from workloads.parallel import ParallelPlan

    p = IterationPricer("llama-3.1-8b", load_hardware("h100-sxm5-80gb"), ParallelPlan())
    assert p.attention_point(1, 1, 700, 900) == p.attention_point(1, 1, 700)
    assert p.decode_segment(1, 700.5, 900) == p.decode_segment(1, 700.5)
    assert p.iteration([], 1, 700.0, 0, longest=900) == p.iteration([], 1, 700.0, 0)
    # two sequences of 101 and 2001 keys: the longest's bucket point (2048) prices the split and the heaviest CTA
    assert p.longest_bound(2000, 1050) == 2048 and p.longest_bound(1000, 1050) == 0
    assert p.attention(2, 1, 1050.0, 2000)[0] > p.attention(2, 1, 1050.0)[0]
