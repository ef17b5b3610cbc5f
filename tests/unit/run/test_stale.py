"""Atomic re-runs and staleness: a forced stage keeps its previous artifact until the new one is complete; an
interrupted commit is finished by the next holder of the run; what a re-run makes stale is shown and recomputed
(logging a recomputed value again: tests/e2e/test_stale_relog.py)."""

from __future__ import annotations

import hashlib
import json
import shutil
import uuid
from pathlib import Path

import pytest
import torch

import solrl_core.run.commit
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import MissingInputError
from solrl_core.evaluate import run_eval
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.runner import run_stage
from solrl_core.run.staleness import stale_items
from solrl_core.status import run_status, stale_lines, status_text
from solrl_core.run.storage import load_tensors

# tiny.yaml made smaller still: two iterations and an evaluation in about half a minute of CPU
# (a full-precision sol_rl explore must take fewer steps than the regenerate: solrl_core/config/families.py)
SMALL = ["explore.seeds_per_prompt=4", "explore.batch_size=8", "explore.steps=1", "explore.precision=fp32",
         "select.k=2", "regenerate.steps=2", "train.optimizer_steps=1",
         "eval.num_prompts=2", "eval.seeds_per_prompt=1", "eval.steps=2"]
CHECKPOINT_FILES = ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors")


def _train(run: RunDir, iterations: int = 2) -> None:
    """What `solrl train` computes, in order, in this process: every stage not complete or stale, then the
    evaluation after the last iteration."""
    cfg = load_run_config(run)
    for iteration in range(iterations):
        for stage in STAGES:
            run_stage(run, cfg, iteration, stage, progress=False)
    run_eval(run, cfg, iterations)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("stale") / "fresh"
    run = RunDir(root)
    prepare_run(run, load_config(TINY, SMALL))
    _train(run)
    return root


def _copy(trained: Path, path: Path) -> RunDir:
    shutil.copytree(trained, path)
    return RunDir(path)


