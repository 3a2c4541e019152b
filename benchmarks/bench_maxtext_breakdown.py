"""Where each predicted MaxText step goes (simulator/parallel/maxtext_breakdown.py), row by row.

Run ``python benchmarks/bench_maxtext_breakdown.py [ROW_ID ...]`` from the repository root (every MaxText row
of hwmodels/measurements/published_training.csv by default). Columns: tokens per chip; measured and predicted
step (s) and the error; the device's compute time and its shares (GEMMs on the MXUs, attention kernels, other
ops, tensor-parallel collectives inside the layers); every FSDP all-gather and gradient reduction of the step
over the compute (``fsdp/c``); the exposed part of them and the exposed host offload (% of compute); the
measured time the prediction lacks even with every one of those collectives serial with compute (``rest``, %
of compute; ``StepBreakdown.beyond_collectives_s``); the recomputed forward (``rcmp``, % of compute), the
optimizer update of the chip's shard (``opt``, ms), the gradient all-reduce across replicated FSDP groups (several
slices: the data-centre network) and its exposed part (``dcn``, ``dcnx``, ms); what the hidden FSDP collectives cost
the compute beside them, their HBM traffic (``hbm``, ms) and the reduce-scatters' additions on the vector unit
(``vpu``, ms); and the wall time of the whole table.

``python benchmarks/bench_maxtext_breakdown.py --pair ROW_A ROW_B`` prints, after the two rows, their split into a
factor on the predicted GEMM time and a time both steps lack (``precision_pair_split``; e.g. the bf16 and AQT int8
GPT-3 175B rows on v6e-256, ``--pair train-126 train-127``).

``python benchmarks/bench_maxtext_breakdown.py --exposure [ROW_ID ...]`` prints each row's error in its own metric
(MFU: predicted over measured MFU; step time: predicted over measured step; minus 1, in %) as predicted, and
as it would be with the step's gradient reductions serial with compute, with them serial at twice their time (an
all-reduce and a dynamic slice in place of each reduce-scatter), and with every FSDP collective serial; then the
group means (MAPE and bias) of those columns over the TPU families. Readings to compare against the rows' flags,
not a model: docs/training.md, "What the 2023 scripts' XLA flags say about the exposed collectives".

``python benchmarks/bench_maxtext_breakdown.py --slices`` pairs every multi-slice MaxText row with the one-slice
row of the same workload (same model, slice type, per-device batch, sequence, recompute and software) and prints
what the added slices cost (``slice_loss``): the job's TPU hosts (``TpuSlice.hosts``), the measured loss, per
scanned layer, the predicted cross-slice
all-reduce (``dcn``) and the same all-reduce at the one measured TPU DCN rate (fabrics.dcn-v6e's achieved fraction,
0.329 of the NIC share, where the fabric assumes more), fully serial (``bound``), and the loss that bound leaves
(``left``; negative: the all-reduce cannot be serial at that rate). docs/tpu.md, "Several slices: the data-centre
network's bandwidth bounded".
"""

from __future__ import annotations

import logging
import sys
import time


def main(ids: list[str]) -> None:
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown
    from simulator.parallel.training_validation import load_training_rows

    logging.disable(logging.WARNING)  # the unsharded graph's "does not fit" notes
    rows = [r for r in load_training_rows() if r["framework"].startswith("MaxText") and (not ids or r.id in ids)]
    print(f"{'row':<10} {'system':<17} {'tok/chip':>8} {'meas s':>8} {'pred s':>8} {'err':>7} {'compute':>8} "
          f"{'gemm':>5} {'attn':>5} {'other':>5} {'tp':>5} {'fsdp/c':>6} {'exp':>5} {'offl':>5} {'rest':>6} "
          f"{'rcmp':>5} {'opt':>5} {'dcn':>6} {'dcnx':>5} {'hbm':>5} {'vpu':>4}")
    t0 = time.perf_counter()
    for row in rows:
        b = maxtext_step_breakdown(row)
        c = b.compute_s
        err = f"{100 * b.step_error:+6.1f}%" if b.step_error is not None else "      -"
        rest = f"{100 * b.beyond_collectives_s / c:+6.1f}" if b.beyond_collectives_s is not None else "     -"
        meas = f"{b.measured_step_s:8.2f}" if b.measured_step_s else "       -"
        print(f"{b.row_id:<10} {b.system:<17} {b.tokens_per_chip:8.0f} {meas} {b.predicted_step_s:8.2f} {err} "
              f"{c:8.2f} {100 * b.gemm_s / c:5.1f} {100 * b.attention_s / c:5.1f} {100 * b.other_s / c:5.1f} "
              f"{100 * b.tp_comm_s / c:5.1f} {100 * b.fsdp_ratio:6.1f} {100 * b.exposed_s / c:5.1f} "
              f"{100 * b.offload_exposed_s / c:5.1f} {rest} {100 * b.recompute_s / c:5.1f} "
              f"{1e3 * b.optimizer_s:5.1f} {1e3 * b.replicas_reduce_s:6.1f} {1e3 * b.replicas_exposed_s:5.1f} "
              f"{1e3 * b.hbm_contention_s:5.0f} {1e3 * b.vpu_reduce_s:4.0f}")
    print(f"{len(rows)} rows in {time.perf_counter() - t0:.1f} s")


