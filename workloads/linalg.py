"""Dense linear-algebra op kinds beyond GEMM: Cholesky, QR, SVD, symmetric eigendecomposition, inverse p-th roots.

Registered in the semantics registry on import (``workloads/__init__`` imports this module). Every kind
takes one real matrix ``A`` of shape ``(..., m, n)`` (leading dimensions are a batch of independent
problems) in fp32 or fp64, the dtypes of LAPACK, cuSOLVER and MAGMA; any other dtype is refused with a
located error.

FLOP counts are the leading-order counts of the algorithms the libraries run, from Golub & Van Loan,
*Matrix Computations*, 4th ed. (Johns Hopkins, 2013) ("GvL"), lower-order terms omitted as GvL does
(``k = min(m, n)``; per matrix, times the batch):

===========================  =====================================================  ======================
kind (attrs)                 FLOPs                                                  source
===========================  =====================================================  ======================
cholesky                     n^3/3                                                  GvL s.4.2.5 (Alg. 4.2.1)
qr (mode="r")                4(mnk - (m+n)k^2/2 + k^3/3) = 2mn^2 - 2n^3/3 (m>=n)    GvL s.5.2.2 (Alg. 5.2.1)
qr (mode="reduced")          + thin Q (m x k) by backward accumulation 2mk^2-2k^3/3  GvL s.5.1.6
qr (mode="complete")         + full Q (m x m): 4(m^2k - mk^2 + k^3/3)               GvL s.5.1.6
eigh (vectors=False)         4n^3/3 (Householder tridiagonalisation)                GvL s.8.3.1
eigh (vectors=True)          4n^3/3 + 4n^3/3 (divide and conquer, no deflation)     GvL s.8.3.1; Demmel,
                             + 2n^3 (back-transformation by the reflectors)         *Applied Numerical
                                                                                    Linear Algebra* s.5.3.3
svd (vectors="none")         4mn^2 - 4n^3/3 (m >= n; Golub-Kahan bidiagonalisation)  GvL s.8.6.3 table
svd (vectors="reduced")      14mn^2 + 8n^3 (U1 m x n, V)                            GvL s.8.6.3 table
svd (vectors="full")         4m^2n + 8mn^2 + 9n^3 (U m x m, V)                      GvL s.8.6.3 table
matrix_inverse_root (eigh)   eigh with vectors + n^2 (scale) + 2n^3 (Q D Q^T)       Shampoo (Gupta et al.
                                                                                    2018) s.4
matrix_inverse_root (newton) iterations x ((p+1) 2n^3 + 2n^2)                       Guo & Higham, SIMAX 28
                                                                                    (2006) eq. 3.4-3.5;
                                                                                    Anil et al. 2020 s.3
triangular_solve             n^2 r (n x n triangle, r right-hand sides)              GvL s.3.1 (Alg. 3.1.3)
===========================  =====================================================  ======================

``svd`` counts the Golub-Reinsch algorithm (the table's first column); an ``m < n`` problem is counted
as the SVD of ``A^T``. The O(n^2) work of the tridiagonal/bidiagonal QR iterations is not counted (as
GvL); the cost models still charge its sequential sweeps.

Every kind also takes ``every`` (default 1): the op is computed once every ``every`` steps and stands
for its per-step share (FLOPs, bytes and time divided by ``every``), as a second-order optimizer
refreshes its preconditioners (see :mod:`workloads.second_order`).
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

from workloads.dtypes import DType
from workloads.ir import GraphError, Op, TensorSpec
from workloads.semantics import register

__all__ = [
    "LINALG_KINDS",
    "LINALG_DTYPES",
    "QR_MODES",
    "SVD_VECTORS",
    "ROOT_METHODS",
    "linalg_dims",
    "cholesky_flops",
    "qr_flops",
    "orgqr_flops",
    "eigh_flops",
    "svd_flops",
    "inverse_root_flops",
    "every_of",
]

LINALG_KINDS: tuple[str, ...] = ("cholesky", "qr", "svd", "eigh", "matrix_inverse_root", "triangular_solve")
#: dtypes the dense solvers run in (LAPACK s/d routines, cuSOLVER, MAGMA)
LINALG_DTYPES: tuple[str, ...] = ("fp32", "fp64")
QR_MODES: tuple[str, ...] = ("reduced", "complete", "r")
SVD_VECTORS: tuple[str, ...] = ("none", "reduced", "full")
ROOT_METHODS: tuple[str, ...] = ("eigh", "newton")


# ------------------------------------------------------------------------------------------------
# FLOP counts (per matrix; exact rationals of the leading-order formulas, rounded to the nearest integer)


def _round(x: Fraction) -> int:
    return int(x + Fraction(1, 2))


def cholesky_flops(n: int) -> int:
    """``n^3/3``: Cholesky of an ``n x n`` SPD matrix (GvL 4th ed. s.4.2.5)."""
    return _round(Fraction(n**3, 3))


def qr_flops(m: int, n: int) -> int:
    """Householder QR (R and the reflectors) of ``m x n``: ``4 (m n k - (m+n) k^2/2 + k^3/3)``, ``k = min(m, n)``.

    For ``m >= n`` this is GvL's ``2 n^2 (m - n/3)`` (4th ed. s.5.2.2): the j-th reflector is applied to
    the trailing ``(m-j) x (n-j)`` block at 4 FLOPs per element, summed over j to leading order.
    """
    k = min(m, n)
    return _round(4 * (Fraction(m * n * k) - Fraction((m + n) * k * k, 2) + Fraction(k**3, 3)))


def orgqr_flops(m: int, cols: int, k: int) -> int:
    """Forming the first ``cols`` columns of ``Q`` (``m x cols``) from ``k`` reflectors by backward accumulation:
    ``4 (m cols k - (m + cols) k^2/2 + k^3/3)``; ``cols = m`` gives GvL's ``4 (m^2 k - m k^2 + k^3/3)`` (s.5.1.6)."""
    return _round(4 * (Fraction(m * cols * k) - Fraction((m + cols) * k * k, 2) + Fraction(k**3, 3)))


