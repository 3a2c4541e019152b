"""Where each predicted MaxText step goes (simulator/parallel/maxtext_breakdown.py), row by row.

Run ``python benchmarks/bench_maxtext_breakdown.py [ROW_ID ...]`` from the repository root (every MaxText row
of hwmodels/measurements/published_training.csv by default). Columns: tokens per chip; measured and predicted
step (s) and the error; the device's compute time and its shares (GEMMs on the MXUs, attention kernels, other
ops, tensor-parallel collectives inside the layers); every FSDP all-gather and gradient reduction of the step
over the compute (``fsdp/c``); the exposed part of them and the exposed host offload (% of compute); the
measured time the prediction lacks even with every one of those collectives serial with compute (``rest``, %
of compute; ``StepBreakdown.beyond_collectives_s``); and the wall time of the whole table.

``python benchmarks/bench_maxtext_breakdown.py --pair ROW_A ROW_B`` prints, after the two rows, their split into a
factor on the predicted GEMM time and a time both steps lack (``precision_pair_split``; e.g. the bf16 and AQT int8
GPT-3 175B rows on v6e-256, ``--pair train-126 train-127``).
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
          f"{'gemm':>5} {'attn':>5} {'other':>5} {'tp':>5} {'fsdp/c':>6} {'exp':>5} {'offl':>5} {'rest':>6}")
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
              f"{100 * b.offload_exposed_s / c:5.1f} {rest}")
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


if __name__ == "__main__":
    if sys.argv[1:2] == ["--pair"] and len(sys.argv) == 4:
        pair(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1:])
