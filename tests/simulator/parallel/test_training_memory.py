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
