"""Scoring overlapped with sampling (score.overlap): the same rewards bit for bit as scoring afterwards, resumable
like the pool; non-finite rewards stop the run naming the reward, the row, its prompt and seed."""

import math
import shutil

import numpy as np
import pytest
import zarr

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.run.pool import CandidateWriter, read_table
from solrl_core.rewards import load_rewards
from solrl_core.rewards.base import Reward
from solrl_core.rewards.registry import REWARDS
from solrl_core.rewards.tiny import sample_batch, write_tiny_clip
from solrl_core.run.rundir import RunDir
from solrl_core.stages.pool_scoring import SCORES, InlineScorer, ScoreStore
from solrl_core.stages.draws import iteration_prompts
from solrl_core.stages.runner import run_stage

pytestmark = [pytest.mark.usefixtures("one_torch_thread"),
              pytest.mark.slow]  # the explore stage sampled again and again: make test runs it, make test-fast not

N_ROWS, SAMPLE_BATCH = 11, 2


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    path = write_tiny_clip(tmp_path_factory.mktemp("clip") / "PickScore_v1", 0, "gelu", math.log(1 / 0.07))
    # batch sizes that do not divide the sampling batch, nor each other
    return {"pickscore": {"path": str(path), "batch_size": 3}, "jpeg": {"batch_size": 4},
            "embedded": {"batch_size": 5}}


WEIGHTS = {"embedded": 1.0, "pickscore": 0.5, "jpeg": 0.01}


@pytest.fixture(scope="module")
def rows():
    images, prompts = sample_batch(N_ROWS, 32, seed=4)
    return images, prompts, 1000 + np.arange(N_ROWS)


def _reference(rewards, images, prompts):
    """Each reward on the whole pool at once (its own batches from row 0)."""
    return {name: reward(images, prompts) for name, reward in rewards.items()}


def _sample(pool, scorer, images, prompts, seeds, start=0, stop=N_ROWS):
    """What sample_into_pool does, minus the model: commit batches of SAMPLE_BATCH rows and call the hook."""
    unique = list(dict.fromkeys(prompts))
    writer = CandidateWriter.open(pool, N_ROWS, images.shape[1:], None, {"prompts": unique})
    assert writer.committed == start
    while start < stop:
        rows = slice(start, min(start + SAMPLE_BATCH, N_ROWS))
        columns = {"prompt_index": np.array([unique.index(p) for p in prompts[rows]], np.int32),
                   "seed": seeds[rows], "image": images[rows]}
        writer.write_batch(start, columns)
        if scorer is not None:
            scorer.on_commit(start, columns)
        start = rows.stop


def _scorer(pool, rewards, prompts, seeds):
    return InlineScorer(pool, rewards, prompts, seeds, "the test pool")


def test_inline_scores_equal_scoring_afterwards_also_after_a_crash(tmp_path, models, rows):
    images, prompts, seeds = rows
    rewards = load_rewards(WEIGHTS, models)
    expected = _reference(rewards, images, prompts)

    pool = tmp_path / "a" / "pool.zarr"
    scorer = _scorer(pool, rewards, prompts, seeds)
    _sample(pool, scorer, images, prompts, seeds)
    scorer.finish()
    scorer.close()
    for name in WEIGHTS:
        assert np.array_equal(scorer.store.values[name], expected[name]), name
    stored = zarr.open_group(pool.parent / SCORES, mode="r")
    assert dict(stored.attrs["committed"]) == dict.fromkeys(WEIGHTS, N_ROWS)
    assert np.array_equal(stored["reward_pickscore"][...], expected["pickscore"])

    # killed after 3 sampling batches (6 rows): the scorer stops; what it committed is on disk, in whole batches
    pool = tmp_path / "b" / "pool.zarr"
    scorer = _scorer(pool, rewards, prompts, seeds)
    _sample(pool, scorer, images, prompts, seeds, stop=6)
    scorer.close()
    stored = zarr.open_group(pool.parent / SCORES, mode="r")
    committed = dict(stored.attrs["committed"])
    for name, count in committed.items():  # how far it got depends on timing; whole batches, correct scores
        assert count <= 6 and count % models[name]["batch_size"] == 0, (name, count)
        assert np.array_equal(stored[f"reward_{name}"][:count], expected[name][:count])
    # the resumed stage scores the rest; rows committed before the crash come back from the pool
    scorer = _scorer(pool, rewards, prompts, seeds)
    assert scorer.store.committed == committed
    _sample(pool, scorer, images, prompts, seeds, start=6)
    scorer.finish()
    scorer.close()
    for name in WEIGHTS:
        assert np.array_equal(scorer.store.values[name], expected[name]), name

    # the same with the scores of a crash at known counts (garbage beyond them): only the rest is scored again
    group = zarr.open_group(pool.parent / SCORES, mode="r+")
    for name in WEIGHTS:
        group[f"reward_{name}"][5:] = -7.0
    group.attrs["committed"] = {"embedded": 5, "pickscore": 3, "jpeg": 4}
    scorer = _scorer(pool, rewards, prompts, seeds)
    assert scorer.store.committed == {"embedded": 5, "pickscore": 3, "jpeg": 4}
    scorer.finish()
    scorer.close()
    for name in WEIGHTS:
        assert np.array_equal(scorer.store.values[name], expected[name]), name

    # a pool sampled without overlap, scored afterwards from disk alone
    pool = tmp_path / "c" / "pool.zarr"
    _sample(pool, None, images, prompts, seeds)
    scorer = _scorer(pool, rewards, prompts, seeds)
    scorer.finish()
    scorer.close()
    for name in WEIGHTS:
        assert np.array_equal(scorer.store.values[name], expected[name]), name


