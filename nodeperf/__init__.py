"""nodeperf: predict latency, energy and memory of deep-learning work on accelerator nodes."""
