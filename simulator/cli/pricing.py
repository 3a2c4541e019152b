"""The price options of ``nodeperf serve`` and ``nodeperf tune`` (model searches and ``--serve``): how a device-hour is priced
(:class:`hwmodels.cost.Pricing`): ``--price cloud`` (the catalog's on-demand price, default) or ``--price tco``
(purchase amortised over ``--tco-years`` plus the run's electricity at ``--pue`` and ``--electricity-usd-per-kwh``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from simulator.cli.common import finite_float, nonempty, one_of

__all__ = ["add_price_arguments", "pricing_from_args", "warn_mixed_providers"]


def _modes() -> tuple[str, ...]:
    from hwmodels.cost import PRICE_MODES

    return PRICE_MODES


def add_price_arguments(p: Any, *, prices_flag: bool = True) -> None:
    """Add ``--price``, ``--tco-years``, ``--tco-utilization``, ``--pue``, ``--electricity-usd-per-kwh`` (and
    ``--prices`` where ``prices_flag``) to the parser or group ``p``."""
    p.add_argument("--price", type=one_of(_modes, "unknown price mode"), default="cloud", metavar="cloud|tco",
                   help="how a device-hour is priced: cloud (on-demand rent, hwmodels/catalog/prices.toml; default) or "
                        "tco (purchase_usd / (--tco-years x 8760 h x --tco-utilization) + the run's average power "
                        "x --pue x --electricity-usd-per-kwh)")
    p.add_argument("--tco-years", type=finite_float(0.0, low_open=True), metavar="Y",
                   help="--price tco: years the purchase is amortised over (no default: your depreciation period)")
    p.add_argument("--tco-utilization", type=finite_float(0.0, 1.0, low_open=True), default=1.0, metavar="U",
                   help="--price tco: fraction of wall-clock hours the device does paid work (default 1)")
    p.add_argument("--pue", type=finite_float(1.0), metavar="PUE",
                   help="--price tco: data-centre power usage effectiveness, facility over IT power, >= 1 (no default)")
    p.add_argument("--electricity-usd-per-kwh", type=finite_float(0.0), metavar="USD",
                   help="--price tco: electricity price in USD per kWh (no default)")
    if prices_flag:
        p.add_argument("--prices", metavar="FILE.toml", type=nonempty,
                       help="device prices (default hwmodels/catalog/prices.toml)")


def pricing_from_args(args: argparse.Namespace, devices: list[str]) -> Any:
    """The :class:`hwmodels.cost.Pricing` of the options, checked against ``devices`` (catalog device names).

    Raises
    ------
    ValueError
        A TCO input given without ``--price tco``, one missing with it, or TCO of a device without a
        ``purchase_usd`` in the price file (one located line each: exit 2). A TCO comparison of devices whose
        purchase prices cover different things (:data:`hwmodels.cost.PURCHASE_BASES`) is not an error: one
        warning line on standard error names the devices and their bases (a cloud comparison of devices whose
        hourly prices come from different providers warns once it has run: :func:`warn_mixed_providers`).
    """
    from hwmodels.cost import Pricing, load_price_entries, mixed_basis_warning

    tco = {"--tco-years": args.tco_years, "--pue": args.pue, "--electricity-usd-per-kwh": args.electricity_usd_per_kwh}
    if args.price != "tco":
        given = [f for f, v in tco.items() if v is not None] + (["--tco-utilization"] if args.tco_utilization != 1.0 else [])
        if given:
            raise ValueError(f"{given[0]}: a TCO input; got --price {args.price}; expected --price tco with it")
        return Pricing("cloud", prices=args.prices)
    missing = [f for f, v in tco.items() if v is None]
    if missing:
        raise ValueError(f"--price tco: {', '.join(missing)} not given; got none; expected --tco-years Y --pue P "
                         "--electricity-usd-per-kwh USD (a data centre's own figures: no default is assumed)")
    table = load_price_entries(args.prices) if args.prices else load_price_entries()
    for name in devices:
        entry = table.get(name.lower())
        if entry is None or entry.purchase_usd is None:
            bought = sorted(k for k, v in table.items() if v.purchase_usd is not None)
            raise ValueError(f"--price tco: no purchase_usd for device {name!r}; got none in "
                             f"{args.prices or 'hwmodels/catalog/prices.toml'}; expected a [devices.{name.lower()}] "
                             f"purchase_usd entry (devices with one: {', '.join(bought) or 'none'})")
    warning = mixed_basis_warning(devices, table)
    if warning:  # not an error: the comparison runs, its reader is told what each purchase price covers
        print(warning, file=sys.stderr)
    return Pricing("tco", years=args.tco_years, pue=args.pue, usd_per_kwh=args.electricity_usd_per_kwh,
                   utilization=args.tco_utilization, prices=args.prices)


def warn_mixed_providers(pricing: Any, devices: list[str], table: Any = None) -> None:
    """One warning line on standard error when a cloud comparison of ``devices`` (catalog device names) prices them
    from different providers (:func:`hwmodels.cost.mixed_provider_warning`), as the mixed purchase-basis warning of
    :func:`pricing_from_args`. Called once a comparison has run, so that a bad input stays the only line it prints.
    ``table``: the price entries already read (default: ``pricing.prices`` or the catalog's)."""
    from hwmodels.cost import load_price_entries, mixed_provider_warning

    if pricing.mode != "cloud" or len({d.lower() for d in devices}) < 2:
        return
    if table is None:
        table = load_price_entries(pricing.prices) if pricing.prices is not None else load_price_entries()
    warning = mixed_provider_warning(devices, table)
    if warning:
        print(warning, file=sys.stderr)
