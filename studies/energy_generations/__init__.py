"""Energy-generations study: energy per inference and per token across GPU and TPU generations
(``python -m studies.energy_generations [--reduced] [--out DIR]``)."""
