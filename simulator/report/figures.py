"""Publication figures of predictions and sweep results: Pareto fronts, heatmaps, rooflines and time breakdowns.

Every function returns a :class:`matplotlib.figure.Figure` built with the object-oriented API (no
``pyplot``, so no global figure registry or current-figure state is touched and nothing leaks
between calls); :func:`save_figure` writes it as PNG, PDF or SVG by the path's extension at 300 dpi
with a tight bounding box, so titles and legends are never clipped. Axis labels carry units: a
column named ``latency_s`` is drawn as ``latency (ms)`` with its values scaled to the prefix that
suits them (the suffix rules are those of the project's naming convention, see :func:`axis_label`).

Bad input raises :class:`FigureError` (a ``ValueError``) with one located message: an unknown
column names the nearest one, an unknown extension the ones supported.

Examples
--------
>>> from simulator import evaluate
>>> from simulator.hardware import load_hardware
>>> from workloads.resolve import load_workload
>>> spec = load_hardware("h100-sxm5-80gb")
>>> report = evaluate(load_workload("gemm:m=4096,n=4096,k=4096"), spec)
>>> fig = roofline_figure(report, spec)
>>> roofs = roofline_roofs(report, spec)
>>> round(roofs["ridge_flop_per_byte"])
295
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from nodeperf.errors import NodeperfError
from simulator.report.report import BOUNDS, CostReport

__all__ = [
    "FigureError",
    "FORMATS",
    "DPI",
    "save_figure",
    "axis_label",
    "unit_scale",
    "pareto_mask",
    "pareto_figure",
    "heatmap_figure",
    "roofline_roofs",
    "roofline_figure",
    "breakdown_figure",
    "serving_figure",
]

#: File formats :func:`save_figure` writes, by extension.
FORMATS: tuple[str, ...] = (".png", ".pdf", ".svg")
#: Resolution of raster output (dots per inch).
DPI = 300
#: Aggregations a heatmap cell may take over the rows that fall in it.
AGGREGATIONS: tuple[str, ...] = ("min", "max", "mean", "median", "sum", "count")
#: Colours of the bound terms, shared by the roofline and the breakdown.
BOUND_COLORS = {"compute": "#1f77b4", "memory": "#d62728", "latency": "#7f7f7f"}
_BOUND_MARKERS = {"compute": "o", "memory": "s", "latency": "^"}
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
            "#17becf")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h")

# Column-name suffixes (the project's unit convention) -> unit of the stored SI value; longest first.
_SUFFIX_UNITS: tuple[tuple[str, str], ...] = (
    ("_bytes_per_s", "B/s"),
    ("_flops_per_s", "FLOP/s"),
    ("_flop_per_byte", "FLOP/B"),
    ("_j_per_byte", "J/B"),
    ("_j_per_flop", "J/FLOP"),
    ("_bytes", "B"),
    ("_flops", "FLOP"),
    ("_pct", "%"),
    ("_hz", "Hz"),
    ("_s", "s"),
    ("_j", "J"),
    ("_w", "W"),
)
# Units that take SI prefixes, with the range of exponents that reads naturally for each.
_PREFIXED = {"s": (-9, 0), "J": (-12, 6), "W": (-3, 6), "B": (0, 15), "B/s": (0, 15), "FLOP": (0, 18),
             "FLOP/s": (0, 18), "Hz": (0, 9), "J/B": (-12, 0), "J/FLOP": (-15, 0)}
_PREFIX = {-15: "f", -12: "p", -9: "n", -6: "µ", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_NICE_NAMES = {"dram": "DRAM traffic", "mfu": "MFU", "ttft": "TTFT", "tpot": "TPOT", "hbm": "HBM", "sram": "SRAM"}


class FigureError(NodeperfError, ValueError):
    """A figure cannot be drawn or written from the input given; the message locates the problem."""


# --------------------------------------------------------------------------------------------
# saving


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path``; the format follows the extension (``.png``, ``.pdf``, ``.svg``).

    Raster output is 300 dpi; the bounding box is tight, so titles, legends and labels are never
    clipped. PDF and SVG carry no creation date, so the same figure gives the same bytes.

    Parameters
    ----------
    fig
        A figure from this module (or any matplotlib figure).
    path
        File to write; its folder must exist.

    Returns
    -------
    Path
        ``path`` as a :class:`~pathlib.Path`.

    Raises
    ------
    FigureError
        An extension other than ``.png``, ``.pdf`` or ``.svg``, or a folder that does not exist.
    """
    import matplotlib

    p = Path(path)
    ext = p.suffix.lower()
    if ext not in FORMATS:
        raise FigureError(f"{p}: unknown figure format; got {ext or 'no extension'!r}; expected a path ending in "
                          f"{', '.join(FORMATS[:-1])} or {FORMATS[-1]}")
    if not p.parent.is_dir():
        raise FigureError(f"{p}: no such folder; got {str(p.parent)!r}; expected an existing folder")
    metadata = {".pdf": {"CreationDate": None, "ModDate": None}, ".svg": {"Date": None}}.get(ext, {})
    with matplotlib.rc_context({"svg.hashsalt": "nodeperf"}):  # stable SVG ids; restored on exit
        fig.savefig(p, format=ext[1:], dpi=DPI, bbox_inches="tight", pad_inches=0.05, metadata=metadata)
    return p


