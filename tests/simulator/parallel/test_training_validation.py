"""published_training.csv and its harness: the file parses and covers today's recipes, the plan mapping and
the per-group arithmetic hold on hand-computed cases, rows that cannot be stated are listed with what."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from simulator.parallel.training_validation import (
    DEFAULT_TRAINING_DATASET,
    TRAINING_COLUMNS,
    TrainingResult,
    family_of,
    load_training_rows,
    recipe_of,
    training_summary,
    validate_training,
)


@pytest.fixture(scope="module")
def rows():
    return load_training_rows()


def test_dataset_parses_every_row_cited_and_at_least_60(rows) -> None:
    assert len(rows) >= 60
    ids = [r.id for r in rows]
    assert len(set(ids)) == len(ids)
    for r in rows:
        assert r["source"].strip() and r["notes"].strip(), r.id
        assert r["category"] == "train" and r.value > 0


def test_dataset_covers_required_families_recipes_and_metrics(rows) -> None:
    families = {family_of(r) for r in rows}
    assert {"H100", "H200", "B200", "TPU v5e", "TPU v5p", "TPU v6e"} <= families
    recipes = [recipe_of(r) for r in rows]
    assert any(rc.startswith("fsdp") for rc in recipes)
    assert any(rc.startswith("3d") for rc in recipes)
    assert any(rc.endswith("+fp8") for rc in recipes)
    assert any(rc.startswith("moe") for rc in recipes)
    metrics = {r["metric"] for r in rows}
    assert {"tokens_per_s_per_device", "mfu", "step_time_s", "peak_memory_gib"} <= metrics


def test_recipe_and_family_labels(rows) -> None:
    by_id = {r.id: r for r in rows}
    # torchtitan Table 5: FSDP 8 x TP 8 x PP 8, Float8 on the 96 GB H100 boards
    assert recipe_of(by_id["train-025"]) == "3d+fp8" and family_of(by_id["train-025"]) == "H100"
    # MaxText v5e 16B on one v5e-256 slice, FSDP over all 256 chips
    assert recipe_of(by_id["train-071"]) == "fsdp" and family_of(by_id["train-071"]) == "TPU v5e"
    # Mixtral 8x7B on v6e: an MoE model
    assert recipe_of(by_id["train-124"]) == "moe"


def _fixture(tmp_path: Path, ids: tuple[str, ...]) -> Path:
    with open(DEFAULT_TRAINING_DATASET, newline="", encoding="utf-8") as f:
        src = [r for r in csv.DictReader(f) if r["id"] in ids]
    p = tmp_path / "two.csv"
    with open(p, "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(TRAINING_COLUMNS))
        w.writeheader()
        w.writerows(src)
    return p


def test_two_row_fixture_maps_to_the_documented_plan(tmp_path: Path) -> None:
    """train-071 (MaxText 16B, 1x v5e-256: per-chip batch 6, remat full, 2048 tokens): evaluate_plan's step for
    FSDP over 256 chips with one microbatch of 1536/256 = 6 per rank, under the maxtext-cf stack (16b.sh sets
    CF_FOR_ALL_GATHER) and its costing with the 2023 Pallas flash kernel, segment ids and the one-hot embedding
    (use_iota_embed=true), as the MFU MaxText prints: its 2023 count (6 N T + half the attention,
    train.py @ 76bd53b0f) over the predicted step and the 197 TFLOP/s peak.
    train-072 (2x v5e-256 over DCN, FSDP 256 within each slice): hybrid sharding, shard_group 256 of dp 512, on
    the multi-slice system tpu-v5e-256x2, predicted as stated."""
    from simulator.hardware import load_hardware
    from simulator.parallel import evaluate_plan
    from simulator.parallel.stacks import profile_options
    from workloads.parallel import ParallelPlan

    # 76bd53b0f's attention: flash, given MaxText's decoder_segment_ids; 16b.sh's use_iota_embed=true: the one-hot GEMM
    flash23 = replace(profile_options("maxtext-cf"), tpu_flash_2023=True, tpu_segment_ids=True, embedding_onehot=True)
    res = {r.id: r for r in validate_training(_fixture(tmp_path, ("train-071", "train-072")), progress=False)}
    a, b = res["train-071"], res["train-072"]
    assert a.status == "predicted" and a.system == "tpu-v5e-256" and a.why == ()
    ref = evaluate_plan("maxtext-16b-2023", load_hardware("tpu-v5e-256"),
                        ParallelPlan(dp=256, fsdp=True, microbatch=6, global_batch=1536), flash23,
                        train=True, seq=2048, recompute="full", dtype="bf16", framework="maxtext-cf")
    n = 16_274_232_320  # maxtext_param_count of maxtext-16b-2023 (hand count in test_maxtext_flops.py)
    flops = 6 * n * 2048 * 6 + 12 * 32 * 32 * 256 * 2048**2 * 6 / 2
    assert a.predicted == pytest.approx(100.0 * flops / ref.latency_s / 197e12, rel=1e-12)
    assert a.predicted == pytest.approx(100.0 * ref.mfu, rel=6e-3)  # the model's own count is 0.54% higher
    assert a.fits == ref.fits_in_memory
    assert b.status == "predicted" and b.system == "tpu-v5e-256x2" and b.why == () and b.nearest is None
    hyb = evaluate_plan("maxtext-16b-2023", load_hardware("tpu-v5e-256x2"),
                        ParallelPlan(dp=512, fsdp=True, shard_group=256, microbatch=6, global_batch=3072),
                        flash23, train=True, seq=2048, recompute="full", dtype="bf16",
                        framework="maxtext-cf")
    assert b.predicted == pytest.approx(100.0 * flops / hyb.latency_s / 197e12, rel=1e-12)


def _row(rows, rid: str):
    return next(r for r in rows if r.id == rid)


def _dp(r) -> int:
    return r.ints["n_devices"] // math.prod(r.ints.get(k) or 1 for k in ("tp", "pp", "cp"))


@pytest.mark.parametrize("rid, recipe, unstatable", [
    # torchtitan Table 1, 1D FSDP on 8 GPUs, per-op SAC, eager (9dec370: its Python RMSNorm, complex RoPE)
    ("train-001", {"recompute": "selective-op", "fp8_linears": None, "framework": "torchtitan-eager"}, []),
    # torchtitan FSDP 32 x TP 8, Float8 tensorwise / rowwise, torch.compile: FSDP2 with every block compiled
    ("train-039", {"recompute": "full", "fp8_linears": "tensorwise", "framework": "fsdp2-compile"}, []),
    ("train-041", {"recompute": "full", "fp8_linears": "rowwise", "framework": "fsdp2-compile"}, []),
    # MaxText remat_policy minimal -> the policy of the same name
    ("train-095", {"recompute": "minimal", "fp8_linears": None, "framework": "maxtext"}, []),
    # MaxText qkv_proj_offloaded: the offload is the policy's own, no plan offload piece
    ("train-122", {"recompute": "qkv_proj_offloaded", "fp8_linears": None, "framework": "maxtext-cf-sc"}, []),
    # NeMo AutoModel runs FSDP2
    ("train-137", {"recompute": "full", "fp8_linears": None, "framework": "automodel"}, []),
    # Megatron-Bridge with TE current scaling / MXFP8 block scaling: megatron-core with those recipes
    ("train-053", {"recompute": "none", "fp8_linears": "current", "framework": "megatron-core"}, []),
    ("train-054", {"recompute": "none", "fp8_linears": "mxfp8", "framework": "megatron-core"}, []),
    # MaxText quantization int8 (AQT) with full remat; gpt3_175b_base.sh sets CF_FOR_ALL_GATHER: maxtext-cf
    ("train-135", {"recompute": "full", "fp8_linears": "int8", "framework": "maxtext-cf"}, []),
    # MaxText custom remat: the offload column's names offloaded, every other name at its default
    ("train-111", {"recompute": "custom:decoder_layer_input=offload,out_proj=offload,query_proj=offload,"
                                 "key_proj=offload,value_proj=offload", "fp8_linears": None, "framework": "maxtext-cf-sc"},
     []),
    ("train-131", {"recompute": "custom:context=offload,mlpwo=offload", "fp8_linears": None, "framework": "maxtext-cf"},
     []),
])
def test_each_recipe_kind_maps_to_its_arguments(rows, rid: str, recipe: dict, unstatable: list) -> None:
    from simulator.parallel.training_validation import _unstatable, stated_recipe

    r = _row(rows, rid)
    assert stated_recipe(r) == recipe
    assert _unstatable(r, _dp(r), "system") == unstatable


def test_custom_policy_from_the_offload_column() -> None:
    """MaxText custom: an empty offload column is every name at its default; a column that is not a list of
    MaxText checkpoint names states no policy (the row is listed, not predicted)."""
    from simulator.parallel.training_validation import _custom_policy, _policy

    assert _policy("maxtext:custom", "") == "custom"
    assert _custom_policy("activations offloaded to host: decoder_layer_input") == "custom:decoder_layer_input=offload"
    assert _custom_policy("activations offloaded to host: query_prj") is None  # not a MaxText name
    assert _custom_policy("q/k/v projections offloaded to host") is None  # not the column's list form
    assert _policy("maxtext:custom", "q/k/v projections offloaded to host") is None


def test_nearest_recipe_stand_ins(rows) -> None:
    """Rows whose recipe is stated get the same arguments with or without ``nearest``: no stand-in enters."""
    from simulator.parallel.training_validation import stated_recipe

    for rid in ("train-053", "train-054", "train-111", "train-135"):
        r = _row(rows, rid)
        assert stated_recipe(r, nearest=True) == stated_recipe(r)


def test_plan_states_hybrid_sharding_capacity_factor_and_batch(rows) -> None:
    from simulator.parallel.training_validation import _plan, _unstatable
    from workloads.parallel import ParallelPlan

    r = _row(rows, "train-072")  # FSDP 256 within each of 2 v5e-256 slices
    assert _plan(r, 512) == ParallelPlan(dp=512, fsdp=True, shard_group=256, microbatch=6, global_batch=3072)
    r = _row(rows, "train-095")  # MaxText FSDP 16 x TP 4, per-chip batch 8: 512 / 16 = 32 per data rank; MaxText
    # shards activation_embed over the tensor axis: sequence parallelism's bytes
    assert _plan(r, 16) == ParallelPlan(tp=4, dp=16, fsdp=True, sequence_parallel=True, microbatch=32,
                                        global_batch=512)
    r = _row(rows, "train-039")  # torchtitan 2D: FSDP 32 x TP 8, SequenceParallel norms
    assert _plan(r, 32).sequence_parallel and _plan(r, 32).tp == 8
    r = _row(rows, "train-055")  # Megatron-Bridge TP 4: the 405B recipe's sequence parallelism, the performance
    # scripts' grad_reduce_in_fp32=False and fp8_param_gather (FP8-CS), which the row's columns do not print
    p = _plan(r, 2)
    assert p.sequence_parallel and p.grad_reduce_dtype == "bf16" and p.fp8_param
    r = _row(rows, "train-058")  # Megatron-Bridge BF16, TP 1: bf16 gradients, no fp8 parameters
    assert _plan(r, 64).grad_reduce_dtype == "bf16" and not _plan(r, 64).fp8_param
    assert not _plan(r, 64).sequence_parallel
    r = _row(rows, "train-136")  # NeMo AutoModel (FSDP2): none of the Megatron-Bridge recipe facts
    assert _plan(r, 32).grad_reduce_dtype == "" and not _plan(r, 32).fp8_param
    r = _row(rows, "train-124")  # Mixtral 8x7B, capacity factor 1.25, dense einsum dispatch
    assert _plan(r, 256).capacity_factor == 1.25 and _plan(r, 256).shard_group == 0
    assert _plan(r, 256).moe_dispatch == "einsum" and _unstatable(r, 256, "tpu-v6e-256") == []
    r = _row(rows, "train-138")  # NeMo AutoModel DeepSeek-V3: dispatcher deepep, fake_balanced_gate true
    assert (_plan(r, 64).moe_dispatch, _plan(r, 64).moe_routing) == ("deepep", "round-robin")
    r = _row(rows, "train-064")  # Megatron-Bridge: the alltoall dispatcher, force-balanced random routing
    assert (_plan(r, 8).moe_dispatch, _plan(r, 8).moe_routing) == ("sparse", "uniform")
    r = _row(rows, "train-001")  # torchtitan: local batch 2 per rank, 16 per step
    assert _plan(r, 8) == ParallelPlan(dp=8, fsdp=True, microbatch=2, global_batch=16)


def test_megatron_recompute_modules_layouts_and_expert_tensor_parallelism(rows) -> None:
    """The Megatron-Bridge rows' recompute_modules as --recompute modules:NAME,...; DeepSeek-V3's recipe layout
    (4 decoder layers a chunk, 1 on the last, 61 in all); Qwen3-235B's ep 32 over tp 2 x dp 16 with etp 1."""
    from simulator.parallel.training_validation import _plan, stated_recipe

    policies = {rid: stated_recipe(_row(rows, rid))["recompute"]
                for rid in ("train-057", "train-058", "train-063", "train-066", "train-067")}
    assert policies == {"train-057": "modules:mla_up_proj", "train-058": "modules:layernorm,moe_act",
                        "train-063": "modules:layernorm,moe_act", "train-066": "modules:mla_up_proj,mlp",
                        "train-067": "modules:layernorm,moe_act"}
    p57, p66 = _plan(_row(rows, "train-057"), 16), _plan(_row(rows, "train-066"), 32)
    assert p57.stage_layers == p66.stage_layers == (4,) * 15 + (1,) and sum(p57.stage_layers) == 61
    # 26.04 DeepSeek-V3 on B200 (B200_FP8_MX_V2): moe_flex_dispatcher_backend "deepep"; the 25.11 row the alltoall
    assert (p66.moe_dispatch, p57.moe_dispatch) == ("deepep", "sparse")
    p65 = _plan(_row(rows, "train-065"), 16)
    assert (p65.tp, p65.dp, p65.ep, p65.etp, p65.sequence_parallel) == (2, 16, 32, 1, True)
    assert _plan(_row(rows, "train-064"), 8).etp == 0  # TP 1: nothing to fold


