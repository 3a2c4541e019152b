"""The start-up wave of a closed loop (N clients sending one prompt each at t = 0) under whole prompts
(scheduler ``orca``, TensorRT-LLM's ``MicroBatchScheduler`` without context chunking): a larger token
budget (``max_num_tokens``) puts more prompts into one iteration but does not lower the wave's mean time to
first token when an iteration's price grows with its prompt tokens (a compute-bound prefill), since every
prompt of an iteration gets its first token at the iteration's end. Timelines by hand on a stub pricer:
0.1 s per 10 prompt tokens of an iteration, 0.01 s for a decode-only step."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.serving.engine import Replica, run_loop
from simulator.serving.scheduler import Limits


class _TokenPricer:
    """0.01 s per prompt token of an iteration (chunks of (query tokens, context); decodes riding along are
    free), 0.01 s a decode-only step."""

    def iteration(self, chunks, decodes, decode_context, sampled, verify=1, longest=0):  # noqa: ARG002 - the pricer's signature
        prompt = sum(q for q, _ in chunks)
        return (0.01 * prompt if prompt else 0.01), 0.0

    def decode_fixed(self, batch):  # noqa: ARG002
        return 0.0, 0.0

    def longest_bound(self, longest, context=0.0):  # noqa: ARG002 - the pricer's signature; no context dependence
        return 0

    def decode_segment(self, batch, context, longest=0):  # noqa: ARG002
        return math.inf, 0.01, 0.0, 0.0, 0.0


def _wave(clients: int, budget: int) -> list[float]:
    """First-token times of ``clients`` 10-token prompts sent at t = 0 (2 output tokens each, one request per
    client)."""
    lim = Limits("orca", max_num_seqs=16, budget=budget, block_size=4, shared_blocks=0, swap=False, no_evict=True)
    rep = Replica(0, lim, 1000, _TokenPricer())
    lengths = (np.full(clients, 10), np.full(clients, 2))
    done = run_loop([rep], [], "round-robin", [(0.0, i) for i in range(clients)], lengths, clients, clients,
                    lambda s: 0.0)
    return sorted(s.first_token - s.arrival for s in done)


def test_one_prompt_an_iteration_drains_the_wave_one_prefill_at_a_time():
    # budget 15: one 10-token prompt per iteration (0.1 s; the running decodes ride along), so the k-th
    # prompt's first token comes at 0.1 k s: 0.1, 0.2, 0.3, 0.4 (mean 0.25 s = (N + 1) / 2 prefills)
    assert _wave(4, 15) == pytest.approx([0.1, 0.2, 0.3, 0.4])


def test_a_larger_budget_does_not_lower_the_waves_mean():
    # budget 40: the four prompts share one iteration of 40 prompt tokens (0.4 s) and all four get their
    # first token at its end: mean 0.4 s, above the 0.25 s of one prompt an iteration
    assert _wave(4, 40) == pytest.approx([0.4] * 4)
    # budget 20: two prompts in [0, 0.2]; then their two decodes take 2 of the 20 tokens, so the next
    # iteration holds one prompt (2 + 10 + 10 > 20: the scheduler stops at the first that does not fit):
    # [0.2, 0.3], then the last in [0.3, 0.4]: 0.2, 0.2, 0.3, 0.4 (mean 0.275 s)
    assert _wave(4, 20) == pytest.approx([0.2, 0.2, 0.3, 0.4])
    assert np.mean(_wave(4, 15)) < np.mean(_wave(4, 20)) < np.mean(_wave(4, 40))