# --------------------------------------------------------------------------------------------
# labels and units


#: Leading components of a sweep store's dotted column names (``hardware.memory.hbm...``), not shown.
_SWEEP_PREFIXES = ("hardware", "workload", "options", "systolic")


def _split_unit(column: str) -> tuple[str, str]:
    """(name without the unit suffix, SI unit) of a column named by the project's convention.

    A sweep store's dotted spec path keeps its last two components: ``hardware.memory.hbm.
    read_bandwidth_bytes_per_s`` is ``hbm read_bandwidth`` in B/s, ``compute.tensor_flops_per_s.bf16``
    is ``tensor bf16`` in FLOP/s (the unit of a per-dtype table is its field's).
    """
    if "." in column:
        parts = [p for p in column.split(".") if p]
        if len(parts) > 1 and parts[0] in _SWEEP_PREFIXES:
            parts = parts[1:]
        name, unit = _split_unit(parts[-1]) if parts else (column, "")
        if not unit and len(parts) > 1:
            prev, prev_unit = _split_unit(parts[-2])
            if prev_unit:
                return f"{prev} {parts[-1]}", prev_unit
        return (f"{parts[-2]} {name}" if len(parts) > 1 else name), unit
    low = column.lower()
    for suffix, unit in _SUFFIX_UNITS:
        if low.endswith(suffix) and len(low) > len(suffix):
            if suffix == "_s" and low.endswith("_per_s"):  # a count per second: tokens_per_s -> tokens/s
                return column[: -len("_per_s")] + "/s", ""
            return column[: -len(suffix)], unit
    return column, ""


def _pretty(name: str) -> str:
    words = [(_NICE_NAMES.get(w.lower(), w)) for w in name.replace("_", " ").split()]
    return " ".join(words)