def eigh_flops(n: int, vectors: bool) -> int:
    """Symmetric eigendecomposition: ``4n^3/3`` for the eigenvalues (tridiagonalisation, GvL s.8.3.1);
    with eigenvectors, divide and conquer adds ``4n^3/3`` (its merges without deflation; Demmel s.5.3.3)
    and the back-transformation ``2n^3`` (``14n^3/3`` in all)."""
    f = Fraction(4 * n**3, 3)
    if vectors:
        f += Fraction(4 * n**3, 3) + 2 * n**3
    return _round(f)


def svd_flops(m: int, n: int, vectors: str) -> int:
    """Golub-Reinsch SVD of ``m x n`` (GvL 4th ed. s.8.6.3 table; ``m < n`` counted as ``A^T``)."""
    if m < n:
        m, n = n, m
    if vectors == "none":
        return _round(4 * m * n * n - Fraction(4 * n**3, 3))
    if vectors == "reduced":
        return 14 * m * n * n + 8 * n**3
    return 4 * m * m * n + 8 * m * n * n + 9 * n**3


def inverse_root_flops(n: int, method: str, p: int, iterations: int) -> int:
    """``A^(-1/p)`` of an ``n x n`` SPD matrix: by eigendecomposition (eigh with vectors, scale the
    eigenvector columns, one product ``Q D Q^T``) or by ``iterations`` coupled Newton steps, each
    ``p + 1`` products (``X T`` and ``T^p M``) and the ``n^2`` update ``T = ((p+1) I - M)/p``."""
    if method == "eigh":
        return eigh_flops(n, True) + n * n + 2 * n**3
    return iterations * ((p + 1) * 2 * n**3 + 2 * n * n)


# ------------------------------------------------------------------------------------------------
# attributes and shapes


def every_of(attrs: Any) -> int:
    """The ``every`` attribute (steps per computation; default 1)."""
    return int(attrs.get("every", 1))


def _bool(attrs: Any, key: str, default: bool) -> bool:
    v = attrs.get(key, default)
    if not isinstance(v, bool | int) or v not in (0, 1):
        raise GraphError(f"attribute {key}; got {v!r}; expected true or false")
    return bool(v)


