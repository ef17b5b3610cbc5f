"""The `solrl` commands, one module per command group, each with `register(sub)`."""
