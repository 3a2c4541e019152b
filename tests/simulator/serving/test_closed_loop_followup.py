"""A closed loop's next request cannot join the iteration that starts when its predecessor finished
(TensorRT-LLM's ``executionLoop`` hands out iteration k's tokens and fetches new requests for k + 1 in one
pass), unless the engine was left idle; and TensorRT-LLM's micro-batch scheduler without context chunking
(scheduler ``orca``) takes whole prompts while they fit ``max_num_tokens``. Timelines by hand on a stub
pricer: an iteration with a prompt takes 1.0 s, a decode-only step 0.1 s."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simulator.serving.engine import Replica, run_loop
from simulator.serving.scheduler import Limits


class _Pricer:
    """1.0 s for an iteration that carries a prompt, 0.1 s for a decode step; no energy."""

    def iteration(self, chunks, decodes, decode_context, sampled, verify=1, longest=0):  # noqa: ARG002 - the pricer's signature
        return (1.0 if chunks else 0.1), 0.0

    def decode_fixed(self, batch):  # noqa: ARG002
        return 0.0, 0.0

    def longest_bound(self, longest, context=0.0):  # noqa: ARG002 - the pricer's signature; no context dependence
        return 0

    def decode_segment(self, batch, context, longest=0):  # noqa: ARG002
        return math.inf, 0.1, 0.0, 0.0, 0.0


def _run(outs: list[int], clients: int, budget: int = 64) -> dict[int, tuple[float, float, float]]:
    """Requests of 10-token prompts and ``outs`` outputs from ``clients`` closed-loop clients: id -> (arrival,
    first token, finish)."""
    lim = Limits("orca", max_num_seqs=8, budget=budget, block_size=4, shared_blocks=0, swap=False, no_evict=True)
    rep = Replica(0, lim, 1000, _Pricer())
    lengths = (np.full(len(outs), 10), np.array(outs))
    done = run_loop([rep], [], "round-robin", [(0.0, i) for i in range(clients)], lengths, clients, len(outs),
                    lambda s: 0.0)
    return {s.id: (s.arrival, s.first_token, s.finish) for s in done}


def test_followup_waits_for_the_iteration_that_started_when_its_predecessor_finished():
    # a (3 tokens) and b (5) prefill together in [0, 1]; two decode steps: a finishes at 1.2, c is sent then.
    # The step at 1.2 (b's decode) was started before c could arrive: 1.2-1.3; c's prompt runs with b's last
    # decode in [1.3, 2.3] (b finishes at 2.3), so c's TTFT is 1.1 s, not 1.0. d (sent at 2.3) waits for c's
    # decode step [2.3, 2.4] and prefills in [2.4, 3.4].
    r = _run([3, 5, 3, 3], clients=2)
    assert r[0] == pytest.approx((0.0, 1.0, 1.2))
    assert r[1] == pytest.approx((0.0, 1.0, 2.3))
    assert r[2] == pytest.approx((1.2, 2.3, 3.4))
    assert r[3] == pytest.approx((2.3, 3.4, 3.6))


def test_followup_on_an_idle_engine_starts_at_once():
    # one client: nothing else runs when a request finishes, so the next one is fetched at once (TTFT = prefill)
    r = _run([3, 3, 3], clients=1)
    assert [r[i][1] - r[i][0] for i in range(3)] == pytest.approx([1.0, 1.0, 1.0])
    assert [r[i][0] for i in range(3)] == pytest.approx([0.0, 1.2, 2.4])


def test_whole_prompts_one_per_iteration_within_max_num_tokens():
    # budget 15 < two 10-token prompts: the second prompt waits for the next iteration (no chunk of it runs)
    r = _run([2, 2], clients=2, budget=15)
    assert r[0] == pytest.approx((0.0, 1.0, 2.0))  # its decode rides in b's prompt iteration [1, 2]
    assert r[1] == pytest.approx((0.0, 2.0, 2.1))


def test_nim_rows_run_whole_prompts():
    # NIM 1.8.0 runs a TensorRT-LLM engine with the executor's default enableChunkedContext = false
    from simulator.calibration.serving_validation import read_serving_csv

    nim = [r for r in read_serving_csv() if r.engine == "nim"]
    assert len(nim) == 27 and {r.scheduler for r in nim} == {"orca"}