def pair(id_a: str, id_b: str) -> None:
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown, precision_pair_split
    from simulator.parallel.training_validation import load_training_rows

    logging.disable(logging.WARNING)
    rows = {r.id: r for r in load_training_rows() if r.id in (id_a, id_b)}
    a, b = (maxtext_step_breakdown(rows[i]) for i in (id_a, id_b))
    split = precision_pair_split(a, b)
    for x in (a, b):
        print(f"{x.row_id}: measured {x.measured_step_s:.2f} s, predicted {x.predicted_step_s:.2f} s, "
              f"of which GEMMs {x.gemm_s:.2f} s")
    print(f"GEMM factor {split.gemm_factor:.3f}; missing from both {split.common_missing_s:.2f} s")


_PAIR_KEYS = ("model", "system", "framework_version", "microbatch", "seq", "recompute", "tp", "fp8", "metric")


def _dcn_rate_ratio(system: str) -> float:
    """The fabric's achieved DCN fraction over the one measured one (fabrics.dcn-v6e), at least 1."""
    from hwmodels.collectives import fabric_catalog
    from simulator.hardware import load_hardware

    cat = fabric_catalog()
    inter = cat.system(load_hardware(system).collectives).inter
    return max(1.0, inter.bandwidth_fraction / cat.fabric("dcn-v6e").bandwidth_fraction)


def slices(ids: list[str]) -> None:
    """Print each multi-slice MaxText row's loss against its one-slice row (:func:`slice_loss`)."""
    from hwmodels.catalog import parse_tpu_slice
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown, slice_loss
    from simulator.parallel.training_validation import load_training_rows
    from workloads.zoo.transformer import zoo_config

    logging.disable(logging.WARNING)
    rows = [r for r in load_training_rows() if r["framework"].startswith("MaxText")]
    ones = {tuple(r[k] for k in _PAIR_KEYS): r for r in rows if (r["dcn_slices"] or "1") == "1"}
    print(f"{'row':<10} {'one':<10} {'system':<16} {'s':>3} {'hosts':>5} {'layers':>6} {'loss s':>7} {'ms/lay':>7} "
          f"{'dcn s':>6} {'bound':>6} {'left s':>7}")
    for row in rows:
        s = int(row["dcn_slices"] or 1)
        one = ones.get(tuple(row[k] for k in _PAIR_KEYS))
        if s < 2 or one is None or (ids and row.id not in ids):
            continue
        multi = maxtext_step_breakdown(row)
        x = slice_loss(multi, maxtext_step_breakdown(one), s, zoo_config(row["model"]).layers,
                       _dcn_rate_ratio(multi.system))
        print(f"{x.row_id:<10} {x.base_id:<10} {multi.system:<16} {s:3d} {parse_tpu_slice(multi.system).hosts:5d} "
              f"{x.layers:6d} {x.loss_s:7.2f} "
              f"{1e3 * x.per_layer_s:7.1f} {x.dcn_reduce_s:6.3f} {x.dcn_bound_s:6.3f} {x.unexplained_s:+7.2f}")


#: the readings ``--exposure`` prints: the FSDP collective time each reading exposes, from a
#: :class:`StepBreakdown`; what the prediction already exposes is not added twice
_READINGS = (("as predicted", lambda b: 0.0),
             ("grad reductions serial", lambda b: b.grad_reduce_s),
             ("as all-reduce, serial", lambda b: 2.0 * b.grad_reduce_s),
             ("every FSDP coll. serial", lambda b: b.fsdp_gather_s + b.grad_reduce_s))


def _reading_errors(row, b) -> list[float]:
    """The row's error (%) in its own metric under each of :data:`_READINGS`."""
    out = []
    for _, extra in _READINGS:
        step = b.predicted_step_s + max(0.0, extra(b) - b.exposed_s) if extra(b) else b.predicted_step_s
        ratio = b.measured_step_s / step if row["metric"].strip() == "mfu" else step / b.measured_step_s
        out.append(100.0 * (ratio - 1.0))
    return out


def exposure(ids: list[str]) -> None:
    """Print every MaxText row's error under each reading of :data:`_READINGS`, then the family means."""
    from simulator.parallel.maxtext_breakdown import maxtext_step_breakdown
    from simulator.parallel.training_validation import family_of, load_training_rows, recipe_of

    logging.disable(logging.WARNING)
    rows = [r for r in load_training_rows() if r["framework"].startswith("MaxText") and (not ids or r.id in ids)]
    print(f"{'row':<10} {'system':<17} " + " ".join(f"{name:>24}" for name, _ in _READINGS))
    groups: dict[str, list[list[float]]] = {}
    for row in rows:
        b = maxtext_step_breakdown(row)
        if not b.measured_step_s:
            continue
        errs = _reading_errors(row, b)
        groups.setdefault(f"{family_of(row)} x {recipe_of(row)}", []).append(errs)
        print(f"{b.row_id:<10} {b.system:<17} " + " ".join(f"{e:+24.1f}" for e in errs))
    for name, errs in groups.items():
        cols = list(zip(*errs, strict=True))
        print(f"{name:<28} n={len(errs):<3}" + " ".join(
            f"{sum(map(abs, c)) / len(c):14.1f} ({sum(c) / len(c):+6.1f})" for c in cols))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--exposure"]:
        exposure(sys.argv[2:])
    elif sys.argv[1:2] == ["--slices"]:
        slices(sys.argv[2:])
    elif sys.argv[1:2] == ["--pair"] and len(sys.argv) == 4:
        pair(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1:])
