"""The published serving measurements (hwmodels/measurements/published_serving.csv) and their reader."""

from __future__ import annotations

import csv
import importlib.util
import re
from collections import Counter

import pytest

from simulator.calibration.serving_validation import (
    COLUMNS,
    DEFAULT_SERVING_DATASET,
    METRICS,
    OPTIONAL_COLUMNS,
    ServingDataError,
    predicted_metric,
    read_serving_csv,
    validate_serving,
)

_HEADER = ",".join(COLUMNS)
_GOOD = ("r1,vllm,0.6.0,llama-3-8b,a100-sxm4-80gb,1,1,1,bf16,poisson:qps=4,\"fixed:in=128,out=128\",100,,,vllm,"
         "ttft_p50_s,0.03,s,some paper table 2,,2024")


def _file(tmp_path, *lines: str):  # type: ignore[no-untyped-def]
    f = tmp_path / "s.csv"
    f.write_text("\n".join(lines) + "\n")
    return f


def test_shipped_rows_are_cited_and_cover_every_metric_kind() -> None:
    rows = read_serving_csv()
    assert len(rows) >= 25
    assert {r.engine for r in rows} >= {"vllm", "sglang", "tensorrt-llm"}
    kinds = {r.metric.split("_")[0] for r in rows}
    assert kinds >= {"ttft", "tpot", "output", "requests"}
    for r in rows:
        assert re.search(r"https?://|github|@ [0-9a-f]{7}", r.source), r.id
        assert r.engine_version and r.date, r.id


def test_shipped_rows_name_catalog_hardware_and_zoo_models() -> None:
    from hwmodels.cost import catalog_device_names
    from simulator.hardware import load_hardware
    from workloads.zoo import list_models

    zoo = {m.name for m in list_models()}
    systems = {r.system for r in read_serving_csv()}
    for s in systems:
        spec = load_hardware(s)
        assert spec is not None, s
    assert {r.model for r in read_serving_csv()} <= zoo
    assert "h100-sxm5-80gb" in catalog_device_names()


def test_shipped_values_are_the_printed_numbers() -> None:
    rows = {r.id: r for r in read_serving_csv()}
    by_source = Counter(r.source.split(",")[0] for r in rows.values())
    assert len(by_source) >= 4  # four publications at least
    # SGLang README 'Online benchmark results', Llama 3.1 8B on 1 x A100, RPS 4: median TTFT 31.98 ms, TPOT 13.17 ms
    assert rows["srv-001"].value == pytest.approx(0.03198) and rows["srv-001"].metric == "ttft_p50_s"
    assert rows["srv-002"].value == pytest.approx(0.01317) and rows["srv-002"].metric == "tpot_p50_s"
    # every ms-printed row keeps the printed number in its notes
    for r in rows.values():
        m = re.search(r"printed ([0-9.]+) ms", r.notes)
        if m:
            assert r.value == pytest.approx(float(m.group(1)) / 1000.0), r.id


def test_file_on_disk_has_exactly_the_columns() -> None:
    with open(DEFAULT_SERVING_DATASET, newline="") as fh:
        header = next(csv.reader(fh))
    assert tuple(header) == COLUMNS + OPTIONAL_COLUMNS


def test_good_row_reads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = _file(tmp_path, _HEADER, _GOOD)
    (r,) = read_serving_csv(f)
    assert (r.id, r.tp, r.requests, r.max_num_seqs, r.value, r.line) == ("r1", 1, 100, None, 0.03, 2)


@pytest.mark.parametrize(("edit", "needle"), [
    (("vllm,0.6.0", "vlm,0.6.0"), ":2: engine: unknown; got 'vlm'; expected one of vllm, sglang, tensorrt-llm, nim; "
                                   "did you mean 'vllm'?"),
    (("ttft_p50_s", "ttft_p95_s"), ":2: metric: unknown; got 'ttft_p95_s'"),
    ((",0.03,s,", ",0.03,ms,"), ":2: unit: got 'ms'; expected 's' for ttft_p50_s"),
    ((",0.03,s,", ",-1,s,"), ":2: value: not a positive number; got '-1'"),
    (("poisson:qps=4", "poison:qps=4"), ":2: arrival: unknown; got 'poison'"),
    (("a100-sxm4-80gb,1,1,1", "a100-sxm4-80gb,2,1,1"), ":2: n_devices: got 2; expected tp x pp = 1"),
    ((",100,,,", ",zero,,,"), ":2: requests: not an integer; got 'zero'"),
])
def test_bad_rows_are_located(tmp_path, edit, needle) -> None:  # type: ignore[no-untyped-def]
    f = _file(tmp_path, _HEADER, _GOOD.replace(*edit))
    with pytest.raises(ServingDataError) as e:
        read_serving_csv(f)
    assert f"{f}{needle}" in str(e.value)


