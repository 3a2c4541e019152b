"""Figures of predictions and sweep results: formats, labels with units, roofs from the spec, bars that add up,
fronts checked by brute force, and one-line errors from `nodeperf plot`."""

from __future__ import annotations

import pandas as pd
import pytest

from simulator import evaluate
from simulator.cli.main import main as cli
from simulator.hardware import load_hardware
from simulator.report import figures as F
from workloads.resolve import load_workload


@pytest.fixture(scope="module")
def h100():
    return load_hardware("h100-sxm5-80gb")


@pytest.fixture(scope="module")
def decode(h100):
    return evaluate(load_workload("gpt2", phase="decode", batch=1, context=128), h100)


@pytest.fixture(scope="module")
def table():
    rows = []
    for dev in ("a", "b"):
        for rows_ in (32, 64, 128):
            for sram in (1 << 20, 2 << 20):
                lat = 1e-3 * (rows_ / 32) ** 0.5 * (2 if dev == "b" else 1) / (sram >> 20)
                rows.append({"device": dev, "rows": rows_, "sram_bytes": sram, "latency_s": lat,
                             "energy_j": 0.5 / lat * 1e-3 + rows_ * 1e-3})
    return pd.DataFrame(rows)


def _texts(fig):
    ax = fig.axes[0]
    return ax.get_xlabel(), ax.get_ylabel(), ax.get_title()


@pytest.mark.parametrize("ext, magic", [(".png", b"\x89PNG"), (".pdf", b"%PDF"), (".svg", b"<?xml")])
def test_save_figure_writes_the_format_of_the_extension(tmp_path, decode, ext, magic):
    fig = F.breakdown_figure(decode)
    out = F.save_figure(fig, tmp_path / f"fig{ext.upper() if ext == '.pdf' else ext}")
    data = out.read_bytes()
    assert data.startswith(magic)
    if ext == ".svg":
        assert b"<svg" in data[:2000]
    if ext == ".png":  # 300 dpi: the pHYs chunk holds 300 / 0.0254 = 11811 pixels per metre
        assert (11811).to_bytes(4, "big") * 2 in data[:200]


def test_pdf_and_svg_are_byte_identical_between_saves(tmp_path, decode):
    for ext in (".pdf", ".svg"):
        a = F.save_figure(F.breakdown_figure(decode), tmp_path / f"a{ext}").read_bytes()
        b = F.save_figure(F.breakdown_figure(decode), tmp_path / f"b{ext}").read_bytes()
        assert a == b


def test_unknown_extension_and_missing_folder_are_located_errors(tmp_path, decode):
    fig = F.breakdown_figure(decode)
    with pytest.raises(F.FigureError, match=r"fig\.jpg: unknown figure format; got '\.jpg'; expected .*\.png"):
        F.save_figure(fig, tmp_path / "fig.jpg")
    with pytest.raises(F.FigureError, match="no such folder"):
        F.save_figure(fig, tmp_path / "nope" / "fig.png")
    assert not list(tmp_path.iterdir())


def test_axis_labels_carry_scaled_units():
    assert F.axis_label("latency_s", [0.002, 0.004]) == ("latency (ms)", 1e-3)
    assert F.axis_label("energy_per_token_j", [0.25]) == ("energy per token (mJ)", 1e-3)
    assert F.axis_label("read_bandwidth_bytes_per_s", [3.35e12]) == ("read bandwidth (TB/s)", 1e12)
    assert F.axis_label("sram_bytes", [2**21]) == ("SRAM (MiB)", 2**20)
    assert F.axis_label("tokens_per_s", [5000.0]) == ("tokens/s", 1.0)
    assert F.axis_label("overall_util_pct", [55.0]) == ("overall util (%)", 1.0)
    assert F.axis_label("batch", [1, 2]) == ("batch", 1.0)


