"""Measured timings as validated records: the CSV schema, loading with located errors, filters, splits, hashes.

A measurement file is a CSV with a header row. One row is one measured case: a workload (a
micro-workload string such as ``gemm:m=1024,n=1024,k=1024`` or a zoo model name with
batch/seq/phase/context/train), the device it ran on, its dtype, and the measured statistic.
The same schema reads the project's published GPU set (``hwmodels/measurements/published_gpu.csv``)
and files written by ``nodeperf measure``.

Columns (``REQUIRED_COLUMNS`` must be present; the others may be absent or blank):

========================  =======================================================================
column                    meaning
========================  =======================================================================
``workload``              micro-workload string or zoo model name (required)
``device``                device name: a catalog device or ``host`` (this machine's CPU) (required)
``dtype``                 compute dtype, lowercase (``fp32``, ``bf16``...) (required)
``weight_dtype``          linear layers' weights quantised to this dtype (``int8``, ``int4``, ``fp8_e4m3``;
                          blank: as ``dtype``), as ``--weight-dtype`` (``workloads.precision``)
``kv_dtype``              KV-cache dtype (blank: as ``dtype``), as ``--kv-dtype``
``median_s``              median time of one execution, seconds, > 0 (required)
``id``                    unique row id (default ``<file stem>:<line>``)
``category``              op class used in error tables (default: micro kind, or ``e2e``)
``batch``/``seq``         batch size; sequence length or image side (zoo workloads)
``phase``/``context``     ``forward``/``prefill``/``decode``/``train``; KV context of decode
``train``                 1 for a whole training step, 0 otherwise
``min_s``                 fastest repetition, seconds (<= ``median_s``)
``repetitions``           timed repetitions behind the statistic (>= 1)
``iqr_s``                 inter-quartile range of the repetitions, seconds (the spread)
``framework``             ``torch`` / ``numpy`` / a source's stack; in a software-stack set
                          (``published_frameworks.csv``) a profile of :mod:`workloads.frameworks`,
                          ``NAME[;optimizer=none][;attention=...][;mode=...]``, checked by
                          :func:`simulator.calibration.frameworks_validation.load_framework_rows`
``framework_version``     version string of the framework
``driver_version``        GPU driver / CUDA runtime, blank on CPU
``clock_hz``              core clock read at measurement time, Hz, blank if not readable
``date``                  ISO 8601 date/time of the measurement
``host``                  host name and processor model
``metric_reported``       the number as a source printed it (published rows)
``source``/``notes``      citation or ``measured: nodeperf measure ...``; free text
========================  =======================================================================

Every problem of a file is collected and raised once as a :class:`MeasurementError` whose lines read
``<file>:<line>: <column>: <problem>; got <value>; expected <form>``.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from nodeperf.errors import NodeperfError
from nodeperf.files import read_bytes_file
from nodeperf.suggest import did_you_mean, short_repr, short_text

__all__ = [
    "MeasurementError",
    "Measurement",
    "MeasurementSet",
    "COLUMNS",
    "REQUIRED_COLUMNS",
    "case_label",
]


class MeasurementError(NodeperfError, ValueError):
    """A measurement file or row is invalid; the message locates every problem (file, line, column)."""


def case_label(workload: str, dtype: str, batch: int | None = None, seq: int | None = None,
               phase: str | None = None, train: bool = False) -> str:
    """One-line name of a measured case: ``"resnet18 fp32 batch=1 seq=224 phase=forward"`` (`` train`` appended)."""
    extra = "".join(f" {k}={v}" for k, v in (("batch", batch), ("seq", seq), ("phase", phase)) if v is not None)
    return f"{workload} {dtype}{extra}{' train' if train else ''}"


#: Columns in the order files are written.
COLUMNS: tuple[str, ...] = (
    "id", "category", "workload", "batch", "seq", "phase", "context", "dtype", "weight_dtype", "kv_dtype", "train",
    "device",
    "median_s", "min_s", "repetitions", "iqr_s", "framework", "framework_version", "driver_version",
    "clock_hz", "date", "host", "metric_reported", "source", "notes",
)
REQUIRED_COLUMNS: tuple[str, ...] = ("workload", "device", "dtype", "median_s")
_PHASES = ("forward", "prefill", "decode", "train")
_INT_COLUMNS = ("batch", "seq", "context", "repetitions")
_TIME_COLUMNS = ("median_s", "min_s", "iqr_s")
#: Shortest time a row may report (s): 1 ns, the resolution of ``time.perf_counter_ns``, finer than CUDA
#: events (about 0.5 us); a smaller figure is a unit slip, and its error would print as a 300-digit percentage.
MIN_TIMED_S = 1e-9
_STR_COLUMNS = ("framework", "framework_version", "driver_version", "date", "host", "metric_reported",
                "source", "notes")


@dataclass(frozen=True)
class Measurement:
    """One measured case (seconds; see the module docstring for the columns)."""

    id: str
    workload: str
    device: str
    dtype: str
    median_s: float
    category: str = ""
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    batch: int | None = None
    seq: int | None = None
    phase: str | None = None
    context: int | None = None
    train: bool | None = None
    min_s: float | None = None
    repetitions: int | None = None
    iqr_s: float | None = None
    framework: str = ""
    framework_version: str = ""
    driver_version: str = ""
    clock_hz: float | None = None
    date: str = ""
    host: str = ""
    metric_reported: str = ""
    source: str = ""
    notes: str = ""
    where: str = field(default="", compare=False)

    @property
    def case(self) -> tuple[Any, ...]:
        """What was run, independent of how fast it was: (workload, batch, seq, phase, context, train, dtype,
        weight dtype, KV dtype)."""
        return (self.workload, self.batch, self.seq, self.phase, self.context, bool(self.train), self.dtype,
                self.weight_dtype, self.kv_dtype)

    def workload_args(self) -> dict[str, Any]:
        """Keyword arguments of :func:`workloads.resolve.load_workload` that rebuild this case's graph."""
        from workloads.micro import is_micro

        args: dict[str, Any]
        if is_micro(self.workload):  # a single op: the string gives the shapes (bwd=1 for a backward kernel)
            args = {"batch": None, "seq": None, "context": None, "dtype": self.dtype, "train": False, "phase": None}
        else:  # a training step is built by `train=True`; its phase is implied
            args = {"batch": self.batch, "seq": self.seq, "context": self.context, "dtype": self.dtype,
                    "train": bool(self.train), "phase": None if self.train else self.phase}
        # per-tensor precision applies to both (a micro-workload without the tensors it retypes is a located error)
        if self.weight_dtype:
            args["weight_dtype"] = self.weight_dtype
        if self.kv_dtype:
            args["kv_dtype"] = self.kv_dtype
        return args

    def to_row(self) -> dict[str, str]:
        """The CSV row (strings; blanks for absent values; floats with full precision)."""
        out: dict[str, str] = {}
        for c in COLUMNS:
            v = getattr(self, c)
            if v is None:
                out[c] = ""
            elif isinstance(v, bool):
                out[c] = "1" if v else "0"
            elif isinstance(v, float):
                out[c] = repr(v)
            else:
                out[c] = str(v)
        return out


