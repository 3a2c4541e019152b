"""Design-space exploration (reserved): experiment files, execution on a local pool or Dask, the
resumable results store, and tuning under constraints, built on the vectorised component models."""
