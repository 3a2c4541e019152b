"""The serving event loop: requests arriving over time on replicas of a deployment.

Events are kept in two heaps: arrivals (open-loop times drawn up front, closed-loop clients' next
requests and disaggregated hand-offs as they happen) and replica steps. A replica with work plans an
iteration (:func:`simulator.serving.scheduler.plan_iteration`), prices it
(:class:`simulator.serving.iteration.IterationPricer`) and is busy until it ends; arrivals during an
iteration join the queue and are seen by the next plan. A run of decode-only iterations whose batch
cannot change (no arrival before it ends, no request finishing, blocks to spare) is advanced in one
go, step by step on the priced attention line, so an hour of traffic is a few hundred thousand cheap
steps. Nothing is random here: the generators are drawn before the loop, so one seed gives one result.

A closed-loop client's next request is caused by its previous request's last token, which the engine hands
out after the iteration that sampled it; the engine loop then starts its next iteration at once, without
waiting for the client (TensorRT-LLM ``cpp/tensorrt_llm/executor/executorImpl.cpp`` ``executionLoop``:
``forwardSync`` of iteration k, ``populateNewResponses`` / ``enqueueNewResponses``, then ``fetchNewRequests``
and ``forwardAsync`` of k + 1 in the same thread; the client's next HTTP request arrives later). So such a
follow-up never joins the iteration that starts at the moment its predecessor finished: at equal times the
replica's step is planned first and the follow-up waits for the iteration after it, unless that replica
was left with nothing to run (then it starts at once, as ``fetchNewRequests`` blocks on an empty engine).
vLLM's and SGLang's engine loops have the same order, so the rule holds for every engine here: vLLM V0
``vllm/engine/multiprocessing/engine.py`` ``MQLLMEngine.run_engine_loop`` (the OpenAI server's engine process
from v0.6.0): poll the input socket only while ``has_unfinished_requests()`` is false, then
``handle_new_input`` (non-blocking), ``engine_step`` and ``_send_outputs``, and round again (the in-process
``vllm/engine/async_llm_engine.py`` ``run_engine_loop`` / ``engine_step`` likewise: new requests, ``step_async``,
then the outputs to the request streams); SGLang 0.3 ``python/sglang/srt/managers/controller_single.py``
``ControllerSingle.loop_for_forward``: ``recv_requests`` (zmq ``NOBLOCK``, a busy loop when idle), then
``tp_worker.py`` ``ModelTpServer.exposed_step`` (queue them, ``forward_step``, return ``out_pyobjs``), then
the outputs to the detokenizer. (These files as they stood around those releases; their text at the exact tags the
profiles name is not checked here.)
"""

from __future__ import annotations

import heapq
import logging
import math
from collections import deque
from typing import Any

import numpy as np

from nodeperf.suggest import did_you_mean
from simulator.serving.config import (
    DEFAULT_REQUESTS,  # noqa: F401 - kept importable here, where it was defined before
    IterationRecord,
    ServingError,
)
from simulator.serving.scheduler import Limits, Plan, Seq, longest_decode, plan_iteration, tally

__all__ = ["ROUTERS", "Replica", "run_loop", "check_router"]

logger = logging.getLogger(__name__)

ROUTERS = ("round-robin", "least-loaded")

#: Finished sequences fewer than this leave the running batch one by one (``list.remove``), more by one filtering
#: pass (the same batch either way)
_REMOVE_ONE_BY_ONE = 8