def test_roofline_ridge_is_peak_over_bandwidth(h100, decode):
    roofs = F.roofline_roofs(decode, h100)
    assert roofs["dtype"] == "bf16" and roofs["unit"] == "tensor"
    peak, bw = 989.4e12, 3.35e12  # H100 SXM5 datasheet: dense BF16, HBM3
    assert roofs["peak_flops_per_s"] == pytest.approx(peak)
    assert roofs["bandwidth_bytes_per_s"] == pytest.approx(bw)
    assert roofs["ridge_flop_per_byte"] == pytest.approx(peak / bw)  # 295.3 FLOP/B
    fig = F.roofline_figure(decode, h100)
    ax = fig.axes[0]
    ridge = [ln for ln in ax.get_lines() if ln.get_gid() == "ridge"]
    assert len(ridge) == 1
    x, y = ridge[0].get_xdata()[0], ridge[0].get_ydata()[0]
    assert x == pytest.approx(peak / bw)
    assert y == pytest.approx(989.4)  # drawn in TFLOP/s
    xl, yl, title = _texts(fig)
    assert "FLOP/B" in xl and yl == "achieved rate (TFLOP/s)"
    # every op is placed or counted: points + "not placed" = records
    placed = sum(len(c.get_offsets()) for c in ax.collections)
    assert placed == sum(1 for r in decode.records if r.flops > 0 and r.dram_bytes > 0)
    assert f"{len(decode.records) - placed} op(s) without FLOPs" in title
    # a decode step's GEMMs (batch 1) sit left of the ridge, below the memory roof times a small slack
    for r in decode.records:
        if r.kind == "matmul":
            ai = r.flops / r.dram_bytes
            assert ai < peak / bw
            assert r.flops / r.time_s <= bw * ai * 1.0001
    # the fp8 roof: the datasheet's dense FP8 rate (1978.9 TFLOP/s, twice bf16) over the same bandwidth
    fp8 = F.roofline_roofs(decode, h100, dtype="fp8_e4m3")
    assert fp8["ridge_flop_per_byte"] == pytest.approx(1978.9e12 / bw)
    with pytest.raises(F.FigureError, match=r"tensor_flops_per_s\.bf61: no rate.*did you mean .bf16."):
        F.roofline_roofs(decode, h100, dtype="bf61")


def test_breakdown_bars_sum_to_the_reports_latency(h100, decode):
    a100 = load_hardware("a100-sxm4-80gb")
    other = evaluate(load_workload("gpt2", phase="decode", batch=1, context=128), a100)
    for by in ("kind", "bound"):
        fig = F.breakdown_figure([decode, other], by=by, top=3)
        ax = fig.axes[0]
        heights = {0: 0.0, 1: 0.0}
        for patch in ax.patches:
            heights[round(patch.get_x() + patch.get_width() / 2)] += patch.get_height()
        # gpt2 decode steps take a few hundred microseconds: drawn in µs
        assert ax.get_ylabel() == "time (µs)"
        assert heights[0] == pytest.approx(decode.latency_s * 1e6, rel=1e-9)
        assert heights[1] == pytest.approx(other.latency_s * 1e6, rel=1e-9)
        names = ax.get_legend_handles_labels()[1]
        if by == "kind":
            assert len(names) == 4 and "other" in names  # top 3 kinds + the rest
        else:
            assert set(names) <= {"compute", "memory", "latency"}
    by_bound = {b: sum(r.time_s for r in decode.records if r.bound == b) for b in ("compute", "memory", "latency")}
    assert sum(by_bound.values()) == pytest.approx(decode.latency_s)
    with pytest.raises(F.FigureError, match="expected kind or bound; did you mean 'bound'"):
        F.breakdown_figure(decode, by="bond")


def test_pareto_mask_matches_brute_force():
    import random

    rng = random.Random(0)
    for _ in range(30):
        pts = [(rng.randint(0, 8), rng.randint(0, 8)) for _ in range(rng.randint(1, 25))]
        for mins in ((True, True), (True, False), (False, True)):
            sx = [p[0] if mins[0] else -p[0] for p in pts]
            sy = [p[1] if mins[1] else -p[1] for p in pts]
            want = [not any(sx[j] <= sx[i] and sy[j] <= sy[i] and (sx[j], sy[j]) != (sx[i], sy[i])
                            for j in range(len(pts))) for i in range(len(pts))]
            assert F.pareto_mask([p[0] for p in pts], [p[1] for p in pts], mins) == want


