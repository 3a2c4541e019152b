"""torchtitan without --compile before 2025-03-19: its Python RMSNorm and complex RoPE run op by op
(``torchtitan-eager``; pytorch/torchtitan @ 9dec370 torchtitan/models/norms.py RMSNorm, models/llama/model.py
apply_rotary_emb), and the training validation states that profile only for those rows."""

from __future__ import annotations

from dataclasses import replace

from simulator.parallel import training_validation as tv
from workloads.frameworks import get_profile
from workloads.resolve import load_workload

S, H, KV, D, DM = 64, 32, 8, 128, 4096  # llama-3-8b: 32 query heads, 8 KV heads of 128; model width 4096


def _fwd(g, group):
    return [op for op in g if (op.group.startswith(f"layers.0.{group}") or op.name == f"layers.0.{group}")
            and ".bwd_" not in op.name
            and "@recompute" not in op.name]


def test_rmsnorm_is_torchtitans_eight_kernels_with_fp32_traffic():
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="torchtitan-eager")
    norm = _fwd(g, "attn_norm")
    assert [op.kind + ":" + str(op.attrs.get("op", "")) for op in norm] == [
        "elementwise:cast", "elementwise:pow", "reduction:mean", "elementwise:add", "elementwise:rsqrt",
        "elementwise:mul", "elementwise:cast", "elementwise:mul"]
    n = S * DM
    # x.float(): reads bf16, writes fp32; pow: fp32 in and out
    assert (norm[0].bytes_read, norm[0].bytes_written) == (2 * n, 4 * n) == (524_288, 1_048_576)
    assert (norm[1].bytes_read, norm[1].bytes_written) == (4 * n, 4 * n)
    # type_as(x): fp32 -> bf16
    assert (norm[6].bytes_read, norm[6].bytes_written) == (4 * n, 2 * n)


def test_rope_is_upcast_complex_product_downcast_per_tensor():
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="torchtitan-eager")
    for name, heads in (("rope_q", H), ("rope_k", KV)):
        ops = _fwd(g, f"attn.{name}")
        assert [op.name.rsplit(".", 1)[-1] for op in ops] == ["to_fp32", "mul_freqs_cis", "to_dtype"]
        n = S * heads * D
        mul = ops[1]
        # the fp32 pairs of the tensor and freqs_cis (S x D/2 complex64 = S x D fp32) in, the fp32 product out
        assert (mul.bytes_read, mul.bytes_written) == (4 * n + 4 * S * D, 4 * n)
    assert 4 * S * H * D + 4 * S * D == 1_081_344


def test_automodel_stacks_keep_one_norm_and_one_rope_kernel():
    for fw in ("automodel", "automodel-compile"):  # NeMo AutoModel's stacks: TE's fused RoPE, one kernel a tensor
        g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework=fw)
        assert [op.kind for op in _fwd(g, "attn_norm")] == ["rmsnorm"], fw
        assert [op.attrs.get("op") for op in _fwd(g, "attn.rope_q")] == ["rope"], fw
    # eager torchtitan (fsdp2, alias torchtitan) keeps its complex RoPE after nn.RMSNorm: one norm, three RoPE kernels
    g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework="torchtitan")
    assert [op.kind for op in _fwd(g, "attn_norm")] == ["rmsnorm"]
    assert [op.name.rsplit(".", 1)[-1] for op in _fwd(g, "attn.rope_q")] == ["to_fp32", "mul_freqs_cis", "to_dtype"]
    assert not get_profile("automodel-compile").compiled_loss  # MaskedCrossEntropy runs outside the compiled layers
    p = get_profile("torchtitan-eager")
    assert (p.eager_norm, p.complex_rope, p.eager_ops, p.stack, p.fusion) == (True, True, False, "fsdp2", False)


def test_the_validation_states_torchtitan_eager_only_before_native_rmsnorm():
    row = next(r for r in tv.load_training_rows() if r.id == "train-007")  # 9dec370, no --compile
    assert tv.stated_recipe(row)["framework"] == "torchtitan-eager"
    later = replace(row, raw={**row.raw, "framework_version": "torchtitan 3b39d7ab0 (2025-03-19)"})
    assert tv.stated_recipe(later)["framework"] == "fsdp2"
    compiled = replace(row, raw={**row.raw, "compile": "1"})
    assert tv.stated_recipe(compiled)["framework"] == "fsdp2-compile-blocks"


