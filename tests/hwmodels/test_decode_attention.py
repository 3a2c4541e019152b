"""Decode attention streams its K/V cache at a measured rate of its own (efficiency.decode_attention_*).

The catalog's figures are medians over TensorRT-LLM's generation-attention kernels as aiconfigurator
measured them (the derivation rows of hwmodels/measurements/decode_attention_kernels.csv); vLLM's and
SGLang's kernels on the same GPUs are rows the catalog never saw.
"""

from __future__ import annotations

import csv
import dataclasses
import statistics
from pathlib import Path

import numpy as np
import pytest

from hwmodels import gpu
from hwmodels.catalog import load_device
from simulator.calibration.measurements import MeasurementSet
from simulator.calibration.predict import GraphCache
from simulator.hardware import known_devices
from workloads.ir import Role
from workloads.resolve import load_workload

DATA = Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "decode_attention_kernels.csv"


def _kv_fraction(row: dict[str, str]) -> float:
    """Achieved K/V bytes per second of a row over the device's peak read bandwidth."""
    spec = dict(item.split("=") for item in row["workload"].split(":", 1)[1].split(","))
    width = 1 if row["kv_dtype"] else 2
    kv_bytes = int(spec["b"]) * int(spec["s_kv"]) * int(spec["kv_heads"]) * int(spec["d"]) * 2 * width
    return kv_bytes / float(row["median_s"]) / load_device(row["device"]).main_memory.read_bandwidth_bytes_per_s


def test_catalog_figures_are_the_medians_of_their_rows():
    rows = [r for r in csv.DictReader(DATA.open(encoding="utf-8")) if r["notes"].startswith("derivation")]
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        assert "kv_heads=32" in r["workload"]  # derived from the 32-KV-head rows only
        groups.setdefault((r["device"], r["kv_dtype"]), []).append(_kv_fraction(r))
    assert set(groups) == {("h100-sxm5-80gb", ""), ("h100-sxm5-80gb", "fp8_e4m3"), ("h200-sxm-141gb", ""),
                           ("h200-sxm-141gb", "fp8_e4m3"), ("b200", ""), ("b200", "fp8_e4m3"), ("l40s", ""),
                           ("l40s", "fp8_e4m3"), ("a100-sxm4-80gb", "")}
    for (name, kv), fr in groups.items():
        eff = load_device(name).efficiency
        field = eff.decode_attention_fp8_bandwidth_fraction if kv else eff.decode_attention_bandwidth_fraction
        assert field == pytest.approx(statistics.median(fr), abs=5e-4), (name, kv)
    # the published figures: H100 16-bit 0.904 (17 rows), 8-bit 0.751 (11 rows)
    assert len(groups[("h100-sxm5-80gb", "")]) == 17 and len(groups[("h100-sxm5-80gb", "fp8_e4m3")]) == 11


def test_fallbacks_where_a_device_has_no_figure():
    t4 = load_device("t4")  # no decode-attention measurement: the streaming figure
    p = gpu.gpu_params(t4, "fp16")
    assert gpu.decode_attention_fraction(p, 2) == t4.efficiency.dram_bandwidth_fraction
    assert gpu.decode_attention_fraction(p, 1) == t4.efficiency.dram_bandwidth_fraction
    a100 = load_device("a100-sxm4-80gb")  # a 16-bit figure and no 8-bit one: the 16-bit figure for both
    p = gpu.gpu_params(a100, "bf16")
    assert gpu.decode_attention_fraction(p, 2) == 0.785 == gpu.decode_attention_fraction(p, 1)
    h100 = gpu.gpu_params(load_device("h100-sxm5-80gb"), "bf16")
    assert (gpu.decode_attention_fraction(h100, 2), gpu.decode_attention_fraction(h100, 1)) == (0.904, 0.751)
    # a hand-built parameter set without the fields streams at dram_fraction
    bare = dataclasses.replace(h100, decode_dram_fraction=None, decode_fp8_dram_fraction=None)
    assert gpu.decode_attention_fraction(bare, 1) == h100.dram_fraction
    # arrays of hardware variants (sweeps): a 0 entry means "no figure", element by element
    dev = load_device("h100-sxm5-80gb")
    eff = dataclasses.replace(dev.efficiency, decode_attention_bandwidth_fraction=np.array([0.0, 0.9]))
    swept = gpu.gpu_params(dataclasses.replace(dev, efficiency=eff), "bf16")
    assert np.allclose(swept.decode_dram_fraction, [dev.efficiency.dram_bandwidth_fraction, 0.9])


