"""An inference pass beyond a RoPE model's stated context (``predict --seq``, ``--context``, a plan's ``--seq``,
``serve``'s requests) is one located line and exit 2 naming the limit, where it is stated and, when the zoo has
one, a variant whose context holds it; a learned position table was the only bound before, so ``predict
llama-2-7b --seq 100000`` ran silently. A training step is not bounded by it (long-context training: the
training dataset's 262,144-token context-parallel runs of Llama 3.1)."""

from __future__ import annotations

import pytest

from tests.bad_input.contract import cli_exit, one_line
from workloads.resolve import load_workload

H100 = ("--hardware", "h100-sxm5-80gb")
LLAMA2 = ("expected at most 4096 (max_positions of transformers.toml models.llama-2-7b; source: Touvron et al. 2023, "
          "'Llama 2', Table 1 and Section 2.2)")
LLAMA3 = "(max_positions of transformers.toml models.llama-3-8b; source: Meta Llama 3 model card and HF " \
         "meta-llama/Meta-Llama-3-8B config.json)"
VARIANT = "; did you mean 'llama-3.1-8b' (the same architecture, context 131072)?"


@pytest.mark.parametrize(("argv", "parts"), [
    (("predict", "llama-2-7b", *H100, "--seq", "100000"),
     ("model 'llama-2-7b': seq 100000 exceeds its context; got 100000 positions", LLAMA2,
      "; a training step (--train) may run longer; did you mean 'llama-3.1-8b' (context 131072) or 'llama-3.1-70b' "
      "(context 131072) or 'llama-3.1-405b' (context 131072)?")),
    (("predict", "llama-2-7b", *H100, "--phase", "decode", "--context", "100000"),
     ("model 'llama-2-7b': decode context 100000 exceeds its context", LLAMA2, "did you mean 'llama-3.1-8b' (context 131072) or")),
    (("predict", "llama-3-8b", *H100, "--seq", "10000"), ("model 'llama-3-8b': seq 10000 exceeds its context", LLAMA3, VARIANT)),
    (("predict", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "2", "--seq", "8192"),
     ("model 'llama-2-7b': seq 8192 exceeds its context", LLAMA2,
      "did you mean 'llama-3-8b' (context 8192) or 'llama-3-70b' (context 8192) or 'llama-3.1-8b' (context 131072)?")),
    (("predict", "llama-3-8b", *H100, "--phase", "generate", "--input-len", "9000", "--output-len", "10"),
     ("generate: 9000 prompt + 10 output tokens; got 9010 tokens; expected at most the model's context of 8192",
      LLAMA3, VARIANT)),
    (("serve", "llama-3-8b", *H100, "--lengths", "fixed:in=9000,out=100"),
     ("request 0: 9000 prompt + 100 output tokens; got 9100 tokens; expected at most the model's context of 8192",
      LLAMA3, VARIANT)),
])
def test_inference_beyond_a_rope_context_is_one_line(capsys, argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *argv)
    one_line(rc, err, *parts)


def test_up_to_the_context_and_training_beyond_it_build() -> None:
    assert load_workload("llama-2-7b", seq=4096).meta["seq"] == 4096
    assert load_workload("llama-2-7b", phase="decode", context=4096).meta["context"] == 4096
    assert load_workload("llama-3.1-8b", seq=10000).meta["seq"] == 10000  # the long-context variant offered
    step = load_workload("llama-2-7b", seq=8192, train=True)  # a training step sets the length it trains
    assert step.meta["seq"] == 8192


def test_a_config_json_names_its_own_limit(tmp_path) -> None:
    import json

    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
           "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000,
           "max_position_embeddings": 1024, "rms_norm_eps": 1e-5}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    with pytest.raises(ValueError, match=r"seq 2048 exceeds its context; got 2048 positions; expected at most 1024 "
                                         r"\(max_positions of its config \(max_position_embeddings of a config.json, times the "
                                         r"factor of a linear, dynamic or yarn rope_scaling\)\)"):
        load_workload(str(path), seq=2048)


def _llama_config(tmp_path, **extra):
    import json

    cfg = {"model_type": "llama", "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
           "num_hidden_layers": 2, "vocab_size": 1000, **extra}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    return path


