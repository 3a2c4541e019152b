"""Two output options naming one file (``serve --csv out --trace out``, ``predict --csv f --trace ./f``) wrote
it twice, the trace replacing the per-request CSV without a word: one located line and exit 2, nothing written."""

from __future__ import annotations

from tests.bad_input.contract import cli_exit, one_line


def test_serve_csv_and_trace_on_one_file(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--requests", "3",
                       "--csv", "out", "--trace", "./out")
    one_line(rc, err, "--trace ./out: the file --csv writes too", "expected a file of its own for each output")
    assert not (tmp_path / "out").exists()


def test_predict_csv_and_trace_on_one_file(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = cli_exit(capsys, "predict", "gpt2", "--hardware", "h100-sxm5-80gb", "--csv", "f", "--trace", "f")
    one_line(rc, err, "--trace f: the file --csv writes too")


def test_distinct_files_still_written(capsys, tmp_path, monkeypatch) -> None:
    from simulator.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["serve", "llama-2-7b", "--hardware", "h100-sxm5-80gb", "--requests", "3", "--csv", "r.csv",
                 "--trace", "t.json"]) == 0
    assert (tmp_path / "r.csv").read_text().startswith("id,arrival_s") and (tmp_path / "t.json").exists()
