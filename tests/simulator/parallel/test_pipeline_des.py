"""The discrete-event pipeline engine: devices, links and the data-parallel stream as resources.

Three kinds of check: timelines worked out by hand (comments give every interval); parity with the
closed form on real stage graphs where the closed form is exact (equal stages, sends counted in the
stage times, no data-parallel stream); and parity with an independent list-scheduling recurrence
on real, unequal stages, where the closed form is not exact.
"""

from __future__ import annotations

import functools

import pytest

from hwmodels.catalog import load_system
from simulator.engines.analytical import evaluate
from simulator.parallel.compose import (
    DDP_BUCKET_BYTES,
    DDP_FIRST_BUCKET_BYTES,
    _GraphCost,
    _split,
    evaluate_plan,
)
from simulator.parallel.pipeline_des import (
    Bucket,
    StageWork,
    device_order,
    simulate_pipeline,
    simulate_step,
)
from simulator.parallel.schedule import pipeline_time
from workloads.ir import Role
from workloads.parallel import ParallelPlan, plan_graphs

A100S = load_system("dgx-a100x8")  # 64 A100s: 8 DGX nodes over InfiniBand
H100S = load_system("dgx-h100")


# ------------------------------------------------------------------------------------------------
# hand-checked timelines


def test_first_stage_bottleneck_the_schedule_overlaps_fill_and_drain() -> None:
    # p = 2, m = 3, 1F1B; stage 0: f 2, b 4; stage 1: f 1, b 2.
    # S0: F0 [0,2] F1 [2,4]; S1: F0 [2,3] B0 [3,5]; S0: B0 [5,9] F2 [9,11]; S1: F1 [5,6] B1 [6,8];
    # S0: B1 [11,15]; S1: F2 [11,12] B2 [12,14]; S0: B2 [15,19] -> 19
    t = simulate_pipeline([[2.0], [1.0]], [[4.0], [2.0]], 3, "1f1b")
    assert t.step_s == 19.0
    # the analytical schedule runs the same order: 19, not the fill-and-drain bound 9 + (3 - 1) 6 = 21
    pt = pipeline_time([2.0, 1.0], [4.0, 2.0], 3)
    assert pt.step_s == 19.0 and pt.busy_s == 18.0 and pt.bubble_s == 1.0 and pt.bottleneck_stage == 0
    assert [p[3:] for p in t.passes[0]] == [(0, 2), (2, 4), (5, 9), (9, 11), (11, 15), (15, 19)]


def test_last_stage_bottleneck_the_closed_form_is_exact() -> None:
    # stage 0: f 1, b 2; stage 1 (the LM head): f 2, b 4.
    # S0: F0 [0,1] F1 [1,2]; S1: F0 [1,3] B0 [3,7]; S0: B0 [7,9] F2 [9,10]; S1: F1 [7,9] B1 [9,13];
    # S0: B1 [13,15]; S1: F2 [13,15] B2 [15,19]; S0: B2 [19,21] -> 21 = 9 + (3 - 1) 6
    t = simulate_pipeline([[1.0], [2.0]], [[2.0], [4.0]], 3, "1f1b")
    assert t.step_s == 21.0 == pipeline_time([1.0, 2.0], [2.0, 4.0], 3).step_s


def test_sends_occupy_the_link_not_the_device() -> None:
    # p = 2, m = 2, compute f 1, b 2 per stage, every send 0.5 on its link.
    # S0: F0 [0,1], send [1,1.5]; F1 [1,2], send [2,2.5]; S1: F0 [1.5,2.5] B0 [2.5,4.5], send back
    # [4.5,5]; F1 [4.5,5.5] B1 [5.5,7.5], send back [7.5,8]; S0: B0 [5,7] B1 [8,10] -> 10
    w = StageWork(forward_s=1.0, backward_s=2.0, send_forward_s=0.5, send_backward_s=0.5)
    t = simulate_step([[w], [w]], 2, "1f1b")
    assert t.step_s == 10.0
    assert [(s[0], s[3], s[4]) for s in t.sends] == [((0, 1), 1.0, 1.5), ((0, 1), 2.0, 2.5), ((1, 0), 4.5, 5.0),
                                                      ((1, 0), 7.5, 8.0)]
    # the closed form counts each transfer on both stages' critical path (a send and a receive):
    # f = b - 1 = 1.5 on both stages -> (2 + 2 - 1) 4 = 12
    assert pipeline_time([1.5, 1.5], [2.5, 2.5], 2).step_s == 12.0


