"""Families of one run seed share their noise: a candidate's seed is a function of (run seed, iteration, prompt slot,
candidate) alone (solrl_core/stages/draws.py), so a family that explores fewer seeds per prompt draws the first of
another's, on the same prompts: the benchmark's comparisons are paired by seed in their samples, not only in name."""

from __future__ import annotations

import numpy as np

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import RunDir
from solrl_core.stages.runner import run_stage

FULL = ["explore.precision=fp32", "explore.steps=4", "regenerate.enabled=false"]


def _explore(tmp_path, name: str, overrides: list[str]) -> dict:
    cfg = load_config(TINY, [*FULL, *overrides])
    run = RunDir(tmp_path / name)
    for stage in ("quantize", "explore"):
        run_stage(run, cfg, 0, stage, progress=False)
    table, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["seed", "latent", "prompt_index"])
    return {**table, "prompts": list(attrs["prompts"])}


def test_fewer_seeds_per_prompt_are_the_first_of_more(tmp_path, one_torch_thread):
    few = _explore(tmp_path, "baseline", ["family=baseline", "select.mode=all", "select.k=3",
                                          "explore.seeds_per_prompt=3"])
    many = _explore(tmp_path, "scaling", ["family=naive_scaling", "explore.seeds_per_prompt=8"])
    assert few["prompts"] == many["prompts"]  # the iteration's prompts: one seeded order
    for p in range(len(few["prompts"])):
        mine, theirs = few["prompt_index"] == p, many["prompt_index"] == p
        np.testing.assert_array_equal(few["seed"][mine], many["seed"][theirs][:3])
        # the same seed, model and schedule: the same sample (to the float rounding of another batch's size)
        np.testing.assert_allclose(few["latent"][mine], many["latent"][theirs][:3], rtol=1e-4, atol=1e-5)
    assert len(set(many["seed"].tolist())) == len(many["seed"])
