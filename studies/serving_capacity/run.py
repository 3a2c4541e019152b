"""Run the serving-capacity study: p99 TTFT and TPOT of Llama 3 8B and 70B deployments against Poisson
load under two schedulers, each deployment's capacity under the SLO, and capacity per dollar.

Usage: ``python -m studies.serving_capacity [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/serving_capacity/run.py ...`` from anywhere. ``results.csv`` (one row per
deployment, scheduler and rate), ``capacity.csv`` (one row per deployment and scheduler) and the figures
``serving_capacity.png`` and ``capacity_per_dollar.png`` go to ``out/serving_capacity/`` by default. The
committed ones are refreshed with ``python -m studies.serving_capacity --out studies/serving_capacity
--figures docs/figures``.

Each run is :func:`simulator.serving.simulate_serving` (stack: vLLM's framework profile) of the
configuration's requests at one Poisson rate, the same draws at every rate. A sweep over a deployment's
rates stops after ``stop_after_misses`` rates in a row miss the SLO. Capacity is the highest rate that
meets every SLO with every lower rate of the grid meeting it too, refined by ``refine_steps`` bisections
towards the next rate of the grid. Prices: :func:`hwmodels.cost.usd_per_hour` (cloud on-demand, per device).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
NAME = HERE.name
OUT_DIR = out_dir(HERE)
CSV_NAME = "results.csv"
CAPACITY_NAME = "capacity.csv"
FIGURE_NAME = f"{NAME}.png"
FRONTIER_FIGURE = "capacity_per_dollar.png"
COLUMNS = ("deployment", "model", "system", "tp", "scheduler", "rate_rps", "requests", "ttft_p50_s", "ttft_p99_s",
           "tpot_p50_s", "tpot_p99_s", "requests_per_s", "output_tokens_per_s", "slo_attainment", "meets_slo",
           "preemptions", "kv_cache_utilization")
CAPACITY_COLUMNS = ("deployment", "model", "system", "device", "tp", "scheduler", "slo", "capacity_rps",
                    "ttft_p99_s", "tpot_p99_s", "output_tokens_per_s", "limited_by", "usd_per_device_hour",
                    "usd_per_hour", "requests_per_usd", "usd_per_million_output_tokens", "on_frontier",
                    "price_source", "price_date")


def shared_pricer_cache() -> Any:
    """A context manager under which every :class:`simulator.serving.iteration.IterationPricer` of the same
    model, system, plan, dtype, host time and options shares its bucket caches with the others: the
    bucket values are pure functions of those, so results are unchanged and a rate sweep prices each
    bucket once instead of once per run."""
    import contextlib

    import simulator.serving.iteration as iteration

    base = iteration.IterationPricer
    caches: dict[tuple[Any, ...], dict[str, dict[Any, Any]]] = {}

    class SharedPricer(base):  # type: ignore[misc, valid-type]
        def __init__(self, model: Any, system: Any, plan: Any, options: Any = None, **kw: Any) -> None:
            super().__init__(model, system, plan, options, **kw)
            key = (str(model), getattr(system, "name", str(system)), plan.tp, plan.pp, self.dtype, self.host_s,
                   repr(self.options))
            mine = caches.setdefault(key, {})
            for attr in ("_dense", "_head", "_attn", "_memo", "_segments"):
                setattr(self, attr, mine.setdefault(attr, {}))

    @contextlib.contextmanager
    def patched() -> Any:
        iteration.IterationPricer = SharedPricer
        try:
            yield
        finally:
            iteration.IterationPricer = base

    return patched()


def simulate(model: str, system: str, tp: int, cfg: dict[str, Any], **serve: Any) -> Any:
    """One :func:`simulator.serving.simulate_serving` run with the configuration's lengths, arrival window, seed
    and SLO; ``serve``: the other :class:`~simulator.serving.ServeConfig` fields."""
    from simulator.serving import ServeConfig, simulate_serving
    from workloads.parallel import ParallelPlan

    sc = ServeConfig(lengths=cfg["lengths"], duration_s=float(cfg["duration_s"]), seed=cfg["seed"], slo=tuple(cfg["slo"]), **serve)
    return simulate_serving(model, system, sc, ParallelPlan(tp=tp))


def _row(dep: dict[str, Any], scheduler: str, rate: float, s: dict[str, Any]) -> dict[str, Any]:
    return {"deployment": dep["name"], "model": dep["model"], "system": dep["system"], "tp": dep["tp"],
            "scheduler": scheduler, "rate_rps": float(rate), "requests": s["requests"],
            "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p50_s": s["tpot_s"]["p50"],
            "tpot_p99_s": s["tpot_s"]["p99"], "requests_per_s": s["requests_per_s"],
            "output_tokens_per_s": s["output_tokens_per_s"], "slo_attainment": s["slo_attainment"],
            "meets_slo": all(x["met"] for x in s["slo"]), "preemptions": s["preemptions"],
            "kv_cache_utilization": s["kv_cache_utilization"]}


def sweep(dep: dict[str, Any], scheduler: str, cfg: dict[str, Any], bar: Any) -> list[dict[str, Any]]:
    """The rows of one deployment and scheduler: the grid until ``stop_after_misses`` misses in a row, then
    the bisection between the capacity on the grid and the next rate."""
    def one(rate: float) -> dict[str, Any]:
        r = simulate(dep["model"], dep["system"], dep["tp"], cfg, arrival=f"poisson:qps={rate:g}", scheduler=scheduler)
        return _row(dep, scheduler, rate, r.summary)

    rows: list[dict[str, Any]] = []
    misses = 0
    for rate in dep["rates"]:
        rows.append(one(rate))
        bar.update(1)
        misses = 0 if rows[-1]["meets_slo"] else misses + 1
        if misses >= cfg["stop_after_misses"]:
            break
    ok, bad = _grid_capacity(rows)
    for _ in range(cfg["refine_steps"] if ok is not None and bad is not None else 0):
        mid = float(f"{(ok + bad) / 2:.4g}")
        rows.append(one(mid))
        ok, bad = (mid, bad) if rows[-1]["meets_slo"] else (ok, mid)
    return sorted(rows, key=lambda r: r["rate_rps"])


def _grid_capacity(rows: list[dict[str, Any]]) -> tuple[float | None, float | None]:
    """(highest rate meeting the SLO with every lower rate meeting it, the next rate or None)."""
    ok = None
    for r in sorted(rows, key=lambda r: r["rate_rps"]):
        if not r["meets_slo"]:
            return ok, r["rate_rps"]
        ok = r["rate_rps"]
    return ok, None


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (deployment, scheduler, rate)."""
    cases = [(d, s) for d in cfg["deployments"] for s in cfg["schedulers"]]
    bar = study_progress(sum(len(d["rates"]) for d, _ in cases), unit="run")
    rows: list[dict[str, Any]] = []
    with shared_pricer_cache():
        for dep, scheduler in cases:
            rows += sweep(dep, scheduler, cfg, bar)
    bar.close()
    return rows


