"""The vLLM CI 'Performance Benchmark' rows (srv-052 ... 069) as the engine of their builds ran them.

The builds (9513, 9523, 9555) ran vLLM main of about mid-September 2024 (the pipeline's build 4068 ran on
2024-07-07 and build 8532 on 2024-09-04: the time stamps of their UUIDv7 job ids), so the V0 engine with
that version's defaults: no chunked prefill unless max_model_len > 32K and the caller leaves it unset
(benchmark_throughput.py passes False), prompts alone (``Scheduler._schedule_default``), 256 sequences,
and a token budget of max(max_model_len, 2048) (``SchedulerConfig``).
"""

from __future__ import annotations

import datetime
import re

import pytest

from simulator.calibration.serving_validation import engine_profile, read_serving_csv

CI_ROWS = [f"srv-{i:03d}" for i in range(52, 70)]


def _uuid7_day(hex48: str) -> datetime.date:
    return datetime.datetime.fromtimestamp(int(hex48, 16) / 1000, tz=datetime.UTC).date()


_ANCHOR = re.compile(r"build (\d+) (?:ran )?on (\d{4}-\d\d-\d\d) \([^()]*?job id ([0-9a-f]{8})-([0-9a-f]{4})-")


@pytest.mark.parametrize("rid", CI_ROWS)
def test_the_rows_build_dates_follow_from_the_job_ids_they_quote(rid):
    # each row's notes quote two pipeline builds with the UUIDv7 job ids that date them, a build rate and the
    # date of the row's own build (engine_version 'CI build N'): the dates the ids encode are the ones the notes
    # state, and the row's build date is the later anchor plus its build-number distance at that rate
    row = {r.id: r for r in read_serving_csv()}[rid]
    anchors = {int(n): (datetime.date.fromisoformat(d), _uuid7_day(h1 + h2)) for n, d, h1, h2
               in _ANCHOR.findall(row.notes)}
    assert sorted(anchors) == [4068, 8532]
    assert all(stated == decoded for stated, decoded in anchors.values())
    (d4068, _), (d8532, _) = anchors[4068], anchors[8532]
    per_day = (8532 - 4068) / (d8532 - d4068).days
    assert round(per_day) == int(re.search(r"(\d+) builds a day", row.notes).group(1)) == 76  # 75.7
    build = int(re.search(r"CI build (\d+)", row.engine_version).group(1))
    assert build in (9513, 9523, 9555) and f"builds/{build}," in row.source
    m = re.search(rf"so build {build} ran about (\d{{4}}-\d\d-\d\d)", row.notes)
    assert m, f"{rid}: the notes do not date build {build}"
    dated = d8532 + datetime.timedelta(days=round((build - 8532) / per_day))
    assert datetime.date.fromisoformat(m.group(1)) == dated
    # months before the V1 engine's alpha (2025-01-27): the V0 engine, as the profile says
    assert dated < datetime.date(2025, 1, 27)


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
