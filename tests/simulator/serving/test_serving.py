"""The serving simulator: trickle agreement with `predict --phase generate`, overload, determinism, the KV
block arithmetic and the scheduler's token budget by hand, arrival statistics, located errors."""

from __future__ import annotations

import json
from collections import deque

import numpy as np
import pytest

from simulator.serving import ServeConfig, ServingError, simulate_serving
from simulator.serving.arrivals import (
    arrival_times,
    client_arrival_times,
    parse_arrival,
    read_trace,
)
from simulator.serving.iteration import bucket, bucket_bounds
from simulator.serving.kvcache import kv_cache_spec
from simulator.serving.lengths import parse_lengths, sample_lengths
from simulator.serving.metrics import parse_slo
from simulator.serving.scheduler import Limits, Seq, plan_iteration
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

MODEL, HW = "llama-2-7b", "h100-sxm5-80gb"


def test_a_trickle_agrees_with_generate_request():
    """One request at a time (one closed-loop client): TTFT and TPOT are the generate prediction's."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import generate_request
    from simulator.serving.setup import _options

    cfg = ServeConfig(arrival="concurrency:n=1", lengths="fixed:in=700,out=96", requests=3)
    r = simulate_serving(MODEL, HW, cfg)
    opts, _ = _options(cfg, None)
    ref = generate_request(MODEL, load_hardware(HW), ParallelPlan(), opts, input_len=700, output_len=96)
    s = r.summary
    assert s["ttft_s"]["mean"] == pytest.approx(ref.extra["ttft_s"], rel=0.02)
    assert s["tpot_s"]["mean"] == pytest.approx(ref.extra["tpot_s"], rel=0.02)
    assert s["ttft_s"]["max"] == pytest.approx(s["ttft_s"]["p50"], rel=1e-9)  # every request alone
    assert s["preemptions"] == 0


def test_a_trickle_agrees_with_generate_request_on_sliding_window_layers():
    """Gemma 3 (40 local layers of window 1024, 8 global): past the window the local layers' attention
    reads only their window, in `serve` as in `predict` (before, every layer read the whole context:
    TTFT and TPOT 5% slow at 6,000 tokens)."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import generate_request
    from simulator.serving.setup import _options

    cfg = ServeConfig(arrival="concurrency:n=1", lengths="fixed:in=6000,out=32", requests=2)
    r = simulate_serving("gemma3-12b", HW, cfg)
    opts, _ = _options(cfg, None)
    ref = generate_request("gemma3-12b", load_hardware(HW), ParallelPlan(), opts, input_len=6000, output_len=32)
    assert r.summary["ttft_s"]["mean"] == pytest.approx(ref.extra["ttft_s"], rel=0.02)
    assert r.summary["tpot_s"]["mean"] == pytest.approx(ref.extra["tpot_s"], rel=0.02)


def test_overload_saturates_throughput_and_grows_the_tail():
    rates = (2, 8, 32, 128)
    runs = [simulate_serving(MODEL, HW, ServeConfig(arrival=f"poisson:qps={q}", lengths="fixed:in=1024,out=256",
                                                    requests=600, seed=1)).summary for q in rates]
    thr = [s["output_tokens_per_s"] for s in runs]
    p99 = [s["e2e_s"]["p99"] for s in runs]
    assert all(b > a for a, b in zip(p99, p99[1:], strict=False)), p99
    assert thr[1] > 3 * thr[0]  # below saturation throughput follows the load
    assert thr[3] < 1.5 * thr[2]  # past saturation it does not
    assert runs[3]["ttft_s"]["p99"] > 10 * runs[0]["ttft_s"]["p99"]


def test_same_seed_same_bytes_other_seed_other_result():
    cfg = ServeConfig(arrival="gamma:qps=20,cv=3", lengths="uniform:in=100-900,out=20-200", requests=200, seed=7)
    a = json.dumps(simulate_serving(MODEL, HW, cfg).summary, sort_keys=True)
    b = json.dumps(simulate_serving(MODEL, HW, cfg).summary, sort_keys=True)
    assert a == b
    c = simulate_serving(MODEL, HW, ServeConfig(**{**cfg.to_json(), "slo": (), "seed": 8})).summary
    assert json.dumps(c, sort_keys=True) != a


