"""Names solrl has changed, and the one-line notice an old name gets while it keeps working.

A config, a `--set` or a preset name that uses an old name still runs: the value is read as the new name and a
RenamedNotice says so once (the command line shows it as one `solrl: note:` line on stderr)."""

from __future__ import annotations

import warnings

# family: old name -> new name. 2026-11-29: the baseline family was called diffusionnft, the name of the objective it
# trains with by default, so "AWM, the diffusionnft family" read as two objectives; the objective keeps its name.
FAMILIES = {"diffusionnft": "baseline"}


class RenamedNotice(FutureWarning):
    """An old name that still works."""


def family(name: object) -> object:
    """The family `name` as it is called now (a notice when it was an old name); anything else unchanged."""
    new = FAMILIES.get(name) if isinstance(name, str) else None
    if new is None:
        return name
    warnings.warn(RenamedNotice(f"family {name} is now called {new}; write family: {new} (the objective keeps the "
                                f"name {name})"), stacklevel=2)
    return new


def config_name(name: str, known) -> str | None:
    """The packaged config or preset an old `name` is called now (a notice), when one of `known` is; else None:
    `flux1_diffusionnft_pickscore` -> `flux1_baseline_pickscore`, `families/diffusionnft` -> `families/baseline`."""
    for old, new in FAMILIES.items():
        for was, now in ((f"_{old}_", f"_{new}_"), (f"families/{old}", f"families/{new}")):
            current = name.replace(was, now, 1)
            if current != name and current in known:
                warnings.warn(RenamedNotice(f"{name} is now called {current}"), stacklevel=2)
                return current
    return None
