"""`nodeperf validate FILE.csv --hardware NAME` (or `--dataset published`): predicted versus measured errors."""

from __future__ import annotations

import argparse
import json

from simulator.cli.common import nonempty


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("validate", help="compare predictions with measurements (error table, optional plot)",
                       description="Predict every measured case and print the error table (n, MAPE, median, p90, "
                                   "max, bias), overall and per op class; optionally plot predicted versus measured.")
    p.add_argument("measurements", nargs="?", metavar="FILE.csv", help="measurement CSV")
    dataset = p.add_argument("--dataset", choices=("published", "edge", "frameworks", "energy", "kernels", "training",
                                         "serving", "collectives"),
                   help="the published GPU dataset "
                   "instead of a file (every device in it, or --hardware's; it also prints the edge and energy "
                   "groups); edge: only the published MLPerf Inference Edge results of Jetson devices "
                   "(hwmodels/measurements/published_edge.csv); frameworks: rows that name their software stack, "
                   "predicted under its profile and grouped by framework (hwmodels/measurements/"
                   "published_frameworks.csv, or FILE.csv); energy: published power and energy measurements, "
                   "energy and average-power errors beside latency, by device and kind "
                   "(hwmodels/measurements/published_energy.csv, or FILE.csv); kernels: decode-attention and GEMM "
                   "kernels as serving stacks' collectors timed them, by GPU, stack and K/V width, derivation rows "
                   "apart (hwmodels/measurements/decode_attention_kernels.csv, gemm_kernels.csv, "
                   "gemm_fp8_kernels.csv); training: published "
                   "training runs of today's recipes (FSDP, 3D, fp8, MoE on H100/H200/B200 and TPU v5e/v5p/v6e) by "
                   "device family and recipe, rows whose recipe cannot be stated yet listed with what "
                   "(hwmodels/measurements/published_training.csv, or FILE.csv); serving: published "
                   "TTFT, TPOT and throughput of serving engines through `nodeperf serve`'s simulator, by engine and "
                   "metric (hwmodels/measurements/published_serving.csv, or FILE.csv); collectives: "
                   "nccl-tests / rccl-tests bus bandwidths per system, collective and size band "
                   "(hwmodels/measurements/published_collectives.csv)")
    # a file given to --dataset: the refusal says where a file goes
    dataset.path_hint = "a measurement CSV is the FILE.csv argument (`nodeperf validate FILE.csv --hardware NAME`, or `--dataset NAME FILE.csv` for the groups that read one)"  # type: ignore[attr-defined]
    p.add_argument("--hardware", metavar="NAME", help="device or system (catalog name, TOML path, host or host:N)")
    p.add_argument("--calibration", type=nonempty, metavar="FILE", help="calibration overlay to apply (from `nodeperf calibrate`)")
    p.add_argument("--plot", metavar="OUT.png", help="draw predicted versus measured (log axes, y = x, +/-10%% band)")
    p.add_argument("--json", action="store_true", help="print the error summary as one JSON object")
    p.set_defaults(func=run)


