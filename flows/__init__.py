"""Prefect flows: one RL iteration, the training loop, a single stage, evaluation, deployments, and the servers."""
