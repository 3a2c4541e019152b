"""Turn sourced TOML hardware files into frozen, SI-unit specs, and apply sourced overlays to them.

File format (documented for authors in ``hwmodels/catalog/README.md``): every number is an inline
table ``{ value = "700 W", source = "..." [, note = "..."] }``; table and key names are the
dataclass field names of :mod:`hwmodels.spec`, so a file path and a spec's dotted path agree
(``[memory]`` entries are addressed by their ``name``). A top-level ``[refs]`` table holds citations
that sources may name as ``"@key"`` or ``"@key: detail"``.

The loader introspects the dataclasses (field types and ``metadata["unit"]``) instead of listing
fields, so a field added to :mod:`hwmodels.spec` becomes loadable without touching this module
(a field with a default may be omitted from files). All problems of a file are collected and
raised as one :class:`~hwmodels.spec.SpecError`, one located line each.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import threading
import tomllib
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from hwmodels.spec import (
    MAX_LISTED_PROBLEMS,
    DeviceSpec,
    EfficiencySpec,
    Provenance,
    SpecError,
    SystemSpec,
    get_path,
    replace_path,
)
from hwmodels.spec import zero_means_absent as _spec_zero_means_absent
from hwmodels.tables import table_problems
from hwmodels.units import UnitError, format_quantity, parse_quantity
from nodeperf.files import MAX_NESTING as MAX_TOML_DEPTH
from nodeperf.files import read_text_file, toml_nesting_depth
from nodeperf.suggest import did_you_mean, format_problems, short_repr

__all__ = [
    "KNOWN_DTYPES",
    "KNOWN_KINDS",
    "DEFAULT_EFFICIENCY_FILE",
    "device_from_dict",
    "load_device_file",
    "system_from_dict",
    "load_system_file",
    "load_efficiency_defaults",
    "apply_overlay",
    "POWER_MODES_DIR",
    "list_power_modes",
    "power_mode_file",
    "apply_power_mode",
    "field_unit",
    "numeric_paths",
    "read_toml",
    "spec_kind",
    "format_problems",
    "SPEC_SCHEMA",
]

logger = logging.getLogger(__name__)

KNOWN_DTYPES: tuple[str, ...] = (
    "fp64", "fp32", "tf32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "int8", "int4",
)
KNOWN_KINDS: tuple[str, ...] = ("gpu", "tpu", "cpu")
# Sub-specs each device kind must have (others are optional).
_REQUIRED_BY_KIND: dict[str, tuple[str, ...]] = {"gpu": ("sm",), "tpu": ("systolic",), "cpu": ()}

DEFAULT_EFFICIENCY_FILE = Path(__file__).parent / "catalog" / "defaults" / "efficiency.toml"
#: Power-mode overlays: ``<device name>/<mode>.toml`` (e.g. ``jetson-agx-orin-64gb/30w.toml``).
POWER_MODES_DIR = Path(__file__).parent / "catalog" / "power_modes"
#: ``schema`` version of device and system files (a file may omit it).
SPEC_SCHEMA = 1

# Fields filled by the loader itself, never read from a file.
_INTERNAL = {"provenance", "source_file"}
# Units whose values must be strictly positive (rates, sizes, clocks, counts, times).
_POSITIVE_UNITS = {"Hz", "B", "B/s", "FLOP/s", "count", "s", "W"}
# Units whose values must be non-negative (energies may legitimately be zero: "not modelled").
_NONNEGATIVE_UNITS = {"J/B", "J/FLOP"}
_QUANTITY_KEYS = {"value", "source", "note"}


# ------------------------------------------------------------------------------------------
# problem collection


class _Problems:
    """Accumulates located problems of one file; raises them together.

    Only the first :data:`~hwmodels.spec.MAX_LISTED_PROBLEMS` messages are built and kept (a message
    may be given as a callable, evaluated only then); the rest are counted, so a file with thousands
    of problems is reported in bounded time.
    """

    def __init__(self, where: str, what: str = "hardware spec") -> None:
        self.where = where
        self.what = what
        self.items: list[str] = []
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def add(self, path: str, msg: str | Callable[[], str]) -> None:
        self.count += 1
        if len(self.items) < MAX_LISTED_PROBLEMS:
            loc = f"{self.where}: {path}: " if path else f"{self.where}: "
            self.items.append(loc + (msg() if callable(msg) else msg))

    def extend(self, lines: typing.Iterable[str], count: int | None = None) -> None:
        """Add already located ``lines`` (``count`` problems in all, default their number)."""
        lines = list(lines)
        self.count += len(lines) if count is None else count
        self.items.extend(lines[: max(0, MAX_LISTED_PROBLEMS - len(self.items))])

    def merge(self, other: _Problems) -> None:
        self.extend(other.items, other.count)

    def raise_if_any(self) -> None:
        if self.count:
            raise SpecError(format_problems(self.where, self.items, self.what, self.count),
                            problems=tuple(self.items), count=self.count)


# ------------------------------------------------------------------------------------------
# type introspection


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0], True
    return tp, False


def _has_default(f: dataclasses.Field) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def field_unit(cls: type, path: str) -> str | None:
    """SI unit declared for dotted ``path`` below dataclass ``cls`` (None for non-numeric fields).

    Keys of mapping fields and names of tuple entries are skipped over:
    ``field_unit(DeviceSpec, "memory.hbm.latency_s") == "s"``.
    """
    parts = path.split(".")
    cur: Any = cls
    i = 0
    while i < len(parts):
        if not (isinstance(cur, type) and dataclasses.is_dataclass(cur)):
            return None
        fields = {f.name: f for f in dataclasses.fields(cur)}
        f = fields.get(parts[i])
        if f is None:
            return None
        tp, _ = _strip_optional(_hints(cur)[f.name])
        origin = typing.get_origin(tp)
        if origin is dict:
            return f.metadata.get("unit") if i + 1 < len(parts) else None
        if origin is tuple:
            cur = typing.get_args(tp)[0]
            i += 2  # skip the entry name
            continue
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            cur = tp
            i += 1
            continue
        return f.metadata.get("unit") or {int: "count", float: "1"}.get(tp)
    return None


# ------------------------------------------------------------------------------------------
# building dataclasses from TOML tables


class _Ctx:
    def __init__(self, problems: _Problems, refs: Mapping[str, str], clock_hz: float | None,
                 clock_invalid: bool = False, lookup: Callable[[str], Any] | None = None):
        self.problems = problems
        self.refs = refs
        self.clock_hz = clock_hz
        # the file gives a clock that is itself wrong: that problem is reported once, not again for
        # every value written in cycles
        self.clock_invalid = clock_invalid
        self.provenance: dict[str, Provenance] = {}
        #: the spec a ``value_of = "NAME:dotted.path"`` reference names (:func:`_quantity_of`); None: not allowed
        self.lookup = lookup


_REF = re.compile(r"(?<![\w.])@([A-Za-z][\w-]*)")


def _expand_source(src: str, refs: Mapping[str, str], path: str, ctx: _Ctx) -> str | None:
    """Replace each ``@key`` in a source string by the citation ``refs[key]``."""
    bad: list[str] = []

    def sub(m: re.Match[str]) -> str:
        key = m.group(1)
        if key not in refs:
            bad.append(key)
            return m.group(0)
        return refs[key]

    out = _REF.sub(sub, src)
    for key in bad:
        ctx.problems.add(
            path,
            lambda key=key: f"unknown reference in source; got '@{key}'; expected a key of [refs] "
                            f"({_listed(sorted(refs)) or 'none defined'}){did_you_mean(key, refs)}",
        )
    return None if bad else out


def _keys_and_source(raw: dict[str, Any], path: str, ctx: Any) -> str | None:
    """The expanded source of a quantity table (``value``, ``source``, ``note``), each unknown key and a missing
    source recorded as a problem at ``path`` (None then)."""
    for kpath, msg in table_problems(dict.fromkeys(sorted(set(raw) - _QUANTITY_KEYS)), path=path,
                                     allowed=("value", "source", "note"), near=sorted(_QUANTITY_KEYS)):
        ctx.problems.add(kpath, msg)  # (sorted: the order of a set's keys is not the file's)
    src = raw.get("source")
    if not isinstance(src, str) or not src.strip():
        ctx.problems.add(path, f"missing source; got {src!r}; expected a citation string")
        return None
    return _expand_source(src.strip(), ctx.refs, path, ctx)


def _quantity(raw: Any, unit: str, path: str, name: str, ctx: _Ctx) -> float | None:
    """One sourced number: ``{value=..., source=...}`` -> SI float (provenance recorded); or another spec's
    value, ``{value_of = "NAME:dotted.path", source = ...}`` (:func:`_quantity_of`)."""
    if isinstance(raw, dict) and "value_of" in raw:
        return _quantity_of(raw, unit, path, name, ctx)
    if not isinstance(raw, dict):
        ctx.problems.add(
            path,
            f"number without a source; got {_short(raw)}; expected "
            f"{{ value = {format_quantity(1.0, unit) if unit not in ('count', '1') else 1!r}, "
            f"source = \"datasheet, table ...\" }}",
        )
        return None
    src = _keys_and_source(raw, path, ctx)
    if "value" not in raw:
        ctx.problems.add(path, "missing value; got nothing; expected value = <quantity>")
        return None
    try:
        v = parse_quantity(raw["value"], unit, clock_hz=ctx.clock_hz)
    except UnitError as e:
        in_cycles = isinstance(raw["value"], str) and raw["value"].strip().endswith(("cycle", "cycles"))
        if not (in_cycles and ctx.clock_invalid and unit == "s"):
            ctx.problems.add(path, str(e))
        return None
    if not _check_value(v, unit, name, path, ctx.problems):
        return None
    note = raw.get("note", "")
    if isinstance(raw["value"], str) and raw["value"].strip().endswith(("cycle", "cycles")):
        conv = f"converted from {raw['value'].strip()} at {format_quantity(ctx.clock_hz or 0, 'Hz')}"
        note = f"{note}; {conv}" if note else conv
    if src is not None:
        ctx.provenance[path] = Provenance(source=src, note=str(note))
    return v


def _quantity_of(raw: dict[str, Any], unit: str, path: str, name: str, ctx: _Ctx) -> float | None:
    """``{ value_of = "NAME:dotted.path", source = "why the same figure holds" }``: the value of a field of
    another spec, written once where it was measured. ``NAME`` is a device instance of the node (node files)
    or a catalog device (device files); the field must have this field's unit. The provenance is this
    source followed by the referenced field's own."""
    for kpath, msg in table_problems(dict.fromkeys(sorted(set(raw) - _REFERENCE_KEYS)), path=path,
                                     allowed=sorted(_REFERENCE_KEYS), near=sorted(_REFERENCE_KEYS | {"value"})):
        ctx.problems.add(kpath, msg)
    src = raw.get("source")
    if not isinstance(src, str) or not src.strip():
        ctx.problems.add(path, f"missing source; got {src!r}; expected a citation string (why the figure holds here)")
        return None
    src = _expand_source(src.strip(), ctx.refs, path, ctx)
    ref = raw["value_of"]
    if not isinstance(ref, str) or ref.count(":") != 1 or not all(x.strip() for x in ref.split(":")):
        ctx.problems.add(path, f"value_of; got {_short(ref)}; expected \"NAME:dotted.path\" "
                               "(\"gpu:efficiency.dram_bandwidth_fraction\")")
        return None
    if ctx.lookup is None:
        ctx.problems.add(path, f"value_of not allowed here; got {ref!r}; expected value = <quantity> (references are "
                               "read in device and node files)")
        return None
    who, field_path = (x.strip() for x in ref.split(":"))
    try:
        spec = ctx.lookup(who)
        v = get_path(spec, field_path)
    except SpecError as exc:
        ctx.problems.add(path, f"value_of {ref!r}: {' '.join(str(exc).split())}")
        return None
    got_unit = field_unit(type(spec), field_path)
    if isinstance(v, bool) or not isinstance(v, int | float) or got_unit != unit:
        ctx.problems.add(path, f"value_of {ref!r}: not a number of this field's unit; got {_short(v)} "
                               f"(unit {got_unit or 'none'}); expected a field in {unit}")
        return None
    if src is None or not _check_value(float(v), unit, name, path, ctx.problems):
        return None
    prov = spec.source_of(field_path) if hasattr(spec, "source_of") else None
    ctx.provenance[path] = Provenance(source=f"{src} (= {ref}: {prov.source if prov else 'no source recorded'})",
                                      note=str(raw.get("note", "")))
    return float(v)


