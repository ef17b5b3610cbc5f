"""Run the catalogue: one reference run, then each case on its own copy of it, then report.md and report.json.

A case: copy the reference run, apply the faults, snapshot the run's files, run the user's command (own session,
time limit, signal when the case says), classify it (outcome.first_outcome), then follow up where the case asks:
apply the repair the error names, or the second command, resume with `solrl train`, and compare the final checkpoint
and evaluation with the reference's (outcome.differences).
"""

from __future__ import annotations

import fnmatch
import json
import shlex
import shutil
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from pathlib import Path

from solrl_core.lab.faults import damage, outcome, procs
from solrl_core.lab.faults.catalogue import CASES, LAST, TRAIN, Case
from solrl_core.wording import plural

ITERATIONS = LAST + 1
CLOSED_PIPE_EXIT = 128 + signal.SIGPIPE  # solrl's quiet exit when its stdout's reader went away (solrl/cli/main.py)
SMALL_DISK_FREE_KB = 512  # less than one iteration writes at the reference's size (~1.5 MB; no merged weights since #27)
COUNTS = (("tried", "cases tried"), ("clean", "clean errors"), ("ok", "expected successes"),
          ("traceback", "tracebacks"), ("silent", "silent successes"), ("lost", "data lost"),
          ("orphan", "processes left"), ("hang", "hangs"), ("unclear", "unclear errors"),
          ("unrepaired", "not repaired"))


@dataclass
class Context:
    out: Path  # everything goes here: config.yaml, reference/, cases/<name>/, report.md, report.json
    base_config: Path  # the sized config the reference run extends (tests/configs/tiny.yaml)
    env: dict[str, str]  # environment of every command (a case may change it)
    cwd: Path  # where `python -m solrl` is importable from
    timeout_s: float = 300.0
    dead_url: str = "http://127.0.0.1:9"
    say: callable = field(default=lambda line: print(line, file=sys.stderr, flush=True))

    @property
    def config(self) -> Path:
        return self.out / "config.yaml"

    @property
    def reference(self) -> Path:
        return self.out / "reference"


def solrl(args) -> list[str]:
    return [sys.executable, "-m", "solrl", *args]


def _fill(args, values: dict[str, str]) -> list[str]:
    return [arg.format(**values) for arg in args]


# ---- the reference run ----------------------------------------------------------------------------------------
def _reference_done(ctx: Context) -> bool:
    ref = ctx.reference
    return (ref / f"iter_{LAST:04d}" / "manifests" / "update.json").is_file() and \
        (ref / "eval" / f"step_{ITERATIONS:04d}" / "metrics.json").is_file()


