"""The README stays true: its sample output is what the tool prints, its Python example runs, its commands parse."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import shlex
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _sample_module():
    spec = importlib.util.spec_from_file_location("readme_sample", REPO_ROOT / "docs" / "readme_sample.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _block_after(marker: str, lang: str) -> str:
    m = re.search(re.escape(marker) + r"\s*```" + lang + r"\n(.*?)```", _readme(), re.S)
    assert m, f"README.md: no ```{lang} block after {marker}"
    return m.group(1)


def test_sample_output_is_current():
    mod = _sample_module()
    assert mod.current_block(_readme()) == mod.block(mod.sample()), (
        "README.md: the sample output is stale; regenerate it with: python docs/readme_sample.py --write")


def test_sample_is_abridged_from_the_real_output():
    mod = _sample_module()
    argv = mod.first_command(_readme())
    assert argv[:2] == ["predict", "llama-2-7b"]
    full = mod.run_command(argv).splitlines()
    short = mod.abridge("\n".join(full)).splitlines()
    assert short[0] == full[0] and short[-3].startswith("Totals: latency") and short[-1].startswith("Memory: ")
    assert [ln for ln in short if ln not in full] == ["  ..."]  # every other line is printed verbatim
    rows = [ln for ln in short if re.match(r"\s+\d+\s", ln)]
    assert len(rows) >= mod.TOP_ROWS and any(" attention " in ln for ln in rows)


def test_python_api_example_runs(monkeypatch):
    pytest.importorskip("pandas")
    code = _block_after("<!-- python-api -->", "python")
    assert "import nodeperf as npf" in code and "to_dataframe()" in code
    monkeypatch.chdir(REPO_ROOT)  # the example names a file relative to the repository root
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md:python-api", "exec"), {"__name__": "readme_example"})
    text = out.getvalue()
    assert re.search(r"^\d+\.\d\d ms, \d+\.\d\d J, fits in memory: True$", text, re.M), text
    assert "discrete-event" in text and "GEMMs: MAPE" in text


def _command_lines() -> list[list[str]]:
    section = _readme().split("## Command line", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    block = block.replace("\\\n", " ")  # a command continued on the next line
    lines = [ln.split("#", 1)[0] for ln in block.splitlines()]
    return [shlex.split(ln) for ln in lines if ln.strip()]


def test_command_line_examples_parse():
    from simulator.cli.main import build_parser

    lines = _command_lines()
    assert ["nodeperf", "--version"] in lines
    assert any(ln[:2] == ["nodeperf", "predict"] and ln[2].endswith(".json") for ln in lines)  # a saved graph
    parser = build_parser()
    for words in lines:
        assert words[0] == "nodeperf", words
        if words[1:] == ["--version"]:
            continue
        args = parser.parse_args(words[1:])
        assert callable(args.func), words


def test_test_command_installs_the_test_extra():
    cmd = _block_after("<!-- test-command -->", "bash")
    assert "pip install -e '.[test]'" in cmd and cmd.rstrip().endswith("python -m pytest -q")


def test_readme_is_a_five_minute_read():
    """Under 250 lines: the two commands, what it answers, one line per capability, one accuracy line per group,
    the map; the long form lives in docs/ and is linked."""
    text = _readme()
    assert len(text.splitlines()) < 250
    assert text.index("pip install -e . && nodeperf predict") < text.index("<!-- test-command -->") < 1500
    assert "python3 -m venv .venv" in text.split("```bash", 1)[0]  # the venv step comes before the first command
    for doc in ("docs/accuracy.md", "docs/overview.md"):
        assert f"]({doc})" in text, doc
    table = _readme().split("## Accuracy", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in table.splitlines() if ln.startswith("| ") and not ln.startswith("| group")]
    assert len(rows) >= 8 and all(re.search(r"\| \d[\d,]* \| (\d+\.\d%|exact) \|", r) for r in rows), rows


def test_relative_links_resolve():
    """Every relative link of the README, docs/ and the study READMEs names a file that exists."""
    files = [README, *sorted((REPO_ROOT / "docs").glob("*.md")), *sorted((REPO_ROOT / "studies").rglob("README.md"))]
    broken = []
    for f in files:
        for m in re.finditer(r"\]\(([^)\s]+)\)", f.read_text(encoding="utf-8")):
            target = m.group(1).split("#", 1)[0]
            if target and not re.match(r"[a-z]+:", target) and not (f.parent / target).exists():
                broken.append(f"{f.relative_to(REPO_ROOT)}: {m.group(1)}")
    assert len(files) > 20 and not broken, broken