def test_kv_block_arithmetic_by_hand():
    cfg = zoo_config("llama-2-7b")  # 32 layers, 32 KV heads of 128
    kv = kv_cache_spec(cfg, ParallelPlan(), capacity_bytes=80e9, weights_bytes=13.5e9, activations_bytes=0.5e9,
                       block_size=16, gpu_memory_utilization=0.9, dtype="bf16")
    per_block = 16 * 2 * 32 * 32 * 128 * 2  # tokens x (K, V) x layers x heads x dim x bytes = 8 MiB
    assert kv.bytes_per_block == per_block
    assert kv.blocks == int((72e9 - 13.5e9 - 0.5e9) // per_block) == 6914
    tp2 = kv_cache_spec(cfg, ParallelPlan(tp=2), capacity_bytes=80e9, weights_bytes=13.5e9, activations_bytes=0.5e9,
                        block_size=16, gpu_memory_utilization=0.9, dtype="bf16")
    assert tp2.bytes_per_block == per_block / 2 and tp2.blocks == 2 * 6914
    with pytest.raises(ServingError, match="no block fits"):
        kv_cache_spec(cfg, ParallelPlan(), capacity_bytes=16e9, weights_bytes=13.5e9, activations_bytes=1e9,
                      block_size=16, gpu_memory_utilization=0.9, dtype="bf16")


def _seq(i: int, n_in: int, n_out: int, computed: int = 0, generated: int = 0, blocks: int = 0) -> Seq:
    s = Seq(i, 0.0, n_in, n_out)
    s.computed, s.generated, s.blocks = computed, generated, blocks
    return s


def test_vllm_token_budget_on_a_tiny_scenario():
    """Budget 10, blocks of 4: two decodes (1 token each) first, then 8 of a 20-token prompt (chunked)."""
    lim = Limits("vllm", max_num_seqs=4, budget=10, block_size=4, shared_blocks=0, swap=False)
    d1 = _seq(0, 6, 10, computed=7, generated=2, blocks=2)  # 8 tokens, the 8th not yet computed: fits 2 blocks
    d2 = _seq(1, 8, 10, computed=8, generated=1, blocks=2)  # the 9th token needs a 3rd block
    new = _seq(2, 20, 5)
    running, waiting, free = [d1, d2], deque([new]), [5]
    plan = plan_iteration(running, waiting, free, lim)
    assert [(s.id, n) for s, n in plan.work] == [(0, 1), (1, 1), (2, 8)]
    assert (d1.blocks, d2.blocks, new.blocks) == (2, 3, 2)
    assert free == [5 - 1 - 2]
    assert running == [d1, d2, new] and not waiting
    # orca prefills whole prompts: the 20-token prompt waits for a budget that holds it
    lim_o = Limits("orca", max_num_seqs=4, budget=10, block_size=4, shared_blocks=0, swap=False)
    d1b = _seq(0, 6, 10, computed=7, generated=2, blocks=2)
    plan = plan_iteration([d1b], deque([_seq(2, 20, 5)]), [5], lim_o)
    assert [(s.id, n) for s, n in plan.work] == [(0, 1)]


def test_recompute_preemption_takes_the_last_admitted():
    lim = Limits("vllm", max_num_seqs=8, budget=64, block_size=4, shared_blocks=0, swap=False)
    a = _seq(0, 8, 10, computed=8, generated=1, blocks=2)  # needs a 3rd block
    b = _seq(1, 8, 10, computed=7, generated=1, blocks=2)
    running, waiting, free = [a, b], deque(), [0]
    plan = plan_iteration(running, waiting, free, lim)
    assert plan.preempted == [b] and b.computed == 0 and b.blocks == 0 and b.preemptions == 1
    assert [(s.id, n) for s, n in plan.work] == [(0, 1)] and a.blocks == 3 and free == [1]


def test_poisson_arrivals_count_and_mean_for_a_seed():
    spec = parse_arrival("poisson:qps=8")
    t = arrival_times(spec, np.random.default_rng(0), count=20000)
    gaps = np.diff(np.concatenate([[0.0], t]))
    assert gaps.mean() == pytest.approx(1 / 8, rel=0.02)
    assert gaps.std() == pytest.approx(1 / 8, rel=0.03)  # exponential: sd = mean
    window = arrival_times(spec, np.random.default_rng(0), duration_s=1000.0)
    assert abs(len(window) - 8000) < 5 * np.sqrt(8000) and window.max() < 1000.0
    g = arrival_times(parse_arrival("gamma:qps=8,cv=3"), np.random.default_rng(0), count=20000)
    gg = np.diff(np.concatenate([[0.0], g]))
    assert gg.mean() == pytest.approx(1 / 8, rel=0.1) and gg.std() / gg.mean() == pytest.approx(3, rel=0.15)


def test_client_arrivals_are_the_benchmark_clients_draws():
    # np.random.seed(0); np.random.exponential(1.0) three times: 0.79587451, 1.25593076, 0.92322315 (NumPy's legacy
    # generator); the client sends the first request at once and sleeps one gap after each
    t = client_arrival_times(parse_arrival("poisson:qps=1"), 0, count=4)
    assert t.tolist() == pytest.approx([0.0, 0.79587451, 0.79587451 + 1.25593076, 0.79587451 + 1.25593076 + 0.92322315])
    half = client_arrival_times(parse_arrival("poisson:qps=2"), 0, count=2)
    assert half.tolist() == pytest.approx([0.0, 0.79587451 / 2])
    window = client_arrival_times(parse_arrival("poisson:qps=1"), 0, duration_s=2.5)
    assert window.tolist() == pytest.approx(t[:3].tolist())
    r = simulate_serving(MODEL, HW, ServeConfig(arrival="poisson:qps=1", requests=3, arrival_seed=0))
    assert [q.arrival_s for q in r.requests] == pytest.approx(t[:3].tolist())
    with pytest.raises(ServingError, match=r"arrival_seed: got -1; expected an integer in \[0, 2\*\*32\) or None"):
        simulate_serving(MODEL, HW, ServeConfig(requests=2, arrival_seed=-1))


def test_buckets():
    assert [bucket(x) for x in (1, 16, 17, 18, 31, 32, 33, 100, 1000)] == [1, 16, 16, 18, 30, 32, 32, 96, 960]
    assert bucket_bounds(17) == (16, 18) and bucket_bounds(96) == (96, 96) and bucket_bounds(0.5) == (0, 1)


def test_lengths_and_slos_parse():
    assert sample_lengths(parse_lengths("fixed:in=5,out=3"), 2, np.random.default_rng(0))[0].tolist() == [5, 5]
    ins, outs = sample_lengths(parse_lengths("uniform:in=10-20,out=1-4"), 1000, np.random.default_rng(0))
    assert ins.min() >= 10 and ins.max() <= 20 and outs.min() >= 1 and outs.max() <= 4
    ln = parse_lengths("lognormal:in_mean=600,in_sigma=0.8,out_mean=200,out_sigma=0.5")
    ins, outs = sample_lengths(ln, 50000, np.random.default_rng(0))
    assert ins.mean() == pytest.approx(600, rel=0.03) and outs.mean() == pytest.approx(200, rel=0.03)
    assert parse_slo("ttft_p99<=2 s") == ("ttft", "p99", 2.0)
    assert parse_slo("tpot_p90 <= 100 ms") == ("tpot", "p90", pytest.approx(0.1))


@pytest.mark.parametrize(("kw", "match"), [
    ({"arrival": "poisson:qps=0"}, r"arrival: qps: got '0'; expected a positive"),
    ({"arrival": "poisson:qps=-3"}, r"arrival: qps: got '-3'"),
    ({"arrival": "poison:qps=3"}, r"did you mean 'poisson'"),
    ({"scheduler": "vlm"}, r"scheduler: unknown scheduler 'vlm'.*did you mean 'vllm'"),
    ({"router": "least_loaded"}, r"did you mean 'least-loaded'"),
    ({"slo": ("ttf_p99<=2 s",)}, r"slo: unknown metric 'ttf'.*did you mean 'ttft'"),
    ({"lengths": "fixed:in=5000,out=10"}, r"request 0: 5000 prompt \+ 10 output tokens.*context of 4096"),
    # 0.17 x 79.18 GiB (the H100's runtime total) leaves less than one 2010-token request's blocks
    ({"lengths": "fixed:in=2000,out=10", "gpu_memory_utilization": 0.17}, r"KV"),
])
def test_bad_settings_are_located(kw, match):
    with pytest.raises(ServingError, match=match):
        simulate_serving(MODEL, HW, ServeConfig(requests=2, **kw))


def test_traces_azure_columns_and_located_problems(tmp_path):
    f = tmp_path / "azure.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.1805900,396,109\n", encoding="utf-8")
    t, ins, outs = read_trace(str(f))
    assert t.tolist() == pytest.approx([0.0, 3.5]) and ins.tolist() == [374, 396] and outs.tolist() == [44, 109]
    r = simulate_serving(MODEL, HW, ServeConfig(arrival=f"trace:{f}"))
    assert r.summary["requests"] == 2 and r.requests[1].arrival_s == pytest.approx(3.5)
    bad = tmp_path / "unsorted.csv"
    bad.write_text("arrival_s,input_len,output_len\n0,10,10\n2,10,10\n1,10,10\n", encoding="utf-8")
    with pytest.raises(ServingError, match=r"unsorted.csv:4: arrival_s: unsorted trace"):
        read_trace(str(bad))
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_s,input_len,output_len\n", encoding="utf-8")
    with pytest.raises(ServingError, match=r"empty.csv:2: empty trace"):
        read_trace(str(empty))