def unit_scale(values: Sequence[float] | Any, unit: str) -> tuple[float, str]:
    """(divisor, prefixed unit) that puts the largest of ``values`` in [1, 1000) of an SI prefix.

    >>> unit_scale([0.0012, 0.0031], "s")
    (0.001, 'ms')
    >>> unit_scale([3.35e12], "B/s")
    (1000000000000.0, 'TB/s')
    >>> unit_scale([2 * 2**20, 4 * 2**20], "B")
    (1048576.0, 'MiB')
    >>> unit_scale([12.0], "%")
    (1.0, '%')
    """
    if unit not in _PREFIXED:
        return 1.0, unit
    finite = [abs(float(v)) for v in values if v is not None and math.isfinite(float(v)) and float(v) != 0.0]
    if not finite:
        return 1.0, unit
    if unit == "B" and all(v >= 1024 and v % 1024 ** int(math.log(v, 1024) + 1e-9) == 0 for v in finite):
        # capacities (whole KiB, MiB, GiB...): binary prefixes; traffic and other byte counts: decimal
        power = min(5, int(math.log2(max(finite)) // 10))
        return float(1024 ** power), ("", "Ki", "Mi", "Gi", "Ti", "Pi")[power] + unit
    lo, hi = _PREFIXED[unit]
    exp = 3 * math.floor(math.log10(max(finite)) / 3)
    exp = min(hi, max(lo, exp))
    return float(10.0 ** exp), _PREFIX[exp] + unit


def axis_label(column: str, values: Sequence[float] | Any = ()) -> tuple[str, float]:
    """(axis label with unit, divisor for the values) of a column named by the project's convention.

    ``latency_s`` with values around 3e-3 gives ``("latency (ms)", 1e-3)``; ``tokens_per_s`` gives
    ``("tokens/s", 1.0)``; a column without a unit suffix is its name with spaces.

    >>> axis_label("energy_per_token_j", [0.004])
    ('energy per token (mJ)', 0.001)
    """
    name, unit = _split_unit(column)
    scale, shown = unit_scale(values, unit)
    label = _pretty(name)
    return (f"{label} ({shown})" if shown else label), scale


# --------------------------------------------------------------------------------------------
# data frames


def _require_columns(df: Any, columns: dict[str, str | None], what: str) -> None:
    from nodeperf.suggest import did_you_mean

    have = [str(c) for c in df.columns]
    for flag, col in columns.items():
        if col is None:
            continue
        if col not in have:
            raise FigureError(f"{what}: {flag} {col}: unknown column; got {col!r}; expected one of "
                              f"{', '.join(have) or '(no columns)'}{did_you_mean(col, have)}")


def _numeric(df: Any, col: str, flag: str, what: str) -> Any:
    import pandas as pd

    values = pd.to_numeric(df[col], errors="coerce")
    bad = values.isna() & df[col].notna()
    if bad.any():
        first = df[col][bad].iloc[0]
        raise FigureError(f"{what}: {flag} {col}: not a number in {int(bad.sum())} row(s); got {first!r}; "
                          "expected a numeric column")
    return values


def _latencies(df: Any, col: str, label: str) -> Any:
    """Column ``col`` of a per-request table as finite seconds >= 0; a located FigureError (the file's line:
    row index + 2, after the header) on the first that is not."""
    import numpy as np
    import pandas as pd

    values = pd.to_numeric(df[col], errors="coerce")  # text that is not a number: NaN, located below
    bad = ~np.isfinite(values.to_numpy(dtype=float)) | (values.to_numpy(dtype=float) < 0)
    if bad.any():
        row = values.index[bad][0]
        raise FigureError(f"serving figure: {label}:{int(row) + 2}: {col}: got {str(df[col][row])!r}; expected a finite "
                          f"number of seconds >= 0")
    return values


def _frame(df: Any, what: str) -> Any:
    import pandas as pd

    if isinstance(df, pd.DataFrame):
        return df
    if isinstance(df, (list, tuple)) and all(isinstance(r, dict) for r in df):
        return pd.DataFrame(list(df))
    raise FigureError(f"{what}: data: not a table; got a {type(df).__name__}; expected a pandas DataFrame "
                      "or a list of row dicts")


def pareto_mask(x: Sequence[float], y: Sequence[float], minimize: tuple[bool, bool] = (True, True)) -> list[bool]:
    """Which points are on the Pareto front of two objectives (no other point is at least as good in
    both and strictly better in one). Ties keep every copy of a front point.

    >>> pareto_mask([1, 2, 3, 2], [3, 1, 2, 3])
    [True, True, False, False]
    """
    sx = [float(v) if minimize[0] else -float(v) for v in x]
    sy = [float(v) if minimize[1] else -float(v) for v in y]
    order = sorted(range(len(sx)), key=lambda i: (sx[i], sy[i]))
    mask = [False] * len(sx)
    best = math.inf
    last: tuple[float, float] | None = None
    for i in order:
        if sy[i] < best or (sx[i], sy[i]) == last:  # better than all before it, or a copy of the last front point
            mask[i] = True
            best = sy[i]
            last = (sx[i], sy[i])
    return mask


# --------------------------------------------------------------------------------------------
# Pareto front


def pareto_figure(df: Any, x: str, y: str, *, hue: str | None = None, front: bool = True,
                  minimize: tuple[bool, bool] = (True, True), logx: bool = False, logy: bool = False,
                  title: str | None = None) -> Figure:
    """Scatter of ``y`` against ``x`` with the Pareto front of each ``hue`` group drawn as a step line.

    Parameters
    ----------
    df
        Results (a pandas DataFrame, e.g. from ``simulator.sweep.load_results``, or row dicts).
    x, y
        Numeric columns; both are minimised unless ``minimize`` says otherwise.
    hue
        Column whose values get their own colour, marker and front (e.g. ``device``).
    front
        Draw the front(s) and ring the points on them.
    minimize
        For ``x`` and ``y``: True to minimise (latency, energy), False to maximise (throughput).
    logx, logy
        Logarithmic axes.
    title
        Figure title (default ``"<y> vs <x>"`` and how many points lie on the front).

    Raises
    ------
    FigureError
        An unknown or non-numeric column, or no row with both values.
    """
    what = "pareto"
    df = _frame(df, what)
    _require_columns(df, {"--x": x, "--y": y, "--hue": hue}, what)
    xs_all, ys_all = _numeric(df, x, "--x", what), _numeric(df, y, "--y", what)
    ok = xs_all.notna() & ys_all.notna()
    if logx:
        ok &= xs_all > 0
    if logy:
        ok &= ys_all > 0
    dropped = int((~ok).sum())
    if not ok.any():
        raise FigureError(f"{what}: no row has both {x} and {y}; got {len(df)} row(s); expected at least one")
    xlabel, xs_scale = axis_label(x, xs_all[ok])
    ylabel, ys_scale = axis_label(y, ys_all[ok])
    groups: list[tuple[str, Any]] = []
    if hue is None:
        groups.append(("", ok))
    else:
        keys = df[hue].astype(str)
        for key in _sorted_keys(df[hue][ok]):
            groups.append((str(key), ok & (keys == str(key))))
    fig = Figure(figsize=(5.2, 3.8), layout="constrained")
    ax = fig.add_subplot()
    on_front = 0
    for i, (key, sel) in enumerate(groups):
        color, marker = _PALETTE[i % len(_PALETTE)], _MARKERS[i % len(_MARKERS)]
        gx = (xs_all[sel] / xs_scale).tolist()
        gy = (ys_all[sel] / ys_scale).tolist()
        ax.scatter(gx, gy, s=16, color=color, marker=marker, alpha=0.55, linewidths=0,
                   label=key if hue is not None else "design points")
        if front and gx:
            mask = pareto_mask(gx, gy, minimize)
            pts = sorted((a, b) for a, b, m in zip(gx, gy, mask, strict=True) if m)
            on_front += len(pts)
            # the attainment curve: between two front points the better value is the left one's
            ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, lw=1.4, drawstyle="steps-post",
                    label="Pareto front" if hue is None else None)
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=34, facecolors="none", edgecolors=color,
                       linewidths=1.0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, which="major", lw=0.3, alpha=0.6)
    ax.legend(title=_pretty(hue) if hue else None, fontsize=7, title_fontsize=7, frameon=False)
    head = title or f"{_pretty(_split_unit(y)[0])} vs {_pretty(_split_unit(x)[0])}"
    notes = []
    if front:
        notes.append(f"{on_front} of {int(ok.sum())} points on the front" + (" of their group" if hue else ""))
    if dropped:
        notes.append(f"{dropped} row(s) without both values not drawn")
    ax.set_title(head + ("\n" + "; ".join(notes) if notes else ""), fontsize=9)
    return fig