def plot(points: list[tuple[str, float, float]], title: str, out: str) -> None:
    """Predicted versus measured on log axes with y = x and a +/-10% band, coloured by op class."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5.5))
    meas = [m for _, _, m in points]
    pred = [p for _, p, _ in points]
    lo, hi = min(meas + pred) / 1.5, max(meas + pred) * 1.5
    xs = [lo, hi]
    ax.fill_between(xs, [x * 0.9 for x in xs], [x * 1.1 for x in xs], color="0.85", label="±10%")
    ax.plot(xs, xs, color="0.3", lw=1, label="y = x")
    classes = sorted({c for c, _, _ in points})
    cmap = plt.get_cmap("tab10")
    for i, c in enumerate(classes):
        sel = [(m, p) for cc, p, m in points if cc == c]
        ax.scatter([m for m, _ in sel], [p for _, p in sel], s=22, color=cmap(i % 10), label=c,
                   edgecolors="none")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("predicted time (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    import io

    from simulator.cli.output import write_output

    buf = io.BytesIO()  # drawn in memory, then written by the CLI's checked writer
    try:
        fig.savefig(buf, dpi=130, format=out.rsplit(".", 1)[-1].lower())
    finally:
        plt.close(fig)
    write_output("--plot", out, buf.getvalue())


def _check_plot_path(out: str) -> str:
    """The image format of ``--plot out`` (its extension), after checking the path can be written."""
    from matplotlib.backend_bases import FigureCanvasBase

    from simulator.cli.output import check_outputs

    check_outputs(("--plot", out), no_stdout=("--plot",))
    formats = FigureCanvasBase.get_supported_filetypes()
    name = out.rsplit("/", 1)[-1]
    ext = name.rsplit(".", 1)[-1].lower() if "." in name else ""
    if ext not in formats:
        raise ValueError(f"--plot {out}: unknown image format; got {ext!r}; expected a file name ending in one of "
                         f"{', '.join('.' + f for f in sorted(formats))}")
    return ext


def run(args: argparse.Namespace) -> int:
    import numpy as np

    from simulator.calibration import Calibrator, summarize_errors
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.validation import OP_LEVEL

    if args.dataset == "frameworks":  # the shipped set, or FILE.csv whose rows name their software stack
        return _run_frameworks(args)
    if args.dataset == "energy":  # the shipped set, or FILE.csv in the energy schema
        return _run_energy(args)
    if args.dataset == "kernels":  # the shipped kernel tables
        return _run_kernels(args)
    if args.dataset == "training":  # the shipped training runs, or FILE.csv in that schema
        from simulator.cli.validate_training import run_training

        return run_training(args)
    if args.dataset == "serving":  # the shipped serving measurements, or FILE.csv in their schema
        return _run_serving(args)
    if args.dataset == "collectives":  # the shipped nccl-tests / rccl-tests rows
        return _run_collectives(args)
    if args.dataset and args.measurements:
        raise ValueError("validate: both FILE.csv and --dataset given; expected one of them")
    if not args.dataset and not args.measurements:
        raise ValueError("validate: no measurements; expected FILE.csv or --dataset published")
    if args.plot is not None:
        _check_plot_path(args.plot)
    if args.dataset == "edge":
        return _run_edge(args)
    groups, source, left_out = _measurement_groups(args)
    cal = Calibrator()
    from simulator.report.progress import progress_bar

    preds = []
    with progress_bar(sum(len(rows) for _, rows in groups), desc="published rows", unit="row") as bar:
        for hw, rows in groups:  # one device at a time; the bar advances by its rows
            preds.append(cal.predict(rows, hw))
            bar.update(len(rows))
    allrows = MeasurementSet(tuple(m for _, rows in groups for m in rows), source)
    pred = np.concatenate(preds)
    summary = summarize_errors(pred, allrows)
    # the op-level (one kernel) and end-to-end (whole model) groups, where both kinds are present
    groups_oe = {}
    for gname, keep in (("op-level", True), ("end-to-end", False)):
        idx = [i for i, m in enumerate(allrows) if (m.category in OP_LEVEL) == keep]
        if idx and len(idx) < len(allrows):
            groups_oe[gname] = summarize_errors(pred[idx], MeasurementSet(tuple(allrows[i] for i in idx), source),
                                                by_class=False)
    extras: dict = {"multi": None, "edge": None, "frameworks": None, "energy": None}
    if args.dataset and not args.hardware and not args.calibration:  # whole nodes: a group of its own
        extras = _whole_node_groups()
    if args.json:
        _print_json(summary, groups_oe, extras, groups, preds, left_out)
    else:
        _print_text(args, source, allrows, summary, groups_oe, extras, groups, preds, left_out)
    if args.plot is not None:
        pts = [(m.category, float(p), m.median_s) for m, p in zip(allrows, pred, strict=True)]
        title = f"{', '.join(sorted({r[0].device for _, r in groups}))}: MAPE {summary.mape:.1f}% (n={summary.n})"
        plot(pts, title + (" calibrated" if args.calibration else ""), args.plot)
        if not args.json:
            print(f"\nplot -> {args.plot}")
    return 0


def _measurement_groups(args: argparse.Namespace) -> tuple[list, str, dict[str, int]]:
    """The (hardware, measurement rows) pairs to validate, one per device, the source they came from and the rows
    of other devices ``--hardware`` left out (count by device)."""
    from collections import Counter

    from hwmodels.spec import DeviceSpec
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.validation import DEFAULT_DATASET as PUBLISHED
    from simulator.cli.calibrate import device_rows
    from simulator.hardware import known_devices, load_hardware

    if args.dataset:
        ms = MeasurementSet.load(PUBLISHED, devices=known_devices())
        names = [args.hardware.lower()] if args.hardware else ms.devices
        groups = []
        for n in names:
            rows = ms.filter(device=n)
            if len(rows) == 0:
                raise ValueError(f"{PUBLISHED}: no rows for device {n!r}; expected one of {', '.join(ms.devices)}")
            groups.append((load_hardware(n, args.calibration), rows))
        kept = {n.lower() for n in names}
        left = dict(sorted(Counter(m.device for m in ms if m.device not in kept).items()))
        return groups, str(PUBLISHED), left
    if not args.hardware:
        from nodeperf.files import read_csv_text
        from simulator.calibration.measurements import REQUIRED_COLUMNS, MeasurementError

        # the file's own kind first: a JSON file is named as such before the missing flag
        read_csv_text(args.measurements, what=f"a measurement CSV with the columns {', '.join(REQUIRED_COLUMNS)}, ...",
                      error=MeasurementError)
        raise ValueError("validate: --hardware missing; expected the device the measurements ran on")
    hw = load_hardware(args.hardware, args.calibration)
    dev = hw if isinstance(hw, DeviceSpec) else hw.device
    rows, left = device_rows(args.measurements, dev.name)
    return [(hw, rows)], args.measurements, left


def _whole_node_groups() -> dict:
    """The groups of their own in the published set: multi-device nodes, edge devices, frameworks, energy."""
    from simulator.calibration.validation import validate_edge
    from simulator.parallel.validation import multi_summary, validate_multi

    multi_rows = validate_multi()
    multi = multi_summary(multi_rows)
    edge = validate_edge()  # edge devices (Jetson, MLPerf Inference Edge): a group of its own
    from simulator.calibration.frameworks_validation import validate_frameworks

    frameworks = validate_frameworks()  # software stacks (eager PyTorch / Hugging Face, ...): by framework
    from simulator.calibration.energy_validation import validate_energy

    energy = validate_energy()  # energy and average power against published power measurements
    return {"multi": multi, "edge": edge, "frameworks": frameworks, "energy": energy}


def _print_json(summary, groups_oe: dict, extras: dict, groups: list, preds: list,  # noqa: ANN001
                left_out: dict[str, int]) -> None:
    """Print the validation summary, its groups and the whole-node groups as JSON (``rows_left_out``: the rows of
    other devices ``--hardware`` left out)."""
    from simulator.calibration import summarize_errors

    out = summary.to_json()
    out["rows_left_out"] = sum(left_out.values())
    if groups_oe:
        out["by_group"] = {g: s.to_json(classes=False) for g, s in groups_oe.items()}
    if extras["multi"] is not None:
        out["multi_device"] = extras["multi"]
    if extras["edge"] is not None:
        out["edge"] = {k: v for k, v in extras["edge"].items() if k != "dataset"}
    if extras["frameworks"] is not None:
        out["frameworks"] = _frameworks_json(extras["frameworks"])
    if extras["energy"] is not None:
        out["energy"] = _energy_json(extras["energy"])
    if len(groups) > 1:
        out["by_device"] = {rows[0].device: summarize_errors(p, rows).to_json(classes=False)
                            for (_, rows), p in zip(groups, preds, strict=True)}
    print(json.dumps(out, indent=2, sort_keys=True))


def _print_text(args: argparse.Namespace, source: str, allrows, summary, groups_oe: dict,  # noqa: ANN001
                extras: dict, groups: list, preds: list, left_out: dict[str, int]) -> None:
    """Print the validation summary as a table, its largest errors and the whole-node groups."""
    from simulator.calibration import summarize_errors
    from simulator.report.formatting import table

    hdr = ["", "n", "MAPE %", "median %", "p90 %", "max %", "bias %"]

    def line(name: str, s) -> list[str]:  # noqa: ANN001
        return [name, str(s.n), f"{s.mape:.1f}", f"{s.median_ape:.1f}", f"{s.p90_ape:.1f}", f"{s.max_ape:.1f}",
                f"{s.bias:+.1f}"]

    rows_t = ([line("all", summary)] + [line(g, s) for g, s in groups_oe.items()]
              + [line(c, s) for c, s in sorted(summary.by_class.items())])
    if len(groups) > 1:
        rows_t += [line(rows[0].device, summarize_errors(p, rows, by_class=False))
                   for (_, rows), p in zip(groups, preds, strict=True)]
    cal_note = f" with {args.calibration}" if args.calibration else ""
    print(f"{source}: {len(allrows)} measurements{cal_note}")
    if sum(left_out.values()):
        from simulator.cli.calibrate import left_out_note

        print(left_out_note(left_out, groups[0][1][0].device))
    print(table(rows_t, hdr, align="lrrrrrr"))
    print("\nlargest errors:")
    for i, w, p, m, a in summary.worst:
        print(f"  {i}  {w}: predicted {p * 1e3:.4g} ms, measured {m * 1e3:.4g} ms ({a:.0f}%)")
    if extras["multi"] is not None:
        _print_multi(extras["multi"])
    if extras["edge"] is not None:
        print()
        _print_edge(extras["edge"])
    if extras["frameworks"] is not None:
        print()
        _print_frameworks(extras["frameworks"])
    if extras["energy"] is not None:
        print()
        _print_energy(extras["energy"], rows=False)


def _print_multi(multi: dict) -> None:
    """The multi-device group: training runs and collective bus bandwidths, nothing fitted."""
    print(f"\nmulti-device (published_multi.csv, published_collectives.csv): {multi['predicted']} of "
          f"{multi['rows']} runs predictable from what their sources state")
    for key, title in (("training", "training iteration time / MFU / TFLOP/s per GPU"),
                       ("inference", "multi-GPU inference (TTFT / TPOT / latency / tokens/s at a stated batch)")):
        g = multi.get(key)
        if not g:
            continue
        print(f"  {title}: n {g['n']}, MAPE {g['mape']:.1f}%, bias {g['bias']:+.1f}%")
        for w in g["worst"]:
            print(f"    {w['id']}  {w['model']} on {w['system']} {w['metric']}: predicted {w['predicted']:.4g}, "
                  f"measured {w['measured']:.4g} ({w['error_pct']:+.1f}%)")
    c = multi["collectives"]
    print(f"  collective bus bandwidth: n {c['n']}, MAPE {c['mape']:.1f}% (see docs/collectives.md)")
    print("    " + ", ".join(f"{name} {g['mape']:.1f}% (n {g['n']})" for name, g in c["bands"].items())
          + "; per system: validate --dataset collectives")
    top = list(multi["skipped_reasons"].items())[:3]
    if top:
        print("  not predicted: " + "; ".join(f"{n} x {why}" for why, n in top))



def _run_edge(args: argparse.Namespace) -> int:
    """``--dataset edge``: predict the published MLPerf Inference Edge rows (nothing fitted) and print them."""
    from simulator.calibration.validation import validate_edge

    if args.hardware or args.calibration:
        raise ValueError("validate --dataset edge: --hardware/--calibration given; expected neither (each row names "
                         "its engines and power mode)")
    res = validate_edge()
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "dataset"}, indent=2, sort_keys=True))
    else:
        _print_edge(res)
    if args.plot is not None:
        pts = [(r["benchmark"], r["predicted"], r["measured"]) for r in res["rows"] if r["in_score"]]
        plot(pts, f"edge (MLPerf Inference Edge): MAPE {res['mape']:.1f}% (n={res['n']})", args.plot)
        if not args.json:
            print(f"\nplot -> {args.plot}")
    return 0


def _print_edge(res: dict) -> None:
    """The edge group: every published row, predicted versus measured, and the MAPE (nothing fitted)."""
    from simulator.report.formatting import table

    print(f"edge devices (published_edge.csv, MLPerf Inference Edge): {res['n']} rows predicted, "
          f"{res['not_scored']} not predicted; MAPE {res['mape']:.1f}%, median {res['median_ape']:.1f}%, "
          f"max {res['max_ape']:.1f}%")
    rows = []
    for r in res["rows"]:
        pred = "-" if r["predicted"] is None else f"{r['predicted']:.4g}"
        err = r.get("note", "") if r["error_pct"] is None else f"{r['error_pct']:+.1f}%"
        rows.append([r["id"], r["benchmark"], r["scenario"], f"{r['measured']:.4g} {r['unit']}", pred, err])
    print(table(rows, ["id", "benchmark", "scenario", "measured", "predicted", "error"], align="lllrrl"))
    for name, g in sorted(res["by_benchmark"].items()):
        print(f"  {name}: n {g['n']}, MAPE {g['mape']:.1f}%")


def _frameworks_json(res: dict) -> dict:
    return {"all": res["all"].to_json(classes=False),
            "by_framework": {k: v.to_json(classes=False) for k, v in res["by_framework"].items()},
            "rows": res["rows"]}


def _run_frameworks(args: argparse.Namespace) -> int:
    """``--dataset frameworks [FILE.csv]``: rows naming their software stack, predicted per framework, unfitted."""
    from simulator.calibration.frameworks_validation import validate_frameworks

    if args.hardware or args.calibration:
        raise ValueError("validate --dataset frameworks: --hardware/--calibration given; expected neither (each row "
                         "names its device and framework)")
    res = validate_frameworks(args.measurements)
    if args.json:
        print(json.dumps(_frameworks_json(res), indent=2, sort_keys=True))
    else:
        _print_frameworks(res)
    if args.plot is not None:
        pts = [(r["framework"].split(";")[0], r["predicted_s"], r["measured_s"]) for r in res["rows"]]
        plot(pts, f"software stacks: MAPE {res['all'].mape:.1f}% (n={res['all'].n})", args.plot)
        if not args.json:
            print(f"\nplot -> {args.plot}")
    return 0


def _print_frameworks(res: dict) -> None:
    """The software-stack group: n, MAPE and bias per framework (published_frameworks.csv, unfitted)."""
    from simulator.report.formatting import table

    a = res["all"]
    name = str(res.get("dataset", "published_frameworks.csv")).replace("\\", "/").rsplit("/", 1)[-1]
    print(f"software stacks ({name}): {a.n} rows; MAPE {a.mape:.1f}%, bias {a.bias:+.1f}%")
    rows = [[name, str(s.n), f"{s.mape:.1f}", f"{s.median_ape:.1f}", f"{s.max_ape:.1f}", f"{s.bias:+.1f}"]
            for name, s in sorted(res["by_framework"].items())]
    print(table(rows, ["framework", "n", "MAPE %", "median %", "max %", "bias %"], align="lrrrrr"))


def _energy_json(res: dict) -> dict:
    return {k: v for k, v in res.items() if k != "dataset"}


def _run_energy(args: argparse.Namespace) -> int:
    """``--dataset energy [FILE.csv]``: energy, average power and latency against published power measurements."""
    from simulator.calibration.energy_validation import validate_energy

    if args.hardware or args.calibration:
        raise ValueError("validate --dataset energy: --hardware/--calibration given; expected neither (each row "
                         "names its device and power mode)")
    if args.plot is not None:
        raise ValueError(f"validate --dataset energy: --plot {args.plot} given; expected no --plot (the plot "
                         "draws times; the energy table lists predicted and measured energy per row)")
    res = validate_energy(args.measurements)
    if args.json:
        print(json.dumps(_energy_json(res), indent=2, sort_keys=True))
    else:
        _print_energy(res, rows=True)
    return 0


def _print_energy(res: dict, *, rows: bool) -> None:
    """The energy group: energy, average-power and latency errors of the scored rows, by device and kind."""
    from simulator.report.formatting import table

    name = str(res.get("dataset", "published_energy.csv")).replace("\\", "/").rsplit("/", 1)[-1]
    a = res["all"]

    def fig(g: dict, key: str) -> list[str]:
        s = g[key]
        return ["-", "-"] if not s["n"] else [f"{s['mape']:.1f}", f"{s['bias']:+.1f}"]

    print(f"energy and power ({name}, unfitted): {a['n']} rows scored, {res['not_scored']} listed but not "
          f"scored; energy MAPE {a['energy']['mape']:.1f}%, average power MAPE {a['power']['mape']:.1f}%, "
          f"latency MAPE {a['latency']['mape']:.1f}%")
    for gname, g in [("all", a)] + [(f"device {d}", g) for d, g in sorted(res["by_device"].items())]:
        c = g["cancellation"]
        if c["cancel"]:
            print(f"  {gname}: errors that cancel: latency bias {c['latency_bias']:+.1f}% x power bias "
                  f"{c['power_bias']:+.1f}% -> energy bias {g['energy']['bias']:+.1f}%; energy at the measured "
                  f"latency (the energy model alone) MAPE {g['energy_at_measured_latency']['mape']:.1f}%, bias "
                  f"{g['energy_at_measured_latency']['bias']:+.1f}%")
    groups = [["all", str(a["n"]), *fig(a, "energy"), *fig(a, "power"), *fig(a, "latency"),
               *fig(a, "energy_at_measured_latency")]]
    for label, key in (("device", "by_device"), ("kind", "by_kind")):
        for gname, g in sorted(res[key].items()):
            groups.append([f"{label} {gname}", str(g["n"]), *fig(g, "energy"), *fig(g, "power"), *fig(g, "latency"),
                           *fig(g, "energy_at_measured_latency")])
    print(table(groups, ["", "n", "energy MAPE %", "energy bias %", "power MAPE %", "power bias %",
                         "latency MAPE %", "latency bias %", "E@meas.t MAPE %", "E@meas.t bias %"],
                align="lrrrrrrrrr"))
    scored = [r for r in res["rows"] if r["in_score"] and r["energy_error_pct"] is not None]
    worst = sorted(scored, key=lambda r: -abs(r["energy_error_pct"]))[:3]
    if worst:
        print("  largest energy errors:")
        for r in worst:
            print(f"    {r['id']}  {r['workload']} {r['dtype']} on {r['device']}: energy predicted "
                  f"{r['predicted_energy_j']:.4g} J, measured {r['measured_energy_j']:.4g} J "
                  f"({r['energy_error_pct']:+.1f}%)")
    if not rows:
        return
    out = []
    for r in res["rows"]:
        def pair(key: str, unit: str, r: dict = r) -> str:
            m, p = r[f"measured_{key}"], r[f"predicted_{key}"]
            if m is None:
                return "-"
            return f"{m:.4g} {unit}" if p is None else f"{p:.4g} / {m:.4g} {unit}"

        err = (f"{r['energy_error_pct']:+.1f}%" if r["energy_error_pct"] is not None
               else f"{r['power_error_pct']:+.1f}% (power)" if r["power_error_pct"] is not None
               else "not scored: " + _short(r.get("note", ""), 60))
        what = f"{r['workload']} {r['dtype']}" + (f" batch={r['batch']}" if r.get("batch") else "")
        out.append([r["id"], r["kind"], what, r["device"],
                    pair("energy_j", f"J/{r['energy_per']}"), pair("power_w", "W"), err])
    print()
    print(table(out, ["id", "kind", "workload", "device", "energy pred / meas", "power pred / meas", "energy error"],
                align="lllllll"))


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


def _run_kernels(args: argparse.Namespace) -> int:
    """``--dataset kernels``: decode-attention and GEMM kernel tables, predicted row by row, unfitted."""
    import numpy as np

    from simulator.calibration.kernel_validation import validate_kernels
    from simulator.report.formatting import table

    if args.measurements:
        raise ValueError(f"validate --dataset kernels: FILE.csv {args.measurements} given; expected none (the kernel "
                         "tables ship in hwmodels/measurements; validate another file with FILE.csv --hardware NAME)")
    if args.hardware or args.calibration:
        raise ValueError("validate --dataset kernels: --hardware/--calibration given; expected neither (each row "
                         "names its device)")
    if args.plot is not None:
        _check_plot_path(args.plot)
    res = validate_kernels()
    groups = res["groups"]
    if args.json:
        print(json.dumps({"groups": {k: v.to_json(classes=False) for k, v in groups.items()}, "rows": res["rows"]},
                         indent=2, sort_keys=True))
    else:
        print("kernel tables (hwmodels/measurements: decode_attention_kernels.csv, gemm_kernels.csv, "
              "gemm_fp8_kernels.csv), unfitted; "
              "derivation rows are those the catalog's decode-attention figures are medians of")
        rows = [[label, str(g.n), f"{g.mape:.1f}", f"{g.median_ape:.1f}", f"{g.max_ape:.1f}", f"{g.bias:+.1f}"]
                for label, g in groups.items()]
        print(table(rows, ["group", "n", "MAPE %", "median %", "max %", "bias %"], align="lrrrrr"))
    if args.plot is not None:
        pts = [(r["file"], r["predicted_s"], r["measured_s"]) for r in res["rows"]]
        cross = [r for r in res["rows"] if r["role"] == "cross-check"]
        mape = float(np.mean([abs(r["error_pct"]) for r in cross])) if cross else float("nan")
        plot(pts, f"kernel tables: cross-check MAPE {mape:.1f}% (n={len(cross)})", args.plot)
        if not args.json:
            print(f"\nplot -> {args.plot}")
    return 0



def _run_serving(args: argparse.Namespace) -> int:
    """``--dataset serving [FILE.csv]``: published serving measurements, simulated per deployment, unfitted."""
    from simulator.calibration.serving_validation import validate_serving
    from simulator.report.formatting import table

    if args.hardware or args.calibration or args.plot:
        raise ValueError("validate --dataset serving: --hardware/--calibration/--plot given; expected none (each row "
                         "names its system, engine and plan)")
    try:
        res = validate_serving(args.measurements)
    except ModuleNotFoundError as e:
        raise ValueError(f"{e}; expected the serving simulator (nodeperf serve) to be installed") from None
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "dataset"}, indent=2, sort_keys=True))
        return 0
    a = res["all"]
    print(f"serving ({len(res['rows'])} rows, {len(res['skipped'])} skipped; at most {res['max_requests']} requests "
          f"per deployment): MAPE {a.get('mape', float('nan')):.1f}%")
    rows = [[k, str(v["n"]), f"{v['mape']:.1f}", f"{v['max_ape']:.1f}", f"{v['bias']:+.1f}"]
            for k, v in res["by_engine_metric"].items()]
    print(table(rows, ["engine/metric", "n", "MAPE %", "max %", "bias %"], align="lrrrr"))
    for w in res["worst"]:
        print(f"  worst {w['id']}: {w['engine']} {w['metric']} {w['model']} on {w['system']} ({w['arrival']}, "
              f"{w['lengths']}): predicted {w['predicted']:.4g}, measured {w['measured']:.4g} ({w['ape_pct']:.0f}%)")
    for s in res["skipped"][:5]:
        print(f"  skipped {s['id']}: {s['reason']}")
    return 0


def _run_collectives(args: argparse.Namespace) -> int:
    """``--dataset collectives``: published nccl-tests / rccl-tests rows, busbw error per system and size band."""
    from hwmodels.collectives import compare_published
    from simulator.parallel.validation import collectives_summary
    from simulator.report.formatting import table

    if args.measurements or args.hardware or args.calibration or args.plot:
        raise ValueError("validate --dataset collectives: FILE.csv/--hardware/--calibration/--plot given; expected "
                         "none (each row of hwmodels/measurements/published_collectives.csv names its system)")
    summ = collectives_summary([c for c in compare_published() if c.in_score], worst=8)
    if args.json:
        print(json.dumps(summ, indent=2, sort_keys=True))
        return 0

    def line(label: str, g: dict) -> list[str]:
        return [label, str(g["n"]), f"{g['mape']:.1f}", f"{g['bias']:+.1f}"]

    print("collective bus bandwidth (hwmodels/measurements/published_collectives.csv), unfitted; "
          "size bands of nccl-tests' size")
    rows = ([line("all", summ)] + [line(k, g) for k, g in summ["bands"].items()]
            + [line(k, g) for k, g in summ["by_system_band"].items()]
            + [line(k, g) for k, g in summ["by_collective"].items()])
    print(table(rows, ["group", "n", "MAPE %", "bias %"], align="lrrr"))
    print("\nby system, collective, GPUs x nodes and band:")
    print(table([line(k, g) for k, g in summ["by_group_band"].items()], ["group", "n", "MAPE %", "bias %"],
                align="lrrr"))
    print("\nlargest errors:")
    for w in summ["worst"]:
        print(f"  {w['id']}  {w['group']} {w['size_bytes'] / 2**20:.4g} MiB: {w['error_pct']:+.1f}% "
              f"({w['algorithm']}/{w['protocol']})")
    return 0
