"""Regenerate the README's sample output: run its first command in-process and abridge what it prints.

Usage: ``python docs/readme_sample.py`` prints the abridged output; ``python docs/readme_sample.py
--write`` rewrites the README block between ``<!-- sample-output -->`` and ``<!-- /sample-output -->``.
``tests/test_readme.py`` regenerates the block and compares, so the README cannot go stale.

Abridging keeps the header line, the table header (not its rule), the top :data:`TOP_ROWS` rows and
the first row of each kind in :data:`ALSO_SHOW` further down, a ``...`` line, and the ``Totals``,
``Bound`` and ``Memory`` lines.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
BEGIN, END = "<!-- sample-output -->", "<!-- /sample-output -->"
#: Table rows kept from the top.
TOP_ROWS = 3
#: Op kinds whose first row is kept even below the top rows (the fused attention kernel).
ALSO_SHOW = ("attention",)
_SUMMARY = ("Totals:", "Bound:", "Memory:", "warning:")


def first_command(readme: str) -> list[str]:
    """Arguments of the first ``nodeperf`` command in the README's first ``bash`` block (without ``nodeperf``)."""
    block = re.search(r"```bash\n(.*?)```", readme, re.S)
    if block is None:
        raise ValueError(f"{README.name}: no ```bash block; expected the install-and-run command first")
    for part in re.split(r"&&|\n", block.group(1)):
        words = shlex.split(part)
        if words and words[0] == "nodeperf":
            return words[1:]
    raise ValueError(f"{README.name}: first bash block; got no `nodeperf` command; expected `... && nodeperf predict ...`")


def run_command(argv: list[str]) -> str:
    """What ``nodeperf *argv`` prints, run in this process."""
    from simulator.cli.main import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(argv)
    if rc != 0:
        raise RuntimeError(f"nodeperf {shlex.join(argv)}: exit code {rc}; expected 0")
    return buf.getvalue()


def abridge(output: str) -> str:
    """The README's abridged form of a ``predict`` table (see the module docstring)."""
    lines = output.rstrip("\n").splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("#  op"))
    kind_col = lines[head].index("kind")
    out = [lines[0], "", lines[head]]
    rows = [ln for ln in lines[head + 1:] if re.match(r"\s*\d+\s", ln)]
    seen_kinds: set[str] = set()
    for i, row in enumerate(rows):
        kind = row[kind_col:].split()[0]
        if i < TOP_ROWS or (kind in ALSO_SHOW and kind not in seen_kinds):
            out.append(row)
        seen_kinds.add(kind)
    out.append("  ...")
    out.extend(ln for ln in lines if ln.startswith(_SUMMARY))
    return "\n".join(out) + "\n"


def sample() -> str:
    """The abridged output of the README's first command."""
    return abridge(run_command(first_command(README.read_text(encoding="utf-8"))))


def block(text: str) -> str:
    """What goes between the markers: a ``text`` code fence around ``text``."""
    return f"{BEGIN}\n```text\n{text}```\n{END}"


def current_block(readme: str) -> str:
    """The README's block between the markers (markers included)."""
    m = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), readme, re.S)
    if m is None:
        raise ValueError(f"{README.name}: no {BEGIN} ... {END} block; expected one around the sample output")
    return m.group(0)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write", action="store_true", help="rewrite the README block instead of printing it")
    args = p.parse_args(argv)
    text = sample()
    if not args.write:
        sys.stdout.write(text)
        return 0
    readme = README.read_text(encoding="utf-8")
    new = readme.replace(current_block(readme), block(text))
    if new != readme:
        README.write_text(new, encoding="utf-8")
    print(f"{README.name}: sample output {'updated' if new != readme else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
