"""`nodeperf tune`: JSON contract, deterministic output, text report, and bad input as one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_capture import run_cli

ROOT = Path(__file__).resolve().parents[3]
SMALL = ["tune", "gpt2", "--hardware", "h100-sxm5-80gb,a100-sxm4-40gb", "--batch", "1,8", "--dtype", "bf16,fp8",
         "--fusion", "on", "--seq", "128"]


def test_json_contract_and_determinism(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*SMALL, "--constraint", "ttft_s<=1.5 ms", "--json"]
    rc, out, err = run_cli(capsys, argv)
    # the only line on standard error: the two candidates' hourly prices are AWS's and RunPod's (prices.toml)
    assert rc == 0 and err == ("warning: the hourly prices compared come from different providers: a100-sxm4-40gb "
                               "(AWS), h100-sxm5-80gb (RunPod Secure Cloud); a provider's price level is not the "
                               "hardware's (see provider in hwmodels/catalog/prices.toml)\n")
    doc = json.loads(out)
    assert doc["model"] == "gpt2" and doc["objective"] == "latency" and doc["metric"] == "latency_s"
    assert doc["search"] == "exhaustive" and doc["space"]["size"] == 8
    assert doc["best"] and all(set(b) == {"config", "metrics", "cost"} for b in doc["best"])  # h100: a priced device
    assert all(b["cost"]["mode"] == "cloud" and b["cost"]["usd_per_device_hour"] == b["metrics"]["cost_per_hour"]
               for b in doc["best"])
    assert {"latency_s", "ttft_s", "memory_per_device", "capacity", "power_w", "energy_per_sample_j"} <= \
        set(doc["best"][0]["metrics"])
    assert doc["rejected"] and all({"config", "reason"} <= set(r) for r in doc["rejected"])
    lat = [b["metrics"]["latency_s"] for b in doc["best"]]
    assert lat == sorted(lat) and all(x <= 1.5e-3 for x in lat)
    rc2, out2, _ = run_cli(capsys, argv)
    assert rc2 == 0 and out2 == out  # byte-identical


def test_all_rejected_lists_every_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, [*SMALL, "--constraint", "ttft_s<=1 ms", "--json", "--rejected", "1"])
    doc = json.loads(out)
    assert len(doc["rejected"]) == 1 < doc["rejected_total"]
    rc, out, _ = run_cli(capsys, [*SMALL, "--constraint", "ttft_s<=1 ms", "--json", "--all-rejected"])
    doc = json.loads(out)
    assert len(doc["rejected"]) == doc["rejected_total"] == doc["space"]["size"] - doc["feasible"]


def test_text_report(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, [*SMALL, "--constraint", "ttft_s<=1 ms", "--objective", "energy"])
    assert rc == 0
    assert "objective energy (energy_per_sample_j, lower is better)" in out
    assert "Best configurations:" in out and "Rejected neighbours of the best" in out
    assert "misses the SLO ttft_s<=1 ms by" in out
    assert "not supported: a100-sxm4-40gb: compute.tensor_flops_per_s: no rate for dtype 'fp8_e4m3'" in out


def test_no_feasible_configuration_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, [*SMALL, "--constraint", "ttft_s<=1 us"])
    assert rc == 1
    assert "No configuration meets the constraints." in out
    assert "Rejected configurations closest to feasible" in out


def test_70b_fp16_does_not_fit_one_h100(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, ["tune", "llama-2-70b", "--hardware", "h100-sxm5-80gb", "--batch", "1",
                               "--dtype", "fp16", "--fusion", "off", "--seq", "128", "--json"])
    doc = json.loads(out)
    assert rc == 1 and doc["best"] == [] and doc["evaluated"] == 0 and doc["pruned"] == 1
    (r,) = doc["rejected"]
    assert r["stage"] == "pruned before evaluation"
    assert r["reason"].startswith("does not fit: needs 128.") and "has 79.2 GiB" in r["reason"]


def test_systolic_mode(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run_cli(capsys, ["tune", str(ROOT / "studies" / "topologies" / "resnet50.csv"), "--systolic",
                               "--rows", "16,32,64", "--cols", "16,32,64", "--sram-kib", "128,256",
                               "--sram-split", "1:1:1,2:1:1", "--dram-words-per-cycle", "16", "--clock", "1 GHz",
                               "--constraint", "pes<=2048", "--trials", "200", "--json"])
    doc = json.loads(out)
    assert rc == 0 and doc["metric"] == "latency_s" and doc["search"] == "exhaustive"
    best = doc["best"][0]
    assert best["metrics"]["pes"] <= 2048
    assert best["metrics"]["latency_s"] == pytest.approx(best["metrics"]["cycles"] * 1e-9)
    assert set(best["config"]) == {"rows", "cols", "dataflow", "sram_kib", "sram_split"}


@pytest.mark.parametrize(("extra", "needle"), [
    (["--constraint", "ttft<=0.2"], "did you mean 'ttft_s'"),
    (["--constraint", "ttft_s=0.2"], "operator '='"),
    (["--constraint", "ttft_s<=0.2 GiB"], "wrong dimension"),
    (["--constraint", "tpot_s<=0.2"], "metric 'tpot_s' is not produced"),
    (["--objective", "latncy"], "unknown objective 'latncy'"),
    (["--objective", "cost", "--hardware", "mi250x"], "no hourly price for 'mi250x'"),
    (["--devices", "h100-sxm6"], "--hardware 'h100-sxm6'"),
    (["--batch", ""], "empty search space entry"),
    (["--batch", "0"], "not a positive integer"),
    (["--fusion", "maybe"], "--fusion"),
    (["--dtype", "bf17"], "unknown dtype"),
    (["--search", "grid"], "unknown method 'grid'"),
    (["--rows", "8"], "without --systolic"),
    (["--recompute", "full"], "expected --train"),
])
def test_bad_input_is_one_line_exit_2(capsys: pytest.CaptureFixture[str], extra: list[str], needle: str) -> None:
    rc, out, err = run_cli(capsys, [*SMALL, *extra])
    assert rc == 2 and out == ""
    assert err.startswith("nodeperf: error: ") and err.count("\n") == 1, err
    assert needle in err


@pytest.mark.parametrize(("argv", "needle"), [
    (["tune", "gpt2"], "--hardware missing"),
    (["tune", "gpt2", "--hardware", "dgx-h100", "--tp", "3", "--pp", "1", "--dp", "1"], "search space: empty"),
    (["tune", "gemm:m=64,n=64,k=64", "--systolic", "--dram-words-per-cycle", "8", "--objective", "cost"],
     "no price model"),
    (["tune", "gemm:m=64,n=64,k=64", "--systolic"], "--dram-words-per-cycle missing"),
    (["tune", "gemm:m=64,n=64,k=64", "--systolic", "--dram-words-per-cycle", "8", "--hardware", "l4"],
     "is a model-search option"),
    (["tune", "gemm:m=64,n=64,k=64", "--systolic", "--dram-words-per-cycle", "8", "--dataflow", "os,xs"],
     "unknown dataflow 'xs'"),
    (["tune", "gpt3", "--hardware", "h100-sxm5-80gb", "--phase", "generate"], "--input-len and --output-len"),
    (["tune", "gtp2", "--hardware", "h100-sxm5-80gb"], "gpt2"),
])
def test_more_bad_input(capsys: pytest.CaptureFixture[str], argv: list[str], needle: str) -> None:
    rc, out, err = run_cli(capsys, argv)
    assert rc == 2 and out == ""
    assert err.startswith("nodeperf: error: ") and err.count("\n") == 1, err
    assert needle in err


def test_csv_rows_match_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    import csv

    path = tmp_path / "tune.csv"
    argv = [*SMALL, "--constraint", "ttft_s<=1.5 ms"]
    rc, _, _ = run_cli(capsys, [*argv, "--csv", str(path)])
    assert rc == 0
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    doc = json.loads(run_cli(capsys, [*argv, "--json"])[1])
    assert list(rows[0])[:6] == ["rank", "status", "hardware", "batch", "dtype", "fusion"]
    assert {"latency_s", "ttft_s", "memory_per_device_bytes", "reason"} <= set(rows[0])
    assert len(rows) == doc["space"]["size"]  # exhaustive: every configuration visited, one row each
    best = doc["best"][0]
    assert rows[0]["rank"] == "1" and rows[0]["status"] == "ok" and rows[0]["hardware"] == best["config"]["hardware"]
    assert float(rows[0]["latency_s"]) == best["metrics"]["latency_s"]
    assert float(rows[0]["memory_per_device_bytes"]) == best["metrics"]["memory_per_device"]
    assert sum(r["status"] == "ok" for r in rows) == doc["feasible"]
    assert all(r["reason"] for r in rows if r["status"] != "ok")


def test_csv_bad_path_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rc, out, err = run_cli(capsys, [*SMALL, "--csv", str(tmp_path / "missing" / "t.csv")])
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "--csv" in err and "no such folder" in err
