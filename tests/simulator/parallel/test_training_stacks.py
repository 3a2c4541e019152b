"""Plan-level behaviour of training stacks (simulator/parallel/stacks.py): the FSDP2 copy-out kernels, the
float32 reduce-scatter and the overlapped collectives, by hand; a plan's step under each stack."""

from __future__ import annotations

import pytest

from simulator.hardware import load_hardware
from simulator.parallel.compose import _collective_times, evaluate_plan, stage_graphs
from simulator.parallel.stacks import profile_options, sharded_step, tp_overlap_hidden
from workloads.frameworks import FrameworkError
from workloads.ir import Role
from workloads.parallel import ParallelPlan


def test_sharded_step_by_hand_hidden_collectives():
    # 1 GB of bf16 parameters in 4 units, 2 microbatches, reshard after forward: 4 all-gathers and 4 copy-outs
    s = sharded_step("fsdp2", weight_bytes=1e9, units=4, microbatches=2, compute_s=2.0, gather_once_s=0.1,
                     reduce_once_s=0.05, reduce_scale=2.0, copy_bytes_per_s=2e12)
    assert s.copy_s == pytest.approx(4 * 2 * 1e9 / 2e12)          # read + write every gathered byte: 4 ms
    assert s.gather_s == pytest.approx(4 * 0.1)
    assert s.reduce_s == pytest.approx(2 * 0.05 * 2.0)             # fp32 reduce of bf16 gradients: twice the bytes
    assert s.exposed_s == pytest.approx((0.1 + 0.1) / 4)           # first unit's gather + last unit's reduce
    assert s.tail_s == pytest.approx(0.004 + 0.05)


def test_sharded_step_by_hand_collectives_longer_than_compute():
    s = sharded_step("fsdp2", weight_bytes=1e9, units=5, microbatches=1, compute_s=0.3, gather_once_s=0.2,
                     reduce_once_s=0.1, reduce_scale=1.0, copy_bytes_per_s=1e12, reshard_after_forward=False)
    # one gather (no reshard), one reduce: 0.3 s of collectives; first/last 0.06 s exposed; the backlog is
    # 0.3 - 0.06 - 0.3 < 0, so nothing more
    assert (s.copy_s, s.gather_s, s.reduce_s) == pytest.approx((2e9 / 1e12, 0.2, 0.1))
    assert s.exposed_s == pytest.approx(0.06)
    s = sharded_step("xla-spmd", weight_bytes=1e9, units=5, microbatches=1, compute_s=0.1, gather_once_s=0.2,
                     reduce_once_s=0.1, reduce_scale=1.0, copy_bytes_per_s=1e12)
    # XLA consumes the gathered weights in place: no copy-out; 0.4 + 0.1 of collectives against 0.1 of compute
    assert s.copy_s == 0.0
    assert s.exposed_s == pytest.approx(0.06 + (0.5 - 0.06 - 0.1))


def test_maxtext_reduces_gradients_in_bf16():
    """MaxText keeps float32 parameters (base.yml weight_dtype: float32) but casts each kernel to bf16 before its
    dot (linears.py DenseGeneral), so the weight gradient's partial sums are bf16 when the SPMD partitioner reduces
    them: the reduce-scatter moves the bf16 gradients' bytes (torchtitan's FSDP2 reduces in float32, twice them)."""
    from workloads.frameworks import get_profile

    x = get_profile("maxtext")
    assert x.grad_reduce_dtype == "bf16" and get_profile("maxtext-cf").grad_reduce_dtype == "bf16"
    assert get_profile("fsdp2").grad_reduce_dtype == "fp32"
    assert any("weight_dtype: float32" in src and "jnp.asarray(kernel, self.dtype)" in src for src in x.sources)
    s = sharded_step(x.stack, weight_bytes=1e9, units=5, microbatches=1, compute_s=0.1, gather_once_s=0.2,
                     reduce_once_s=0.1, reduce_scale=1.0, copy_bytes_per_s=1e12)
    # 2 gathers x 0.2 + a bf16 reduce 0.1 = 0.5 s; first/last (0.2 + 0.1) / 5 = 0.06; backlog 0.5 - 0.06 - 0.1 = 0.34
    assert (s.gather_s, s.reduce_s) == pytest.approx((0.4, 0.1))
    assert s.exposed_s == pytest.approx(0.06 + 0.34)


