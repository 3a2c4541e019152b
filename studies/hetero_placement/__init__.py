"""Heterogeneous placement study: what a 128x128 systolic-array card adds to an H100 (speedup, energy)."""
