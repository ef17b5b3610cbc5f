"""Which completed stages and evaluations are stale: computed from inputs that were computed again since.

Every completion has an id (a stage manifest's and an evaluation's metrics.json "id") and records the ids of the
completions it read ("inputs", keys "<iteration>/<stage>"): the same-iteration stages it requires
(solrl_core/run/stage_table.py) and, for the stages that start from the previous checkpoint, the previous iteration's
update; the evaluation after k iterations reads iteration k-1's update. A completion is stale when one of its inputs
has another id now (it was run again), is missing, or is stale itself. Records without "inputs" (written before
completions had ids) count as fresh. A re-run whose artifact is bit for bit the one it replaces (the same file
inventory: names, sizes, digests) keeps the replaced completion's id (`kept_id`, solrl_core/run/lineage.py): what
read it read the same bytes, so nothing becomes stale.

Pure functions over a RunDir: they read manifests, never write.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from solrl_core.errors import MissingInputError
from solrl_core.run.integrity import file_identity
from solrl_core.run.stage_table import BY_NAME, TABLE
from solrl_core.run.storage import is_remote

if TYPE_CHECKING:
    from solrl_core.run.rundir import RunDir


def stage_key(iteration: int, stage: str) -> str:
    return f"{iteration}/{stage}"


def eval_key(step: int) -> str:
    return f"eval/{step}"


def describe(key: str) -> str:
    """A key as words: "score_explore of iteration 0", "the evaluation after 2 iterations"."""
    where, _, what = key.partition("/")
    if where == "eval":
        return f"the evaluation after {what} iteration{'' if what == '1' else 's'}"
    return f"{what} of iteration {where}"


def recompute_command(run: RunDir) -> str:
    """The command that recomputes a run's stale stages (with the config frozen in the run)."""
    return f"solrl train {run.config_path} --run-dir {run.root}"


def stage_dependencies(iteration: int, stage: str) -> list[tuple[int, str]]:
    """The completions a stage reads: the previous iteration's update (when it starts from the previous
    checkpoint; iteration 0 starts from the initial adapters), then its same-iteration inputs."""
    spec = BY_NAME[stage]
    previous = [(iteration - 1, "update")] if spec.needs_previous_checkpoint and iteration > 0 else []
    return previous + [(iteration, s) for s in spec.requires]


def eval_dependencies(step: int) -> list[tuple[int, str]]:
    return [(step - 1, "update")] if step > 0 else []


def input_ids(run: RunDir, dependencies: list[tuple[int, str]]) -> dict[str, str | None]:
    """What a completion records as its inputs: the current id of each complete dependency."""
    ids = {}
    for iteration, stage in dependencies:
        if run.is_complete(iteration, stage):
            ids[stage_key(iteration, stage)] = run.manifest(iteration, stage).get("id")
    return ids


def stale_causes(run: RunDir, upto: int | None = None) -> dict[str, str]:
    """Every stale stage completion of iterations up to `upto` (all when None), by key, with its cause: the key of
    the input upstream that was run again (or is missing)."""
    manifests = _manifests(run, upto)
    causes: dict[str, str] = {}
    for iteration in sorted({int(key.partition("/")[0]) for key in manifests}):
        for spec in TABLE:  # inputs come before the stages that read them
            key = stage_key(iteration, spec.name)
            if key in manifests:
                cause = _cause(manifests[key], manifests, causes)
                if cause is not None:
                    causes[key] = cause
    return causes


def stale_cause(run: RunDir, iteration: int, stage: str) -> str | None:
    """Why the stage's completion is stale (the key of the re-run or missing input upstream); None when it is fresh
    or not complete."""
    return stale_causes(run, iteration).get(stage_key(iteration, stage))


def eval_stale_cause(run: RunDir, step: int, record: dict | None = None) -> str | None:
    """Why the evaluation after `step` iterations (its metrics.json `record`) is stale; None when fresh or not done."""
    record = record if record is not None else run.evaluation(step)
    if record is None:
        return None
    manifests = _manifests(run, step - 1) if step > 0 else {}
    return _cause(record, manifests, stale_causes(run, step - 1) if step > 0 else {})


def is_current(run: RunDir, iteration: int, stage: str) -> bool:
    """Complete and not stale: nothing to compute."""
    return run.is_complete(iteration, stage) and stale_cause(run, iteration, stage) is None


