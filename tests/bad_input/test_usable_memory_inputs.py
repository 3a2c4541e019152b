"""A device file's ``memory.<level>.usable_bytes`` (the runtime's total) that exceeds the level's capacity read
in binary units, or is not a size: one located line, exit 2, through the real CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hwmodels.catalog import DEVICES_DIR
from tests.bad_input.contract import cli_exit, one_line

H100 = (DEVICES_DIR / "h100-sxm5-80gb.toml").read_text(encoding="utf-8")
USABLE = r'^usable_bytes = \{ value = "79\.18 GiB",'

CASES = [
    # 80 GB of stacks hold at most 80 GiB: 81 GiB is more than the runtime can report
    ("above-capacity", 'usable_bytes = { value = "81 GiB",',
     ("memory.hbm.usable_bytes: above the level's capacity", "got 81.00 GiB",
      "expected at most memory.hbm.capacity_bytes 80 GB read in binary units (80 GiB)")),
    ("not-a-size", 'usable_bytes = { value = "79.18 GHz",', ("memory.hbm.usable_bytes", "79.18 GHz")),
    ("negative", 'usable_bytes = { value = "-1 GiB",', ("memory.hbm.usable_bytes: must not be negative",)),
]


@pytest.mark.parametrize(("line", "parts"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_usable_memory(tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str,
                           parts: tuple[str, ...]) -> None:
    text, n = re.subn(USABLE, line, H100, count=1, flags=re.M)
    assert n == 1
    spec = tmp_path / "dev.toml"
    spec.write_text(text, encoding="utf-8")
    rc, err = cli_exit(capsys, "predict", "gemm:m=64,n=64,k=64", "--hardware", str(spec))
    one_line(rc, err, str(spec), *parts)