def test_replicas_schedulers_and_outputs():
    base = dict(arrival="poisson:qps=40", lengths="fixed:in=512,out=64", requests=300)
    one = simulate_serving(MODEL, HW, ServeConfig(**base)).summary
    two = simulate_serving(MODEL, HW, ServeConfig(**base, replicas=2, router="least-loaded"))
    assert two.summary["devices"] == 2 and {r.replica for r in two.requests} == {0, 1}
    assert two.summary["ttft_s"]["p99"] <= one["ttft_s"]["p99"]
    static = simulate_serving(MODEL, HW, ServeConfig(**base, scheduler="static", max_num_seqs=16)).summary
    assert static["e2e_s"]["p99"] > one["e2e_s"]["p99"]
    for sched in ("sarathi", "orca"):
        s = simulate_serving(MODEL, HW, ServeConfig(**base, scheduler=sched)).summary
        assert s["requests"] == 300 and s["output_tokens"] == 300 * 64
    csv_rows = two.requests_csv().splitlines()
    assert csv_rows[0].startswith("id,arrival_s,input_len") and len(csv_rows) == 301
    assert len(two.chrome_trace()["traceEvents"]) == len(two.iterations)
    for key in ("ttft_s", "tpot_s", "e2e_s", "output_tokens_per_s", "requests_per_s", "goodput_requests_per_s",
                "slo_attainment", "kv_cache_utilization", "preemptions", "batch_tokens", "energy_j",
                "energy_per_token_j", "cost"):
        assert key in one, key
    assert set(one["ttft_s"]) == {"p50", "p90", "p99", "mean", "max"}
    assert one["cost"]["usd_per_million_tokens"] > 0 and one["cost"]["priced_by"]


