"""The vLLM CI 'Performance Benchmark' rows (srv-052 ... 069) as the engine of their builds ran them.

The builds (9513, 9523, 9555) ran vLLM main of about mid-September 2024 (the pipeline's build 4068 ran on
2024-07-07 and build 8532 on 2024-09-04: the time stamps of their UUIDv7 job ids), so the V0 engine with
that version's defaults: no chunked prefill unless max_model_len > 32K and the caller leaves it unset
(benchmark_throughput.py passes False), prompts alone (``Scheduler._schedule_default``), 256 sequences,
and a token budget of max(max_model_len, 2048) (``SchedulerConfig``).
"""

from __future__ import annotations

import datetime

import pytest

from simulator.calibration.serving_validation import engine_profile, read_serving_csv

CI_ROWS = [f"srv-{i:03d}" for i in range(52, 70)]


def _uuid7_day(hex48: str) -> datetime.date:
    return datetime.datetime.fromtimestamp(int(hex48, 16) / 1000, tz=datetime.UTC).date()


def test_build_dates_from_the_pipeline_job_ids():
    # build 4068: job id 01908bf6-e6e6-... (public benchmark notes; the vLLM README linked the build in July 2024);
    # build 8532: job id 0191bbbf-c603-... (the artifact link in vllm-project/vllm issue #8176)
    d4068, d8532 = _uuid7_day("01908bf6e6e6"), _uuid7_day("0191bbbfc603")
    assert (d4068, d8532) == (datetime.date(2024, 7, 7), datetime.date(2024, 9, 4))
    per_day = (8532 - 4068) / (d8532 - d4068).days
    assert per_day == pytest.approx(75.7, abs=0.1)
    # build 9555 about 13 days after 8532, four months before the V1 engine's alpha (2025-01-27)
    assert d8532 + datetime.timedelta(days=round((9555 - 8532) / per_day)) == datetime.date(2024, 9, 18)


@pytest.mark.parametrize("rid", CI_ROWS)
def test_ci_rows_run_v0_with_its_defaults(rid):
    from simulator.serving.iteration import resolve_config

    row = {r.id: r for r in read_serving_csv()}[rid]
    settings = dict(row.settings)
    assert engine_profile(row.engine, row.engine_version) == "vllm-v0"
    assert settings["mixed_prefill"] is False and settings["max_num_seqs"] == 256
    # SchedulerConfig without chunked prefill: max(max_model_len, 2048), max_model_len = the model's positions
    assert settings["max_batched_tokens"] == max(resolve_config(row.model)[0].max_positions, 2048)
    assert settings["max_batched_tokens"] == {"llama-3-70b": 8192, "llama-3.1-8b": 131072,
                                              "mixtral-8x7b": 32768}[row.model]