def _choice(attrs: Any, key: str, default: str, choices: tuple[str, ...]) -> str:
    v = attrs.get(key, default)
    if v not in choices:
        from nodeperf.suggest import did_you_mean

        raise GraphError(f"attribute {key}; got {v!r}; expected one of {', '.join(choices)}"
                         f"{did_you_mean(str(v), choices)}")
    return str(v)


def _posint(attrs: Any, key: str, default: int | None) -> int:
    v = attrs.get(key, default)
    if v is None:
        raise GraphError(f"attribute {key}: missing; got nothing; expected a positive integer {key}=..")
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise GraphError(f"attribute {key}; got {v!r}; expected a positive integer")
    return int(v)


def _matrix(inputs: tuple[TensorSpec, ...], attrs: Any, *, square: bool, count: int = 1) -> tuple[tuple[int, ...], int, int]:
    """(batch shape, m, n) of the one input matrix; GraphError on a bad count, rank, size or dtype."""
    if len(inputs) != count:
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected {count}")
    a = inputs[0]
    if len(a.shape) < 2:
        raise GraphError(f"input {a.name!r} is not a matrix; got shape {a.shape}; expected (..., m, n)")
    if a.dtype.value not in LINALG_DTYPES:
        raise GraphError(f"input {a.name!r} dtype; got {a.dtype.value!r}; expected fp32 or fp64 "
                         "(the dtypes of LAPACK/cuSOLVER solvers; choose one with --dtype)")
    m, n = a.shape[-2], a.shape[-1]
    if min(a.shape) < 1:
        raise GraphError(f"input {a.name!r} has an empty dimension; got shape {a.shape}; expected sizes >= 1")
    if square and m != n:
        raise GraphError(f"input {a.name!r} is not square; got shape {a.shape}; expected (..., n, n)")
    _posint(attrs, "every", 1)
    return tuple(a.shape[:-2]), m, n