def test_prefix_cache_and_disaggregation():
    base = dict(arrival="poisson:qps=20", lengths="fixed:in=1024,out=32,prefix=512", requests=200)
    off = simulate_serving(MODEL, HW, ServeConfig(**base)).summary
    on = simulate_serving(MODEL, HW, ServeConfig(**base, prefix_cache=True))
    assert on.summary["ttft_s"]["p50"] < off["ttft_s"]["p50"]
    assert {r.cached_tokens for r in on.requests} == {512}
    dis = simulate_serving(MODEL, "dgx-h100", ServeConfig(**base, disaggregate="prefill=1,decode=1"))
    assert dis.summary["requests"] == 200 and dis.summary["devices"] == 2
    assert {r.replica for r in dis.requests} == {1}  # every request ends on the decode replica


def test_static_batching_in_disaggregated_pools_runs_every_request():
    """Static batching in both pools: the prefill replica hands each request over after its prompt and the decode
    replica's static batch decodes it. The hand-off had kept the prompt batch's padding mark, so the decode
    replica skipped the request: 0 of 6 requests finished and the summary printed TTFT 0 s. One request at a
    time (a closed loop of one client), static and continuous batching run the same iterations."""
    base = dict(arrival="concurrency:n=1", lengths="fixed:in=512,out=32", requests=6, disaggregate="prefill=1,decode=1")
    st = simulate_serving(MODEL, "dgx-h100", ServeConfig(**base, scheduler="static"))
    vl = simulate_serving(MODEL, "dgx-h100", ServeConfig(**base))
    assert st.summary["requests"] == 6 and st.summary["output_tokens"] == 6 * 32
    assert {r.replica for r in st.requests} == {1}
    for key in ("ttft_s", "tpot_s", "e2e_s"):
        assert st.summary[key] == pytest.approx(vl.summary[key], rel=1e-9), key