def test_duplicates_header_and_empty_fields(tmp_path) -> None:  # type: ignore[no-untyped-def]
    f = _file(tmp_path, _HEADER, _GOOD, _GOOD)
    with pytest.raises(ServingDataError, match=r":3: id: duplicate; got 'r1'; expected a unique id \(first on line 2\)"):
        read_serving_csv(f)
    f = _file(tmp_path, _HEADER.replace("engine,", "engin,"), _GOOD)
    with pytest.raises(ServingDataError, match=r":1: header: .*\(missing: engine\)"):
        read_serving_csv(f)
    f = _file(tmp_path, _HEADER, _GOOD.replace("some paper table 2", ""))
    with pytest.raises(ServingDataError, match=r":2: source: empty"):
        read_serving_csv(f)
    with pytest.raises(ServingDataError, match=r"no such file|missing|not found"):
        read_serving_csv(tmp_path / "nope.csv")


def test_predicted_metric_reads_the_summary() -> None:
    summary = {"ttft_s": {"p50": 0.1, "p99": 0.5, "mean": 0.2}, "tpot_s": {"p50": 0.01, "p99": 0.02, "mean": 0.015},
               "itl_s": {"p50": 0.1, "p99": 0.3, "mean": 0.12}, "output_tokens_per_s": 1000.0, "requests_per_s": 5.0}
    got = {m: predicted_metric(summary, m) for m in METRICS}
    assert got == {"ttft_mean_s": 0.2, "ttft_p50_s": 0.1, "ttft_p99_s": 0.5, "tpot_mean_s": 0.015, "tpot_p50_s": 0.01,
                   "tpot_p99_s": 0.02, "itl_mean_s": 0.12, "itl_p50_s": 0.1, "itl_p99_s": 0.3,
                   "output_tokens_per_s": 1000.0, "requests_per_s": 5.0}


_HAS_SERVING = importlib.util.find_spec("simulator.serving") is not None


@pytest.mark.skipif(not _HAS_SERVING, reason="simulator.serving (nodeperf serve) is not in this checkout; the "
                                               "end-to-end serving validation needs it")
def test_end_to_end_on_a_small_subset(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = [r for r in csv.DictReader(open(DEFAULT_SERVING_DATASET, newline=""))
            if r["id"] in ("srv-025", "srv-026", "srv-027")]  # NIM, concurrency 1: TTFT, ITL, throughput of one run
    f = tmp_path / "sub.csv"
    with open(f, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS + OPTIONAL_COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    res = validate_serving(f, max_requests=40)
    assert not res["skipped"] and len(res["rows"]) == 3
    for r in res["rows"]:
        assert r["predicted"] > 0 and r["ape_pct"] == pytest.approx(100 * abs(r["predicted"] - r["measured"])
                                                                    / r["measured"])
    assert set(res["by_engine_metric"]) == {"nim/ttft_mean_s", "nim/tpot_mean_s", "nim/output_tokens_per_s"}


def test_cli_bad_file_is_one_located_line_and_exit_2(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    from simulator.cli.main import main

    f = _file(tmp_path, _HEADER, _GOOD.replace("ttft_p50_s", "ttft_p95_s"))
    assert main(["validate", str(f), "--dataset", "serving"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{f}:2: metric: unknown; got 'ttft_p95_s'" in err[0]
    assert main(["validate", "--dataset", "serving", "--hardware", "h100-sxm5-80gb"]) == 2
    assert "expected none (each row names its system" in capsys.readouterr().err
