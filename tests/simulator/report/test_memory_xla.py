"""Training memory of a TPU chip as XLA holds it (simulator/report/memory_xla.py): MaxText's fp32
train state, the scanned layer's gathered weights and gradient, the remat stash as JAX saves it and
the runtime's HBM reserve, checked against hand-computed figures."""

from __future__ import annotations

import dataclasses

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.report import memory_xla as X
from workloads.parallel import ParallelPlan
from workloads.zoo.transformer import zoo_config

GIB = 2**30


def _breakdown(cfg, system: str, plan: ParallelPlan, policy: str, seq: int = 512) -> dict[str, float]:
    res = evaluate_plan(cfg, load_hardware(system), plan, train=True, seq=seq, recompute=policy, dtype="bf16")
    return res.to_json()["memory_breakdown"]


def test_small_fsdp_case_by_hand() -> None:
    # MaxText 16B of Dec 2023 cut to 2 layers: d 5120, 32 heads x 256 = 8192, ReLU MLP 32768, tied
    # vocabulary 32768, RMSNorm weights (2 per layer + the final one); FSDP over the 256 chips of a v5e slice
    cfg = dataclasses.replace(zoo_config("maxtext-16b-2023"), layers=2)
    d, a, f, v = 5120, 8192, 32768, 32768
    n = v * d + 2 * (4 * d * a + 2 * d * f + 2 * d) + d  # 1,174,430,720 parameters
    plan = ParallelPlan(dp=256, fsdp=True, microbatch=1, global_batch=256)
    b = _breakdown(cfg, "tpu-v5e-256", plan, "full")
    # fp32 weights, fp32 gradients, AdamW mu and nu in the weights' fp32, all sharded 256 ways
    assert b["parameters"] == pytest.approx(4 * n / 256)
    assert b["gradients"] == pytest.approx(4 * n / 256)
    assert b["optimizer"] == pytest.approx(8 * n / 256)
    # the two largest weight arrays of a layer gathered in bf16 (MLP in and out, d x f each) and one
    # of them as an unsharded bf16 gradient before its reduce-scatter
    assert b["buffers.xla_gathered_weights"] == 2 * (2 * d * f)
    assert b["buffers.xla_gradient_reduce_scatter"] == 2 * d * f
    # v5e: 16 GiB of HBM, of which XLA compiles against 15.75 GiB
    assert b["buffers.xla_runtime_reserved"] == 0.25 * GIB
    # no CUDA context, cuBLAS workspace, NCCL buffers or caching-allocator rounding on a TPU
    assert "buffers.cuda_context" not in b and b["reserve"] == 0.0
    parts = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "buffers")
    assert b["total"] == pytest.approx(sum(b[k] for k in parts))


def _layer_sbh(system: str, plan: ParallelPlan, policy: str, seq: int = 512) -> float:
    """Activation bytes one more layer adds on one chip, over s b h (b = the chip's batch share)."""
    cfg = zoo_config("megatron-gpt-22b")
    act = [_breakdown(dataclasses.replace(cfg, layers=k), system, plan, policy, seq)["activations"] for k in (3, 4)]
    return (act[1] - act[0]) / (seq * plan.microbatch * cfg.d_model)