_REFERENCE_KEYS = {"value_of", "source", "note"}
#: catalog devices being loaded through ``value_of`` references, per thread (a cycle is refused)
_REFERENCE_STACK = threading.local()


def _catalog_device(name: str) -> DeviceSpec:
    """The catalog device a device file's ``value_of`` names, by its file name in ``catalog/devices/`` (read
    here, not through :mod:`hwmodels.catalog`, which imports this module); a reference cycle is refused."""
    folder = Path(__file__).parent / "catalog" / "devices"
    names = sorted(p.stem for p in folder.glob("*.toml"))
    key = name.strip().lower()
    if key not in names:
        raise SpecError(f"not a catalog device; got {name!r}; expected a device name such as "
                        f"jetson-agx-orin-64gb{did_you_mean(key, names)}")
    stack: list[str] = getattr(_REFERENCE_STACK, "names", [])
    if key in stack:
        raise SpecError(f"reference cycle; got {' -> '.join([*stack, key])}; expected references that end")
    _REFERENCE_STACK.names = [*stack, key]
    try:
        return load_device_file(folder / f"{key}.toml")
    finally:
        _REFERENCE_STACK.names = stack


#: fields whose 0 means "not present / not modelled / no separate figure" (spec default 0)
_ZERO_ALLOWED = _spec_zero_means_absent()


