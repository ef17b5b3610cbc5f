"""solrl_core/lab."""
