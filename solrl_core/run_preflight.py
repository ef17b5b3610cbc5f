"""Fail fast, before any flow starts, on what a user can fix: devices, rewards, explore precision, prompts, memory and
model weights."""

from __future__ import annotations

from solrl_core.models.backbones.base import sibling_errors
from solrl_core.models.backbones.cache import load_backbone, load_sibling
from solrl_core.models.backbones.registry import adapter_class, check_backbone_files
from solrl_core.config.schema import RunConfig
from solrl_core.placement import check_devices, splits_over_devices
from solrl_core.planner.fits import check_memory_fits
from solrl_core.errors import SolrlError
from solrl_core.prompts import check_train_prompts, eval_sources, train_sources
from solrl_core.models.quant.backends import resolve_backend
from solrl_core.models.step_cache import cache_config
from solrl_core.rewards.registry import preflight_rewards, reward_class


def preflight(cfg: RunConfig) -> None:
    """Raise a SolrlError naming what to fix. On one device the model's weights are loaded (the backbone cache keeps
    them for the stages this process runs); when device workers run the model work, their files are checked and
    nothing is loaded here."""
    check_devices(cfg)
    preflight_rewards(cfg.rewards, cfg.reward_models)
    if cfg.eval.every:
        preflight_rewards(cfg.evaluation_rewards(), cfg.reward_models)
    resolve_backend(cfg.explore.precision, cfg.model.device)
    cache_config(cfg.explore.cache.kind, cfg.explore.cache.options)  # its options, before anything is sampled
    check_train_prompts(cfg)
    check_edit_prompts(cfg)
    check_memory_fits(cfg)
    sibling = cfg.explore.sibling.path
    if splits_over_devices(cfg):
        check_backbone_files(cfg.model)
        if sibling is not None:
            with sibling_errors():
                check_backbone_files(cfg.model.model_copy(update={"path": sibling}))
    else:
        load_backbone(cfg)
        if sibling is not None:
            with sibling_errors():
                load_sibling(cfg, sibling)


def check_edit_prompts(cfg: RunConfig) -> None:
    """An edit prompt set (lines with source images) needs an editing model, with at most as many sources a prompt as
    it reads; a reward that scores edits needs an edit prompt set (served or not: its requests carry the sources); a SolrlError
    naming the key otherwise."""
    backbone = adapter_class(cfg.model.kind)
    sets = [("prompts.train", train_sources(cfg), cfg.rewards)]
    if cfg.eval.every:
        sets.append(("eval.prompts", eval_sources(cfg), cfg.evaluation_rewards()))
    for key, sources, rewards in sets:
        for name in rewards:
            if reward_class(name).edits and sources is None:
                raise SolrlError(f"reward {name} scores edits, but {key} has no source images: give an edit prompt "
                                 "set (a JSONL whose lines have \"images\")")
        if sources is None:
            continue
        if not backbone.edits:
            raise SolrlError(f"{key} is an edit prompt set (its lines have source \"images\") but model.kind "
                             f"{cfg.model.kind} does not edit images: use an editing model (e.g. flux1-kontext) or "
                             "prompts without images")
        most = max(len(s) for s in sources)
        if most > backbone.max_sources:
            raise SolrlError(f"{key}: a prompt has {most} source images, but model.kind {cfg.model.kind} edits with "
                             f"at most {backbone.max_sources}")