def _check_value(v: float, unit: str, name: str, path: str, problems: _Problems) -> bool:
    if not math.isfinite(v):
        problems.add(path, f"not finite; got {v!r}; expected a finite number")
        return False
    if name in _ZERO_ALLOWED:
        if v < 0:
            problems.add(path, f"must not be negative; got {format_quantity(v, unit)}; expected >= 0")
            return False
        if v == 0 or unit == "s":
            return True
    if unit in _POSITIVE_UNITS and not v > 0:
        problems.add(path, f"must be positive; got {format_quantity(v, unit)}; expected > 0")
        return False
    if unit in _NONNEGATIVE_UNITS and v < 0:
        problems.add(path, f"must not be negative; got {format_quantity(v, unit)}; expected >= 0")
        return False
    if unit == "1":
        if not v > 0:
            problems.add(path, f"must be positive; got {v!r}; expected a factor > 0")
            return False
        if name.endswith("_fraction") and v > 1:
            problems.add(path, f"fraction above 1; got {v!r}; expected 0 < value <= 1")
            return False
    if unit == "count" and v != int(v):
        problems.add(path, f"not a whole number; got {v!r}; expected an integer")
        return False
    return True


def _build(cls: type, table: Any, path: str, ctx: _Ctx, skip: typing.Collection[str] = ()) -> Any:
    """Instance of dataclass ``cls`` from TOML ``table`` (None after recording problems)."""
    if not isinstance(table, dict):
        ctx.problems.add(path, f"expected a table; got {_short(table)}; expected [{path}] with its fields")
        return None
    fields = [f for f in dataclasses.fields(cls) if f.name not in _INTERNAL and f.name not in skip]
    names = [f.name for f in fields]
    for kpath, msg in table_problems(table, allowed=[*names, *skip], path=path, expected=f"a field of {cls.__name__}",
                                     near=names):
        ctx.problems.add(kpath, msg)
    hints = _hints(cls)
    kwargs: dict[str, Any] = {}
    ok = True
    for f in fields:
        fpath = _join(path, f.name)
        if f.name not in table:
            if _has_default(f):
                _note_default(cls, f, fpath, ctx)
                continue
            ok = False
            unit = f.metadata.get("unit")
            form = unit and unit not in ("",) and f"{{ value = <{unit}>, source = \"...\" }}" or "a value"
            ctx.problems.add(fpath, f"missing field; got nothing; expected {form} ({f.metadata.get('doc', f.name)})")
            continue
        val = _convert(hints[f.name], f, table[f.name], fpath, ctx)
        if val is _BAD:
            ok = False
        else:
            kwargs[f.name] = val
    if not ok:
        return None
    return cls(**kwargs)


_BAD = object()


def _note_default(cls: type, f: dataclasses.Field, path: str, ctx: _Ctx) -> None:
    """Record that a numeric field took its dataclass default (so every number has a source)."""
    if f.metadata.get("unit"):
        absent = f.metadata.get("absent")
        ctx.provenance[path] = Provenance(
            source=f"not modelled: {absent}" if absent else f"default of {cls.__name__}.{f.name} in hwmodels/spec.py",
            note="not given in the file",
        )


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _listed(names: typing.Sequence[str], limit: int = 12) -> str:
    """``a, b, c`` or, past ``limit`` names, the first ones and how many in all."""
    if len(names) <= limit:
        return ", ".join(names)
    return ", ".join(names[:limit]) + f", ... ({len(names)} in all)"


_short = short_repr  # (the name hwmodels.node imports)


def _convert(tp: Any, f: dataclasses.Field, raw: Any, path: str, ctx: _Ctx) -> Any:
    tp, optional = _strip_optional(tp)
    origin = typing.get_origin(tp)
    unit = f.metadata.get("unit", "")
    if optional and raw is None:
        return None
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        v = _build(tp, raw, path, ctx)
        return _BAD if v is None else v
    if origin is tuple and typing.get_args(tp)[0] is str:
        return _convert_names(raw, path, ctx)
    if origin is tuple and typing.get_origin(typing.get_args(tp)[0]) is tuple:
        return _convert_pairs(raw, f, path, ctx)
    if origin is tuple:
        return _convert_entries(typing.get_args(tp)[0], raw, path, ctx)
    if tp is bool:
        if not isinstance(raw, bool):
            ctx.problems.add(path, f"expected true or false; got {_short(raw)}; expected {f.name} = true")
            return _BAD
        return raw
    if origin is dict:
        return _convert_dtype_map(raw, unit, f.name, path, ctx, f.metadata.get("keys"))
    if tp is str:
        if not isinstance(raw, str):
            ctx.problems.add(path, f"expected a string; got {_short(raw)}; expected a quoted value")
            return _BAD
        if f.metadata.get("cite"):  # a citation: non-empty, @refs expanded, recorded as provenance
            if not raw.strip():
                ctx.problems.add(path, f"empty source; got {raw!r}; expected a citation (document + table)")
                return _BAD
            text = _expand_source(raw, ctx.refs, path, ctx)
            if text is None:
                return _BAD
            ctx.provenance[path.rsplit(".", 1)[0]] = Provenance(source=text)
            return text
        choices = f.metadata.get("choices")
        if choices and raw not in choices:
            ctx.problems.add(path, lambda: f"unknown {f.name}; got {raw!r}; expected one of {', '.join(choices)}"
                                           f"{did_you_mean(raw, choices)}")
            return _BAD
        return raw
    if tp in (float, int):
        v = _quantity(raw, unit or ("count" if tp is int else "1"), path, f.name, ctx)
        if v is None:
            return _BAD
        return int(v) if tp is int else float(v)
    ctx.problems.add(path, f"field type {tp!r} is not loadable from TOML; got {_short(raw)}; expected a supported type")
    return _BAD


def _convert_names(raw: Any, path: str, ctx: _Ctx) -> Any:
    """A TOML array of names (``kinds = ["conv2d", "matmul"]``) -> tuple of distinct, non-empty strings."""
    if not isinstance(raw, list) or not raw:
        ctx.problems.add(path, f"expected a non-empty array of names; got {_short(raw)}; expected "
                               f"{path.rsplit('.', 1)[-1]} = [\"name\", ...]")
        return _BAD
    bad = [x for x in raw if not isinstance(x, str) or not x.strip()]
    if bad:
        ctx.problems.add(path, f"expected names (non-empty strings); got {_short(bad[0])}; expected quoted names")
        return _BAD
    dup = sorted({x for x in raw if raw.count(x) > 1})
    if dup:
        ctx.problems.add(path, f"duplicate name; got {dup[0]!r} twice; expected each name once")
        return _BAD
    return tuple(raw)