class Replica:
    """One copy of the deployment: its scheduler state, KV blocks and the iterations it ran."""

    def __init__(self, rid: int, lim: Limits, blocks: int, pricer: Any, *, prefill_only: bool = False,
                 swap_s_per_block: float = 0.0, speculative: tuple[Any, int, float] | None = None,
                 output_lag: bool = False, swa_blocks: int = 0) -> None:
        self.id, self.lim, self.pricer = rid, lim, pricer
        #: tokens reach the client when the next iteration ends (FrameworkProfile.output_lag_steps)
        self.output_lag = output_lag
        #: sequences whose first token the last iteration sampled, waiting for the next one to deliver it
        self.pending: list[Seq] = []
        #: when the last iteration's engine step returned the outputs it processed (:meth:`_decode_run`)
        self._handover = 0.0
        #: (draft model's pricer, draft tokens k, expected tokens per step) or None
        self.speculative = speculative
        self.blocks = blocks
        self.free = [blocks - lim.shared_pool, swa_blocks]
        self.running: list[Seq] = []
        self.waiting: deque[Seq] = deque()
        self.busy = False
        self.prefill_only = prefill_only
        self.swap_s_per_block = swap_s_per_block
        self.iterations: list[IterationRecord] = []
        self.finished: list[Seq] = []
        self.handoffs: list[tuple[float, Seq]] = []
        self.busy_s = 0.0
        self.energy_j = 0.0
        self.kv_block_seconds = 0.0
        self.preemptions = 0

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    # --- one step (or a run of identical decode steps) ---------------------------------------------
    def step(self, t: float, next_arrival: float) -> float | None:
        """Run from ``t``; the time the replica is next free, or None when it has nothing to do."""
        plan = plan_iteration(self.running, self.waiting, self.free, self.lim)
        for v in plan.preempted:
            self.waiting.appendleft(v)
            self.preemptions += 1
        if not plan.work:
            self.pending.clear()  # nothing left to run: the output queue is drained at once (no lag)
            return None
        if not self.output_lag:
            if plan.decode_only and plan.swap_in_blocks == 0 and self.speculative is None:
                return self._decode_run(t, plan, next_arrival if not self.waiting else math.inf)
            return self._one_step(t, plan)
        waiting_out, self.pending = self.pending, []
        firsts = {id(s) for s, _ in plan.work if s.first_token < 0}
        if plan.decode_only and plan.swap_in_blocks == 0 and self.speculative is None:
            end = self._decode_run(t, plan, next_arrival if not self.waiting else math.inf)
        else:
            end = self._one_step(t, plan)
        for s in waiting_out:  # delivered when this iteration's engine step returns
            s.lag = self._handover - s.first_token
        self.pending = [s for s, _ in plan.work if id(s) in firsts and s.first_token >= 0]
        return end

    def _one_step(self, t: float, plan: Any) -> float:
        chunks, dec, dec_ctx, sampled, prefill_tokens = plan.tally if plan.tally is not None else tally(plan.work)
        ctx = dec_ctx / dec if dec else 0.0
        if self.speculative is not None and dec:
            draft, k, gain = self.speculative
            dt, e = self.pricer.iteration(chunks, dec, ctx, sampled, verify=k + 1)
            ddt, dde = draft.draft_steps(dec, ctx, k)
            dt, e = dt + ddt, e + dde
        else:
            gain = 1.0
            longest = 0
            if dec > 1:
                longest = plan.longest if plan.longest is not None else longest_decode(plan.work)
            dt, e = self.pricer.iteration(chunks, dec, ctx, sampled, longest=longest)
        dt += (plan.swap_in_blocks + plan.swap_out_blocks) * self.swap_s_per_block
        end = t + dt
        self._handover = end
        tokens = dec + prefill_tokens
        self._account(t, end, 1, tokens, prefill_tokens, len(plan.work), e)
        if gain > 1.0:
            self._advance_speculative(plan.work, end, gain)
        else:
            done = _advance(plan.work, end, self.prefill_only)
            if done:
                self._retire(end, done)
        return end

    def _advance_speculative(self, work: list[tuple[Seq, int]], end: float, gain: float) -> None:
        """The sequences of a speculative iteration ending at ``end`` advanced: a decode by the expected
        accepted tokens (Leviathan et al. 2023, Eq. 1), kept exact over the steps by carrying the fraction."""
        for s, n in work:
            if s.pad:
                continue
            if n == 1 and s.computed == s.total - 1 and s.generated:
                got = min(int(s.credit + gain) - int(s.credit), s.n_out - s.generated)
                s.credit += gain
                s.computed += got
                self._sample(s, end, got)
                continue
            s.computed += n
            if s.computed == s.total:
                self._sample(s, end, 1)
        if any(s.finish >= 0 and not s.pad for s in self.running):
            self._retire(end)

    def _decode_run(self, t: float, plan: Plan, stop_at: float) -> float:
        """Decode steps of an unchanging batch until a request finishes, blocks run short or an
        arrival is due (every step is priced on the attention line of its mean context)."""
        work = plan.work
        if plan.context is None or self.lim.kind == "static":
            live, left, context, longest = _live(work)
        else:  # counted by the scheduler; no padding outside static batches
            live, left, context = [s for s, _ in work], plan.fewest, plan.context
            # every item a decode (no chunk counted): their longest context is the plan's
            longest = plan.longest if plan.longest is not None and plan.tally and not plan.tally[0] else max(
                s.computed for s in live)
        batch = len(work)
        block = self.lim.steps
        if block > 1:  # multi-step: N steps whatever arrives or finishes; slots reserved by the plan
            k_max, stop_at = block, math.inf
        else:
            k_max = left if live else 1
            if self.lim.kind != "static":
                k_max = min(k_max, self._block_steps(live))
        fixed_t, fixed_e = self.pricer.decode_fixed(batch)
        end = t
        if block > 1:  # the host work of the scheduling pass (and the graph launch it waits on) once, before
            # the block's first step; the later steps are launched while the GPU runs the one before
            host = self.pricer.step_host_time(batch)
            fixed_t -= host
            end += host
            # the engine step of a block's first step returns once it is launched: vLLM 0.6's
            # ModelRunner.execute_model runs the output callback (the last iteration's tokens) after
            # launching the forward and the logits, and AsyncLLMEngine.step_async returns a non-last step
            # of a block without waiting for the GPU (a last step waits: _final_process_outputs)
            self._handover = end
        ends, energy = self._decode_steps(end, batch, (context / batch, longest), len(live) / batch,
                                          (fixed_t, fixed_e), k_max, stop_at)
        end = ends[-1]
        if block == 1:
            self._handover = ends[0]
        self._account(t, end, len(ends), batch, 0, batch, energy)
        done = self._advance_decodes(live, ends if block == 1 else [end], len(ends))
        if done:
            self._retire(end, done)
        return end

    def _decode_steps(self, end: float, batch: int, contexts: tuple[float, int], grow: float,
                      fixed: tuple[float, float], k_max: int, stop_at: float) -> tuple[list[float], float]:
        """Each step's end (a chunk to every live sequence: one step per scheduling pass) and the steps'
        energy, from ``end`` at mean context ``c`` growing by ``grow`` a step and the longest context ``m``
        by one (``contexts``: ``(c, m)``), until ``k_max`` steps or ``stop_at``."""
        fixed_t, fixed_e = fixed
        c, m = contexts
        pricer = self.pricer
        hi, at, slope_t, ae, slope_e = pricer.decode_segment(batch, c, m)
        top = pricer.longest_bound(m, c) if batch > 1 else 0
        ends: list[float] = []
        energy = 0.0
        while True:
            if c >= hi or m > top > 0:
                hi, at, slope_t, ae, slope_e = pricer.decode_segment(batch, c, m)
                top = pricer.longest_bound(m, c) if batch > 1 else 0
            end += fixed_t + at
            energy += fixed_e + ae
            ends.append(end)
            if len(ends) >= k_max or end >= stop_at:
                return ends, energy
            c += grow
            m += 1
            at += slope_t * grow
            ae += slope_e * grow

    def _advance_decodes(self, live: list[Seq], ends: list[float], steps: int) -> list[Seq]:
        """Chunks handed over at ``ends`` (a gap from each one's last chunk to the first end, then the steps between the ends) and ``steps`` tokens to every sequence of
        ``live``, with their new blocks (inlined :func:`own_blocks` and :meth:`_sample`: the hot loop of a
        long run); those that finished, in batch order."""
        rest = np.diff(ends).tobytes() if len(ends) > 1 else b""
        first, end = ends[0], ends[-1]
        paged = self.lim.kind != "static"
        if paged and self.lim.groups is None and not self.lim.swa_window:
            return self._advance_plain(live, (first, end, rest), steps)
        multi = self.lim.steps > 1
        bs, shared, hybrid = self.lim.block_size, self.lim.shared_blocks, self.lim.groups
        if hybrid is not None:
            shared = self.lim.shared_pool
        keep = self.lim.no_evict  # no-evict holds its reserved blocks to the end
        free = self.free[0]
        sw = self.lim.swa_window
        done: list[Seq] = []
        for s in live:
            s.gaps.append(first - s.last_out)
            if rest:
                s.gaps.frombytes(rest)
            s.last_out = end
            c = s.computed + steps
            s.computed = c
            if paged:
                if hybrid is None:
                    need = -(-c // bs) - (shared if s.cached else 0) - s.blocks
                else:  # window groups free the blocks their window left (kvcache.held_blocks)
                    need = self.lim.held(c, c) - (shared if s.cached else 0) - s.blocks
                    if need < 0 and keep:
                        need = 0
                if need > 0 or (need < 0 and hybrid is not None):
                    free -= need
                    s.blocks += need
                if sw:  # the window pool (Limits.held_swa): its blocks behind the window freed
                    need = self.lim.held_swa(c, c) - s.swa
                    if need > 0 or not keep:
                        self.free[1] -= need
                        s.swa += need
            g = s.generated + steps
            if g >= s.n_out:
                # finished (inside a multi-step block: handed over at its end with the block's other tokens,
                # vLLM 0.6 MultiStepModelRunner._final_process_outputs pythonizes every step of the block at
                # its last one, and step_async returns them then)
                s.finish = end
                g = s.n_out if multi else g
                done.append(s)
            s.generated = g
        self.free[0] = free
        return done

    def _advance_plain(self, live: list[Seq], ends: tuple[float, float, bytes], steps: int) -> list[Seq]:
        """:meth:`_advance_decodes` in a cache of ``ceil(tokens / block_size)`` blocks a sequence (``ends``: the
        first and last ends and the steps between them as bytes). The plan gave each decode the blocks of its
        token and look-ahead slots, so a run of no more steps than those needs no new block and none is counted."""
        first, end, rest = ends
        lim = self.lim
        bs, shared, multi = lim.block_size, lim.shared_blocks, lim.steps > 1
        grow = steps > lim.lookahead + lim.steps  # past the slots the plan reserved (a token and the look-ahead)
        free = self.free[0]
        done: list[Seq] = []
        for s in live:
            gaps = s.gaps
            gaps.append(first - s.last_out)
            if rest:
                gaps.frombytes(rest)
            s.last_out = end
            c = s.computed + steps
            s.computed = c
            if grow:
                need = -(-c // bs) - (shared if s.cached else 0) - s.blocks
                if need > 0:
                    free -= need
                    s.blocks += need
            g = s.generated + steps
            if g >= s.n_out:  # finished (a multi-step block's tokens handed over at its end: _advance_decodes)
                s.finish = end
                g = s.n_out if multi else g
                done.append(s)
            s.generated = g
        self.free[0] = free
        return done

    def _block_steps(self, live: list[Seq]) -> int:
        """Decode steps every sequence of ``live`` can take with the free blocks: each holds room for
        ``cap = blocks * block_size - computed`` more tokens (1 to block_size after the plan's
        allocation) and needs one new block after that; with ``F`` free blocks, ``k`` steps are safe
        while at most ``F`` sequences have ``cap < k``."""
        bs, shared, free = self.lim.block_size, self.lim.shared_blocks, self.free[0]
        groups = self.lim.groups
        if self.lim.swa_window:  # as many steps as both pools allow (the window pool's frees ignored: a safe bound)
            swa_free = self.free[1]
            if swa_free < len(live):
                caps = [s.swa * bs - s.computed + max(0, s.computed - self.lim.swa_window + 1) // bs * bs
                        for s in live]
                caps.sort()
                return min(self._full_steps(live, bs, shared, free), max(1, caps[swa_free]))
            return min(self._full_steps(live, bs, shared, free), max(1, bs * (swa_free // len(live))))
        if groups is not None:  # a block boundary costs one block per group (the frees ignored: a safe bound)
            per = sum(n for _w, n in groups)
            if free >= len(live) * per:
                return max(1, bs * (free // (len(live) * per)))
            caps = [-(-(s.computed + 1) // bs) * bs - s.computed for s in live]
            caps.sort()
            return max(1, caps[free // per])
        return self._full_steps(live, bs, shared, free)

    @staticmethod
    def _full_steps(live: list[Seq], bs: int, shared: int, free: int) -> int:
        """:meth:`_block_steps` of a pool holding ``ceil(tokens / block_size)`` blocks a sequence."""
        if free >= len(live):
            return max(1, bs * (free // len(live)))
        caps = [(s.blocks + (shared if s.cached else 0)) * bs - s.computed for s in live]
        caps.sort()
        return max(1, caps[free])

    def _sample(self, s: Seq, end: float, tokens: int) -> None:
        s.generated += tokens
        if s.first_token < 0:
            s.first_token = end
        else:  # one streamed chunk after the first: its gap is an inter-token latency
            s.gaps.append(end - s.last_out)
        s.last_out = end
        if s.generated >= s.n_out or (self.prefill_only and s.generated >= 1):
            s.finish = end

    def _retire(self, end: float, done: list[Seq] | None = None) -> None:
        """Move finished (or handed-off) sequences out of the batch and free their blocks (called when one
        finished; ``done``: those that finished, in batch order, where the step collected them)."""
        if self.lim.kind != "static" and not self.prefill_only:  # no padding, no hand-off
            if done is None:
                done = [s for s in self.running if s.finish >= 0]
            for s in done:
                self.free[0] += s.blocks
                s.blocks = 0
                if s.swa:
                    self.free[1] += s.swa
                    s.swa = 0
            self.finished += done
            if len(done) < _REMOVE_ONE_BY_ONE:  # a few: found by identity in C, the others' order kept
                for s in done:
                    self.running.remove(s)
            else:
                self.running[:] = [s for s in self.running if s.finish < 0]
            return
        keep: list[Seq] = []
        for s in self.running:
            if s.finish < 0 or s.pad:
                keep.append(s)
                continue
            if self.lim.kind == "static" and not self.prefill_only:  # a prefill pool's batch hands over
                s.pad = True  # every request after its prompt: none stays as padding (nor carries the mark)
                keep.append(s)
            else:
                self.free[0] += s.blocks
                s.blocks = 0
                if s.swa:
                    self.free[1] += s.swa
                    s.swa = 0
            if self.prefill_only and s.generated < s.n_out:
                s.finish = -1.0
                self.handoffs.append((end, s))
            else:
                self.finished.append(s)
        if self.lim.kind == "static" and all(s.pad for s in keep):
            for s in keep:
                self.free[0] += s.blocks
                s.blocks = 0
            keep = []
        self.running[:] = keep

    def _account(self, start: float, end: float, steps: int, tokens: int, prefill: int, seqs: int,
                 energy: float) -> None:
        used = self.blocks - self.free[0]
        self.iterations.append(IterationRecord(self.id, start, end, steps, tokens, prefill, seqs, used, energy))
        self.busy_s += end - start
        self.energy_j += energy
        self.kv_block_seconds += used * (end - start)


def _advance(work: list[tuple[Seq, int]], end: float, prefill_only: bool) -> list[Seq]:
    """The sequences of an iteration ending at ``end`` advanced by their tokens, one sampled by each whose tokens
    are all computed (:meth:`Replica._sample`, inlined: the hot loop of a mixed batch); those that finished, in batch order."""
    done: list[Seq] = []
    for s, n in work:
        if s.pad:
            continue
        c = s.computed + n
        s.computed = c
        g = s.generated
        if c != s.n_in + g:
            continue
        g += 1
        s.generated = g
        if s.first_token < 0:
            s.first_token = end
        else:  # one streamed chunk after the first: its gap is an inter-token latency
            s.gaps.append(end - s.last_out)
        s.last_out = end
        if g >= s.n_out or prefill_only:
            s.finish = end
            done.append(s)
    return done


def _live(work: list[tuple[Seq, int]]) -> tuple[list[Seq], int, int, int]:
    """(the sequences of a decode batch that are not padding, the fewest tokens any of them has left to
    generate, the batch's summed context, its longest context) in one pass."""
    live: list[Seq] = []
    left = math.inf
    context = longest = 0
    for s, _ in work:
        context += s.computed
        if s.computed > longest:
            longest = s.computed
        if not s.pad:
            live.append(s)
            r = s.n_out - s.generated
            if r < left:
                left = r
    return live, left, context, longest  # type: ignore[return-value]


def _route(replicas: list[Replica], router: str, counter: int) -> Replica:
    if router == "least-loaded":
        return min(replicas, key=lambda r: (r.load, r.id))
    return replicas[counter % len(replicas)]


def run_loop(replicas: list[Replica], decode_pool: list[Replica], router: str, arrivals: list[tuple[float, int]],
             lengths: tuple[np.ndarray, np.ndarray], closed_loop: int, total: int, handoff_s: Any) -> list[Seq]:
    """The event loop (module docstring); returns every finished sequence."""
    ins, outs = lengths
    # (time, follow-up, order, request id, hand-off): a closed loop's follow-up sorts after a step at its time
    heap: list[tuple[float, int, int, int, Any]] = [(t, 0, i, i, None) for t, i in arrivals]
    heapq.heapify(heap)
    order = len(heap)
    issued = max((i for _, i in arrivals), default=-1) + 1  # the next request's id (after a warm-up: past it)
    # (time, woken by a follow-up, replica): a step that a follow-up started on an idle replica takes the other
    # follow-ups of its instant (they reach the waiting engine together)
    steps: list[tuple[float, int, int, int]] = []
    pools = replicas + decode_pool
    routed = 0
    finished: list[Seq] = []
    while heap or steps:
        ta = heap[0][0] if heap else math.inf
        if heap and (not steps or ta < steps[0][0] or (ta == steps[0][0] and (not heap[0][1] or steps[0][1]))):
            t, late, _, rid, seq = heapq.heappop(heap)
            if seq is None:
                seq = Seq(rid, t, int(ins[rid]), int(outs[rid]))
                target = _route(replicas, router, routed)
                routed += 1
            else:  # a disaggregated hand-off: the KV cache arrives at a decode replica
                target = _route(decode_pool, router, seq.id)
            seq.replica = target.id
            target.waiting.append(seq)
            if not target.busy:
                target.busy = True
                heapq.heappush(steps, (t, late, target.id, target.id))
            continue
        t, _, _, idx = heapq.heappop(steps)
        rep = pools[idx]
        end = rep.step(t, heap[0][0] if heap else math.inf)
        for s in rep.finished:
            finished.append(s)
            if closed_loop and issued < total:
                heapq.heappush(heap, (s.finish, 1, order, issued, None))
                order += 1
                issued += 1
        rep.finished.clear()
        for tf, s in rep.handoffs:
            heapq.heappush(heap, (tf + handoff_s(s), 0, order, s.id, s))
            order += 1
        rep.handoffs.clear()
        if end is None:
            rep.busy = False
            if rep.waiting:
                raise ServingError(f"replica {rep.id}: request {rep.waiting[0].id} ({rep.waiting[0].total} tokens) "
                                   "can never be scheduled; got a KV cache or token budget too small for it; expected "
                                   "more KV blocks or a larger --max-batched-tokens")
        else:
            heapq.heappush(steps, (end, 0, idx, idx))
    return finished


def check_router(name: str) -> str:
    if name not in ROUTERS:
        raise ServingError(f"router: unknown router {name!r}; got {name!r}; expected one of {', '.join(ROUTERS)}"
                           f"{did_you_mean(name, ROUTERS)}")
    return name
