"""``serve`` reads its arrival trace twice (the run, then the shortfall warning): the same text at the same path is
parsed once and handed out read-only; a changed file is parsed again."""

from __future__ import annotations

import pytest

from simulator.serving import arrivals
from simulator.serving.arrivals import read_trace


def test_same_text_parsed_once_changed_text_again(tmp_path, monkeypatch) -> None:
    f = tmp_path / "t.csv"
    f.write_text("arrival_s,input_len,output_len\n0,10,2\n1.5,20,3\n", encoding="utf-8")
    first = read_trace(str(f))
    calls = []
    real = arrivals.csv.reader
    monkeypatch.setattr(arrivals.csv, "reader", lambda *a, **k: calls.append(1) or real(*a, **k))
    again = read_trace(str(f))
    assert again is first and calls == []  # no second parse
    with pytest.raises(ValueError):
        again[0][0] = 5.0  # read-only: a caller cannot change what the next one gets
    # same size, same path, different text: parsed again
    f.write_text("arrival_s,input_len,output_len\n0,10,2\n2.5,20,3\n", encoding="utf-8")
    changed = read_trace(str(f))
    assert calls == [1] and changed[0].tolist() == [0.0, 2.5] and changed[1].tolist() == [10, 20]
