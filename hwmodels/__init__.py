"""Numeric hardware specifications and component models (leaf package: knows nothing of graphs)."""
