"""Damaged artifacts are refused by their consumers (one line: the file, what is wrong, the command that rebuilds
it); after that command the run goes on to the checkpoint an undamaged run reaches (through the CLI:
tests/e2e/test_integrity_cli.py)."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import numpy as np
import pytest

from solrl_core.config.loading import load_config
from solrl_core.errors import DamagedArtifactError, SolrlError
from solrl_core.evaluate import run_eval
from solrl_core.run.integrity import FILES_KEY, inventory, verify
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import load_run_config, prepare_run
from solrl_core.stages.runner import run_stage, verify_inputs
from solrl_core.run.storage import as_path
from repo_paths import TINY
from damaged_runs import FAST, assert_refused, assert_same_checkpoint, copy_run, files_under, rebuild_command
from damaged_runs import reference  # noqa: F401 - a fixture: the undamaged run

def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_intact_run_verifies_clean_and_every_file_is_recorded(reference):
    for stage in STAGES:
        verify_inputs(reference, 0, stage)
        recorded = reference.manifest(0, stage)[FILES_KEY]
        directory = reference.stage_dir(0, stage)
        assert recorded and {p.relative_to(directory).as_posix(): p.stat().st_size for p in files_under(directory)} == {
            rel: entry["size"] for rel, entry in recorded.items()}, stage
    verify_inputs(reference, 1, "quantize")
    state = json.loads((reference.init_dir / "state.json").read_text())
    assert set(state[FILES_KEY]) == {"adapters.safetensors"}


def test_deleted_latent_chunk_of_the_regenerated_pool(reference, tmp_path, one_torch_thread):
    run, cfg = copy_run(reference, tmp_path, (0, "update"))
    latent = [p for p in files_under(run.stage_dir(0, "regenerate") / "samples.zarr" / "latent") if p.name != "zarr.json"]
    latent[0].unlink()
    # zarr reads a missing chunk as its fill value: without the inventory the update would train on zeros
    rows = read_table(run.stage_dir(0, "regenerate") / "samples.zarr", ["latent"])[0]["latent"]
    assert (rows.reshape(len(rows), -1) == 0).all(axis=1).any()
    name = latent[0].relative_to(run.root).as_posix()
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), name, "missing", rebuild_command(run, "regenerate"))
    assert not run.stage_dir(0, "update").exists()
    scored = run.manifest(0, "score_final")
    run_stage(run, cfg, 0, "regenerate", force=True, progress=False)
    # the rebuilt pool is the one score_final read, bit for bit (the inventory says so): it is not stale
    assert run.manifest(0, "score_final") == scored and run_stage(run, cfg, 0, "score_final", progress=False) == scored
    run_stage(run, cfg, 0, "update", progress=False)
    assert_same_checkpoint(run, reference)


def test_altered_checkpoint_is_refused_by_the_next_iteration_and_the_evaluation(reference, tmp_path,
                                                                                 one_torch_thread):
    run, cfg = copy_run(reference, tmp_path, (1, "quantize"))
    adapters = run.checkpoint_dir(0) / "adapters.safetensors"
    _flip(adapters)
    name = adapters.relative_to(run.root).as_posix()
    for consumer in (lambda: run_stage(run, cfg, 1, "quantize", progress=False), lambda: run_eval(run, cfg, 1)):
        assert_refused(consumer, name, "content changed", rebuild_command(run, "update"))
    run_stage(run, cfg, 0, "update", force=True, progress=False)
    run_stage(run, cfg, 1, "quantize", progress=False)
    assert_same_checkpoint(run, reference)
    # the explore copy built from the rebuilt checkpoint: the same layers, errors and calibration output error
    got, want = (json.loads((r.stage_dir(1, "quantize") / "report.json").read_text()) for r in (run, reference))
    assert got == want


def test_altered_initial_adapters(reference, tmp_path, one_torch_thread):
    run, cfg = copy_run(reference, tmp_path, (0, "update"))
    _flip(run.init_dir / "adapters.safetensors")
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "init/adapters.safetensors",
             "content changed", f"delete {run.init_dir} and run the command again")
    shutil.rmtree(run.init_dir)
    run_stage(run, cfg, 0, "update", progress=False)  # recreates the initial adapters from the run seed
    assert_same_checkpoint(run, reference)


def test_truncated_manifest(reference, tmp_path, one_torch_thread):
    run, cfg = copy_run(reference, tmp_path, (0, "update"))
    manifest = run.manifest_path(0, "score_final")
    manifest.write_text(manifest.read_text()[:100])
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "iter_0000/manifests/score_final.json",
             "not valid JSON", rebuild_command(run, "score_final"))
    from solrl_core.run.staleness import stale_items

    # status and staleness read past it: what is stale is so because of the update removed above, nothing else
    assert {item["cause"] for item in stale_items(run)} == {"0/update"}
    run_stage(run, cfg, 0, "score_final", force=True, progress=False)
    run_stage(run, cfg, 0, "update", progress=False)
    assert_same_checkpoint(run, reference)


def _strip_inventory(path: Path, value=None) -> None:
    """A completion record without its inventory (as runs before inventories wrote them), or with `value` instead."""
    record = json.loads(path.read_text())
    if value is None:
        del record[FILES_KEY]
    else:
        record[FILES_KEY] = value
    path.write_text(json.dumps(record))


def test_a_record_without_its_inventory_is_damaged(reference, tmp_path, one_torch_thread):
    """Nothing could be checked against it: refused like a damaged file, naming the record and the command that
    rebuilds it; after that command the run goes on to the reference checkpoint."""
    run, cfg = copy_run(reference, tmp_path, (0, "update"))
    manifest = run.manifest_path(0, "score_final")
    _strip_inventory(manifest)
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "iter_0000/manifests/score_final.json",
             "no 'files' inventory", rebuild_command(run, "score_final"))
    _strip_inventory(manifest, {"rewards.zarr/zarr.json": {"size": "12"}})  # an inventory of something else
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "iter_0000/manifests/score_final.json",
             "inventory is not a list of file sizes and digests", rebuild_command(run, "score_final"))
    run_stage(run, cfg, 0, "score_final", force=True, progress=False)
    assert FILES_KEY in run.manifest(0, "score_final")  # what the rebuild completes is recorded

    _strip_inventory(run.init_dir / "state.json")
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "init/state.json", "no 'files' inventory",
             f"delete {run.init_dir} and run the command again")
    shutil.rmtree(run.init_dir)
    run_stage(run, cfg, 0, "update", progress=False)
    assert_same_checkpoint(run, reference)


def test_a_damaged_checkpoint_is_not_trained_on_when_its_manifest_lost_the_inventory(reference, tmp_path,
                                                                                    one_torch_thread):
    """Without its inventory the update's manifest turned checking off: the altered checkpoint was read silently."""
    run, cfg = copy_run(reference, tmp_path, (1, "quantize"))
    _flip(run.checkpoint_dir(0) / "adapters.safetensors")
    _strip_inventory(run.manifest_path(0, "update"))
    for consumer in (lambda: run_stage(run, cfg, 1, "quantize", progress=False), lambda: run_eval(run, cfg, 1)):
        assert_refused(consumer, "iter_0000/manifests/update.json", "no 'files' inventory", rebuild_command(run, "update"))
    assert not run.stage_dir(1, "quantize").exists() and not run.eval_dir(1).exists()


