"""MaxText int8 (AQT ``config_v3``) rounds the output gradient of every backward GEMM stochastically: a uniform
noise tensor of the gradient's shape, fp32, per backward GEMM, written by a random-bit generator op and read by
the quantising cast; forward and recomputed GEMMs and the weights have none."""

from __future__ import annotations

import dataclasses

from simulator.engines.analytical import EvalOptions, evaluate
from simulator.hardware import load_hardware
from workloads import precision
from workloads.dtypes import DType
from workloads.ir import OpGraph
from workloads.parallel import ParallelPlan, plan_graphs
from workloads.precision import STOCHASTIC_ROUNDING
from workloads.zoo.transformer import zoo_config

CFG = dataclasses.replace(zoo_config("llama-3-8b"), layers=1)


def _graph(recipe: str) -> OpGraph:
    return plan_graphs(CFG, ParallelPlan(), train=True, seq=256, fp8_linears=recipe, recompute="full")[0].graph


def test_int8_is_the_stochastically_rounded_recipe() -> None:
    assert STOCHASTIC_ROUNDING == ("int8",)


def test_each_backward_gemm_rounds_its_output_gradient_with_its_own_noise() -> None:
    g = _graph("int8")
    noise = [op for op in g.ops if op.attrs.get("rng") == "rng_bit_generator"]
    bwd = [op for op in g.ops if op.kind == "matmul" and ".bwd_" in op.name and op.attrs.get("compute_dtype") == "int8"]
    fwd = [op for op in g.ops if op.kind == "matmul" and op.attrs.get("compute_dtype") == "int8"
           and ".bwd_" not in op.name and "@recompute" not in op.name]
    assert fwd and len(bwd) == len(noise) == 2 * len(fwd)  # an input- and a weight-gradient GEMM per linear
    assert sorted(op.name.rsplit(".noise_", 1)[0] for op in noise) == sorted(op.name for op in bwd)
    for op in noise:
        assert op.kind == "expand" and op.inputs[0].numel == 1 and op.outputs[0].dtype is DType.FP32
        (cast,) = [c for c in g.ops if op.outputs[0] in c.inputs]
        assert cast.attrs["op"] == "cast" and cast.outputs[0].dtype is DType.INT8
        assert cast.inputs[0].shape == op.outputs[0].shape and cast.inputs[0].role.value != "weight"
    # down projection (1, 256, 14336) @ (14336, 4096): the input gradient GEMM rounds dy (1, 256, 4096),
    # the weight gradient GEMM its flattened copy (256, 4096); the weight and the activation are not rounded
    by_name = {op.name: op for op in noise}
    assert by_name["layers.0.mlp.down.bwd_a.noise_0"].outputs[0].shape == (1, 256, 4096)
    assert by_name["layers.0.mlp.down.bwd_b.noise_1"].outputs[0].shape == (256, 4096)
    assert not any(n.startswith(("layers.0.mlp.down@", "layers.0.mlp.down.noise")) for n in by_name)


def test_other_recipes_round_to_nearest() -> None:
    assert not any(op.attrs.get("rng") == "rng_bit_generator" for op in _graph("rowwise").ops)


def test_noise_bytes_written_and_read_on_a_tpu(monkeypatch) -> None:
    # the generator writes 4 bytes per gradient element (and reads its 4-byte state) and the cast reads them
    # besides its own traffic:
    # mlp.down's output gradient (256 tokens x 4096) -> 4 x 1,048,576 = 4,194,304 bytes each way
    hw = load_hardware("tpu-v6e")

    def records() -> dict:
        return {r.name: r for r in evaluate(_graph("int8"), hw, EvalOptions(fusion=True)).records}

    rec = records()
    monkeypatch.setattr(precision, "STOCHASTIC_ROUNDING", ())
    plain = records()
    for gemm, i in (("layers.0.mlp.down.bwd_a", 0), ("layers.0.mlp.down.bwd_b", 1)):
        assert rec[f"{gemm}.noise_{i}"].dram_bytes == 4 * 256 * 4096 + 4 and f"{gemm}.noise_{i}" not in plain
        assert rec[f"{gemm}.cast_{i}"].dram_bytes - plain[f"{gemm}.cast_{i}"].dram_bytes == 4 * 256 * 4096
        assert rec[f"{gemm}.cast_{1 - i}"].dram_bytes == plain[f"{gemm}.cast_{1 - i}"].dram_bytes


def test_int8_linears_run_under_a_jax_stack_only(capsys) -> None:
    # AQT is a JAX library: MaxText's profiles and the generic XLA program keep the noise; a GPU training stack
    # (Transformer Engine's fp8/fp4 recipes, torchao's Float8Linear) is refused with one located line, exit 2
    import pytest

    from simulator.cli.main import main
    from workloads.parallel import PlanError

    for fw in ("", "maxtext", "maxtext-cf", "xla"):  # a noise per backward GEMM of each linear: two per forward
        g = plan_graphs(CFG, ParallelPlan(), train=True, seq=256, fp8_linears="int8", framework=fw)[0].graph
        fwd = sum(op.kind == "matmul" and op.attrs.get("compute_dtype") == "int8" and ".bwd_" not in op.name
                  and "@recompute" not in op.name for op in g.ops)
        assert fwd in (4, 7) and sum(op.attrs.get("rng") == "rng_bit_generator" for op in g.ops) == 2 * fwd
    for fw in ("megatron-core", "fsdp2"):
        with pytest.raises(PlanError, match=rf"^fp8_linears int8: --framework {fw} does not run this recipe; got "
                                            r"'int8' \(MaxText's AQT int8\); expected one of "):
            plan_graphs(CFG, ParallelPlan(), train=True, seq=256, fp8_linears="int8", framework=fw)
    assert main(["predict", "llama-3-8b", "--hardware", "dgx-h100", "--train", "--dp", "8", "--microbatch", "1",
                 "--seq", "1024", "--fp8-linears", "int8", "--framework", "megatron-core"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--fp8-linears int8: --framework megatron-core does not run this recipe" in err[0]
