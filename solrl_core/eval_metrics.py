"""The names and the arithmetic of what a held-out evaluation reports (`metrics.json` "metrics", MLflow `eval/*`)."""

from __future__ import annotations

import numpy as np

TOTAL_KEY = "reward"  # the weighted total of the evaluation rewards (the trained-on ones unless eval.rewards is set)
GOLD_KEY = "gold"  # the gold evaluator's mean (eval.gold)
GAP_KEY = "gold_gap"  # TOTAL_KEY - GOLD_KEY


def evaluation_metrics(total: np.ndarray, per: dict[str, np.ndarray], gold: str | None) -> dict[str, float]:
    """The means an evaluation reports: the weighted total, each reward, and with a gold evaluator its mean and the gap
    total - gold (positive and growing: the reward trained on has moved away from the gold one)."""
    metrics = {TOTAL_KEY: float(np.mean(total)), **{name: float(np.mean(values)) for name, values in per.items()}}
    if gold is not None:
        metrics[GOLD_KEY] = float(np.mean(per[gold]))
        metrics[GAP_KEY] = metrics[TOTAL_KEY] - metrics[GOLD_KEY]
    return metrics


def seed_blocks(total: np.ndarray, per: dict[str, np.ndarray], gold: str | None, seeds_per_prompt: int
                ) -> dict[str, list[float]]:
    """The evaluation cut into `seeds_per_prompt` blocks, block j holding every prompt's j-th seed (the samples are
    prompt-major, `evaluate.eval_inputs`): per block the mean of the total and of the gold reward. Their spread is
    the evaluation's own noise: sd(block means) / sqrt(blocks) is the standard error of its mean (the benchmark
    reports it)."""
    def blocks(values: np.ndarray) -> list[float]:
        return [float(v) for v in np.asarray(values, dtype=np.float64).reshape(-1, seeds_per_prompt).mean(axis=0)]

    out = {TOTAL_KEY: blocks(total)}
    if gold is not None:
        out[GOLD_KEY] = blocks(per[gold])
    return out