@pytest.mark.parametrize("fault", ["deleted", "edited"])
def test_the_updates_metrics_json_is_checked_with_its_checkpoint(reference, tmp_path, fault, one_torch_thread):
    """update/metrics.json is in the update's inventory: deleted or edited, the next consumer of the checkpoint (the
    next iteration, an evaluation) refuses it."""
    run, cfg = copy_run(reference, tmp_path, (1, "quantize"))
    metrics = run.stage_dir(0, "update") / "metrics.json"
    assert "metrics.json" in run.manifest(0, "update")[FILES_KEY]
    if fault == "deleted":
        metrics.unlink()
    else:
        metrics.write_text(metrics.read_text().replace("0", "1", 1))  # one digit: same size, other content
    what = "missing" if fault == "deleted" else "content changed"
    for consumer in (lambda: run_stage(run, cfg, 1, "quantize", progress=False), lambda: run_eval(run, cfg, 1)):
        assert_refused(consumer, "iter_0000/update/metrics.json", what, rebuild_command(run, "update"))


def test_a_chunk_replaced_by_a_symbolic_link_loop(reference, tmp_path, one_torch_thread):
    run, cfg = copy_run(reference, tmp_path)
    image = [p for p in files_under(run.stage_dir(0, "explore") / "pool.zarr" / "image") if p.name != "zarr.json"][0]
    image.unlink()
    image.symlink_to(image.name)  # points at itself: opening it fails with ELOOP
    assert_refused(lambda: run_stage(run, cfg, 0, "score_explore", force=True, progress=False),
             image.relative_to(run.root).as_posix(), "not a readable file", rebuild_command(run, "explore"))
    assert run.is_complete(0, "score_explore")