def _infer_cholesky(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    batch, n, _ = _matrix(inputs, attrs, square=True)
    return [((*batch, n, n), inputs[0].dtype)]


def _infer_qr(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    batch, m, n = _matrix(inputs, attrs, square=False)
    mode = _choice(attrs, "mode", "reduced", QR_MODES)
    k = min(m, n)
    dt = inputs[0].dtype
    if mode == "r":
        return [((*batch, k, n), dt)]
    if mode == "reduced":
        return [((*batch, m, k), dt), ((*batch, k, n), dt)]
    return [((*batch, m, m), dt), ((*batch, m, n), dt)]


def _infer_svd(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    batch, m, n = _matrix(inputs, attrs, square=False)
    vec = _choice(attrs, "vectors", "reduced", SVD_VECTORS)
    k = min(m, n)
    dt = inputs[0].dtype
    s = ((*batch, k), dt)
    if vec == "none":
        return [s]
    if vec == "reduced":
        return [((*batch, m, k), dt), s, ((*batch, k, n), dt)]
    return [((*batch, m, m), dt), s, ((*batch, n, n), dt)]


def _infer_eigh(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    batch, n, _ = _matrix(inputs, attrs, square=True)
    vectors = _bool(attrs, "vectors", True)
    dt = inputs[0].dtype
    return [((*batch, n), dt)] + ([((*batch, n, n), dt)] if vectors else [])


def _root_attrs(attrs: Any) -> tuple[str, int, int]:
    method = _choice(attrs, "method", "eigh", ROOT_METHODS)
    p = _posint(attrs, "p", None)
    iters = _posint(attrs, "iterations", None) if method == "newton" else 0
    if method == "eigh" and attrs.get("iterations") is not None:
        raise GraphError(f"attribute iterations; got {attrs.get('iterations')!r} with method 'eigh'; expected "
                         "iterations only with method 'newton'")
    return method, p, iters


def _infer_root(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    batch, n, _ = _matrix(inputs, attrs, square=True)
    _root_attrs(attrs)
    return [((*batch, n, n), inputs[0].dtype)]


def _infer_trsm(inputs: tuple[TensorSpec, ...], attrs: Any) -> list[tuple[tuple[int, ...], DType | None]]:
    if len(inputs) != 2:
        raise GraphError(f"wrong number of inputs; got {len(inputs)}; expected 2 (triangle (..., n, n), rhs (..., n, r))")
    batch, n, _ = _matrix(inputs[:1], attrs, square=True)
    b = inputs[1]
    if len(b.shape) < 2 or b.shape[-2] != n or tuple(b.shape[:-2]) != batch or b.dtype != inputs[0].dtype:
        raise GraphError(f"right-hand side {b.name!r}; got shape {b.shape} ({b.dtype.value}); expected "
                         f"{(*batch, n, 'r')} in {inputs[0].dtype.value}")
    _bool(attrs, "lower", True)
    return [(b.shape, b.dtype)]


def linalg_dims(op: Op) -> tuple[int, int, int]:
    """(batch, m, n) of a linear-algebra op's matrix (``batch``: product of the leading dimensions)."""
    a = op.inputs[0]
    batch = 1
    for d in a.shape[:-2]:
        batch *= d
    return batch, a.shape[-2], a.shape[-1]


def _per_matrix_flops(op: Op) -> int:
    _, m, n = linalg_dims(op)
    a = op.attrs
    if op.kind == "cholesky":
        return cholesky_flops(n)
    if op.kind == "qr":
        mode = a.get("mode", "reduced")
        f = qr_flops(m, n)
        k = min(m, n)
        if mode == "reduced":
            f += orgqr_flops(m, k, k)
        elif mode == "complete":
            f += orgqr_flops(m, m, k)
        return f
    if op.kind == "svd":
        return svd_flops(m, n, a.get("vectors", "reduced"))
    if op.kind == "eigh":
        return eigh_flops(n, bool(a.get("vectors", True)))
    if op.kind == "matrix_inverse_root":
        method, p, iters = _root_attrs(a)
        return inverse_root_flops(n, method, p, iters)
    if op.kind == "triangular_solve":
        return n * n * op.inputs[1].shape[-1]
    raise GraphError(f"op {op.name!r}: not a linear-algebra kind; got {op.kind!r}")  # pragma: no cover


def _flops(op: Op) -> int:
    batch, _, _ = linalg_dims(op)
    return _round(Fraction(batch * _per_matrix_flops(op), every_of(op.attrs)))


def _macs(op: Op) -> int:
    return _flops(op) // 2


def _bytes(op: Op) -> tuple[int, int]:
    e = every_of(op.attrs)
    return (sum(t.nbytes for t in op.inputs) // e, sum(t.nbytes for t in op.outputs) // e)


def _zero(op: Op) -> int:
    return 0


_DOCS: dict[str, str] = {
    "cholesky": "A (..., n, n) SPD -> L (..., n, n); attrs every",
    "qr": "A (..., m, n) -> Q, R (mode reduced: (m,k),(k,n); complete: (m,m),(m,n); r: R (k,n) only); attrs mode, every",
    "svd": "A (..., m, n) -> [U,] S (..., k)[, Vh] (vectors none | reduced: U (m,k), Vh (k,n) | full: U (m,m), "
           "Vh (n,n)); attrs vectors, every",
    "eigh": "A (..., n, n) symmetric -> W (..., n)[, V (..., n, n)]; attrs vectors (default true), every",
    "matrix_inverse_root": "A (..., n, n) SPD -> A^(-1/p); attrs p, method (eigh | newton), iterations (newton), every",
    "triangular_solve": "T (..., n, n) triangular, B (..., n, r) -> T^-1 B; attrs lower, every",
}
_INFER: dict[str, Callable[..., Any]] = {
    "cholesky": _infer_cholesky, "qr": _infer_qr, "svd": _infer_svd, "eigh": _infer_eigh,
    "matrix_inverse_root": _infer_root, "triangular_solve": _infer_trsm,
}

for _k in LINALG_KINDS:
    register(_k, "linalg", _INFER[_k], _flops, macs=_macs, bytes_rw=_bytes, params=_zero, doc=_DOCS[_k])
