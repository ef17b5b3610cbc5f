"""The run config checked against the registries: the names it gives (backbone kind, selection rule, objective, rewards, devices)
exist, the family's settings agree, the resolution suits the backbone. The schema (solrl_core/config/schema.py)
checks values alone; this is what needs the pieces themselves, so it sits above them."""

from __future__ import annotations

from solrl_core.config.families import family_conflict
from solrl_core.config.schema import RunConfig
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.registry import check_kind, experts_problem, makes_videos, resolution_problem
from solrl_core.placement import check_device_list
from solrl_core.rewards.base import FRAME_KEYS
from solrl_core.rewards.registry import check_reward_names, parse_reward_models
from solrl_core.plugins import is_plugin
from solrl_core.rl.objectives import check_objective_name, objective_class
from solrl_core.rl.selection import selection_rule


def registry_problem(cfg: RunConfig) -> str | None:
    """One line naming the first setting of `cfg` the registries refuse, and the fix; None if every one is known."""
    try:
        check_kind(cfg.model.kind)
        rule = selection_rule(cfg.select.mode)
        check_objective_name(cfg.objective.name)
    except ConfigError as exc:
        return str(exc)
    if isinstance(cfg.orchestration.devices, list):
        try:
            check_device_list(cfg.orchestration.devices)
        except (ValueError, SolrlError) as exc:
            return str(exc)
    if not rule.every_seed and cfg.select.k > cfg.explore.seeds_per_prompt:
        return f"select.k ({cfg.select.k}) exceeds explore.seeds_per_prompt ({cfg.explore.seeds_per_prompt})"
    if rule.even_k and cfg.select.k % 2:
        return f"select.k must be even for {rule.name}, got {cfg.select.k}"
    try:
        specs = parse_reward_models(cfg.reward_models)
        if cfg.eval.gold is not None:
            check_reward_names([cfg.eval.gold])
    except SolrlError as exc:
        return ("eval.gold: " if "reward_models" not in str(exc) else "") + str(exc)
    framed = next((f"{name}.{key}" for name, spec in specs.items() for key in FRAME_KEYS
                   if getattr(spec, key) is not None), None)
    if framed and makes_videos(cfg.model) is False:
        return (f"reward_models.{framed}: model.kind {cfg.model.kind} makes images, which have no frames "
                "to pick: the setting would do nothing; remove it")
    return (family_conflict(cfg) or explore_decode_problem(cfg) or train_guidance_problem(cfg) or rollout_problem(cfg)
            or resolution_problem(cfg.model) or experts_problem(cfg))


def train_guidance_problem(cfg: RunConfig) -> str | None:
    """One line when guidance.train is set for a model without a distilled guidance input: the update never runs
    classifier-free guidance (stages/update.py `train_guidance`), so the value would do nothing."""
    from solrl_core.models.backbones.registry import kind_spec

    spec = kind_spec(cfg.model.kind)
    if spec is None or spec.defaults.distilled_guidance or cfg.guidance.train == 1.0:
        return None
    return (f"guidance.train is {cfg.guidance.train:g}, but model.kind {cfg.model.kind} has no distilled guidance "
            "input and the update never runs classifier-free guidance; set guidance.train: 1")


def explore_decode_problem(cfg: RunConfig) -> str | None:
    """One line when `explore.decode.frames: scored` cannot decode fewer frames: the model makes images, or its
    decoder is not known to be causal in time (a plug-in kind, or a video VAE that mixes later frames into earlier
    ones)."""
    from solrl_core.models.backbones.registry import kind_spec

    if cfg.explore.decode.frames == "all":
        return None
    spec = kind_spec(cfg.model.kind)
    if spec is None or spec.defaults.frames is None or not spec.causal_decoder:
        what = ("makes images" if spec is not None and spec.defaults.frames is None else
                "is not known to decode its first frames from its first latent frames alone")
        return (f"explore.decode.frames: scored decodes a video's first frames from its first latent frames, but "
                f"model.kind {cfg.model.kind} {what}; set explore.decode.frames: all")
    return None


def rollout_noise_level(cfg: RunConfig) -> float:
    """The noise level of the SDE the config's objective samples its rollouts with (0: the ODE); a registered
    objective's from its settings (no torch), a plug-in's from the class it names."""
    name = cfg.objective.name
    if is_plugin(name):
        return float(objective_class(name)(cfg.objective.options, cfg.train).sampling_noise_level())
    return getattr(cfg.objective, name).rollout_noise_level()


def rollout_problem(cfg: RunConfig) -> str | None:
    """One line naming what breaks the objective's rollouts and training times: for SDE rollouts an explore on
    another schedule than the regenerate's (an SDE sample at 6 steps is another image than at 10, so the explore
    would rank other samples than those trained on) or a guardrail rung on another step count; for a registered
    objective, what its settings cannot hold of the trained samples' schedule (an SDE window past it, more AWM strata
    than steps); None when nothing does."""
    name, explore, regen = cfg.objective.name, cfg.explore, cfg.regenerate
    steps = regen.steps if regen.enabled else explore.steps  # the schedule of the samples the update trains on
    own = None if is_plugin(name) else getattr(cfg.objective, name).schedule_problem(steps)
    if rollout_noise_level(cfg) <= 0:
        return own
    if regen.enabled and explore.steps != regen.steps:
        return (f"objective {name} samples SDE rollouts, and a seed's SDE sample at {explore.steps} steps is another "
                f"image than at {regen.steps} (every step draws noise): the explore runs the regenerate's schedule, "
                f"so that a seed's explore and regenerated samples differ by precision alone; set explore.steps: "
                f"{regen.steps} (explore.precision, explore.cache, explore.sibling or explore.full_precision_first/"
                "_last keep the sample and make the explore cheaper)")
    if regen.enabled and explore.guardrail.enabled:
        off = [rung for rung in explore.guardrail.ladder if rung[1] != regen.steps]
        if off:
            return (f"explore.guardrail.ladder: the rung {list(off[0])} samples {off[0][1]} steps, but objective "
                    f"{name} samples SDE rollouts on the regenerate's {regen.steps} steps; give every rung "
                    f"{regen.steps} steps (e.g. [[fp8_emulated, {regen.steps}], [fp32, {regen.steps}]])")
    return own
