"""Measurement CSV schema: loading, located errors, filters, reproducible splits and content hashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator.calibration.measurements import COLUMNS, MeasurementError, MeasurementSet

ROOT = Path(__file__).resolve().parents[3]
HEADER = "id,category,workload,dtype,device,median_s,min_s,repetitions,iqr_s"


def _csv(tmp_path: Path, body: str, header: str = HEADER) -> Path:
    p = tmp_path / "m.csv"
    p.write_text(header + "\n" + body)
    return p


def test_load_minimal_and_defaults(tmp_path: Path) -> None:
    p = _csv(tmp_path, "a,,gemm:m=64,n=64,k=64,fp32,host,0.001,0.0009,10,0.0001\n".replace(
        "gemm:m=64,n=64,k=64", '"gemm:m=64,n=64,k=64"'))
    ms = MeasurementSet.load(p, devices=["host"])
    (m,) = ms.measurements
    assert (m.workload, m.device, m.dtype, m.median_s, m.min_s, m.repetitions) == (
        "gemm:m=64,n=64,k=64", "host", "fp32", 0.001, 0.0009, 10)
    assert m.category == "gemm"  # derived from the micro kind
    assert m.where == f"{p}:2"


@pytest.mark.parametrize(("row", "needle"), [
    ('a,,"gemm:m=8,n=8,k=8",fp32,host,-1,,,', ":2: median_s: must be positive; got -1"),
    ('a,,"gemm:m=8,n=8,k=8",fp32,host,nan,,,', ":2: median_s: not finite; got 'nan'"),
    ('a,,"gemm:m=8,n=8,k=8",fp32,host,abc,,,', ":2: median_s: not a number; got 'abc'"),
    ('a,,"gemm:m=8,n=8,k=8",fp32,h100-sxm5,0.1,,,', ":2: device: unknown device; got 'h100-sxm5'"),
    ('a,,"gemm:m=8,n=8,k=8",fp32,host,0.1,0.2,,', ":2: min_s: above the median"),
    ('a,,"gemm:m=8,n=8,k=8",fp33,host,0.1,,,', ":2: dtype: unknown dtype; got 'fp33'"),
    ('a,,"gemm:m=8,n=8",fp32,host,0.1,,,', "missing k"),
    ('a,,"gemn:m=8,n=8,k=8",fp32,host,0.1,,,', "did you mean 'gemm'"),
    ('a,,resnet5O,fp32,host,0.1,,,', "unknown model"),
    ('a,,"gemm:m=8,n=8,k=8",fp32,host,0.1,,0,', ":2: repetitions: not a positive integer; got '0'"),
])
def test_bad_rows_are_located(tmp_path: Path, row: str, needle: str) -> None:
    p = _csv(tmp_path, row + "\n")
    with pytest.raises(MeasurementError) as e:
        MeasurementSet.load(p, devices=["host", "h100-sxm5-80gb"])
    assert needle in str(e.value)
    assert str(p) in str(e.value)


def test_all_problems_collected_with_lines(tmp_path: Path) -> None:
    p = _csv(tmp_path, 'a,,"gemm:m=8,n=8,k=8",fp32,host,-1,,,\nb,,"gemm:m=8,n=8,k=8",fp32,host,0.1,,,\n'
                       'c,,"gemm:m=8,n=8,k=8",fp32,tpu9,0.1,,,\n')
    with pytest.raises(MeasurementError) as e:
        MeasurementSet.load(p, devices=["host"])
    msg = str(e.value)
    assert "2 problems" in msg and f"{p}:2: median_s" in msg and f"{p}:4: device" in msg


def test_missing_and_unknown_columns(tmp_path: Path) -> None:
    p = _csv(tmp_path, "a,gemm,host,0.1\n", header="id,workload,device,median_sec")
    with pytest.raises(MeasurementError) as e:
        MeasurementSet.load(p)
    msg = str(e.value)
    assert f"{p}:1: dtype: missing required column" in msg
    assert f"{p}:1: median_s: missing required column" in msg
    assert "median_sec: unknown column" in msg and "did you mean 'median_s'" in msg


def _set(n_per_class: int = 10) -> MeasurementSet:
    rows = [HEADER]
    for c, w in (("gemm", "gemm:m={i},n=8,k=8"), ("copy", "copy:bytes={i}00")):
        for i in range(1, n_per_class + 1):
            rows.append(f'{c}{i},{c},"{w.format(i=i * 8)}",fp32,host,{i * 1e-3},,,')
    return MeasurementSet.from_csv_text("\n".join(rows) + "\n", devices=["host"])


def test_split_is_stratified_reproducible_and_disjoint() -> None:
    ms = _set()
    tr, te = ms.split(0.3, seed=0)
    tr2, te2 = ms.split(0.3, seed=0)
    assert [m.id for m in te] == [m.id for m in te2]
    assert len(te) == 6 and len(tr) == 14  # round(0.3 * 10) per class
    assert sorted(m.category for m in te) == ["copy"] * 3 + ["gemm"] * 3
    assert {m.id for m in tr}.isdisjoint({m.id for m in te})
    _, te3 = ms.split(0.3, seed=1)
    assert [m.id for m in te3] != [m.id for m in te]


def test_hash_ignores_order_and_sees_values() -> None:
    ms = _set()
    rev = MeasurementSet(tuple(reversed(ms.measurements)))
    assert ms.content_hash() == rev.content_hash()
    import dataclasses

    changed = MeasurementSet((dataclasses.replace(ms[0], median_s=ms[0].median_s * 1.01), *ms.measurements[1:]))
    assert changed.content_hash() != ms.content_hash()


def test_filter_and_round_trip(tmp_path: Path) -> None:
    ms = _set(3)
    assert [m.id for m in ms.filter(category="copy")] == ["copy1", "copy2", "copy3"]
    p = tmp_path / "out.csv"
    ms.to_csv(p)
    assert p.read_text().splitlines()[0] == ",".join(COLUMNS)
    again = MeasurementSet.load(p, devices=["host"])
    assert again.content_hash() == ms.content_hash()


def test_published_dataset_loads() -> None:
    from simulator.hardware import known_devices

    ms = MeasurementSet.load(ROOT / "hwmodels" / "measurements" / "published_gpu.csv", devices=known_devices())
    assert len(ms) >= 94
    assert "h100-sxm5-80gb" in ms.devices and "gemm" in ms.categories


def test_weight_and_kv_dtype_columns(tmp_path: Path) -> None:
    """Optional quantised storage: parsed, part of the case, passed to the graph builder; a bad one is located."""
    header = "id,workload,batch,seq,phase,dtype,weight_dtype,kv_dtype,device,median_s"
    p = _csv(tmp_path, "q,llama-2-7b,1,128,prefill,fp16,fp8,fp8_e4m3,h100-sxm5-80gb,0.007\n"
                       "p,llama-2-7b,1,128,prefill,fp16,,,h100-sxm5-80gb,0.008\n", header)
    q, plain = MeasurementSet.load(p, devices=["h100-sxm5-80gb"]).measurements
    assert (q.weight_dtype, q.kv_dtype) == ("fp8_e4m3", "fp8_e4m3")
    assert (plain.weight_dtype, plain.kv_dtype) == (None, None)
    assert q.case != plain.case
    assert q.workload_args()["weight_dtype"] == "fp8_e4m3" and "weight_dtype" not in plain.workload_args()
    from simulator.calibration.predict import GraphCache

    cache = GraphCache()
    kinds = {op.kind for op in cache.get(q)}
    assert any("quant" in k for k in kinds) and not any("quant" in k for k in (op.kind for op in cache.get(plain)))
    bad = _csv(tmp_path, "q,llama-2-7b,1,128,prefill,fp16,fp9,,h100-sxm5-80gb,0.007\n", header)
    with pytest.raises(MeasurementError) as e:
        MeasurementSet.load(bad, devices=["h100-sxm5-80gb"])
    assert f"{bad}:2: weight_dtype" in str(e.value) and "fp9" in str(e.value)
