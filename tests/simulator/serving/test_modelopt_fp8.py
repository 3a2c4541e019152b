"""fp8 TensorRT-LLM and NIM rows as their ModelOpt fp8 checkpoints run: fp8 linear layers and KV cache, the LM head,
embeddings, norms, residual stream and all-reduces in bf16 (``ServeConfig.weight_dtype`` / ``kv_dtype``)."""

from __future__ import annotations

import pytest

from simulator.calibration.serving_validation import serving_precision
from simulator.serving import ServeConfig, ServingError, simulate_serving

#: Llama 3.1 8B by hand: per layer QKV 4096 x 6144, O 4096 x 4096, gate/up 4096 x 28672, down 14336 x 4096.
LINEAR_PER_LAYER = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096
#: Embedding and LM head (128256 x 4096 each), bf16.
VOCAB_PARAMS = 2 * 128256 * 4096
#: 32 layers x 2 RMSNorms + the final one, 4096 weights each, bf16.
NORM_PARAMS = 65 * 4096
#: One fp32 scale per output channel of every fp8 linear layer.
SCALES_PER_LAYER = 6144 + 4096 + 28672 + 4096


def _kv(**kw):
    cfg = ServeConfig(framework="trt-llm", arrival="burst", lengths="fixed:in=128,out=4", requests=2, **kw)
    return simulate_serving("llama-3.1-8b", "hgx-h200", cfg).summary["kv_cache"]


def test_rows_map_to_the_modelopt_scheme():
    want = {"dtype": "bf16", "weight_dtype": "fp8", "kv_dtype": "fp8"}
    assert serving_precision("nim", "fp8_e4m3") == want
    assert serving_precision("tensorrt-llm", "fp8_e4m3") == want
    assert serving_precision("tensorrt-llm", "bf16") == {"dtype": "bf16"}
    assert serving_precision("vllm", "fp8_e4m3") == {"dtype": "fp8_e4m3"}


def test_weights_and_cache_by_hand():
    """fp8 linear layers (1 B) + bf16 vocabulary and norms (2 B) + fp32 scales: 9,086,705,664 B on one H200,
    where the whole graph in fp8 holds the 8,030,261,248 parameters at 1 B; the cache stays fp8 (16 x 64 KiB)."""
    hand = 32 * LINEAR_PER_LAYER + 2 * (VOCAB_PARAMS + NORM_PARAMS) + 4 * 32 * SCALES_PER_LAYER
    assert hand == 9_086_705_664
    kv = _kv(dtype="bf16", weight_dtype="fp8", kv_dtype="fp8")
    assert kv["weights_bytes_per_device"] == pytest.approx(hand, rel=1e-6)
    assert kv["bytes_per_block_per_device"] == 16 * 2 * 32 * 8 * 128 == 2**20
    whole = _kv(dtype="fp8_e4m3")
    assert whole["weights_bytes_per_device"] == pytest.approx(8_030_261_248, rel=1e-6)
    assert whole["bytes_per_block_per_device"] == 2**20
    assert kv["blocks"] < whole["blocks"]


@pytest.mark.parametrize("field, bad", [("weight_dtype", "fp9"), ("kv_dtype", "int4")])
def test_bad_precision_is_located(field, bad):
    with pytest.raises(ServingError, match=rf"{field}: unsupported dtype; got '{bad}'; expected one of"):
        simulate_serving("llama-3.1-8b", "hgx-h200", ServeConfig(requests=2, **{field: bad}))


def test_cli_flags_reach_the_run(capsys):
    import json

    from simulator.cli import main

    base = ["serve", "llama-3.1-8b", "--hardware", "hgx-h200", "--framework", "trt-llm", "--arrival", "burst",
            "--lengths", "fixed:in=128,out=4", "--requests", "2", "--dtype", "bf16"]
    assert main([*base, "--weight-dtype", "fp8", "--kv-dtype", "fp8", "--json"]) == 0
    kv = json.loads(capsys.readouterr().out)["kv_cache"]
    assert kv["bytes_per_block_per_device"] == 2**20
    assert main([*base, "--weight-dtype", "fp9"]) == 2
    assert capsys.readouterr().err.strip().startswith("nodeperf: error: weight_dtype: unsupported dtype; got 'fp9'")


def test_nim_rows_run_the_executor_default_admission():
    """The 27 NIM rows: TensorRT-LLM's executor default GUARANTEED_NO_EVICT (no policy stated) and genai-perf's
    100 s windows; fp8 as the ModelOpt scheme."""
    from simulator.calibration.serving_validation import DEFAULT_SERVING_DATASET, read_serving_csv

    nim = [r for r in read_serving_csv(DEFAULT_SERVING_DATASET) if r.engine == "nim"]
    assert len(nim) == 27
    assert all(dict(r.settings) == {"admission": "no-evict", "measurement_interval_s": 100.0} for r in nim)
    assert {serving_precision(r.engine, r.dtype)["weight_dtype"] for r in nim} == {"fp8"}
