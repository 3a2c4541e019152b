"""What is computed: the operator-graph IR, its semantics, the model zoo and importers (leaf package).

Importing the package registers the per-kind op semantics with the IR (:func:`workloads.ir.register_semantics`:
the IR is the registry's foundation, so it cannot import it) and the dense linear-algebra kinds
(:mod:`workloads.linalg`: cholesky, qr, svd, eigh, ...) with the semantics registry.
"""

from workloads import ir as _ir
from workloads import linalg as _linalg  # noqa: F401  (registers its kinds with workloads.semantics)
from workloads import semantics as _semantics

_ir.register_semantics(_semantics.semantics_of, _semantics.check_op)