def test_a_busy_link_queues_sends() -> None:
    # one stage sends faster than the link carries: forwards of 1 s, sends of 3 s
    # link: [1,4] [4,7] [7,10]; stage 1 runs each forward on arrival (backward 0): F2 at [10,11]
    w0, w1 = StageWork(1.0, 0.0, 3.0, 0.0), StageWork(1.0, 0.0, 0.0, 0.0)
    t = simulate_step([[w0], [w1]], 3, "gpipe")
    assert [(s[3], s[4]) for s in t.sends] == [(1.0, 4.0), (4.0, 7.0), (7.0, 10.0)]
    assert [p[3:] for p in t.passes[1] if p[0] == "F"] == [(4.0, 5.0), (7.0, 8.0), (10.0, 11.0)]


def test_gradient_buckets_overlap_the_backward_on_their_own_stream() -> None:
    # one device, m = 1: forward [0,1], backward [1,5]; buckets ready 1, 3, 4 s into the backward,
    # 1.5 s each: [2,3.5], [4,5.5], [5.5,7]; the update (0.5 s) after the last -> 7.5
    buckets = [Bucket(0, 1.0, 1.5), Bucket(0, 3.0, 1.5), Bucket(0, 4.0, 1.5)]
    t = simulate_step([[StageWork(1.0, 4.0)]], 1, buckets=[buckets], after_s=[0.5])
    assert t.syncs == (((2.0, 3.5), (4.0, 5.5), (5.5, 7.0)),)
    assert t.step_s == 7.5 and t.pipeline_s == 5.0
    # the closed form exposes max(last bucket, sync - backward) = max(1.5, 4.5 - 4) = 1.5 -> 7.0:
    # it assumes the first bucket is ready when the backward starts
    assert t.step_s - t.pipeline_s - 0.5 == 2.0 > 1.5


def test_only_the_last_backward_of_each_chunk_releases_buckets() -> None:
    # m = 3 microbatches on one device: backwards [3,5] [5,7] [7,9] (gpipe: all forwards first);
    # the bucket ready 1 s into the LAST backward to run (microbatch 0, [7,9]) syncs [8,10]
    t = simulate_step([[StageWork(1.0, 2.0)]], 3, "gpipe", buckets=[[Bucket(0, 1.0, 2.0)]])
    assert t.syncs == (((8.0, 10.0),),) and t.step_s == 10.0


def test_bad_work_is_a_located_error() -> None:
    with pytest.raises(ValueError, match=r"work\[1\]\[0\]\.backward_s: got -1\.0"):
        simulate_step([[StageWork(1.0, 1.0)], [StageWork(1.0, -1.0)]], 2)
    with pytest.raises(ValueError, match="buckets for 1 devices; expected 2"):
        simulate_step([[StageWork(1.0, 1.0)], [StageWork(1.0, 1.0)]], 2, buckets=[[]])
    with pytest.raises(ValueError, match="chunk 3; expected 0 .. 0"):
        simulate_step([[StageWork(1.0, 1.0)]], 2, buckets=[[Bucket(3, 0.0, 1.0)]])


# ------------------------------------------------------------------------------------------------
# real stage graphs: GPT-3 175B, tensor parallel 8, pipeline stages


@functools.lru_cache(maxsize=2)
def _gpt3_stages(v: int) -> list[tuple[object, object]]:
    """(stage graph, report) of every chunk of GPT-3 175B on 8 stages (``v`` chunks per device)."""
    plan = ParallelPlan(tp=8, pp=8, microbatch=1, global_batch=16, sequence_parallel=True,
                        schedule="interleaved" if v > 1 else "1f1b", interleave=v)
    graphs = plan_graphs("gpt3-175b", plan, train=True, seq=2048, recompute="selective")
    reports = {}
    out = []
    for sg in graphs:
        if id(sg.graph) not in reports:
            reports[id(sg.graph)] = evaluate(sg.graph, A100S)
        out.append((sg, reports[id(sg.graph)]))
    return out


@pytest.fixture(scope="module")
def gpt3_stages() -> list[tuple[object, object]]:
    return _gpt3_stages(2)


@pytest.mark.parametrize(("schedule", "p", "m"), [("gpipe", 4, 8), ("1f1b", 4, 8), ("1f1b", 8, 16),
                                                   ("interleaved", 4, 8), ("interleaved", 8, 16)])