def stale_items(run: RunDir) -> list[dict]:
    """Every stale completion, in run order: {"iteration", "stage", "cause", "cause_missing"} for stages (the audit
    included), {"step", "stage": "eval", "cause", "cause_missing"} for evaluations; `cause`: the key (see
    `describe`) of the completion upstream that was run again since, or is missing (`cause_missing`)."""
    causes = stale_causes(run)
    order = {name: i for i, name in enumerate(BY_NAME)}
    items = [{"iteration": int(key.partition("/")[0]), "stage": key.partition("/")[2], "cause": cause}
             for key, cause in causes.items()]
    items.sort(key=lambda item: (item["iteration"], order[item["stage"]]))
    for record in run.evaluations():
        cause = eval_stale_cause(run, record["step"], record)
        if cause is not None:
            items.append({"step": record["step"], "stage": "eval", "cause": cause})
    for item in items:
        iteration, _, stage = item["cause"].partition("/")
        item["cause_missing"] = not run.is_complete(int(iteration), stage)
    return items


def stale_where(item: dict) -> tuple:
    """What a `stale_items` item is about, whatever its cause: (iteration or step, stage)."""
    return item.get("iteration", item.get("step")), item["stage"]


def _cause(record: dict, manifests: dict[str, dict], causes: dict[str, str]) -> str | None:
    for key, recorded_id in (record.get("inputs") or {}).items():
        current = manifests.get(key)
        if current is None or current.get("id") != recorded_id:
            return key
        if key in causes:
            return causes[key]
    return None


def _manifests(run: RunDir, upto: int | None) -> dict[str, dict]:
    """The stage manifests of iterations up to `upto`, by key (read concurrently on object stores)."""
    paths = {}
    for path in run.root.glob("iter_[0-9][0-9][0-9][0-9]/manifests/*.json"):
        stage, iteration = path.name[: -len(".json")], int(path.parent.parent.name[5:])
        if stage in BY_NAME and (upto is None or iteration <= upto):
            paths[stage_key(iteration, stage)] = path
    if not paths:
        return {}
    if is_remote(run.root):
        fs = run.root.fs
        by_path = {fs._strip_protocol(path.path): key for key, path in paths.items()}
        texts = fs.cat(list(by_path), on_error="omit")
        records = {by_path[p]: _parse(text) for p, text in texts.items() if p in by_path}
    else:
        records = {}
        for key, path in paths.items():
            try:
                records[key] = _local_record(path)
            except FileNotFoundError:  # removed meanwhile
                continue
    return {key: record for key, record in records.items() if record is not None}


# Local manifests already read, by path: (file_identity, the fields staleness reads). A manifest is replaced by a
# rename (a new inode, times and usually size), so an unchanged identity means unchanged content; without this cache
# every stage of iteration i re-parsed every manifest of iterations 0..i (≈70 KB each), twice.
_RECORDS: dict[str, tuple[tuple[int, ...], dict | None]] = {}
RECORDS_MAX = 100_000


def _local_record(path) -> dict | None:
    identity = file_identity(path.stat())
    known = _RECORDS.get(str(path))
    if known is not None and known[0] == identity:
        return known[1]
    record = _parse(path.read_bytes())
    if record is not None:
        record = {"id": record.get("id"), "inputs": record.get("inputs")}
    if len(_RECORDS) >= RECORDS_MAX:
        _RECORDS.clear()
    _RECORDS[str(path)] = (identity, record)
    return record


def _parse(data: bytes) -> dict | None:
    """A manifest's record; None when it is damaged (not valid JSON): its stage then counts as missing here, and
    reading the stage itself (RunDir.manifest) refuses with one line naming it and the command that rebuilds it."""
    try:
        return json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None


def missing_inputs(run: RunDir, iteration: int, stage: str,
                   causes: dict[str, str] | None = None) -> list[tuple[int, str]]:
    """The stage's inputs that are not complete, or are stale (they must be run again first), in run order; `causes`:
    `stale_causes(run, iteration)` when the caller has it already."""
    causes = stale_causes(run, iteration) if causes is None else causes
    return [(it, s) for it, s in stage_dependencies(iteration, stage)
            if not run.is_complete(it, s) or stage_key(it, s) in causes]


def missing_input_error(run: RunDir, iteration: int, what: str, missing: list[tuple[int, str]]) -> MissingInputError:
    """The one-line refusal of a stage (`what`) whose first input in `missing` is not complete, or is stale."""
    it, first = missing[0]
    cause = stale_causes(run, it).get(stage_key(it, first))
    if cause is not None:
        return MissingInputError(
            f"{what} of iteration {iteration} reads '{first}' of iteration {it}, which is stale (computed before "
            f"{describe(cause)} was run again): {recompute_command(run)} recomputes it"
        )
    return MissingInputError(
        f"{what} of iteration {iteration} needs '{first}' of iteration {it} first: "
        f"solrl stage {first} --run-dir {run.root} --iteration {it}"
    )
