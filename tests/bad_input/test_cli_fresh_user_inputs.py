"""The mistakes a new user makes first, each one located line and exit 2 (never a traceback):

- a misspelt device, dtype or TPU slice size, a negative batch, a tensor-parallel degree that does not divide the
  heads, an SLO on a metric that does not exist, an empty or header-only trace, an empty measurement file,
  ``hardware show`` of an unknown name;
- a JSON file (a Chrome trace ``serve --trace`` wrote, a ``--json`` output) handed over as a CSV: the header quoted
  in the message was the whole file on one line (8 kB for a small trace), and a measurement file got one "missing
  column" problem per comma; now one line names the file as JSON and the CSV expected;
- a flag of another tool (``serve --engine vllm``) with no near match named nothing to try; it now names the
  command whose ``--help`` lists the flags;
- flags were matched with their two dashes, which every flag shares: ``--gpus`` was offered ``--phase``,
  ``--num-gpus`` ``--cuda-graphs`` and ``--tensor-parallel-size`` ``--sequence-parallel``.
"""

from __future__ import annotations

import json

import pytest

from tests.bad_input.contract import PREFIX, cli_exit, one_line

H100 = ("--hardware", "h100-sxm5-80gb")


@pytest.mark.parametrize(("argv", "parts"), [
    (("predict", "llama-2-7b", "--hardware", "h100"),
     ("hardware 'h100': unknown name", "or a system (dgx-a100", "did you mean 'h100-pcie-80gb' or 'h100-sxm5-80gb' or 'h100-sxm5-96gb'?")),
    # a system's name mistyped: the devices alone were offered, none near it
    (("predict", "llama-2-7b", "--hardware", "dgx-h10", "--tp", "8"),
     ("hardware 'dgx-h10': unknown name", "dgx-h100", "did you mean 'dgx-h100'")),
    (("predict", "llama-2-7b", *H100, "--dtype", "fp15"), ("dtype: unknown dtype; got 'fp15'", "did you mean 'fp16'?")),
    (("predict", "llama-2-7b", *H100, "--batch", "-1"), ("argument --batch: got -1; expected a positive integer",)),
    (("predict", "llama-2-7b", "--hardware", "dgx-h100", "--tp", "3"),
     ("tp 3 does not divide heads=32; expected a divisor (nearest: 2 or 4)",)),
    (("predict", "llama-2-7b", "--hardware", "tpu-v5p-7"),
     ("system 'tpu-v5p-7': slice size; got v5p-7", "did you mean 'tpu-v5p-8' or 'tpu-v5p-16'?")),
    (("predict", "llama-2-7b", "--hardware", "tpu-v5e-256x0"), ("slice count; got x0; expected x1 to x4096",)),
    (("serve", "llama-2-7b", *H100, "--slo", "ttfb_p99<=2 s"),
     ("--slo: unknown metric 'ttfb'", "expected one of ttft, tpot, e2e, itl; did you mean 'ttft'?")),
    (("hardware", "show", "h100x"), ("hardware 'h100x': unknown name", "did you mean 'dgx-h100'")),
    # a mistyped system: the list had named devices only, with no suggestion
    (("serve", "llama-2-7b", "--hardware", "dgx-h10", "--requests", "2"),
     ("hardware 'dgx-h10': unknown name", "or a system (dgx-a100, dgx-b200, dgx-h100", "did you mean 'dgx-h100'?")),
])
def test_first_mistakes_are_one_located_line(capsys, argv: tuple[str, ...], parts: tuple[str, ...]) -> None:
    rc, err = cli_exit(capsys, *argv)
    one_line(rc, err, *parts)