def test_pull_request_1760_step_times_state_their_recipes(rows) -> None:
    """Megatron-Bridge pull request #1760's four step times on 64 B200s (Qwen3-235B-A22B, PP 8, EP 8, GBS 1024, MBS 1):
    BF16 17.2 -> 16 s with VP 4 kept and the a2a overlap turned off, MXFP8 20.1 -> 16.9 s with the overlap and VP 4
    both dropped (the recipe at the pull request's parent fd03ab1e and at its merge a6e92de5). Each pair differs by
    exactly what the merge changed; all four are dropless under the alltoall dispatcher (a host wait per MoE
    layer), and none states CUDA graphs."""
    from simulator.parallel.training_validation import (
        _a2a_overlap,
        _cuda_graph_config,
        _moe_host_sync,
        _plan,
    )

    want = {"train-150": (17.2, "", 4, True), "train-151": (16.0, "", 4, False),
            "train-152": (20.1, "mxfp8", 4, True), "train-153": (16.9, "mxfp8", 1, False)}
    for rid, (step_s, fp8, vp, overlap) in want.items():
        r = _row(rows, rid)
        assert (r["metric"], r.value, r["fp8"], r["model"]) == ("step_time_s", step_s, fp8, "qwen3-235b-a22b"), rid
        p = _plan(r, 8)
        assert (p.pp, p.ep, p.dp, p.microbatch, p.global_batch, p.interleave) == (8, 8, 8, 1, 1024, vp), rid
        assert (p.schedule == "interleaved") == (vp > 1) and p.p2p_host_sync == (vp == 1), rid
        assert _a2a_overlap(r) == p.moe_a2a_overlap == overlap and _moe_host_sync(r) and p.moe_host_sync, rid
        assert p.moe_dispatch == "sparse" and _cuda_graph_config(r) == {}, rid
    # tokens a GPU per step: 1024 x 4096 / 64 = 65,536; train-152's 20.1 s is 3,260 tokens/s/GPU against the
    # 25.11 table's 3,269 of train-060 (VP 2 printed, no overlap stated: its plan is kept)
    assert round(1024 * 4096 / 64 / _row(rows, "train-152").value) == 3260
    assert not _a2a_overlap(_row(rows, "train-060")) and _plan(_row(rows, "train-060"), 8).interleave == 2


