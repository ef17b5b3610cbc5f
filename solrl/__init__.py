"""solrl's one import name. The repository's top folders install beneath it: flows/ as `solrl.flows` (the Prefect
flows), tasks/ as `solrl.tasks` (the Prefect tasks), configs/ as `solrl.configs` (the packaged configs), and solrl/cli
(the `solrl` command line) lives here; solrl_core/, the library, keeps its own unambiguous name. A user's own `flows`,
`tasks` or `configs` package therefore neither shadows solrl nor is shadowed by it (setup.py maps the folders)."""
