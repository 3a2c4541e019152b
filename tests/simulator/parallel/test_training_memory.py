"""Training memory as the allocator sees it: activation stash per layer against Korthikanti et al. 2022,
named recomputation policies, and the fit verdict of every published training run that ran."""

from __future__ import annotations

import csv
import dataclasses

import pytest

from simulator.parallel import validation as V
from simulator.parallel.compose import _stash_bytes, evaluate_plan
from workloads.parallel import ParallelPlan, PlanError, plan_graphs
from workloads.zoo.transformer import zoo_config


def _per_layer_stash(model: str, policy: str, seq: int = 512) -> float:
    """Stash bytes one more layer adds, over s b h (b = 1)."""
    cfg = zoo_config(model)
    out = []
    for n in (3, 4):
        sg = plan_graphs(dataclasses.replace(cfg, layers=n), ParallelPlan(), train=True, seq=seq,
                         recompute=policy)[0]
        out.append(_stash_bytes(sg))
    return (out[1] - out[0]) / (seq * cfg.d_model)


# Korthikanti et al. 2022, Table 2: sbh(34 + 5as/h) bytes per layer without recomputation, of which
# 2 sbh are the two dropout masks and 5as^2b the softmax output, its dropout mask and output; the zoo's
# GPT layer has no dropout and a fused (flash) attention that keeps no s x s tensor: 32 sbh. Full
# recomputation keeps the layer input, 2 sbh. The 34 sbh of selective recomputation are the same
# 32 sbh without dropout (the recomputed core is what held the as^2 terms).
@pytest.mark.parametrize("policy, expected", [("none", 32.0), ("selective", 32.0), ("full", 2.0),
                                              # torchtitan op-SAC: input 2, wq 2, wv 2, sdpa 2, w1 (4h) 8
                                              ("selective-op", 16.0),
                                              # MaxText minimal: input 2, qkv 6, out 2, mlpwi 8, mlpwo 2
                                              ("minimal", 20.0), ("save_dot_except_mlp", 10.0),
                                              ("save_qkv_proj", 8.0), ("save_out_proj", 4.0)])
def test_gpt_layer_stash_matches_korthikanti_table2(policy: str, expected: float) -> None:
    assert _per_layer_stash("megatron-gpt-22b", policy) == pytest.approx(expected, abs=1e-9)


def test_llama_selective_op_keeps_what_torchtitan_saves() -> None:
    # Llama 3 8B, h 4096, GQA 8 x 128 = 1024, MLP 14336: input 2, wq 2, wv 0.5, sdpa out 2,
    # w1 2 x 14336/4096 = 7, w2 2 -> 15.5 sbh; without recomputation 43.5 sbh
    assert _per_layer_stash("llama-3-8b", "selective-op") == pytest.approx(15.5)
    assert _per_layer_stash("llama-3-8b", "none") == pytest.approx(43.5)


def test_offloaded_policy_moves_the_projections_to_the_host() -> None:
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    from simulator.hardware import load_hardware

    hw = load_hardware("dgx-h100")
    on = evaluate_plan("llama-3-8b", hw, plan, train=True, seq=2048, recompute="save_qkv_proj")
    off = evaluate_plan("llama-3-8b", hw, plan, train=True, seq=2048, recompute="qkv_proj_offloaded")
    b_on, b_off = on.to_json()["memory_breakdown"], off.to_json()["memory_breakdown"]
    # q, k, v projections: (4096 + 1024 + 1024) x 2 bytes x 2048 tokens x 32 layers
    qkv = 6144 * 2 * 2048 * 32
    assert b_off["offloaded_to_host"] == pytest.approx(qkv)
    assert b_on["activations"] - b_off["activations"] == pytest.approx(qkv)


def test_breakdown_sums_to_the_memory_per_device() -> None:
    from simulator.hardware import load_hardware

    res = evaluate_plan("llama-3-8b", load_hardware("dgx-h100"), ParallelPlan(dp=8, fsdp=True, microbatch=2,
                        global_batch=16), train=True, seq=8192, recompute="selective-op")
    j = res.to_json()
    b = j["memory_breakdown"]
    parts = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "buffers", "reserve")
    assert sum(b[k] for k in parts) == pytest.approx(j["memory_per_device_bytes"])
    # FSDP2 mixed precision: fp32 sharded parameters, fp32 sharded gradients, fp32 moments
    assert b["parameters"] == pytest.approx(4 * 8030261248 / 8)
    assert b["optimizer"] == pytest.approx(8 * 8030261248 / 8)
    assert j["fits_in_memory"] is True


