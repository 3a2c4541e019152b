"""Golden predictions: every published-set row's predicted latency and the per-op records of a few zoo models.

:func:`collect` predicts, with the current code, (1) every row of
``hwmodels/measurements/published_gpu.csv`` exactly as the published-set validation does
(:func:`~simulator.calibration.predict.default_predict` under the row's run conditions, graphs from
:class:`~simulator.calibration.predict.GraphCache`) and (2) the :class:`~simulator.report.OpCost`
records of a handful of zoo models on four GPUs. ``tests/simulator/test_golden_predictions.py``
asserts that the current code gives exactly (``==``) the stored values: a refactoring that should
change no number is checked bit for bit.

Run ``python tests/simulator/make_golden_predictions.py`` to compare and print the differences;
``--write`` regenerates ``tests/simulator/data/published_predictions.json`` (only when a change of
the numbers is intended, and said so in the change's note). JSON floats are written with ``repr``,
so they read back exactly.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from simulator.report.report import op_template

GOLDEN = Path(__file__).resolve().parent / "data" / "published_predictions.json"

#: Devices the zoo models are predicted on.
DEVICES: tuple[str, ...] = ("h100-sxm5-80gb", "a100-sxm4-80gb", "t4", "mi300x")
#: (label, zoo model, load_workload arguments). T4 has no bf16 path: the LLMs run there in fp16.
MODELS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("llama-2-7b decode b1 ctx2048", "llama-2-7b", {"phase": "decode", "batch": 1, "context": 2048}),
    ("llama-2-7b prefill b1 s2048", "llama-2-7b", {"phase": "prefill", "batch": 1, "seq": 2048}),
    ("resnet50 b64", "resnet50", {"batch": 64}),
    ("bert-large b8 s512", "bert_large", {"batch": 8, "seq": 512}),
    ("gpt2 train b4 s1024", "gpt2", {"train": True, "batch": 4, "seq": 1024}),
)
#: OpCost fields left out of the comparison: free text that may gain words without a number changing.
TEXT_FIELDS: frozenset[str] = frozenset({"notes"})
#: OpCost fields naming ops or groups, stored with layer indices as ``*`` (the position gives the layer).
NAME_FIELDS: tuple[str, ...] = ("name", "group", "fused_into")


def _published() -> list[dict[str, Any]]:
    from hwmodels.catalog import load_device
    from simulator.calibration.measurements import MeasurementSet
    from simulator.calibration.predict import GraphCache, default_predict
    from simulator.calibration.validation import DEFAULT_DATASET
    from simulator.hardware import known_devices

    ms = MeasurementSet.load(DEFAULT_DATASET, devices=known_devices())
    graphs = GraphCache()
    return [{"id": m.id, "device": m.device, "workload": m.workload,
             "predicted_s": default_predict(graphs.get(m), load_device(m.device), m)} for m in ms]


def _records(model: str, args: dict[str, Any], device: str) -> list[dict[str, Any]]:
    from hwmodels.catalog import load_device
    from simulator.engines.analytical import evaluate
    from workloads.resolve import load_workload

    kw = dict(args)
    if device == "t4" and model.startswith(("llama", "bert", "gpt")):
        kw["dtype"] = "fp16"
    rep = evaluate(load_workload(model, **kw), load_device(device))
    out = []
    for r in rep.records:
        rec = {k: v for k, v in r.to_json().items() if k not in TEXT_FIELDS}
        rec.update({k: op_template(rec[k]) for k in NAME_FIELDS})
        out.append(rec)
    return out


def _compact(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Records as distinct value rows plus, per op in order, the index of its row (the layers of a
    model repeat: this keeps the file small and loses nothing)."""
    fields = sorted(records[0]) if records else []
    rows: dict[str, int] = {}
    table: list[list[Any]] = []
    index = []
    for r in records:
        vals = [r[f] for f in fields]
        key = json.dumps(vals)
        if key not in rows:
            rows[key] = len(table)
            table.append(vals)
        index.append(rows[key])
    return {"fields": fields, "rows": table, "index": index}


def _expand(case: dict[str, Any]) -> list[dict[str, Any]]:
    return [dict(zip(case["fields"], case["rows"][i], strict=True)) for i in case["index"]]


def collect() -> dict[str, Any]:
    """The current predictions: ``{"published": [row...], "models": {case: [op record...]}}``."""
    models = {}
    for label, model, args in MODELS:
        for dev in DEVICES:
            models[f"{label} @ {dev}"] = _records(model, args, dev)
    return {"published": _published(), "models": models}


def load() -> dict[str, Any]:
    """The golden file, in :func:`collect`'s layout."""
    data = json.loads(GOLDEN.read_text())
    return {"published": data["published"], "models": {k: _expand(v) for k, v in data["models"].items()}}


def differences(golden: dict[str, Any], now: dict[str, Any], limit: int = 20) -> list[str]:
    """Human-readable exact-comparison failures (at most ``limit``)."""
    out: list[str] = []
    g_pub = {r["id"]: r for r in golden["published"]}
    n_pub = {r["id"]: r for r in now["published"]}
    if set(g_pub) != set(n_pub):
        out.append(f"published rows differ: missing {sorted(set(g_pub) - set(n_pub))}, "
                   f"new {sorted(set(n_pub) - set(g_pub))}")
    for rid in sorted(set(g_pub) & set(n_pub)):
        if g_pub[rid] != n_pub[rid]:
            out.append(f"published {rid}: golden {g_pub[rid]['predicted_s']!r}, now {n_pub[rid]['predicted_s']!r}")
    if set(golden["models"]) != set(now["models"]):
        out.append(f"model cases differ: {sorted(set(golden['models']) ^ set(now['models']))}")
    for case in sorted(set(golden["models"]) & set(now["models"])):
        g, n = golden["models"][case], now["models"][case]
        if len(g) != len(n):
            out.append(f"{case}: {len(g)} golden records, {len(n)} now")
            continue
        for i, (gr, nr) in enumerate(zip(g, n, strict=True)):
            for key in sorted(set(gr) | set(nr)):
                if gr.get(key) != nr.get(key):
                    out.append(f"{case}: op #{i} {gr.get('name')!r}: {key}: golden {gr.get(key)!r}, now {nr.get(key)!r}")
    return out[:limit]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="regenerate the golden file from the current code")
    args = ap.parse_args(argv)
    logging.disable(logging.WARNING)
    now = collect()
    if args.write:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        data = {"published": now["published"], "models": {k: _compact(v) for k, v in now["models"].items()}}
        GOLDEN.write_text(json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n")
        n_rec = sum(len(v) for v in now["models"].values())
        print(f"wrote {GOLDEN.name}: {len(now['published'])} published rows, {len(now['models'])} model cases, "
              f"{n_rec} op records")
        return 0
    diff = differences(load(), now)
    print("\n".join(diff) if diff else "predictions equal the golden file")
    return 1 if diff else 0


if __name__ == "__main__":
    sys.exit(main())
