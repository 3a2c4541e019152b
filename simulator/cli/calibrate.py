"""`nodeperf calibrate FILE.csv --hardware NAME --out overlay.toml`: fit a spec's factors to measurements."""

from __future__ import annotations

import argparse
import json
import math
import sys

from simulator.cli.common import finite_float, nonnegative_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("calibrate", help="fit a device's efficiency factors to measurements; write an overlay",
                       description="Split the measurements of one device into train and held-out sets, fit the "
                                   "spec's calibratable fields on train (bounded least squares on log time ratios), "
                                   "print before/after errors for both splits and write a calibration overlay. "
                                   "Nothing is written when the fit fails or the held-out error gets worse.")
    p.add_argument("measurements", metavar="FILE.csv", help="measurement CSV (see `nodeperf measure`)")
    p.add_argument("--hardware", required=True, metavar="NAME",
                   help="device or system (catalog name, TOML path, host or host:N)")
    p.add_argument("--out", metavar="overlay.toml", help="calibration overlay to write (- for standard output; the "
                                                        "report then goes to standard error)")
    p.add_argument("--test-fraction", type=finite_float(0.0, 1.0, low_open=True, high_open=True), default=0.3,
                   help="held-out fraction, 0 < F < 1 (default 0.3)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the train/test split (default 0)")
    p.add_argument("--param", action="append", metavar="PATH[=LO:HI]",
                   help="a dotted spec path to fit, optionally with SI bounds (repeatable; default per device kind)")
    p.add_argument("--regularization", type=finite_float(0.0), default=None,
                   help="pull towards the defaults (default by device kind: 0.01 CPU, 0.04 GPU/TPU)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def parse_params(items: list[str] | None) -> dict[str, tuple[float, float] | None] | None:
    if not items:
        return None
    out: dict[str, tuple[float, float] | None] = {}
    for it in items:
        path, eq, rng = it.partition("=")
        if not eq:
            out[path.strip()] = None
            continue
        lo, colon, hi = rng.partition(":")
        try:
            b = (float(lo), float(hi))
        except ValueError:
            b = None
        if not colon or b is None or not all(map(math.isfinite, b)) or not 0 < b[0] <= b[1]:
            raise ValueError(f"--param {it}: bounds; got {rng!r}; expected LO:HI with 0 < LO <= HI finite, in SI units")
        out[path.strip()] = b
    return out


def device_rows(path: str, hw_name: str):  # noqa: ANN201 - (MeasurementSet, dict[str, int])
    """The rows of ``path`` measured on ``hw_name``, and the rows of other devices left out (count by device)."""
    from collections import Counter

    from simulator.calibration.measurements import MeasurementSet
    from simulator.hardware import known_devices

    ms = MeasurementSet.load(path, devices=known_devices())
    rows = ms.filter(device=hw_name)
    if len(rows) == 0:
        raise ValueError(f"{path}: no rows for device {hw_name!r}; got devices {', '.join(ms.devices)}; "
                         "expected --hardware to name one of them")
    return rows, dict(sorted(Counter(m.device for m in ms if m.device != rows[0].device).items()))


def left_out_note(left_out: dict[str, int], hw_name: str) -> str:
    """The line saying how many rows of other devices ``--hardware`` left out ('' when none)."""
    n, k = sum(left_out.values()), len(left_out)
    if not n:
        return ""
    names = ", ".join(list(left_out)[:4]) + (f", {k - 4} more" if k > 4 else "")
    return (f"{n} row{'s' * (n != 1)} of {k} other device{'s' * (k != 1)} left out ({names}): --hardware {hw_name} "
            "keeps its own rows")


def summary_rows(title: str, before, after) -> list[list[str]]:  # noqa: ANN001
    rows = []
    classes = sorted(set(before.by_class) | set(after.by_class))
    for name, b, a in [("all", before, after)] + [(c, before.by_class[c], after.by_class[c]) for c in classes]:
        rows.append([title if name == "all" else "", name, str(b.n), f"{b.mape:.1f}", f"{a.mape:.1f}",
                     f"{a.median_ape:.1f}", f"{a.p90_ape:.1f}", f"{a.max_ape:.1f}", f"{b.bias:+.1f}", f"{a.bias:+.1f}"])
    return rows


HEADER = ["split", "op class", "n", "MAPE before %", "MAPE after %", "median %", "p90 %", "max %", "bias before %",
          "bias after %"]


def run(args: argparse.Namespace) -> int:
    from hwmodels.spec import DeviceSpec
    from simulator.calibration import CalibrationError, Calibrator
    from simulator.calibration.fit import overlay_text
    from simulator.cli.output import check_outputs, to_stdout, write_output
    from simulator.hardware import load_hardware
    from simulator.report.formatting import table

    check_outputs(("--out", args.out), json_flag=args.json)
    report = sys.stderr if to_stdout(args.out) else sys.stdout  # --out -: the overlay alone on standard output
    hw = load_hardware(args.hardware)
    dev = hw if isinstance(hw, DeviceSpec) else hw.device
    rows, left_out = device_rows(args.measurements, dev.name)
    train, test = rows.split(args.test_fraction, args.seed)
    if len(test) == 0:
        raise ValueError(f"{args.measurements}: too few rows for a held-out split ({len(rows)}); expected at least "
                         "two rows of one op class")
    cal = Calibrator(parse_params(args.param), regularization=args.regularization)
    try:
        cal.fit(train, hw)
    except CalibrationError as exc:
        print(f"nodeperf: calibrate: {exc}; nothing written", file=sys.stderr)
        return 1
    test_before = cal.error_summary(test, hw)
    test_after = cal.error_summary(test)
    result = {"train": {"before": cal.before_.to_json(), "after": cal.after_.to_json()},
              "test": {"before": test_before.to_json(), "after": test_after.to_json()},
              "params": {k: float(f"{v:.6g}") for k, v in cal.params_.items()}, "rows_left_out": sum(left_out.values())}
    worse = test_after.mape > test_before.mape
    if args.json:
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(f"{dev.name}: {len(train)} train / {len(test)} held-out measurements from {args.measurements} "
              f"(seed {args.seed})", file=report)
        if left_out:
            print(left_out_note(left_out, dev.name), file=report)
        print(table(summary_rows("train", cal.before_, cal.after_) + summary_rows("held-out", test_before, test_after),
                    HEADER, align="llrrrrrrrr"), file=report)
        print(file=report)
        print(table([[p, f"{cal.defaults_[p]:.4g}", f"{v:.4g}", f"{cal.bounds_[p][0]:.3g}..{cal.bounds_[p][1]:.3g}"]
                     for p, v in cal.params_.items()], ["parameter", "default", "fitted", "bounds"], align="lrrr"),
              file=report)
    if worse:
        print(f"nodeperf: calibrate: held-out MAPE got worse ({test_before.mape:.2f}% -> {test_after.mape:.2f}%); "
              "nothing written", file=sys.stderr)
        return 1
    if args.out is not None:
        ov = cal.overlay(measurements_file=args.measurements, extra={
            "split": {"test_fraction": args.test_fraction, "seed": args.seed, "train": len(train), "test": len(test)},
            "errors": {"test": {"before": test_before.to_json(classes=False),
                                "after": test_after.to_json(classes=False)}}})
        write_output("--out", args.out, overlay_text(ov))
        if not args.json and not to_stdout(args.out):
            print(f"\ncalibration overlay -> {args.out}")
    return 0