def test_pareto_figure_draws_one_front_per_group(table):
    fig = F.pareto_figure(table, "latency_s", "energy_j", hue="device")
    xl, yl, title = _texts(fig)
    assert xl == "latency (ms)" and yl == "energy (J)" and "points on the front" in title
    ax = fig.axes[0]
    fronts = [ln for ln in ax.get_lines()]
    assert len(fronts) == 2
    for dev, line in zip(("a", "b"), fronts, strict=True):
        sub = table[table.device == dev]
        mask = F.pareto_mask(sub.latency_s.tolist(), sub.energy_j.tolist())
        want = sorted(x * 1e3 for x, m in zip(sub.latency_s, mask, strict=True) if m)
        assert sorted(line.get_xdata()) == pytest.approx(want)
    assert ax.get_legend() is not None
    with pytest.raises(F.FigureError, match="--x latncy_s: unknown column.*did you mean 'latency_s'"):
        F.pareto_figure(table, "latncy_s", "energy_j")
    with pytest.raises(F.FigureError, match="--hue dev: unknown column"):
        F.pareto_figure(table, "latency_s", "energy_j", hue="dev")
    bad = table.assign(energy_j=["x"] * len(table))
    with pytest.raises(F.FigureError, match="--y energy_j: not a number"):
        F.pareto_figure(bad, "latency_s", "energy_j")


def test_heatmap_cells_are_the_aggregate_of_their_rows(table):
    fig = F.heatmap_figure(table, "rows", "sram_bytes", "latency_s", agg="min")
    ax = fig.axes[0]
    z = ax.images[0].get_array()
    assert z.shape == (2, 3)  # sram rows x array-row columns
    for i, sram in enumerate((1 << 20, 2 << 20)):
        for j, r in enumerate((32, 64, 128)):
            want = table[(table.rows == r) & (table.sram_bytes == sram)].latency_s.min()
            assert z[i, j] == pytest.approx(want * 1e3)
    assert ax.get_xlabel() == "rows" and ax.get_ylabel() == "SRAM (MiB)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["1", "2"]
    assert fig.axes[1].get_ylabel() == "latency (ms)"  # the colour bar
    mean = F.heatmap_figure(table, "rows", "sram_bytes", "latency_s", agg="mean").axes[0].images[0].get_array()
    assert mean[0, 0] == pytest.approx(table[(table.rows == 32) & (table.sram_bytes == 1 << 20)].latency_s.mean() * 1e3)
    # a cell no row reaches stays blank and is counted
    gap = F.heatmap_figure(table[~((table.rows == 64) & (table.sram_bytes == 2 << 20))], "rows", "sram_bytes",
                           "latency_s")
    assert "1 of 6 cells without a result" in gap.axes[0].get_title()
    with pytest.raises(F.FigureError, match="unknown aggregation.*did you mean 'min'"):
        F.heatmap_figure(table, "rows", "sram_bytes", "latency_s", agg="mn")
    with pytest.raises(F.FigureError, match="same column"):
        F.heatmap_figure(table, "rows", "rows", "latency_s")


def test_no_pyplot_state_is_touched(decode, table, h100):
    import inspect

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    assert "import matplotlib.pyplot" not in inspect.getsource(F) and "plt." not in inspect.getsource(F)
    before = plt.get_fignums()
    rc = dict(matplotlib.rcParams)
    F.pareto_figure(table, "latency_s", "energy_j")
    F.heatmap_figure(table, "rows", "sram_bytes", "latency_s")
    F.roofline_figure(decode, h100)
    assert plt.get_fignums() == before  # no figure registered with pyplot
    assert dict(matplotlib.rcParams) == rc