def _default_category(workload: str) -> str:
    head, sep, _ = workload.partition(":")
    from workloads.micro import MICRO_KINDS

    if sep and head.strip().lower() in MICRO_KINDS:
        return head.strip().lower()
    return "e2e"




class _RowProblems:
    def __init__(self) -> None:
        self.items: list[str] = []

    def add(self, where: str, column: str, msg: str) -> None:
        self.items.append(f"{where}: {column}: {msg}")


def _time_problem(c: str, s: str) -> str:
    """What is wrong with the time ``s`` of column ``c`` ("" when nothing is)."""
    try:
        v = float(s)
    except ValueError:
        return f"not a number; got {s!r}; expected seconds as a decimal number"
    if not math.isfinite(v):
        return f"not finite; got {s!r}; expected a finite time in seconds"
    if v < 0 or (v == 0 and c != "iqr_s"):
        return (f"must be positive; got {s}; expected a time > 0 s" if c != "iqr_s"
                else f"must not be negative; got {s}; expected a spread >= 0 s")
    if c != "iqr_s" and v < MIN_TIMED_S:
        return f"below any timer's resolution; got {s}; expected at least {MIN_TIMED_S:g} s (1 ns)"
    return ""


def _parse_row(raw: dict[str, str], where: str, default_id: str, problems: _RowProblems) -> Measurement | None:
    n0 = len(problems.items)
    vals: dict[str, Any] = {}

    def text(c: str) -> str:
        v = raw.get(c)
        return "" if v is None else v.strip()

    for c in REQUIRED_COLUMNS:
        if not text(c):
            problems.add(where, c, "empty value; got ''; expected a value in a required column")
    vals["workload"] = text("workload")
    vals["device"] = text("device").lower()
    vals["id"] = text("id") or default_id
    vals["category"] = text("category")
    from workloads.dtypes import parse_dtype

    vals["weight_dtype"] = vals["kv_dtype"] = None  # optional: blank is "as dtype"
    for c in ("dtype", "weight_dtype", "kv_dtype"):
        v = text(c)
        if v:
            try:
                vals[c] = parse_dtype(v, where=f"{where}: {c}").value
            except ValueError as exc:
                problems.items.append(str(exc))
    for c in _TIME_COLUMNS:
        s = text(c)
        if not s:
            vals[c] = None
            continue
        bad = _time_problem(c, s)
        if bad:
            problems.add(where, c, bad)
        else:
            vals[c] = float(s)
    for c in _INT_COLUMNS:
        s = text(c)
        if not s:
            vals[c] = None
            continue
        try:
            f = float(s)
            ok = math.isfinite(f) and f == int(f) and f >= 1
        except ValueError:
            ok = False
        if not ok:
            problems.add(where, c, f"not a positive integer; got {s!r}; expected an integer >= 1")
        else:
            vals[c] = int(f)
    ph = text("phase").lower()
    if ph and ph not in _PHASES:
        problems.add(where, "phase", f"unknown phase; got {ph!r}; expected one of {', '.join(_PHASES)}{did_you_mean(ph, _PHASES)}")
    vals["phase"] = ph or None
    tr = text("train")
    if tr and tr not in ("0", "1"):
        problems.add(where, "train", f"not a flag; got {tr!r}; expected 0 or 1")
    vals["train"] = None if tr not in ("0", "1") else tr == "1"
    ck = text("clock_hz")
    vals["clock_hz"] = None
    if ck:
        try:
            vals["clock_hz"] = float(ck)
            if not (math.isfinite(vals["clock_hz"]) and vals["clock_hz"] > 0):
                raise ValueError
        except ValueError:
            problems.add(where, "clock_hz", f"not a positive frequency; got {ck!r}; expected Hz as a number")
    for c in _STR_COLUMNS:
        vals[c] = text(c)
    if vals.get("min_s") is not None and vals.get("median_s") is not None and vals["min_s"] > vals["median_s"]:
        problems.add(where, "min_s", f"above the median; got {vals['min_s']!r}; expected min_s <= median_s "
                                      f"({vals['median_s']!r})")
    if len(problems.items) > n0:
        return None
    if not vals["category"]:
        vals["category"] = _default_category(vals["workload"])
    return Measurement(where=where, **vals)


