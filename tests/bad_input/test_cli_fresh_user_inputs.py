"""The mistakes a new user makes first, each one located line and exit 2 (never a traceback):

- a misspelt device, dtype or TPU slice size, a negative batch, a tensor-parallel degree that does not divide the
  heads, an SLO on a metric that does not exist, an empty or header-only trace, an empty measurement file,
  ``hardware show`` of an unknown name;
- a JSON file (a Chrome trace ``serve --trace`` wrote) handed over as a CSV: the header quoted in the message was
  the whole file on one line (8 kB for a small trace), now cut to a readable length;
- a flag of another tool (``serve --engine vllm``) with no near match named nothing to try; it now names the
  command whose ``--help`` lists the flags;
- flags were matched with their two dashes, which every flag shares: ``--gpus`` was offered ``--phase``,
  ``--num-gpus`` ``--cuda-graphs`` and ``--tensor-parallel-size`` ``--sequence-parallel``.
"""

from __future__ import annotations

import json

import pytest

from tests.bad_input.contract import PREFIX, cli_exit, one_line, several

H100 = ("--hardware", "h100-sxm5-80gb")


@pytest.mark.parametrize(("argv", "parts"), [
    (("predict", "llama-2-7b", "--hardware", "h100"),
     ("device 'h100': unknown name", "did you mean 'h100-pcie-80gb' or 'h100-sxm5-80gb' or 'h100-sxm5-96gb'?")),
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


@pytest.mark.parametrize(("flag", "expected"), [("--lengths", "; expected input_len, output_len"),
                                                ("--arrival", "; expected TIMESTAMP, ContextTokens, GeneratedTokens")])
def test_a_json_file_read_as_a_csv_is_quoted_short(capsys, tmp_path, monkeypatch, flag: str, expected: str) -> None:
    monkeypatch.chdir(tmp_path)
    name = _json_as_csv(tmp_path)
    rc, err = cli_exit(capsys, "serve", "llama-2-7b", *H100, flag, name if flag == "--lengths" else f"trace:{name}")
    line = one_line(rc, err, 't.csv:1: missing column', 'got {"traceEvents": [{"name": "step 0"', "...", expected)
    # the quoted header is 120 characters at most, 117 of the file's and "..."
    assert len(line) < len(PREFIX) + 120 + 200


def test_a_json_file_as_a_measurement_file_lists_short_lines(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    rc, err = cli_exit(capsys, "validate", _json_as_csv(tmp_path), *H100)
    # 4 missing required columns, 800 unknown ones (4 per event) and one line for the columns given twice
    lines = several(rc, err, 805, "t.csv")
    assert lines[0].strip().startswith("t.csv:1: workload: missing required column; got columns {\"traceEvents\"")
    assert all(len(x) < 400 for x in lines), max(lines, key=len)


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
