"""A bad ``efficiency.flash2_causal_fwd_ratio`` table in a device file, through the real CLI: one located line naming
the row, what was got and what was expected; exit 2 (the bad-input contract of tests/bad_input/contract.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hwmodels.catalog import DEVICES_DIR
from tests.bad_input.contract import cli_exit, one_line

H100 = (DEVICES_DIR / "h100-sxm5-80gb.toml").read_text(encoding="utf-8")
FIELD = "efficiency.flash2_causal_fwd_ratio"


def _with_table(value: str, source: str = 'source = "test figure"') -> str:
    return H100 + f"\n[efficiency]\nflash2_causal_fwd_ratio = {{ value = {value}, {source} }}\n"


CASES = [
    ("unsorted", _with_table("[[4096, 0.87], [2048, 0.82]]"),
     (f"{FIELD}[1]: sequence length not increasing", "got 2048 after 4096", "expected the rows sorted")),
    ("repeated", _with_table("[[2048, 0.82], [2048, 0.87]]"), (f"{FIELD}[1]: sequence length not increasing",)),
    ("zero-length", _with_table("[[0, 0.82]]"), (f"{FIELD}[0]: sequence length", "got 0",
                                                 "expected a positive whole number")),
    ("fractional-length", _with_table("[[2048.5, 0.82]]"), (f"{FIELD}[0]: sequence length", "got 2048.5")),
    ("zero-ratio", _with_table("[[2048, 0.0]]"), (f"{FIELD}[0]: ratio", "got 0.0", "expected a number in (0, 1]")),
    ("negative-ratio", _with_table("[[2048, -0.5]]"), (f"{FIELD}[0]: ratio", "got -0.5")),
    ("ratio-above-one", _with_table("[[2048, 1.2]]"), (f"{FIELD}[0]: ratio", "got 1.2")),
    ("ratio-as-text", _with_table('[[2048, "0.8"]]'), (f"{FIELD}[0]: ratio", "got '0.8'")),
    ("row-of-three", _with_table("[[2048, 0.82, 1]]"), (f"{FIELD}[0]: expected a row [sequence length, ratio]",)),
    ("empty", _with_table("[]"), (f"{FIELD}: expected a non-empty array of rows", "got []")),
    ("no-source", _with_table("[[2048, 0.82]]", source='note = "x"'), (f"{FIELD}: missing source",)),
    ("bare-array", H100 + "\n[efficiency]\nflash2_causal_fwd_ratio = [[2048, 0.82]]\n",
     (f"{FIELD}: table without a source", "expected { value = [[<sequence length>, <ratio>], ...]")),
    ("bad-scale", H100 + '\n[efficiency]\nflash2_causal_fwd_ratio_scale = { value = 0, source = "x" }\n',
     ("efficiency.flash2_causal_fwd_ratio_scale: must be positive", "got 0")),
]


@pytest.mark.parametrize(("content", "parts"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_flash2_ratio_table(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str,
                                parts: tuple[str, ...]) -> None:
    spec = tmp_path / "dev.toml"
    spec.write_text(content, encoding="utf-8")
    rc, err = cli_exit(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", str(spec))
    line = one_line(rc, err, "dev.toml", *parts)
    assert "Traceback" not in line


def test_a_good_table_in_a_device_file_replaces_the_arch_default(tmp_path: Path) -> None:
    from hwmodels.loader import load_device_file

    spec = tmp_path / "dev.toml"
    spec.write_text(_with_table("[[1024, 0.5], [4096, 0.75]]", 'source = "a test table"'), encoding="utf-8")
    dev = load_device_file(spec)
    assert dev.efficiency.flash2_causal_fwd_ratio == ((1024, 0.5), (4096, 0.75))
    assert dev.source_of(FIELD).source == "a test table"


def test_the_table_cannot_be_overlaid_but_its_scale_can(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    overlay = tmp_path / "cal.toml"
    overlay.write_text('schema = "nodeperf.calibration/1"\nsource = "measured: test"\n[values]\n'
                       '"efficiency.flash2_causal_fwd_ratio" = 0.9\n', encoding="utf-8")
    rc, err = cli_exit(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", "h100-sxm5-80gb",
                       "--calibration", str(overlay))
    one_line(rc, err, "cal.toml", FIELD, "not a number field", "got a tuple")
