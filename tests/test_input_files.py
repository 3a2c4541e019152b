"""nodeperf.files: the one safe reader every layer uses (regular files only, a size limit, UTF-8, NUL
bytes, TOML nesting), each refusal one located line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hwmodels.loader import read_toml
from hwmodels.spec import SpecError
from nodeperf.files import MAX_NESTING, read_bytes_file, read_text_file, toml_nesting_depth


def test_refuses_what_is_not_a_regular_file_before_reading(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)  # opening it would block for ever
    with pytest.raises(ValueError, match=r"pipe\.toml: not a regular file \(a named pipe\); got '.*pipe\.toml'; "
                                         r"expected a TOML file$"):
        read_text_file(fifo, what="a TOML file")
    with pytest.raises(ValueError, match=r"^/dev/zero: not a regular file \(a character device\)"):
        read_bytes_file("/dev/zero", what="x")
    with pytest.raises(ValueError, match=r": is a folder; got"):
        read_bytes_file(tmp_path, what="x")
    with pytest.raises(ValueError, match=r"^'': empty path; got ''; expected x$"):
        read_bytes_file("", what="x")


def test_symlink_loop_and_broken_link(tmp_path: Path) -> None:
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    os.symlink(b, a)
    os.symlink(a, b)
    with pytest.raises(SpecError, match=r"a\.toml: symbolic link loop; got a link that leads back to itself"):
        read_toml(a)
    c = tmp_path / "c.toml"
    os.symlink(tmp_path / "gone.toml", c)
    with pytest.raises(SpecError, match=r"c\.toml: broken symbolic link; got a link to '.*gone\.toml'"):
        read_toml(c)


def test_size_limit_is_checked_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.csv"
    with open(big, "wb") as fh:
        fh.truncate(3 * 1024 * 1024)
    with pytest.raises(ValueError, match=r"big\.csv: file too large; got 3\.0 MiB; expected x of at most 1\.0 MiB"):
        read_bytes_file(big, what="x", max_bytes=1024 * 1024)


def test_nul_byte_is_located_by_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "m.csv"
    f.write_bytes(b"a,b\n1,2\n3,\x004\n")
    with pytest.raises(ValueError, match=r"m\.csv:3:3: NUL byte in the text; got '\\x00'"):
        read_text_file(f, what="a CSV file")
    assert read_text_file(f, what="a CSV file", allow_nul=True).count("\x00") == 1


def test_toml_nesting_ignores_strings_and_comments() -> None:
    assert toml_nesting_depth('a = [[1], {b = "[[[[["}]  # [[[[[[\nc = \'[[[\'\n[t]\n') == 2
    assert toml_nesting_depth('s = """\n[[[[\n"""\n') == 0
    assert toml_nesting_depth("a = " + "[" * 100 + "]" * 100) == 100


@pytest.mark.parametrize("text", ["a = " + "[" * 5000 + "]" * 5000, "[a]\nb = " + "{x = " * 5000 + "1" + "}" * 5000],
                         ids=["arrays", "inline-tables"])
def test_toml_nested_5000_levels_is_one_located_line(tmp_path: Path, text: str) -> None:
    f = tmp_path / "deep.toml"
    f.write_text(text + "\n", encoding="utf-8")
    with pytest.raises(SpecError, match=rf"deep\.toml: TOML nested too deeply; got 5000 levels of arrays or inline "
                                        rf"tables; expected at most {MAX_NESTING}$"):
        read_toml(f)
