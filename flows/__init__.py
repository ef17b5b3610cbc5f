"""Prefect flows (one RL iteration, the training loop, a single stage) and the `solrl` command line."""