def _published_training_plans() -> list[tuple[str, str, ParallelPlan, int, str, str]]:
    """(id, model, plan, seq, recompute, system) of every training row of published_multi.csv whose
    plan and recomputation are stated (rows without them: NeMo's performance tables, which leave the
    recomputation and the optimizer sharding unstated, are not checked)."""
    out = []
    with open(V.DEFAULT_MULTI_DATASET, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            if r["category"] != "train":
                continue
            system, why = V._model_and_system(r)
            tp, pp, mb, gb, seq, n = (V._int(r[k]) for k in ("tp", "pp", "microbatch", "global_batch", "seq",
                                                             "n_devices"))
            if why or None in (tp, pp, mb, gb, seq, n) or not r["recompute"]:
                continue
            cp = V._int(r["cp"]) or 1
            dp = V._int(r["dp"]) or n // (tp * pp * cp)
            plan = ParallelPlan(tp=tp, pp=pp, dp=dp, cp=cp, microbatch=mb, global_batch=gb,
                                sequence_parallel=r["sp"].strip() == "1")
            out.append((r["id"], r["model"], plan, seq, r["recompute"], system))
    return out


def test_every_published_training_run_is_predicted_to_fit() -> None:
    from simulator.hardware import load_hardware

    rows = _published_training_plans()
    assert len(rows) == 14
    failed = []
    for rid, model, plan, seq, rec, system in rows:
        try:
            res = evaluate_plan(model, load_hardware(system), plan, train=True, seq=seq, recompute=rec)
        except PlanError:
            continue
        if not res.fits_in_memory:
            failed.append(f"{rid}: {res.memory_message()}")
    assert not failed, "\n".join(failed)


def _dgx() -> object:
    from simulator.hardware import load_hardware

    return load_hardware("dgx-h100")


def test_hybrid_sharding_shards_states_within_the_group() -> None:
    full = evaluate_plan("llama-2-7b", _dgx(), ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8),
                         train=True, seq=512, recompute="full").to_json()["memory_breakdown"]
    hsdp = evaluate_plan("llama-2-7b", _dgx(), ParallelPlan(dp=8, fsdp=True, shard_group=2, microbatch=1,
                                                            global_batch=8),
                         train=True, seq=512, recompute="full").to_json()["memory_breakdown"]
    for k in ("parameters", "gradients", "optimizer"):
        assert hsdp[k] == pytest.approx(4 * full[k])
    assert hsdp["activations"] == full["activations"]


def test_offloading_moves_memory_to_the_host_and_prices_the_link() -> None:
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=2, global_batch=16)
    base = evaluate_plan("llama-3-8b", _dgx(), plan, train=True, seq=4096, recompute="selective-op")
    opt = evaluate_plan("llama-3-8b", _dgx(), dataclasses.replace(plan, offload=("optimizer",)), train=True,
                        seq=4096, recompute="selective-op")
    b0, b1 = base.to_json()["memory_breakdown"], opt.to_json()["memory_breakdown"]
    assert b1["optimizer"] == 0.0 and b1["offloaded_to_host"] == b0["optimizer"]
    # gradients out and parameters back over PCIe 5.0 x16 (63 GB/s per direction), not hidden
    moved = b0["gradients"] + b0["parameters"]
    assert opt.breakdown["offload_exposed_s"] == pytest.approx(moved / 63e9)
    assert opt.latency_s == pytest.approx(base.latency_s + moved / 63e9)
    act = evaluate_plan("llama-3-8b", _dgx(), dataclasses.replace(plan, offload=("activations",)), train=True,
                        seq=4096, recompute="selective-op").to_json()["memory_breakdown"]
    assert act["activations"] < b0["activations"] and act["offloaded_to_host"] > 0