def test_decode_kernel_streams_at_its_figure_and_prefill_does_not():
    p = gpu.gpu_params(load_device("h100-sxm5-80gb"), "bf16")
    # decode: batch 64, 32 heads, 4095 cached tokens, head_dim 128: DRAM-bound at 0.904 x 3.35 TB/s
    e = gpu.attention(64, 32, 32, 1, 4095, 128, 128, p, in_bytes=2.0, kernel="flash3")
    kv_bytes = 64 * 4095 * 32 * 128 * 2 * 2
    assert e.dram_bytes >= kv_bytes
    assert e.memory_s == pytest.approx(e.dram_bytes / (3.35e12 * 0.904), rel=1e-9)
    assert e.time_s == pytest.approx(kv_bytes / (3.35e12 * 0.904), rel=0.02)
    assert dict(e.details)["decode"] is True
    # the same keys read by a 2048-query prefill: not a decode kernel, dram_fraction applies to its DRAM term
    e2 = gpu.attention(1, 32, 32, 2048, 2048, 128, 128, p, in_bytes=2.0, kernel="flash3", causal=True)
    assert dict(e2.details)["decode"] is False
    faster = dataclasses.replace(p, decode_dram_fraction=0.99, decode_fp8_dram_fraction=0.99)
    assert gpu.attention(1, 32, 32, 2048, 2048, 128, 128, faster, in_bytes=2.0, kernel="flash3",
                         causal=True).time_s == e2.time_s


def test_fp8_cache_streams_at_the_8_bit_figure():
    dev = load_device("h100-sxm5-80gb")
    g16 = load_workload("attention:b=64,h=32,s=1,d=128,s_kv=4095,kv_cache=1", dtype="bf16")
    g8 = load_workload("attention:b=64,h=32,s=1,d=128,s_kv=4095,kv_cache=1", dtype="bf16", kv_dtype="fp8_e4m3")
    from simulator.engines.analytical import evaluate

    t16 = evaluate(g16, dev).totals.latency_s
    t8 = evaluate(g8, dev).totals.latency_s
    kv = 64 * 4095 * 32 * 128 * 2
    # half the bytes, at 0.751 instead of 0.904 of 3.35 TB/s (plus Q/O, partial sums, a launch)
    assert t16 == pytest.approx(kv * 2 / (3.35e12 * 0.904), rel=0.03)
    assert t8 == pytest.approx(kv / (3.35e12 * 0.751), rel=0.03)


def test_micro_attention_kv_cache_flag():
    g = load_workload("attention:b=2,h=32,s=1,d=128,s_kv=1024,kv_heads=8,kv_cache=1", dtype="bf16",
                      kv_dtype="fp8_e4m3")
    q, k, v = g.ops[0].inputs
    assert (k.role, v.role) == (Role.KV_CACHE, Role.KV_CACHE)
    assert (q.dtype.value, k.dtype.value, v.dtype.value) == ("bf16", "fp8_e4m3", "fp8_e4m3")
    with pytest.raises(ValueError, match=r"kv_cache; got kv_cache=1 with bwd=1"):
        load_workload("attention:b=2,h=32,s=1,d=128,kv_cache=1,bwd=1")
    with pytest.raises(ValueError, match=r"kv_cache; got '2'"):
        load_workload("attention:b=2,h=32,s=1,d=128,kv_cache=2")
    with pytest.raises(ValueError, match=r"--kv-dtype: the graph has no KV cache"):  # K/V without the flag
        load_workload("attention:b=2,h=32,s=1,d=128,s_kv=64", dtype="bf16", kv_dtype="fp8_e4m3")


@pytest.fixture(scope="module")
def kernel_rows() -> list[dict]:
    from simulator.calibration.kernel_validation import validate_kernels

    return validate_kernels({"decode attention": DATA})["rows"]


