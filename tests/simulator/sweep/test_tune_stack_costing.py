"""`tune --framework` prices a plan as `predict --framework` does: the stack profile's costing (attention kernel,
eager dispatch and module calls, all-reduce kernel, fp8 scaling, MaxText's segment ids) applies to both, so a
configuration's step in `tune` is `predict`'s step of the same plan. `tune` once costed every plan with the engine's
defaults whatever its stack: an FSDP2 Llama 3 8B step on 8 H100s 0.948 s in `tune` where `predict` says 1.069 s,
11% faster, enough to pick FSDP2 over a Megatron 3D plan that `predict` finds faster."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from simulator.parallel.stacks import profile_options
from simulator.sweep.tune_model import ModelProblem
from workloads.parallel import ParallelPlan


def _predict(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(("framework", "sharding", "flag"), [("fsdp2", "fsdp", "--fsdp"),
                                                              ("megatron-core", "zero1", "--zero")])
def test_tune_step_is_predicts_step(capsys: pytest.CaptureFixture[str], framework: str, sharding: str,
                                    flag: str) -> None:
    problem = ModelProblem("llama-2-7b", ["dgx-h100"], batch=(1,), dtypes=("bf16",), fusion=(False,), seq=1024,
                           train=True, recompute=("full",), tp=(1,), pp=(1,), dp=(8,), global_batch=8,
                           frameworks=(framework,), sharding=(sharding,))
    config = {"hardware": "dgx-h100", "batch": 1, "dtype": "bf16", "fusion": False, "recompute": "full", "tp": 1,
              "pp": 1, "dp": 8, "framework": framework, "sharding": sharding, "interleave": 1}
    got = problem.evaluate(config)
    argv = ["llama-2-7b", "--train", "--hardware", "dgx-h100", "--dp", "8", flag, *(["1"] if flag == "--zero" else []),
            "--framework", framework, "--recompute", "full", "--seq", "1024", "--global-batch", "8", "--no-fusion"]
    d = _predict(capsys, *argv)
    assert got["latency_s"] == pytest.approx(d["latency_s"], rel=1e-12)
    assert got["memory_per_device"] == pytest.approx(d["memory_per_device_bytes"], rel=1e-12)


def test_predict_maxtext_takes_the_profiles_segment_ids(capsys: pytest.CaptureFixture[str]) -> None:
    """MaxText passes decoder segment ids to every attention (profile field ``segment_ids``): `predict --framework
    maxtext` costs their mask as `validate --dataset training` does (profile_options), 1.5032 s for Llama 2 7B FSDP
    over a v5e-16: 1.3758 s with the gradient reductions overlapped (maxtext-sc; without the segment ids 1.3689 s
    before the splash backward's logsumexp slice was priced, which adds 0.0035 s to both),
    plus the reductions XLA:TPU's defaults run serial (0.1361 s more exposed, less the 0.0077 s of HBM contention and
    the 0.0010 s of VPU sums they no longer cause beside the compute)."""
    d = _predict(capsys, "llama-2-7b", "--train", "--hardware", "v5e-16", "--fsdp", "--dp", "16", "--framework",
                 "maxtext", "--recompute", "full", "--seq", "2048", "--microbatch", "2")
    assert d["provenance"]["options"]["tpu_segment_ids"] is True
    r = evaluate_plan("llama-2-7b", load_hardware("v5e-16"), ParallelPlan(dp=16, fsdp=True, microbatch=2),
                      profile_options("maxtext"), train=True, seq=2048, recompute="full", framework="maxtext")
    assert d["latency_s"] == pytest.approx(r.latency_s, rel=1e-12)
    assert d["latency_s"] == pytest.approx(1.5032, abs=5e-5)
    sc = evaluate_plan("llama-2-7b", load_hardware("v5e-16"), ParallelPlan(dp=16, fsdp=True, microbatch=2),
                       profile_options("maxtext-sc"), train=True, seq=2048, recompute="full", framework="maxtext-sc")
    assert sc.latency_s == pytest.approx(1.3758, abs=5e-5)
