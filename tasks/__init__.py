"""Thin Prefect tasks, one module per stage; each calls solrl_core's stage function on the run directory."""
