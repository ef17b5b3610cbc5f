"""What Prefect's orchestration costs per iteration on this machine and API server, without any stage's compute.

    python -m solrl.flows.lab.prefect_latency [--subflows 20] [--tasks N] [--top-level]

A parent flow (as `solrl train`'s training flow) runs `--subflows` empty iteration-shaped subflows, each with
`--tasks` no-op tasks (as the iteration flow's stages), against the Prefect API a training run would use (the
configured PREFECT_API_URL, or the same temporary server). With `--top-level` the same flows run one after another
as top-level flow runs, with no parent: what an iteration would cost if it were not nested in the training flow
(no tracking task in the parent, no lookup of an earlier run of it). Printed: each flow run's wall time (median,
90th percentile, the slowest) with how many of the runs Prefect recorded under a parent flow run, and the median
of the API round trips one flow run makes (create, Running, Completed, read). A run far slower than the rest is
usually a request the server answered 503 (SQLite busy under concurrent writes) that Prefect's client retried after
its back-off of about 2 s. A figure, not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import statistics
import time

from solrl_core.run.stage_table import STAGES


def _ms(seconds: list[float]) -> dict[str, float]:
    ordered = sorted(seconds)
    return {"median": 1000 * statistics.median(ordered),
            "p90": 1000 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))],
            "max": 1000 * ordered[-1]}


def measure(subflows: int, tasks: int, top_level: bool = False) -> dict[str, dict[str, float]]:
    """Seconds of each empty subflow (`subflow`; each a top-level flow run with `top_level`) and of each API call
    kind, as milliseconds summaries; `subflow` also counts the runs that Prefect nested in a parent flow run
    (`nested`). Needs the Prefect API ready (solrl.flows.prefect_server)."""
    from prefect import flow, task
    from prefect.cache_policies import NO_CACHE
    from prefect.client.orchestration import get_client
    from prefect.context import FlowRunContext
    from prefect.states import Completed, Pending, Running

    @task(name="no-op", cache_policy=NO_CACHE, persist_result=False)  # as tasks/stage_task.py
    def no_op(i: int) -> int:
        return i

    @flow(name="solrl-latency-iteration", flow_run_name="latency-{index}")
    def iteration(index: int) -> bool:
        for k in range(tasks):
            no_op(k)
        return FlowRunContext.get().flow_run.parent_task_run_id is not None  # nested in a parent flow run

    def one_by_one() -> dict[str, float]:
        seconds, nested = [], 0
        for index in range(subflows):
            start = time.perf_counter()
            nested += iteration(index)
            seconds.append(time.perf_counter() - start)
        return {**_ms(seconds), "nested": nested}

    result = {"subflow": one_by_one() if top_level else flow(name="solrl-latency")(one_by_one)()}
    calls: dict[str, list[float]] = {"create": [], "running": [], "completed": [], "read": []}
    with get_client(sync_client=True) as client:
        for _ in range(subflows):
            start = time.perf_counter()
            run = client.create_flow_run(iteration, state=Pending())
            calls["create"].append(time.perf_counter() - start)
            for name, state in (("running", Running()), ("completed", Completed())):
                start = time.perf_counter()
                client.set_flow_run_state(run.id, state)
                calls[name].append(time.perf_counter() - start)
            start = time.perf_counter()
            client.read_flow_run(run.id)
            calls["read"].append(time.perf_counter() - start)
    result.update({name: _ms(values) for name, values in calls.items()})
    return result


def report(result: dict[str, dict[str, float]], subflows: int, tasks: int) -> str:
    sub = result["subflow"]
    api = ", ".join(f"{name} {result[name]['median']:.0f}" for name in ("create", "running", "completed", "read"))
    what = "subflow" if sub["nested"] else "top-level flow run"
    return "\n".join([
        f"empty {what} with {tasks} no-op task(s), {subflows} times: median {sub['median']:.0f} ms, "
        f"90th percentile {sub['p90']:.0f} ms, slowest {sub['max']:.0f} ms ({sub['nested']} of {subflows} nested "
        "in a parent flow run)",
        f"API round trips (median ms): {api}",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m solrl.flows.lab.prefect_latency", description=__doc__.split("\n\n")[0])
    parser.add_argument("--subflows", type=int, default=20, help="empty subflows to time (default 20)")
    parser.add_argument("--tasks", type=int, default=len(STAGES),
                        help=f"no-op tasks in each (default {len(STAGES)}: the iteration's stages)")
    parser.add_argument("--top-level", action="store_true",
                        help="run them as top-level flow runs instead of subflows of one parent flow")
    args = parser.parse_args(argv)
    if args.subflows < 1 or args.tasks < 0:
        parser.error("--subflows must be at least 1 and --tasks at least 0")
    from solrl.flows.prefect_server import client_env, prefect_api

    client_env()
    with prefect_api().ready():
        print(report(measure(args.subflows, args.tasks, args.top_level), args.subflows, args.tasks))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
