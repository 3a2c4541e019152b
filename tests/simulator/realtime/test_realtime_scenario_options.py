"""A scenario's [options] takes every engine setting of the one translator
(simulator.engines.options.SETTINGS, with its aliases), checks values the way the translator does, and
locates each bad one."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from simulator.engines import options as engine_options
from simulator.realtime.costing import _eval_options
from simulator.realtime.scenario import ScenarioError, load_scenario

BASE = """
name = "opts"
frames = 10
{options}
[[tasks]]
name = "mm"
model = "gemm:m=256,n=256,k=256"
device = "gpu"
rate = "10 Hz"
deadline = "100 ms"
"""


def _scenario(tmp_path: Path, options: str) -> Path:
    p = tmp_path / "s.toml"
    p.write_text(BASE.format(options=f"[options]\n{options}\n" if options else ""))
    return p


def test_every_setting_and_alias_is_a_scenario_option(tmp_path: Path) -> None:
    text = "\n".join(["fusion = \"auto\"", "epilogue_fusion = false", "gemv_generated = false", "norm_fusion = true",
                      "cuda_graphs = true",
                      "power_cap = false", "tf32 = false", "l2_residency = true", "warm_repeats = true",
                      "eager_framework = true",
                      "eager_modules = false", "attention_kernel = \"flash2\"", "conv_layout = \"nchw\"",
                      "all_reduce_kernel = \"vllm-custom\"", "fp8_activation_scale = \"static\"",
                      "fp8_accumulation = \"split\"", "decode_attention = \"per-query-head\"",
                      "tpu_segment_ids = false"])
    assert {line.split(" = ")[0] for line in text.splitlines()} == set(engine_options.SETTINGS)
    opts = _eval_options(load_scenario(_scenario(tmp_path, text)))
    assert (opts.fusion, opts.cuda_graphs, opts.allow_tf32, opts.l2_residency, opts.eager_framework) == \
        (None, True, False, True, True)
    assert (opts.attention_kernel, opts.conv_layout, opts.norm_fusion, opts.all_reduce_kernel) == (
        "flash2", "nchw", True, "vllm-custom")
    assert opts.fp8_activation_scale == "static" and opts.fp8_accumulation == "split"
    assert opts.decode_attention == "per-query-head" and opts.warm_repeats is True
    assert _eval_options(load_scenario(_scenario(tmp_path, "allow_tf32 = false"))).allow_tf32 is False


def test_a_new_setting_needs_no_edit_in_the_scenario_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = {**engine_options.SETTINGS,
                "l2_residency_too": dataclasses.replace(engine_options.SETTINGS["l2_residency"])}
    monkeypatch.setattr(engine_options, "SETTINGS", settings)
    monkeypatch.setattr("simulator.realtime.scenario.SETTINGS", settings)
    assert load_scenario(_scenario(tmp_path, "l2_residency_too = false")).options == {"l2_residency_too": False}


@pytest.mark.parametrize(("line", "message"), [
    ('attention_kernel = "flsh2"', "options.attention_kernel: unknown value; got 'flsh2'; expected one of auto, "
                                    "flash2, flash3, trtllm-fmha; did you mean 'flash2'?"),
    ('all_reduce_kernel = "vllm-custm"', "options.all_reduce_kernel: unknown value; got 'vllm-custm'; expected one "
                                          "of nccl, vllm-custom, trtllm-custom, vllm-custom-2024; did you mean "
                                          "'vllm-custom'?"),
    ("cuda_graphs = 1", "options.cuda_graphs: not a boolean; got 1; expected true or false"),
    ('fusion = "yes"', "options.fusion: not a boolean; got 'yes'; expected true, false or \"auto\""),
    ("l2_residncy = true", "options.l2_residncy: unknown option; got 'l2_residncy'; expected one of fusion, "),
])
def test_bad_options_are_located(tmp_path: Path, line: str, message: str) -> None:
    f = _scenario(tmp_path, line)
    with pytest.raises(ScenarioError) as exc:
        load_scenario(f)
    text = str(exc.value)
    assert f"{f}:" in text and message in text, text
    assert "Traceback" not in text and text.count("\n") == 0, text
