"""Dotted spec paths for sweeps: read a field, build a variant with fields overridden, parse values.

A sweep names the hardware numbers it varies by the dotted paths every layer uses
(``memory.hbm.read_bandwidth_bytes_per_s``, ``compute.tensor_flops_per_s.bf16``,
``efficiency.launch_overhead_s``; see :mod:`hwmodels.spec`). On a :class:`~hwmodels.spec.SystemSpec`
a path names a field of the system itself (``count``, ``fabric.bandwidth_bytes_per_s``) or, when it is
not one, a field of the system's device (``memory.hbm.read_bandwidth_bytes_per_s`` is
``device.memory.hbm.read_bandwidth_bytes_per_s``; both spellings are accepted).

Values are SI numbers (``3.35e12``) or unit strings (``"3.35 TB/s"``, ``"900 GB/s"``) read by
:func:`hwmodels.units.parse_quantity`; a string of the wrong dimension is an error naming the path.

Examples
--------
>>> from simulator.hardware import load_hardware
>>> h100 = load_hardware("h100-sxm5-80gb")
>>> faster = with_overrides(h100, {"memory.hbm.read_bandwidth_bytes_per_s": "4 TB/s"})
>>> get_path(faster, "memory.hbm.read_bandwidth_bytes_per_s")
4000000000000.0
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from hwmodels import spec as _spec_module
from hwmodels.loader import empty_scaled_table, field_unit, numeric_paths
from hwmodels.spec import DeviceSpec, Provenance, SpecError, SystemSpec
from hwmodels.spec import get_path as _spec_get_path
from hwmodels.spec import replace_path as _spec_replace_path
from hwmodels.units import UnitError, format_quantity
from hwmodels.units import parse_quantity as _units_parse_quantity
from nodeperf.suggest import near_match

__all__ = [
    "SweepPathError",
    "OVERRIDE_SOURCE",
    "resolve_path",
    "field_unit_of",
    "get_path",
    "with_overrides",
    "parse_quantity",
    "known_paths",
    "first_invalid",
]

#: Provenance given to a value a sweep sets (the experiment file is the source of the number).
OVERRIDE_SOURCE = "sweep override"

#: Near matches listed for an unknown path.
_NEAR = 3

#: Fields whose zero means "not present / not modelled / no separate figure" (their spec default is 0).
_ZERO_MEANS_ABSENT = _spec_module.zero_means_absent()
_POSITIVE_UNITS = frozenset({"Hz", "B", "B/s", "FLOP/s", "count", "s", "W"})
_NONNEGATIVE_UNITS = frozenset({"J/B", "J/FLOP"})


class SweepPathError(SpecError):
    """A sweep names a path the spec does not have, or gives a value a field cannot take."""


def _spec_name(spec: Any) -> str:
    return str(getattr(spec, "name", "spec"))


def _system_own_paths(spec: SystemSpec) -> list[str]:
    out: list[str] = []
    for f in dataclasses.fields(spec):
        if f.name in ("device", "provenance", "source_file"):
            continue
        v = getattr(spec, f.name)
        if dataclasses.is_dataclass(v):
            out.extend(p for p, _, _ in numeric_paths(v, f.name))
        elif isinstance(v, int) and not isinstance(v, bool):
            out.append(f.name)
    return out


#: Paths of recently seen spec objects (a sweep resolves the same paths of the same spec many times).
_PATHS_CACHE: dict[int, tuple[Any, tuple[str, ...], frozenset[str]]] = {}
_PATHS_CACHE_SIZE = 64


def _paths_of(spec: Any) -> tuple[tuple[str, ...], frozenset[str]]:
    hit = _PATHS_CACHE.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1], hit[2]
    paths = tuple(_known_paths(spec))
    if len(_PATHS_CACHE) >= _PATHS_CACHE_SIZE:
        _PATHS_CACHE.clear()
    _PATHS_CACHE[id(spec)] = (spec, paths, frozenset(paths))
    return paths, frozenset(paths)


def known_paths(spec: DeviceSpec | SystemSpec) -> list[str]:
    """Every numeric dotted path of ``spec`` a sweep may vary, in declaration order.

    For a system: its own numeric fields (``count``, ``nodes``, ``fabric.*``), then its device's
    paths without the ``device.`` prefix. String fields with a fixed set of choices
    (``systolic.dataflow``) are listed too.
    """
    if not isinstance(spec, (DeviceSpec, SystemSpec)):
        raise SweepPathError(f"sweep: spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
    return list(_paths_of(spec)[0])


def _known_paths(spec: DeviceSpec | SystemSpec) -> list[str]:
    if isinstance(spec, SystemSpec):
        return _system_own_paths(spec) + known_paths(spec.device)
    if not isinstance(spec, DeviceSpec):
        raise SweepPathError(f"sweep: spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
    out = [p for p, _, _ in numeric_paths(spec)]
    if spec.systolic is not None:
        out.append("systolic.dataflow")
    return out


def _unknown_path(spec: Any, path: str) -> SweepPathError:
    choices = known_paths(spec)
    try:
        value = _spec_get_path(spec, path)
    except (SpecError, AttributeError, KeyError, TypeError):
        value = None
    if isinstance(value, tuple):  # a table-valued field (rows): swept by the factor on it where there is one
        scale = f"{path}_scale"
        hint = f"; sweep its factor '{scale}' instead" if scale in choices else ""
        return SweepPathError(f"{_spec_name(spec)}: {path}: a table (rows), not a numeric field; got {path!r}; "
                              f"expected a numeric field{hint}")
    near = near_match(path, choices, n=_NEAR, cutoff=0.5)
    if not near:  # a misspelt leaf under the right parent: offer that parent's fields
        parent = path.rsplit(".", 1)[0] + "."
        near = [c for c in choices if c.startswith(parent)][:_NEAR]
    hint = f"; did you mean {', '.join(repr(n) for n in near)}?" if near else ""
    return SweepPathError(f"{_spec_name(spec)}: {path}: unknown spec path; got {path!r}; expected a numeric field "
                          f"such as 'memory.hbm.read_bandwidth_bytes_per_s' ({len(choices)} known){hint}")


def resolve_path(spec: DeviceSpec | SystemSpec, path: str) -> str:
    """The full dotted path of ``path`` in ``spec`` (``device.``-prefixed for a system's device field).

    Raises
    ------
    SweepPathError
        ``path`` names no numeric field; the message lists the nearest known paths.
    """
    if not isinstance(path, str) or not path.strip():
        raise SweepPathError(f"{_spec_name(spec)}: path; got {path!r}; expected a dotted spec path such as "
                             "'memory.hbm.read_bandwidth_bytes_per_s'")
    path = path.strip()
    if isinstance(spec, SystemSpec):
        if path.startswith("device."):
            inner = path[len("device."):]
            if inner not in _paths_of(spec.device)[1]:
                raise _unknown_path(spec, inner)
            return path
        if path in _system_own_paths(spec):
            return path
        if path in _paths_of(spec.device)[1]:
            return "device." + path
        raise _unknown_path(spec, path)
    if not isinstance(spec, DeviceSpec):
        raise SweepPathError(f"sweep: spec; got a {type(spec).__name__}; expected a DeviceSpec or SystemSpec")
    if path not in _paths_of(spec)[1]:
        raise _unknown_path(spec, path)
    return path


def field_unit_of(spec: DeviceSpec | SystemSpec, path: str) -> str:
    """SI unit of the field at ``path`` (``"B/s"``, ``"count"``, ``"1"``...; ``""`` for a choice string)."""
    return _field_unit(type(spec), resolve_path(spec, path))


@functools.lru_cache(maxsize=256)
def _field_unit(cls: type, full: str) -> str:
    """:func:`hwmodels.loader.field_unit` (type introspection) once per spec class and path."""
    unit = field_unit(cls, full)
    return "" if unit is None else unit


def get_path(spec: DeviceSpec | SystemSpec, path: str) -> Any:
    """Value at dotted ``path`` in ``spec`` (a system's device fields without ``device.`` too).

    >>> from simulator.hardware import load_hardware
    >>> get_path(load_hardware("dgx-h100"), "compute.units")
    132
    """
    return _spec_get_path(spec, resolve_path(spec, path))


def parse_quantity(value: Any, unit: str, *, path: str = "", clock_hz: float | None = None) -> float:
    """``value`` in SI ``unit``: a plain number is taken as already SI, a string is parsed with its unit.

    Parameters
    ----------
    value
        ``3.35e12``, ``"3.35 TB/s"``, ``"900 GB/s"``, ``"80 %"``, ``132``. numpy scalars are numbers.
    unit
        The field's SI unit (:func:`field_unit_of`).
    path
        Dotted path used to locate an error message.
    clock_hz
        Clock for ``"N cycles"`` given for a time field.

    Raises
    ------
    SweepPathError
        Wrong dimension, unknown unit, not finite, a fraction for a count, a negative or zero value
        where the field must be positive. The message is ``path: problem; got X; expected Y``.
    """
    where = f"{path}: " if path else ""
    if isinstance(value, bool) or value is None:
        raise SweepPathError(f"{where}not a quantity; got {value!r}; expected a number or a string such as "
                             f"{_example(unit)}")
    if isinstance(value, str):
        try:
            v = _units_parse_quantity(value, unit, clock_hz=clock_hz)
        except UnitError as exc:
            raise SweepPathError(f"{where}{exc}") from None
    else:
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise SweepPathError(f"{where}not a quantity; got {value!r}; expected a number or a string such as "
                                 f"{_example(unit)}") from None
    _check(v, unit, path.rsplit(".", 1)[-1], where, value)
    return v


def _example(unit: str) -> str:
    from hwmodels.units import unit_examples

    return unit_examples(unit)


def _check(v: float, unit: str, name: str, where: str, raw: Any) -> None:
    if not math.isfinite(v):
        raise SweepPathError(f"{where}not finite; got {raw!r}; expected a finite number")
    if name in _ZERO_MEANS_ABSENT:
        if v < 0:
            raise SweepPathError(f"{where}must not be negative; got {format_quantity(v, unit)}; expected >= 0")
        if v == 0 or unit == "s":
            return
    if unit == "count" and v != int(v):
        raise SweepPathError(f"{where}not a whole number; got {raw!r}; expected an integer")
    if unit in _POSITIVE_UNITS and not v > 0:
        raise SweepPathError(f"{where}must be positive; got {format_quantity(v, unit)}; expected > 0")
    if unit in _NONNEGATIVE_UNITS and v < 0:
        raise SweepPathError(f"{where}must not be negative; got {format_quantity(v, unit)}; expected >= 0")
    if unit == "1":
        if not v > 0:
            raise SweepPathError(f"{where}must be positive; got {v!r}; expected a factor > 0")
        if name.endswith("_fraction") and v > 1:
            raise SweepPathError(f"{where}fraction above 1; got {v!r}; expected 0 < value <= 1")


def first_invalid(values: np.ndarray, unit: str, path: str) -> int | None:
    """Index of the first of ``values`` (SI floats, one per variant) that the field at ``path`` cannot
    take, by the rules :func:`parse_quantity` applies to one value; None when all are fine."""
    name = path.rsplit(".", 1)[-1]
    x = np.asarray(values, dtype=float)
    ok = np.isfinite(x)
    if name in _ZERO_MEANS_ABSENT:
        ok &= x >= 0
        if unit == "1" and name.endswith("_fraction"):
            ok &= x <= 1
    else:
        if unit == "count":
            ok &= x == np.round(x)
        if unit in _POSITIVE_UNITS or unit == "1":
            ok &= x > 0
        if unit in _NONNEGATIVE_UNITS:
            ok &= x >= 0
        if unit == "1" and name.endswith("_fraction"):
            ok &= x <= 1
    if bool(np.all(ok)):
        return None
    return int(np.argmin(ok))


def _choice_value(spec: Any, full: str, value: Any) -> str:
    parent_path, _, leaf = full.rpartition(".")
    parent = _spec_get_path(spec, parent_path)
    f = {fl.name: fl for fl in dataclasses.fields(parent)}[leaf]
    choices = tuple(f.metadata.get("choices", ()))
    if not isinstance(value, str) or (choices and value not in choices):
        from nodeperf.suggest import did_you_mean

        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        raise SweepPathError(f"{_spec_name(spec)}: {full}: unknown {leaf}; got {value!r}; expected one of "
                             f"{', '.join(choices)}{hint}")
    return value


def with_overrides(spec: DeviceSpec | SystemSpec, overrides: Mapping[str, Any], *,
                   source: str = OVERRIDE_SOURCE) -> DeviceSpec | SystemSpec:
    """A copy of ``spec`` with each dotted path of ``overrides`` set to its value; ``spec`` unchanged.

    Values are SI numbers or unit strings (:func:`parse_quantity`); integer (count) fields stay
    integers. The provenance of every overridden path becomes ``source``.

    Raises
    ------
    SweepPathError
        An unknown path (with the nearest known paths) or a value the field cannot take.
    """
    if not overrides:
        return spec
    clock = getattr(getattr(spec, "clock", None) or getattr(getattr(spec, "device", None), "clock", None),
                    "boost_hz", None)
    new = spec
    prov: dict[str, Provenance] = {}
    # a usable_bytes override lands after any capacity_bytes one (which rescales a stated usable_bytes)
    for path, value in sorted(overrides.items(), key=lambda kv: str(kv[0]).endswith("usable_bytes")):
        full = resolve_path(spec, path)
        unit = field_unit(type(spec), full)
        current = _spec_get_path(spec, full)
        if unit is None:
            v: Any = _choice_value(spec, full, value)
        else:
            v = parse_quantity(value, unit, path=f"{_spec_name(spec)}: {full}", clock_hz=clock)
            if isinstance(current, int) and not isinstance(current, bool):
                v = int(v)
            table = empty_scaled_table(spec, full)
            if table is not None and v != 1.0:
                raise SweepPathError(f"{_spec_name(spec)}: {full}: nothing to scale; got {value!r} on a device whose "
                                     f"{table} is empty (no measured table); expected 1, or a device whose catalog "
                                     "gives the table (Hopper)")
        new = _spec_replace_path(new, full, v)
        prov[full] = Provenance(source, "")
    return _with_provenance(new, prov)


def _with_provenance(spec: Any, updates: dict[str, Provenance]) -> Any:
    if isinstance(spec, SystemSpec):
        dev = {p[len("device."):]: v for p, v in updates.items() if p.startswith("device.")}
        own = {p: v for p, v in updates.items() if not p.startswith("device.")}
        device = _with_provenance(spec.device, dev) if dev else spec.device
        return dataclasses.replace(spec, device=device, provenance={**spec.provenance, **own})
    return dataclasses.replace(spec, provenance={**spec.provenance, **updates})