def test_stack_of_each_source(rows) -> None:
    from simulator.parallel.training_validation import stack_of

    stacks = {r["framework"].split(" (")[0]: stack_of(r) for r in rows}
    assert stacks == {"torchtitan": "fsdp2", "NeMo AutoModel": "fsdp2", "MaxText": "maxtext",
                      "Megatron-Bridge": "megatron-core"}


def test_maxtext_profile_follows_the_stated_xla_flags(rows) -> None:
    """maxtext-cf exactly for the MaxText rows whose notes state CF_FOR_ALL_GATHER in the run's flags: the v5e
    scripts of 76bd53b0f, the Trillium and v5p benchmark workloads that list it, gpt3_175b_base.sh; maxtext for
    the v5p scripts of 76bd53b0f (async collective fusion and overlap on the TensorCore set, fuse_all_gather not) and
    Gemma 3, whose workloads set only the VMEM limit and so run XLA:TPU's defaults (all-gathers asynchronous, no
    reduction asynchronous); -sc where the flags offload the gradient reductions to the SparseCore: the Llama 3.1 8B,
    Llama 2 70B and Mistral workloads (ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE, with CF) and DeepSeek-V3
    (ENABLE_SPARSECORE_OFFLOADING_FOR_RS_AG_AR, fuse_all_gather false). No row runs maxtext-serial.
    Every MaxText row states CF or not."""
    from simulator.parallel.training_validation import (
        CF_FOR_ALL_GATHER_NOTE,
        NO_COLLECTIVE_OVERLAP_NOTE,
        maxtext_profile,
        stated_recipe,
    )

    maxtext = [r for r in rows if r["framework"].startswith("MaxText")]
    assert all("XLA flags: continuation fusion of all-gathers " in r["notes"] for r in maxtext)
    names = ("maxtext-cf", "maxtext", "maxtext-cf-sc", "maxtext-sc", "maxtext-serial")
    by = {p: {r.id for r in maxtext if maxtext_profile(r) == p} for p in names}
    ids = lambda a, b: {f"train-{i:03d}" for i in range(a, b + 1)}  # noqa: E731
    assert by["maxtext"] == ids(95, 110) | ids(128, 130)
    assert by["maxtext-sc"] == {"train-132"}
    assert by["maxtext-cf-sc"] == ids(111, 116) | {"train-122", "train-123"}
    assert by["maxtext-serial"] == set()
    assert by["maxtext-cf"] == (ids(71, 94) | ids(117, 121) | ids(124, 127) | {"train-131", "train-133", "train-134",
                                                                              "train-135", "train-140", "train-141"})
    assert sum(map(len, by.values())) == len(maxtext)
    assert all(stated_recipe(r)["framework"] == maxtext_profile(r) for r in maxtext)
    assert all("CUSTOM_VMEM_LIMIT_FLAG(vmem_limit=122880)" in _row(rows, f"train-{i}")["notes"] for i in (128, 129, 130))
    r = _row(rows, "train-089")
    assert maxtext_profile(replace(r, raw={**r.raw, "notes": "no flags stated"})) == "maxtext"
    assert maxtext_profile(replace(r, raw={**r.raw, "notes": CF_FOR_ALL_GATHER_NOTE + " (...)"})) == "maxtext-cf"
    assert maxtext_profile(replace(r, raw={**r.raw, "notes": NO_COLLECTIVE_OVERLAP_NOTE + " (...)"})) == "maxtext"
    sc = CF_FOR_ALL_GATHER_NOTE + " (...) ENABLE_SPARSECORE_OFFLOADING_FOR_ALL_REDUCE"
    assert maxtext_profile(replace(r, raw={**r.raw, "notes": sc})) == "maxtext-cf-sc"


