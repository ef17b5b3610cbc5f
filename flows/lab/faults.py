"""The fault catalogue (solrl_core/lab/faults): `python -m solrl.flows.lab.faults [--out DIR] [--only PATTERN]`.

Starts one Prefect server on loopback for all the commands it runs (as `make server` does; one case runs without
it), builds the reference run, tries every case and writes <out>/report.md and report.json. Prints the counts;
exits 1 when a case did not end as due (a clean one-line error, or a success equal to the reference).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

from solrl.flows.servers import HOST, start_prefect
from solrl_core.lab.faults import procs, run_catalogue

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "configs" / "tiny.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def command_env(out: Path) -> dict[str, str]:
    """The environment of every command: this checkout first on the path, quiet logs, no telemetry."""
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "MLFLOW_TRACKING_URI")}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
               PREFECT_HOME=str(out / "prefect"), PREFECT_LOGGING_LEVEL="WARNING", DO_NOT_TRACK="1",
               PREFECT_SERVER_ANALYTICS_ENABLED="false", OMP_WAIT_POLICY="PASSIVE")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl.flows.lab.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="runs/faults", help="output folder (default runs/faults)")
    parser.add_argument("--only", help="comma-separated names, kinds (input, damage, force, signal) or globs")
    parser.add_argument("--config", default=str(TINY), help="the config the reference run extends")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per command (default 300)")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at the same time (default 1)")
    parser.add_argument("--reuse-reference", action="store_true",
                        help="keep <out>/reference when it is complete (same config)")
    args = parser.parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    cases = run_catalogue.select_cases(args.only)
    if not cases:
        sys.exit(f"faults: no case matches {args.only!r}")
    env = command_env(out)
    port = free_port()
    log = out / "prefect-server.log"
    server = start_prefect({**env, "PREFECT_HOME": str(out / "prefect-server")}, port, log, ROOT)
    if server is None:
        sys.exit(f"faults: the Prefect server did not start; see {log}")
    env["PREFECT_API_URL"] = f"http://{HOST}:{port}/api"
    ctx = run_catalogue.Context(out=out, base_config=Path(args.config), env=env, cwd=ROOT, timeout_s=args.timeout,
                         dead_url=f"http://{HOST}:{free_port()}")
    given = argv if argv is not None else sys.argv[1:]
    command = " ".join(["python -m solrl.flows.lab.faults", *(shlex.quote(a) for a in given)])

    def stop(signum, _frame):
        procs.kill_running()
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        report = run_catalogue.run_catalogue(ctx, cases, command, reuse_reference=args.reuse_reference,
                                      jobs=args.jobs)
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
    print(run_catalogue.summary_text(report["summary"]))
    print(f"report: {out / 'report.md'}")
    counts = report["summary"]
    return 0 if counts["clean"] + counts["ok"] == counts["tried"] else 1


if __name__ == "__main__":
    sys.exit(main())
