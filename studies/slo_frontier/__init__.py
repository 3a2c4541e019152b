"""SLO-frontier study: batch size versus TTFT/TPOT service-level objectives for Llama-2-7B serving on
several GPUs (``python -m studies.slo_frontier [--reduced] [--out DIR]``)."""
