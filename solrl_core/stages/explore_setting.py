"""The explore precision, steps, model and decode of an iteration, with the fidelity guardrail's escalations replayed."""

from __future__ import annotations

import math
from dataclasses import dataclass

from solrl_core.config.decode_plan import decode_plan
from solrl_core.models.explore_decode import DecodePlan
from solrl_core.models.quant.backends import resolve_backend
from solrl_core.models.quant.guardrail import FidelityGuardrail
from solrl_core.stages.context import StageContext


@dataclass(frozen=True)
class ExploreSetting:
    precision: str  # a concrete backend name (auto resolved)
    steps: int
    reason: str
    escalations: tuple[dict, ...] = ()
    sibling: str | None = None  # explore.sibling.path while the configured setting holds (an escalation leaves it)
    full_precision: tuple[int, int] = (0, 0)  # explore.full_precision_first/_last likewise
    decode: DecodePlan = DecodePlan()  # explore.decode likewise (an escalation decodes in full)

    def label(self) -> str:
        """E.g. "nvfp4_emulated, 10 steps, the first 1 and last 1 at full precision"."""
        first, last = self.full_precision
        full = f", the first {first} and last {last} at full precision" if first or last else ""
        return f"{self.precision}, {self.steps} steps{full}"

    def record(self) -> dict:
        """What a pool and the quantize report keep of it beside the precision and steps."""
        return {"sibling": self.sibling,
                **({"full_precision_steps": list(self.full_precision)} if any(self.full_precision) else {}),
                **self.decode.record()}


def explore_setting(ctx: StageContext) -> ExploreSetting:
    """The explore precision, steps, sibling and full-precision steps of this iteration: the configured ones, raised
    by the fidelity guardrail (to the trained model itself, every step in the rung's precision) when earlier
    iterations ranked seeds badly. Replayed from the finished
    iterations' manifests, so a resumed or re-run stage always agrees with the first run."""
    ex = ctx.cfg.explore
    choice = resolve_backend(ex.precision, ctx.cfg.model.device)
    configured = (ex.full_precision_first, ex.full_precision_last)
    if not (ex.guardrail.enabled and ctx.cfg.regenerate.enabled):
        return ExploreSetting(choice.name, ex.steps, choice.reason, sibling=ex.sibling.path, full_precision=configured,
                              decode=decode_plan(ctx.cfg))
    g = ex.guardrail
    guard = FidelityGuardrail(g.floor, g.patience, [(choice.name, ex.steps), *[tuple(r) for r in g.ladder]])
    escalations = []
    for i in range(ctx.iteration):
        summary = ctx.run.manifest(i, "score_final")["summary"]
        event = guard.observe(i, summary.get("fidelity_spearman", math.nan))
        if event is not None:
            escalations.append(event.to_dict())
    reason = choice.reason if guard.level == 0 else escalations[-1]["reason"]
    held = guard.level == 0
    return ExploreSetting(guard.precision, guard.steps, reason, tuple(escalations), ex.sibling.path if held else None,
                          configured if held else (0, 0), decode_plan(ctx.cfg) if held else DecodePlan())
