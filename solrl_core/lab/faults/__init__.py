"""The fault catalogue: damage a run or feed a bad input, run what a user would run, and say how it ended.

catalogue.py  the cases, as data (what to break, which command to run, what is due)
damage.py     the faults themselves (truncate, delete, flip, interrupted runs, bad files, files turned into
              directories, links or FIFOs, edited JSON, an MLflow store or run taken away)
procs.py      one command in its own session, signals, and the processes it left behind
outcome.py    the classifier, the repair named by an error, and the comparison with the reference run
runner.py     the reference run, one case end to end, report.md / report.json

Entry point: `python -m solrl.flows.lab.faults` (flows/lab/faults.py).
"""