def _sorted_keys(series: Any) -> list[Any]:
    vals = list(dict.fromkeys(series.tolist()))
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=str)


# --------------------------------------------------------------------------------------------
# heatmap


def heatmap_figure(df: Any, x: str, y: str, value: str, *, agg: str = "min", annotate: bool | None = None,
                   log: bool = False, cmap: str = "viridis", title: str | None = None) -> Figure:
    """Heatmap of ``value`` over the distinct values of two axes ``x`` and ``y``.

    Rows that share an ``(x, y)`` cell (other axes of a sweep) are reduced with ``agg`` (``min``:
    the best design at that cell when the value is a cost). Cells no row reaches are left blank and
    counted in the title.

    Parameters
    ----------
    df
        Results table.
    x, y
        Columns whose distinct values are the columns and rows of the grid (numeric or not).
    value
        Numeric column shown by colour.
    agg
        ``min``, ``max``, ``mean``, ``median``, ``sum`` or ``count``.
    annotate
        Write each cell's value in it (default: when the grid has at most 12 x 12 cells).
    log
        Logarithmic colour scale (positive values only).

    Raises
    ------
    FigureError
        An unknown column or aggregation, or a non-numeric ``value``.
    """
    import numpy as np

    what = "heatmap"
    df = _frame(df, what)
    _require_columns(df, {"--x": x, "--y": y, "--value": value}, what)
    if x == y:
        raise FigureError(f"{what}: --y {y}: the same column as --x; got {x!r} twice; expected two different axes")
    if agg not in AGGREGATIONS:
        from nodeperf.suggest import did_you_mean

        raise FigureError(f"{what}: --agg {agg}: unknown aggregation; got {agg!r}; expected one of "
                          f"{', '.join(AGGREGATIONS)}{did_you_mean(agg, AGGREGATIONS)}")
    vals = _numeric(df, value, "--value", what)
    data = df[[x, y]].copy()
    data["__v"] = vals
    data = data[data["__v"].notna() & data[x].notna() & data[y].notna()]
    if data.empty:
        raise FigureError(f"{what}: no row has {x}, {y} and {value}; got {len(df)} row(s); expected at least one")
    xkeys, ykeys = _sorted_keys(data[x]), _sorted_keys(data[y])
    grid = data.groupby([y, x])["__v"].agg(agg)
    z = np.full((len(ykeys), len(xkeys)), np.nan)
    for (yk, xk), v in grid.items():
        z[ykeys.index(yk), xkeys.index(xk)] = float(v)
    vlabel, vscale = (_pretty(value) + " (count)", 1.0) if agg == "count" else axis_label(value, z[np.isfinite(z)])
    z = z / vscale
    fig = Figure(figsize=(max(4.2, 0.55 * len(xkeys) + 2.6), max(3.2, 0.4 * len(ykeys) + 1.8)), layout="constrained")
    ax = fig.add_subplot()
    norm = None
    if log:
        from matplotlib.colors import LogNorm

        pos = z[np.isfinite(z) & (z > 0)]
        if pos.size == 0:
            raise FigureError(f"{what}: --value {value}: a log colour scale needs positive values; got none")
        norm = LogNorm(vmin=float(pos.min()), vmax=float(pos.max()))
    im = ax.imshow(np.ma.masked_invalid(z), origin="lower", aspect="auto", cmap=cmap, norm=norm)
    cbar = fig.colorbar(im, ax=ax)
    cbar.set_label(vlabel if agg in ("min", "max", "count") else f"{vlabel}, {agg}")
    xl, xs = _tick_axis(x, xkeys)
    yl, ys = _tick_axis(y, ykeys)
    ax.set_xticks(range(len(xkeys)), xs, rotation=45 if max(map(len, xs)) > 4 else 0,
                  ha="right" if max(map(len, xs)) > 4 else "center")
    ax.set_yticks(range(len(ykeys)), ys)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)
    if annotate is None:
        annotate = len(xkeys) <= 12 and len(ykeys) <= 12
    if annotate:
        finite = z[np.isfinite(z)]
        mid = (float(finite.min()) + float(finite.max())) / 2 if finite.size else 0.0
        for (i, j), v in np.ndenumerate(z):
            if math.isfinite(v):
                ax.text(j, i, f"{v:.3g}", ha="center", va="center", fontsize=6,
                        color="white" if (v < mid) != (cmap.endswith("_r")) else "black")
    empty = int(np.isnan(z).sum())
    shared = int(data.groupby([y, x]).size().max()) > 1  # some cell reduces several rows
    head = title or (f"{_pretty(_split_unit(value)[0])}" + (f" ({agg} over the other axes)" if shared else ""))
    ax.set_title(head + (f"\n{empty} of {z.size} cells without a result (blank)" if empty else ""), fontsize=9)
    return fig


