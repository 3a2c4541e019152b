"""What one device costs per hour: a cloud list price, or the total cost of owning it.

Two ways to price a device-hour:

``cloud``
    The on-demand price of renting one device (``hwmodels/catalog/prices.toml``): a cloud instance's
    list price divided by its accelerators, with the provider, instance, region, date and source of
    every number. Host CPUs, memory and network of the instance are included in it.
``tco``
    Total cost of ownership: the purchase price amortised over ``years`` of service at a
    ``utilization`` (the fraction of wall-clock hours the device does paid work), plus the electricity
    of ``power_w`` at a data-centre ``pue`` and a price ``usd_per_kwh``::

        usd_per_hour = purchase_usd / (years * 8760 * utilization) + power_w * pue * usd_per_kwh / 1000

    The purchase price comes from the price file (``purchase_usd``, sourced) or from the caller; the
    power defaults to the device's datasheet ``power.tdp_w`` (an upper bound: the board limit).
    Financing, racks, networking, staff and cooling other than the PUE are not included.

Capacity per dollar (``tokens/s / usd_per_hour``) and per watt can then be compared across devices.

Examples
--------
>>> q = usd_per_hour("h100-sxm5-80gb", mode="tco", purchase_usd=30000.0, years=4.0, utilization=1.0,
...                  pue=1.5, usd_per_kwh=0.1, power_w=700.0)
>>> round(q.value, 4)  # 30000 / (4 * 8760) + 700 * 1.5 * 0.1 / 1000
0.9612
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hwmodels.spec import SpecError
from hwmodels.tables import table_problems
from nodeperf.suggest import did_you_mean, format_problems

__all__ = ["Price", "PriceQuote", "Pricing", "run_cost", "PRICES_FILE", "DEVICES_DIR", "HOURS_PER_YEAR", "PRICE_MODES",
           "PURCHASE_BASES", "mixed_basis_warning", "mixed_provider_warning", "load_prices", "load_price_entries", "usd_per_hour", "tco_usd_per_hour", "catalog_device_names"]

#: The catalog's price file.
PRICES_FILE = Path(__file__).resolve().parent / "catalog" / "prices.toml"
#: The catalog's device files (one ``NAME.toml`` per device).
DEVICES_DIR = Path(__file__).resolve().parent / "catalog" / "devices"
#: Hours in a (non-leap) year, the amortisation unit of :func:`tco_usd_per_hour`.
HOURS_PER_YEAR = 8760.0
#: The ways :func:`usd_per_hour` prices a device-hour.
PRICE_MODES = ("cloud", "tco")

#: What a ``purchase_usd`` covers (its entry's ``basis``): ``card`` the device alone (a PCIe card, no host);
#: ``board_share`` an 8-GPU baseboard (GPUs and switches, no host) over its GPUs; ``server_share`` a whole server
#: (CPUs, memory, switches, NICs) over its GPUs; ``module`` an accelerator module (OAM) alone; ``estimate`` an
#: estimated price of a device that is not sold (Epoch AI's TPU estimates).
PURCHASE_BASES = ("card", "board_share", "server_share", "module", "estimate")

_ENTRY_KEYS = ("usd_per_hour", "purchase_usd")
_HOURLY_KEYS = ("value", "source", "date", "provider", "instance", "region", "url", "note")
_PURCHASE_KEYS = ("value", "source", "basis", "date", "url", "note")
_TOP_KEYS = ("schema", "refs", "devices")


@dataclass(frozen=True)
class Price:
    """Hourly price of one device (USD/h) and where it comes from; optionally its purchase price.

    ``usd_per_hour`` is None for an entry that states only a purchase price (:func:`load_price_entries`;
    :func:`load_prices` leaves those out)."""

    device: str
    usd_per_hour: float | None
    source: str
    date: str = ""
    provider: str = ""
    instance: str = ""
    region: str = ""
    url: str = ""
    purchase_usd: float | None = None
    purchase_source: str = ""
    purchase_date: str = ""
    purchase_basis: str = ""


@dataclass(frozen=True)
class PriceQuote:
    """A device-hour price and how it was priced (one line, for reports and JSON)."""

    value: float
    how: str
    mode: str = "cloud"
    parts: Mapping[str, float] = field(default_factory=dict)


def catalog_device_names(devices_dir: str | Path = DEVICES_DIR) -> tuple[str, ...]:
    """The catalog's device names (the stems of ``hwmodels/catalog/devices/*.toml``), sorted."""
    return tuple(sorted(p.stem.lower() for p in Path(devices_dir).glob("*.toml")))