@pytest.mark.parametrize(("text", "argv", "parts"), [
    ("", ("serve", "llama-2-7b", *H100, "--arrival", "trace:t.csv"), ("t.csv:1: empty trace; got no header",)),
    ("ts,prompt_tokens,output_tokens\n", ("serve", "llama-2-7b", *H100, "--arrival", "trace:t.csv"),
     ("t.csv:1: missing column(s) arrival_s, input_len, output_len; got ts, prompt_tokens, output_tokens",)),
    ("", ("serve", "llama-2-7b", *H100, "--lengths", "t.csv"), ("t.csv:1: empty file; got no header",)),
    ("", ("validate", "t.csv", *H100), ("t.csv:1: empty file; got no header",)),
])
def test_empty_input_files(capsys, tmp_path, monkeypatch, text: str, argv: tuple[str, ...],
                           parts: tuple[str, ...]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.csv").write_text(text, encoding="utf-8")
    rc, err = cli_exit(capsys, *argv)
    one_line(rc, err, *parts)


def _json_as_csv(tmp_path) -> str:  # type: ignore[no-untyped-def]
    # a Chrome trace as `serve --trace` writes one: a single line of about 8 kB, read as a CSV header
    events = [{"name": f"step {i}", "ph": "X", "ts": i, "dur": 1.0} for i in range(200)]
    (tmp_path / "t.csv").write_text(json.dumps({"traceEvents": events}), encoding="utf-8")
    assert len((tmp_path / "t.csv").read_text()) > 8000
    return "t.csv"


_NOT_CSV = 't.csv: not a CSV file; got JSON (an object with keys traceEvents); expected '
_MEASUREMENT = "a measurement CSV with the columns workload, device, dtype, median_s, ..."


@pytest.mark.parametrize(("argv", "expected"), [
    (("serve", "llama-2-7b", *H100, "--lengths", "t.csv"), "a CSV file with the columns input_len, output_len"),
    (("serve", "llama-2-7b", *H100, "--arrival", "trace:t.csv"),
     "a CSV file with the columns TIMESTAMP, ContextTokens, GeneratedTokens or arrival_s, input_len, output_len"),
    (("validate", "t.csv", *H100), _MEASUREMENT),
    (("validate", "t.csv"), _MEASUREMENT),  # the file's kind before the missing --hardware
    (("calibrate", "t.csv", *H100), _MEASUREMENT),
    (("validate", "--dataset", "frameworks", "t.csv"), _MEASUREMENT),
    (("validate", "--dataset", "energy", "t.csv"), "an energy-measurement CSV"),
    (("validate", "--dataset", "training", "t.csv"), "a training measurements CSV"),
    (("validate", "--dataset", "serving", "t.csv"), "a serving-measurement CSV"),
])
def test_a_json_file_read_as_a_csv_is_named_json(capsys, tmp_path, monkeypatch, argv: tuple[str, ...],
                                                 expected: str) -> None:
    # before: one "missing column" line per comma of the JSON (805 problems from validate), or the whole file
    # quoted as a header
    monkeypatch.chdir(tmp_path)
    _json_as_csv(tmp_path)
    rc, err = cli_exit(capsys, *argv)
    assert one_line(rc, err) == PREFIX + _NOT_CSV + expected


def test_a_json_array_and_a_cut_json_file_are_named_too(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a.json").write_text('\n [{"workload": "gpt2"}, {"workload": "gpt2"}]\n', encoding="utf-8")
    (tmp_path / "cut.json").write_text('{"traceEvents": [{"name": "step 0", "ph"', encoding="utf-8")
    rc, err = cli_exit(capsys, "validate", "a.json", *H100)
    assert one_line(rc, err) == PREFIX + "a.json: not a CSV file; got JSON (an array of 2 items); expected " + _MEASUREMENT
    rc, err = cli_exit(capsys, "validate", "cut.json", *H100)
    assert one_line(rc, err) == (PREFIX + "cut.json: not a CSV file; got text that starts like JSON ('{'); expected "
                                 + _MEASUREMENT)


@pytest.mark.parametrize(("flag", "hint"), [
    ("--gpus", "; expected a flag of `nodeperf predict`"),
    ("--num-gpus", "; expected a flag of `nodeperf predict`"),
    ("--tensor-parallel-size", "; expected a flag of `nodeperf predict`"),
    ("--bach", "; did you mean '--batch'?"),
    ("--kv-cache-dtype", "; did you mean '--kv-dtype'?"),
    ("--global-batch-size", "; did you mean '--global-batch'?"),
])
def test_flags_of_other_tools_are_matched_on_their_names(capsys, flag: str, hint: str) -> None:
    rc, err = cli_exit(capsys, "predict", "llama-2-7b", *H100, flag, "8")
    line = one_line(rc, err, f"unrecognized arguments: {flag} 8{hint}")
    assert line.endswith(hint + (" (`nodeperf predict --help` lists them)" if "expected" in hint else ""))


def test_an_unknown_flag_without_a_near_match_names_the_command_help(capsys) -> None:
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, "--engine", "vllm")
    one_line(rc, err, "unrecognized arguments: --engine vllm; expected a flag of `nodeperf serve` "
                      "(`nodeperf serve --help` lists them)")