def test_offloaded_parameters_come_in_before_each_gather_and_gradients_go_out_per_microbatch() -> None:
    """FSDP2 ``CPUOffloadPolicy``: the host shard is copied in before every forward and backward all-gather and
    each reduce-scatter's gradient shard copied out (torch/distributed/fsdp/_fully_shard); no copy after the step."""
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=16)  # 2 microbatches
    base = evaluate_plan("llama-2-7b", _dgx(), plan, train=True, seq=256)
    res = evaluate_plan("llama-2-7b", _dgx(), dataclasses.replace(plan, offload=("optimizer", "params")),
                        train=True, seq=256)
    b0, st = base.to_json()["memory_breakdown"], res.stages[0]
    b1 = st.memory_breakdown()
    assert b1["parameters"] == b1["gradients"] == b1["optimizer"] == 0.0
    assert b1["offloaded_to_host"] == pytest.approx(b0["parameters"] + b0["gradients"] + b0["optimizer"])
    p, g = b0["parameters"] / 63e9, b0["gradients"] / 63e9  # PCIe 5.0 x16, 63 GB/s per direction
    # forward: the shard in (nothing out); backward: the shard in, the gradient out, each direction on its own
    per_mb = max(0.0, p - st.forward_s) + max(0.0, max(p, g) - st.backward_s)
    assert p > st.forward_s  # 6.7e9 / 8 x 4 bytes at 63 GB/s is 53 ms: a 256-token forward does not hide it
    assert res.breakdown["offload_exposed_s"] == pytest.approx(2 * per_mb)
    once = evaluate_plan("llama-2-7b", _dgx(), dataclasses.replace(plan, offload=("params",), grad_sync_per_step=True),
                         train=True, seq=256)
    s1 = once.stages[0]
    assert once.breakdown["offload_exposed_s"] == pytest.approx(
        2 * (max(0.0, p - s1.forward_s) + max(0.0, p - s1.backward_s)) + g)
    opt = evaluate_plan("llama-2-7b", _dgx(), dataclasses.replace(plan, offload=("optimizer",)), train=True, seq=256)
    assert opt.breakdown["offload_exposed_s"] == pytest.approx(p + g)  # ZeRO-Offload: out and back once per step


def test_fp8_linears_cast_each_gemm_operand_and_keep_the_rest() -> None:
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    g = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears="tensorwise")[0].graph
    fp8 = [op for op in g.ops if op.attrs.get("compute_dtype") == "fp8_e4m3"]
    # 4 linear layers (qkv, out, gate_up, down) x 2 layers x 3 GEMMs (forward, input and weight gradient)
    assert len(fp8) == 24
    assert all(op.group.startswith("layers.") for op in fp8)  # the LM head stays 16-bit
    casts = [op for op in g.ops if op.name.rsplit(".", 1)[-1].startswith("cast_")]
    amax = [op for op in g.ops if op.name.rsplit(".", 1)[-1].startswith("amax_")]
    # two operands per GEMM, less the input-gradient GEMMs' weight (the forward's fp8 weight is saved): 48 - 8
    assert len(casts) == len(amax) == 2 * 24 - 8
    delayed = plan_graphs(cfg, ParallelPlan(), train=True, seq=256, fp8_linears="delayed")[0].graph
    assert not any(".amax_" in op.name for op in delayed.ops)


def test_fp8_linears_is_faster_on_an_h100_and_delayed_caches_fp8_weights() -> None:
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    bf16 = evaluate_plan("llama-3-8b", _dgx(), plan, train=True, seq=4096, recompute="full")
    tw = evaluate_plan("llama-3-8b", _dgx(), plan, train=True, seq=4096, recompute="full", fp8_linears="tensorwise")
    te = evaluate_plan("llama-3-8b", _dgx(), plan, train=True, seq=4096, recompute="full", fp8_linears="delayed")
    assert tw.latency_s < bf16.latency_s and te.latency_s < tw.latency_s
    # 32 layers x (4096 x 6144 + 4096 x 4096 + 4096 x 28672 + 14336 x 4096) linear parameters, 2 bytes each
    linear = 32 * (4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096)
    assert te.to_json()["memory_breakdown"]["buffers.fp8_weight_cache"] == 2 * linear


def test_compile_profile_builds_every_stage() -> None:
    plan = ParallelPlan(tp=2, pp=2, dp=2, microbatch=1, global_batch=4)
    g = plan_graphs("llama-3-8b", plan, train=True, seq=512, framework="compile")
    assert {sg.graph.meta.get("framework") for sg in g} == {"compile"}


def test_capacity_factor_sizes_the_expert_buffers() -> None:
    from workloads.zoo.transformer import moe_capacity

    plan = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=8)
    for cf, rows in ((1.0, 1024), (1.25, 1280)):
        g = plan_graphs("mixtral-8x7b", dataclasses.replace(plan, capacity_factor=cf), train=True, seq=512)[0].graph
        up = next(op for op in g.ops if op.kind == "grouped_matmul")
        # one expert per device: its buffer gathers ceil(cf x 512 tokens x top-2 / 8 experts) rows from 8 ranks
        assert up.inputs[0].shape[1] == rows == 8 * moe_capacity(512, 8, 2, cf)