@pytest.mark.parametrize("tp, expected", [(1, 18.0), (2, 9.0)])
def test_minimal_layer_as_jax_saves_it(tp: int, expected: float) -> None:
    # GPT layer (q/k/v/out h wide, MLP 4h) under MaxText minimal: the graph keeps input 2, q/k/v 6,
    # out_proj 2, mlpwi 8 and mlpwo 2 sbh (test_training_memory: 20 sbh). JAX saves only what the
    # backward reads: mlpwo's output feeds the residual add alone, whose output is the next layer's
    # saved input, so it is not kept: 18 sbh. With 2-way tensor parallelism MaxText shards the
    # residual stream, q/k/v, out_proj and mlpwi over `tensor`: 9 sbh per chip.
    plan = ParallelPlan(tp=tp, dp=4 // tp, fsdp=True, sequence_parallel=tp > 1, microbatch=2, global_batch=8 // tp)
    assert _layer_sbh("tpu-v5p-8", plan, "minimal") == pytest.approx(expected, rel=1e-9)


def test_full_remat_keeps_the_layer_input() -> None:
    # plain data parallelism: no FSDP buffers in the scan's body, so the step's peak is the loss's backward,
    # where every layer's saved input (the scan's carry, 2 sbh in bf16) is live and nothing else of a layer
    plan = ParallelPlan(dp=4, microbatch=2, global_batch=8)
    assert _layer_sbh("tpu-v5p-8", plan, "full") == pytest.approx(2.0, rel=1e-9)


def test_scan_buffers_are_not_live_at_the_loss() -> None:
    # The scanned layer's gathered weights and unsharded gradient are temporaries of the scan's loop body
    # (xla/hlo/utils/hlo_live_range.h: one flattened schedule): the step's peak is the larger of the layers'
    # peak with them and the loss's peak without them. Llama 3 8B cut to 2 layers, FSDP over a v5p-8's 4
    # chips, 2 sequences a chip
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    plan = ParallelPlan(dp=4, fsdp=True, microbatch=2, global_batch=8)
    parts = ("parameters", "gradients", "optimizer", "activations", "kv_cache", "buffers")
    # seq 512: the layers' peak with wi_0 and wi_1 gathered (2 x 4096 x 14336 bf16 each) and one unsharded
    # gradient is the larger
    short = _breakdown(cfg, "tpu-v5p-8", plan, "full", seq=512)
    assert short["buffers.xla_gathered_weights"] == 2 * (2 * 4096 * 14336)
    assert short["buffers.xla_gradient_reduce_scatter"] == 2 * 4096 * 14336
    # seq 2048: the loss's backward is the peak, the logits and their gradient (2 x 2048 tokens x 128256,
    # bf16) beside the two layers' saved inputs and the final norm's input (2 x 2048 x 4096 bf16 each);
    # no scan buffer is live there (the loss's per-token vectors, 16 KiB, within the tolerance)
    long = _breakdown(cfg, "tpu-v5p-8", plan, "full", seq=2048)
    assert long["activations"] == pytest.approx(2 * (4096 * 128256 * 2) + 3 * (4096 * 4096 * 2), abs=2**15)
    assert long["buffers.xla_gathered_weights"] == 0.0 and long["buffers.xla_gradient_reduce_scatter"] == 0.0
    for b in (short, long):
        assert b["total"] == pytest.approx(sum(b[k] for k in parts))


def test_state_bytes_doctest_values() -> None:
    assert X.maxtext_state_bytes(1e9, 1) == {"parameters": 4e9, "gradients": 4e9, "optimizer": 8e9}
    assert X.fsdp_gather_buffers([], 1) == {"xla_gathered_weights": 0.0, "xla_gradient_reduce_scatter": 0.0}


def test_gpu_memory_keeps_its_allocator_model() -> None:
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    b = _breakdown(dataclasses.replace(zoo_config("llama-3-8b"), layers=2), "dgx-h100", plan, "full")
    assert b["buffers.cuda_context"] == 400 * 2**20 and "buffers.xla_runtime_reserved" not in b


def test_optimizer_offload_moves_the_moments_to_the_host() -> None:
    cfg = dataclasses.replace(zoo_config("megatron-gpt-22b"), layers=2)
    on = _breakdown(cfg, "tpu-v5p-8", ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4), "full")
    off = _breakdown(cfg, "tpu-v5p-8", ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4,
                                                    offload=("optimizer",)), "full")
    assert off["optimizer"] == 0.0 and off["offloaded_to_host"] == pytest.approx(on["optimizer"])
    # the step sends the gradients out and brings the parameters back over the host link
    assert off["host.step_transfer"] == pytest.approx(on["gradients"] + on["parameters"])
    assert off["total"] == pytest.approx(on["total"] - on["optimizer"])


def test_fused_projections_are_gathered_per_maxtext_array() -> None:
    # Llama 3 8B: the zoo's fused gate_up (4096 x 2 x 14336) is MaxText's wi_0 and wi_1 (fused_mlp:
    # false), each 4096 x 14336 like wo: the two largest arrays are 2 x (2 x 4096 x 14336) bytes in bf16
    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=2)
    b = _breakdown(cfg, "tpu-v5p-8", ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4), "full")
    assert b["buffers.xla_gathered_weights"] == 2 * (2 * 4096 * 14336)
    assert b["buffers.xla_gradient_reduce_scatter"] == 2 * 4096 * 14336


def test_moe_expert_projections_are_two_maxtext_arrays() -> None:
    # Mixtral 8x7B: the zoo's fused experts' w_in (8 x 4096 x 2 x 14336) is MaxText's RoutedMoE wi_0 and
    # wi_1, each 8 x 4096 x 14336 like wo: the two largest arrays are 2 x (2 x 8 x 4096 x 14336) bf16 bytes
    cfg = dataclasses.replace(zoo_config("mixtral-8x7b"), layers=2)
    b = _breakdown(cfg, "tpu-v5p-8", ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4), "full")
    assert b["buffers.xla_gathered_weights"] == 2 * (2 * 8 * 4096 * 14336)
    assert b["buffers.xla_gradient_reduce_scatter"] == 2 * 8 * 4096 * 14336


def test_bf16_weight_dtype_halves_the_train_state() -> None:
    # MaxText weight_dtype bfloat16: 2 bytes of parameter, 2 of gradient, 2 + 2 of AdamW moments
    assert X.maxtext_state_bytes(1e9, 4, "bf16") == {"parameters": 5e8, "gradients": 5e8, "optimizer": 1e9}
    cfg = dataclasses.replace(zoo_config("megatron-gpt-22b"), layers=2)
    plan = ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4)
    fp32 = _breakdown(cfg, "tpu-v5p-8", plan, "full")
    bf16 = _breakdown(cfg, "tpu-v5p-8", dataclasses.replace(plan, param_dtype="bf16"), "full")
    for k in ("parameters", "gradients", "optimizer"):
        assert bf16[k] == pytest.approx(fp32[k] / 2)
    assert bf16["activations"] == fp32["activations"]


