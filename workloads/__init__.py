"""What is computed: the operator-graph IR, its semantics, the model zoo and importers (leaf package)."""

# the semantics registry installs itself into the IR (workloads.ir cannot import it: see there);
# workloads.linalg imports it and registers the dense linear-algebra kinds (cholesky, qr, svd, eigh, ...)
import workloads.linalg as _linalg  # noqa: E402,F401
import workloads.semantics as _semantics  # noqa: E402,F401