def _errors(rows: list[dict], role: str) -> dict[tuple[str, str], list[float]]:
    out: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        if r["role"] == role:
            out.setdefault((r["device"], r["kv_dtype"] or "bf16"), []).append(abs(r["error_pct"]))
    return out


def test_model_reproduces_the_kernels_its_figures_come_from(kernel_rows):
    errs = _errors(kernel_rows, "derivation")
    mape = {k: float(np.mean(v)) for k, v in errs.items()}
    # achieved at the time of writing: A100 8.5% (its rows span 0.58-0.86 of peak), L40S 8-bit 12%, the rest 1-5%
    assert max(mape.values()) < 13.0, mape
    assert float(np.mean([e for v in errs.values() for e in v])) < 6.0


def test_other_stacks_decode_kernels_unseen_by_the_catalog(kernel_rows):
    errs = _errors(kernel_rows, "cross-check")
    allv = [e for v in errs.values() for e in v]
    # vLLM and SGLang on H100, H200, B200, L40S and A100 (385 rows): 16-bit within a few percent except
    # SGLang's A100 kernels (29-34% faster predicted than measured), 8-bit 1-20%
    assert len(allv) > 300
    assert float(np.mean(allv)) < 9.0
    h100_16 = float(np.mean(errs[("h100-sxm5-80gb", "bf16")]))
    assert h100_16 < 3.0


def test_a_micro_row_keeps_its_precision_columns(tmp_path):
    # regression: a measurement row naming a micro-workload dropped weight_dtype / kv_dtype silently
    f = tmp_path / "m.csv"
    f.write_text("id,category,workload,dtype,kv_dtype,device,median_s\n"
                 "r1,attention,\"attention:b=2,h=32,s=1,d=128,s_kv=512,kv_cache=1\",bf16,fp8_e4m3,h100-sxm5-80gb,1e-4\n"
                 "r2,attention,\"attention:b=2,h=32,s=1,d=128,s_kv=512\",bf16,fp8_e4m3,h100-sxm5-80gb,1e-4\n",
                 encoding="utf-8")
    ms = MeasurementSet.load(f, devices=known_devices())
    graphs = GraphCache()
    k = graphs.get(ms[0]).ops[0].inputs[1]
    assert (k.role, k.dtype.value) == (Role.KV_CACHE, "fp8_e4m3")
    with pytest.raises(ValueError, match=r"m\.csv:3: workload: .*--kv-dtype: the graph has no KV cache"):
        graphs.get(ms[1])  # K/V that are not a cache: one located error, not a silent 16-bit prediction


def test_files_may_say_no_figure_but_not_a_fraction_above_one(tmp_path):
    from hwmodels.loader import load_device_file
    from hwmodels.paths import SweepPathError, with_overrides
    from hwmodels.spec import SpecError

    src = (Path(__file__).resolve().parents[2] / "hwmodels" / "catalog" / "devices" / "h200-sxm-141gb.toml")
    text = src.read_text(encoding="utf-8")
    bad = tmp_path / "h200.toml"
    bad.write_text(text.replace("decode_attention_fp8_bandwidth_fraction = { value = 0.571",
                                "decode_attention_fp8_bandwidth_fraction = { value = 1.571"), encoding="utf-8")
    with pytest.raises(SpecError, match=r"decode_attention_fp8_bandwidth_fraction: fraction above 1"):
        load_device_file(bad)
    none = tmp_path / "h200b.toml"
    none.write_text(text.replace("decode_attention_fp8_bandwidth_fraction = { value = 0.571",
                                 "decode_attention_fp8_bandwidth_fraction = { value = 0"), encoding="utf-8")
    assert load_device_file(none).efficiency.decode_attention_fp8_bandwidth_fraction == 0.0
    dev = load_device("h200-sxm-141gb")
    assert with_overrides(dev, {"efficiency.decode_attention_bandwidth_fraction": 0.0}) is not None
    with pytest.raises(SweepPathError, match="fraction above 1|expected"):
        with_overrides(dev, {"efficiency.decode_attention_bandwidth_fraction": 1.2})
