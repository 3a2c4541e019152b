"""MaxText's dropless dispatch as separate XLA passes (``FrameworkProfile.moe_sort_copies``): ``jnp.repeat`` writes
the ``top_k`` copies of every token before the sort's gather reads them, and the unsort gather writes the routed
rows before the float32 weighted sum (src/MaxText/layers/moe.py @ 3eb77db3c, ``RoutedMoE.permute`` /
``unpermute``). Bytes checked by hand on a Mixtral-shaped layer (top-2 of 8 experts, d_model 4096)."""

from __future__ import annotations

import dataclasses

from workloads.frameworks import get_profile
from workloads.training import training_graph
from workloads.zoo.transformer import build, zoo_config

SEQ = 512


def _moe_ops(framework: str, top_k: int | None = None) -> dict[str, object]:
    cfg = dataclasses.replace(zoo_config("mixtral-8x7b"), layers=1)
    if top_k is not None:
        cfg = dataclasses.replace(cfg, top_k=top_k)
    g = training_graph(build(cfg, batch=1, seq=SEQ, phase="train", name="m", framework=framework))
    return {op.name.split("moe.")[-1]: op for op in g.ops if ".moe." in op.name}


def test_maxtext_profiles_set_it_and_gpu_stacks_do_not():
    assert all(get_profile(p).moe_sort_copies for p in ("maxtext", "maxtext-cf", "maxtext-serial"))
    assert not get_profile("megatron-core").moe_sort_copies


def test_repeat_and_unsort_bytes_by_hand():
    ops = _moe_ops("maxtext")
    t, k, d = SEQ, 2, 4096
    rows = t * k * d * 2  # bf16 routed rows: 8 MiB
    rep = ops["repeat_top_k"]
    assert rep.kind == "expand" and rep.outputs[0].shape == (t, k, d)
    assert (rep.bytes_read, rep.bytes_written) == (t * d * 2, rows)
    disp = ops["dispatch"]  # the sort's gather now reads the copies, not the tokens
    assert disp.inputs[0].shape == (t * k, d) and disp.bytes_written == rows
    assert disp.bytes_read == rows + t * k * 4  # the copies and their int32 slots
    uns = ops["unsort"]
    assert uns.kind == "moe_dispatch" and uns.outputs[0].shape == (1, t * k, d)
    assert uns.bytes_written == rows and uns.bytes_read == rows + t * k * 4
    assert ops["combine"].inputs[0] is uns.outputs[0] or ops["combine"].inputs[0].name == uns.outputs[0].name
    # backward: the repeat's copies summed (read every copy), each gather's transpose a gather of the rows
    assert ops["repeat_top_k.bwd"].kind == "reduction" and ops["repeat_top_k.bwd"].bytes_read == rows
    assert ops["unsort.bwd"].kind == "moe_dispatch_bwd" and ops["unsort.bwd"].outputs[0].shape == (t * k, d)
    assert ops["dispatch.bwd"].outputs[0].shape == (t * k, d)


def test_top_1_repeat_is_a_view():
    ops = _moe_ops("maxtext", top_k=1)
    assert "repeat_top_k" not in ops and "unsort" in ops
    assert ops["dispatch"].inputs[0].shape == (SEQ, 4096)


def test_megatron_graph_unchanged():
    ops = _moe_ops("megatron-core")
    assert "repeat_top_k" not in ops and "unsort" not in ops
    assert ops["dispatch"].inputs[0].shape == (SEQ, 4096)


def _tp_moe_ops(framework: str, tp: int = 4) -> dict[str, object]:
    cfg = dataclasses.replace(zoo_config("mixtral-8x7b"), layers=1)
    g = training_graph(build(cfg, batch=1, seq=SEQ, phase="train", name="m", framework=framework, tp=tp,
                             sequence_parallel=True))
    return {op.name.split("moe.")[-1]: op for op in g.ops if ".moe." in op.name}


def test_tensor_parallel_reduce_scatter_before_the_unpermute():
    # MaxText's sparse_matmul psum_scatters the down-projection's routed rows over "tensor" (columns) before
    # unpermute: the unsort and the weighted sum read d / tp columns; the scatter moves the T k rows.
    ops = _tp_moe_ops("maxtext")
    t, k, d, tp = SEQ, 2, 4096, 4
    rs = ops["experts_reduce_scatter"]
    assert rs.kind == "reduce_scatter" and rs.inputs[0].shape == (t * k, d) and rs.outputs[0].shape == (t * k, d // tp)
    uns = ops["unsort"]
    assert uns.inputs[0].shape == (t * k, d // tp) and uns.bytes_written == t * k * (d // tp) * 2
    assert ops["combine"].outputs[0].shape == (t, d // tp)
    assert ops["merge"].outputs[0].shape == (1, t // tp, d)  # the bytes of the sequence-parallel exit


def test_tensor_parallel_megatron_reduces_after_the_combine():
    ops = _tp_moe_ops("megatron-core")
    assert "unsort" not in ops and ops["combine"].outputs[0].shape == (SEQ, 4096)
    assert ops["experts_reduce_scatter"].inputs[0].shape == (1, SEQ, 4096)