def build_reference(ctx: Context, reuse: bool = False) -> float:
    """Train the reference run (ITERATIONS iterations) and evaluate its last checkpoint; return the seconds taken."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    config = (f"# the fault catalogue's reference run\nextends: {ctx.base_config.resolve()}\nname: faults\n"
              f"iterations: {ITERATIONS}\ntracking:\n  uri: sqlite:///{(ctx.out / 'mlruns.db').resolve()}\n")
    if reuse and _reference_done(ctx) and ctx.config.is_file() and ctx.config.read_text() == config:
        return 0.0
    shutil.rmtree(ctx.reference, ignore_errors=True)
    ctx.config.write_text(config)
    start = time.monotonic()
    for args in (("train", str(ctx.config), "--run-dir", str(ctx.reference), "--no-progress"),
                 ("eval", "--run-dir", str(ctx.reference), "--step", str(ITERATIONS), "--quiet")):
        done = procs.run(solrl(args), ctx.env, ctx.cwd, ctx.timeout_s * 3)
        if done.returncode != 0:
            raise RuntimeError(f"the reference run failed: solrl {' '.join(args)}\n{done.stderr[-3000:]}")
    return time.monotonic() - start


# ---- one case -------------------------------------------------------------------------------------------------
def _gpu_present() -> bool:
    import torch

    return torch.cuda.is_available()


def _signal(case: Case, run_dir: Path) -> procs.Signal | None:
    if case.signal is None:
        return None
    name, pattern, group = case.signal
    return procs.Signal(getattr(signal, name), lambda: any(run_dir.glob(pattern)), group)


def _env(ctx: Context, case: Case, values: dict[str, str]) -> dict[str, str]:
    """The command's environment: the catalogue's, changed as the case says ({pythonpath}: the catalogue's own)."""
    env = dict(ctx.env)
    for key, value in case.env:
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value.format(**values, pythonpath=ctx.env.get("PYTHONPATH", ""))
    return env


def _piped(argv: list[str], pipe: str) -> list[str]:
    """`argv` with its standard output into the shell pipeline `pipe`; the exit status is argv's (pipefail)."""
    return ["bash", "-c", f"set -o pipefail; {shlex.join(argv)} | {pipe}"]


def _run_dir_args_inside(args: list[str], case_dir: Path) -> bool:
    return all(outcome.inside(Path(args[i + 1]), case_dir)
               for i, arg in enumerate(args[:-1]) if arg == "--run-dir")


def _follow_up(ctx: Context, case: Case, record: dict, first_argv: list[str], values: dict, case_dir: Path,
               env: dict, before: dict[str, str]) -> None:
    """After a clean error (repair) or a due success: the repair or second command, resume, compare."""
    run_dir = case_dir / "run"
    commands: list[list[str]] = []
    if record["outcome"] == "clean" and case.repair:
        steps = outcome.repair_steps(record["line"], str(ctx.config))
        if not steps:
            record.update(outcome="unrepaired", after="the error names no repair")
            return
        for kind, arg in steps:
            if kind in ("delete", "move"):
                path = Path(arg)
                if not outcome.inside(path, case_dir):
                    record.update(outcome="unrepaired", after=f"the repair {kind}s {path}, outside the run")
                    return
                commands.append([kind, str(path)])
            elif kind == "mv":
                source, dest = Path(arg[0]), case_dir / arg[1]  # the commands run in the case's folder
                if not (outcome.inside(source, case_dir) and outcome.inside(dest, case_dir)):
                    record.update(outcome="unrepaired", after=f"the repair moves {source} to {dest}, outside the case")
                    return
                commands.append(["mv", str(source), str(dest)])
            elif kind == "again":
                commands.append(first_argv)
            else:
                if not _run_dir_args_inside(arg, case_dir):
                    record.update(outcome="unrepaired", after="the repair command names another run directory")
                    return
                commands.append(solrl(arg))
    elif record["outcome"] == "ok" and case.then:
        commands.append(solrl(_fill(case.then, values)))
    commands.append(solrl(_fill(TRAIN, values)))
    record["follow_up"] = []
    for argv in commands:
        if argv[0] in ("delete", "move"):
            path = Path(argv[1])
            if path.exists() or path.is_symlink():
                if argv[0] == "delete":
                    damage.delete(path)
                else:  # out of the run directory, into the case's folder
                    (case_dir / "moved_out").mkdir(exist_ok=True)
                    shutil.move(path, case_dir / "moved_out" / path.name)
            record["follow_up"].append(f"{argv[0]} {argv[1]}")
            continue
        if argv[0] == "mv":
            shutil.move(argv[1], argv[2])
            record["follow_up"].append(" ".join(argv))
            continue
        done = procs.run(argv, env, case_dir, ctx.timeout_s)
        shown = "solrl " + " ".join(argv[3:])
        record["follow_up"].append(f"{shown} -> exit {done.returncode}")
        if done.orphans:
            record.update(outcome="orphan", after=f"{shown} left {done.orphans[0]}")
            return
        if done.returncode != 0:
            record.update(outcome="unrepaired", after=f"{shown} failed: {outcome.last_line(done.stderr)[:200]}")
            return
    after = outcome.snapshot(run_dir)
    stale = [rel for rel in case.recomputed if before.get(rel) == after.get(rel)]
    if stale:
        record.update(outcome="silent", after="not recomputed: " + ", ".join(stale))
        return
    diffs = outcome.differences(ctx.reference, run_dir, ITERATIONS, outcome.evaluations(before))
    if diffs:
        record.update(outcome="silent", after="differs from the reference: " + "; ".join(diffs[:3]))
    else:
        record["after"] = "identical"


def run_case(ctx: Context, case: Case) -> dict:
    """Apply `case` to a fresh copy of the reference run, run it and follow it up; return its record."""
    start = time.monotonic()
    record = {"case": case.name, "kind": case.kind, "fault": case.fault,
              "command": "solrl " + " ".join(case.command), "after": None}
    if procs.stopping():
        record.update(outcome="not tried", line="(the catalogue was stopped)")
        return record
    if case.gpu_absent and _gpu_present():
        record.update(outcome="not tried", line="(a CUDA GPU is present)")
        return record
    if case.disk_full and not procs.small_disk_available():
        record.update(outcome="not tried", line="(no private tmpfs here: needs root and unshare)")
        return record
    case_dir = ctx.out / "cases" / case.name
    if case_dir.exists():
        damage.undo_permissions(case_dir)
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    run_dir = case_dir / "run"
    shutil.copytree(ctx.reference, run_dir, symlinks=True, ignore=shutil.ignore_patterns(".lock"))
    values = {"config": str(ctx.config), "run": str(run_dir), "case": str(case_dir), "dead_url": ctx.dead_url}
    damaged: set[str] = set()
    for step in case.prepare:
        touched = damage.apply(step, case_dir, run_dir, values)
        if step[0] != "interrupt":
            damaged |= {p.relative_to(run_dir).as_posix() for p in touched if outcome.inside(p, run_dir)}
    before = outcome.snapshot(run_dir)
    env = _env(ctx, case, values)
    argv = solrl(_fill(case.command, values))
    if case.disk_full:
        (case_dir / "disk").mkdir()
        inner = solrl(_fill(case.command, {**values, "run": str(case_dir / "disk" / "run")}))
        argv = procs.on_small_disk(inner, run_dir, case_dir / "disk", SMALL_DISK_FREE_KB)
    if case.pipe:
        argv = _piped(argv, case.pipe)
    if case.limits:
        argv = procs.limited(argv, case.limits)
    if case.unprivileged:
        argv = procs.unprivileged(argv)
    from solrl_core.run.rundir import RunDir

    with RunDir(run_dir).hold() if case.locked else nullcontext():
        done = procs.run(argv, env, case_dir, case.timeout_s or ctx.timeout_s, _signal(case, run_dir))
    damage.undo_permissions(case_dir)
    failed = done.returncode != 0 or done.timed_out
    lost = outcome.lost_files(before, outcome.snapshot(run_dir), damaged) if failed else []
    judged = done
    if case.pipe and done.returncode == CLOSED_PIPE_EXIT and not done.stderr.strip():
        judged = replace(done, returncode=0)  # a quiet end at a closed pipe is a success, as `cat | head` is
    record.update(outcome=outcome.first_outcome(case.expect, judged, lost), line=outcome.last_line(done.stderr),
                  exit=done.returncode, seconds=round(done.seconds, 1), signalled=done.signalled,
                  orphans=done.orphans, lost=lost[:10])
    follow = record["outcome"] in ("clean", "ok") and (case.repair or case.disk_full or case.expect != "error")
    if follow:
        _follow_up(ctx, case, record, argv, values, case_dir, env, before)
    elif record["outcome"] == "silent" and case.kind == "damage":  # what the damage did to the results
        diffs = outcome.differences(ctx.reference, run_dir, ITERATIONS, outcome.evaluations(before))
        record["after"] = ("differs from the reference: " + "; ".join(diffs[:3])) if diffs else "identical"
    record["case_seconds"] = round(time.monotonic() - start, 1)
    return record


# ---- the catalogue ---------------------------------------------------------------------------------------------
def select_cases(only: str | None) -> list[Case]:
    """Cases whose name or kind matches one of the comma-separated glob patterns of `only` (all when None)."""
    if not only:
        return list(CASES)
    patterns = [p.strip() for p in only.split(",") if p.strip()]
    return [c for c in CASES if any(fnmatch.fnmatch(c.name, p) or fnmatch.fnmatch(c.kind, p)
                                    for p in patterns)]


def summary(records: list[dict]) -> dict[str, int]:
    tried = [r for r in records if r["outcome"] != "not tried"]
    counts = {"tried": len(tried)}
    for key, _ in COUNTS[1:]:
        counts[key] = sum(r["outcome"] == key for r in tried)
    return counts


def _cell(text) -> str:
    return "" if text is None else str(text).replace("|", "\\|").replace("\n", " ")


def write_report(ctx: Context, records: list[dict], command: str, seconds: float) -> dict:
    counts = summary(records)
    report = {"command": command, "seconds": round(seconds, 1), "summary": counts, "cases": records}
    (ctx.out / "report.json").write_text(json.dumps(report, indent=2))
    lines = ["# solrl fault catalogue", "", f"Command: `{command}` ({seconds / 60:.1f} min)", "",
             "| " + " | ".join(label for _, label in COUNTS) + " |", "|" + "---:|" * len(COUNTS),
             "| " + " | ".join(str(counts[key]) for key, _ in COUNTS) + " |", "",
             "| case | kind | fault | command | outcome | after repair / resume | the one line shown |",
             "|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append("| " + " | ".join(_cell(r.get(k)) for k in ("case", "kind", "fault", "command", "outcome",
                                                                      "after", "line")) + " |")
    (ctx.out / "report.md").write_text("\n".join(lines) + "\n")
    return report


