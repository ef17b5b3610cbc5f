"""The four method families and what each one's explore / select / regenerate settings must say.

All four are configs of one pipeline (docs/method.md, "The four families"); `family` names which one a config is,
and `family_conflict` refuses a config whose settings say another:

=============  ================================  ============  ==========
family         explore precision                 select.mode   regenerate
=============  ================================  ============  ==========
baseline       full (fp32 / bf16)                all           off
naive_scaling  full (fp32 / bf16)                K of N        off
naive_quant    4-bit / 8-bit (auto, nvfp4, fp8)  K of N        off
sol_rl         a cheaper proxy (see below)       K of N        on
=============  ================================  ============  ==========

sol_rl's explore only ranks seeds; the regenerated samples are trained on. Its proxy is cheaper than the regenerate
copy by precision (the official NVFP4, 6 steps) or, at full precision, by fewer steps than `regenerate.steps` (a
few-step proxy: the CPU tests and the quick local checks use it), or by a step cache or another model
(`explore.cache`, `explore.sibling`), which only sol_rl may explore with, as with a cheaper decode (`explore.decode`): the other families train on their explore
samples. A full-precision explore at the regenerate's step
count would sample every selected image twice at full cost.
Step counts and N/K are otherwise free (the official ones are in configs/parts/families/).
"""

from __future__ import annotations

from solrl_core.config.schema import FAMILIES, RunConfig
from solrl_core.rl.selection import selection_rule

__all__ = ["FAMILIES", "FULL_PRECISIONS", "family_conflict"]

FULL_PRECISIONS = ("fp32", "bf16")  # full precision (bf16 = the GPU model dtype; the planner prices fp32 as bf16)


def family_conflict(cfg: RunConfig) -> str | None:
    """One line naming the first setting of `cfg` that contradicts `cfg.family`, and the fix; None if consistent."""
    family, explore, regen = cfg.family, cfg.explore, cfg.regenerate
    full = explore.precision in FULL_PRECISIONS
    head = f"family {family}:"
    if family in ("baseline", "naive_scaling", "naive_quant") and regen.enabled:
        return (f"{head} regenerate.enabled is true, but {family} trains on the explore samples themselves; set "
                "regenerate.enabled: false (or family: sol_rl)")
    if family == "sol_rl" and not regen.enabled:
        return (f"{head} regenerate.enabled is false, but sol_rl trains on the selected seeds regenerated at full "
                "precision; set regenerate.enabled: true (or family: naive_quant / naive_scaling)")
    if family != "sol_rl" and explore.cache.kind != "none":
        return (f"{head} explore.cache.kind is {explore.cache.kind}, but {family} trains on the explore samples "
                "themselves, which a cache's extrapolated steps would make other than the model's; set "
                "explore.cache.kind: none (or family: sol_rl, where a cache only ranks the seeds)")
    if family != "sol_rl" and explore.sibling.path is not None:
        return (f"{head} explore.sibling.path is set, but {family} trains on the explore samples themselves, which "
                "must be the trained model's; unset explore.sibling.path (or family: sol_rl, where a sibling only "
                "ranks the seeds)")
    decode = explore.decode
    if family != "sol_rl" and (decode.frames != "all" or decode.scale != 1.0):
        return (f"{head} explore.decode is set, but {family} trains on the explore samples themselves and scores "
                "them as decoded; set explore.decode.frames: all and explore.decode.scale: 1 (or family: sol_rl, "
                "where the explore's decode only ranks the seeds)")
    every_seed = selection_rule(cfg.select.mode).every_seed
    if family == "baseline" and not every_seed:
        return (f"{head} select.mode is {cfg.select.mode}, but the baseline family trains on every sampled seed; set "
                "select.mode: all (or family: naive_scaling to train on K of N)")
    if family != "baseline" and every_seed:
        return (f"{head} select.mode is {cfg.select.mode}, but {family} trains on K of the N explored seeds; set select.mode: "
                "best_worst (or family: baseline)")
    if family in ("baseline", "naive_scaling") and not full:
        return (f"{head} explore.precision is {explore.precision}, but {family} samples at full precision; set "
                "explore.precision: fp32 (or family: naive_quant)")
    if family == "naive_quant" and full:
        return (f"{head} explore.precision is {explore.precision}, but naive_quant samples in low precision; set "
                "explore.precision: auto (or family: naive_scaling)")
    selective = explore.full_precision_first + explore.full_precision_last
    if selective and full:
        return (f"{head} explore.full_precision_first/_last run some explore steps at full precision instead of "
                f"explore.precision, which is {explore.precision} already: they change nothing; set them to 0 (or "
                "explore.precision: auto)")
    if selective >= explore.steps:
        return (f"{head} explore.full_precision_first ({explore.full_precision_first}) + _last "
                f"({explore.full_precision_last}) cover all {explore.steps} explore steps, so none runs in "
                f"{explore.precision}; leave at least one step to it (or set explore.precision: fp32)")
    cheaper_model = explore.cache.kind != "none" or explore.sibling.path is not None
    if family == "sol_rl" and full and explore.steps >= regen.steps and not cheaper_model:
        return (f"{head} explore.precision is {explore.precision} with explore.steps ({explore.steps}) >= "
                f"regenerate.steps ({regen.steps}), so the explore is no cheaper than the regenerate; set "
                "explore.precision: auto (or fewer explore.steps, or family: naive_scaling)")
    return None