@pytest.mark.parametrize(("mpe", "rope_scaling", "limit"), [
    # Llama 3.1 8B's config.json: max_position_embeddings 131072 already includes the llama3 scaling (factor 8 of
    # an original 8192); vLLM applies no factor to llama3 / longrope
    (131072, {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}, 131072),
    # Qwen2.5's YaRN block (its model card): 32768 x 4 = 131072, as vLLM derives max_model_len
    (32768, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    # GPT-OSS: yarn over original_max_position_embeddings 4096 x 32 = 131072 (its stated max_position_embeddings)
    (131072, {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}, 131072),
    (4096, {"type": "linear", "factor": 2.0}, 8192),
    (4096, {"type": "dynamic", "factor": 2.0}, 8192),
    (4096, {"rope_type": "default"}, 4096),
    (4096, None, 4096),
])
def test_rope_scaling_sets_the_context_of_a_config_json(tmp_path, mpe, rope_scaling, limit) -> None:
    path = _llama_config(tmp_path, max_position_embeddings=mpe, rope_scaling=rope_scaling)
    assert load_workload(str(path), seq=limit).meta["seq"] == limit
    with pytest.raises(ValueError, match=rf"got {limit + 1} positions; expected at most {limit} "):
        load_workload(str(path), seq=limit + 1)


@pytest.mark.parametrize(("rope_scaling", "parts"), [
    ({"rope_type": "yarnn", "factor": 4.0},
     ("config.json: rope_scaling.rope_type: unknown RoPE scaling type; got \"yarnn\"; expected one of default, ",
      "did you mean 'yarn'?")),
    ({"type": "linear", "factor": 0},
     ("config.json: rope_scaling.factor: not a positive number; got 0; expected a positive number",)),
    ({"type": "dynamic"}, ("config.json: rope_scaling.factor: missing; got null; expected a positive number",)),
    ({"type": "linear", "factor": -2.0}, ("rope_scaling.factor: not a positive number; got -2.0",)),
    ("yarn", ('config.json: rope_scaling: not an object; got "yarn"',)),
])
def test_bad_rope_scaling_is_one_located_line(capsys, tmp_path, rope_scaling, parts) -> None:
    path = _llama_config(tmp_path, max_position_embeddings=4096, rope_scaling=rope_scaling)
    rc, err = cli_exit(capsys, "predict", str(path), *H100, "--seq", "128")
    one_line(rc, err, *parts)



@pytest.mark.parametrize(("mpe", "rope_parameters", "limit"), [
    # transformers v5 writes the scaling as rope_parameters (with rope_theta inside); vLLM @ 18ec662 reads it
    # with the v4 rule: Qwen2.5's YaRN block, 32768 x 4
    (32768, {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
             "original_max_position_embeddings": 32768}, 131072),
    (131072, {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, 131072),
    (4096, {"rope_type": "default", "rope_theta": 10000.0}, 4096),
    (4096, {"rope_theta": 10000.0}, 4096),
    # one object per layer type: the largest context is the model's (vLLM derives one limit for every type)
    (262144, {"full_attention": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 10000000.0,
                                 "original_max_position_embeddings": 262144},
              "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, 524288),
    (8192, {"full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}, 8192),
])
def test_rope_parameters_set_the_context_of_a_transformers_v5_config(tmp_path, mpe, rope_parameters, limit) -> None:
    path = _llama_config(tmp_path, max_position_embeddings=mpe, rope_parameters=rope_parameters)
    assert load_workload(str(path), seq=limit).meta["seq"] == limit
    with pytest.raises(ValueError, match=rf"got {limit + 1} positions; expected at most {limit} "):
        load_workload(str(path), seq=limit + 1)


def test_rope_scaling_takes_precedence_over_rope_parameters(tmp_path) -> None:
    """A config holding both (a v4 file re-saved by hand) is read as transformers v4 reads it: ``rope_scaling``."""
    path = _llama_config(tmp_path, max_position_embeddings=4096, rope_scaling={"type": "linear", "factor": 2.0},
                         rope_parameters={"rope_type": "linear", "factor": 4.0})
    assert load_workload(str(path), seq=8192).meta["seq"] == 8192
    with pytest.raises(ValueError, match=r"got 8193 positions; expected at most 8192 "):
        load_workload(str(path), seq=8193)


@pytest.mark.parametrize(("rope_parameters", "parts"), [
    ({"rope_type": "yarnn", "factor": 4.0},
     ('config.json: rope_parameters.rope_type: unknown RoPE scaling type; got "yarnn"; expected one of default, ',
      "did you mean 'yarn'?")),
    ({"full_attention": {"rope_type": "linear", "factor": 0}},
     ("config.json: rope_parameters.full_attention.factor: not a positive number; got 0; expected a positive number",)),
    ([1, 2], ("config.json: rope_parameters: not an object; got [1, 2]",)),
])
def test_bad_rope_parameters_are_one_located_line(capsys, tmp_path, rope_parameters, parts) -> None:
    path = _llama_config(tmp_path, max_position_embeddings=4096, rope_parameters=rope_parameters)
    rc, err = cli_exit(capsys, "predict", str(path), *H100, "--seq", "128")
    one_line(rc, err, *parts)


def test_the_default_decode_context_sits_at_a_rope_limit() -> None:
    """A decode step's new token sits at position ``context``; the RoPE bound stays ``context <= max_positions``
    (one loose) because the zoo's and a plan's default decode context is the default ``seq``, which sits on the
    limit of these models, and tests pin predictions recorded there (docs/serving.md)."""
    from hwmodels.catalog import load_system
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan

    assert load_workload("llama-3-8b", phase="decode").meta["context"] == 8192
    assert load_workload("llama-2-7b", phase="decode").meta["context"] == 4096
    dgx, tp2 = load_system("dgx-h100"), ParallelPlan(tp=2)
    default = evaluate_plan("llama-2-7b", dgx, tp2, phase="decode")
    assert default.latency_s == evaluate_plan("llama-2-7b", dgx, tp2, phase="decode", context=4096).latency_s
    assert default.latency_s != evaluate_plan("llama-2-7b", dgx, tp2, phase="decode", context=4095).latency_s