def test_maxtext_serial_exposes_every_collective():
    """maxtext-serial (no collective overlapped with compute; a bound, since XLA:TPU's defaults overlap the
    all-gathers) pays every all-gather and gradient reduction in full, however much compute there is to hide them
    behind; the other MaxText profiles overlap the all-gathers at least."""
    from workloads.frameworks import get_profile

    serial = get_profile("maxtext-serial")
    assert not serial.collective_overlap and get_profile("maxtext").collective_overlap
    assert get_profile("maxtext-cf").collective_overlap and serial.stack == "xla-spmd"
    assert any("recommended for v5p and v6e" in src for src in serial.sources)
    kw = dict(weight_bytes=1e9, units=5, microbatches=2, compute_s=10.0, gather_once_s=0.2, reduce_once_s=0.1,
              reduce_scale=1.0, copy_bytes_per_s=1e12)
    s = sharded_step(serial.stack, overlap=serial.collective_overlap, **kw)
    # 2 microbatches x 2 gathers x 0.2 + 2 reduces x 0.1 = 1.0 s, all of it serial with the 10 s of compute
    assert (s.gather_s, s.reduce_s, s.exposed_s, s.copy_s) == pytest.approx((0.8, 0.2, 1.0, 0.0))
    # overlapped: only the first unit's gather and the last unit's reduce, (0.2 + 0.1) / 5
    assert sharded_step("xla-spmd", **kw).exposed_s == pytest.approx(0.06)


def test_maxtext_reductions_are_serial_unless_offloaded_to_the_sparsecore():
    """XLA:TPU's defaults (libtpu's dumped tpu_comp_env: async collective fusion on, fuse_reduce_scatter and
    fuse_all_reduce false, async all-reduce and reduce-scatter fusion DISABLED) overlap the FSDP all-gathers and run the
    gradient reductions serial: maxtext and maxtext-cf; a SparseCore offload of the reductions overlaps them
    (maxtext-sc, maxtext-cf-sc)."""
    from workloads.frameworks import get_profile

    assert [get_profile(p).reduce_overlap for p in ("maxtext", "maxtext-cf", "maxtext-sc", "maxtext-cf-sc")] == \
        [False, False, True, True]
    assert all(get_profile(p).collective_overlap for p in ("maxtext", "maxtext-cf", "maxtext-sc", "maxtext-cf-sc"))
    assert any("fuse_reduce_scatter false" in src for src in get_profile("maxtext").sources)
    assert get_profile("maxtext-cf-sc").tp_overlap_collectives == get_profile("maxtext-cf").tp_overlap_collectives
    kw = dict(weight_bytes=1e9, units=5, microbatches=2, compute_s=10.0, gather_once_s=0.2, reduce_once_s=0.1,
              reduce_scale=1.0, copy_bytes_per_s=1e12)
    # both reductions (2 x 0.1) in full, and the first of the 4 gathers' units (0.2 / 5) before any compute
    assert sharded_step("xla-spmd", reduce_overlap=False, **kw).exposed_s == pytest.approx(0.2 + 0.04)
    # with too little compute the gathers' backlog shows too: 0.8 - 0.04 - 0.5
    assert sharded_step("xla-spmd", reduce_overlap=False, **{**kw, "compute_s": 0.5}).exposed_s == \
        pytest.approx(0.2 + 0.04 + 0.26)
    # the stack's reduce_overlap only matters where the collectives overlap at all
    assert sharded_step("xla-spmd", overlap=False, reduce_overlap=False, **kw).exposed_s == pytest.approx(1.0)


def test_maxtext_serial_step_adds_its_collectives_by_hand():
    """Llama 2 7B on a v6e-8, FSDP 8: under maxtext-serial the step is maxtext's compute plus every FSDP
    all-gather and reduce-scatter of the step (the breakdown's fsdp_gather_s + dp_sync_s), of which maxtext hides
    the all-gathers at the cost of their HBM traffic beside its compute (test_tpu_overlap_contention.py)."""
    hw = load_hardware("tpu-v6e-8")
    plan = ParallelPlan(dp=8, fsdp=True, microbatch=1, global_batch=8)
    res = {p: evaluate_plan("llama-2-7b", hw, plan, profile_options(p), train=True, seq=2048, recompute="full",
                            dtype="bf16", framework=p) for p in ("maxtext", "maxtext-serial")}
    a, b = res["maxtext"].breakdown, res["maxtext-serial"].breakdown
    assert a["compute_s"] == pytest.approx(b["compute_s"])
    assert b["dp_sync_exposed_s"] == pytest.approx(b["fsdp_gather_s"] + b["dp_sync_s"])
    assert a["dp_sync_exposed_s"] < 0.5 * b["dp_sync_exposed_s"]
    assert res["maxtext-serial"].latency_s - res["maxtext"].latency_s == pytest.approx(
        b["dp_sync_exposed_s"] - a["dp_sync_exposed_s"] - a["fsdp_hbm_contention_s"] - a["fsdp_vpu_reduce_s"],
        rel=1e-9)


