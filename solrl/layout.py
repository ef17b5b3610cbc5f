"""Which top folders of the checkout install beneath the one import name: flows/ as solrl.flows, tasks/ as
solrl.tasks, configs/ as solrl.configs. setup.py reads this file (without importing solrl) to map the folders; the
tests read it to know the packages and to lay a checkout copy out as the install does."""

UNDER_SOLRL = ("flows", "tasks", "configs")
