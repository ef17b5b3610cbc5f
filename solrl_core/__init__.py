"""solrl_core: the pure library behind solrl (no Prefect, no MLflow)."""

__version__ = "0.1.0"
