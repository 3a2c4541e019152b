"""Training at scale: time and cost to pre-train a 70B and a 405B model to its token budget on 512-16,384
H100s, B200s and TPU v5p chips, the best plan of every point found by ``nodeperf tune``."""
