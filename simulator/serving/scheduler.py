"""Engine schedulers: which requests run in the next iteration, how many tokens each, who is preempted.

One iteration is planned from a replica's state (:class:`Replica`): its running sequences (in the
order they were admitted) and its waiting queue (first come, first served). Every sequence keeps
``computed`` (tokens whose KV is in the cache) and ``total`` (prompt plus tokens generated so far):
an iteration gives it ``min(total - computed, budget left)`` tokens, and a sequence whose tokens are
all computed after the iteration samples one new token. A prompt is thus a prefill (possibly in
chunks), each later token a decode step, and a preempted sequence (recompute) prefills its prompt and
its generated tokens again, as vLLM's V1 scheduler does it.

Schedulers (:data:`SCHEDULERS`):

* ``vllm``: vLLM V1 (``vllm/v1/core/sched/scheduler.py``): running requests first (decodes and
  unfinished prefill chunks), then waiting ones while the token budget ``max_num_batched_tokens``,
  ``max_num_seqs`` and free KV blocks allow; a prompt longer than the budget left is chunked (chunked
  prefill is always on in V1). When a running request cannot get a block, the last admitted running
  request is preempted (its blocks freed, back to the head of the queue).
* ``sarathi``: Sarathi-Serve's stall-free batching (Agrawal et al., OSDI 2024, Sec. 4): the same
  order (decodes, ongoing prefills, new prefills) with a token budget of one chunk (``--chunk``).
* ``orca``: Orca's iteration-level scheduling (Yu et al., OSDI 2022): decodes and new requests join
  every iteration, but a prompt is prefilled whole (admitted only when it fits the budget left). TensorRT-LLM
  without context chunking runs the same (``cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp``
  ``MicroBatchScheduler::operator()``: generation requests one token each, then whole contexts in arrival
  order, stopping at the first whose tokens would pass ``max_num_tokens``).
* ``static``: a batch of up to ``max_num_seqs`` waiting requests is formed when the replica is idle,
  prefilled together and decoded until its longest request finishes; nothing joins it meanwhile and
  finished requests keep their slot (padding), as request-level batching engines run.

Two options of the older engines (:class:`Limits`):

* ``mixed=False`` (prompts run alone): an iteration that admits waiting prompts carries only those
  prompts; the running decodes wait for the next iteration. vLLM V0's default scheduler
  (``vllm/core/scheduler.py`` ``Scheduler._schedule_default``: prefills are scheduled first and, when any
  is, no decode joins that step) and SGLang up to v0.3 (``python/sglang/srt/managers/tp_worker.py``
  ``ModelTpServer.forward_step``: a new prefill batch runs on its own, the running batch decodes in the
  next steps) work this way.
* ``steps=N`` (vLLM 0.6's multi-step scheduling, ``--num-scheduler-steps N``): a decode-only batch is
  scheduled once and runs N decode steps back to back (``vllm/engine/llm_engine.py``: the scheduler
  output is cached while ``remaining_steps > 0``; ``_has_remaining_steps`` requires every sequence of
  the batch to have the same remaining steps), so a prompt arriving meanwhile waits for the block to
  end; each decode reserves ``N - 1`` look-ahead KV slots (``SchedulerConfig.num_lookahead_slots =
  num_scheduler_steps - 1``), and a sequence that finishes inside the block keeps its slot until the
  block ends, when its tokens are handed over (``engine.Replica._decode_run``). Prompts run one step (``Scheduler._schedule_prefills``: ``init_multi_step(
  num_scheduler_steps=_get_num_lookahead_slots(is_prefill=True) + 1)``, 0 look-ahead slots for a
  prefill without chunking).

Admission policies (:data:`ADMISSIONS`, ``ServeConfig.admission``), the two capacity-scheduler
policies of TensorRT-LLM (``cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp``;
``executor::CapacitySchedulerPolicy``):

* ``max-utilization`` (default; ``MaxUtilizationScheduler``): a waiting request is admitted when the
  blocks of the tokens it runs in this iteration are free; a running request that cannot get its next
  block preempts the last admitted running one (``schedulingRemoveSequence`` of the last started
  request; vLLM's rule above).
* ``no-evict`` (``GuaranteedNoEvictScheduler``, TensorRT-LLM's default and ``trtllm-bench
  throughput``'s ``--scheduler_policy guaranteed_no_evict``): running requests are kept and their
  blocks to completion (``NoEvictScheduledBlocksManager.decrementReservedBlocks``) are subtracted
  first; waiting requests are then taken in order while the blocks of their whole prompt and
  ``max_tokens`` output (``enoughAvailableBlocks``) fit in what is left, stopping at the first that does
  not. A request's blocks to completion are taken at admission (its ``blocks``), so no running request
  ever needs a block it cannot get and nothing is preempted; ``kv_cache_utilization`` then counts the
  reserved blocks as used.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from typing import Any

from simulator.serving.kvcache import blocks_for, held_blocks

__all__ = ["ADMISSIONS", "APPLIED_LIMITS", "EngineDefaults", "SCHEDULERS", "Seq", "Plan", "applied_limits",
           "engine_defaults", "longest_decode", "plan_iteration", "tally"]


@dataclass(frozen=True)
class EngineDefaults:
    """An engine's default limits and where they come from."""

    name: str
    chunked: bool
    max_num_seqs: int
    max_batched_tokens: int
    max_num_seqs_small: int
    max_batched_tokens_small: int
    chunk: int
    source: str


