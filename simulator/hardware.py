"""Resolve what a ``--hardware`` name means: catalog devices and systems, TOML paths, the host CPU,
and calibration overlays applied on top.

This is the one place the CLI, the calibrator and the public API turn a user's hardware name into a
spec; overlays are read and validated here (``schema``, known keys, the device they were fitted for).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hwmodels.spec import DeviceSpec, SpecError, SystemSpec
from nodeperf.errors import NodeperfError

__all__ = ["CalibrationError", "OVERLAY_SCHEMA", "device_of", "load_calibration", "apply_calibration",
           "load_hardware", "known_devices", "load_node_or_device"]

OVERLAY_SCHEMA = "nodeperf.calibration/1"


class CalibrationError(NodeperfError, ValueError):
    """A fit could not converge, made errors worse, or a calibration file is invalid."""


def device_of(system: DeviceSpec | SystemSpec) -> DeviceSpec:
    """The device of a device spec, or of a system's devices."""
    if isinstance(system, SystemSpec):
        return system.device
    if isinstance(system, DeviceSpec):
        return system
    raise SpecError(f"calibration: system: not a spec; got a {type(system).__name__}; expected a DeviceSpec or SystemSpec")


def load_calibration(path: str | Path) -> dict[str, Any]:
    """Read a calibration overlay; returns ``{"source", "values", "calibration"}`` (values by dotted path)."""
    from hwmodels.loader import read_toml

    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p}: no such calibration file; got {str(p)!r}; expected a TOML written by "
                                "`nodeperf calibrate`")
    try:
        data = read_toml(p)
    except SpecError as exc:  # a folder, not UTF-8, empty, invalid TOML: already located
        raise CalibrationError(str(exc)) from None
    from hwmodels.tables import table_problems

    allowed = {"schema", "source", "values", "calibration", "refs"}
    for key, msg in table_problems(dict.fromkeys(sorted(set(data) - allowed)), allowed=sorted(allowed),
                                   what="top-level key"):
        raise CalibrationError(f"{p}: {key}: {msg()}")  # the first, in name order
    schema = data.get("schema")
    if schema != OVERLAY_SCHEMA:
        got = "no schema" if schema is None else repr(schema)
        raise CalibrationError(f"{p}: schema: {'missing' if schema is None else 'unknown'} overlay schema; got {got}; "
                               f"expected schema = {OVERLAY_SCHEMA!r}")
    if not isinstance(data.get("calibration", {}), dict):
        raise CalibrationError(f"{p}: calibration: not a table; got {data['calibration']!r}; expected the "
                               "[calibration] table of a calibration overlay")
    if not isinstance(data.get("values"), dict) or not data["values"]:
        raise CalibrationError(f"{p}: values: missing or empty; got {data.get('values')!r}; expected a [values] table "
                               "of \"dotted.path\" = value")
    if not isinstance(data.get("source"), str) or not data["source"].strip():
        raise CalibrationError(f"{p}: source: missing; got {data.get('source')!r}; expected source = \"measured: ...\"")
    return {"source": data["source"], "values": dict(data["values"]), "calibration": data.get("calibration", {}),
            "where": str(p)}


def apply_calibration(spec: DeviceSpec | SystemSpec, path: str | Path) -> DeviceSpec | SystemSpec:
    """``spec`` with the calibration overlay at ``path`` applied (device paths; systems via ``device.``).

    Raises
    ------
    SpecError
        A path the spec does not have (with the nearest field), or a bad value; located in the file.
    CalibrationError
        The file is not a calibration overlay, or it was fitted for another device.
    """
    from hwmodels.loader import apply_overlay

    cal = load_calibration(path)
    dev = device_of(spec)
    fitted_for = str(cal["calibration"].get("device", "")).lower()
    if fitted_for and fitted_for != dev.name.lower():
        raise CalibrationError(f"{path}: calibration.device; got {fitted_for!r}; expected {dev.name!r} (the overlay was "
                               "fitted on another device)")
    values = cal["values"]
    if isinstance(spec, SystemSpec):
        values = {f"device.{k}": v for k, v in values.items()}
    try:
        return apply_overlay(spec, {"source": cal["source"], "values": values})
    except SpecError as exc:
        msg = str(exc).replace("<overlay>", str(path)).replace(": device.", ": ")
        raise SpecError(msg) from None


def _check_mode_order(name: str, base: str, mode: str) -> None:
    """``dgx-h100@500wx2``: a cluster's node count written after its power limit, which then read the limit as an
    unknown power mode of the device: a SpecError naming the order that works (``dgx-h100x2@500w``)."""
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?w)x(\d+)\s*", mode, flags=re.IGNORECASE)
    if m:
        fixed = f"{base.strip()}x{m.group(2)}@{m.group(1).lower()}"
        raise SpecError(f"hardware {name!r}: node count after the power limit; got '@{mode}'; expected NAMExN@<W>w, "
                        f"the limit last; did you mean '{fixed}'?")