def _tick_axis(column: str, keys: list[Any]) -> tuple[str, list[str]]:
    """Axis label and tick texts of categorical grid keys (numbers scaled to the column's unit)."""
    nums = [k for k in keys if isinstance(k, (int, float)) and not isinstance(k, bool)]
    if len(nums) == len(keys) and keys:
        label, scale = axis_label(column, nums)
        return label, [f"{k / scale:g}" for k in nums]
    return _pretty(_split_unit(column)[0]), [str(k) for k in keys]


# --------------------------------------------------------------------------------------------
# roofline


def _device(spec: Any) -> Any:
    from simulator.hardware import device_of

    return device_of(spec)


def _report_dtype(report: CostReport) -> str:
    """The matrix dtype most of the report's contraction FLOPs ran at (else the most common dtype)."""
    by: dict[str, float] = {}
    for r in report.records:
        if r.category in ("contraction", "attention", "recurrent"):
            dt = r.matrix_dtype or r.dtype
            by[dt] = by.get(dt, 0.0) + r.flops
    if not by:
        for r in report.records:
            by[r.dtype] = by.get(r.dtype, 0.0) + max(r.flops, 1.0)
    return max(sorted(by), key=lambda d: by[d]) if by else "fp32"


def roofline_roofs(report: CostReport, spec: Any, dtype: str | None = None) -> dict[str, Any]:
    """The roofs a roofline of ``report`` on ``spec`` draws.

    Returns
    -------
    dict
        ``dtype`` (the matrix dtype, by default the one most contraction FLOPs used), ``unit``
        (``"tensor"`` or ``"vector"``: where the dtype's rate comes from), ``peak_flops_per_s`` (the
        rated dense peak of that dtype), ``vector_flops_per_s`` (the fp32 vector peak, 0 if none),
        ``bandwidth_bytes_per_s`` (main-memory read bandwidth) and ``ridge_flop_per_byte``
        (``peak_flops_per_s / bandwidth_bytes_per_s``).

    Raises
    ------
    FigureError
        A dtype with no rate on the device, or a device without main-memory bandwidth.
    """
    dev = _device(spec)
    dt = dtype or _report_dtype(report)
    tensor, vector = dev.compute.tensor_flops_per_s, dev.compute.vector_flops_per_s
    if dt in tensor:
        peak, unit = float(tensor[dt]), "tensor"
    elif dt in vector:
        peak, unit = float(vector[dt]), "vector"
    else:
        from nodeperf.suggest import did_you_mean

        have = sorted(set(tensor) | set(vector))
        raise FigureError(f"roofline: {dev.name}: compute.tensor_flops_per_s.{dt}: no rate for this dtype; got "
                          f"{dt!r}; expected one of {', '.join(have)}{did_you_mean(dt, have)}")
    bw = float(dev.main_memory.read_bandwidth_bytes_per_s)
    if not bw > 0:
        raise FigureError(f"roofline: {dev.name}: memory.{dev.main_memory.name}.read_bandwidth_bytes_per_s: got {bw}; "
                          "expected a positive bandwidth")
    return {"dtype": dt, "unit": unit, "peak_flops_per_s": peak, "vector_flops_per_s": float(vector.get("fp32", 0.0)),
            "bandwidth_bytes_per_s": bw, "ridge_flop_per_byte": peak / bw, "memory_level": dev.main_memory.name,
            "device": dev.name}