_VLLM_SRC = ("vLLM V1 defaults, vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (OpenAI API server usage "
             "context): max_num_batched_tokens 8192 and max_num_seqs 1024 on devices with >= 70 GiB that are not "
             "A100s, else 2048 and 256; CacheConfig.block_size 16; gpu_memory_utilization 0.9")
_SARATHI_SRC = ("Agrawal et al., 'Taming Throughput-Latency Tradeoff in LLM Inference with Sarathi-Serve', OSDI 2024: "
                "token budgets of 512 (strict) and 2048 (relaxed) tokens per iteration; 512 taken as the default")
_ORCA_SRC = ("Yu et al., 'Orca: A Distributed Serving System for Transformer-Based Generative Models', OSDI 2022: "
             "iteration-level scheduling, whole prompts (no chunking); limits as vLLM's")
_STATIC_SRC = "request-level batching (FasterTransformer-style): limits as vLLM's"

#: Scheduler name -> its defaults.
SCHEDULERS: dict[str, EngineDefaults] = {
    "vllm": EngineDefaults("vllm", True, 1024, 8192, 256, 2048, 0, _VLLM_SRC),
    "sarathi": EngineDefaults("sarathi", True, 1024, 512, 256, 512, 512, _SARATHI_SRC),
    "orca": EngineDefaults("orca", False, 1024, 8192, 256, 2048, 0, _ORCA_SRC),
    "static": EngineDefaults("static", False, 1024, 8192, 256, 2048, 0, _STATIC_SRC),
}

#: The limits each scheduler applies (read from :func:`plan_iteration`): the iteration-level schedulers admit while
#: ``max_num_seqs``, the token budget ``max_batched_tokens`` (Sarathi-Serve's: its ``chunk``) and the blocks allow,
#: with ``scheduler_steps``, ``mixed_prefill`` and ``admission``; ``static`` (:func:`_plan_static`) forms a batch of up
#: to ``max_num_seqs`` whole requests, each reserving the blocks of its prompt and output, with no token budget, one
#: step per pass, no preemption and no admission policy.
_ITERATION_LIMITS = ("max_num_seqs", "max_batched_tokens", "block_size", "scheduler_steps", "mixed_prefill", "admission")
APPLIED_LIMITS: dict[str, tuple[str, ...]] = {
    "vllm": _ITERATION_LIMITS, "sarathi": (*_ITERATION_LIMITS, "chunk"), "orca": _ITERATION_LIMITS,
    "static": ("max_num_seqs", "block_size")}