def test_full_sharding_over_thousands_of_chips_pads_the_reduce_scatter() -> None:
    """FSDP2 and XLA pad a shard to a multiple of the group: 16,274,232,320 bf16 gradient bytes over 2048
    chips (8,137,116,160 elements, 2048 x 3,973,201.25) price as the padded 2048 x 3,973,202 elements."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import _collective_times

    hw = load_hardware("tpu-v5e-256x8")
    got = _collective_times([("reduce_scatter", 16274232320.0)], 2048, hw)[("reduce_scatter", 16274232320.0)]
    padded = 2 * 2048 * 3973202.0
    ref = _collective_times([("reduce_scatter", padded)], 2048, hw)[("reduce_scatter", padded)]
    assert got == pytest.approx(ref, rel=1e-12) and got > 0


def _res(rid: str, metric: str, measured: float, *, predicted: float | None = None, nearest: float | None = None,
         fits: bool | None = None, family: str = "H100", recipe: str = "fsdp") -> TrainingResult:
    status = "predicted" if predicted is not None else "not statable yet"
    return TrainingResult(rid, "m", family, recipe, metric, measured, status, predicted=predicted, fits=fits,
                          nearest=nearest, nearest_fits=None if nearest is None else fits,
                          why=() if predicted is not None else ("fp8: low-precision linear layers 'x'",))


def test_summary_arithmetic_on_hand_computed_rows() -> None:
    """Two throughput rows +10% (110 vs 100 tokens/s) and -10% (4.5 vs 5 s): MAPE 10, bias
    sqrt(1.1 x 0.9) - 1 = -0.5013%; a memory row 80 vs 64 GiB: +25%; fits right on 2 of 3."""
    rs = [_res("a", "tokens_per_s_per_device", 100.0, predicted=110.0, fits=True),
          _res("b", "step_time_s", 5.0, predicted=4.5, fits=False),
          _res("c", "peak_memory_gib", 64.0, predicted=80.0, fits=True),
          _res("d", "mfu", 40.0, nearest=30.0, fits=True, recipe="fsdp+fp8")]
    s = training_summary(rs)
    assert (s["rows"], s["predicted"], s["not_statable_yet"], s["skipped"]) == (4, 3, 1, 0)
    g = s["groups"]["H100 x fsdp"]
    assert g["throughput"]["n"] == 2
    assert g["throughput"]["mape"] == pytest.approx(10.0)
    assert g["throughput"]["bias"] == pytest.approx(100.0 * (math.sqrt(1.1 * 0.9) - 1.0))
    assert g["throughput"]["max_abs_error"] == pytest.approx(10.0)
    assert g["peak_memory_gib"]["mape"] == pytest.approx(25.0) and g["peak_memory_gib"]["bias"] == pytest.approx(25.0)
    assert (g["fits_right"], g["fits_total"]) == (2, 3)
    # the fp8 row is not scored: it appears only as a labelled nearest-recipe figure of its own group
    f = s["groups"]["H100 x fsdp+fp8"]
    assert f["throughput"]["n"] == 0 and f["listed"]["not_statable_yet"] == 1
    assert f["nearest_recipe"]["throughput"]["mape"] == pytest.approx(25.0)
    assert s["overall"]["throughput"]["n"] == 2
    assert s["reasons"] == {"fp8": 1}


def test_runs_that_failed_for_memory_count_in_the_fits_verdict_only() -> None:
    """An ``oom`` row's verdict is right when the plan does not fit; it enters no MAPE and no worst list: a
    throughput row (fits, right), an oom row predicted not to fit (right) and one predicted to fit (wrong)."""
    rs = [_res("a", "tokens_per_s_per_device", 100.0, predicted=110.0, fits=True),
          _res("b", "oom", 79.18, predicted=85.0, fits=False),
          _res("c", "oom", 79.18, predicted=60.0, fits=True)]
    s = training_summary(rs)
    g = s["groups"]["H100 x fsdp"]
    assert (g["fits_right"], g["fits_total"], g["oom_right"], g["oom_total"]) == (2, 3, 1, 2)
    assert g["throughput"]["n"] == 1 and "oom" not in g and "peak_memory_gib" not in g
    assert [r["id"] for r in s["worst"]] == ["a"]
    assert [r["id"] for r in s["oom_rows"]] == ["b", "c"]


_OOM_IDS = [f"train-{i}" for i in range(140, 150)]


@pytest.fixture(scope="module")
def oom_results(tmp_path_factory):
    """The runs the dataset's sources say ran out of memory (metric ``oom``), predicted."""
    text = DEFAULT_TRAINING_DATASET.read_text().splitlines(keepends=True)
    keep = [text[0]] + [ln for ln in text[1:] if ln.split(",", 1)[0] in _OOM_IDS]
    p = tmp_path_factory.mktemp("oom") / "oom.csv"
    p.write_text("".join(keep))
    return {r.id: r for r in validate_training(p, progress=False)}