def roofline_figure(report: CostReport, spec: Any, *, dtype: str | None = None, title: str | None = None) -> Figure:
    """Roofline of every op of ``report`` on the device of ``spec``.

    Each op is a point at its arithmetic intensity (FLOPs per byte of main-memory traffic, the
    report's ``flops / dram_bytes``) and its achieved rate (``flops / time_s``), coloured by the bound
    the model found. The memory roof (``bandwidth x intensity``), the compute roof of the dtype's
    rated dense peak, the fp32 vector roof and the ridge point (``peak / bandwidth``, marked with
    ``gid="ridge"``) are drawn from the spec, and, dash-dotted, the attainable roof the model's
    efficiency fields allow (``efficiency.tensor_peak_fraction`` or ``vector_peak_fraction`` of the
    peak, ``efficiency.dram_bandwidth_fraction`` of the bandwidth). Ops without FLOPs or without main-memory traffic (views,
    copies, fused epilogues that stay on chip) have no place on the axes; their number is stated in
    the title, so none is silently dropped.

    Parameters
    ----------
    report
        A :class:`~simulator.report.report.CostReport`.
    spec
        The device or system the report was predicted for.
    dtype
        Dtype of the compute roof (default: the one most contraction FLOPs ran at).

    Raises
    ------
    FigureError
        A dtype without a rate on the device, or a report with no op that can be placed.
    """
    roofs = roofline_roofs(report, spec, dtype)
    peak, bw, ridge = roofs["peak_flops_per_s"], roofs["bandwidth_bytes_per_s"], roofs["ridge_flop_per_byte"]
    placed = [r for r in report.records if r.flops > 0 and r.dram_bytes > 0 and r.time_s > 0]
    left_out = len(report.records) - len(placed)
    if not placed:
        raise FigureError(f"roofline: {report.model}: no op has both FLOPs and main-memory traffic; got "
                          f"{len(report.records)} op(s); expected at least one to place")
    ai = [r.flops / r.dram_bytes for r in placed]
    ach = [r.flops / r.time_s for r in placed]
    lo = min(min(ai), ridge) / 8
    hi = max(max(ai), ridge) * 8
    fscale, funit = unit_scale([peak], "FLOP/s")
    fig = Figure(figsize=(7.4, 3.9), layout="constrained")
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.set_yscale("log")
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(peak, bw * v) / fscale for v in xs], color="black", lw=1.6,
            label=f"roof: {bw / 1e12:.3g} TB/s {roofs['memory_level'].upper()}, "
                  f"{peak / 1e12:.4g} TFLOP/s {roofs['dtype']} ({roofs['unit']})")
    eff = _device(spec).efficiency
    frac = eff.tensor_peak_fraction if roofs["unit"] == "tensor" else eff.vector_peak_fraction
    a_peak, a_bw = peak * frac, bw * eff.dram_bandwidth_fraction
    if (a_peak, a_bw) != (peak, bw):
        ax.plot(xs, [min(a_peak, a_bw * v) / fscale for v in xs], color="0.55", lw=0.9, ls="-.",
                label=f"attainable: x{frac:.3g} peak, x{eff.dram_bandwidth_fraction:.3g} bandwidth (efficiency fields)")
    vec = roofs["vector_flops_per_s"]
    if vec > 0 and roofs["unit"] == "tensor" and vec < peak:
        ax.plot(xs, [min(vec, bw * v) / fscale for v in xs], color="black", lw=0.9, ls="--",
                label=f"fp32 vector roof {vec / 1e12:.3g} TFLOP/s")
    ax.plot([ridge], [peak / fscale], marker="D", color="black", ms=6, ls="none", gid="ridge",
            label=f"ridge point {ridge:.3g} FLOP/B")
    ax.axvline(ridge, color="black", lw=0.6, ls=":")
    for bound in BOUNDS:
        sel = [(a, f / fscale) for a, f, r in zip(ai, ach, placed, strict=True) if r.bound == bound]
        if sel:
            ax.scatter([s[0] for s in sel], [s[1] for s in sel], s=14, alpha=0.7, linewidths=0,
                       color=BOUND_COLORS[bound], marker=_BOUND_MARKERS[bound], label=f"{bound}-bound ops ({len(sel)})")
    ax.set_xlim(lo, hi)
    ymin = min(min(ach), bw * lo) / fscale / 2
    ax.set_ylim(ymin, peak / fscale * 2.5)
    ax.set_xlabel("arithmetic intensity (FLOP/B of main-memory traffic)")
    ax.set_ylabel(f"achieved rate ({funit})")
    ax.grid(True, which="major", lw=0.3, alpha=0.6)
    ax.legend(fontsize=6.5, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # never over a point
    head = title or f"{report.model} on {report.hardware}: roofline of {len(placed)} ops"
    if left_out:
        head += f"\n{left_out} op(s) without FLOPs or main-memory traffic not placed (views, copies, on-chip)"
    ax.set_title(head, fontsize=9)
    return fig


# --------------------------------------------------------------------------------------------
# time breakdown


def breakdown_figure(reports: CostReport | Sequence[CostReport], by: str = "kind", *,
                     labels: Sequence[str] | None = None, top: int = 8, title: str | None = None) -> Figure:
    """Stacked bars of the time of one or several reports, split by op ``kind`` or by ``bound``.

    Each bar is one report; its segments are the summed ``time_s`` of the report's records per key
    (the analytical engine's latency is exactly that sum, so a bar's height is the report's
    latency). With ``by="kind"`` the ``top`` kinds by time over all reports keep their own colour
    and the rest are summed into ``other``.

    Parameters
    ----------
    reports
        One report or a sequence of them, drawn side by side.
    by
        ``"kind"`` or ``"bound"``.
    labels
        Bar labels (default: the hardware names when all reports are of one model, the model names
        when all are on one device, else both).
    top
        Kinds with their own segment (``by="kind"``).

    Raises
    ------
    FigureError
        Another ``by``, no reports, or labels that do not match the reports.
    """
    reps = [reports] if isinstance(reports, CostReport) else list(reports)
    if by not in ("kind", "bound"):
        from nodeperf.suggest import did_you_mean

        raise FigureError(f"breakdown: --by {by}: unknown split; got {by!r}; expected kind or bound"
                          f"{did_you_mean(by, ('kind', 'bound'))}")
    if not reps:
        raise FigureError("breakdown: reports: none given; got 0; expected at least one report")
    if labels is None:
        models, hws = {r.model for r in reps}, {r.hardware for r in reps}
        if len(reps) == 1:
            labels = [reps[0].hardware]
        elif len(models) == 1:
            labels = [r.hardware for r in reps]
        elif len(hws) == 1:
            labels = [r.model for r in reps]
        else:
            labels = [f"{r.model}\n{r.hardware}" for r in reps]
    if len(labels) != len(reps):
        raise FigureError(f"breakdown: labels: got {len(labels)} for {len(reps)} report(s); expected one per report")
    sums: list[dict[str, float]] = []
    for r in reps:
        acc: dict[str, float] = {}
        for rec in r.records:
            key = rec.kind if by == "kind" else rec.bound
            acc[key] = acc.get(key, 0.0) + rec.time_s
        sums.append(acc)
    overall: dict[str, float] = {}
    for acc in sums:
        for k, v in acc.items():
            overall[k] = overall.get(k, 0.0) + v
    if by == "bound":
        keys = [b for b in BOUNDS if b in overall] + sorted(k for k in overall if k not in BOUNDS)
        colors = {k: BOUND_COLORS.get(k, _PALETTE[i % len(_PALETTE)]) for i, k in enumerate(keys)}
    else:
        ranked = sorted(overall, key=lambda k: (-overall[k], k))
        keys = ranked[:top]
        rest = ranked[top:]
        if rest:
            for acc in sums:
                acc["other"] = sum(acc.pop(k, 0.0) for k in rest)
            keys.append("other")
        colors = {k: ("#c7c7c7" if k == "other" else _PALETTE[i % len(_PALETTE)]) for i, k in enumerate(keys)}
    totals = [sum(acc.values()) for acc in sums]
    ylabel, scale = axis_label("time_s", totals)
    fig = Figure(figsize=(max(3.6, 1.0 * len(reps) + 3.0), 3.8), layout="constrained")
    ax = fig.add_subplot()
    xpos = list(range(len(reps)))
    bottom = [0.0] * len(reps)
    for k in keys:
        h = [acc.get(k, 0.0) / scale for acc in sums]
        ax.bar(xpos, h, bottom=bottom, width=0.6, color=colors[k], label=k, edgecolor="white", linewidth=0.4)
        bottom = [b + v for b, v in zip(bottom, h, strict=True)]
    for xp, tot in zip(xpos, totals, strict=True):
        ax.annotate(f"{tot / scale:.3g}", (xp, tot / scale), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(xpos, labels, fontsize=7, rotation=0 if max(map(len, labels)) < 14 else 20)
    ax.set_ylabel(ylabel)
    ax.set_ylim(0, max(totals) / scale * 1.12 if max(totals) > 0 else 1.0)
    ax.grid(True, axis="y", lw=0.3, alpha=0.6)
    handles, names = ax.get_legend_handles_labels()
    ax.legend(handles[::-1], names[::-1], title=f"op {by}" if by == "kind" else "bound", fontsize=7,
              title_fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    model = reps[0].model if len({r.model for r in reps}) == 1 else "models"
    ax.set_title(title or f"{model}: time by {'op kind' if by == 'kind' else 'bound'}", fontsize=9)
    return fig


def _plain_log_axis(ax: Any) -> None:
    """Ticks of a log-scaled x axis labelled as plain numbers, one label per major tick and none on the minor
    ones (matplotlib's default labels minor ticks as ``2x10^1``, ``3x10^1``, ... when fewer than two decades
    show, and those overlap): under a decade, about four evenly spaced values, or 1, 1.5, 2, 3, 5 and 7 times
    each power of ten where evenly spaced values would leave the low end of the axis bare (6 to 45 ms had been
    labelled 15, 30 and 45 only); up to two decades, 1, 2 and 5 times each power of ten; beyond, the powers of
    ten."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    lo, hi = ax.get_xlim()
    decades = math.log10(hi / lo) if lo > 0 and hi > lo else 0.0
    if decades < 1.0:
        even, subs = MaxNLocator(nbins=4), LogLocator(base=10.0, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0))
        ticks = [v for v in even.tick_values(lo, hi) if lo <= v <= hi]
        bare = lo > 0 and (not ticks or math.log10(ticks[0] / lo) > decades / 3)  # first label above the lower third
        denser = len([v for v in subs.tick_values(lo, hi) if lo <= v <= hi]) >= 2
        ax.xaxis.set_major_locator(subs if bare and denser else even)
    elif decades <= 2.0:
        ax.xaxis.set_major_locator(LogLocator(base=10.0, subs=(1.0, 2.0, 5.0)))
    else:
        ax.xaxis.set_major_locator(LogLocator(base=10.0, numticks=7))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def serving_figure(runs: Sequence[tuple[str, Any]], *, title: str | None = None) -> Figure:
    """Latency of serving runs (``nodeperf serve --csv`` tables, one per run): the distributions (CDFs) of
    TTFT and TPOT, and, for two runs or more, their p50 and p99 against the achieved load (requests per
    second over the makespan), one point per run.

    ``runs``: (label, DataFrame with ``ttft_s``, ``tpot_s``, ``finish_s`` and ``output_len`` columns).
    """
    import numpy as np

    if not runs:
        raise FigureError("serving figure: no runs; got none; expected at least one per-request table")
    for label, df in runs:
        have = [str(c) for c in df.columns]
        missing = [c for c in ("ttft_s", "tpot_s", "finish_s", "output_len") if c not in have]
        if missing:
            raise FigureError(f"serving figure: {label}: missing column(s) {', '.join(missing)}; got "
                              f"{', '.join(have) or '(no columns)'}; expected the per-request CSV of `nodeperf serve --csv`")
        _numeric(df, "output_len", "column", f"serving figure: {label}")
        for col in ("ttft_s", "finish_s"):
            _latencies(df, col, label)
        _latencies(df[df["output_len"] > 1], "tpot_s", label)
    panels = 3 if len(runs) > 1 else 2
    fig = Figure(figsize=(4.2 * panels, 3.6))
    axes = fig.subplots(1, panels)
    load, stats = [], []
    for label, df in runs:
        ttft = np.sort(_numeric(df, "ttft_s", "ttft_s", "serving figure").to_numpy(dtype=float))
        multi = df[df["output_len"] > 1]
        tpot = np.sort(_numeric(multi, "tpot_s", "tpot_s", "serving figure").to_numpy(dtype=float))
        for ax, vals in ((axes[0], ttft), (axes[1], tpot)):
            if len(vals):
                ax.plot(vals * 1e3, np.arange(1, len(vals) + 1) / len(vals), label=str(label))
        span = float(df["finish_s"].max())
        load.append(len(df) / span if span > 0 else 0.0)
        stats.append([float(np.percentile(v, q)) * 1e3 if len(v) else 0.0 for v in (ttft, tpot) for q in (50, 99)])
    for ax, name in ((axes[0], "TTFT"), (axes[1], "TPOT")):
        ax.set_xlabel(f"{name} (ms)")
        ax.set_ylabel("fraction of requests")
        ax.set_xscale("log")
        _plain_log_axis(ax)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=7)
    if panels == 3:
        order = np.argsort(load)
        x = np.asarray(load)[order]
        s = np.asarray(stats)[order]
        ax = axes[2]
        for col, (name, style) in enumerate((("TTFT p50", "o-"), ("TTFT p99", "o--"), ("TPOT p50", "s-"),
                                             ("TPOT p99", "s--"))):
            ax.plot(x, s[:, col], style, label=name)
        ax.set_xlabel("load (requests/s)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title or f"serving latency of {len(runs)} run(s)")
    fig.tight_layout()
    return fig