def test_tp_overlap_hides_only_the_collectives_a_stack_overlaps():
    recs = [("all_gather", 4.0), ("matmul", 10.0), ("matmul", 2.0), ("reduce_scatter", 4.0)]
    # MaxText's continuation fusion (maxtext-cf) pipelines the all-gather with its matmul: 4 x 3/4 hidden;
    # the reduce-scatter stays serial (both overlapped: 3 + min(3, 2), the docstring's case)
    assert tp_overlap_hidden(recs, 4, 4, ("all_gather",)) == (3.0, 0.0)
    assert tp_overlap_hidden(recs, 4, 4) == (5.0, 0.0)
    from workloads.frameworks import get_profile

    cf = get_profile("maxtext-cf")
    assert (cf.stack, cf.tp_comm_overlap, cf.tp_overlap_collectives) == ("xla-spmd", True, ("all_gather",))
    assert any("CF_FOR_ALL_GATHER" in src for src in cf.sources)
    assert get_profile("maxtext").tp_comm_overlap is False


def test_sharded_step_refuses_an_unknown_stack():
    with pytest.raises(ValueError, match=r"^stack: got 'megatron-core'; expected one of fsdp2, xla-spmd$"):
        sharded_step("megatron-core", weight_bytes=1.0, units=1, microbatches=1, compute_s=0.0, gather_once_s=0.0,
                     reduce_once_s=0.0, reduce_scale=1.0, copy_bytes_per_s=1.0)


SHAPE = dict(train=True, seq=256, dtype="bf16")


def _plan_shape():
    return dict(phase="prefill", seq=256, context=None, dtype="bf16", train=True, optimizer="adamw",
                recompute="none", batch=None)


def test_fsdp2_step_composes_by_hand_on_gpt2():
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(dp=8, microbatch=2, global_batch=16, fsdp=True)
    opts = profile_options("fsdp2")
    r = evaluate_plan("gpt2", hw, plan, opts, framework="fsdp2", **SHAPE)
    g = stage_graphs("gpt2", plan, **_plan_shape())[0].graph
    grads = float(g.role_bytes(Role.GRADIENT))
    assert grads == 2 * 124_439_808  # GPT-2 small's parameters in bf16: the bytes FSDP2 gathers
    dev = hw.device
    bw = dev.main_memory.read_bandwidth_bytes_per_s * dev.efficiency.dram_bandwidth_fraction
    coll = _collective_times([("all_gather", grads), ("reduce_scatter", grads)], 8, hw)
    ag, rs = coll[("all_gather", grads)], coll[("reduce_scatter", grads)]
    copy = 2 * 2 * grads / bw                 # forward and backward gathers, each read + written once
    assert r.breakdown["fsdp_copy_out_s"] == pytest.approx(copy)
    assert r.breakdown["fsdp_gather_s"] == pytest.approx(2 * ag)
    assert r.breakdown["dp_sync_s"] == pytest.approx(2 * rs)  # float32 reduce-scatter of bf16 gradients
    compute = r.breakdown["compute_s"]
    exposed = (ag + 2 * rs) / 13 + max(0.0, 2 * ag + 2 * rs - (ag + 2 * rs) / 13 - compute)  # 12 blocks + root
    assert r.breakdown["dp_sync_exposed_s"] == pytest.approx(exposed)
    assert r.latency_s == pytest.approx(r.pipeline.step_s + copy + exposed + r.breakdown["optimizer_s"])


def test_megatron_core_and_no_framework_keep_the_generic_step():
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(dp=8, microbatch=2, global_batch=16, fsdp=True)
    base = evaluate_plan("gpt2", hw, plan, **SHAPE)
    assert evaluate_plan("gpt2", hw, plan, framework="", **SHAPE).latency_s == base.latency_s
    assert evaluate_plan("gpt2", hw, plan, framework="megatron-core", **SHAPE).latency_s == base.latency_s
    # a plan that is not sharded keeps the generic data-parallel composition under fsdp2 too
    ddp = ParallelPlan(dp=8, microbatch=2, global_batch=16)
    assert (evaluate_plan("gpt2", hw, ddp, framework="fsdp2", **SHAPE).latency_s
            == evaluate_plan("gpt2", hw, ddp, **SHAPE).latency_s)


def test_maxtext_stack_on_gpus_is_one_located_line():
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(dp=8, microbatch=2, global_batch=16, fsdp=True)
    with pytest.raises(FrameworkError, match=r"^framework maxtext: does not run on dgx-h100 \(NVIDIA gpu\); got "
                                             r"'maxtext', which runs on Google tpu; expected one of .*"):
        evaluate_plan("gpt2", hw, plan, framework="maxtext", **SHAPE)


