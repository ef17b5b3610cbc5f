"""The `solrl` command line: main.py parses it and owns the process's signals; commands/ holds one module per
command group."""
