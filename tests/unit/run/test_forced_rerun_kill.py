"""A forced re-run (`solrl stage NAME --force`, run_stage(force=True)) that is killed before its commit leaves the
stage's previous artifact and manifest as they were: they still verify, and the next run of the stage (what `solrl
train` does when it resumes) keeps them, bit for bit, instead of computing them again."""

from __future__ import annotations

import dataclasses
import hashlib

import pytest

import solrl_core.stages.runner as runner
from solrl_core import method
from solrl_core.config.loading import load_config
from solrl_core.run.integrity import verify_stage
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from repo_paths import TINY

STAGE = "quantize"  # the first stage of iteration 0: it reads no other stage's artifact
FILES = {"report.json": b'{"attempt": %d}', "weights/part.bin": b"\x00\x01attempt %d" * 1000}


class Killed(KeyboardInterrupt):
    """What a Ctrl-C or SIGTERM (solrl_core/stop.py) raises inside a stage."""


def fake_stage(attempt: int, stop_after: int | None = None):
    """A stage that writes FILES (marked with `attempt`) into its partial directory; with `stop_after`, it is killed
    after writing that many of them."""

    def run(ctx):
        with ctx.run.stage_output(ctx.iteration, STAGE) as out:
            for written, (name, content) in enumerate(FILES.items()):
                if stop_after is not None and written == stop_after:
                    raise Killed()
                (out / name).parent.mkdir(parents=True, exist_ok=True)
                (out / name).write_bytes(content.replace(b"%d", str(attempt).encode()))
        return {"attempt": attempt}

    return run



def use_stage(monkeypatch, run) -> None:
    """Run `run` as STAGE's step function (solrl_core/method.py)."""
    monkeypatch.setitem(method.BY_NAME, STAGE, dataclasses.replace(method.BY_NAME[STAGE], run=run))

def snapshot(run: RunDir) -> dict[str, str]:
    """Every file of the stage's artifact and its manifest, by path, as a digest of its bytes."""
    paths = [run.manifest_path(0, STAGE), *sorted(p for p in run.stage_dir(0, STAGE).rglob("*") if p.is_file())]
    return {str(p.relative_to(run.root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in paths}


@pytest.fixture
def committed(tmp_path, monkeypatch):
    """A run whose STAGE of iteration 0 is committed (by attempt 1)."""
    run = RunDir(tmp_path / "run")
    cfg = prepare_run(run, load_config(TINY))
    use_stage(monkeypatch, fake_stage(1))
    manifest = runner.run_stage(run, cfg, 0, STAGE, progress=False)
    assert manifest["summary"]["attempt"] == 1
    return run, cfg


@pytest.mark.parametrize("stop_after", [0, 1])
def test_a_killed_forced_rerun_leaves_the_previous_artifact_and_manifest(committed, monkeypatch, stop_after):
    run, cfg = committed
    before = snapshot(run)
    use_stage(monkeypatch, fake_stage(2, stop_after))
    with pytest.raises(Killed):
        runner.run_stage(run, cfg, 0, STAGE, force=True, progress=False)
    assert run.partial_dir(0, STAGE).is_dir()  # the killed attempt's output is where it was written, not in place
    assert snapshot(run) == before
    verify_stage(run, 0, STAGE)

    # resuming (not forced): the stage is complete and not stale, so it is kept as it was and nothing runs
    use_stage(monkeypatch, lambda _ctx: pytest.fail("a complete stage was computed again"))
    resumed = runner.run_stage(run, cfg, 0, STAGE, progress=False)
    assert resumed["summary"]["attempt"] == 1
    assert snapshot(run) == before
    verify_stage(run, 0, STAGE)


def test_the_forced_rerun_run_again_replaces_the_artifact(committed, monkeypatch):
    run, cfg = committed
    old_id = run.manifest(0, STAGE)["id"]
    use_stage(monkeypatch, fake_stage(2, stop_after=1))
    with pytest.raises(Killed):
        runner.run_stage(run, cfg, 0, STAGE, force=True, progress=False)
    use_stage(monkeypatch, fake_stage(2))
    manifest = runner.run_stage(run, cfg, 0, STAGE, force=True, progress=False)
    assert manifest["summary"]["attempt"] == 2 and manifest["id"] != old_id
    assert (run.stage_dir(0, STAGE) / "report.json").read_bytes() == b'{"attempt": 2}'
    assert not run.partial_dir(0, STAGE).exists() and not run.pending_path(0, STAGE).exists()
    verify_stage(run, 0, STAGE)