def _convert_pairs(raw: Any, f: dataclasses.Field, path: str, ctx: _Ctx) -> Any:
    """A sourced table ``{ value = [[2048, 0.82], [4096, 0.87]], source = "..." }`` -> a tuple of
    (whole number, factor) rows: at least one row, the first column positive and strictly increasing, the
    second in (0, 1]. Every bad row is reported at ``path[i]``, naming the field's ``columns``."""
    key_name, val_name = f.metadata.get("columns", ("key", "value"))
    form = f"{{ value = [[<{key_name}>, <{val_name}>], ...], source = \"paper, figure ...\" }}"
    if not isinstance(raw, dict):
        ctx.problems.add(path, f"table without a source; got {_short(raw)}; expected {form}")
        return _BAD
    src = _keys_and_source(raw, path, ctx)
    rows = raw.get("value")
    if not isinstance(rows, list) or not rows:
        ctx.problems.add(path, f"expected a non-empty array of rows; got {_short(rows)}; expected {form}")
        return _BAD
    out: list[tuple[int, float]] = []
    for i, row in enumerate(rows):
        where = f"{path}[{i}]"
        if not isinstance(row, list) or len(row) != 2:
            ctx.problems.add(where, f"expected a row [{key_name}, {val_name}]; got {_short(row)}; expected two numbers")
            continue
        k, v = row
        if isinstance(k, bool) or not isinstance(k, int) or k <= 0:
            ctx.problems.add(where, f"{key_name}; got {_short(k)}; expected a positive whole number")
        elif isinstance(v, bool) or not isinstance(v, int | float) or not (math.isfinite(v) and 0 < v <= 1):
            ctx.problems.add(where, f"{val_name}; got {_short(v)}; expected a number in (0, 1]")
        elif out and k <= out[-1][0]:
            ctx.problems.add(where, f"{key_name} not increasing; got {k} after {out[-1][0]}; expected the rows "
                                    f"sorted by {key_name}, each once")
        else:
            out.append((int(k), float(v)))
    if len(out) != len(rows) or src is None:
        return _BAD
    ctx.provenance[path] = Provenance(source=src, note=str(raw.get("note", "")))
    return tuple(out)


def _convert_entries(cls: type, raw: Any, path: str, ctx: _Ctx) -> Any:
    """Array of tables (``[[memory]]``) -> tuple of ``cls`` keyed by their ``name``."""
    if not isinstance(raw, list) or not all(isinstance(x, dict) for x in raw):
        ctx.problems.add(path, f"expected an array of tables; got {_short(raw)}; expected [[{path}]] entries")
        return _BAD
    out: list[Any] = []
    seen: set[str] = set()
    bad = False
    for i, entry in enumerate(raw):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            ctx.problems.add(f"{path}[{i}]", f"entry without a name; got {name!r}; expected name = \"hbm\"")
            bad = True
            continue
        if name in seen:
            ctx.problems.add(f"{path}.{name}", f"duplicate name; got {name!r} twice; expected unique names")
            bad = True
            continue
        seen.add(name)
        v = _build(cls, entry, f"{path}.{name}", ctx)
        if v is None:
            bad = True
        else:
            out.append(v)
    return _BAD if bad else tuple(out)


def _convert_dtype_map(raw: Any, unit: str, name: str, path: str, ctx: _Ctx,
                       keys: tuple[str, ...] | None = None) -> Any:
    """A mapping field: per-dtype (default) or, with ``keys``, per named key; kept in ``keys`` order."""
    allowed, what = (KNOWN_DTYPES, "dtype") if keys is None else (keys, "key")
    if not isinstance(raw, dict):
        ctx.problems.add(path, f"expected a table of {what}s; got {_short(raw)}; expected [{path}] with "
                               f"{allowed[0]} = {{...}}")
        return _BAD
    out: dict[str, float] = {}
    bad = False
    unknown = dict(table_problems(raw, allowed=allowed, path=path, what=what))
    for k in raw:
        kp = f"{path}.{k}"
        if kp in unknown:  # reported in file order, among the problems of the known keys
            ctx.problems.add(kp, unknown[kp])
            bad = True
            continue
        v = _quantity(raw[k], unit, kp, name, ctx)
        if v is None:
            bad = True
        else:
            out[k] = v
    return _BAD if bad else {k: out[k] for k in allowed if k in out}


# ------------------------------------------------------------------------------------------
# efficiency defaults


def load_efficiency_defaults(path: str | Path = DEFAULT_EFFICIENCY_FILE) -> dict[str, dict[str, Any]]:
    """Per-architecture efficiency tables (raw TOML, sources unexpanded) from ``path``.

    Returns
    -------
    dict
        ``{arch: {field: {value, source, ...}}}``; the ``refs`` table, if any, under ``"refs"``.
    """
    return read_toml(path)


def _merged_efficiency(
    arch: str, own: Any, defaults: Mapping[str, Any], defaults_where: str, ctx: _Ctx
) -> tuple[dict[str, Any], dict[str, str]]:
    """Efficiency table of ``arch`` from the defaults, overridden by the device's own entries."""
    archs = [k for k in defaults if k != "refs"]
    base = defaults.get(arch)
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if isinstance(base, dict):
        for k, v in base.items():
            merged[k] = v
            origin[k] = "defaults"
    elif own is None or not isinstance(own, dict) or not all(
        f.name in own for f in dataclasses.fields(EfficiencySpec) if not _has_default(f)
    ):
        ctx.problems.add(
            "efficiency",
            f"no efficiency defaults for arch {arch!r} in {defaults_where}; got arch = {arch!r}; "
            f"expected one of {', '.join(sorted(archs))} or a complete [efficiency] table{did_you_mean(arch, archs)}",
        )
    if own is not None:
        if not isinstance(own, dict):
            ctx.problems.add("efficiency", f"expected a table; got {own!r}; expected [efficiency] overrides")
        else:
            for k, v in own.items():
                merged[k] = v
                origin[k] = "device"
    return merged, origin


# ------------------------------------------------------------------------------------------
# devices


_DEVICE_SCALARS = ("name", "kind", "vendor", "arch", "description")


def _split_refs(data: Mapping[str, Any], problems: _Problems) -> tuple[dict[str, Any], dict[str, str]]:
    """A file's tables without ``refs``/``schema``, and its ``[refs]`` citations (checked).

    An unknown ``schema`` version is raised at once, alone: the rest of such a file may follow
    another format.
    """
    _check_schema(data, problems.where)
    data = dict(data)
    refs = data.pop("refs", {}) or {}
    data.pop("schema", None)
    if not isinstance(refs, dict):
        problems.add("refs", f"expected a table of strings; got {_short(refs)}; expected key = \"citation\"")
        return data, {}
    for k, v in refs.items():  # a bad entry is reported at its key; the others still resolve
        if not isinstance(v, str):
            problems.add(f"refs.{k}", f"expected a citation string; got {_short(v)}; expected {k} = \"citation\"")
    return data, {k: v for k, v in refs.items() if isinstance(v, str)}