def applied_limits(limits: dict[str, Any], scheduler: str) -> dict[str, Any]:
    """``limits`` (a run's, keys as :data:`APPLIED_LIMITS`) with every limit ``scheduler`` does not apply set to None.

    >>> applied_limits({"max_num_seqs": 256, "max_batched_tokens": 2048, "block_size": 16, "chunk": None}, "static")
    {'max_num_seqs': 256, 'max_batched_tokens': None, 'block_size': 16, 'chunk': None}
    """
    used = APPLIED_LIMITS[scheduler]
    return {k: (v if k in used else None) for k, v in limits.items()}


#: Admission policies (module docstring); the first is the default.
ADMISSIONS = ("max-utilization", "no-evict")

#: vLLM's threshold for the larger defaults: devices with at least 70 GiB (A100s excluded).
LARGE_DEVICE_BYTES = 70 * 2**30


def engine_defaults(name: str, device: Any) -> tuple[int, int, int]:
    """(max_num_seqs, max_batched_tokens, chunk) of scheduler ``name`` on ``device`` (vLLM's rule)."""
    d = SCHEDULERS[name]
    cap = float(device.memory[0].usable)
    large = cap >= LARGE_DEVICE_BYTES and "a100" not in str(device.name).lower()
    seqs = d.max_num_seqs if large else d.max_num_seqs_small
    tokens = d.max_batched_tokens if large else d.max_batched_tokens_small
    return seqs, tokens, d.chunk


class Seq:
    """A request inside a replica (mutable simulation state)."""

    __slots__ = ("id", "arrival", "n_in", "n_out", "computed", "generated", "blocks", "first_token", "finish",
                 "preemptions", "cached", "replica", "swapped", "pad", "credit", "lag", "last_out", "gaps", "swa")

    def __init__(self, rid: int, arrival: float, n_in: int, n_out: int) -> None:
        self.id, self.arrival, self.n_in, self.n_out = rid, arrival, n_in, n_out
        self.computed = 0
        self.generated = 0
        self.blocks = 0
        #: blocks held in a second, window-layer pool (SGLang's SWA pool, ``Limits.swa_window``); 0 without one
        self.swa = 0
        self.first_token = -1.0
        self.finish = -1.0
        self.preemptions = 0
        self.cached = 0
        self.replica = 0
        self.swapped = False
        self.pad = False
        self.credit = 0.0
        #: seconds between the engine sampling a token and the client receiving it (ServeConfig's stack)
        self.lag = 0.0
        #: when the engine last handed tokens of this request over (its latest streamed chunk)
        self.last_out = -1.0
        #: the gaps between its consecutive chunks after the first, seconds (the client's inter-token latencies)
        self.gaps = array("d")

    @property
    def total(self) -> int:
        return self.n_in + self.generated


@dataclass
class Plan:
    """One planned iteration: (sequence, tokens) pairs, the sequences preempted, blocks swapped in / out."""

    work: list[tuple[Seq, int]]
    preempted: list[Seq]
    swap_in_blocks: int = 0
    swap_out_blocks: int = 0
    #: every item is one decode token of a sequence past its prefill (nothing admitted or preempted)
    decode_only: bool = False
    #: :func:`tally` of ``work`` where the scheduler counted it on the way (None: not counted)
    tally: tuple[list[tuple[int, int]], int, int, int, int] | None = None
    #: the items' summed context (tokens computed) and fewest tokens any has left to generate (a decode-only
    #: plan's, counted on the way; None: not counted)
    context: int | None = None
    fewest: int | None = None
    #: the longest context of its decodes (:func:`longest_decode`; None: not counted)
    longest: int | None = None


