"""Real-time and heterogeneous nodes (reserved): periodic task scenarios with deadlines,
contention-aware scheduling in the discrete-event engine, and partitioning of a graph over devices."""