def _digests(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _checkpoint(run: RunDir, iteration: int) -> dict[str, torch.Tensor]:
    ckpt = run.checkpoint_dir(iteration)
    return {f"{name}:{key}": value for name in CHECKPOINT_FILES for key, value in load_tensors(ckpt / name).items()}


def test_failed_forced_update_leaves_the_old_checkpoint_and_manifest(trained, tmp_path, monkeypatch):
    run = _copy(trained, tmp_path / "run")
    cfg = load_run_config(run)
    update_dir, manifest_path = run.stage_dir(1, "update"), run.manifest_path(1, "update")
    before, manifest_before = _digests(update_dir), manifest_path.read_bytes()

    import solrl_core.stages.checkpoints as checkpoints

    written = checkpoints.save_tensors

    def disk_failure(tensors, path, *args, **kwargs):
        if path.name == checkpoints.EMA_FILE:
            raise OSError("No space left on device")
        return written(tensors, path, *args, **kwargs)

    monkeypatch.setattr(checkpoints, "save_tensors", disk_failure)  # the adapters are written, then the EMA fails
    with pytest.raises(OSError, match="No space left"):
        run_stage(run, cfg, 1, "update", force=True, progress=False)
    assert (run.partial_dir(1, "update") / "checkpoint" / "adapters.safetensors").is_file()  # it failed midway
    assert _digests(update_dir) == before and manifest_path.read_bytes() == manifest_before
    assert run.stage_status(1, "update") == "complete" and stale_items(run) == []

    monkeypatch.undo()
    assert run_stage(run, cfg, 1, "update", progress=False) == json.loads(manifest_before)  # complete: not redone
    again = run_stage(run, cfg, 1, "update", force=True, progress=False)
    # the same checkpoint bit for bit (the update is deterministic): the same completion, nothing made stale
    assert again["id"] == json.loads(manifest_before)["id"] and again["files"] == json.loads(manifest_before)["files"]
    assert again["completed_at"] > json.loads(manifest_before)["completed_at"] and stale_items(run) == []
    assert not run.partial_dir(1, "update").exists() and not run.aside_dir(1, "update").exists()
    fresh = _checkpoint(RunDir(trained), 1)
    for key, value in _checkpoint(run, 1).items():
        torch.testing.assert_close(value, fresh[key], rtol=0, atol=0)


def test_a_forced_stage_that_reproduces_its_files_makes_nothing_stale(trained, tmp_path):
    run = _copy(trained, tmp_path / "run")
    cfg = load_run_config(run)
    before = {(i, s): run.manifest(i, s) for i in range(2) for s in STAGES}
    for stage in ("explore", "score_explore", "select"):
        again = run_stage(run, cfg, 0, stage, force=True, progress=False)
        assert again["completed_at"] > before[(0, stage)]["completed_at"]  # computed again
        assert again["id"] == before[(0, stage)]["id"] and again["files"] == before[(0, stage)]["files"]
        assert stale_items(run) == []
    assert all(run.manifest(i, s) == before[(i, s)] for i in range(2) for s in STAGES if (i, s) not in
               {(0, "explore"), (0, "score_explore"), (0, "select")})


def test_forced_stage_makes_its_dependents_stale_and_training_recomputes_them(trained, tmp_path):
    """A forced stage whose files change (here: scored with another reward weight than the run's) makes what read it
    stale. Forced again as the run has it, its files are the first ones again but its completion is a third one, so
    its dependents stay stale; training recomputes them until a recomputed stage reproduces its files (select, from
    the same rewards): what read that one is current again without being computed."""
    run = _copy(trained, tmp_path / "run")
    cfg = load_run_config(run)
    before = {(i, s): run.manifest(i, s) for i in range(2) for s in STAGES}
    ids = {key: manifest["id"] for key, manifest in before.items()}
    eval_id = run.evaluation(2)["id"]

    reweighted = cfg.model_copy(update={"rewards": {"embedded": 0.5}})
    changed = run_stage(run, reweighted, 0, "score_explore", force=True, progress=False)
    assert changed["id"] != ids[(0, "score_explore")] and changed["files"] != before[(0, "score_explore")]["files"]
    expected = [(0, s) for s in ("select", "regenerate", "score_final", "update")] + [(1, s) for s in STAGES]
    stale = stale_items(run)
    assert [(item.get("iteration", item.get("step")), item["stage"]) for item in stale] == expected + [(2, "eval")]
    assert {item["cause"] for item in stale} == {"0/score_explore"}

    data = run_status(run)
    assert data["stale"] == stale and data["completed_iterations"] == 0
    assert [row["stages"] for row in data["iterations"]] == [
        {s: "stale" if (i, s) in expected else "complete" for s in STAGES} for i in range(2)]
    text = status_text(data)
    assert "(computed before score_explore of iteration 0 was run again)" in text
    assert f"`solrl train {run.config_path} --run-dir {run.root}` recomputes them" in text
    assert text.splitlines()[-1].split() == ["1"] + ["stale"] * len(STAGES)

    with pytest.raises(MissingInputError, match="reads 'score_final' of iteration 0, which is stale .computed "
                       "before score_explore of iteration 0 was run again.: solrl train .* recomputes it"):
        run_stage(run, cfg, 0, "update", force=True, progress=False)  # not from a stale input

    restored = run_stage(run, cfg, 0, "score_explore", force=True, progress=False)
    assert restored["files"] == before[(0, "score_explore")]["files"]
    assert restored["id"] not in (ids[(0, "score_explore")], changed["id"])  # replaced other files: a new completion
    assert [(item.get("iteration", item.get("step")), item["stage"]) for item in stale_items(run)] == expected + [
        (2, "eval")]

    _train(run)
    assert stale_items(run) == []
    select = run.manifest(0, "select")
    assert select["completed_at"] > before[(0, "select")]["completed_at"] and select["id"] == ids[(0, "select")]
    for iteration, stage in expected[1:]:  # read select's bytes, which are the same: current without recomputing
        assert run.manifest(iteration, stage) == before[(iteration, stage)]
    assert run.evaluation(2)["id"] == eval_id
    fresh = RunDir(trained)
    for iteration in range(2):
        reference = _checkpoint(fresh, iteration)
        for key, value in _checkpoint(run, iteration).items():
            torch.testing.assert_close(value, reference[key], rtol=0, atol=0)


def _stage_run(tmp_path, scheme: str) -> RunDir:
    return RunDir(tmp_path / "run" if scheme == "local" else f"memory://stale-{uuid.uuid4().hex[:8]}/run")


def _write_version(run: RunDir, text: str) -> None:
    with run.stage_output(0, "select") as out:
        (out / "part").mkdir()
        (out / "part" / "data.txt").write_text(text)
        (out / "summary.json").write_text(json.dumps({"version": text}))


class Crash(BaseException):
    """A process killed at this point (nothing after it runs)."""


@pytest.mark.parametrize("scheme", ["local", "memory"])
@pytest.mark.parametrize("crash_after", ["ready", "aside", "in", "manifest"])
def test_commit_interrupted_at_any_step_is_finished_by_the_next_holder(tmp_path, monkeypatch, scheme, crash_after):
    run = _stage_run(tmp_path, scheme)
    _write_version(run, "old")
    old = run.commit(0, "select", {"version": "old"}, {})
    _write_version(run, "new")

    real_begin, real_advance, real_complete = solrl_core.run.commit.begin, solrl_core.run.commit._advance, run.complete

    def begin(journal, record):
        real_begin(journal, record)
        if crash_after == "ready":
            raise Crash

    def advance(journal, record, phase):
        real_advance(journal, record, phase)
        if phase == crash_after:
            raise Crash

    def complete(*args, **kwargs):
        manifest = real_complete(*args, **kwargs)
        if crash_after == "manifest":
            raise Crash
        return manifest

    monkeypatch.setattr(solrl_core.run.commit, "begin", begin)
    monkeypatch.setattr(solrl_core.run.commit, "_advance", advance)
    monkeypatch.setattr(run, "complete", complete)
    with pytest.raises(Crash):
        run.commit(0, "select", {"version": "new"}, {})
    if crash_after == "aside":  # the old artifact moved aside, the new one not moved in yet
        assert run.aside_dir(0, "select").exists() and not run.stage_dir(0, "select").exists()
        assert run.manifest(0, "select") == old
    monkeypatch.undo()

    reopened = RunDir(str(run.root)) if scheme == "memory" else RunDir(run.root)
    if scheme == "local":
        with reopened.hold():  # taking the run finishes what was under way
            pass
    else:
        assert reopened.recover() == [str(reopened.pending_path(0, "select"))]
    manifest = reopened.manifest(0, "select")
    assert manifest["summary"] == {"version": "new"} and manifest["id"] != old["id"]
    assert (reopened.stage_dir(0, "select") / "part" / "data.txt").read_text() == "new"
    assert json.loads((reopened.stage_dir(0, "select") / "summary.json").read_text()) == {"version": "new"}
    for leftover in (reopened.partial_dir(0, "select"), reopened.aside_dir(0, "select"),
                     reopened.pending_path(0, "select")):
        assert not leftover.exists(), leftover
    assert reopened.recover() == []


@pytest.mark.parametrize("scheme", ["local", "memory"])
def test_a_commit_of_the_same_files_keeps_the_completion_id(tmp_path, monkeypatch, scheme):
    run = _stage_run(tmp_path, scheme)
    _write_version(run, "old")
    first = run.commit(0, "select", {"version": "old"}, {})
    _write_version(run, "old")
    assert run.commit(0, "select", {"version": "old", "seconds": 2}, {"0/score_explore": "x"})["id"] == first["id"]

    _write_version(run, "old")  # interrupted once the artifact is in place, finished by the next holder
    real_advance = solrl_core.run.commit._advance

    def advance(journal, record, phase):
        real_advance(journal, record, phase)
        if phase == "in":
            raise Crash

    monkeypatch.setattr(solrl_core.run.commit, "_advance", advance)
    with pytest.raises(Crash):
        run.commit(0, "select", {"version": "old"}, {})
    monkeypatch.undo()
    run.recover()
    assert run.manifest(0, "select")["id"] == first["id"]

    _write_version(run, "new")  # other content of the same size: a new completion
    assert run.commit(0, "select", {"version": "new"}, {})["id"] != first["id"]
    run.manifest_path(0, "select").write_text("{not json")  # a damaged manifest is replaced, with a new id
    _write_version(run, "new")
    assert run.commit(0, "select", {"version": "new"}, {})["id"] != first["id"]


def test_a_partial_is_resumed_only_by_an_attempt_from_the_same_inputs(tmp_path):
    run = RunDir(tmp_path)
    partial = run.partial_dir(0, "explore")

    def left_partial(inputs):
        run.start_attempt(0, "explore", inputs, resume=True)
        (partial / "pool.zarr").mkdir(parents=True)  # an attempt that stopped midway

    left_partial({"0/quantize": "a"})
    run.start_attempt(0, "explore", {"0/quantize": "a"}, resume=True)
    assert (partial / "pool.zarr").is_dir()  # same inputs: resumed
    run.start_attempt(0, "explore", {"0/quantize": "b"}, resume=True)
    assert not partial.exists()  # quantize was computed again since: started over
    left_partial({"0/quantize": "b"})
    run.start_attempt(0, "explore", {"0/quantize": "b"}, resume=False)
    assert not partial.exists()  # --force: started over


@pytest.mark.parametrize("scheme", ["local", "memory"])
def test_manifests_without_ids_count_as_fresh(tmp_path, scheme):
    run = _stage_run(tmp_path, scheme)
    for stage in ("quantize", "explore", "score_explore"):
        path = run.manifest_path(0, stage)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stage": stage, "iteration": 0, "completed_at": 0.0, "summary": {}}))
    assert stale_items(run) == []
    run.complete(0, "select", {}, inputs={"0/score_explore": None})  # read the id-less score_explore
    assert stale_items(run) == []
    run.complete(0, "score_explore", {}, inputs={"0/explore": None})  # score_explore computed again: a new id
    assert [(item["iteration"], item["stage"], item["cause"]) for item in stale_items(run)] == [
        (0, "select", "0/score_explore")]
    run.manifest_path(0, "score_explore").unlink()
    assert stale_items(run)[0]["cause_missing"]
    assert "(score_explore of iteration 0 is missing)" in stale_lines(stale_items(run), "solrl train")[0]
