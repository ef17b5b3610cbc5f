"""The `solrl` commands, one module per command group; each exposes `register(sub)` (flows/cli.py lists them)."""