def _records(fw: str):
    from simulator.engines.analytical import EvalOptions, evaluate
    from simulator.hardware import load_hardware

    g = load_workload("llama-3-8b", batch=1, seq=S, train=True, dtype="bf16", framework=fw)
    opts = EvalOptions(**{k: v for k, v in get_profile(fw).cost_options().items() if k in ("fusion", "epilogue_fusion")})
    rep = evaluate(g, load_hardware("h100-sxm5-80gb"), opts)
    return {r.name: r for r in rep.records if r.name.startswith("layers.0.attn.rope_q")}


def test_compiled_complex_rope_product_is_an_aten_kernel_in_both_passes():
    recs = _records("fsdp2-compile")
    prod = [n for n in recs if "mul_freqs_cis" in n]
    # the forward product and its gradient (times conj(freqs_cis)), each a kernel of its own
    assert sorted(n.split("rope_q.", 1)[1] for n in prod) == ["mul_freqs_cis", "mul_freqs_cis.bwd_0"]
    assert all(recs[n].fused_into == "" for n in prod)
    # nothing joins the ATen kernel: the downcast after it starts a kernel too
    assert recs["layers.0.attn.rope_q.to_dtype"].fused_into == ""
    # NeMo AutoModel (automodel-compile): RoPE is Transformer Engine's fused kernel, one op per tensor that nothing
    # joins, each way (under Inductor alone the query's and the key's RoPE would be one generated kernel)
    am = _records("automodel-compile")
    assert sorted(am) == ["layers.0.attn.rope_q", "layers.0.attn.rope_q.bwd"]
    assert all(r.fused_into == "" for r in am.values())
    g = load_workload("llama-3-8b", batch=1, seq=S, train=True, dtype="bf16", framework="automodel-compile")
    assert sorted(op.name for op in g if op.name.startswith("layers.0.attn.rope") and op.attrs.get("aten_fallback")) \
        == ["layers.0.attn.rope_k", "layers.0.attn.rope_k.bwd", "layers.0.attn.rope_q", "layers.0.attn.rope_q.bwd"]


def test_automodel_rows_run_automodels_model_code():
    rows = {r.id: r for r in tv.load_training_rows()}
    assert tv.stated_recipe(rows["train-136"])["framework"] == "automodel-compile"
    # without compile: the automodel profile, not torchtitan's eager fsdp2
    assert [tv.stated_recipe(rows[f"train-{i}"])["framework"] for i in (137, 138, 139)] == ["automodel"] * 3


def test_torchtitan_sdpa_reads_repeated_key_value_heads():
    for fw, heads in (("fsdp2-compile", H), ("torchtitan-eager", H), ("fsdp2", H), ("automodel-compile", KV),
                      ("automodel", KV)):
        g = load_workload("llama-3-8b", batch=1, seq=S, phase="prefill", dtype="bf16", framework=fw)
        (core,) = [op for op in g if op.kind == "attention" and op.name.startswith("layers.0.")]
        assert core.inputs[1].shape == (1, heads, S, D) == core.inputs[2].shape, fw
        rep = [op for op in _fwd(g, "attn") if op.name.endswith("repeat_k")]
        # torchtitan's repeat_kv: one copy writing the 32 key heads (4 copies of each of the 8)
        assert [op.bytes_written for op in rep] == ([2 * S * H * D] if heads == H else []), fw
    assert 2 * S * H * D == 524_288


def test_repeat_kv_is_one_broadcast_copy_and_one_sum_back():
    # torchtitan's repeat_kv: expand (a view) then reshape (one copy): the 8 key heads read once, the 32 written;
    # its backward is one sum over the 4 copies (torch's expand backward), not a split and three gradient adds
    g = load_workload("llama-3-8b", batch=1, seq=S, train=True, dtype="bf16", framework="torchtitan-eager")
    ops = {op.name: op for op in g if op.name.startswith("layers.0.attn.repeat_k") and "@recompute" not in op.name}
    kernels = {n: (op.kind, op.bytes_read, op.bytes_written) for n, op in ops.items() if op.kind != "reshape"}
    assert kernels == {"layers.0.attn.repeat_k": ("expand", 2 * S * KV * D, 2 * S * H * D),
                       "layers.0.attn.repeat_k.bwd": ("reduction", 2 * S * H * D, 2 * S * KV * D)}
    assert (2 * S * KV * D, 2 * S * H * D) == (131_072, 524_288)
    # (a concat of 4 copies had summed its gradient as three grad_acc adds into rope_k's output, 2x its bytes read each)
    assert not [op for op in g if op.name.startswith("grad_acc:layers.0.attn.")]


