"""Trace times with a UTC offset (``2023-11-16T18:15:46+02:00``, ``...Z``) are read as the instants they name,
without a warning on standard error: numpy converts an offset to UTC but warned ("no explicit representation of
timezones available for np.datetime64", with the path of this repository's source file), around the summary
and inside a --json output's stream."""

from __future__ import annotations

import warnings

from simulator.serving.arrivals import read_trace


def test_offsets_are_instants_and_silent(tmp_path) -> None:
    f = tmp_path / "tz.csv"
    # 18:15:46 at +02:00 is 16:15:46 UTC; 17:15:47 UTC is 3601 s later; 17:15:48Z one second after that
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16T18:15:46+02:00,374,44\n"
                 "2023-11-16T17:15:47+00:00,12,109\n2023-11-16T17:15:48Z,5,6\n", encoding="utf-8")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        times, ins, outs = read_trace(str(f))
    assert times.tolist() == [0.0, 3601.0, 3602.0]
    assert ins.tolist() == [374, 12, 5] and outs.tolist() == [44, 109, 6]


def test_azure_times_keep_their_fraction(tmp_path) -> None:
    f = tmp_path / "az.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                 "2023-11-16 18:15:50.9951690,396,109\n", encoding="utf-8")
    times, _, _ = read_trace(str(f))
    assert abs(times[1] - 4.314579) < 1e-6  # 50.9951690 - 46.6805900