def test_speculative_decoding_divides_the_step_by_the_expected_accepted_tokens():
    """One request at a time: TPOT x E = one speculative step (target verifying k + 1 tokens plus k draft
    steps), E = (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, Eq. 1)."""
    from simulator.hardware import load_hardware
    from simulator.serving.iteration import IterationPricer
    from simulator.serving.setup import _options

    base = dict(arrival="concurrency:n=1", lengths="fixed:in=256,out=401", requests=2)
    cfg = ServeConfig(**base, speculative="gpt3-125m,k=4,accept=0.7")
    r = simulate_serving("gpt3-6.7b", HW, cfg).summary
    gain = (1 - 0.7**5) / (1 - 0.7)
    opts, _ = _options(cfg, None)
    hw = load_hardware(HW)
    target = IterationPricer("gpt3-6.7b", hw, ParallelPlan(), opts)
    draft = IterationPricer("gpt3-125m", hw, ParallelPlan(), opts)
    mid = 256 + 200
    step = target.iteration([], 1, mid, 1, verify=5)[0] + draft.draft_steps(1, mid, 4)[0]
    assert r["tpot_s"]["mean"] * gain == pytest.approx(step, rel=0.03)
    plain = simulate_serving("gpt3-6.7b", HW, ServeConfig(**base)).summary
    assert r["tpot_s"]["mean"] < plain["tpot_s"]["mean"]
    none = simulate_serving("gpt3-6.7b", HW, ServeConfig(**base, speculative="gpt3-125m,k=4,accept=0")).summary
    assert none["tpot_s"]["mean"] > plain["tpot_s"]["mean"]  # every draft token rejected: pure overhead


def test_decode_run_block_room_by_hand():
    """Blocks of 4, one free block: sequences with room for 1, 3 and 4 more tokens can all take 3 steps
    (only the first needs the free block); with 6 free blocks each can take 4 x (6 // 3) = 8."""
    from simulator.serving.engine import Replica

    lim = Limits("vllm", max_num_seqs=8, budget=64, block_size=4, shared_blocks=0, swap=False)
    rep = Replica(0, lim, blocks=10, pricer=None)
    live = [_seq(0, 8, 50, computed=7, generated=1, blocks=2), _seq(1, 5, 50, computed=5, generated=1, blocks=2),
            _seq(2, 4, 50, computed=4, generated=1, blocks=2)]
    rep.free = [1]
    assert rep._block_steps(live) == 3
    rep.free = [6]
    assert rep._block_steps(live) == 8