class Limits:
    """The limits of one replica's scheduler."""

    __slots__ = ("kind", "max_num_seqs", "budget", "block_size", "shared_blocks", "swap", "lookahead", "steps",
                 "mixed", "no_evict", "groups", "shared_pool", "swa_window")

    def __init__(self, kind: str, max_num_seqs: int, budget: int, block_size: int, shared_blocks: int,
                 swap: bool, lookahead: int = 0, steps: int = 1, mixed: bool = True, no_evict: bool = False,
                 groups: tuple[tuple[int, int], ...] | None = None, swa_window: int = 0) -> None:
        self.kind, self.max_num_seqs, self.budget = kind, max_num_seqs, budget
        self.block_size, self.shared_blocks, self.swap = block_size, shared_blocks, swap
        #: speculative decoding: a decode reserves budget and KV slots for this many draft tokens more
        #: (vLLM's num_lookahead_slots)
        self.lookahead = lookahead
        #: decode steps per scheduling pass (vLLM 0.6 ``--num-scheduler-steps``; module docstring)
        self.steps = steps
        #: False: prompts are admitted in an iteration of their own (module docstring)
        self.mixed = mixed
        #: True: admission ``no-evict`` (a request holds the blocks of its whole output from admission)
        self.no_evict = no_evict
        #: the KV cache's layer groups (:func:`simulator.serving.kvcache.held_blocks`) when sliding-window
        #: layers hold fewer blocks than global ones (vLLM's hybrid manager); None: ``ceil(tokens / block_size)``
        self.groups = groups if groups and groups != ((0, 1),) else None
        #: the shared prefix's blocks in the pool: ``shared_blocks`` per full-attention group and at most the
        #: blocks of its window per window group (a window layer's prefix hit keeps the blocks its window reads)
        self.shared_pool = shared_blocks if self.groups is None else sum(
            n * (min(shared_blocks, -(-(w - 1) // block_size)) if w else shared_blocks) for w, n in self.groups)

        #: the window of a second pool that holds the sliding-window layers' tokens (SGLang's SWA pool,
        #: layout ``sglang-swa``): a request holds :meth:`held_swa` blocks there besides its full-pool blocks
        #: (``free[1]``); 0: no such pool
        self.swa_window = swa_window

    def held_swa(self, tokens: int, computed: int) -> int:
        """Window-pool blocks a request holds (``swa_window`` set): its blocks less those wholly before the
        window of its computed tokens (:func:`simulator.serving.kvcache.held_blocks` of one window group)."""
        return held_blocks(tokens, computed, self.block_size, ((self.swa_window, 1),))

    def held(self, tokens: int, computed: int) -> int:
        """Pool blocks a request holds with slots for ``tokens`` tokens, ``computed`` of them computed."""
        if self.groups is None:
            return -(-tokens // self.block_size)
        return held_blocks(tokens, computed, self.block_size, self.groups)


def own_blocks(seq: Seq, tokens: int, lim: Limits) -> int:
    """Blocks ``seq`` holds for ``tokens`` tokens, less the shared prefix blocks it reuses."""
    if lim.groups is not None:  # a request admitted anew has nothing of its window skipped yet
        return max(0, lim.held(tokens, seq.computed) - (lim.shared_pool if seq.cached else 0))
    return max(0, blocks_for(tokens, lim.block_size) - (lim.shared_blocks if seq.cached else 0))


def reserve_tokens(seq: Seq, lim: Limits) -> int:
    """Tokens whose blocks a request holds from admission under ``no-evict``: its prompt, its whole output
    and the look-ahead slots of its last decode (speculative drafts, multi-step)."""
    return seq.n_in + seq.n_out + lim.lookahead + lim.steps - 1


def plan_iteration(running: list[Seq], waiting: Any, free: list[int], lim: Limits) -> Plan:
    """Plan the next iteration (module docstring); ``free`` is ``[free blocks]`` (``[free blocks, free window-pool
    blocks]`` with ``lim.swa_window``), updated in place, and
    ``running`` / ``waiting`` are updated in place (admissions, preemptions)."""
    if lim.kind == "static":
        return _plan_static(running, waiting, free, lim)
    if not lim.mixed and waiting:
        alone: list[tuple[Seq, int]] = []
        _budget, swap_in = _admit(running, waiting, free, lim, alone, lim.budget)
        if alone:
            return Plan(alone, [], swap_in)
    work: list[tuple[Seq, int]] = []
    preempted: list[Seq] = []
    budget, swap_out, decode_only, counts = _schedule_running(running, free, lim, work, preempted)
    swap_in = 0
    chunks, dec, dec_ctx, sampled, prefill, context, fewest, longest = counts
    if not preempted:
        before = len(work)
        budget, swap_in = _admit(running, waiting, free, lim, work, budget)
        if len(work) > before:
            decode_only = False
            more = tally(work[before:])
            chunks += more[0]
            dec, dec_ctx, sampled, prefill = dec + more[1], dec_ctx + more[2], sampled + more[3], prefill + more[4]
            longest = max(longest, longest_decode(work[before:]))
    return Plan(work, preempted, swap_in, swap_out, decode_only and not preempted and len(work) == len(running),
                (chunks, dec, dec_ctx, sampled, prefill), context, fewest, longest)


def tally(work: list[tuple[Seq, int]]) -> tuple[list[tuple[int, int]], int, int, int, int]:
    """(prefill chunks as (tokens, earlier context), decodes, their summed context, sequences sampling, prefill
    tokens) of an iteration's ``work``: a decode is one token of a sequence past its prompt with nothing else
    left to compute, a chunk anything else; a sequence samples when its tokens are all computed after it."""
    chunks: list[tuple[int, int]] = []
    dec = dec_ctx = sampled = prefill_tokens = 0
    for s, n in work:
        c = s.computed
        total = s.n_in + s.generated
        if n == 1 and c == total - 1 and s.generated:
            dec += 1
            dec_ctx += c
        else:
            chunks.append((n, c))
            prefill_tokens += n
        if c + n == total:
            sampled += 1
    return chunks, dec, dec_ctx, sampled, prefill_tokens


def longest_decode(work: list[tuple[Seq, int]]) -> int:
    """The longest context (tokens computed) of an iteration's decodes (:func:`tally`'s rule: one token of a
    sequence past its prompt with nothing else left to compute); 0 without decodes."""
    longest = 0
    for s, n in work:
        if n == 1:
            c = s.computed
            if c > longest and s.generated and c == s.n_in + s.generated - 1:
                longest = c
    return longest


def _schedule_running(running: list[Seq], free: list[int], lim: Limits, work: list[tuple[Seq, int]],
                      preempted: list[Seq]) -> tuple[int, int, bool, tuple]:
    """The running sequences' tokens, in admission order, while the budget lasts (each given its blocks, the
    last admitted preempted while one cannot get them; module docstring): (budget left, blocks swapped out,
    whether every scheduled item is a decode token, the items' :func:`tally`, summed context, fewest tokens
    left to generate and longest decode context, counted on the way). A cache of ``ceil(tokens / block_size)``
    blocks a sequence (no window groups, no window pool) takes :func:`_schedule_plain`."""
    if lim.groups is None and not lim.swa_window:
        return _schedule_plain(running, free, lim, work, preempted)
    budget = lim.budget
    swap_out = 0
    bs, lookahead, hybrid = lim.block_size, lim.lookahead, lim.groups
    shared = lim.shared_blocks if hybrid is None else lim.shared_pool
    ahead = 1 + lookahead + lim.steps - 1  # a decode's token and look-ahead slots: speculative drafts, multi-step
    decode_only = True
    append = work.append
    chunks: list[tuple[int, int]] = []
    dec = dec_ctx = sampled = prefill = context = longest = 0
    fewest = 1 << 62
    f = free[0]
    sw = lim.swa_window
    for s in running:  # a preemption pops from the end: the iteration stops before what it popped
        if budget <= 0:
            break
        g = s.generated
        c = s.computed
        n = rest = s.n_in + g - c
        if n > budget:
            n = budget
        if n == 1 and g:
            extra = lookahead
            need = (-(-(c + ahead) // bs) if hybrid is None else lim.held(c + ahead, c)) - s.blocks
        else:
            decode_only = False
            extra = 0
            need = (-(-(c + n) // bs) if hybrid is None else lim.held(c + n, c)) - s.blocks
        if s.cached:
            need -= shared
        if need < 0 and hybrid is not None and not lim.no_evict:  # window blocks left behind: freed
            f -= need
            s.blocks += need
        need2 = 0
        if sw:  # the window pool: its blocks behind the window freed, the new ones taken
            need2 = lim.held_swa(c + (ahead if n == 1 and g else n), c) - s.swa
            if need2 < 0 and not lim.no_evict:
                free[1] -= need2
                s.swa += need2
                need2 = 0
        if need > f or (need2 > 0 and need2 > free[1]):
            free[0] = f
            out, gone = _make_room(running, s, need, need2, free, lim, preempted)
            swap_out += out
            f = free[0]
            if gone:
                break
        if need2 > 0:
            free[1] -= need2
            s.swa += need2
        if need > 0:
            f -= need
            s.blocks += need
        append((s, n))
        budget -= n + extra
        context += c
        if s.n_out - g < fewest:
            fewest = s.n_out - g
        if rest == 1 and g:  # :func:`tally`'s decode
            dec += 1
            dec_ctx += c
            sampled += 1
            if c > longest:
                longest = c
        else:
            chunks.append((n, c))
            prefill += n
            if n == rest:
                sampled += 1
    free[0] = f
    return budget, swap_out, decode_only, (chunks, dec, dec_ctx, sampled, prefill, context, fewest, longest)


def _schedule_plain(running: list[Seq], free: list[int], lim: Limits, work: list[tuple[Seq, int]],
                    preempted: list[Seq]) -> tuple[int, int, bool, tuple]:
    """:func:`_schedule_running` of a cache of ``ceil(tokens / block_size)`` blocks a sequence (the same items,
    blocks, preemptions and counts): a decode, the item of almost every step of a long run, takes a short path
    (its one token and look-ahead slots), every other item :func:`_plain_item`."""
    budget = lim.budget
    swap_out = 0
    bs, shared = lim.block_size, lim.shared_blocks
    ahead = lim.lookahead + lim.steps + bs - 1  # a decode's token and look-ahead slots, + bs - 1: ceil by floor
    step = 1 + lim.lookahead
    decode_only = True
    append = work.append
    chunks: list[tuple[int, int]] = []
    dec_ctx = sampled = prefill = context = longest = 0
    fewest = 1 << 62
    f = free[0]
    for s in running:  # a preemption pops from the end: the iteration stops before what it popped
        if budget <= 0:
            break
        g = s.generated
        c = s.computed
        if g and s.n_in + g - c == 1:  # a decode (:func:`tally`'s): one token, its look-ahead slots reserved
            need = (c + ahead) // bs - s.blocks
            if shared and s.cached:
                need -= shared
            if need > f:
                free[0] = f
                out, gone = _make_room(running, s, need, 0, free, lim, preempted)
                swap_out += out
                f = free[0]
                if gone:
                    break
            if need > 0:
                f -= need
                s.blocks += need
            append((s, 1))
            budget -= step
            dec_ctx += c
            if c > longest:
                longest = c
            if s.n_out - g < fewest:
                fewest = s.n_out - g
            continue
        free[0] = f
        n, extra, out = _plain_item(running, s, budget, free, lim, preempted)
        f = free[0]
        swap_out += out
        if n < 0:  # preempted itself
            break
        if not (n == 1 and g):
            decode_only = False
        append((s, n))
        budget -= n + extra
        if s.n_out - g < fewest:
            fewest = s.n_out - g
        context += c
        chunks.append((n, c))
        prefill += n
        if n == s.n_in + g - c:
            sampled += 1
    free[0] = f
    dec = len(work) - len(chunks)
    return budget, swap_out, decode_only, (chunks, dec, dec_ctx, sampled + dec, prefill, context + dec_ctx, fewest,
                                           longest)


def _plain_item(running: list[Seq], s: Seq, budget: int, free: list[int], lim: Limits, preempted: list[Seq]
                ) -> tuple[int, int, int]:
    """A running sequence's item that is not a decode (a prompt chunk or a recompute) in :func:`_schedule_plain`,
    its blocks taken: (tokens, look-ahead slots reserved, blocks swapped out); tokens -1 when it was preempted."""
    g, c = s.generated, s.computed
    rest = s.n_in + g - c
    n = rest if rest <= budget else budget
    if n == 1 and g:  # one token of a longer recompute (the budget's last): look-ahead slots reserved as a decode's
        extra = lim.lookahead
        need = -(-(c + lim.lookahead + lim.steps) // lim.block_size) - s.blocks
    else:
        extra = 0
        need = -(-(c + n) // lim.block_size) - s.blocks
    if s.cached:
        need -= lim.shared_blocks
    out = 0
    if need > free[0]:
        out, gone = _make_room(running, s, need, 0, free, lim, preempted)
        if gone:
            return -1, 0, out
    if need > 0:
        free[0] -= need
        s.blocks += need
    return n, extra, out


def _make_room(running: list[Seq], s: Seq, need: int, need2: int, free: list[int], lim: Limits,
               preempted: list[Seq]) -> tuple[int, bool]:
    """Preempt the last admitted running sequences until ``s`` gets its ``need`` blocks (``need2`` of the window
    pool) or is preempted itself: (blocks swapped out, whether ``s`` was)."""
    out = 0
    while need > free[0] or (need2 > 0 and need2 > free[1]):
        victim = running.pop()  # the last admitted: lowest priority
        out += _preempt(victim, free, lim)
        preempted.append(victim)
        if victim is s:
            break
    return out, preempted[-1] is s


def _preempt(victim: Seq, free: list[int], lim: Limits) -> int:
    """Free ``victim``'s blocks (recompute: forget its KV; swap: keep it in host memory); blocks swapped out."""
    free[0] += victim.blocks
    if lim.swa_window:
        free[1] += victim.swa
        victim.swa = 0
    victim.preemptions += 1
    out = 0
    if lim.swap and victim.computed > 0:
        victim.swapped, out = True, victim.blocks
    else:
        victim.computed = 0
        victim.cached = 0
    victim.blocks = 0
    return out


def _admit(running: list[Seq], waiting: Any, free: list[int], lim: Limits, work: list[tuple[Seq, int]],
           budget: int) -> tuple[int, int]:
    """Admit waiting requests in order while the budget, the sequence limit and the blocks allow."""
    swap_in = 0
    while waiting and budget > 0 and len(running) < lim.max_num_seqs:
        s = waiting[0]
        if s.computed == 0 and lim.shared_blocks and not s.swapped:
            s.cached = 1
            s.computed = lim.shared_blocks * lim.block_size
        left = s.total - s.computed
        if lim.kind == "orca" and left > budget and work:
            break
        n = min(left, budget) if lim.kind != "orca" else left
        if s.swapped:
            n = min(left, budget)
        need = own_blocks(s, reserve_tokens(s, lim) if lim.no_evict else s.computed + n, lim)
        need2 = lim.held_swa(reserve_tokens(s, lim) if lim.no_evict else s.computed + n, s.computed) \
            if lim.swa_window else 0
        if need > free[0] or need2 > free[1 if lim.swa_window else 0]:
            if s.cached and not s.swapped and s.blocks == 0:
                s.cached, s.computed = 0, 0
            break
        waiting.popleft()
        free[0] -= need
        if need2:
            free[1] -= need2
            s.swa = need2
        if s.swapped:
            swap_in += need
            s.swapped = False
        s.blocks = need
        running.append(s)
        work.append((s, n))
        budget -= n
    return budget, swap_in


def _plan_static(running: list[Seq], waiting: Any, free: list[int], lim: Limits) -> Plan:
    """Static batching: a new batch only when the last one is done; its requests reserve every block
    they will need (prompt and output) when it forms."""
    if any(not s.pad for s in running):  # the batch still has an unfinished request
        return Plan([(s, 1) for s in running], [], decode_only=True)
    running.clear()
    work: list[tuple[Seq, int]] = []
    while waiting and len(running) < lim.max_num_seqs:
        s = waiting[0]
        need = lim.held(s.n_in + s.n_out, 0)
        if need > free[0]:
            break
        waiting.popleft()
        free[0] -= need
        s.blocks = need
        running.append(s)
        work.append((s, s.total - s.computed))  # its prompt; one token for one handed over after its prompt
    return Plan(work, [])