def capacity(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Per deployment and scheduler: the capacity (highest rate meeting the SLO, every lower one meeting it),
    what stops the next rate (``limited_by``), the price of the deployment and the requests it serves per
    dollar; ``on_frontier``: no deployment of the same model serves more requests per second for no more
    dollars per hour (the Pareto front of capacity against price)."""
    from hwmodels.cost import load_prices, usd_per_hour
    from simulator.engines.analytical import spec_of
    from simulator.hardware import load_hardware

    prices = load_prices()
    out = []
    for dep in cfg["deployments"]:
        device = spec_of(load_hardware(dep["system"]))[0].name.lower()
        quote, entry = usd_per_hour(device, prices=prices), prices[device]
        for scheduler in cfg["schedulers"]:
            mine = sorted((r for r in rows if r["deployment"] == dep["name"] and r["scheduler"] == scheduler),
                          key=lambda r: r["rate_rps"])
            ok, bad = _grid_capacity(mine)
            at = next((r for r in mine if r["rate_rps"] == ok), None)
            nxt = next((r for r in mine if r["rate_rps"] == bad), None)
            hourly = quote.value * dep["tp"]
            cap = ok or 0.0
            out.append({
                "deployment": dep["name"], "model": dep["model"], "system": dep["system"], "device": device,
                "tp": dep["tp"], "scheduler": scheduler, "slo": " and ".join(cfg["slo"]), "capacity_rps": cap,
                "ttft_p99_s": at["ttft_p99_s"] if at else "", "tpot_p99_s": at["tpot_p99_s"] if at else "",
                "output_tokens_per_s": at["output_tokens_per_s"] if at else "",
                "limited_by": _why(nxt, cfg["slo"]) if nxt else "rates", "usd_per_device_hour": quote.value,
                "usd_per_hour": hourly, "requests_per_usd": cap * 3600.0 / hourly,
                "usd_per_million_output_tokens": hourly / 3600.0 / at["output_tokens_per_s"] * 1e6 if at else "",
                "on_frontier": False, "price_source": f"{quote.how}; {entry.source}", "price_date": entry.date,
            })
    for r, front in zip(out, frontier_flags(out), strict=True):
        r["on_frontier"] = front
    return out


def frontier_flags(rows: list[dict[str, Any]]) -> list[bool]:
    """Per row: on the Pareto front of capacity against price among the rows of its model (a positive
    capacity, and no other row of the model costs no more per hour and serves more, or as much for less)."""
    def beats(o: dict[str, Any], r: dict[str, Any]) -> bool:
        return (o["model"] == r["model"] and o["usd_per_hour"] <= r["usd_per_hour"]
                and o["capacity_rps"] >= r["capacity_rps"]
                and (o["usd_per_hour"], o["capacity_rps"]) != (r["usd_per_hour"], r["capacity_rps"]))

    return [r["capacity_rps"] > 0 and not any(beats(o, r) for o in rows) for r in rows]


def _why(row: dict[str, Any], slo: list[str]) -> str:
    """Which SLOs the first failing rate misses (``ttft``, ``tpot`` or both)."""
    from simulator.serving import parse_slo

    bad = []
    for text in slo:
        metric, stat, bound = parse_slo(text)
        if row.get(f"{metric}_{stat}_s", 0.0) > bound:
            bad.append(metric)
    return "+".join(bad) or "attainment"


def write_csv(rows: list[dict[str, Any]], out: Path, columns: tuple[str, ...] = COLUMNS) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, columns)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "lengths": "str", "duration_s": "num>0", "seed": "int>=0", "slo": "str[]",
    "schedulers": "{vllm|sarathi|orca|static}[]", "refine_steps": "int>=0", "stop_after_misses": "int>0",
    "deployments[].name": "str", "deployments[].model": "model", "deployments[].system": "system",
    "deployments[].tp": "int>0", "deployments[].curve": "bool", "deployments[].rates": "num>0[]",
}


def check_slo(cfg: dict[str, Any], where: Path) -> None:
    """Each SLO parses (:func:`simulator.serving.parse_slo`); a ValueError naming the file and the key."""
    from simulator.serving import parse_slo

    for i, text in enumerate(cfg["slo"]):
        try:
            parse_slo(text)
        except ValueError as exc:
            raise ValueError(f"{where}: slo[{i}]: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    from studies.serving_capacity.plot import plot_frontier, plot_load

    def compute(cfg: dict[str, Any], out: Path) -> str:
        rows = run(cfg)
        write_csv(rows, out / CSV_NAME)
        write_csv(capacity(rows, cfg), out / CAPACITY_NAME, CAPACITY_COLUMNS)
        return f"{len(rows)} rows -> {out / CSV_NAME}; capacity -> {out / CAPACITY_NAME}"

    def draw(cfg: dict[str, Any], out: Path, figures: Path) -> list[Path]:
        return [plot_load(out / CSV_NAME, figures / FIGURE_NAME, cfg),
                plot_frontier(out / CAPACITY_NAME, figures / FRONTIER_FIGURE, cfg)]

    def configure(cfg: dict[str, Any], args: Any) -> None:
        check_slo(cfg, args.config)

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0], compute=compute,
                      draw=draw, configure=configure, results="results.csv and capacity.csv")


if __name__ == "__main__":
    sys.exit(main())