def test_inspect_checks_the_artifacts_it_reads(reference, tmp_path, capsys, one_torch_thread):
    """`solrl inspect` refuses a damaged pool in one line, as the stages do (it read the chunk with zarr: a zstd
    traceback, or zeros for a missing chunk)."""
    from solrl.cli.main import main
    from solrl_core.inspect import pool_summary

    run, _ = copy_run(reference, tmp_path)
    assert pool_summary(run, 0)["candidates"] > 0
    rewards = [p for p in files_under(run.stage_dir(0, "score_final") / "rewards.zarr") if p.name != "zarr.json"][0]
    _flip(rewards)
    assert_refused(lambda: pool_summary(run, 0), rewards.relative_to(run.root).as_posix(), "content changed",
             rebuild_command(run, "score_final"))
    image = [p for p in files_under(run.stage_dir(0, "explore") / "pool.zarr" / "image") if p.name != "zarr.json"][0]
    image.write_bytes(image.read_bytes()[:10])
    capsys.readouterr()
    assert main(["inspect", "--run-dir", str(run.root), "--iteration", "0"]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, err
    assert image.relative_to(run.root).as_posix() in lines[0] and rebuild_command(run, "explore") in lines[0]


def test_a_config_without_digest_line_is_taken_unless_it_is_a_users_own(reference, tmp_path):
    """A whole config without the digest line (frozen by an older version, or written out by hand) is taken as it is;
    one that extends another is a user's own config, not one solrl froze: refused, saying so (it was an 'unknown
    key extends' error)."""
    run, cfg = copy_run(reference, tmp_path, (0, "update"))
    run.config_path.write_text(run.config_path.read_text().split("\n", 1)[1])  # without its digest line
    assert load_run_config(run) == cfg
    run.config_path.write_text(f"extends: {TINY}\niterations: 3\n")
    with pytest.raises(SolrlError) as info:
        load_run_config(run)
    message = str(info.value)
    assert "\n" not in message and "not a config solrl froze" in message and str(run.config_path) in message
    assert f"--run-dir {run.root}" in message and "unknown key" not in message


def test_inventory_on_an_object_store():
    root = as_path(f"memory://integrity-{uuid.uuid4().hex[:8]}/artifact")
    (root / "a.zarr" / "c").mkdir(parents=True, exist_ok=True)
    (root / "a.zarr" / "c" / "0").write_bytes(np.arange(100, dtype=np.uint8).tobytes())
    (root / "state.json").write_text('{"step": 1}')
    recorded = inventory(root)
    assert set(recorded) == {"a.zarr/c/0", "state.json"} and recorded["a.zarr/c/0"]["size"] == 100
    verify(root, recorded, "iter_0000/x", "rebuild it")
    (root / "a.zarr" / "c" / "0").write_bytes(np.arange(1, 101, dtype=np.uint8).tobytes())
    with pytest.raises(DamagedArtifactError, match="iter_0000/x/a.zarr/c/0 is damaged .content changed"):
        verify(root, recorded, "iter_0000/x", "rebuild it")
    (root / "state.json").write_text("{")
    with pytest.raises(DamagedArtifactError, match="state.json is damaged .size 1 != recorded 11"):
        verify(root, recorded, "iter_0000/x", "rebuild it")
    (root / "a.zarr" / "c" / "0").unlink()
    with pytest.raises(DamagedArtifactError, match="a.zarr/c/0 is damaged .missing"):
        verify(root, recorded, "iter_0000/x", "rebuild it")


def test_truncated_run_json_and_evaluation_metrics(tmp_path):
    run = RunDir(tmp_path / "run")
    run.root.mkdir()
    run.run_json.write_text('{"tracking_uri": "sqlite:///x.db", "mlflow_')
    assert_refused(run.run_info, "run.json", "not valid JSON", f"delete {run.run_json}")
    run.eval_dir(2).mkdir(parents=True)
    (run.eval_dir(2) / "metrics.json").write_text('{"step": 2, "metr')
    assert_refused(run.evaluations, "eval/step_0002/metrics.json", "not valid JSON",
             f"delete {run.eval_dir(2)} and run: solrl eval --run-dir {run.root} --step 2")


@pytest.mark.parametrize("restore_mtime", [False, True])
def test_a_file_rewritten_in_place_is_damaged_though_its_digest_was_remembered(tmp_path, restore_mtime):
    """Digests are remembered per file within a process (solrl_core/run/integrity.py): a rewrite of the same size, even one
    that puts the old modification time back, is still found."""
    artifact = tmp_path / "artifact"
    artifact.mkdir()
    (artifact / "data.bin").write_bytes(b"a" * 4096)
    recorded = inventory(artifact)
    verify(artifact, recorded, "artifact", "rebuild it")  # remembered now, and still the same file
    before = os.stat(artifact / "data.bin")
    with open(artifact / "data.bin", "r+b") as fh:
        fh.write(b"b")  # same size, other content
    if restore_mtime:
        os.utime(artifact / "data.bin", ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(DamagedArtifactError, match="artifact/data.bin is damaged .content changed"):
        verify(artifact, recorded, "artifact", "rebuild it")


def test_local_inventory_lists_nested_chunk_directories_and_skips_linked_ones(tmp_path):
    """The local listing (os.scandir, a directory per zarr chunk) finds every file at any depth, by "/"-separated
    relative path, and does not enter a linked directory (as os.walk)."""
    root = tmp_path / "artifact"
    for row in range(3):
        chunk = root / "pool.zarr" / "latent" / "c" / str(row) / "0"
        chunk.mkdir(parents=True)
        (chunk / "0").write_bytes(bytes(range(row + 1)))
    (root / "state.json").write_text('{"step": 1}')
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(b"x" * 10)
    (root / "linked").symlink_to(outside, target_is_directory=True)
    recorded = inventory(root)
    assert {k: v["size"] for k, v in recorded.items()} == {
        "pool.zarr/latent/c/0/0/0": 1, "pool.zarr/latent/c/1/0/0": 2, "pool.zarr/latent/c/2/0/0": 3, "state.json": 11}
    verify(root, recorded, "iter_0000/explore", "rebuild it")
    (root / "pool.zarr" / "latent" / "c" / "1" / "0" / "0").unlink()
    with pytest.raises(DamagedArtifactError, match="iter_0000/explore/pool.zarr/latent/c/1/0/0 is damaged .missing"):
        verify(root, recorded, "iter_0000/explore", "rebuild it")


def test_a_sealed_record_edited_after_it_was_written_is_damaged(tmp_path):
    """An evaluation's metrics.json lists its directory's files, but nothing lists metrics.json: sealed (its own
    digest in it), an edited value is refused wherever the record is read, instead of shown as measured."""
    from PIL import Image

    from solrl_core.run.integrity import SEAL_KEY, sealed

    run = RunDir(tmp_path / "run")
    out = run.eval_dir(2)
    out.mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(out / "samples.png")
    record = {"step": 2, "metrics": {"reward": 0.25, "gold": float("nan")}}
    (out / "metrics.json").write_text(json.dumps(sealed({**record, FILES_KEY: inventory(out)}), indent=2))
    assert run.evaluation(2)["metrics"]["reward"] == 0.25 and SEAL_KEY not in run.evaluation(2)
    assert [e["step"] for e in run.evaluations()] == [2]
    text = (out / "metrics.json").read_text()
    (out / "metrics.json").write_text(text.replace("0.25", "0.95"))
    remedy = f"delete {out} and run: solrl eval --run-dir {run.root} --step 2"
    for read in (lambda: run.evaluation(2), run.evaluations):
        assert_refused(read, "eval/step_0002/metrics.json", "content changed since it was written", remedy)


def test_an_evaluation_is_written_sealed(reference, tmp_path, one_torch_thread):
    """run_eval seals its metrics.json: an edited value is refused where `solrl eval` shows it again."""
    from solrl_core.run.integrity import SEAL_KEY

    run, cfg = copy_run(reference, tmp_path, (1, "quantize"))
    run_eval(run, cfg, 1)
    path = run.eval_dir(1) / "metrics.json"
    record = json.loads(path.read_text())
    assert SEAL_KEY in record
    record["metrics"] = {key: 0.99 for key in record["metrics"]}
    path.write_text(json.dumps(record))
    with pytest.raises(DamagedArtifactError, match="eval/step_0001/metrics.json is damaged .its content changed"):
        run.evaluation(1)


def test_a_kept_stage_is_checked_for_its_files_when_the_run_resumes(reference, tmp_path, one_torch_thread):
    """A complete stage is kept on resume only with every file it lists there at its size (a stat each, nothing
    read): a file nothing reads any more (the update's metrics.json of a finished run) is not lost silently."""
    run, cfg = copy_run(reference, tmp_path)
    assert run_stage(run, cfg, 0, "update", progress=False) == run.manifest(0, "update")  # kept as it is
    (run.stage_dir(0, "update") / "metrics.json").unlink()
    assert_refused(lambda: run_stage(run, cfg, 0, "update", progress=False), "iter_0000/update/metrics.json", "missing",
             rebuild_command(run, "update"))


def test_a_run_without_its_config_resumes_only_with_the_config_it_was_started_with(reference, tmp_path):
    """config.yaml deleted (as a damaged one's error says): another config is refused in one line, before a stage
    meets artifacts of other shapes; the original one (a resumable key changed too) freezes it again."""
    run, cfg = copy_run(reference, tmp_path)
    run.config_path.unlink()
    other = load_config(TINY, [*FAST, "train.lora_rank=8"])
    with pytest.raises(SolrlError, match="has no config.yaml and was started with a different config"):
        prepare_run(run, other)
    assert not run.config_path.exists()
    prepare_run(run, load_config(TINY, [*FAST, "iterations=3"]))
    assert load_run_config(run).iterations == 3
