"""Run the parallelism study: GPT-3 175B training plans over 64-1024 GPUs, and Llama-2-70B requests
versus tensor parallelism, written as two CSVs.

Usage: ``python -m studies.parallelism [--reduced] [--out DIR] [--figures DIR] [--plot-only]`` from the
repository root, or ``python studies/parallelism/run.py ...`` from anywhere. It writes ``training.csv``,
``inference.csv`` and their figures ``training.png`` and ``inference.png`` into ``out/parallelism/`` under
the repository root by default (``out/`` is not tracked); the committed ones are refreshed with
``python -m studies.parallelism --out studies/parallelism`` (about two minutes).

Training grid: every (GPU kind, GPU count N, tp, pp) of the configuration is one row, with
``dp = N / (tp * pp)``. A cell that is not a plan (``tp * pp`` larger than N) or a plan the model
rejects (:class:`~workloads.parallel.PlanError`, e.g. a dp that does not divide the global batch)
is kept as a row with empty numbers and the reason in ``note``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if not __package__:  # run as a file, from any folder: the repository root holds the packages
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from studies._cli import out_dir, study_main, study_progress, write_rows  # noqa: E402

HERE = Path(__file__).resolve().parent
#: Where runs write unless ``--out`` says otherwise (``/out/`` is git-ignored).
OUT_DIR = out_dir(HERE)
TRAINING_CSV = "training.csv"
INFERENCE_CSV = "inference.csv"
TRAINING_COLUMNS = (
    "model", "dtype", "seq", "global_batch", "microbatch", "recompute", "device", "system", "n_gpus", "tp", "pp", "dp", "sequence_parallel", "microbatches", "iteration_time_s",
    "mfu", "compute_share", "communication_share", "bubble_share", "optimizer_share", "dp_sync_exposed_share",
    "memory_per_device_bytes", "memory_capacity_bytes", "fits_in_memory", "note")
INFERENCE_COLUMNS = (
    "model", "dtype", "device", "system", "tp", "batch", "input_len", "output_len", "ttft_s", "tpot_s", "e2e_latency_s",
    "output_tokens_per_s", "memory_per_device_bytes", "memory_capacity_bytes", "fits_in_memory", "note")


def _system_name(family: str, n_gpus: int, per_node: int) -> str:
    if n_gpus % per_node:
        raise ValueError(f"config: gpus: {n_gpus} is not a whole number of {per_node}-GPU {family} nodes")
    return f"{family}x{n_gpus // per_node}"


def run_training(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (GPU kind, GPU count, tp, pp): a training iteration of ``cfg['model']``."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import evaluate_plan
    from workloads.parallel import ParallelPlan, PlanError

    bar = study_progress(len(cfg["systems"]) * len(cfg["gpus"]) * len(cfg["tp"]) * len(cfg["pp"]), unit="plan")
    rows = []
    for family in cfg["systems"]:
        per_node = load_hardware(family).count
        for n in cfg["gpus"]:
            system = load_hardware(_system_name(family, n, per_node))
            for tp in cfg["tp"]:
                for pp in cfg["pp"]:
                    row: dict[str, Any] = dict.fromkeys(TRAINING_COLUMNS)
                    sp = bool(cfg["sequence_parallel"]) and tp > 1
                    row.update(model=cfg["model"], dtype=cfg["dtype"], seq=cfg["seq"], global_batch=cfg["global_batch"],
                               microbatch=cfg["microbatch"], recompute=cfg["recompute"], device=system.device.name,
                               system=system.name, n_gpus=n, tp=tp, pp=pp, sequence_parallel=sp, note="")
                    rows.append(row)
                    bar.update(1)
                    if n % (tp * pp):
                        row["note"] = f"not a plan: tp x pp = {tp * pp} does not divide {n} GPUs (dp {n / (tp * pp):g})"
                        continue
                    dp = n // (tp * pp)
                    row["dp"] = dp
                    try:
                        plan = ParallelPlan(tp=tp, pp=pp, dp=dp, microbatch=cfg["microbatch"],
                                            global_batch=cfg["global_batch"], sequence_parallel=sp,
                                            zero_stage=cfg["zero_stage"])
                        r = evaluate_plan(cfg["model"], system, plan, train=True, seq=cfg["seq"], dtype=cfg["dtype"],
                                          recompute=cfg["recompute"])
                    except PlanError as exc:
                        row["note"] = str(exc)
                        continue
                    t, b = r.latency_s, r.breakdown
                    row.update(
                        microbatches=plan.microbatches, iteration_time_s=t, mfu=r.mfu,
                        compute_share=b["compute_s"] / t, communication_share=b["communication_s"] / t,
                        bubble_share=b["bubble_s"] / t, optimizer_share=b["optimizer_s"] / t,
                        dp_sync_exposed_share=b.get("dp_sync_exposed_s", 0.0) / t,
                        memory_per_device_bytes=r.memory_per_device_bytes,
                        memory_capacity_bytes=r.memory_capacity_bytes, fits_in_memory=r.fits_in_memory)
    bar.close()
    return rows


def run_inference(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (system, tp, batch): a whole generation request of ``cfg['model']``."""
    from simulator.hardware import load_hardware
    from simulator.parallel.compose import generate_request
    from workloads.parallel import ParallelPlan, PlanError

    bar = study_progress(len(cfg["systems"]) * len(cfg["tp"]) * len(cfg["batches"]), unit="request")
    rows = []
    for name in cfg["systems"]:
        system = load_hardware(name)
        for tp in cfg["tp"]:
            for batch in cfg["batches"]:
                row: dict[str, Any] = dict.fromkeys(INFERENCE_COLUMNS)
                row.update(model=cfg["model"], dtype=cfg["dtype"], device=system.device.name, system=system.name, tp=tp,
                           batch=batch,
                           input_len=cfg["input_len"], output_len=cfg["output_len"], note="")
                rows.append(row)
                bar.update(1)
                try:
                    g = generate_request(cfg["model"], system, ParallelPlan(tp=tp), input_len=cfg["input_len"],
                                         output_len=cfg["output_len"], batch=batch, dtype=cfg["dtype"])
                except PlanError as exc:
                    row["note"] = str(exc)
                    continue
                row.update(ttft_s=g.extra["ttft_s"], tpot_s=g.extra["tpot_s"], e2e_latency_s=g.extra["e2e_latency_s"],
                           output_tokens_per_s=g.extra["output_tokens_per_s"],
                           memory_per_device_bytes=g.memory_per_device_bytes,
                           memory_capacity_bytes=g.memory_capacity_bytes, fits_in_memory=g.fits_in_memory)
    bar.close()
    return rows


