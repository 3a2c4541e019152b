"""Run the disaggregation study: goodput per GPU of colocated replicas and of prefill/decode pools on the
same GPUs, per prompt length and (TTFT, TPOT) SLO pair, and which wins.

Usage: ``python -m studies.disaggregation [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/disaggregation/run.py ...`` from anywhere. ``results.csv`` (one row per
prompt length, deployment, load and SLO pair), ``goodput.csv`` (one row per prompt length and SLO pair)
and ``disaggregation.png`` go to ``out/disaggregation/`` by default; the committed ones are refreshed with
``python -m studies.disaggregation --out studies/disaggregation --figures docs/figures``.

Each run is :func:`simulator.serving.simulate_serving` (stack: vLLM's framework profile) of Poisson
arrivals of fixed-length requests. A request meets an SLO pair when its own TTFT and TPOT meet both
bounds; goodput (DistServe, OSDI 2024, section 2) is the highest rate at which at least ``attainment`` of
the requests do, with every lower load of the grid meeting it too, interpolated linearly in attainment
between that load and the next one of the grid. A load counts only while the deployment keeps up:
``served_fraction`` (decode tokens produced in the second half of the arrival window over the decode tokens
of the requests that arrived in it) must be at least ``min_served_fraction``; a load that falls behind
counts as attainment 0. Without it a split whose decode pool is saturated would pass a loose TPOT bound on
a finite window: a request's wait for a decode slot is spread over its output tokens in TPOT.
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
GOODPUT_NAME = "goodput.csv"
FIGURE_NAME = f"{NAME}.png"
COLUMNS = ("prompt_len", "output_len", "deployment", "gpus", "load_tokens_per_s_per_gpu", "rate_rps", "requests",
           "ttft_slo_s", "tpot_slo_s", "attainment", "served_fraction", "ttft_p50_s", "ttft_p90_s", "ttft_p99_s", "tpot_p50_s",
           "tpot_p90_s", "tpot_p99_s", "requests_per_s")
GOODPUT_FIXED = ("prompt_len", "ttft_slo_s", "tpot_slo_s", "colocated_rps_per_gpu", "best_split",
                 "disaggregated_rps_per_gpu", "ratio", "winner")


def gpus(dep: dict[str, Any]) -> int:
    """GPUs of a deployment (one per replica: tp is the configuration's, every replica alike)."""
    return dep.get("replicas", 0) + dep.get("prefill", 0) + dep.get("decode", 0)


def _serve(dep: dict[str, Any]) -> dict[str, Any]:
    if "replicas" in dep:
        return {"replicas": dep["replicas"]}
    return {"disaggregate": f"prefill={dep['prefill']},decode={dep['decode']}"}


def _runs(cfg: dict[str, Any], dep: dict[str, Any], n_in: int, bar: Any) -> list[dict[str, Any]]:
    """The rows of one deployment and prompt length over the load grid (stopping after the misses)."""
    from simulator.serving import ServeConfig, simulate_serving
    from workloads.parallel import ParallelPlan

    n = gpus(dep) * cfg["tp"]
    pairs = [(a, b) for a in cfg["ttft_slos_s"] for b in cfg["tpot_slos_s"]]
    rows, misses = [], 0
    for load in cfg["loads_tokens_per_s_per_gpu"]:
        rate = float(f"{load * n / (n_in + cfg['output_len']):.6g}")
        sc = ServeConfig(arrival=f"poisson:qps={rate:g}", lengths=f"fixed:in={n_in},out={cfg['output_len']}",
                         scheduler=cfg["scheduler"], router=cfg["router"], duration_s=float(cfg["duration_s"]),
                         seed=cfg["seed"], **_serve(dep))
        res = simulate_serving(cfg["model"], cfg["system"], sc, ParallelPlan(tp=cfg["tp"]))
        bar.update(1)
        s = res.summary
        import numpy as np

        ttft = np.array([r.ttft_s for r in res.requests])
        tpot = np.array([r.tpot_s for r in res.requests])
        served = served_fraction(res, float(cfg["duration_s"]))
        met_any = False
        for a, b in pairs:
            att = float(((ttft <= a) & (tpot <= b)).mean())
            met_any |= att >= cfg["attainment"] and served >= cfg["min_served_fraction"]
            rows.append({"prompt_len": n_in, "output_len": cfg["output_len"], "deployment": dep["name"], "gpus": n,
                         "load_tokens_per_s_per_gpu": load, "rate_rps": rate, "requests": s["requests"],
                         "ttft_slo_s": a, "tpot_slo_s": b, "attainment": att, "served_fraction": served,
                         **{f"{m}_{p}_s": s[f"{m}_s"][p] for m in ("ttft", "tpot") for p in ("p50", "p90", "p99")},
                         "requests_per_s": s["requests_per_s"]})
        misses = 0 if met_any else misses + 1
        if misses >= cfg["stop_after_misses"]:
            break
    return rows


def served_fraction(res: Any, window_s: float) -> float:
    """Decode tokens the deployment produced in the second half of the arrival window ``[w/2, w]`` over the
    decode tokens (output tokens after the first) of the requests that arrived in it: about 1 while it keeps
    up (the lag of one request's service shifts both sides alike), below 1 when a queue grows."""
    lo, hi = window_s / 2, window_s
    made = 0.0
    for it in res.iterations:
        decode = it.steps * (it.tokens - it.prefill_tokens)
        span = it.end_s - it.start_s
        overlap = max(0.0, min(hi, it.end_s) - max(lo, it.start_s))
        made += decode * (overlap / span if span > 0 else float(lo <= it.start_s < hi))
    due = sum(r.output_len - 1 for r in res.requests if lo <= r.arrival_s < hi)
    return made / due if due else 1.0


def run(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (prompt length, deployment, load, SLO pair)."""
    from studies.serving_capacity.run import shared_pricer_cache

    cases = [(dep, n_in) for n_in in cfg["prompt_lens"] for dep in cfg["deployments"]]
    bar = study_progress(len(cases) * len(cfg["loads_tokens_per_s_per_gpu"]), unit="run")
    rows: list[dict[str, Any]] = []
    with shared_pricer_cache():
        for dep, n_in in cases:
            rows += _runs(cfg, dep, n_in, bar)
    bar.close()
    return rows


def goodput_of(rows: list[dict[str, Any]], threshold: float, min_served: float = 0.0) -> float:
    """Goodput (requests/s per GPU) of one deployment, prompt length and SLO pair from its rows over the load
    grid: the highest rate whose attainment, and every lower rate's, is at least ``threshold``,
    interpolated linearly in attainment towards the next rate; 0 when the lowest rate misses. A row whose
    ``served_fraction`` is below ``min_served`` counts as attainment 0."""
    rows = sorted(({**r, "attainment": r["attainment"] if r.get("served_fraction", 1.0) >= min_served else 0.0}
                   for r in rows), key=lambda r: r["rate_rps"])
    last = None
    for r in rows:
        if r["attainment"] < threshold:
            if last is None:
                return 0.0
            w = (last["attainment"] - threshold) / (last["attainment"] - r["attainment"])
            return (last["rate_rps"] + w * (r["rate_rps"] - last["rate_rps"])) / r["gpus"]
        last = r
    return last["rate_rps"] / last["gpus"] if last else 0.0


def goodput(rows: list[dict[str, Any]], cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """Per prompt length and SLO pair: each deployment's goodput per GPU, the best disaggregated split, its
    ratio to the colocated goodput and the winner (``colocated``, ``disaggregated``, ``tie`` within 2%,
    or ``neither`` when no deployment meets the SLO at the lowest load)."""
    names = [d["name"] for d in cfg["deployments"]]
    split = [d["name"] for d in cfg["deployments"] if "replicas" not in d]
    colo = next(d["name"] for d in cfg["deployments"] if "replicas" in d)
    out = []
    for n_in in cfg["prompt_lens"]:
        for a in cfg["ttft_slos_s"]:
            for b in cfg["tpot_slos_s"]:
                g = {n: goodput_of([r for r in rows if r["prompt_len"] == n_in and r["deployment"] == n
                                    and r["ttft_slo_s"] == a and r["tpot_slo_s"] == b], cfg["attainment"],
                                    cfg["min_served_fraction"]) for n in names}
                best = max(split, key=lambda n: (g[n], -split.index(n)))
                c, d = g[colo], g[best]
                ratio = d / c if c > 0 else (float("inf") if d > 0 else float("nan"))
                winner = ("neither" if c == d == 0 else "tie" if c > 0 and abs(ratio - 1) <= 0.02
                          else "disaggregated" if d > c else "colocated")
                out.append({"prompt_len": n_in, "ttft_slo_s": a, "tpot_slo_s": b, "colocated_rps_per_gpu": c,
                            "best_split": best, "disaggregated_rps_per_gpu": d, "ratio": ratio, "winner": winner,
                            **{f"goodput_{n}": g[n] for n in names}})
    return out


def goodput_columns(cfg: dict[str, Any]) -> tuple[str, ...]:
    return GOODPUT_FIXED + tuple(f"goodput_{d['name']}" for d in cfg["deployments"])


def write_csv(rows: list[dict[str, Any]], out: Path, columns: tuple[str, ...] = COLUMNS) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits), creating its folder."""
    write_rows(rows, out, columns)


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "model": "model", "system": "system", "tp": "int>0", "scheduler": "{vllm|sarathi|orca|static}",
    "router": "{round-robin|least-loaded}", "output_len": "int>0", "prompt_lens": "int>0[]", "duration_s": "num>0",
    "seed": "int>=0", "loads_tokens_per_s_per_gpu": "num>0[]", "stop_after_misses": "int>0", "attainment": "num>0",
    "min_served_fraction": "num>0",
    "ttft_slos_s": "num>0[]", "tpot_slos_s": "num>0[]", "deployments[].name": "str",
    "?deployments[].replicas": "int>0", "?deployments[].prefill": "int>0", "?deployments[].decode": "int>0",
}


def check_deployments(cfg: dict[str, Any], where: Path) -> None:
    """One colocated deployment (``replicas``) and splits (``prefill`` and ``decode``), all on as many GPUs,
    and an attainment at most 1; a ValueError naming the file and the key otherwise."""
    if cfg["attainment"] > 1:
        raise ValueError(f"{where}: attainment: got {cfg['attainment']!r}; expected a fraction in (0, 1]")
    deps = cfg["deployments"]
    for i, d in enumerate(deps):
        if ("replicas" in d) == ("prefill" in d or "decode" in d) or ("replicas" not in d and not
                                                                      {"prefill", "decode"} <= set(d)):
            raise ValueError(f"{where}: deployments[{i}]: got keys {sorted(d)}; expected replicas, or prefill and decode")
        if gpus(d) != gpus(deps[0]):
            raise ValueError(f"{where}: deployments[{i}]: {gpus(d)} GPUs; got {gpus(d)}; expected {gpus(deps[0])} "
                             f"like deployments[0] (the same GPUs for every deployment)")
    if sum("replicas" in d for d in deps) != 1:
        raise ValueError(f"{where}: deployments: got {sum('replicas' in d for d in deps)} colocated deployments; "
                         "expected exactly one (with replicas)")


def main(argv: list[str] | None = None) -> int:
    from studies.disaggregation.plot import plot

    def compute(cfg: dict[str, Any], out: Path) -> str:
        rows = run(cfg)
        write_csv(rows, out / CSV_NAME)
        write_csv(goodput(rows, cfg), out / GOODPUT_NAME, goodput_columns(cfg))
        return f"{len(rows)} rows -> {out / CSV_NAME}; goodput -> {out / GOODPUT_NAME}"

    def draw(cfg: dict[str, Any], out: Path, figures: Path) -> list[Path]:
        return [plot(out / GOODPUT_NAME, figures / FIGURE_NAME, cfg)]

    def configure(cfg: dict[str, Any], args: Any) -> None:
        check_deployments(cfg, args.config)

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0], compute=compute,
                      draw=draw, configure=configure, results="results.csv and goodput.csv")


if __name__ == "__main__":
    sys.exit(main())