def device_from_dict(
    data: Mapping[str, Any],
    *,
    where: str = "<dict>",
    efficiency_defaults: Mapping[str, Any] | None = None,
    defaults_where: str = str(DEFAULT_EFFICIENCY_FILE),
) -> DeviceSpec:
    """Build a :class:`DeviceSpec` from a parsed TOML mapping; one SpecError lists every problem.

    Parameters
    ----------
    data
        The file's content (see the module docstring for the format).
    where
        Name used to locate problems (the file path).
    efficiency_defaults
        Per-arch efficiency tables (:func:`load_efficiency_defaults`); loaded from
        ``catalog/defaults/efficiency.toml`` when None.
    """
    problems = _Problems(where)
    data, refs = _split_refs(data, problems)

    for key in _DEVICE_SCALARS:
        if key not in data:
            problems.add(key, f"missing field; got nothing; expected {key} = \"...\"")
        elif not isinstance(data[key], str):
            problems.add(key, f"expected a string; got {_short(data[key])}; expected {key} = \"...\"")
    kind = data.get("kind")
    if isinstance(kind, str) and kind not in KNOWN_KINDS:
        problems.add("kind", f"unknown device kind; got {kind!r}; expected one of {', '.join(KNOWN_KINDS)}{did_you_mean(kind, KNOWN_KINDS)}")

    # The clock is needed first: latencies may be given in cycles.
    clock_hz: float | None = None
    clock_invalid = False
    clock_raw = data.get("clock")
    if isinstance(clock_raw, dict) and isinstance(clock_raw.get("boost_hz"), dict):
        try:
            clock_hz = parse_quantity(clock_raw["boost_hz"].get("value"), "Hz")
        except UnitError:
            clock_hz = None  # reported when the clock itself is built
        if clock_hz is None or not (math.isfinite(clock_hz) and clock_hz > 0):
            clock_hz, clock_invalid = None, True
    ctx = _Ctx(problems, refs, clock_hz, clock_invalid, lookup=_catalog_device)

    if efficiency_defaults is None:
        efficiency_defaults = load_efficiency_defaults()
    arch = data.get("arch") if isinstance(data.get("arch"), str) else ""
    eff_table, eff_origin = _merged_efficiency(
        arch, data.get("efficiency"), efficiency_defaults, defaults_where, ctx
    )
    eff_refs = efficiency_defaults.get("refs", {}) or {}

    # Everything but efficiency and the scalars goes through the generic builder.
    body = {k: v for k, v in data.items() if k not in _DEVICE_SCALARS and k != "efficiency"}
    skip = set(_DEVICE_SCALARS) | {"efficiency"}
    partial = _build_fields(DeviceSpec, body, ctx, skip)

    # Efficiency: build with the defaults' refs for values from the defaults file.
    eff_ctx_dev = ctx
    eff_ctx_def = _Ctx(_Problems(f"{defaults_where} [{arch}]"), eff_refs, clock_hz, clock_invalid)
    eff_from_def = {k: v for k, v in eff_table.items() if eff_origin.get(k) == "defaults"}
    eff_from_dev = {k: v for k, v in eff_table.items() if eff_origin.get(k) == "device"}
    eff_kwargs = _efficiency_kwargs(eff_from_def, eff_from_dev, eff_ctx_def, eff_ctx_dev)
    problems.merge(eff_ctx_def.problems)
    for k, prov in eff_ctx_def.provenance.items():
        ctx.provenance[k] = Provenance(prov.source, _joined_note(prov.note, f"default for arch {arch!r} from {Path(defaults_where).name}"))

    if "op_support" in data and isinstance(kind, str) and kind in KNOWN_KINDS and kind != "tpu":
        # only the systolic (tpu) rules honour the table today; elsewhere it would be silently ignored
        problems.add("op_support", f"not supported for kind {kind!r}; got an [op_support] table; expected it only "
                                   "on kind = \"tpu\" devices (fixed-function engines costed by the systolic rules)")
    if isinstance(kind, str) and kind in _REQUIRED_BY_KIND:
        for req in _REQUIRED_BY_KIND[kind]:
            if req not in data:
                problems.add(req, f"missing section for kind {kind!r}; got nothing; expected a [{req}] table")

    if partial is not None and eff_kwargs is not None:
        _cross_checks(partial, problems)
    problems.raise_if_any()
    assert partial is not None and eff_kwargs is not None
    return DeviceSpec(
        **{k: data[k] for k in _DEVICE_SCALARS},
        efficiency=EfficiencySpec(**eff_kwargs),
        provenance=dict(sorted(ctx.provenance.items())),
        source_file=where,
        **partial,
    )


