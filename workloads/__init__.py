"""What is computed: the operator-graph IR, its semantics, the model zoo and importers (leaf package)."""
