"""The `solrl` commands, one module per command group; each exposes `register(sub)` (solrl/cli/main.py lists them)."""