def _joined_note(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


def _build_fields(cls: type, table: dict[str, Any], ctx: _Ctx, skip: set[str]) -> dict[str, Any] | None:
    """Like :func:`_build` but returns the kwargs (the caller adds the skipped fields)."""
    fields = [f for f in dataclasses.fields(cls) if f.name not in _INTERNAL and f.name not in skip]
    names = [f.name for f in fields]
    for kpath, msg in table_problems(table, allowed=names, expected=f"a field of {cls.__name__}",
                                     near=names + sorted(skip)):
        ctx.problems.add(kpath, msg)
    hints = _hints(cls)
    out: dict[str, Any] = {}
    ok = True
    for f in fields:
        if f.name not in table:
            if _has_default(f):
                continue
            ok = False
            ctx.problems.add(f.name, f"missing field; got nothing; expected {f.name} ({f.metadata.get('doc', 'a table or sourced value')})")
            continue
        v = _convert(hints[f.name], f, table[f.name], f.name, ctx)
        if v is _BAD:
            ok = False
        else:
            out[f.name] = v
    return out if ok else None


def _efficiency_kwargs(
    from_defaults: dict[str, Any], from_device: dict[str, Any], ctx_def: _Ctx, ctx_dev: _Ctx
) -> dict[str, Any] | None:
    fields = {f.name: f for f in dataclasses.fields(EfficiencySpec)}
    hints = _hints(EfficiencySpec)
    out: dict[str, Any] = {}
    ok = True
    for src, ctx in ((from_defaults, ctx_def), (from_device, ctx_dev)):
        unknown = dict(table_problems(src, allowed=list(fields), path="efficiency",
                                      expected="a field of EfficiencySpec"))
        for k, raw in src.items():
            path = f"efficiency.{k}"
            if path in unknown:  # reported in file order, among the problems of the known fields
                ctx.problems.add(path, unknown[path])
                ok = False
                continue
            v = _convert(hints[k], fields[k], raw, path, ctx)
            if v is _BAD:
                ok = False
            else:
                out[k] = v
    for name, f in fields.items():
        if name not in from_defaults and name not in from_device and _has_default(f):
            _note_default(EfficiencySpec, f, f"efficiency.{name}", ctx_dev)
        if name not in out and not _has_default(f) and name not in from_defaults and name not in from_device:
            ctx_dev.problems.add(
                f"efficiency.{name}",
                f"missing field; got nothing in the arch defaults nor the device file; "
                f"expected {{ value = ..., source = \"...\" }} ({f.metadata.get('doc', name)})",
            )
            ok = False
    return out if ok else None


def _cross_checks(kw: dict[str, Any], problems: _Problems) -> None:
    clock = kw.get("clock")
    if clock is not None and clock.sustained_hz > clock.boost_hz:
        problems.add(
            "clock.sustained_hz",
            f"sustained clock above boost; got {format_quantity(clock.sustained_hz, 'Hz')}; "
            f"expected <= clock.boost_hz ({format_quantity(clock.boost_hz, 'Hz')})",
        )
    dvfs = kw.get("dvfs")
    if clock is not None and dvfs is not None and not dvfs.base_hz < clock.sustained_hz:
        problems.add(
            "dvfs.base_hz",
            f"base clock not below the sustained clock; got {format_quantity(dvfs.base_hz, 'Hz')}; "
            f"expected < clock.sustained_hz ({format_quantity(clock.sustained_hz, 'Hz')})",
        )
    power = kw.get("power")
    if power is not None and power.idle_w >= power.tdp_w:
        problems.add(
            "power.idle_w",
            f"idle power not below TDP; got {format_quantity(power.idle_w, 'W')}; "
            f"expected < power.tdp_w ({format_quantity(power.tdp_w, 'W')})",
        )
    compute, energy = kw.get("compute"), kw.get("energy")
    if compute is not None and energy is not None:
        for ename, cname in (("tensor_j_per_flop", "tensor_flops_per_s"), ("vector_j_per_flop", "vector_flops_per_s"),
                             ("chain_j_per_flop", "vector_flops_per_s")):
            have = getattr(compute, cname)
            for dt in getattr(energy, ename):
                if dt not in have:
                    problems.add(
                        f"energy.{ename}.{dt}",
                        f"energy for a dtype without a throughput; got {dt!r}; expected a dtype of "
                        f"compute.{cname} ({', '.join(have) or 'none'})",
                    )
    memory = kw.get("memory")
    if memory is not None and len(memory) == 0:
        problems.add("memory", "no memory levels; got an empty list; expected [[memory]] entries, outermost first")
    for level in memory or ():
        _check_usable(level, problems)


#: A marketed memory size in decimal units (80 GB) names binary-sized stacks (80 GiB): the most a runtime
#: can report is the marketed figure read in binary units.
_BINARY_PER_DECIMAL = 2**30 / 1e9


def _check_usable(level: Any, problems: _Problems) -> None:
    """``memory.<level>.usable_bytes`` (the runtime's total) must not exceed the level's capacity read in
    binary units (an 80 GB part has 80 GiB of stacks; its runtime reports 79.18 GiB)."""
    u, cap = level.usable_bytes, level.capacity_bytes
    if u > cap * _BINARY_PER_DECIMAL:
        problems.add(f"memory.{level.name}.usable_bytes",
                     f"above the level's capacity; got {u / 2**30:.2f} GiB; expected at "
                     f"most memory.{level.name}.capacity_bytes {format_quantity(cap, 'B')} read in binary units "
                     f"({cap / 1e9:.4g} GiB)")


#: Largest TOML input read (bytes): specs, nodes, scenarios and overlays are a few kilobytes.
MAX_TOML_BYTES = 16 * 1024 * 1024

_TOML_AT = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def read_toml(path: str | Path) -> dict[str, Any]:
    """The parsed TOML file at ``path``.

    Raises
    ------
    SpecError
        One located line: the file is missing, a folder, unreadable, not UTF-8, empty (no keys), or
        not valid TOML (``<file>:<line>:<column>: invalid TOML: ...``).
    """
    p = Path(path)
    text = read_text_file(p, what="a TOML file", error=SpecError, max_bytes=MAX_TOML_BYTES)
    raw = text
    depth = toml_nesting_depth(text)
    if depth > MAX_TOML_DEPTH:
        raise SpecError(f"{p}: TOML nested too deeply; got {depth} levels of arrays or inline tables; "
                        f"expected at most {MAX_TOML_DEPTH}")
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = _TOML_AT.search(msg)
        if m:
            where, msg = f"{p}:{m.group(1)}:{m.group(2)}", msg[: m.start()]
        else:
            where, msg = f"{p}:{text.count(chr(10)) + 1}", msg.replace(" (at end of document)", " at the end of the file")
        raise SpecError(f"{where}: invalid TOML; got {msg.strip()}; expected valid TOML syntax") from e
    except RecursionError:  # a nesting the depth scan missed (e.g. dotted keys): still one located line
        raise SpecError(f"{p}: TOML nested too deeply; got more levels than the parser's recursion limit; "
                        f"expected at most {MAX_TOML_DEPTH}") from None
    if not data:
        got = "0 bytes" if not raw.strip() else "no keys (only comments)"
        raise SpecError(f"{p}: empty file; got {got}; expected a TOML file with its keys and tables")
    return data


def spec_kind(data: Mapping[str, Any]) -> str:
    """``"system"`` or ``"device"``: the kind of a parsed spec file, told by its keys.

    A system names its ``device``; a file with a ``count`` and no device ``kind`` is a system that
    lacks it. Anything else is a device (a stray ``count`` in a device file is one unknown key).
    """
    return "system" if "device" in data or ("count" in data and "kind" not in data) else "device"


def _check_schema(data: Mapping[str, Any], where: str) -> None:
    """Refuse a file whose ``schema`` is not :data:`SPEC_SCHEMA` (a file without one is taken as version 1)."""
    if "schema" not in data:
        return
    v = data["schema"]
    if isinstance(v, bool) or v != SPEC_SCHEMA:
        raise SpecError(f"{where}: schema: unknown schema version; got {_short(v)}; expected schema = {SPEC_SCHEMA}")


def load_device_file(
    path: str | Path, *, efficiency_defaults_file: str | Path = DEFAULT_EFFICIENCY_FILE
) -> DeviceSpec:
    """Load one device TOML file into a :class:`DeviceSpec` (SI units, per-path provenance).

    Raises
    ------
    SpecError
        Listing every problem of the file, one located line each.
    """
    data = read_toml(path)
    if spec_kind(data) == "system":
        keys = ", ".join(k for k in ("device", "count") if k in data)
        raise SpecError(f"{path}: a system file where a device is expected; got the system key(s) {keys}; "
                        "expected a device TOML file (name, kind, clock, compute, memory, ...)")
    defaults = load_efficiency_defaults(efficiency_defaults_file)
    return device_from_dict(
        data, where=str(path), efficiency_defaults=defaults, defaults_where=str(efficiency_defaults_file)
    )


# ------------------------------------------------------------------------------------------
# systems


def system_from_dict(
    data: Mapping[str, Any],
    *,
    resolve_device: Callable[[str], DeviceSpec],
    where: str = "<dict>",
) -> SystemSpec:
    """Build a :class:`SystemSpec`; ``device = "name"`` is resolved through ``resolve_device``."""
    problems = _Problems(where)
    data, refs = _split_refs(data, problems)
    ctx = _Ctx(problems, refs, None)
    for key in ("name", "description"):
        if not isinstance(data.get(key), str):
            problems.add(key, f"missing or not a string; got {_short(data.get(key))}; expected {key} = \"...\"")
    device: DeviceSpec | None = None
    dev_name = data.get("device")
    if dev_name is None:
        problems.add("device", "missing field; got nothing; expected device = \"<catalog name or device TOML path>\"")
    elif not isinstance(dev_name, str):
        problems.add("device", f"expected a device name; got {_short(dev_name)}; expected device = \"h100-sxm5-80gb\"")
    else:
        try:
            device = resolve_device(dev_name)
        except SpecError as e:
            if e.count > 1:  # a device file with problems: its own located lines
                problems.extend(e.problems, e.count)
            else:
                msg = str(e).replace("\n", " ")
                own = f"device {dev_name!r}: "
                problems.add("device", msg[len(own):] if msg.startswith(own) else msg)
    body = {k: v for k, v in data.items() if k not in ("name", "description", "device")}
    partial = _build_fields(SystemSpec, body, ctx, {"name", "description", "device"})
    problems.raise_if_any()
    assert partial is not None and device is not None
    return SystemSpec(
        name=data["name"],
        description=data["description"],
        device=device,
        provenance=dict(sorted(ctx.provenance.items())),
        source_file=where,
        **partial,
    )


def load_system_file(path: str | Path, *, resolve_device: Callable[[str], DeviceSpec]) -> SystemSpec:
    """Load one system TOML file; its ``device`` names a catalog device (or a file path)."""
    data = read_toml(path)
    if spec_kind(data) == "device":
        raise SpecError(f"{path}: a device file where a system is expected; got neither a device nor a count "
                        "key; expected a system TOML file with device = \"<catalog name or path>\" and count")
    return system_from_dict(data, resolve_device=resolve_device, where=str(path))


# ------------------------------------------------------------------------------------------
# overlays


def _overlay_entries(overlay: Any, source: str | None) -> tuple[str, str | None, dict[str, Any]]:
    if isinstance(overlay, (str, Path)):
        where = str(overlay)
        data = read_toml(overlay)
    elif isinstance(overlay, Mapping):
        where = "<overlay>"
        data = dict(overlay)
    else:
        raise SpecError(f"<overlay>: not an overlay; got {overlay!r}; expected a TOML path or a mapping")
    if "values" in data:
        # `calibration` is the metadata table a calibration overlay carries (`nodeperf calibrate --out`):
        # where the values came from, not values; it is accepted and not applied
        extra = set(data) - {"values", "source", "refs", "schema", "calibration"}
        if extra:
            raise SpecError(
                f"{where}: unknown top-level keys; got {sorted(extra)}; expected source, values, refs, calibration"
                f"{did_you_mean(sorted(extra)[0], ['source', 'values', 'refs', 'calibration'])}"
            )
        if not isinstance(data.get("calibration", {}), Mapping):
            raise SpecError(f"{where}: calibration: not a table; got {_short(data['calibration'])}; expected the "
                            "[calibration] metadata table of a calibration overlay")
        values = data["values"]
        file_source = data.get("source")
    else:
        values = {k: v for k, v in data.items() if k not in ("source", "refs", "schema")}
        file_source = data.get("source")
    src = source if source is not None else file_source
    if not isinstance(values, Mapping):
        raise SpecError(f"{where}: values: not a table; got {values!r}; expected \"dotted.path\" = value")
    refs = data.get("refs") or {}
    flat = _flatten(values)
    if isinstance(refs, Mapping) and refs:  # "@key" in a source expands to the overlay's [refs] citation
        def cite(text: Any) -> Any:
            return _REF.sub(lambda m: str(refs.get(m.group(1), m.group(0))), text) if isinstance(text, str) else text
        src = cite(src)
        flat = {k: ({**v, "source": cite(v.get("source"))} if isinstance(v, Mapping) else v) for k, v in flat.items()}
    return where, src, flat


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested TOML tables and quoted dotted keys both give dotted paths."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        p = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping) and not (set(v) & {"value"}):
            out.update(_flatten(v, p))
        else:
            out[p] = v
    return out


def apply_overlay(spec: Any, overlay: str | Path | Mapping[str, Any], *, source: str | None = None) -> Any:
    """A copy of ``spec`` (DeviceSpec or SystemSpec) with the overlay's values; base untouched.

    Parameters
    ----------
    spec
        The spec to vary.
    overlay
        TOML file path or mapping. Either ``{"source": "...", "values": {"dotted.path": value}}``
        (a calibration overlay's ``[calibration]`` metadata table may accompany them) or a flat ``{"dotted.path": value}`` with ``source=`` given. A value may be a unit string
        (``"3.0 TB/s"``), a plain number where the field is dimensionless, or an inline
        ``{value = ..., source = ...}`` carrying its own source.
    source
        Citation for the overlaid values (e.g. ``"measured: runs/h100.csv, calibration 3"``);
        overrides the overlay file's own ``source``.

    Returns
    -------
    DeviceSpec or SystemSpec
        New spec; the provenance of each overlaid path becomes the overlay's source.

    Raises
    ------
    SpecError
        Listing every unknown path (with a near match), bad value or missing source.
    """
    where, default_src, values = _overlay_entries(overlay, source)
    problems = _Problems(where, "overlay")
    new = spec
    prov_updates: dict[str, Provenance] = {}
    clock = getattr(getattr(spec, "clock", None), "boost_hz", None)
    for path, raw in sorted(values.items(), key=lambda kv: kv[0].endswith("usable_bytes")):  # after capacity_bytes
        try:
            current = get_path(spec, path)
        except SpecError as e:
            problems.add(path, str(e).split(": ", 2)[-1] if ": " in str(e) else str(e))
            continue
        if dataclasses.is_dataclass(current) or isinstance(current, (dict, tuple)):
            problems.add(path, f"not a number field; got a {type(current).__name__}; expected a path to a numeric field")
            continue
        unit = field_unit(type(spec), path)
        raw_value, src = raw, default_src
        if isinstance(raw, Mapping):
            raw_value, src = raw.get("value"), raw.get("source", default_src)
        if not isinstance(src, str) or not src.strip():
            problems.add(path, f"missing source; got {src!r}; expected source = \"measured: file\" or a citation")
            continue
        if unit is None:
            choices = _field_choices(spec, path)
            if isinstance(current, str) and isinstance(raw_value, str) and choices and raw_value not in choices:
                problems.add(path, lambda p=path, v=raw_value, c=choices: f"unknown {p.rsplit('.', 1)[-1]}; got {v!r}; "
                                                                          f"expected one of {', '.join(c)}{did_you_mean(v, c)}")
            elif isinstance(current, str) and isinstance(raw_value, str):
                new = replace_path(new, path, raw_value)
                prov_updates[path] = Provenance(src, f"overlay {where}")
            else:
                problems.add(path, f"cannot overlay this field; got {raw_value!r}; expected a numeric field")
            continue
        try:
            v = parse_quantity(raw_value, unit, clock_hz=clock)
        except UnitError as e:
            problems.add(path, str(e))
            continue
        if not _check_value(v, unit, path.rsplit(".", 1)[-1], path, problems):
            continue
        if isinstance(current, int) and not isinstance(current, bool):
            v = int(v)
        table = empty_scaled_table(spec, path)
        if table is not None and v != 1.0:
            problems.add(path, f"nothing to scale on {getattr(spec, 'name', 'this device')}: {table} is empty (no "
                               f"measured table); got {raw_value!r}; expected 1, or a device whose catalog gives "
                               "the table (Hopper)")
            continue
        new = replace_path(new, path, v)
        prov_updates[path] = Provenance(src, f"overlay {where}")
    problems.raise_if_any()
    return _with_provenance(new, prov_updates)


def empty_scaled_table(spec: Any, path: str) -> str | None:
    """The table path ``X`` when ``path`` is ``X_scale``, a factor on every ratio of a table-valued field
    (``efficiency.flash2_causal_fwd_ratio_scale``), and ``spec`` has no rows in ``X``: setting the factor to
    anything but 1 there changes nothing (a located error for overlays, sweep axes and calibration). None
    otherwise."""
    base = str(path).removesuffix("_scale")
    if base == path:
        return None
    try:
        table = get_path(spec, base)
    except SpecError:
        return None
    return base if isinstance(table, tuple) and not table else None


def _field_choices(spec: Any, path: str) -> tuple[str, ...] | None:
    """The ``choices`` metadata of the dataclass field at dotted ``path`` (None when it has none)."""
    parent_path, _, leaf = path.rpartition(".")
    parent = get_path(spec, parent_path) if parent_path else spec
    if not dataclasses.is_dataclass(parent):
        return None
    f = {fl.name: fl for fl in dataclasses.fields(parent)}.get(leaf)
    return f.metadata.get("choices") if f is not None else None


def _with_provenance(spec: Any, updates: dict[str, Provenance]) -> Any:
    if not updates:
        return spec
    if isinstance(spec, SystemSpec):
        dev_updates = {p[len("device."):]: v for p, v in updates.items() if p.startswith("device.")}
        own = {p: v for p, v in updates.items() if not p.startswith("device.")}
        device = _with_provenance(spec.device, dev_updates)
        return dataclasses.replace(
            spec, device=device, provenance=dict(sorted({**spec.provenance, **own}.items()))
        )
    return dataclasses.replace(spec, provenance=dict(sorted({**spec.provenance, **updates}.items())))


def numeric_paths(spec: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """Every numeric leaf of ``spec`` as ``(dotted path, value, SI unit)``, in declaration order."""
    out: list[tuple[str, Any, str]] = []
    for f in dataclasses.fields(spec):
        if f.name in _INTERNAL:
            continue
        v = getattr(spec, f.name)
        p = _join(prefix, f.name)
        unit = f.metadata.get("unit", "")
        if dataclasses.is_dataclass(v):
            out.extend(numeric_paths(v, p))
        elif isinstance(v, tuple) and v and dataclasses.is_dataclass(v[0]):
            for e in v:
                out.extend(numeric_paths(e, f"{p}.{e.name}"))
        elif isinstance(v, dict):
            out.extend((f"{p}.{k}", x, unit) for k, x in v.items())
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and unit:
            out.append((p, v, unit))
    return out


# ------------------------------------------------------------------------------------------
# power modes


def list_power_modes(device: str) -> list[str]:
    """Power modes (``"15w"``, ``"30w"``...) shipped for the catalog device called ``device``, sorted by
    their wattage; empty for a device without modes."""
    folder = POWER_MODES_DIR / device.strip().lower()
    names = [p.stem for p in folder.glob("*.toml")] if folder.is_dir() else []

    def watts(name: str) -> tuple[float, str]:
        m = re.match(r"(\d+(?:\.\d+)?)w$", name)
        return (float(m.group(1)) if m else math.inf, name)

    return sorted(names, key=watts)


def power_mode_file(device: str, mode: str) -> Path:
    """The overlay file of power mode ``mode`` (case-insensitive, ``"30w"`` or ``"30W"``) of ``device``.

    Raises
    ------
    SpecError
        The device has no power modes, or no mode of that name (with the modes it has).
    """
    modes = list_power_modes(device)
    key = mode.strip().lower()
    if not modes and re.fullmatch(r"-\s*\d+(?:\.\d+)?\s*w", key):
        raise SpecError(f"{device}@{mode}: power limit: negative; got {mode!r}; expected a positive board power "
                        f"limit ({device}@<N>w, N in watts)")
    if not modes:
        raise SpecError(f"{device}@{mode}: power mode: the device has no power modes; got {mode!r}; expected a "
                        f"board power limit on a GPU ({device}@<N>w, N in watts) or a device with a folder in "
                        f"{POWER_MODES_DIR.name}/ (devices with modes: "
                        f"{', '.join(sorted(p.name for p in POWER_MODES_DIR.iterdir() if p.is_dir())) or 'none'})")
    if key not in modes:
        raise SpecError(f"{device}@{mode}: power mode: unknown mode; got {mode!r}; expected one of "
                        f"{', '.join(modes)}{did_you_mean(key, modes)}")
    return POWER_MODES_DIR / device.strip().lower() / f"{key}.toml"


def apply_power_mode(spec: Any, mode: str) -> Any:
    """``spec`` (a DeviceSpec, or a SystemSpec of such devices) in power mode ``mode``.

    A power mode is an overlay of the clocks, enabled units, memory bandwidth and power budget the
    vendor's mode table sets (each value sourced in the overlay file); the base file describes the
    fastest mode. The device keeps its name; its description names the mode. On a GPU without shipped
    modes, ``<N>w`` is a board power limit (:func:`hwmodels.power_limits.power_limit_overlay`).
    """
    dev = spec.device if isinstance(spec, SystemSpec) else spec
    from hwmodels.power_limits import POWER_LIMIT, power_limit_overlay

    if not list_power_modes(dev.name) and POWER_LIMIT.match(mode.strip().lower()):
        # a board power limit (nvidia-smi -pl N): hwmodels/power_limits.py
        return apply_overlay(spec, power_limit_overlay(spec, mode))
    path = power_mode_file(dev.name, mode)
    where, src, values = _overlay_entries(path, None)
    meta = read_toml(path).get("calibration", {})
    fitted = str(meta.get("device", "")).lower() if isinstance(meta, Mapping) else ""
    if fitted and fitted != dev.name.lower():
        raise SpecError(f"{where}: calibration.device: overlay for another device; got {fitted!r}; expected "
                        f"{dev.name!r}")
    if src is None:
        raise SpecError(f"{where}: source: missing; got nothing; expected source = \"<the mode table cited>\"")
    if not isinstance(spec, SystemSpec):
        return apply_overlay(spec, path)
    try:
        return apply_overlay(spec, {"source": src, "values": {f"device.{k}": v for k, v in values.items()}})
    except SpecError as exc:
        raise SpecError(str(exc).replace("<overlay>", where).replace(": device.", ": ")) from None