def run_catalogue(ctx: Context, cases: list[Case], command: str, reuse_reference: bool = False,
                  jobs: int = 1) -> dict:
    """The reference run, then `cases` (`jobs` at a time: each case has its own copy, commands their own
    sessions); report.md / report.json are rewritten after each case, in catalogue order."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    start = time.monotonic()
    ctx.say(f"reference run ({plural(ITERATIONS, 'iteration')}) in {ctx.reference} ...")
    took = build_reference(ctx, reuse=reuse_reference)
    ctx.say(f"reference run: {took:.0f} s" if took else "reference run: reused")
    records: dict[str, dict] = {}
    order = {case.name: i for i, case in enumerate(cases)}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(run_case, ctx, case) for case in cases]
        for future in as_completed(futures):
            record = future.result()
            records[record["case"]] = record
            after = f", {record['after']}" if record.get("after") else ""
            ctx.say(f"[{len(records)}/{len(cases)}] {record['case']}: {record['outcome']}{after} "
                    f"({record.get('case_seconds', 0):.0f} s) {record.get('line', '')[:140]}")
            done = sorted(records.values(), key=lambda r: order[r["case"]])
            write_report(ctx, done, command, time.monotonic() - start)
    return write_report(ctx, sorted(records.values(), key=lambda r: order[r["case"]]), command,
                        time.monotonic() - start)


def summary_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{label}: {counts[key]}" for key, label in COUNTS)