def _positive(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and v > 0


def _expand(text: str, refs: Mapping[str, Any]) -> str:
    """Replace each whole ``@name`` by its reference (``@epoch`` never matches the start of ``@epochhw``).

    A reference may cite another (``@hwprices`` names ``@epochhw``): expansion repeats until nothing changes, at
    most once per reference, so a reference that cites itself stops instead of looping.
    """
    def sub(m: re.Match) -> str:
        return str(refs[m.group(1)]) if m.group(1) in refs else m.group(0)
    for _ in range(len(refs) + 1):
        expanded = re.sub(r"@([A-Za-z0-9_]+)", sub, text)
        if expanded == text:
            break
        text = expanded
    return text


def _check_item(item: Any, where: str, allowed: tuple[str, ...], what: str, problems: list[str]) -> bool:
    """Check one ``{ value = ..., source = "..." }`` table; append located problems; True when usable."""
    if not isinstance(item, dict):
        state = "missing; got nothing" if item is None else f"not a table; got {item!r}"
        problems.append(f"{where}: {state}; expected {what} = {{ value = 2.5, source = \"...\" }}")
        return False
    problems.extend(f"{where}.{p}: {m()}" for p, m in table_problems(item, allowed=allowed, required=("value",
                                                                                               "source")))
    ok = True
    if "value" in item and not _positive(item["value"]):
        problems.append(f"{where}.value: not a positive price; got {item['value']!r}; expected a number of USD"
                        + (" per hour" if what == "usd_per_hour" else ""))
        ok = False
    if "source" in item and (not isinstance(item["source"], str) or not item["source"].strip()):
        problems.append(f"{where}.source: missing; got {item['source']!r}; expected where the price comes from")
        ok = False
    return ok and "value" in item and "source" in item


def _entry(name: str, entry: Any, p: Path, refs: Mapping[str, Any], known: tuple[str, ...],
           problems: list[str]) -> Price | None:
    where = f"{p}: devices.{name}"
    if known and name.lower() not in known:
        problems.append(f"{where}: unknown device; got {name!r}; expected a catalog device name"
                        f"{did_you_mean(name.lower(), known)}")
        return None
    if not isinstance(entry, dict):
        problems.append(f"{where}: not a table; got {entry!r}; expected [devices.{name}] with usd_per_hour")
        return None
    problems.extend(f"{where}.{q}: {m()}" for q, m in table_problems(entry, allowed=_ENTRY_KEYS))
    hourly, buy = entry.get("usd_per_hour"), entry.get("purchase_usd")
    if hourly is None and isinstance(buy, dict):  # a purchase price only: priced in TCO mode, not rented
        hourly = None
    elif not _check_item(hourly, f"{where}.usd_per_hour", _HOURLY_KEYS, "usd_per_hour", problems):
        return None
    if buy is not None and not (_check_item(buy, f"{where}.purchase_usd", _PURCHASE_KEYS, "purchase_usd", problems)
                                & _check_basis(buy, f"{where}.purchase_usd", problems)):
        if hourly is None:
            return None
        buy = None
    s = lambda t, k: str(t.get(k, "")) if t else ""  # noqa: E731
    return Price(name.lower(), float(hourly["value"]) if hourly else None,
                 _expand(hourly["source"], refs) if hourly else "", s(hourly, "date"),
                 s(hourly, "provider"), s(hourly, "instance"), s(hourly, "region"), s(hourly, "url"),
                 float(buy["value"]) if buy else None, _expand(buy["source"], refs) if buy else "",
                 s(buy, "date"), s(buy, "basis"))


def _check_basis(buy: Any, where: str, problems: list[str]) -> bool:
    """Check a purchase table's ``basis`` (one of :data:`PURCHASE_BASES`, or left out: unstated, as in price files
    written before the field existed); append a located problem; True when valid."""
    if not isinstance(buy, dict):
        return False
    got = buy.get("basis")
    if got is None or got in PURCHASE_BASES:  # (a user's file may leave it out: "unstated", warned when compared)
        return True
    state = f"unknown purchase basis; got {got!r}"
    problems.append(f"{where}.basis: {state}; expected one of {', '.join(PURCHASE_BASES)} (what the price covers)"
                    f"{did_you_mean(str(got), PURCHASE_BASES) if isinstance(got, str) else ''}")
    return False


def _mixed(devices: Sequence[str], table: Mapping[str, Price], label: str, priced: str) -> str | None:
    """``"name (label), ..."`` of the ``devices`` that have a ``priced`` figure in ``table``, when their ``label``
    fields (a missing one read as "unstated") take two values or more; else None."""
    names = sorted({d.lower() for d in devices})
    labels = {n: getattr(table[n], label) or "unstated" for n in names
              if n in table and getattr(table[n], priced) is not None}
    if len(set(labels.values())) < 2:
        return None
    return ", ".join(f"{n} ({v})" for n, v in labels.items())


def mixed_basis_warning(devices: Sequence[str], table: Mapping[str, Price], mode: str = "tco") -> str | None:
    """One warning line when a TCO comparison of ``devices`` mixes purchase bases (:data:`PURCHASE_BASES`), else None.

    A card's price (no host, no network) and a server's share are not the same thing bought: ranking them by TCO
    favours the card. Cloud mode and devices without a purchase price give None.
    """
    listed = _mixed(devices, table, "purchase_basis", "purchase_usd") if mode == "tco" else None
    if listed is None:
        return None
    return (f"warning: the purchase prices compared cover different things: {listed}; a card or board price has "
            "no host or network, a server share has them (see purchase basis in hwmodels/catalog/prices.toml)")


def mixed_provider_warning(devices: Sequence[str], table: Mapping[str, Price], mode: str = "cloud") -> str | None:
    """One warning line when a cloud comparison of ``devices`` prices them from different providers, else None.

    Providers price at different levels (the same H100 SXM rented 12.29 USD/h per GPU at AWS and 2.99 at RunPod):
    ranking devices whose hourly prices come from different providers ranks the providers as much as the hardware.
    An entry without a ``provider`` counts as "unstated". TCO mode (no rent), unpriced devices and a single
    provider give None.
    """
    listed = _mixed(devices, table, "provider", "usd_per_hour") if mode == "cloud" else None
    if listed is None:
        return None
    return (f"warning: the hourly prices compared come from different providers: {listed}; a provider's price level "
            "is not the hardware's (see provider in hwmodels/catalog/prices.toml)")


def load_prices(path: str | Path | None = None, *, check_devices: bool | None = None) -> dict[str, Price]:
    """Device name (lowercase) -> :class:`Price` of every device with an hourly price, from ``path`` or the
    catalog's ``prices.toml`` (:func:`load_price_entries` less the purchase-only entries).

    Raises
    ------
    SpecError
        As :func:`load_price_entries`.
    """
    return {k: v for k, v in load_price_entries(path, check_devices=check_devices).items() if v.usd_per_hour is not None}


def load_price_entries(path: str | Path | None = None, *, check_devices: bool | None = None) -> dict[str, Price]:
    """Device name (lowercase) -> :class:`Price` of every entry (an hourly price, a purchase price or both),
    from ``path`` or the catalog's ``prices.toml``.

    ``check_devices``: every ``[devices.NAME]`` must name a catalog device (with a near-match hint);
    default: for the catalog's own file only (a user's file may price devices of its own TOML files).

    Raises
    ------
    SpecError
        Every problem of the file, one located line each: missing file, invalid TOML, wrong schema,
        an unknown key or device, an entry with neither a ``usd_per_hour`` nor a ``purchase_usd``, one
        without a positive ``value`` or a ``source``.
    """
    from hwmodels.loader import read_toml

    p = Path(path) if path is not None else PRICES_FILE
    data = read_toml(p)
    if data.get("schema") != 1:
        raise SpecError(f"{p}: schema; got {data.get('schema')!r}; expected schema = 1")
    problems = [f"{p}: {q}: {m()}" for q, m in table_problems(data, allowed=_TOP_KEYS)]
    devices = data.get("devices")
    if not isinstance(devices, dict) or not devices:
        raise SpecError(f"{p}: devices; got {devices!r}; expected [devices.<name>] tables with usd_per_hour")
    refs = data.get("refs", {}) if isinstance(data.get("refs", {}), dict) else {}
    if check_devices is None:
        check_devices = p.resolve() == PRICES_FILE
    known = catalog_device_names() if check_devices else ()
    out: dict[str, Price] = {}
    for name, entry in sorted(devices.items()):
        price = _entry(str(name), entry, p, refs, known, problems)
        if price is not None:
            out[price.device] = price
    if problems:  # one line for one problem, else a count line and the located lines
        raise SpecError(format_problems(str(p), problems, "price file"))
    return out


def tco_usd_per_hour(purchase_usd: float, *, years: float, utilization: float, pue: float, usd_per_kwh: float,
                     power_w: float) -> tuple[float, dict[str, float]]:
    """Amortised purchase plus electricity per useful device-hour: ``(total, {capex, energy})``.

    Raises
    ------
    ValueError
        A non-positive or non-finite argument, a ``utilization`` above 1 or a ``pue`` below 1.
    """
    checks = {"purchase_usd": purchase_usd, "years": years, "utilization": utilization, "pue": pue,
              "power_w": power_w}
    for name, v in checks.items():
        if not _positive(v):
            raise ValueError(f"tco: {name}; got {v!r}; expected a positive number")
    if not (not isinstance(usd_per_kwh, bool) and isinstance(usd_per_kwh, (int, float))
            and math.isfinite(usd_per_kwh) and usd_per_kwh >= 0):
        raise ValueError(f"tco: usd_per_kwh; got {usd_per_kwh!r}; expected a number >= 0")
    if utilization > 1:
        raise ValueError(f"tco: utilization; got {utilization!r}; expected a fraction in (0, 1]")
    if pue < 1:
        raise ValueError(f"tco: pue; got {pue!r}; expected >= 1 (facility power over IT power)")
    capex = purchase_usd / (years * HOURS_PER_YEAR * utilization)
    energy = power_w * pue * usd_per_kwh / 1000.0
    return capex + energy, {"capex": capex, "energy": energy}


def _device_power_w(device: str) -> float:
    """The catalog device's ``power.tdp_w`` (datasheet board power)."""
    from hwmodels.loader import load_device_file

    path = DEVICES_DIR / f"{device}.toml"
    if not path.is_file():
        names = catalog_device_names()
        raise ValueError(f"tco: device; got {device!r}; expected a catalog device name{did_you_mean(device, names)}")
    spec = load_device_file(path)
    power = getattr(spec, "power", None)
    if power is None:
        raise ValueError(f"tco: device {device!r} has no power.tdp_w in its spec; expected power_w = ...")
    return float(power.tdp_w)


def usd_per_hour(device: str, mode: str = "cloud", *, prices: Mapping[str, Price] | None = None,
                 years: float | None = None, utilization: float = 1.0, pue: float | None = None,
                 usd_per_kwh: float | None = None, power_w: float | None = None,
                 purchase_usd: float | None = None) -> PriceQuote:
    """The price of one device-hour of ``device`` and how it was priced.

    ``mode="cloud"``: the price file's on-demand price. ``mode="tco"``: :func:`tco_usd_per_hour` with the
    purchase price of the price file (or ``purchase_usd``), ``power_w`` (default: the device's
    ``power.tdp_w``); ``years``, ``pue`` and ``usd_per_kwh`` must be given (no default is assumed).

    Raises
    ------
    ValueError
        An unknown mode, an unpriced device (with the priced ones and a near match), a missing or bad
        TCO argument.
    """
    name = device.lower()
    if mode not in PRICE_MODES:
        raise ValueError(f"price mode; got {mode!r}; expected one of {', '.join(PRICE_MODES)}"
                         f"{did_you_mean(mode, PRICE_MODES)}")
    table = (load_prices() if mode == "cloud" else load_price_entries()) if prices is None else prices
    entry = table.get(name)
    if mode == "cloud":
        if entry is None or entry.usd_per_hour is None:
            rented = sorted(k for k, v in table.items() if v.usd_per_hour is not None)
            raise ValueError(f"price: no hourly price for {device!r}; expected a [devices.{name}] usd_per_hour "
                             f"entry (priced: {', '.join(rented) or 'none'}){did_you_mean(name, rented)}")
        where = ", ".join(x for x in (entry.provider, entry.instance, entry.region) if x)
        how = f"cloud on-demand {entry.usd_per_hour:g} USD/h ({where or entry.source}; {entry.date or 'undated'})"
        return PriceQuote(entry.usd_per_hour, how, "cloud", {"rent": entry.usd_per_hour})
    missing = [k for k, v in (("years", years), ("pue", pue), ("usd_per_kwh", usd_per_kwh)) if v is None]
    if missing:
        raise ValueError(f"tco: {', '.join(missing)} not given; expected years, pue and usd_per_kwh for mode 'tco'")
    buy = purchase_usd if purchase_usd is not None else (entry.purchase_usd if entry else None)
    if buy is None:
        raise ValueError(f"tco: no purchase price for {device!r}; expected purchase_usd = ... or a "
                         f"[devices.{name}] purchase_usd entry in {PRICES_FILE.name}")
    watts = power_w if power_w is not None else _device_power_w(name)
    total, parts = tco_usd_per_hour(buy, years=years, utilization=utilization, pue=pue,  # type: ignore[arg-type]
                                    usd_per_kwh=usd_per_kwh, power_w=watts)  # type: ignore[arg-type]
    how = (f"tco: {buy:g} USD over {years:g} y at {utilization:.0%} utilization + {watts:g} W x PUE {pue:g} at "
           f"{usd_per_kwh:g} USD/kWh = {total:.4g} USD/h")
    return PriceQuote(total, how, "tco", parts)


@dataclass(frozen=True)
class Pricing:
    """How a run's device-hours are priced: ``mode`` (:data:`PRICE_MODES`) and, for ``tco``, its inputs.

    ``years``, ``pue`` and ``usd_per_kwh`` have no defaults (a data centre's own figures); ``utilization``
    is the fraction of wall-clock hours the device does paid work (default 1: every hour billed, as a
    cloud hour is). ``prices``: a price file of the same format (default the catalog's).
    """

    mode: str = "cloud"
    years: float | None = None
    pue: float | None = None
    usd_per_kwh: float | None = None
    utilization: float = 1.0
    prices: str | None = None

    def inputs(self) -> dict[str, Any]:
        """The inputs the mode uses (JSON), ``None`` ones left out."""
        keys = ("years", "pue", "usd_per_kwh", "utilization") if self.mode == "tco" else ()
        out: dict[str, Any] = {k: getattr(self, k) for k in keys if getattr(self, k) is not None}
        if self.prices is not None:
            out["prices"] = self.prices
        return out


def _run_power_w(device: str, energy_j: float | None, device_hours: float) -> tuple[float, str]:
    """Average power per device of the run (its modelled energy over its device-hours), else the datasheet TDP."""
    if energy_j is not None and energy_j > 0 and device_hours > 0:
        return energy_j / (device_hours * 3600.0), "run average: energy_j / (devices x makespan_s)"
    return _device_power_w(device), "datasheet power.tdp_w (the run has no energy)"


def run_cost(device: str, devices: int, seconds: float, tokens: float, *, energy_j: float | None = None,
             pricing: Pricing | None = None, table: Mapping[str, Price] | None = None,
             per: str = "tokens") -> dict[str, Any]:
    """What ``devices`` devices for ``seconds`` cost, per million ``tokens``, priced by ``pricing``.

    The JSON ``cost`` object of ``nodeperf serve``: ``usd_per_million_tokens`` (None where the device is
    unpriced in cloud mode), ``usd_per_device_hour``, ``usd_total``, ``mode``, ``inputs``, ``parts``, for cloud
    the ``provider`` whose rent it charged ("unstated" where the price file names none) and, for TCO, the power it charged (``power_w``, ``power_from``: the run's average power from its modelled
    energy, or the datasheet TDP when the run has none). ``table``: the entries of ``pricing.prices`` already
    read (:func:`load_price_entries`), for a caller pricing many runs. ``per``: what ``tokens`` counts, naming
    the per-million key ``usd_per_million_<per>`` (``nodeperf tune``'s configurations: ``samples``).

    Raises
    ------
    ValueError
        TCO of a device without a purchase price, a bad TCO input, an unknown mode.
    """
    pr = pricing or Pricing()
    if table is None:
        table = load_price_entries(pr.prices) if pr.prices is not None else load_price_entries()
    name = device.lower()
    hours = devices * seconds / 3600.0
    extra: dict[str, Any] = {}
    if pr.mode == "cloud" and (name not in table or table[name].usd_per_hour is None):
        return {f"usd_per_million_{per}": None, "mode": "cloud", "inputs": pr.inputs(), "device": name,
                "priced_by": f"no price for device {device!r} in the catalog"}
    if pr.mode == "tco":
        watts, extra["power_from"] = _run_power_w(name, energy_j, hours)
        extra["power_w"] = watts
        q = usd_per_hour(name, "tco", prices=table, years=pr.years, utilization=pr.utilization, pue=pr.pue,
                         usd_per_kwh=pr.usd_per_kwh, power_w=watts)
        entry = table.get(name)
        source = entry.purchase_source if entry is not None else ""
        extra["purchase_basis"] = (entry.purchase_basis or "unstated") if entry is not None else ""
    else:
        q = usd_per_hour(name, pr.mode, prices=table)
        source = table[name].source
        extra["provider"] = table[name].provider or "unstated"
    usd = q.value * hours
    return {f"usd_per_million_{per}": usd / tokens * 1e6 if tokens else None, "usd_per_device_hour": q.value,
            "device": name, "devices": devices, "usd_total": usd, "mode": q.mode, "inputs": pr.inputs(), "parts": dict(q.parts),
            "priced_by": q.how, "source": source,
            "basis": f"devices x hours of the makespan x hourly price / output {per}", **extra}