def test_equal_real_stages_agree_with_the_closed_form_exactly(gpt3_stages, schedule: str, p: int, m: int) -> None:
    # a middle stage's chunk (6 layers of GPT-3 175B, tp 8, sequence parallel, on A100s) on every
    # device: the closed form's premise holds, and the simulation must reproduce it to rounding
    sg, rep = next((sg, rep) for sg, rep in gpt3_stages if 0 < sg.layers[0] and sg.layers[1] < 96)
    f, b, _, _ = _split(sg, rep.records)
    assert 0.02 < f < 0.2 and 1.5 < b / f < 3.5  # a real stage: tens of ms, backward about twice forward
    v = 2 if schedule == "interleaved" else 1
    t = simulate_pipeline([[f] * v] * p, [[b] * v] * p, m, schedule)
    c = pipeline_time([f * v] * p, [b * v] * p, m, schedule, v)
    assert t.step_s == pytest.approx(c.step_s, rel=1e-12)
    assert t.bubble_s == pytest.approx(c.bubble_s, rel=1e-9)


def _recurrence(work: list[list[StageWork]], m: int, schedule: str) -> float:
    """Step time by list scheduling, independent of SimPy: each pass starts when its device has
    finished the previous pass in its order and its input has crossed the link (no contention)."""
    p, v = len(work), len(work[0])
    chunks = p * v
    orders = [device_order(schedule, p, m, d, v) for d in range(p)]
    pos, free = [0] * p, [0.0] * p
    end: dict[tuple[str, int, int], float] = {}
    left = sum(len(o) for o in orders)
    while left:
        moved = False
        for d in range(p):
            while pos[d] < len(orders[d]):
                kind, i, c = orders[d][pos[d]]
                g = c * p + d
                if kind == "F":
                    dep = None if g == 0 else ("F", i, g - 1)
                else:
                    dep = ("F", i, g) if g == chunks - 1 else ("B", i, g + 1)
                if dep is not None and dep not in end:
                    break
                if dep is None:
                    ready = 0.0
                else:
                    sd, sc = dep[2] % p, dep[2] // p
                    ready = end[dep] + (0.0 if dep[0] == "F" and dep[2] == g else
                                        work[sd][sc].send_forward_s if dep[0] == "F" else work[sd][sc].send_backward_s)
                start = max(free[d], ready)
                free[d] = start + (work[d][c].forward_s if kind == "F" else work[d][c].backward_s)
                end[(kind, i, g)] = free[d]
                pos[d] += 1
                left -= 1
                moved = True
        assert moved, "the order deadlocked"
    return max(free)


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved", "gpipe"])
def test_unequal_real_stages_match_an_independent_recurrence(schedule: str) -> None:
    # the real plan: the embedding on the first chunk, the final norm, LM head and loss on the last,
    # the pipeline's sends on the links (InfiniBand between nodes)
    p, v, m = 8, (2 if schedule == "interleaved" else 1), 16
    rows: list[list[StageWork]] = [[] for _ in range(p)]
    for sg, rep in _gpt3_stages(v):
        gc = _GraphCost(sg, rep, _split(sg, rep.records))
        f, b, _, _ = gc.split
        fs, fr, bs, br = gc.links()
        rows[sg.stage].append(StageWork(f - fs - fr, b - bs - br, fs, bs))
    first, last = rows[0][0], rows[-1][-1]
    assert last.forward_s > rows[3][0].forward_s  # the LM head makes the last stage the longest
    t = simulate_step(rows, m, schedule)
    assert t.step_s == pytest.approx(_recurrence(rows, m, schedule), rel=1e-12)
    # and the closed form, which counts each send and receive on the stages, is not exact here
    closed = pipeline_time([sum(w.forward_s + w.send_forward_s for w in r) for r in rows],
                           [sum(w.backward_s + w.send_backward_s for w in r) for r in rows], m, schedule, v)
    assert t.step_s != pytest.approx(closed.step_s, rel=1e-6)
    assert first.send_backward_s == 0.0 and last.send_forward_s == 0.0  # nothing before the first, after the last