def load_hardware(name: str, calibration: str | Path | None = None) -> DeviceSpec | SystemSpec:
    """The spec a CLI ``--hardware NAME`` means, with an optional ``--calibration FILE`` applied.

    ``host`` is this machine's CPU (:func:`hwmodels.host.host_spec`), ``host:N`` the same limited to
    ``N`` cores (a measurement run with ``--threads N``); ``NAME@MODE`` is NAME in one of its power
    modes (``jetson-agx-orin-64gb@30w``, :func:`hwmodels.loader.apply_power_mode`); anything else is a
    catalog device or system name, or a TOML path. A TOML file is a system when it names a ``device`` (see
    :func:`hwmodels.loader.spec_kind`), else a device, so its errors are those of the kind of file it is.
    """
    base, at, mode = name.rpartition("@")
    if at and base.strip() and mode.strip() and "/" not in mode and not mode.endswith(".toml"):
        # NAME@MODE: a device (or system) in one of its power modes (hwmodels/catalog/power_modes/)
        from hwmodels.loader import apply_power_mode

        _check_mode_order(name, base, mode)
        spec_m = apply_power_mode(load_hardware(base), mode)
        return apply_calibration(spec_m, calibration) if calibration else spec_m
    key = name.strip().lower()
    if key.split(":", 1)[0] == "host":  # hwmodels.host.HOST_NAME; the module is imported for the host only
        from hwmodels.host import host_spec

        cores = None
        if ":" in key:
            text = key.split(":", 1)[1]
            if not text.isdigit() or int(text) < 1:
                raise ValueError(f"--hardware {name}: cores; got {text!r}; expected host:N with N a positive integer")
            cores = int(text)
        spec: DeviceSpec | SystemSpec = host_spec(cores)
    else:
        from hwmodels.catalog import (
            is_cluster_name,
            list_systems,
            load_any,
            load_device,
            load_system,
        )

        if key.endswith(".toml") or "/" in key:
            spec = load_any(name)  # a device or a system file, told apart by its keys: one kind's problems
        elif key in {s.lower() for s in list_systems()} or is_cluster_name(key):
            spec = load_system(name)
        else:
            try:
                spec = load_device(name)
            except SpecError as exc:  # an unknown name: the devices' list only, no system named or suggested
                if "unknown name" not in str(exc):
                    raise
                spec = load_any(name)  # raises the message naming devices and systems, nearest first
    if calibration:
        spec = apply_calibration(spec, calibration)
    return spec


def known_devices() -> list[str]:
    """Device names a measurement row may name: the catalog's and ``host``."""
    from hwmodels.catalog import list_devices
    from hwmodels.host import HOST_NAME

    return sorted({*(d.lower() for d in list_devices()), HOST_NAME})


def load_node_or_device(name: str, calibration: str | Path | None = None) -> Any:
    """The heterogeneous node a ``--hardware NAME`` means (:class:`hwmodels.node.NodeSpec`).

    A catalog node name (``hwmodels/catalog/nodes/``) or a node TOML file (one with ``[[devices]]``)
    is loaded as that node; anything else is resolved by :func:`load_hardware` (with the optional
    calibration overlay) and wrapped as a node of one device by :func:`hwmodels.node.node_from_spec`.
    A calibration overlay applies to single devices only.

    Raises
    ------
    SpecError
        Unknown name (with the closest node, device and system names) or an invalid file.
    """
    from hwmodels.node import is_node_file, list_nodes, load_node, node_from_spec

    key = name.strip().lower()
    is_path = key.endswith(".toml") or "/" in key
    node_file = False
    if is_path and Path(name).is_file():
        from hwmodels.loader import read_toml

        node_file = is_node_file(read_toml(name))
    if node_file or (not is_path and key in {n.lower() for n in list_nodes()}):
        if calibration:
            raise ValueError(f"--calibration {calibration}: a calibration overlay applies to one device; got node "
                             f"{name!r}; expected a device name with --calibration, or no overlay")
        return load_node(name)
    try:
        return node_from_spec(load_hardware(name, calibration))
    except SpecError as exc:
        if is_path or "unknown name" not in str(exc):
            raise
        from hwmodels.catalog import list_devices, list_systems
        from nodeperf.suggest import near_match

        nodes, devices, systems = list_nodes(), list_devices(), list_systems()
        near = near_match(key, nodes + devices + systems, n=3, cutoff=0.5, prefix=True)
        msg = (f"hardware {name!r}: unknown name; got {name!r}; expected a node ({', '.join(nodes)}), a device "
               f"({', '.join(devices)}) or a system ({', '.join(systems)})")
        if near:
            msg += "; did you mean " + " or ".join(f"{n!r}{' (a node)' if n in nodes else ''}" for n in near) + "?"
        raise SpecError(msg) from None
