"""Reads SCALE-Sim topology CSV files (convolution and GEMM rows) into frozen layer records, with located errors.

Format (SCALE-Sim v3): a header line, then one layer per line, fields separated by commas, an
optional trailing comma:

- convolution: ``name, ifmap_h, ifmap_w, filter_h, filter_w, channels, num_filters, stride``
  (input sizes are the padded extents the windows cover, since SCALE-Sim sizes the output as
  ``ceil((H - R) / stride) + 1``; one stride for both axes);
- GEMM: ``name, M, N, K``.

Either may carry a trailing sparsity field ``N:M``; only dense ``1:1`` is modelled. A layer whose
name contains ``DP`` is a depthwise convolution and is expanded, as SCALE-Sim does, into one
single-channel layer per channel named ``<name>Channel_<i>``. A first line whose second field is
not an integer is the header; SCALE-Sim always drops the first line, so a file without a header
loses its first layer there but not here. Every problem is reported as
``<file>:<line>:<column>: <problem>; got <value>; expected <form>`` (column counted in characters,
from 1), all problems of a file at once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from hwmodels.systolic import ConvView, conv_gemm_view
from nodeperf.errors import NodeperfError
from nodeperf.files import read_bytes_file

__all__ = ["TopologyError", "Layer", "Topology", "parse_topology", "read_topology"]

_CONV_FIELDS = (
    "ifmap height",
    "ifmap width",
    "filter height",
    "filter width",
    "channels",
    "num filters",
    "stride",
)
_GEMM_FIELDS = ("M", "N", "K")
_SPARSITY = re.compile(r"^\s*(\d+)\s*:\s*(\d+)\s*$")
_INT = re.compile(r"^[+-]?\d+$")


class TopologyError(NodeperfError, ValueError):
    """A topology file is malformed; ``problems`` lists every located problem.

    The message is the one located line of a single problem; for several, a count line then the
    first :data:`~hwmodels.spec.MAX_LISTED_PROBLEMS` lines and ``... and N more`` (as hardware specs).
    """

    def __init__(self, problems: list[str], source: str = "topology") -> None:
        from nodeperf.suggest import format_problems

        self.problems = list(problems)
        super().__init__(format_problems(source, self.problems, "topology file"))


@dataclass(frozen=True)
class Layer:
    """One layer of a topology in SCALE-Sim's convolution form (a GEMM is a 1 x K filter).

    Attributes
    ----------
    name
        Layer name as written.
    kind
        ``"conv"`` or ``"gemm"``.
    line
        1-based line number in the file.
    ifmap_h, ifmap_w, filter_h, filter_w, channels, num_filters, stride_h, stride_w
        Convolution geometry (pixels, counts). A GEMM ``M, N, K`` is held as SCALE-Sim holds it:
        ``ifmap = M x K``, ``filter = 1 x K``, one channel, ``N`` filters, stride 1.
    """

    name: str
    kind: str
    line: int
    ifmap_h: int
    ifmap_w: int
    filter_h: int
    filter_w: int
    channels: int
    num_filters: int
    stride_h: int
    stride_w: int

    def view(self) -> ConvView:
        """SCALE-Sim's GEMM view of the layer (see :func:`hwmodels.systolic.conv_gemm_view`)."""
        return conv_gemm_view(
            self.ifmap_h, self.ifmap_w, self.filter_h, self.filter_w, self.channels,
            self.num_filters, self.stride_h, self.stride_w,
        )

    @property
    def ofmap_h(self) -> int:
        """Output height, ``ceil((H - R) / stride) + 1`` as in SCALE-Sim (pixels)."""
        return int(self.view().ofmap_h)

    @property
    def ofmap_w(self) -> int:
        """Output width (pixels)."""
        return int(self.view().ofmap_w)

    @property
    def m(self) -> int:
        """Output pixels per filter (GEMM M)."""
        return int(self.view().m)

    @property
    def n(self) -> int:
        """Filters (GEMM N)."""
        return self.num_filters

    @property
    def k(self) -> int:
        """Window size ``filter_h * filter_w * channels`` (GEMM K)."""
        return self.filter_h * self.filter_w * self.channels

    @property
    def ifmap_words(self) -> int:
        """Distinct input words the windows touch (words)."""
        return int(self.view().ifmap_words)


@dataclass(frozen=True)
class Topology:
    """The layers of one topology file, in file order."""

    source: str
    layers: tuple[Layer, ...]

    def gemm_arrays(self) -> dict[str, np.ndarray]:
        """``m``, ``n``, ``k`` and ``ifmap_words`` of all layers as int64 arrays (file order).

        A field beyond int64 gives object arrays of Python ints (exact; see :mod:`hwmodels.systolic`).
        """
        limit = np.iinfo(np.int64).max
        cols = {
            key: np.array(vals, dtype=np.int64 if max(vals, default=0) <= limit else object)
            for key, vals in ((key, [getattr(layer, key) for layer in self.layers]) for key in (
                "ifmap_h", "ifmap_w", "filter_h", "filter_w", "channels", "num_filters",
                "stride_h", "stride_w",
            ))
        }
        v = conv_gemm_view(**cols)
        return {"m": v.m, "n": v.n, "k": v.k, "ifmap_words": v.ifmap_words}