def test_the_torchtitan_date_is_torchtitans_not_torchs():
    rows = {r.id: r for r in tv.load_training_rows()}
    assert [tv._torchtitan_date(rows[i]) for i in ("train-001", "train-049", "train-037")] == \
        ["2024-12-26", "2025-06-13", ""]  # train-037: 'torchtitan 820504e, torch 38410cf9 (2025-06-14)'
    eager = replace(rows["train-007"], raw={**rows["train-007"].raw, "compile": ""})
    # a torch date before 2025-03-19 does not make a torchtitan commit of unstated date the eager-RMSNorm code
    undated = replace(eager, raw={**eager.raw, "framework_version": "torchtitan abc1234, torch def5678 (2024-12-01)"})
    assert tv.stated_recipe(undated)["framework"] == "fsdp2"
    dated = replace(eager, raw={**eager.raw, "framework_version": "torchtitan abc1234 (2025-03-01), torch d (2025-06-14)"})
    assert tv.stated_recipe(dated)["framework"] == "torchtitan-eager"


def _final_norm(fw: str, *, train: bool):
    g = load_workload("llama-3-8b", batch=1, seq=S, train=train, dtype="bf16", framework=fw)
    return g, [op for op in g if op.name == "final_norm" or op.name.startswith("final_norm.")]


def test_compiled_blocks_leave_the_final_norm_eager():
    # torchtitan @ 9dec370 compiles each TransformerBlock only (apply_compile): its Python RMSNorm after the last block
    # is the eight eager kernels, each an ATen kernel nothing fuses with; the blocks' norms stay one compiled op
    g, fwd = _final_norm("fsdp2-compile-blocks", train=False)
    assert [op.name.rsplit(".", 1)[-1] for op in fwd] == [
        "to_fp32", "pow", "mean", "add_eps", "rsqrt", "normalize", "to_dtype", "scale_weight"]
    assert all(op.attrs.get("aten_fallback") for op in fwd)
    assert [op.kind for op in _fwd(g, "attn_norm")] == ["rmsnorm"]
    # torchtitan of 2025 (fsdp2-compile, nn.RMSNorm, not read here) and Megatron keep one norm op
    for fw in ("fsdp2-compile", "megatron-core"):
        assert [op.kind for op in _final_norm(fw, train=False)[1]] == ["rmsnorm"], fw
    assert get_profile("fsdp2-compile-blocks").eager_final_norm
    assert not get_profile("fsdp2-compile-blocks").eager_norm


def test_the_eager_final_norm_keeps_its_fp32_input_for_the_backward():
    # autograd keeps x.float() (read by pow's and the multiply's backward) and the bf16 normalised tensor (read by
    # the weight's gradient): S x 4096 x 4 and S x 4096 x 2 bytes, where the fused norm keeps its bf16 input only
    g, ops = _final_norm("fsdp2-compile-blocks", train=True)
    fwd = {op.name: op for op in ops if ".bwd" not in op.name}
    bwd = [op for op in ops if ".bwd" in op.name]
    up, down = fwd["final_norm.to_fp32"].outputs[0], fwd["final_norm.to_dtype"].outputs[0]
    assert (up.nbytes, down.nbytes) == (4 * S * DM, 2 * S * DM) == (1_048_576, 524_288)
    readers = lambda t: sorted(op.name for op in bwd if any(i.name == t.name for i in op.inputs))  # noqa: E731
    assert readers(up) == ["final_norm.normalize.bwd_1", "final_norm.pow.bwd"]
    assert readers(down) == ["final_norm.scale_weight.bwd_0"]
    # the mean's gradient is dy broadcast back to pow's output shape: it reads no forward tensor (autograd's
    # MeanBackward0 saves sizes only), so pow's fp32 output is not kept for the backward
    assert readers(fwd["final_norm.pow"].outputs[0]) == []
    (mean_bwd,) = [op for op in bwd if op.name == "final_norm.mean.bwd"]
    assert [t.shape for t in mean_bwd.inputs] == [(1, S, 1)] and mean_bwd.outputs[0].shape == (1, S, DM)
    assert (mean_bwd.bytes_read, mean_bwd.bytes_written) == (4 * S, 4 * S * DM) == (256, 1_048_576)
    # the elementwise ops' gradients are eager kernels too (the mean's broadcast gradient comes from the reduction
    # rule, which does not carry the mark)
    plain = sorted(op.name for op in bwd if op.kind == "elementwise_bwd" and not op.attrs.get("aten_fallback"))
    assert plain == ["final_norm.mean.bwd"]