def test_stored_scores_are_trusted_only_for_the_same_reward_and_pool(tmp_path, models, rows):
    images, prompts, seeds = rows
    rewards = load_rewards(WEIGHTS, models)
    pool = tmp_path / "pool.zarr"
    scorer = _scorer(pool, rewards, prompts, seeds)
    _sample(pool, scorer, images, prompts, seeds)
    scorer.finish()
    scorer.close()
    # another batch size (or other files, device, dtype) for one reward: only that reward is scored again
    other = load_rewards(WEIGHTS, {**models, "jpeg": {"batch_size": 2}})
    store = ScoreStore(N_ROWS, other)
    store.adopt(pool.parent / SCORES)
    assert store.committed == {"embedded": N_ROWS, "pickscore": N_ROWS, "jpeg": 0}
    # a pool started again (fewer committed rows than scored ones): scores beyond its committed rows are dropped
    shutil.rmtree(pool)
    _sample(pool, None, images, prompts, seeds, stop=4)
    scorer = _scorer(pool, rewards, prompts, seeds)
    assert scorer.store.committed == {"embedded": 0, "pickscore": 3, "jpeg": 4}
    scorer.close()


# ---- through the stages ------------------------------------------------------------------------------------------
STAGES = ("explore", "score_explore", "select", "regenerate", "score_final")


@pytest.fixture(scope="module")
def quantized(tmp_path_factory, models):
    """A tiny run directory with iteration 0's quantize stage done (copied by each test)."""
    root = tmp_path_factory.mktemp("quantized") / "run"
    run = RunDir(root)
    with run.hold():
        run_stage(run, _config(models, True), 0, "quantize", progress=False)
    return root


def _config(models, overlap: bool, weights=None):
    cfg = load_config(TINY, [f"score.overlap={str(overlap).lower()}"])
    cfg.rewards = dict(weights or WEIGHTS)
    cfg.reward_models = models
    return cfg


def _copy(quantized, path):
    shutil.copytree(quantized, path, ignore=shutil.ignore_patterns(".lock"))
    return RunDir(path)


def test_stages_give_the_same_rewards_with_and_without_overlap(quantized, models, tmp_path, capsys):
    results = {}
    for overlap in (True, False):
        run = _copy(quantized, tmp_path / f"overlap_{overlap}")
        with run.hold():
            for stage in STAGES:
                run_stage(run, _config(models, overlap), 0, stage, progress=not overlap)
        assert (run.stage_dir(0, "explore") / SCORES).exists() == overlap
        assert (run.stage_dir(0, "regenerate") / SCORES).exists() == overlap
        results[overlap] = {stage: read_table(run.stage_dir(0, stage) / "rewards.zarr")[0]
                            for stage in ("score_explore", "score_final")}
    assert "score explore it0" in capsys.readouterr().err  # the score stage's progress bar
    for stage, columns in results[True].items():
        assert list(columns) == list(results[False][stage])
        assert set(columns) >= {"reward", "reward_embedded", "reward_pickscore", "reward_jpeg"}
        for key, values in columns.items():
            assert np.array_equal(values, results[False][stage][key]), (stage, key)
    explore = results[True]["score_explore"]
    assert len(explore["reward"]) == 16 and np.std(explore["reward_pickscore"]) > 0