def test_gradient_buckets_of_a_real_stage_are_pytorch_ddps(gpt3_stages) -> None:
    sg, rep = next((sg, rep) for sg, rep in gpt3_stages if sg.layers[0] == 0)
    gc = _GraphCost(sg, rep, _split(sg, rep.records))
    buckets = gc.bucket_offsets()
    grads = [t for op in sg.graph.ops[sg.forward_ops:] for t in op.outputs if t.role is Role.GRADIENT]
    assert sum(nb for _, nb in buckets) == float(sg.graph.role_bytes(Role.GRADIENT))  # each gradient once
    ready = [r for r, _ in buckets]
    _, b, _, _ = gc.split
    fs, fr, bs, br = gc.links()
    assert ready == sorted(ready) and 0.0 < ready[0] and ready[-1] == pytest.approx(b - bs - br, rel=1e-12)
    # the same buckets as PyTorch's own assignment over these gradients in production order
    torch = pytest.importorskip("torch")
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not built in")
    metas = [torch.empty(t.numel, dtype=torch.bfloat16, device="meta") for t in grads]
    assert all(t.dtype.value == "bf16" for t in grads)
    groups, _ = dist._compute_bucket_assignment_by_size(metas, [DDP_FIRST_BUCKET_BYTES, DDP_BUCKET_BYTES])
    assert len(groups) == len(buckets) > 10
    assert [float(sum(grads[k].nbytes for k in g)) for g in groups] == [nb for _, nb in buckets]
    assert dist._DEFAULT_FIRST_BUCKET_BYTES == DDP_FIRST_BUCKET_BYTES


# ------------------------------------------------------------------------------------------------
# the engine inside evaluate_plan


def test_des_step_with_data_parallel_overlap_and_the_closed_form_beside_it() -> None:
    plan = ParallelPlan(tp=8, pp=4, dp=2, microbatch=1, global_batch=16, sequence_parallel=True)
    kw = {"train": True, "seq": 2048, "recompute": "selective"}
    a = evaluate_plan("gpt3-175b", A100S, plan, **kw)
    d = evaluate_plan("gpt3-175b", A100S, plan, engine="des", **kw)
    assert d.extra["closed_form_latency_s"] == a.latency_s
    assert d.engine == "des" and d.latency_s != a.latency_s
    assert d.latency_s == pytest.approx(a.latency_s, rel=0.05)  # same stage costs, different schedule model
    # the step ends with the worst device's update after its last bucket
    bd = d.breakdown
    assert bd["dp_sync_s"] > 0 and 0 <= bd["dp_sync_exposed_s"] <= bd["dp_sync_s"]
    assert d.latency_s >= d.pipeline.step_s + bd["optimizer_s"]
    assert [s.forward_s for s in d.stages] == [s.forward_s for s in a.stages]
    assert d.memory_per_device_bytes == a.memory_per_device_bytes


_PIPE = {"pp": 4, "dp": 2, "microbatch": 1, "global_batch": 16}  # 8 microbatches a rank: gradient accumulation


@pytest.mark.parametrize("schedule", ["1f1b", "interleaved"])
def test_des_prices_pipelined_fsdp2_as_the_closed_form(schedule: str) -> None:
    # NeMo AutoModel-like: FSDP2 under torch.distributed.pipelining, 4 stages, 8 microbatches. Both engines charge
    # each backward's float32 gradient accumulation on the compute stream and the whole float32 reduce-scatter
    # after the stage's last backward (compose._pipelined_fsdp); the simulation used to hide the reduce behind
    # the last backward and leave out the accumulation (36.6% under the closed form, 1f1b)
    plan = ParallelPlan(fsdp=True, schedule=schedule, interleave=2 if schedule == "interleaved" else 1, **_PIPE)
    kw = {"train": True, "seq": 512, "framework": "fsdp2"}
    a = evaluate_plan("llama-2-7b", H100S, plan, **kw)
    d = evaluate_plan("llama-2-7b", H100S, plan, engine="des", **kw)
    assert d.latency_s == pytest.approx(a.latency_s, rel=0.05)
    # the same passes on the compute stream, accumulation included
    assert d.breakdown["compute_s"] == pytest.approx(a.breakdown["compute_s"], rel=1e-12)
    # the reduce-scatter exposed in full, the same collective as the closed form's (stages differ by a head)
    assert d.breakdown["dp_sync_exposed_s"] == d.breakdown["dp_sync_s"] > 0.0
    assert d.breakdown["dp_sync_s"] == pytest.approx(a.breakdown["dp_sync_s"], rel=1e-4)
    assert d.latency_s - d.pipeline.step_s == pytest.approx(a.latency_s - a.pipeline.step_s, rel=1e-3)


