"""``predict --train --framework eager`` with a pipeline plan: every stage is the Hugging Face eager graph (decomposed
attention, ``gelu_new`` op by op, dropout) costed as eager PyTorch launches it, the same step
:func:`simulator.parallel.compose.evaluate_plan` gives under the profile's costing; a plan that splits the model
code's layers over ranks is one located line and exit 2."""

from __future__ import annotations

import json

import pytest

from simulator.cli.main import main
from simulator.engines.options import EvalOptions
from simulator.hardware import load_hardware
from simulator.parallel.compose import evaluate_plan
from workloads.frameworks import get_profile
from workloads.parallel import ParallelPlan

_ARGV = ["predict", "gpt2-large", "--hardware", "dgx-h100", "--train", "--pp", "4", "--microbatch", "1",
         "--global-batch", "8", "--seq", "1024", "--dtype", "fp32", "--json"]


def test_eager_with_four_pipeline_stages_runs_and_is_the_plan_of_eager_stage_graphs(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*_ARGV, "--framework", "eager"]) == 0
    got = json.loads(capsys.readouterr().out)
    plan = ParallelPlan(pp=4, microbatch=1, global_batch=8)
    opts = EvalOptions(**get_profile("eager").cost_options())  # the profile's costing, as predict passes it
    ref = evaluate_plan("gpt2-large", load_hardware("dgx-h100"), plan, opts, train=True, seq=1024, dtype="fp32",
                        framework="eager")
    assert got["latency_s"] == pytest.approx(ref.latency_s, rel=1e-12)
    assert main(_ARGV) == 0
    default = json.loads(capsys.readouterr().out)
    # the s x s scores written and read by five kernels per layer, and eight gelu_new kernels, against one fused
    # attention kernel and one activation: the eager step is dearer, by about what one device's step shows (+39%)
    assert 1.2 * default["latency_s"] < got["latency_s"] < 1.6 * default["latency_s"]


def test_eager_with_tensor_parallelism_is_one_located_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [a if a != "--pp" else "--tp" for a in _ARGV]
    argv[argv.index("--tp") + 1] = "2"
    assert main([*argv, "--framework", "eager"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "gpt2-large: --framework eager with a parallel plan" in err and "got tp 2" in err and "expected tp 1" in err