def _split(line: str) -> list[tuple[str, int]]:
    """Fields of a line with the 1-based character column where each starts."""
    out = []
    start = 0
    for part in line.split(","):
        lead = len(part) - len(part.lstrip())
        out.append((part.strip(), start + lead + 1))
        start += len(part) + 1
    if len(out) > 1 and out[-1][0] == "":
        out.pop()  # trailing comma, as SCALE-Sim writes its files
    return out


def parse_topology(text: str, source: str = "<topology>") -> Topology:
    """Parse SCALE-Sim topology CSV text (see the module docstring for the format).

    Parameters
    ----------
    text
        File contents.
    source
        Name used in error messages (the file path).

    Raises
    ------
    TopologyError
        Listing every malformed row, non-integer or non-positive value, unsupported sparsity and
        filter larger than its input, each as ``<source>:<line>:<column>: ...``.
    """
    problems: list[str] = []
    layers: list[Layer] = []
    seen_first = False
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        fields = _split(raw)
        if not seen_first:
            seen_first = True
            if len(fields) < 2 or not _INT.match(fields[1][0]):
                continue  # header line
        where = f"{source}:{lineno}"
        name, name_col = fields[0]
        if not name:
            problems.append(f"{where}:{name_col}: empty layer name; got ''; expected a name")
            continue
        values = fields[1:]
        if values and _SPARSITY.match(values[-1][0]):
            sp_text, sp_col = values[-1]
            values = values[:-1]
            a, b = (int(x) for x in _SPARSITY.match(sp_text).groups())  # type: ignore[union-attr]
            if a != b:
                problems.append(
                    f"{where}:{sp_col}: structured sparsity is not modelled; got {sp_text!r}; "
                    "expected '1:1' (dense) or no sparsity field"
                )
                continue
        if len(values) == len(_CONV_FIELDS):
            kind, names = "conv", _CONV_FIELDS
        elif len(values) == len(_GEMM_FIELDS):
            kind, names = "gemm", _GEMM_FIELDS
        else:
            col = values[-1][1] if values else name_col
            problems.append(
                f"{where}:{col}: malformed row of layer {name!r}: {len(values)} numeric fields; "
                f"got {raw.strip()!r}; expected 'name, {', '.join(_CONV_FIELDS)}' (convolution) "
                "or 'name, M, N, K' (GEMM)"
            )
            continue
        nums: list[int] = []
        ok = True
        for (txt, col), fname in zip(values, names, strict=True):
            if not _INT.match(txt):
                problems.append(
                    f"{where}:{col}: {fname} of layer {name!r} is not an integer; got {txt!r}; "
                    "expected an integer >= 1"
                )
                ok = False
            elif int(txt) < 1:
                problems.append(
                    f"{where}:{col}: {fname} of layer {name!r} must be positive; got {txt}; "
                    "expected an integer >= 1"
                )
                ok = False
            else:
                nums.append(int(txt))
        if not ok:
            continue
        if kind == "gemm":
            m, n, k = nums
            geom = (m, k, 1, k, 1, n, 1, 1)
        else:
            h, w, fh, fw, c, nf, s = nums
            bad = False
            for (fv, iv, idx, axis) in ((fh, h, 2, "height"), (fw, w, 3, "width")):
                if fv > iv:
                    problems.append(
                        f"{where}:{values[idx][1]}: filter {axis} of layer {name!r} exceeds the "
                        f"input {axis}; got {fv} > {iv}; expected filter {axis} <= ifmap {axis} "
                        "(give the padded input size)"
                    )
                    bad = True
            if bad:
                continue
            geom = (h, w, fh, fw, c, nf, s, s)
        if kind == "conv" and "DP" in name:
            one = (*geom[:4], 1, *geom[5:])
            layers.extend(
                Layer(f"{name}Channel_{i}", kind, lineno, *one) for i in range(geom[4])
            )
        else:
            layers.append(Layer(name, kind, lineno, *geom))
    if not problems and not layers:
        problems.append(f"{source}:1:1: no layers; got an empty topology; expected one layer per line")
    if problems:
        raise TopologyError(problems, source)
    return Topology(source=source, layers=tuple(layers))


def read_topology(path: str | Path) -> Topology:
    """Read a SCALE-Sim topology CSV file.

    Raises
    ------
    FileNotFoundError
        If the file does not exist.
    TopologyError
        If it is malformed (see :func:`parse_topology`).
    """
    p = Path(path)
    if not p.exists() and not p.is_symlink():
        raise FileNotFoundError(f"{p}: topology file not found; got {str(p)!r}; expected a SCALE-Sim "
                                "topology CSV")
    raw = read_bytes_file(p, what="a SCALE-Sim topology CSV file", error=lambda msg: TopologyError([msg]))
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        col = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        raise TopologyError([f"{p}:{line}:{col}: not UTF-8 text; got byte 0x{raw[exc.start]:02x}; expected a "
                             "UTF-8 (or ASCII) CSV file"]) from None
    return parse_topology(text, source=str(p))