def test_des_prices_a_megatron_distributed_optimizer_plan_as_the_closed_form() -> None:
    # Megatron-Core's distributed optimizer (ZeRO-1) under 1F1B: gradients reduce-scattered in buckets behind the
    # last backward, each parameter all-gathered once after the update (OpGraph.weight_bytes), no accumulation
    # pass of its own (gradient_accumulation_fusion: the weight-gradient GEMMs add into the float32 main_grad)
    plan = ParallelPlan(zero_stage=1, **_PIPE)
    kw = {"train": True, "seq": 512, "framework": "megatron-core"}
    a = evaluate_plan("llama-2-7b", H100S, plan, **kw)
    d = evaluate_plan("llama-2-7b", H100S, plan, engine="des", **kw)
    assert d.latency_s == pytest.approx(a.latency_s, rel=0.05)
    assert d.breakdown["compute_s"] == pytest.approx(a.breakdown["compute_s"], rel=1e-12)
    assert 0.0 < d.breakdown["dp_sync_exposed_s"] < d.breakdown["dp_sync_s"]  # buckets behind the last backward


def test_des_single_stage_data_parallel_bucket_chain_by_hand() -> None:
    # pp 1, dp 2: one pass per microbatch; the step ends when the bucket chain released by the last
    # backward (end_k = max(end_k-1, ready_k) + sync_k) and then the update have run
    plan = ParallelPlan(dp=2, microbatch=1, global_batch=4)
    d = evaluate_plan("gpt3-125m", A100S, plan, train=True, seq=1024, engine="des")
    sg = plan_graphs("gpt3-125m", plan, train=True, seq=1024)[0]
    rep = evaluate(sg.graph, A100S)
    gc = _GraphCost(sg, rep, _split(sg, rep.records))
    f, b, o, _ = gc.split
    from simulator.parallel.compose import _collective_times

    coll = _collective_times([("all_reduce", nb) for _, nb in gc.bucket_offsets()], 2, A100S, 1)
    b_start = 2 * (f + b) - b  # gpipe-free single stage: F0 B0 F1 B1; the last backward starts here
    end = 0.0
    for ready, nb in gc.bucket_offsets():
        end = max(end, b_start + ready) + coll[("all_reduce", nb)]
    assert d.latency_s == pytest.approx(max(end, 2 * (f + b)) + o, rel=1e-12)


def test_inference_through_stages_counts_each_hand_off_once() -> None:
    # one batch through 4 stages: the closed form charges every transfer twice (the send on one
    # stage, the receive on the next); the simulation once, on the link
    plan = ParallelPlan(tp=8, pp=4)
    a = evaluate_plan("gpt3-175b", A100S, plan, phase="prefill", seq=512, batch=2)
    d = evaluate_plan("gpt3-175b", A100S, plan, phase="prefill", seq=512, batch=2, engine="des")
    recvs = 0.0
    for k, rep in enumerate(a.reports):
        recvs += sum(r.time_s for r in rep.records if r.kind == "recv")
        sends = sum(r.time_s for r in rep.records if r.kind == "send")
        assert sends == 0.0 if k == 3 else sends > 0.0  # the last stage sends nothing
    assert recvs > 0
    assert d.latency_s == pytest.approx(a.latency_s - recvs, rel=1e-12)
    assert d.extra["closed_form_latency_s"] == a.latency_s


@pytest.mark.parametrize(("schedule", "p", "m", "v"), [("gpipe", 4, 8, 1), ("1f1b", 4, 8, 1), ("1f1b", 4, 2, 1),
                                                       ("interleaved", 4, 16, 2), ("interleaved", 4, 16, 4)])
def test_activations_in_flight_follow_the_schedule(schedule: str, p: int, m: int, v: int) -> None:
    from simulator.parallel.schedule import in_flight

    t = simulate_pipeline([[1.0 / v] * v] * p, [[2.0 / v] * v] * p, m, schedule)
    got = [t.peak_in_flight(d) for d in range(p)]
    if schedule != "interleaved" or v == 2:
        assert got == pytest.approx(list(in_flight(schedule, p, m, v)), rel=1e-12)
    else:
        # stage s warms up with 2 (p - s - 1) + (v - 1) p chunk forwards and runs one more before
        # its first backward: p + (p - 2 s - 1)/v devices' worth; the closed form's
        # (p - s) + (p - 1)/v (Korthikanti et al. 2022) is that figure on the first stage only
        assert got == pytest.approx([p + (p - 2 * s - 1) / v for s in range(p)], rel=1e-12)
        assert got[0] == pytest.approx(in_flight(schedule, p, m, v)[0], rel=1e-12)