def _check_workload(m: Measurement, problems: _RowProblems, zoo_cache: dict[str, str | None]) -> None:
    from workloads.micro import is_micro, parse_micro

    w = m.workload
    if is_micro(w) or ":" in w:
        try:
            parse_micro(w)
        except ValueError as exc:
            lines = str(exc).split("\n  ")  # several problems: a count line, then one line each
            for ln in lines[1:] if len(lines) > 1 else lines:
                if not ln.startswith("... and "):
                    problems.add(m.where, "workload", ln)
        return
    if w.lower().endswith((".onnx", ".json")):
        if not Path(w).is_file():
            problems.add(m.where, "workload", f"no such file; got {w!r}; expected an existing .onnx or config.json")
        return
    if w not in zoo_cache:
        from workloads.zoo import get_entry

        try:
            get_entry(w)
            zoo_cache[w] = None
        except KeyError as exc:
            zoo_cache[w] = str(exc.args[0] if exc.args else exc)
    if zoo_cache[w] is not None:
        problems.add(m.where, "workload", str(zoo_cache[w]))


@dataclass(frozen=True)
class MeasurementSet:
    """An immutable, validated collection of :class:`Measurement` rows.

    Parameters
    ----------
    measurements
        The rows, in file order.
    source
        Where they came from (a file path, or a description of a filter/split of one).
    """

    measurements: tuple[Measurement, ...]
    source: str = "<memory>"

    # --- construction ----------------------------------------------------------------------------
    @classmethod
    def load(
        cls,
        path: str | Path,
        *,
        devices: Iterable[str] | None = None,
        check_workloads: bool = True,
    ) -> MeasurementSet:
        """Read and validate a measurement CSV.

        Parameters
        ----------
        path
            The CSV file.
        devices
            Device names a row may name (e.g. the catalog's plus ``"host"``); None skips the check.
        check_workloads
            Parse every micro-workload string and look zoo names up in the registry.

        Raises
        ------
        MeasurementError
            Missing required or unknown columns, bad values, unknown devices or workloads, duplicate ids;
            every problem on its own ``file:line: column: ...`` line.
        FileNotFoundError
            When ``path`` does not exist.
        """
        p = Path(path)
        if not p.is_file():
            what = "not a file" if p.exists() else "no such measurement file"
            raise FileNotFoundError(f"{p}: {what}; expected a CSV written by `nodeperf measure`")
        raw = read_bytes_file(p, what="a measurement CSV written by `nodeperf measure`", error=MeasurementError)
        try:
            text = raw.decode("utf-8-sig")  # a leading byte-order mark (spreadsheets write one) is allowed
        except UnicodeDecodeError as exc:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise MeasurementError(f"{p}: not UTF-8 text; got byte {raw[exc.start]:#04x} at offset {exc.start} "
                                   f"(line {line}); expected a UTF-8 CSV file") from None
        return cls.from_csv_text(text, where=str(p), devices=devices, check_workloads=check_workloads)

    @classmethod
    def from_csv_text(
        cls,
        text: str,
        *,
        where: str = "<csv>",
        devices: Iterable[str] | None = None,
        check_workloads: bool = True,
    ) -> MeasurementSet:
        """Parse CSV ``text`` (see :meth:`load`); ``where`` names it in error messages."""
        text = text.removeprefix("\ufeff")
        from nodeperf.files import refuse_json_as_csv

        refuse_json_as_csv(text, where, what=f"a measurement CSV with the columns {', '.join(REQUIRED_COLUMNS)}, ...",
                           error=MeasurementError)
        if "\x00" in text:  # a corrupted row (the csv module would keep the NUL inside a field)
            at = text.index("\x00")
            line, col = text.count("\n", 0, at) + 1, at - (text.rfind("\n", 0, at) + 1) + 1
            raise MeasurementError(f"{where}:{line}:{col}: NUL byte in a row; got '\\x00'; expected CSV text "
                                   "(a corrupted or binary file?)")
        reader = csv.DictReader(io.StringIO(text), strict=True)
        try:
            header = reader.fieldnames
        except csv.Error as exc:
            raise MeasurementError(f"{where}:1: (header): malformed CSV; got {exc}; expected a header row of "
                                   "column names") from None
        if not header:
            raise MeasurementError(f"{where}:1: empty file; got no header; expected a header with "
                                   f"{', '.join(REQUIRED_COLUMNS)}")
        header = [h.strip() for h in header]
        reader.fieldnames = header
        head_problems = []
        for c in REQUIRED_COLUMNS:
            if c not in header:
                head_problems.append(f"{where}:1: {c}: missing required column; got columns "
                                     f"{short_text(', '.join(header))}; expected {c}{did_you_mean(c, header)}")
        for c in header:
            if c not in COLUMNS:
                head_problems.append(f"{where}:1: {short_text(c, 40)}: unknown column; got {short_repr(c)}; expected one of "
                                     f"{', '.join(COLUMNS)}{did_you_mean(c, COLUMNS)}")
        if len(set(header)) != len(header):
            dup = sorted({h for h in header if header.count(h) > 1})
            head_problems.append(f"{where}:1: {dup[0]}: duplicate column; got it {header.count(dup[0])} times; "
                                 "expected each column once")
        if head_problems:
            raise MeasurementError(_joined(where, head_problems))
        problems = _RowProblems()
        rows: list[Measurement] = []
        stem = Path(where).stem
        while True:
            last = reader.line_num
            try:
                raw = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:  # an unterminated quote, text after a closing quote, a huge field
                expected = (f"fields of at most {csv.field_size_limit()} characters" if "field limit" in str(exc)
                            else "comma-separated fields, each quoted field closed by a double quote before the "
                                 "next comma")
                problems.add(f"{where}:{last + 1}", "(row)", f"malformed CSV; got {exc}; expected {expected}")
                break  # the reader cannot resynchronise after this
            line = reader.line_num
            if any(v is None for v in raw.values()):  # fewer fields than the header (blank lines are skipped)
                given = sum(v is not None for k, v in raw.items() if k is not None)
                problems.add(f"{where}:{line}", "(row)", f"too few fields; got {given}; expected {len(header)} "
                             "as in the header (leave optional values blank, not out)")
                continue
            if None in raw:  # more fields than the header
                problems.add(f"{where}:{line}", "(row)", f"too many fields; got {len(header) + len(raw[None])}; "
                             f"expected {len(header)} as in the header")
                continue
            if all(not (v or "").strip() for v in raw.values()):
                continue
            m = _parse_row(raw, f"{where}:{line}", f"{stem}:{line}", problems)
            if m is not None:
                rows.append(m)
        known = None if devices is None else sorted({d.lower() for d in devices})
        zoo_cache: dict[str, str | None] = {}
        seen: dict[str, str] = {}
        for m in rows:
            if known is not None and m.device not in known:
                problems.add(m.where, "device", f"unknown device; got {m.device!r}; expected one of "
                             f"{', '.join(known) or 'none'}{did_you_mean(m.device, known)}")
            if m.id in seen:
                problems.add(m.where, "id", f"duplicate id; got {m.id!r}, first at {seen[m.id]}; expected unique ids")
            else:
                seen[m.id] = m.where
            if check_workloads:
                _check_workload(m, problems, zoo_cache)
        if problems.items:
            raise MeasurementError(_joined(where, problems.items))
        if not rows:
            raise MeasurementError(f"{where}:2: no measurement rows; got only a header; expected at least one row")
        return cls(tuple(rows), where)

    # --- container -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.measurements)

    def __iter__(self) -> Iterator[Measurement]:
        return iter(self.measurements)

    def __getitem__(self, i: int) -> Measurement:
        return self.measurements[i]

    @property
    def devices(self) -> list[str]:
        return sorted({m.device for m in self.measurements})

    @property
    def categories(self) -> list[str]:
        return sorted({m.category for m in self.measurements})

    @property
    def median_s(self) -> np.ndarray:
        """Measured median times (s), in row order."""
        return np.array([m.median_s for m in self.measurements], dtype=float)

    # --- selection ------------------------------------------------------------------------------
    def filter(
        self,
        predicate: Callable[[Measurement], bool] | None = None,
        *,
        device: str | Sequence[str] | None = None,
        category: str | Sequence[str] | None = None,
        dtype: str | Sequence[str] | None = None,
    ) -> MeasurementSet:
        """Rows matching every given criterion (a name or a list of accepted names each)."""

        def accept(v: str, crit: str | Sequence[str] | None) -> bool:
            if crit is None:
                return True
            return v in ((crit.lower(),) if isinstance(crit, str) else tuple(c.lower() for c in crit))

        keep = tuple(
            m for m in self.measurements
            if accept(m.device, device) and accept(m.category, category) and accept(m.dtype, dtype)
            and (predicate is None or predicate(m))
        )
        return MeasurementSet(keep, f"{self.source} (filtered)")

    def split(self, test_fraction: float = 0.3, seed: int = 0) -> tuple[MeasurementSet, MeasurementSet]:
        """Reproducible train/test split, stratified by (device, category).

        Each stratum of ``n >= 2`` rows sends ``round(test_fraction * n)`` rows (at least 1, at most
        ``n - 1``) to the test set, chosen by a permutation seeded with ``seed`` over the rows sorted by
        id, so the split depends only on the content and the seed. Strata of one row go to train.

        Returns
        -------
        (train, test)
            Both in the original row order.
        """
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"split: test_fraction; got {test_fraction!r}; expected 0 < fraction < 1")
        rng = np.random.default_rng(seed)
        strata: dict[tuple[str, str], list[Measurement]] = {}
        for m in sorted(self.measurements, key=lambda m: (m.device, m.category, m.id)):
            strata.setdefault((m.device, m.category), []).append(m)
        test_ids: set[str] = set()
        for key in sorted(strata):
            group = strata[key]
            n = len(group)
            perm = rng.permutation(n)
            if n < 2:
                continue
            k = min(n - 1, max(1, int(round(test_fraction * n))))
            test_ids.update(group[i].id for i in perm[:k])
        train = tuple(m for m in self.measurements if m.id not in test_ids)
        test = tuple(m for m in self.measurements if m.id in test_ids)
        return (MeasurementSet(train, f"{self.source} (train, seed {seed})"),
                MeasurementSet(test, f"{self.source} (test {test_fraction:g}, seed {seed})"))

    # --- identity and output -----------------------------------------------------------------------
    def content_hash(self) -> str:
        """SHA-256 (hex) of the rows' canonical CSV form, independent of row order and file name."""
        lines = sorted(",".join(_canon(m.to_row()[c]) for c in COLUMNS) for m in self.measurements)
        h = hashlib.sha256()
        h.update(",".join(COLUMNS).encode())
        for ln in lines:
            h.update(b"\n" + ln.encode())
        return h.hexdigest()

    def to_csv_text(self) -> str:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(COLUMNS), lineterminator="\n")
        w.writeheader()
        for m in self.measurements:
            w.writerow(m.to_row())
        return buf.getvalue()

    def to_csv(self, path: str | Path) -> None:
        Path(path).write_text(self.to_csv_text(), encoding="utf-8")

    def to_dataframe(self) -> Any:
        """The rows as a pandas DataFrame (pandas is an optional extra, imported here).

        Returns
        -------
        pandas.DataFrame
            One row per measurement, in row order, with the measurement CSV's :data:`COLUMNS` as
            columns: times in seconds as floats (NaN when blank), ``batch``/``seq``/``context``/
            ``repetitions`` as nullable integers, ``train`` as a nullable boolean, text as strings.
            ``df.attrs["source"]`` is :attr:`source`.

        Raises
        ------
        ImportError
            When pandas is not installed.
        """
        from simulator.report.report import import_pandas

        pd = import_pandas()
        df = pd.DataFrame({c: [getattr(m, c) for m in self.measurements] for c in COLUMNS}, columns=list(COLUMNS))
        df = df.astype({**{c: "Int64" for c in _INT_COLUMNS}, "train": "boolean",
                        **{c: "float64" for c in (*_TIME_COLUMNS, "clock_hz")}})
        df.attrs["source"] = self.source
        return df

    def replace(self, **changes: Any) -> MeasurementSet:
        return dataclasses.replace(self, **changes)


def _canon(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _joined(where: str, items: list[str]) -> str:
    """One line for one problem; else a count line, the first 20 lines and ``... and N more``."""
    from workloads.ir import format_problems

    return format_problems(where, items, "measurement file")
