"""tfmr-lab: train, compare and understand small Transformer language models."""