class _NaNForOnePrompt(Reward):
    """Finite except for the images of one prompt."""

    name = "nan_for_one_prompt"
    bad_prompt = ""

    def score_batch(self, images, prompts):
        return np.array([math.nan if p == self.bad_prompt else 0.5 for p in prompts])


@pytest.mark.parametrize("overlap", [True, False])
def test_a_nan_reward_stops_the_run_naming_the_reward_row_prompt_and_seed(quantized, models, tmp_path, overlap,
                                                                           monkeypatch):
    name = _NaNForOnePrompt.name
    monkeypatch.setitem(REWARDS, name, _NaNForOnePrompt)
    run = _copy(quantized, tmp_path / "run")
    cfg = _config(models, overlap, {"embedded": 1.0, name: 1.0})
    prompts = iteration_prompts(cfg, 0)
    monkeypatch.setattr(_NaNForOnePrompt, "bad_prompt", prompts[1])  # rows 8..15 of the pool (8 seeds per prompt)
    with run.hold(), pytest.raises(SolrlError) as info:
        for stage in ("explore", "score_explore"):
            run_stage(run, cfg, 0, stage, progress=False)
    message = str(info.value)
    failed = "explore" if overlap else "score_explore"
    assert not run.is_complete(0, failed) and not run.is_complete(0, "select")
    pool = run.partial_dir(0, "explore") if overlap else run.stage_dir(0, "explore")
    seed = int(read_table(pool / "pool.zarr", ["seed"])[0]["seed"][8])
    assert message == (f"reward {name} is NaN for row 8 of explore/pool.zarr of iteration 0 (prompt {prompts[1]!r}, "
                       f"seed {seed}) (and 7 more rows of its batch); the run stopped here and nothing was trained on it")


def test_inline_scores_equal_the_split_score_stages_bit_for_bit_whatever_the_threads(tmp_path, rows):
    """One device scores while it samples, in its own process (2 intra-op threads on 2 cores); several devices score
    afterwards in shards, on Dask workers (1 thread: their Nanny sets OMP_NUM_THREADS=1). A torch reward on the CPU
    rounds its float32 sums by the thread count (embedded_learned: one bit, 1.2e-7, between 1 and 2 threads), so
    scoring pins its threads: the inline scores and the shards' are the same bits, and the weighted totals too."""
    from types import SimpleNamespace

    import torch

    from solrl_core.stages.pool_scoring import _totals, pool_scoring
    from solrl_core.stages.shards import plan_shards

    images, prompts, seeds = rows
    weights = {"embedded_learned": 1.0, "embedded": 0.5}
    models = {"embedded_learned": {"batch_size": 4}, "embedded": {"batch_size": 4}}  # 4: 2 threads round otherwise
    rewards = load_rewards(weights, models)
    pool = tmp_path / "pool.zarr"
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)  # the stage's process: scores on a background thread while it samples
        scorer = _scorer(pool, rewards, prompts, seeds)
        _sample(pool, scorer, images, prompts, seeds)
        scorer.finish()
        scorer.close()
        assert torch.get_num_threads() == 2  # the sampling thread keeps its own count
        torch.set_num_threads(1)  # a device worker of the split score stage
        ctx = SimpleNamespace(cfg=SimpleNamespace(reward_models=models, rewards=weights), iteration=0)
        work = pool_scoring(ctx, pool, "score", weights)
        assert (work.n_rows, work.unit) == (N_ROWS, 4)
        reports = [{"shard": shard.index, "result": work.run_shard(ctx, shard)[1]}
                   for shard in plan_shards(N_ROWS, 4, 2)]
        split_total, split = work.collect(ctx, reports)
        torch.set_num_threads(2)  # one device, scoring afterwards in the stage's own process (score.overlap off)
        whole_total, whole = work.whole(SimpleNamespace(cfg=ctx.cfg, iteration=0, progress=False))
    finally:
        torch.set_num_threads(threads)
    inline_total, inline = _totals(scorer.store.values, weights)
    for total, per in ((split_total, split), (whole_total, whole)):
        assert total.tobytes() == inline_total.tobytes()
        for name in weights:
            assert per[name].tobytes() == inline[name].tobytes(), name
    # (Scored alone with 2 threads the learned reward usually differs from these by a bit, but whether oneDNN splits
    # such a small sum over both threads depends on the machine: not asserted, the equalities above are the point.)
