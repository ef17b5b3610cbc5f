"""solrl_core/run."""