def test_runs_that_failed_for_memory_and_their_verdicts(oom_results) -> None:
    """The 10 runs that failed for memory, all stated and predicted: torchtitan's two (Llama 2 70B at local batch
    2 with per-op SAC on 64 A100, 108 GiB; Llama 3.1 405B 1D on 128 H100, 181 GiB) and Megatron-Bridge's four
    full-iteration CUDA graphs (Qwen3-30B-A3B on 8 B200, the capture's deferred frees) are predicted not to fit;
    the 4 MaxText and Llama 3 70B SFT runs are predicted to fit (docs/training_memory.md says which term each
    misses): a regression of the counts."""
    assert sorted(oom_results) == _OOM_IDS
    assert all(r.status == "predicted" and r.metric == "oom" for r in oom_results.values())
    s = training_summary(list(oom_results.values()))
    assert (s["overall"]["oom_right"], s["overall"]["oom_total"]) == (6, 10)
    assert (s["overall"]["fits_right"], s["overall"]["fits_total"]) == (6, 10)
    assert {k for k, r in oom_results.items() if not r.fits} == {f"train-{i}" for i in range(144, 150)}
    # (108.2 before NCCL's buffers were sized per communicator: FSDP 64 over 8 nodes, 24 channels x 2 x 20 MiB;
    # 109.1 before the eager RMSNorm's mean gradient stopped keeping pow's fp32 output)
    assert oom_results["train-148"].predicted == pytest.approx(108.3, abs=0.3)
    assert s["overall"]["throughput"]["n"] == 0 and "peak_memory_gib" not in s["overall"]
    # of the runs predicted to fit, MaxText's Llama 2 70B on v5p-128 comes nearest to its device (89.2 of 95.74)
    fit = {k: r.predicted / r.measured for k, r in oom_results.items() if r.fits}
    assert max(fit, key=fit.__getitem__) == "train-140"


@pytest.mark.parametrize("rid, microbatches, local_tokens", [
    ("train-144", 16, 16384), ("train-145", 32, 8192), ("train-146", 32, 8192), ("train-147", 64, 4096)])
