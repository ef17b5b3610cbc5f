"""solrl_core/models."""