# torchtitan docs/performance.md (pytorch/torchtitan @ 041336434916bdc0f88c1f89fda176fd3c2092e4): FSDP2 on
# 64 A100 80GB, Llama 3 at seq 8192 and Llama 2 at 4096, runs that ran and one that failed: "the 70B training
# with local batch size 2 will cause an OOM error when selective activation checkpointing is used" (footnote 1);
# and the later version of the page: Llama 3.1 405B on 128 H100s, "We do see OOM for 1D parallelism (FSDP2),
# so we only tested 2D parallelism (FSDP2 + Tensor Parallel)", local batch 2, full AC (checked on 80 GB
# H100s, the catalog's: a run over 80 GB would also exceed the 94 GB board only if it is above 94 GB, and
# the 2D run fits the smaller card).
TORCHTITAN_RUNS = [
    ("llama-3-8b", "dgx-a100x8", 64, 1, 1, 8192, "selective-op", True),
    ("llama-3-70b", "dgx-a100x8", 64, 1, 1, 8192, "full", True),
    ("llama-2-13b", "dgx-a100x8", 64, 1, 2, 4096, "none", True),
    ("llama-2-13b", "dgx-a100x8", 64, 1, 2, 4096, "selective-op", True),
    ("llama-2-70b", "dgx-a100x8", 64, 1, 1, 4096, "selective-op", True),
    ("llama-2-70b", "dgx-a100x8", 64, 1, 2, 4096, "full", True),
    ("llama-2-70b", "dgx-a100x8", 64, 1, 2, 4096, "selective-op", False),
    ("llama-3.1-405b", "dgx-h100x16", 128, 1, 2, 8192, "full", False),
    ("llama-3.1-405b", "dgx-h100x16", 16, 8, 2, 8192, "full", True),
]


@pytest.mark.parametrize("model, system, dp, tp, lbs, seq, policy, ran", TORCHTITAN_RUNS)
def test_torchtitan_runs_fit_and_its_oom_does_not(model: str, system: str, dp: int, tp: int, lbs: int, seq: int,
                                                  policy: str, ran: bool) -> None:
    from simulator.hardware import load_hardware

    plan = ParallelPlan(tp=tp, dp=dp, fsdp=True, sequence_parallel=tp > 1, microbatch=lbs, global_batch=lbs * dp)
    res = evaluate_plan(model, load_hardware(system), plan, train=True, seq=seq, recompute=policy)
    assert res.fits_in_memory is ran, res.memory_message()


def test_distributed_optimizer_shards_experts_over_the_expert_data_parallel_group() -> None:
    """ZeRO-1 with ep = dp: the dense states shard over the 8 data-parallel ranks, the experts' over
    dp / ep = 1 rank (Megatron-Core's expert-data-parallel group): the optimizer bytes are
    (1 - f) x O / 8 + f x O for the experts' share f of the parameters, O the unsharded optimizer state."""
    from simulator.parallel.compose import _expert_share

    base = ParallelPlan(dp=8, ep=8, microbatch=1, global_batch=8)
    res0 = evaluate_plan("mixtral-8x7b", _dgx(), base, train=True, seq=512, recompute="full")
    res1 = evaluate_plan("mixtral-8x7b", _dgx(), dataclasses.replace(base, zero_stage=1), train=True, seq=512,
                         recompute="full")
    sgs = plan_graphs("mixtral-8x7b", base, train=True, seq=512, recompute="full")
    f = _expert_share([(sg, None) for sg in sgs])
    # Mixtral-8x7B, one of 8 experts per device: 32 layers x 3 x 4096 x 14336 expert weights; dense per layer
    # q, o 4096^2, k, v 4096 x 1024, router 4096 x 8, two norms 4096; embedding and head 32000 x 4096, final norm
    ex = 32 * 3 * 4096 * 14336
    dense = 32 * (2 * 4096**2 + 2 * 4096 * 1024 + 4096 * 8 + 2 * 4096) + 2 * 32000 * 4096 + 4096
    assert f == pytest.approx(ex / (ex + dense))
    o0 = res0.to_json()["memory_breakdown"]["optimizer"]
    o1 = res1.to_json()["memory_breakdown"]["optimizer"]
    assert o1 == pytest.approx((1 - f) * o0 / 8 + f * o0)