def _run(argv):
    try:
        return cli(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code


def test_cli_writes_each_kind_and_refuses_bad_input_in_one_line(tmp_path, table, capsys):
    csv = tmp_path / "results.csv"
    table.to_csv(csv, index=False)
    ok = [
        ["plot", "roofline", "gemm:m=1024,n=1024,k=1024", "--hardware", "h100-sxm5-80gb", "-o", str(tmp_path / "r.png")],
        ["plot", "breakdown", "gpt2", "--phase", "decode", "--context", "64", "--hardware", "h100-sxm5-80gb",
         "--hardware", "l4", "--by", "bound", "-o", str(tmp_path / "b.pdf")],
        ["plot", "pareto", str(csv), "--x", "latency_s", "--y", "energy_j", "--hue", "device", "-o",
         str(tmp_path / "p.svg")],
        ["plot", "heatmap", str(csv), "--x", "rows", "--y", "sram_bytes", "--value", "latency_s", "-o",
         str(tmp_path / "h.png")],
    ]
    for argv in ok:
        assert cli(argv) == 0, argv
        assert (tmp_path / argv[-1].rsplit("/", 1)[-1]).stat().st_size > 1000
    capsys.readouterr()
    bad = {
        "unknown column": (["plot", "pareto", str(csv), "--x", "latncy_s", "--y", "energy_j", "-o",
                            str(tmp_path / "x.png")], "did you mean 'latency_s'"),
        "unknown split": (["plot", "breakdown", "gpt2", "--hardware", "h100-sxm5-80gb", "--by", "knd", "-o",
                           str(tmp_path / "x.png")], "did you mean 'kind'"),
        "bad extension": (["plot", "heatmap", str(csv), "--x", "rows", "--y", "sram_bytes", "--value", "latency_s",
                           "-o", str(tmp_path / "x.jpg")], "unknown figure format; got '.jpg'"),
        "missing results": (["plot", "pareto", str(tmp_path / "none.csv"), "--x", "a", "--y", "b", "-o",
                             str(tmp_path / "x.png")], "none.csv: no such results file"),
        "unknown results format": (["plot", "pareto", str(tmp_path / "r.png"), "--x", "a", "--y", "b", "-o",
                                    str(tmp_path / "x.png")], "unknown results format; got '.png'"),
        "unknown kind": (["plot", "scatter", "-o", str(tmp_path / "x.png")], "got 'scatter'; expected one of "),
        "missing folder": (["plot", "pareto", str(csv), "--x", "latency_s", "--y", "energy_j", "-o",
                            str(tmp_path / "no" / "x.png")], "no such folder"),
    }
    for name, (argv, msg) in bad.items():
        rc = _run(argv)
        err = capsys.readouterr().err
        assert rc == 2, name
        assert msg in err, (name, err)
        assert err.count("\n") == 1 and "Traceback" not in err, name
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.jpg").exists()



def test_cli_reads_a_sweep_store(tmp_path, capsys):
    from simulator.sweep import parse_experiment, run_sweep

    exp = parse_experiment({
        "schema": "nodeperf.experiment/1", "name": "figures-test", "metrics": ["latency_s", "energy_j"],
        "workload": {"model": "gemm:m=512,n=512,k=512"}, "hardware": {"name": "h100-sxm5-80gb"},
        "axes": {"hardware": {"memory.hbm.read_bandwidth_bytes_per_s": ["1 TB/s", "3.35 TB/s"],
                              "compute.tensor_flops_per_s.bf16": ["500 TFLOP/s", "989.4 TFLOP/s"]}},
    })
    store = tmp_path / "sweep.sqlite"
    run_sweep(exp, store, scheduler="synchronous")
    bw, bf16 = "hardware.memory.hbm.read_bandwidth_bytes_per_s", "hardware.compute.tensor_flops_per_s.bf16"
    out = tmp_path / "h.png"
    assert _run(["plot", "heatmap", str(store), "--x", bw, "--y", bf16, "--value", "latency_s", "-o", str(out)]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    from simulator.cli.plot import read_results

    fig = F.heatmap_figure(read_results(store), bw, bf16, "latency_s")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "HBM read bandwidth (TB/s)" and ax.get_ylabel() == "tensor bf16 (TFLOP/s)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "3.35"]
    assert _run(["plot", "pareto", str(store), "--x", "latency_s", "--y", "energy_j", "-o", str(tmp_path / "p.pdf")]) == 0
    capsys.readouterr()
    assert _run(["plot", "pareto", str(store), "--x", "latency", "--y", "energy_j", "-o", str(tmp_path / "x.png")]) == 2
    assert "did you mean 'latency_s'" in capsys.readouterr().err
