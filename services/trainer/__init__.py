"""Trainer service: the DeepSpeed engine, the cascade losses (sft, grpo, mopd, bt), checkpoints and
published weights (DESIGN.md sections 1 and 3)."""