def test_full_iteration_graph_deferred_frees_by_hand(rid: str, microbatches: int, local_tokens: int) -> None:
    """train-144..147 (Megatron-Bridge 9c0cd2575^, Qwen3-30B-A3B, 8 B200, EP 8, GBS 512, seq 4096, TP 1/2 x MBS
    4/2): the full-iteration capture keeps, for each of the step's GBS / (dp x mbs) microbatches and each of the
    48 MoE layers, the ``mlp`` and ``moe_combine`` nodes' inputs, each HybridEP's budget of ``local tokens x
    top-k 8 x 1.5`` rows of 2048 bf16 (local tokens: mbs x 4096 / tp, sequence parallel). By hand, TP 1, MBS 4:
    16 x 48 x 2 x 196608 x 2048 x 2 B = 1152 GiB; microbatches x local tokens is 512 x 4096 / 8 = 262144 tokens
    a rank a step in all four plans, so all four hold 1152 GiB."""
    from simulator.calibration.predict import quiet_engine
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from simulator.parallel.training_validation import _plan, row_options, stated_recipe

    row = next(r for r in load_training_rows() if r.id == rid)
    tp = row.ints["tp"]
    plan = _plan(row, 8 // tp)
    assert (plan.cuda_graph, plan.moe_rank_capacity_factor, plan.moe_a2a_overlap) == ("full_iteration", 1.5, True)
    assert plan.microbatches == microbatches and row.ints["microbatch"] * 4096 // tp == local_tokens
    recipe = stated_recipe(row)
    with quiet_engine():
        res = evaluate_plan(row["model"], load_hardware("dgx-b200"), plan, row_options(row, recipe["framework"]),
                            train=True, seq=4096, dtype="bf16", **recipe)
    parts = max(res.stages, key=lambda st: st.memory_bytes).memory_breakdown()
    rows = local_tokens * 8 * 3 // 2
    assert parts["reserve.cuda_graph_deferred_frees"] == microbatches * 48 * 2 * rows * 2048 * 2 == 1152 * 2**30
    assert not res.fits_in_memory


def test_llama2_70b_on_v5p_128_memory_by_hand() -> None:
    """train-140 (MaxText PR #2957: Llama 2 70B, FSDP over 64 v5p chips, per_device_batch_size 4, seq 4096,
    save_dot_except_mlpwi) by hand: the fp32 train state 16 B/param over 64 chips; the saved activations per
    token and layer: the layer's input (the scan carry, 8192), q/k/v (8192 + 2 x 1024) and out_proj (8192), bf16
    (mlpwo's output is not kept: JAX saves no residual the backward does not read once the layer's output is
    the next carry), 80 layers x 16384 tokens; the rest (loss, one layer's working set) below 7 GiB."""
    from simulator.calibration.predict import quiet_engine
    from simulator.hardware import load_hardware
    from simulator.parallel import training_validation as tv
    from simulator.parallel.compose import evaluate_plan
    from workloads.zoo import build_model

    row = next(r for r in load_training_rows() if r.id == "train-140")
    recipe = tv.stated_recipe(row, nearest=False)
    with quiet_engine():
        res = evaluate_plan(row["model"], load_hardware("tpu-v5p-128"), tv._plan(row, 64),
                            tv.row_options(row, recipe["framework"]), train=True, seq=4096, dtype="bf16", **recipe)
    parts = res.stages[0].memory_breakdown()
    n = sum(math.prod(t.shape) for t in build_model("llama-2-70b", batch=1, seq=16).tensors.values()
            if t.role.name == "WEIGHT")
    assert parts["parameters"] == pytest.approx(4 * n / 64, rel=1e-3)
    assert parts["optimizer"] == pytest.approx(8 * n / 64, rel=1e-3)
    stash = 80 * 4 * 4096 * (8192 + 10240 + 8192) * 2
    assert stash / 2**30 == pytest.approx(65.0, abs=0.1)
    assert 0 < parts["activations"] - stash < 7 * 2**30
    assert res.memory_per_device_bytes / 2**30 == pytest.approx(89.2, abs=0.3)
    assert res.fits_in_memory  # 89.2 GiB against the 96 GiB chip: the run ran out of memory (the verdict is wrong)


def test_real_dataset_lists_every_row_and_reports_groups() -> None:
    results = validate_training(progress=False)
    s = training_summary(results)
    assert s["rows"] == len(results) == s["predicted"] + s["not_statable_yet"] + s["skipped"]
    for r in results:  # nothing silently dropped: every row not predicted says why
        assert r.status == "predicted" or r.why, r.id
        assert (r.predicted is not None) == (r.status == "predicted"), r.id
    # fp8 linears and named recompute policies are listed, not approximated into the score
    for r in results:
        if r.status == "predicted":
            assert not any(w.startswith(("fp8", "recompute", "offload", "dcn_slices", "compile", "moe")) for w in r.why)
    assert s["predicted"] >= 1 and "TPU v5e x fsdp" in s["groups"]
    json.dumps(s)  # the summary is plain JSON
    # hardware as deployed: no row waits for a board, a DGX B200 node or a multi-slice system any more; the 48
    # torchtitan rows carry nearest figures on the 500 W, 96 GB boards wherever their plan is accepted
    assert "board" not in s["reasons"] and "dcn_slices" not in s["reasons"]
    assert not any(w.startswith("no catalog system") for r in results for w in r.why)
    titan = [r for r in results if r.system.startswith("grand-teton-h100-96gb")]
    assert len(titan) == 49 and sum(r.nearest is not None for r in titan) == 0  # 48 ran, train-149 ran out
    # eager and compiled (fsdp2-compile) rows are stated; the 12 pipeline rows of the 405B (8 stages of 126
    # layers) are split as torchtitan's generated split points split them (15, 16 x 6, 15)
    assert sum(r.status == "predicted" for r in titan) == 49
    # the recipes stated since: named policies, fp8 tensorwise/rowwise, hybrid sharding, compile (84 of 139);
    # TE current scaling, MXFP8, int8 AQT and MaxText's custom remat with its offloads; MaxText's dense einsum
    # MoE dispatch (Mixtral 8x7B and 8x22B on v6e-256); uneven pipeline stages; the DeepSeek-V3 zoo model
    # (130 of 139); sliding-window attention: Gemma 3 12B on v6e (133 of 139); Megatron-Core's recompute_modules
    # (GPT-OSS, DeepSeek-V3), the DeepSeek-V3 recipes' pipeline layouts and expert tensor parallelism 1 (139 of 139);
    # the 10 runs that failed for memory (train-140..149) are stated too, and the four step times of
    # Megatron-Bridge pull request #1760 (train-150..153)
    assert s["predicted"] == 153 and "hybrid" not in s["reasons"] and "compile" not in s["reasons"]
    assert not {"fp8", "recompute", "offload"} & set(s["reasons"])
    # nothing left not statable: every row is predicted
    assert [r.id for r in results if r.status != "predicted"] == []
    assert {r.id for r in results if r.status == "predicted"} >= {"train-124", "train-125", "train-065"}
    assert sum(r.system.startswith("dgx-b200") for r in results) == 20


def test_board_variants_b200_and_slices_map_to_catalog_systems() -> None:
    """The 49 torchtitan rows on H100 SXM 96 GB HBM2e boards at 500 W run on grand-teton-h100-96gb nodes (no
    'board' reason left), the 16 DGX B200 rows on dgx-b200 nodes, and the 31 multi-slice TPU rows on
    tpu-<gen>-<slice>x<slices> systems (no 'dcn_slices' reason left); nothing here is fitted."""
    from simulator.parallel.training_validation import (
        BOARD_SYSTEMS,
        _system_name,
        _unstatable,
        load_training_rows,
    )

    rows = load_training_rows()
    board = [r for r in rows if r["board"].strip()]
    assert len(board) == 49 and {r["board"].strip() for r in board} == set(BOARD_SYSTEMS)  # train-149 ran out
    for r in board:
        name, why = _system_name(r, r.ints["n_devices"])
        assert why == "" and name == ("grand-teton-h100-96gb" if r.ints["n_devices"] == 8
                                      else f"grand-teton-h100-96gbx{r.ints['n_devices'] // 8}"), r.id
    b200 = [r for r in rows if "B200" in r["system"]]
    assert len(b200) == 20  # the 16 runs that ran and 4 that ran out of memory (train-144..147)
    assert {_system_name(r, r.ints["n_devices"])[0] for r in b200} == {"dgx-b200", "dgx-b200x8", "dgx-b200x16",
                                                                      "dgx-b200x32"}
    dcn = [r for r in rows if (r.ints.get("dcn_slices") or 1) > 1]
    assert len(dcn) == 31
    names = {r.id: _system_name(r, r.ints["n_devices"])[0] for r in dcn}
    assert names["train-072"] == "tpu-v5e-256x2" and names["train-076"] == "tpu-v5e-256x32"
    assert names["train-096"] == "tpu-v5p-128x2" and names["train-130"] == "tpu-v6e-256x4"
    assert all(names.values())
    for r in board + dcn:
        n = r.ints["n_devices"]
        tp, pp, cp = (r.ints.get(k) or 1 for k in ("tp", "pp", "cp"))
        why = _unstatable(r, n // (tp * pp * cp), names.get(r.id) or _system_name(r, n)[0])
        assert not any(w.startswith(("board", "dcn_slices")) for w in why), (r.id, why)


def test_megatron_rows_state_the_distributed_optimizer(rows) -> None:
    """Megatron-Bridge rows without a ``zero`` column run Megatron-Core's distributed optimizer (ZeRO-1:
    ``use_distributed_optimizer=True`` in its recipes' optimizer and DDP configs); FSDP stacks keep 0."""
    from simulator.parallel.training_validation import _plan, stack_of

    mb = next(r for r in rows if r.id == "train-053")
    assert stack_of(mb) == "megatron-core" and mb.ints.get("zero") is None
    assert _plan(mb, 8).zero_stage == 1
    titan = next(r for r in rows if r.id == "train-001")
    assert _plan(titan, 8).zero_stage == 0 and _plan(titan, 8).fsdp


def test_maxtext_rows_carry_the_splash_blocks_their_workloads_set():
    # the sa_block_* settings each row's notes copy from its workload's tuning_params (and base.yml), in the order
    # q, kv, q_dkv, kv_dkv, q_dq, kv_dq
    from simulator.parallel.training_validation import (
        load_training_rows,
        maxtext_splash_options,
        row_options,
    )

    rows = {r.id: r for r in load_training_rows()}
    # Llama 3.1 8B: 2048 everywhere and sa_use_fused_bwd_kernel True
    assert maxtext_splash_options(rows["train-111"]) == {"splash_blocks": (2048,) * 6, "splash_fused_bwd": True}
    # GPT-3 at tpu-recipes-v0.1.2: sa_block_q 1024, sa_block_q_dkv and _dq 2048, "the other sa_block_* 512"
    assert maxtext_splash_options(rows["train-126"]) == {"splash_blocks": (1024, 512, 2048, 512, 2048, 512),
                                                         "splash_fused_bwd": False}
    # the int8 GPT-3 run at 770fcf7d1: each key block set to its query block
    assert maxtext_splash_options(rows["train-127"])["splash_blocks"] == (1024, 1024, 2048, 2048, 2048, 2048)
    # Gemma 3: q and kv 1024, q_dkv 512, kv_dkv 2048, q_dq and kv_dq 1024 (the *_compute sizes are not blocks)
    assert maxtext_splash_options(rows["train-128"]) == {"splash_blocks": (1024, 1024, 512, 2048, 1024, 1024),
                                                         "splash_fused_bwd": False}
    # the v5p workloads of maxtext_v5p_model_configs.py (405B, DeepSeek-V3, Llama 4 Scout at 3eb77db3c; Maverick at
    # f4db8e4cc): 2048 everywhere, the split backward (base.yml's sa_use_fused_bwd_kernel False)
    for rid in ("train-131", "train-132", "train-133", "train-134"):
        assert maxtext_splash_options(rows[rid]) == {"splash_blocks": (2048,) * 6, "splash_fused_bwd": False}
    # a 2023 v5e row states none: the lowering's defaults (512, split backward) stay
    assert maxtext_splash_options(rows["train-071"]) == {}
    assert row_options(rows["train-071"], "maxtext").splash_blocks == ()
    assert row_options(rows["train-128"], "maxtext").splash_blocks == (1024, 1024, 512, 2048, 1024, 1024)
    assert row_options(rows["train-136"], "") is None


def test_maxtext_rows_whose_workloads_set_use_iota_embed_embed_by_a_one_hot_gemm():
    from simulator.parallel.training_validation import load_training_rows, row_options

    rows = {r.id: r for r in load_training_rows()}
    # every Trillium workload of the rows sets use_iota_embed True (GPT-3 in its model config, gpt3-175b.yml, as on
    # v5p), and the v5p Llama 3.1 405B one; so do the 2023 v5e and v5p scripts (use_iota_embed=true in
    # MaxText/configs/v5e/*.sh and v5p/*.sh @ 76bd53b0f); DeepSeek-V3 and Llama 4 keep base.yml's False
    onehot = {rid for rid, r in rows.items() if r["framework"].startswith("MaxText")
              and row_options(r, "maxtext").embedding_onehot}
    assert onehot == {f"train-{i:03d}" for i in (*range(71, 132), 135)}


def test_the_2023_maxtext_rows_run_the_2023_pallas_flash_kernel():
    # MaxText 76bd53b0f's attention: flash calls jax's flash_attention (layers/attentions.py); every later MaxText row
    # runs splash attention, whose backward has no broadcast row statistics
    from simulator.parallel.training_validation import (
        load_training_rows,
        row_options,
        runs_flash_2023,
    )

    rows = {r.id: r for r in load_training_rows()}
    flash = {rid for rid, r in rows.items() if r["framework"].startswith("MaxText") and runs_flash_2023(r)}
    assert flash == {f"train-{i:03d}" for i in range(71, 111)}
    assert row_options(rows["train-071"], "maxtext").tpu_flash_2023
    assert not row_options(rows["train-111"], "maxtext-cf").tpu_flash_2023
    # MaxText's train step passes data["inputs_segmentation"] as decoder_segment_ids to every attention call
    assert all(row_options(rows[i], "maxtext").tpu_segment_ids for i in ("train-071", "train-111", "train-131"))


def test_the_maxtext_profiles_mask_attention_by_segment_ids_wherever_they_price():
    """The segment ids are the stack's (FrameworkProfile.segment_ids, in cost_options): predict --framework maxtext,
    serve and tune price MaxText's attention with them as the validation does; no other stack sets them."""
    from simulator.engines.options import options_from_settings
    from simulator.lowering.tpu import mask_vector_ops
    from simulator.parallel.stacks import profile_options
    from workloads.frameworks import PROFILES

    masked = {name for name, p in PROFILES.items() if p.cost_options()["tpu_segment_ids"]}
    assert masked == {"maxtext", "maxtext-cf", "maxtext-sc", "maxtext-cf-sc", "maxtext-serial"}
    for name in masked:
        opts = options_from_settings(PROFILES[name].cost_options())
        assert opts.tpu_segment_ids and profile_options(name).tpu_segment_ids
        assert mask_vector_ops(True, opts) == 3.0 + 2.0  # the causal mask's 3 operations and the segment ids' 2
    assert mask_vector_ops(True, options_from_settings(PROFILES["xla"].cost_options())) == 3.0


@pytest.mark.parametrize("notes, factor", [("moe_expert_rank_capacity_factor 2, cuda_graph_impl full_iteration", 2.0),
                                           ("moe_expert_rank_capacity_factor 1.5", 1.5),
                                           ("moe_expert_rank_capacity_factor 10", 10.0)])
def test_rank_capacity_factor_read_from_notes_whole_numbers_too(notes, factor) -> None:
    # a whole factor ("2") is as much a stated factor as "1.5": it used to be read as none (dropless budget)
    from simulator.parallel.training_validation import _cuda_graph_config

    got = _cuda_graph_config({"framework": "Megatron-Bridge (Megatron-Core)", "notes": notes})
    assert got["moe_rank_capacity_factor"] == factor


def test_torchtitan_context_parallel_rows_name_the_llama_3_1_they_ran(rows) -> None:
    """torchtitan's Dec 2024 H100 benchmark (Table 2: FSDP + CP + torch.compile + Float8) runs Llama 3.1 8B at
    32,768-262,144 tokens: its rows name ``llama-3.1-8b`` (context 131072), whose layers are llama-3-8b's, so
    naming it moves no prediction."""
    from workloads.zoo.transformer import zoo_config

    cp = [r for r in rows if "Table 2 (FSDP + CP + torch.compile + Float8, Llama 3.1 8B" in r["source"]]
    assert [r.id for r in cp] == [f"train-0{i}" for i in range(13, 21)]
    assert {r["model"] for r in cp} == {"llama-3.1-8b"}
    assert all(r["notes"].startswith("Llama 3.1 8B (zoo llama-3.1-8b)") for r in cp)
    old, new = zoo_config("llama-3-8b"), zoo_config("llama-3.1-8b")
    assert (old.max_positions, new.max_positions) == (8192, 131072)
    assert replace(new, name=old.name, max_positions=old.max_positions) == old
