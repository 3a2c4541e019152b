"""Cycle-stepped systolic-array simulator (operands move one PE per cycle) used to check the closed forms.

Small arrays only (it steps every cycle of every fold in Python). Each fold runs the full-array
schedule: partial tiles are padded with bubbles, which occupy pipeline slots like data but cause
no SRAM access and no MAC. Folds are visited column fold outermost, as in SCALE-Sim.

- Output stationary: row ``i`` of the ifmap tile enters the left edge skewed by ``i`` cycles and
  moves right; column ``j`` of the filter tile enters the top edge skewed by ``j`` and moves down;
  each PE accumulates its own output. The fold ends with the last MAC slot at the far corner;
  results leave through a drain path in the shadow of the next fold.
- Weight / input stationary: the stationary tile is shifted down into the array over ``rows``
  cycles (bottom row first); the streaming operand then enters the left edge skewed by row and
  moves right, partial sums enter the top edge skewed by column and move down, accumulating, and
  leave the bottom edge into the ofmap SRAM. Partial sums of later row folds are read back and
  added. The fold ends when the last partial-sum slot leaves the array.

SRAM accesses are the valid words crossing the array edge (reads) and leaving it (writes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class ReferenceRun:
    """What the stepped simulation measured."""

    output: np.ndarray
    fold_lengths: list[int] = field(default_factory=list)
    fold_preload: list[int] = field(default_factory=list)
    fold_macs: list[int] = field(default_factory=list)
    fold_active_pes: list[int] = field(default_factory=list)
    ifmap_reads: int = 0
    filter_reads: int = 0
    ofmap_writes: int = 0
    ofmap_reads: int = 0

    @property
    def cycles(self) -> int:
        """Cycles of the whole layer (count, not index)."""
        return sum(self.fold_lengths)

    @property
    def folds(self) -> int:
        return len(self.fold_lengths)


def _os_fold(a: np.ndarray, b: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, int, int, np.ndarray, int, int]:
    """One output-stationary fold of ``a (ur x K) @ b (K x uc)`` on a rows x cols array."""
    ur, k = a.shape
    uc = b.shape[1]
    h_val = np.zeros((rows, cols), dtype=np.int64)
    h_ok = np.zeros((rows, cols), dtype=bool)
    h_slot = np.zeros((rows, cols), dtype=bool)
    v_val = np.zeros((rows, cols), dtype=np.int64)
    v_ok = np.zeros((rows, cols), dtype=bool)
    v_slot = np.zeros((rows, cols), dtype=bool)
    acc = np.zeros((rows, cols), dtype=np.int64)
    macs = np.zeros((rows, cols), dtype=np.int64)
    reads_a = reads_b = 0
    last_slot_cycle = -1
    cycle = 0
    ii = np.arange(rows)
    jj = np.arange(cols)
    while True:
        ta = cycle - ii  # stream index entering row i
        tb = cycle - jj  # stream index entering column j
        inject_a = (ta >= 0) & (ta < k)
        inject_b = (tb >= 0) & (tb < k)
        if not (inject_a.any() or inject_b.any() or h_slot.any() or v_slot.any()):
            break
        # shift right / down by one PE
        for arr in (h_val, h_ok, h_slot):
            arr[:, 1:] = arr[:, :-1].copy()
        for arr in (v_val, v_ok, v_slot):
            arr[1:, :] = arr[:-1, :].copy()
        a_valid = inject_a & (ii < ur)
        b_valid = inject_b & (jj < uc)
        h_slot[:, 0] = inject_a
        h_ok[:, 0] = a_valid
        h_val[:, 0] = 0
        h_val[a_valid, 0] = a[ii[a_valid], ta[a_valid]]
        v_slot[0, :] = inject_b
        v_ok[0, :] = b_valid
        v_val[0, :] = 0
        v_val[0, b_valid] = b[tb[b_valid], jj[b_valid]]
        reads_a += int(a_valid.sum())
        reads_b += int(b_valid.sum())
        fire = h_ok & v_ok
        acc[fire] += h_val[fire] * v_val[fire]
        macs[fire] += 1
        if (h_slot & v_slot).any():
            last_slot_cycle = cycle
        cycle += 1
    return acc[:ur, :uc].copy(), last_slot_cycle + 1, int(macs.sum()), macs, reads_a, reads_b


def _stationary_fold(
    tile: np.ndarray, stream: np.ndarray, rows: int, cols: int
) -> tuple[np.ndarray, int, int, np.ndarray, int, int]:
    """One ws/is fold: ``tile (ur x uc)`` held in the PEs, ``stream (T x ur)`` flowing right.

    Returns the ``T x uc`` partial sums, the fold length, MACs, per-PE MACs, stationary reads and
    streaming reads.
    """
    ur, uc = tile.shape
    t_len = stream.shape[0]
    # Preload: shift the stationary tile down, bottom row first, over `rows` cycles.
    w_val = np.zeros((rows, cols), dtype=np.int64)
    w_ok = np.zeros((rows, cols), dtype=bool)
    reads_tile = 0
    for c in range(rows):
        src = rows - 1 - c
        w_val[1:, :] = w_val[:-1, :].copy()
        w_ok[1:, :] = w_ok[:-1, :].copy()
        w_val[0, :] = 0
        w_ok[0, :] = False
        if src < ur:
            w_val[0, :uc] = tile[src]
            w_ok[0, :uc] = True
            reads_tile += uc
    assert np.array_equal(w_val[:ur, :uc], tile)
    preload = rows
    # Streaming.
    x_val = np.zeros((rows, cols), dtype=np.int64)
    x_ok = np.zeros((rows, cols), dtype=bool)
    x_slot = np.zeros((rows, cols), dtype=bool)
    p_val = np.zeros((rows, cols), dtype=np.int64)
    p_slot = np.zeros((rows, cols), dtype=bool)
    p_t = np.full((rows, cols), -1, dtype=np.int64)
    macs = np.zeros((rows, cols), dtype=np.int64)
    out = np.zeros((t_len, uc), dtype=np.int64)
    reads_stream = 0
    last_exit = -1
    ii = np.arange(rows)
    jj = np.arange(cols)
    cycle = 0
    while True:
        tx = cycle - ii
        tp = cycle - jj
        inject_x = (tx >= 0) & (tx < t_len)
        inject_p = (tp >= 0) & (tp < t_len)
        if not (inject_x.any() or inject_p.any() or x_slot.any() or p_slot.any()):
            break
        for arr in (x_val, x_ok, x_slot):
            arr[:, 1:] = arr[:, :-1].copy()
        for arr in (p_val, p_slot, p_t):
            arr[1:, :] = arr[:-1, :].copy()
        x_valid = inject_x & (ii < ur)
        x_slot[:, 0] = inject_x
        x_ok[:, 0] = x_valid
        x_val[:, 0] = 0
        x_val[x_valid, 0] = stream[tx[x_valid], ii[x_valid]]
        reads_stream += int(x_valid.sum())
        p_slot[0, :] = inject_p
        p_val[0, :] = 0
        p_t[0, :] = np.where(inject_p, tp, -1)
        fire = x_ok & w_ok & p_slot
        p_val[fire] += x_val[fire] * w_val[fire]
        macs[fire] += 1
        # the bottom row's partial sums leave the array this cycle
        leaving = p_slot[rows - 1, :]
        if leaving.any():
            last_exit = cycle
            for j in np.nonzero(leaving)[0]:
                if j < uc:
                    out[p_t[rows - 1, j], j] = p_val[rows - 1, j]
            p_slot[rows - 1, :] = False
        cycle += 1
    return out, preload + last_exit + 1, int(macs.sum()), macs, reads_tile, reads_stream


def simulate(rows: int, cols: int, dataflow: str, a: np.ndarray, b: np.ndarray) -> ReferenceRun:
    """Step ``O = a @ b`` (``a``: M x K ifmap, ``b``: K x N filter) through a rows x cols array."""
    m, k = a.shape
    k2, n = b.shape
    assert k == k2
    run = ReferenceRun(output=np.zeros((m, n), dtype=np.int64))
    if dataflow == "os":
        for c0 in range(0, n, cols):
            for r0 in range(0, m, rows):
                at = a[r0 : r0 + rows, :]
                bt = b[:, c0 : c0 + cols]
                acc, length, macs, pe_macs, ra, rb = _os_fold(at, bt, rows, cols)
                run.output[r0 : r0 + rows, c0 : c0 + cols] = acc
                run.ofmap_writes += acc.size
                run.ifmap_reads += ra
                run.filter_reads += rb
                run.fold_lengths.append(length)
                run.fold_preload.append(0)
                run.fold_macs.append(macs)
                run.fold_active_pes.append(int((pe_macs > 0).sum()))
        return run
    if dataflow == "ws":
        # spatial rows: K blocks, spatial cols: N blocks, time: M
        for c0 in range(0, n, cols):
            for r0 in range(0, k, rows):
                tile = b[r0 : r0 + rows, c0 : c0 + cols]
                stream = a[:, r0 : r0 + rows]
                psum, length, macs, pe_macs, rt, rs = _stationary_fold(tile, stream, rows, cols)
                if r0 > 0:
                    run.ofmap_reads += psum.size
                run.output[:, c0 : c0 + cols] += psum
                run.ofmap_writes += psum.size
                run.filter_reads += rt
                run.ifmap_reads += rs
                run.fold_lengths.append(length)
                run.fold_preload.append(rows)
                run.fold_macs.append(macs)
                run.fold_active_pes.append(int((pe_macs > 0).sum()))
        return run
    if dataflow == "is":
        # spatial rows: K blocks, spatial cols: M blocks, time: N
        for c0 in range(0, m, cols):
            for r0 in range(0, k, rows):
                tile = a[c0 : c0 + cols, r0 : r0 + rows].T
                stream = b[r0 : r0 + rows, :].T
                psum, length, macs, pe_macs, rt, rs = _stationary_fold(tile, stream, rows, cols)
                if r0 > 0:
                    run.ofmap_reads += psum.size
                run.output[c0 : c0 + cols, :] += psum.T
                run.ofmap_writes += psum.size
                run.ifmap_reads += rt
                run.filter_reads += rs
                run.fold_lengths.append(length)
                run.fold_preload.append(rows)
                run.fold_macs.append(macs)
                run.fold_active_pes.append(int((pe_macs > 0).sum()))
        return run
    raise ValueError(f"unknown dataflow {dataflow!r}")