def run(cfg: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Both questions: ``{"training": rows, "inference": rows}``."""
    return {"training": run_training(cfg["training"]), "inference": run_inference(cfg["inference"])}


def write_csv(rows: list[dict[str, Any]], out: Path, columns: tuple[str, ...]) -> None:
    """Write ``rows`` to ``out`` (floats to 6 significant digits, missing numbers empty), creating its folder."""
    write_rows(rows, out, columns)


def write_all(results: dict[str, list[dict[str, Any]]], folder: Path) -> tuple[Path, Path]:
    """Write both CSVs into ``folder``; returns their paths (training, inference)."""
    paths = folder / TRAINING_CSV, folder / INFERENCE_CSV
    write_csv(results["training"], paths[0], TRAINING_COLUMNS)
    write_csv(results["inference"], paths[1], INFERENCE_COLUMNS)
    return paths


#: The configuration's keys, checked before any work (studies._cli.Schema).
SCHEMA = {
    "training.model": "model", "training.dtype": "dtype", "training.seq": "int>0",
    "training.global_batch": "int>0", "training.microbatch": "int>0", "training.recompute": "recompute",
    "training.sequence_parallel": "bool", "training.zero_stage": "int>=0", "training.systems": "system[]",
    "training.gpus": "int>0[]", "training.tp": "int>0[]", "training.pp": "int>0[]",
    "inference.model": "model", "inference.dtype": "dtype", "inference.systems": "system[]",
    "inference.tp": "int>0[]", "inference.batches": "int>0[]", "inference.input_len": "int>0",
    "inference.output_len": "int>0",
}


def main(argv: list[str] | None = None) -> int:
    from studies.parallelism.plot import plot

    def compute(cfg: dict[str, Any], out: Path) -> str:
        results = run(cfg)
        paths = write_all(results, out)
        return "; ".join(f"{len(results[k])} rows -> {p}" for k, p in zip(("training", "inference"), paths, strict=True))

    return study_main(argv, schema=SCHEMA, here=HERE, description=__doc__.splitlines()[0], compute=compute,
                      draw=lambda _cfg, out, figs: list(plot(out, figs)), results=f"{TRAINING_CSV} and {INFERENCE_CSV}")


if __name__ == "__main__":
    sys.exit(main())
