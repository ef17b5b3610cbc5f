"""A tiny run on one device and copies of it run with their work split over devices (tests/unit/stages/
test_explore_shards.py in process, tests/e2e/test_explore_shards_processes.py on Dask worker processes): what is
compared, bit for bit, and the module-scoped one-device `reference` fixture."""

from __future__ import annotations

import shutil
import time

import pytest

from repo_paths import TINY
from solrl_core.run.pool import read_table
from solrl_core.torch_threads import intra_op_threads

STAGES = ("explore", "score_explore", "select", "regenerate", "score_final", "update")
COMPARED = {
    ("explore", "pool.zarr"): ["image", "latent", "seed", "prompt_index"],
    ("regenerate", "samples.zarr"): ["image", "latent", "seed", "prompt_index", "candidate_index"],
    ("score_explore", "rewards.zarr"): None,
    ("score_final", "rewards.zarr"): None,
    ("select", "selection.zarr"): None,
}
# rewards in batches of 2 rows, so that the score stages and the evaluation split too; a small evaluation
SETTINGS = ["reward_models.embedded.batch_size=2", "eval.num_prompts=2", "eval.seeds_per_prompt=2", "eval.steps=2",
            "eval.batch_size=1"]


# the update's intra-op threads, in the one-device run and in the process that orchestrates a split one: a device
# worker's rank computes with the orchestrator's threads (tasks/shards.rank_threads), so the checkpoints agree
UPDATE_THREADS = 2


def shards_config(*overrides):
    from solrl_core.config.loading import load_config

    return load_config(TINY, [*SETTINGS, *overrides])


@pytest.fixture(scope="module")
def reference(tmp_path_factory, one_torch_thread):
    """A tiny run whose iteration 0 ran quantize..update, then the evaluation after it, on one device in this
    process; and the seconds explore..update took."""
    from solrl_core.evaluate import run_eval
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run
    from solrl_core.stages.runner import run_stage

    one = RunDir(tmp_path_factory.mktemp("shards") / "one")
    cfg = prepare_run(one, shards_config())
    run_stage(one, cfg, 0, "quantize", progress=False)
    start = time.perf_counter()
    for stage in STAGES:
        with intra_op_threads(UPDATE_THREADS if stage == "update" else None):
            run_stage(one, cfg, 0, stage, progress=False)
    seconds = time.perf_counter() - start
    run_eval(one, cfg, 1)
    return one, seconds


def copy_quantized(reference, path, *overrides):
    """A copy of the reference run with only its quantize stage done, run with `overrides` (placement settings)."""
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run

    shutil.copytree(reference.root, path)
    run = RunDir(path)
    for stage in STAGES:
        run.invalidate(0, stage)
    shutil.rmtree(run.root / "eval")
    return run, prepare_run(run, shards_config(*overrides))


def assert_same_results(one, two, stages=STAGES):
    for (stage, name), columns in COMPARED.items():
        if stage not in stages:
            continue
        a, attrs_a = read_table(one.stage_dir(0, stage) / name, columns)
        b, attrs_b = read_table(two.stage_dir(0, stage) / name, columns)
        assert a.keys() == b.keys() and a
        for key in a:
            assert a[key].dtype == b[key].dtype and a[key].tobytes() == b[key].tobytes(), f"{stage}/{name}: {key}"
        assert attrs_a == attrs_b, f"{stage}/{name} attributes"
    if "update" in stages:
        for name in ("adapters.safetensors", "ema.safetensors", "optimizer.safetensors"):
            a, b = (run.checkpoint_dir(0) / name for run in (one, two))
            assert a.read_bytes() == b.read_bytes(), f"checkpoint {name}"
