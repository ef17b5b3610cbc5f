"""Fidelity guardrail: raise the explore precision (or step count) when the cheap explore stops ranking seeds well.

Each iteration compares the proxy rewards of the explore copy with the final rewards of the regenerated images
on the same seeds (Spearman ρ; the paper reports ≈ 0.93 for NVFP4 at 6 steps). When ρ stays below ``floor`` for
``patience`` consecutive iterations, the guardrail moves one rung up its ladder — a list of (explore precision,
explore steps) settings from cheapest to most faithful — and the run carries on with the new setting. A NaN ρ
(undefined: too few seeds, constant rewards) counts as below the floor: an explore copy whose ranking cannot be
checked is not trusted. After an escalation the count starts again; at the top rung the guardrail stays put.

Pure logic, no torch: the caller logs the returned ``Escalation`` (to MLflow) and applies ``guardrail.precision``
/ ``guardrail.steps``. ``state_dict()`` is plain JSON, so a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from solrl_core.models.quant.backends import CONCRETE_BACKENDS

STATE_VERSION = 1


@dataclass(frozen=True)
class Escalation:
    """One step up the ladder, decided after observing ``iteration``."""

    iteration: int
    from_level: int
    to_level: int
    from_precision: str
    from_steps: int
    to_precision: str
    to_steps: int
    window: tuple[float | None, ...]  # the `patience` Spearman values that triggered it (None = NaN)
    floor: float
    reason: str

    def to_dict(self) -> dict:
        d = asdict(self)
        d["window"] = list(self.window)
        return d


def _finite_or_none(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


@dataclass
class FidelityGuardrail:
    """See the module docstring. ``level`` is the current rung (0 = cheapest)."""

    floor: float
    patience: int
    ladder: list[tuple[str, int]]
    level: int = 0
    below: list[float | None] = field(default_factory=list)  # current run of below-floor values (None = NaN)
    last_iteration: int | None = None
    escalations: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not isinstance(self.floor, (int, float)) or math.isnan(self.floor) or not -1.0 <= self.floor <= 1.0:
            raise ValueError(f"floor must be a Spearman value in [-1, 1], got {self.floor!r}")
        self.floor = float(self.floor)
        if isinstance(self.patience, bool) or not isinstance(self.patience, int) or self.patience < 1:
            raise ValueError(f"patience must be an integer >= 1, got {self.patience!r}")
        if not self.ladder:
            raise ValueError("the ladder needs at least one (precision, steps) setting")
        ladder = []
        for rung in self.ladder:
            precision, steps = rung
            if precision not in CONCRETE_BACKENDS:
                raise ValueError(f"ladder precision {precision!r} is not one of {', '.join(CONCRETE_BACKENDS)}")
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
                raise ValueError(f"ladder steps must be integers >= 1, got {steps!r}")
            ladder.append((precision, steps))
        self.ladder = ladder
        if not 0 <= self.level < len(self.ladder):
            raise ValueError(f"level {self.level} outside the ladder (0..{len(self.ladder) - 1})")

    # ------------------------------------------------------------------ current setting

    @property
    def setting(self) -> tuple[str, int]:
        """The current (explore precision, explore steps)."""
        return self.ladder[self.level]

    @property
    def precision(self) -> str:
        return self.setting[0]

    @property
    def steps(self) -> int:
        return self.setting[1]

    @property
    def at_top(self) -> bool:
        return self.level == len(self.ladder) - 1

    # ------------------------------------------------------------------ the rule

    def observe(self, iteration: int, spearman: float) -> Escalation | None:
        """Record the ranking fidelity of ``iteration``; return an ``Escalation`` if the setting must change.

        Iterations must increase. Observing the last observed iteration again (a resumed run replaying it) is
        ignored and returns None, so a replay never counts twice.
        """
        if self.last_iteration is not None:
            if iteration == self.last_iteration:
                return None
            if iteration < self.last_iteration:
                raise ValueError(f"iteration {iteration} observed after iteration {self.last_iteration}")
        self.last_iteration = iteration
        value = float(spearman) if spearman is not None else math.nan
        if not math.isnan(value) and value >= self.floor:
            self.below = []
            return None
        self.below.append(_finite_or_none(value))
        if len(self.below) < self.patience:
            return None
        window = tuple(self.below[-self.patience :])
        self.below = []
        if self.at_top:
            return None
        old, new = self.setting, self.ladder[self.level + 1]
        shown = ", ".join("nan" if v is None else f"{v:.3f}" for v in window)
        esc = Escalation(
            iteration=iteration,
            from_level=self.level,
            to_level=self.level + 1,
            from_precision=old[0],
            from_steps=old[1],
            to_precision=new[0],
            to_steps=new[1],
            window=window,
            floor=self.floor,
            reason=(
                f"explore ranking fidelity below the floor {self.floor:g} for {self.patience} consecutive "
                f"iteration(s) (Spearman {shown}); explore {old[0]}/{old[1]} steps -> {new[0]}/{new[1]} steps"
            ),
        )
        self.level += 1
        self.escalations.append(esc.to_dict())
        return esc

    # ------------------------------------------------------------------ persistence

    def state_dict(self) -> dict:
        """Plain JSON-able state (NaN stored as null)."""
        return {
            "version": STATE_VERSION,
            "floor": self.floor,
            "patience": self.patience,
            "ladder": [[p, s] for p, s in self.ladder],
            "level": self.level,
            "below": list(self.below),
            "last_iteration": self.last_iteration,
            "escalations": [dict(e) for e in self.escalations],
        }

    @classmethod
    def from_state_dict(cls, state: dict) -> "FidelityGuardrail":
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"unsupported guardrail state version {state.get('version')!r}")
        return cls(
            floor=state["floor"],
            patience=state["patience"],
            ladder=[(p, s) for p, s in state["ladder"]],
            level=state["level"],
            below=[_finite_or_none(v) for v in state["below"]],
            last_iteration=state["last_iteration"],
            escalations=[dict(e) for e in state["escalations"]],
        )