def test_vocab_tiled_loss_holds_one_chunk_of_the_logits() -> None:
    # Llama 3 8B, 512 tokens on a chip: at the loss's backward the logits (kept for it) and their
    # gradient are live, 2 x 512 x 128256 bf16 bytes; 16 chunks keep 1/16 of them, and the LM head's
    # table (4096 x 128256) gathered in fp32 with its fp32 gradient accumulator
    from workloads.parallel import plan_graphs

    cfg = dataclasses.replace(zoo_config("llama-3-8b"), layers=1)
    plan = ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4, loss_chunks=16)
    g = plan_graphs(cfg, plan, seq=512, dtype="bf16", train=True, recompute="full", framework="maxtext")[0].graph
    bwd = next(op.name for op in g.ops if op.kind == "cross_entropy_bwd")
    logits = 2 * 512 * 128256 * 2
    assert X.xla_chunked_loss_bytes(g, 16)[bwd] == pytest.approx(2 * 4096 * 128256 * 4 - logits * 15 / 16)
    assert X.xla_chunked_loss_bytes(g, 16, 2.0)[bwd] == pytest.approx(2 * 4096 * 128256 * 2 - logits * 15 / 16)
    assert X.xla_chunked_loss_bytes(g, 1) == {}
    # at 512 tokens the gathered fp32 table outweighs the logits: the peak grows by the change at the loss
    delta = X.xla_chunked_loss_bytes(g, 16)[bwd]
    assert X.xla_peak_activation_bytes(g, 16) == pytest.approx(X.xla_peak_activation_bytes(g) + delta, abs=1)


def test_vocab_tiled_loss_counts_no_layer_tensor_of_the_logits_size() -> None:
    # MaxText's 16B of 2023: an MLP 32768 wide and a tied vocabulary of 32768, so a layer's up projection at
    # 512 tokens has the logits' 512 x 32768 elements. Only the LM head's logits (and their recomputation under
    # full remat) and what is computed from them count: 2 x 512 x 32768 bf16 bytes at the loss's backward (the
    # recomputed logits and their gradient), nothing at any layer's op (before: the MLP's tensors too, 96 MiB
    # at the first layer's MLP)
    from workloads.parallel import plan_graphs

    cfg = dataclasses.replace(zoo_config("maxtext-16b-2023"), layers=2)
    plan = ParallelPlan(dp=4, fsdp=True, microbatch=1, global_batch=4, loss_chunks=4)
    g = plan_graphs(cfg, plan, seq=512, dtype="bf16", train=True, recompute="full", framework="maxtext")[0].graph
    bwd = next(op.name for op in g.ops if op.kind == "cross_entropy_bwd")
    changed = X.xla_chunked_loss_bytes(g, 4)
    assert not [name for name in changed if name.startswith("layers.")]
    logits = 512 * 32768 * 2
    table = 2 * 5120 * 32768 * 4  # the tied table gathered in fp32 and its fp32 gradient accumulator
    assert changed[bwd] == pytest.approx(table - 2 * logits * 3 / 4)
    assert min(changed.values()) == pytest.approx(table - 2 * logits * 3 / 4)


def test_llama_405b_on_v5p_1024_peaks_at_the_vocab_tiled_loss() -> None:
    # train-131 (Llama 3.1 405B, MaxText custom remat with context and mlpwo offloaded, 2 x 8192 tokens a
    # chip, num_vocab_tiling 4, FSDP over 512 v5p chips), which ran. JAX saves mlpwo's output for no
    # backward (its only reader, the residual add, is dead in the DCE'd recomputation), so only the 126
    # contexts go to the host (126 x 2 x 8192 x 16384 bf16 = 63 GiB). At the loss's backward the chip holds
    # the 126 saved layer inputs (63 GiB), the final norm's input and output (1 GiB), a quarter of the logits
    # and of their gradient (2 x 16384 x 128256 bf16 / 4), the LM head's table gathered in fp32 and its fp32
    # gradient accumulator (2 x 16384 x 128256 x 4 bytes); no scanned layer's FSDP buffer is live there
    from simulator.parallel import training_validation as T

    row = next(r for r in T.load_training_rows() if r.id == "train-131")
    recipe = T.stated_recipe(row)
    res = evaluate_plan(row["model"], load_hardware("tpu-v5p-1024"), T._plan(row, 512),
                        T.row_options(row, recipe["framework"]), train=True, seq=8192, dtype="bf16", **recipe)
    b = res.to_json()["memory_breakdown"]
    tokens, d, v = 2 * 8192, 16384, 128256
    assert b["offloaded_to_host"] == pytest.approx(126 * tokens * d * 2, rel=1e-9)
    act = 126 * tokens * d * 2 + 2 * tokens * d * 2 + 2 * tokens * v * 2 / 4 + 2 * d * v * 4
    assert b["activations"] == pytest.approx(act, rel=1e-3)
    assert b["buffers.xla_gathered_weights"] == 0.0
    assert res.fits_in_memory and b["total"] < 96 * GIB
