"""Schema and conversion checks for the published GPU measurement set (hwmodels/measurements)."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from workloads.semantics import ELEMENTWISE_FLOPS

CSV_PATH = (
    Path(__file__).resolve().parents[2] / "hwmodels" / "measurements" / "published_gpu.csv"
)

COLUMNS = [
    "id", "category", "workload", "batch", "seq", "phase", "context", "dtype", "weight_dtype", "kv_dtype", "train",
    "device", "median_s", "metric_reported", "source", "notes",
]
CATEGORIES = {
    "gemm", "bandwidth", "attention", "e2e_cnn", "e2e_bert", "e2e_gpt",
    "e2e_llama_prefill", "e2e_llama_decode", "e2e_other",
}
DEVICES = {
    "v100-sxm2-32gb", "v100-pcie-32gb", "t4", "a100-sxm4-40gb", "a100-sxm4-80gb",
    "a100-pcie-40gb", "a100-pcie-80gb", "h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb",
    "b200", "l4", "l40s", "mi210", "mi250x", "mi300x",
}
DTYPES = {"fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "int8"}
PHASES = {"prefill", "decode", "forward", "train"}
ZOO_MODELS = {
    "resnet18", "resnet50", "resnet101", "resnet152", "vgg16", "mobilenet_v2",
    "efficientnet_b0", "inception_v3", "vit_b16", "vit_l16", "bert_base", "bert_large", "gpt2",
    "gpt2-medium", "gpt2-large", "gpt2-xl", "gpt3-125m", "gpt3-175b", "opt-1.3b", "llama-2-7b",
    "llama-2-13b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "llama-3.1-405b", "mistral-7b",
    "mixtral-8x7b", "switch-base", "gnmt", "dlrm", "sd15-unet",
}
#: keys each micro-workload kind requires and the optional ones it accepts
MICRO_KEYS = {
    "gemm": ({"m", "n", "k"}, {"b"}),
    "attention": ({"b", "h", "s", "d", "causal"}, {"kv_heads", "s_kv", "bwd"}),
    "conv2d": ({"n", "c", "h", "w", "k", "r", "s", "stride", "pad"}, set()),
    "copy": ({"bytes"}, set()),
    "elementwise": ({"numel", "op"}, set()),
    "softmax": ({"rows", "cols"}, set()),
    "layernorm": ({"rows", "cols"}, set()),
}
#: relative tolerance of a recomputed time against the stored median_s
REL_TOL = 5e-3
_TFLOPS_RE = re.compile(r"([\d,]+(?:\.\d+)?)\s*TFLOP", re.IGNORECASE)
#: a plain FLOP/s figure, as the OpenXLA matmul performance table writes it (integer FLOP/s)
_FLOPS_RE = re.compile(r"^(\d+)\s*FLOP/s\b")
#: "tokens/s" is a batch-1 per-user decode rate; "out tok/s" is the aggregate output rate of a batch
_RATE_RE = re.compile(
    r"^([\d,]+(?:\.\d+)?)\s*(img/s|sequences/sec|tokens/s|out tok/s(?:/GPU)?)"
)
_TIME_RE = re.compile(r"^([\d,]+(?:\.\d+)?)\s*(us|ms|s)\b")
_TIME_UNIT_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def _load() -> list[dict[str, str]]:
    with CSV_PATH.open(newline="") as f:
        reader = csv.DictReader(f)
        assert reader.fieldnames == COLUMNS, f"{CSV_PATH}: header {reader.fieldnames}"
        return list(reader)


ROWS = _load()


def _parse_micro(workload: str) -> tuple[str, dict[str, str]]:
    kind, _, body = workload.partition(":")
    fields = dict(item.split("=", 1) for item in body.split(","))
    return kind, fields


def _tflops(metric: str) -> float | None:
    match = _TFLOPS_RE.search(metric)
    if match:
        return float(match.group(1).replace(",", ""))
    plain = _FLOPS_RE.match(metric)
    return int(plain.group(1)) / 1e12 if plain else None


def _row_ids(rows: list[dict[str, str]], keep: Callable[[dict[str, str]], bool]) -> list[str]:
    return [r["id"] for r in rows if keep(r)]


def test_row_and_device_counts() -> None:
    assert len(ROWS) >= 60
    assert len({r["device"] for r in ROWS}) >= 4


def test_ids_unique() -> None:
    ids = [r["id"] for r in ROWS]
    assert len(ids) == len(set(ids))


def test_all_four_groups_present() -> None:
    cats = {r["category"] for r in ROWS}
    assert {"gemm", "bandwidth", "attention"} <= cats
    assert any(c.startswith("e2e_") for c in cats)


@pytest.mark.parametrize("row", ROWS, ids=[r["id"] for r in ROWS])
def test_row_schema(row: dict[str, str]) -> None:
    rid = row["id"]
    assert row["category"] in CATEGORIES, f"{rid}: category {row['category']!r}"
    assert row["device"] in DEVICES, f"{rid}: device {row['device']!r}"
    assert row["dtype"] in DTYPES, f"{rid}: dtype {row['dtype']!r}"
    for c in ("weight_dtype", "kv_dtype"):  # blank: as dtype; else a quantised storage dtype
        assert row[c] in ("", "fp8_e4m3", "int8", "int4"), f"{rid}: {c} {row[c]!r}"
    assert row["phase"] in PHASES | {""}, f"{rid}: phase {row['phase']!r}"
    assert row["train"] in {"", "0", "1"}, f"{rid}: train {row['train']!r}"
    for col in ("batch", "seq", "context"):
        assert row[col] == "" or int(row[col]) > 0, f"{rid}: {col} {row[col]!r}"
    median_s = float(row["median_s"])
    assert math.isfinite(median_s) and median_s > 0.0, f"{rid}: median_s {median_s}"
    assert row["source"].strip(), f"{rid}: empty source"
    assert row["metric_reported"].strip(), f"{rid}: empty metric_reported"
    if row["category"].startswith("e2e_"):
        assert row["workload"] in ZOO_MODELS, f"{rid}: workload {row['workload']!r}"
        assert row["batch"] and row["phase"], f"{rid}: e2e row needs batch and phase"
    else:
        kind, fields = _parse_micro(row["workload"])
        assert kind in MICRO_KEYS, f"{rid}: workload kind {kind!r}"
        required, optional = MICRO_KEYS[kind]
        assert required <= fields.keys() <= required | optional, f"{rid}: keys {sorted(fields)}"
        assert " " not in row["workload"], f"{rid}: spaces in workload"
        if kind == "elementwise":
            assert fields["op"] in ELEMENTWISE_FLOPS, f"{rid}: elementwise op {fields['op']!r}"
    if row["phase"] == "decode":
        known = row["context"] or "context is left blank" in row["notes"]
        assert known, f"{rid}: decode row needs its KV context length or a note saying why not"


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if r["category"] == "gemm"],
    ids=_row_ids(ROWS, lambda r: r["category"] == "gemm"),
)
def test_gemm_time_matches_reported_tflops(row: dict[str, str]) -> None:
    tflops = _tflops(row["metric_reported"])
    if tflops is None:
        pytest.skip("metric is not a TFLOP/s figure")
    _, f = _parse_micro(row["workload"])
    flops = 2.0 * int(f["m"]) * int(f["n"]) * int(f["k"]) * int(f.get("b", "1"))
    expected_s = flops / (tflops * 1e12)
    assert float(row["median_s"]) == pytest.approx(expected_s, rel=REL_TOL)


def _is_tflops_only_attention(r: dict[str, str]) -> bool:
    return r["category"] == "attention" and "ms" not in r["metric_reported"]


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if _is_tflops_only_attention(r)],
    ids=_row_ids(ROWS, _is_tflops_only_attention),
)
def test_attention_time_matches_reported_tflops(row: dict[str, str]) -> None:
    # FlashAttention benchmark count: fwd 4*b*s^2*h*d (halved if causal), bwd 2.5x fwd.
    tflops = _tflops(row["metric_reported"])
    assert tflops is not None
    _, f = _parse_micro(row["workload"])
    b, h, s, d = (int(f[k]) for k in ("b", "h", "s", "d"))
    flops = 4.0 * b * s * s * h * d / (2.0 if f["causal"] == "1" else 1.0)
    if f.get("bwd") == "1":
        flops *= 2.5
    assert float(row["median_s"]) == pytest.approx(flops / (tflops * 1e12), rel=REL_TOL)


def _is_rate_row(r: dict[str, str]) -> bool:
    return r["category"].startswith("e2e_") and _RATE_RE.match(r["metric_reported"]) is not None


@pytest.mark.parametrize(
    "row", [r for r in ROWS if _is_rate_row(r)], ids=_row_ids(ROWS, _is_rate_row)
)
def test_throughput_rows_are_batch_over_rate(row: dict[str, str]) -> None:
    match = _RATE_RE.match(row["metric_reported"])
    assert match is not None
    rate = float(match.group(1).replace(",", ""))
    # a batch-1 "tokens/s" rate is one token per step; other rates count every item of the batch
    per_call_items = 1 if match.group(2) == "tokens/s" else int(row["batch"])
    assert float(row["median_s"]) == pytest.approx(per_call_items / rate, rel=REL_TOL)


def _is_timed_kernel_row(r: dict[str, str]) -> bool:
    # bandwidth rows and GEMM rows whose source prints a kernel time (the hipBLASLt MI300X skinny GEMMs)
    return r["category"] in ("bandwidth", "gemm") and _TIME_RE.match(r["metric_reported"]) is not None


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if _is_timed_kernel_row(r)],
    ids=_row_ids(ROWS, _is_timed_kernel_row),
)
def test_kernel_rows_use_the_printed_kernel_time(row: dict[str, str]) -> None:
    match = _TIME_RE.match(row["metric_reported"])
    assert match is not None
    printed_s = float(match.group(1).replace(",", "")) * _TIME_UNIT_S[match.group(2)]
    assert float(row["median_s"]) == pytest.approx(printed_s, rel=1e-9)


def test_nvbench_bandwidth_matches_read_plus_write_traffic() -> None:
    # B200 fp16 add of 2^28 elements (cccl PR #7391): nvbench printed 6.721 TB/s at 239.643 us;
    # 2 reads + 1 write of 2-byte elements = 3*2*2^28 bytes.
    row = next(
        r for r in ROWS
        if r["device"] == "b200" and r["workload"] == f"elementwise:numel={2**28},op=add"
    )
    moved_bytes = 3 * 2 * 2**28
    assert moved_bytes / float(row["median_s"]) == pytest.approx(6.721e12, rel=1e-3)


def _is_xla_table_row(r: dict[str, str]) -> bool:
    return "matmul_interpolator_data.h" in r["source"]


def test_xla_table_selection_rule_and_dtypes() -> None:
    # README rule: per dtype, b=1 cubes 256..4096 (5), b=1 non-cubic shapes with m,n,k in
    # {1024, 4096} (6), b in {2, 4} cubes 1024..4096 (6): 17 shapes, bf16 and tf32 each.
    rows = [r for r in ROWS if _is_xla_table_row(r)]
    shapes: dict[str, set[tuple[int, int, int, int]]] = {"bf16": set(), "tf32": set()}
    for r in rows:
        _, f = _parse_micro(r["workload"])
        shapes[r["dtype"]].add((int(f.get("b", "1")), int(f["m"]), int(f["n"]), int(f["k"])))
    big = (1024, 4096)
    expected = (
        {(1, s, s, s) for s in (256, 512, 1024, 2048, 4096)}
        | {(1, m, n, k) for m in big for n in big for k in big if len({m, n, k}) > 1}
        | {(b, s, s, s) for b in (2, 4) for s in (1024, 2048, 4096)}
    )
    assert len(rows) == 34
    assert shapes["bf16"] == expected
    assert shapes["tf32"] == expected


def test_xla_table_f32_entries_ran_one_tf32_pass() -> None:
    # An f32 dot run as three bf16 passes (BF16_BF16_F32_X3) is bounded by a third of the dense bf16 peak, even
    # at the boost clock: 989.4 x 1980 / 1830 / 3 = 356.8 TFLOP/s. The table's 4096^3 f32 entry runs at 401.6,
    # within one TF32 pass (494.7 x 1980 / 1830 = 535.2), so its f32 dots ran one TF32 pass: the rows' tf32
    # (docs/accuracy.md, "OpenXLA's matmul table: what its generator ran").
    from hwmodels.catalog import load_device

    dev = load_device("h100-sxm5-80gb")
    boost = dev.clock.boost_hz / dev.clock.sustained_hz
    row = next(r for r in ROWS if _is_xla_table_row(r) and r["dtype"] == "tf32"
               and r["workload"] == "gemm:m=4096,n=4096,k=4096")
    match = _FLOPS_RE.match(row["metric_reported"])
    assert match is not None
    rate = int(match.group(1))
    assert rate == 401589990188086
    assert dev.compute.tensor_flops_per_s["bf16"] * boost / 3 == pytest.approx(356.8e12, rel=1e-3)
    assert rate > dev.compute.tensor_flops_per_s["bf16"] * boost / 3
    assert rate < dev.compute.tensor_flops_per_s["tf32"] * boost


@pytest.mark.parametrize(
    "row",
    [r for r in ROWS if _is_xla_table_row(r)],
    ids=_row_ids(ROWS, _is_xla_table_row),
)
def test_xla_table_rows_imply_whole_nanosecond_kernel_times(row: dict[str, str]) -> None:
    # The generator stores int(2*b*m*n*k * 1e9 / median_kernel_ns): a correctly copied figure
    # gives back a whole number of nanoseconds (the truncation moves it by under 1e-8 ns here).
    match = _FLOPS_RE.match(row["metric_reported"])
    assert match is not None
    _, f = _parse_micro(row["workload"])
    flops = 2 * int(f["m"]) * int(f["n"]) * int(f["k"]) * int(f.get("b", "1"))
    kernel_ns = flops * 1e9 / int(match.group(1))
    assert kernel_ns == pytest.approx(round(kernel_ns), abs=1e-6)