def test_tp_overlap_hidden_by_hand():
    from simulator.parallel.stacks import tp_overlap_hidden

    recs = [("layernorm", 1.0), ("all_gather", 8.0), ("matmul", 20.0), ("attention", 5.0), ("matmul", 3.0),
            ("reduce_scatter", 8.0),                                   # forward: 4 ops
            ("reduction", 1.0), ("all_gather", 8.0), ("matmul", 4.0),  # backward: gather of dy -> dgrad GEMM
            ("matmul", 9.0), ("reduction", 0.5), ("reduce_scatter", 8.0), ("all_gather", 2.0)]
    # tp = 4: each collective can hide 3/4 of itself behind its GEMM, at most the GEMM's time
    # forward: gather 8 -> 6 behind the 20 s GEMM; scatter 8 -> min(6, 3) behind the 3 s GEMM
    # backward: gather 8 -> min(6, 4); scatter 8 -> 6 behind the 9 s GEMM two ops before; the trailing
    # gather has no GEMM after it
    assert tp_overlap_hidden(recs, 6, 4) == pytest.approx((9.0, 10.0))
    assert tp_overlap_hidden(recs, 6, 1) == (0.0, 0.0)


def test_megatron_core_hides_sequence_parallel_collectives():
    from simulator.parallel.stacks import tp_overlap_hidden
    from workloads.zoo.transformer import TransformerConfig

    # learned positions: the profile's RoPE and QKV-split copies (a graph change) stay out of the comparison
    cfg = TransformerConfig(name="tiny", vocab=32000, d_model=1024, layers=2, heads=16, d_ff=4096, mlp="gelu",
                            norm="layernorm", pos="learned", max_positions=512)
    hw = load_hardware("dgx-h100")
    plan = ParallelPlan(tp=4, dp=2, microbatch=1, global_batch=4, sequence_parallel=True)
    shape = dict(train=True, seq=512, dtype="bf16")
    opts = profile_options("megatron-core")
    base = evaluate_plan(cfg, hw, plan, opts, **shape)
    mc = evaluate_plan(cfg, hw, plan, opts, framework="megatron-core", **shape)
    sg = stage_graphs(cfg, plan, phase="prefill", seq=512, context=None, dtype="bf16", train=True,
                      optimizer="adamw", recompute="none", batch=None)[0]
    recs = [(r.kind, r.time_s) for r in mc.reports[0].records if not r.group.startswith("optimizer")]
    hf, hb = tp_overlap_hidden(recs, sg.forward_ops, 4)
    assert hf > 0 and hb > 0
    # the profile's weight-gradient GEMMs accumulate into the main gradient (workloads.frameworks.
    # main_grad_accumulation) and its GeLU is Megatron's own bias-GeLU kernel after the up GEMM, not the GEMM's
    # epilogue (FrameworkProfile.epilogue_bias_only): the ops' own seconds differ by those, and only on those ops
    own = {r.name: r.time_s for r in base.reports[0].records if not r.group.startswith("optimizer")}
    slower = {r.name: r.time_s - own[r.name] for r in mc.reports[0].records
              if not r.group.startswith("optimizer") and r.time_s != own[r.name]}
    assert {f"layers.{i}.mlp.act" for i in range(2)} <= set(slower)
    assert all((n.endswith(".bwd_b") or n.endswith(".mlp.act")) and t > 0 for n, t in slower.items())
    m = plan.microbatches  # 2 per data-parallel rank, one stage: the step loses m x (hidden forward + backward)
    assert base.latency_s - mc.latency_s == pytest.approx(m * (hf + hb - sum(slower.values())))
    assert mc.breakdown["tp_comm_hidden_s"] == pytest.approx(m * (hf + hb))
    # without sequence parallelism Megatron has no userbuffers overlap: the generic step, its weight-gradient
    # GEMMs accumulating into the main gradient
    plain = ParallelPlan(tp=4, dp=2, microbatch=1, global_batch=4)
    mc_plain, gen = (evaluate_plan(cfg, hw, plain, opts, **fw, **shape) for fw in ({"framework": "megatron-core"}, {}))
    own = {r.name: r.time_s for r in gen.reports[0].records if not r.group.startswith("optimizer")}
    extra = sum(r.time_s - own[r.name] for r in mc_plain.reports[0].records if not r.group.startswith("optimizer"))
    assert mc_plain.breakdown.get("tp_comm_hidden_s", 0.0) == 0.0
    assert mc_plain.latency_s - gen.latency_s == pytest.approx(m * extra)
