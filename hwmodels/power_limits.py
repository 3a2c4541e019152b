"""Board power limits below the TDP (``NAME@<N>w``, ``nvidia-smi -pl N``) for data-centre GPUs.

A data-centre GPU's board power limit can be set anywhere between a minimum and a maximum the driver
reports (``nvidia-smi -q -d POWER``: ``Min Power Limit`` / ``Max Power Limit``). ``NAME@<N>w`` is
device (or system) ``NAME`` with ``power.tdp_w`` set to ``N`` W; the existing power-cap model
(:mod:`hwmodels.energy`: kernels whose average power would exceed the limit run slower, through the
device's ``[dvfs]`` V-f line where it has one, else stretched at constant energy) then applies at
that limit. Idle power is the board's and does not change.

The range a board accepts is read from ``catalog/power_modes/limits.toml`` (one sourced table per
device: ``min_w``, ``max_w``); a device without a table accepts limits up to its own ``power.tdp_w``
and above its idle power. A limit above the maximum or below the minimum is one located
:class:`~hwmodels.spec.SpecError`. Devices with shipped power-mode tables (``power_modes/<device>/``,
the Jetson nvpmodel modes) keep those modes only: a mode there changes clocks and units too.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path
from typing import Any

from hwmodels.spec import SpecError, SystemSpec

__all__ = ["LIMITS_FILE", "POWER_LIMIT", "power_limit_range", "power_limit_overlay"]

LIMITS_FILE = Path(__file__).parent / "catalog" / "power_modes" / "limits.toml"
#: A generic power-limit mode: ``500w``, ``450.5w`` (case-insensitive).
POWER_LIMIT = re.compile(r"^(\d+(?:\.\d+)?)w$")


_REF = re.compile(r"@([A-Za-z_][A-Za-z0-9_]*)")


@functools.lru_cache(maxsize=1)
def _limits_data() -> dict[str, Any]:
    try:
        return tomllib.loads(LIMITS_FILE.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SpecError(f"{LIMITS_FILE}: unreadable; got {exc}; expected the catalog's power-limit table") from None


def _limits_table(device: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the device's table, the file's [refs]) of ``limits.toml``."""
    data = _limits_data()
    table = data.get(device.strip().lower(), {})
    refs = data.get("refs", {})
    return (table if isinstance(table, dict) else {}), (refs if isinstance(refs, dict) else {})


def _watts(entry: Any, where: str, refs: dict[str, Any]) -> tuple[float, str]:
    from hwmodels.units import UnitError, parse_quantity

    if not isinstance(entry, dict) or "value" not in entry or not isinstance(entry.get("source"), str):
        raise SpecError(f"{LIMITS_FILE}: {where}: not a sourced value; got {entry!r}; expected "
                        "{ value = \"N W\", source = \"...\" }")
    try:
        watts = parse_quantity(entry["value"], "W")
    except UnitError as exc:
        raise SpecError(f"{LIMITS_FILE}: {where}: {exc}") from None
    return watts, _REF.sub(lambda m: str(refs.get(m.group(1), m.group(0))), entry["source"])


def power_limit_range(dev: Any) -> tuple[float, str, float, str]:
    """(minimum W, its source, maximum W, its source) of the board power limit of device ``dev``."""
    table, refs = _limits_table(dev.name)
    idle = float(dev.power.idle_w)
    lo, lo_src = idle, f"no sourced minimum in {LIMITS_FILE.name}: above the idle power power.idle_w {idle:g} W"
    hi, hi_src = float(dev.power.tdp_w), f"the device's power.tdp_w ({dev.name})"
    if "min_w" in table:
        lo, lo_src = _watts(table["min_w"], f"{dev.name}.min_w", refs)
    if "max_w" in table:
        hi, hi_src = _watts(table["max_w"], f"{dev.name}.max_w", refs)
    return lo, lo_src, hi, hi_src


def power_limit_overlay(spec: Any, mode: str) -> dict[str, Any]:
    """The overlay (for :func:`hwmodels.loader.apply_overlay`) that puts ``spec`` (a DeviceSpec or a
    SystemSpec of them) at board power limit ``mode`` (``"500w"``).

    Raises
    ------
    SpecError
        One located line: not a GPU, a limit above the board's maximum, or below its minimum (or at or
        below its idle power).
    """
    dev = spec.device if isinstance(spec, SystemSpec) else spec
    where = f"{dev.name}@{mode}"
    m = POWER_LIMIT.match(mode.strip().lower())
    if m is None:  # pragma: no cover - callers match POWER_LIMIT first
        raise SpecError(f"{where}: power limit; got {mode!r}; expected <N>w, e.g. 500w")
    watts = float(m.group(1))
    if dev.kind != "gpu":
        raise SpecError(f"{where}: power limit: a board power limit is set on GPUs only; got a {dev.kind} "
                        f"({dev.name}); expected a GPU device or system")
    lo, lo_src, hi, hi_src = power_limit_range(dev)
    if watts > hi:
        raise SpecError(f"{where}: power limit: above the board's maximum; got {watts:g} W; expected at most "
                        f"{hi:g} W ({hi_src})")
    if watts < lo or watts <= float(dev.power.idle_w):
        raise SpecError(f"{where}: power limit: below the board's minimum; got {watts:g} W; expected at least "
                        f"{max(lo, float(dev.power.idle_w)):g} W ({lo_src})")
    src = (f"power limit {where} (nvidia-smi -pl {watts:g}): board power limit {float(dev.power.tdp_w):g} W -> "
           f"{watts:g} W; accepted range {lo:g}-{hi:g} W (min: {lo_src}; max: {hi_src})")
    values = {"power.tdp_w": {"value": f"{watts:g} W", "source": src},
              "power.idle_w": _board_idle(dev, watts),
              "description": {"value": f"{dev.description}, at a {watts:g} W power limit", "source": src}}
    if isinstance(spec, SystemSpec):
        values = {f"device.{k}": v for k, v in values.items()}
    return {"source": src, "values": values}


def _board_idle(dev: Any, watts: float) -> dict[str, str]:
    """``power.idle_w`` under a ``watts`` W limit: the board's own value, its source saying which TDP it was derived
    from (a "x TDP" derivation reads the board's TDP, not the limit: the idle power does not change)."""
    idle, tdp = float(dev.power.idle_w), float(dev.power.tdp_w)
    prov = dev.source_of("power.idle_w")
    was = prov.source if prov is not None else "the board's idle power"
    return {"value": f"{idle!r} W",
            "source": f"{was} [the board's: {idle:g} W of its {tdp:g} W TDP, not of the {watts:g} W power limit; "
                      "the idle power does not change with the limit]"}
