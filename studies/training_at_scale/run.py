"""Run the training-at-scale study: time and cost to pre-train a 70B and a 405B model to its token budget on
512-16,384 H100s, B200s and TPU v5p chips, the best plan of every point found by `nodeperf tune`.

Usage: ``python -m studies.training_at_scale [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/training_at_scale/run.py ...`` from anywhere. It writes ``results.csv``
and ``training_at_scale.png`` into ``out/training_at_scale/`` under the repository root by default; the
committed ones are refreshed with ``python -m studies.training_at_scale --out studies/training_at_scale``.

Every (model, system, cluster) is one row: for each recipe of the system (a training stack with its
sharding, tensor and pipeline degrees, interleaving, recomputation policies and microbatches) one
exhaustive :func:`simulator.sweep.tune.tune` search of :class:`~simulator.sweep.tune_model.ModelProblem`
maximising throughput under the memory fit (global batch fixed in tokens, a plan may leave up to
``1 - fill`` of the devices idle); the fastest plan over the recipes is the row. Days to train are the
token budget over the plan's tokens per second; device-hours and cost count the devices the plan
occupies, at the catalog's on-demand price (hwmodels/catalog/prices.toml, source and date in the row);
energy is the plan's predicted step energy times the steps. A point without a feasible plan is a row with
empty numbers and the reason in ``note``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, rows_step, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
RESULTS_CSV = "results.csv"
COLUMNS = (
    "model", "system", "hardware", "devices", "devices_used", "recipe", "framework", "tp", "pp", "dp", "sharding",
    "interleave", "recompute", "microbatch", "global_batch", "tokens_per_step", "step_time_s", "mfu",
    "tokens_per_s", "memory_per_device_gib", "memory_capacity_gib", "token_budget", "days", "device_hours",
    "usd_per_device_hour", "cost_usd", "energy_mwh", "price_source", "configurations", "evaluated", "feasible",
    "note")

#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "seq": "int>0", "dtype": "dtype", "global_batch_tokens": "int>0", "fill": "num>0", "devices": "int>0[]",
    "models[].name": "model", "models[].tokens": "num>0",
    "systems[].name": "str", "systems[].hardware": "str[]",
    "systems[].recipes[].name": "str", "systems[].recipes[].framework": "str",
    "systems[].recipes[].sharding": "{none|zero1|fsdp}[]", "systems[].recipes[].tp": "int>0[]",
    "systems[].recipes[].pp": "int>0[]", "systems[].recipes[].interleave": "int>0[]",
    "systems[].recipes[].recompute": "recompute[]", "systems[].recipes[].microbatch": "int>0[]",
}


def _hardware(name: str) -> Any:
    """A catalog system name, or a system TOML file next to this study."""
    from simulator.hardware import load_hardware

    local = HERE / name
    try:
        return load_hardware(str(local) if name.endswith(".toml") and local.is_file() else name)
    except ValueError as exc:
        raise ValueError(f"systems[].hardware {name!r}: {exc}") from None


def _layers(model: str) -> int:
    from workloads.zoo import get_entry, load_data

    cfg = load_data("transformers.toml")["models"][get_entry(model).name]
    return int(cfg["layers"])


def _best_plan(model: str, hw_name: str, system: Any, recipes: list[dict[str, Any]], cfg: dict[str, Any],
               prices: dict[str, Any]) -> tuple[Any, dict[str, Any], int, int, int]:
    """(best trial, its recipe, configurations, evaluated, feasible) over the recipes of one point."""
    from simulator.sweep.tune import OBJECTIVES, tune
    from simulator.sweep.tune_model import ModelProblem

    layers = _layers(model)
    metric, direction = OBJECTIVES["throughput"]
    best, best_recipe, size, evaluated, feasible = None, {}, 0, 0, 0
    gb = cfg["global_batch_tokens"] // cfg["seq"]
    for rec in recipes:
        pps = [p for p in rec["pp"] if layers % p == 0]
        if not pps:
            continue
        try:
            problem = ModelProblem(
                model, [hw_name], batch=rec["microbatch"], dtypes=[cfg["dtype"]], fusion=(False,),
                recompute=rec["recompute"], seq=cfg["seq"], train=True, tp=rec["tp"], pp=pps, dp=_divisors(gb),
                global_batch=gb, prices=prices, frameworks=[rec["framework"]], sharding=rec["sharding"],
                interleave=rec["interleave"], sequence_parallel=True, fill=cfg["fill"])
        except ValueError as exc:
            raise ValueError(f"systems[].recipes[] {rec['name']!r}: {exc}") from None
        result = tune(problem, [], metric, direction, objective="throughput", search="exhaustive",
                      trials=10**6, top=1, progress=False)
        size += result.valid_size or 0
        evaluated += result.evaluations
        feasible += len(result.feasible)
        if result.best and (best is None or result.best[0].metrics[metric] > best.metrics[metric]):
            best, best_recipe = result.best[0], rec
    return best, best_recipe, size, evaluated, feasible


def _divisors(n: int) -> list[int]:
    """The divisors of ``n`` (data-parallel degrees that split the global batch into whole sequences)."""
    return [d for d in range(1, n + 1) if n % d == 0]


def _row(model: dict[str, Any], family: dict[str, Any], name: str, system: Any, cfg: dict[str, Any],
         prices: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row.update(model=model["name"], system=family["name"], hardware=system.name, devices=int(system.count),
               token_budget=float(model["tokens"]), note="")
    best, rec, size, evaluated, feasible = _best_plan(model["name"], name, system, family["recipes"], cfg, prices)
    row.update(configurations=size, evaluated=evaluated, feasible=feasible)
    if best is None:
        row["note"] = "no plan of the recipes fits in memory" if evaluated else "no plan of the recipes exists"
        return row
    c, m = best.config, best.metrics
    gb = cfg["global_batch_tokens"] // cfg["seq"]
    tokens_step = gb * cfg["seq"]
    days = model["tokens"] / m["tokens_per_s"] / 86400.0
    used = int(m["devices"])
    price = prices.get(system.device.name.lower())
    steps = model["tokens"] / tokens_step
    row.update(recipe=rec["name"], framework=c["framework"], tp=c["tp"], pp=c["pp"], dp=c["dp"],
               sharding=c["sharding"], interleave=c["interleave"], recompute=c["recompute"], microbatch=c["batch"],
               global_batch=gb, tokens_per_step=tokens_step, step_time_s=m["latency_s"], mfu=m["mfu"],
               tokens_per_s=m["tokens_per_s"], memory_per_device_gib=m["memory_per_device"] / 2**30,
               memory_capacity_gib=m["capacity"] / 2**30, devices_used=used, days=days,
               device_hours=days * 24.0 * used, energy_mwh=m["energy_j"] * steps / 3.6e9)
    if price is not None:
        row.update(usd_per_device_hour=price.usd_per_hour, cost_usd=row["device_hours"] * price.usd_per_hour,
                   price_source=f"{price.provider} {price.instance} {price.region}, {price.date}".strip())
    return row


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (model, system, cluster size in ``cfg['devices']``): the fastest plan that fits."""
    from hwmodels.cost import load_prices

    prices = load_prices()
    points = []
    for family in cfg["systems"]:
        for name in family["hardware"]:
            system = _hardware(name)
            if int(system.count) in cfg["devices"]:
                points.append((family, name, system))
    bar = study_progress(len(points) * len(cfg["models"]), unit="point")
    rows = []
    for model in cfg["models"]:
        for family, name, system in points:
            key = str(HERE / name) if name.endswith(".toml") else name
            rows.append(_row(model, family, key, system, cfg, prices))
            bar.update(1)
    bar.close()
    return rows


def write_csv(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits, missing numbers empty), creating its folder."""
    write_rows(rows, out, COLUMNS)


def main(argv: list[str] | None = None) -> int:
    from studies.training_at_scale.plot import plot

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0],
                      compute=rows_step(run, write_csv, RESULTS_CSV),
                      draw=lambda _cfg, out, figs: [plot(out / RESULTS_CSV, figs / "training_at_scale.png")],
                      results=RESULTS_CSV)


if __name__ == "__main__":
    sys.exit(main())
