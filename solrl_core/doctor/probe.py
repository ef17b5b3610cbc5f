"""What this machine runs, one line per question, from the rules the pipeline itself applies.

Nothing is re-derived here: precisions come from ``solrl_core.models.quant.backends.resolve_backend`` (the same call
``explore.precision`` goes through, with its one-line reasons and refusals), Transformer Engine from
``backends.te_support``, and ``orchestration.devices: auto`` from ``solrl_core.placement.resolve_devices``.
Tests play other machines by monkeypatching ``backends.device_capability`` / ``backends.te_support`` and
``torch.cuda``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import SimpleNamespace

import torch

from solrl_core.errors import SolrlError
from solrl_core.models.quant import backends


@dataclass(frozen=True)
class Check:
    """One line of the doctor: ``key`` (stable, for --json), ``ok`` (None = informational), ``text``."""

    key: str
    ok: bool | None
    text: str


def cuda_devices() -> list[dict]:
    """Every visible CUDA device: ``{"device", "name", "capability", "memory_gib"}`` (empty without CUDA)."""
    if not torch.cuda.is_available():
        return []
    out = []
    for k in range(torch.cuda.device_count()):
        device = f"cuda:{k}"
        cap = backends.device_capability(device)
        props = torch.cuda.get_device_properties(k)
        out.append({"device": device, "name": torch.cuda.get_device_name(k),
                    "capability": list(cap) if cap else None,
                    "memory_gib": round(props.total_memory / 2**30, 1)})
    return out


def te_version() -> str | None:
    """The installed transformer-engine distribution's version, or None (reads metadata; imports nothing)."""
    from solrl_core.models.quant.te_backend import installed_te_version

    return installed_te_version()


def _precision(name: str, device: str) -> Check:
    """Whether ``explore.precision: name`` runs on ``device``: the backend's own reason or refusal."""
    try:
        choice = backends.resolve_backend(name, device)
    except SolrlError as exc:
        return Check(name, False, f"{name}: no — {exc}")
    return Check(name, True, f"{name}: yes ({choice.impl}) — {choice.reason}")


def devices_auto() -> tuple[list[str], str]:
    """What ``orchestration.devices: auto`` resolves to here, with ``model.device`` cuda when CUDA is available."""
    from solrl_core.placement import resolve_devices

    model_device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg = SimpleNamespace(model=SimpleNamespace(device=model_device),
                          orchestration=SimpleNamespace(devices="auto", dask_address=None),
                          train=SimpleNamespace(processes=1, nodes=1))
    return resolve_devices(cfg), model_device


def checks() -> list[Check]:
    """The doctor's lines, in order (see ``format_checks``)."""
    devs = cuda_devices()
    device = devs[0]["device"] if devs else "cpu"
    out = []
    if devs:
        listed = "; ".join(f"{d['device']} {d['name']} sm_{d['capability'][0]}{d['capability'][1]} "
                           f"{d['memory_gib']} GiB" for d in devs)
        out.append(Check("cuda", True, f"CUDA: {len(devs)} device(s), torch {torch.__version__} "
                                       f"(CUDA {torch.version.cuda}): {listed}"))
    else:
        out.append(Check("cuda", False, f"CUDA: not available (torch {torch.__version__}); everything runs on the CPU"))
    version = te_version()
    if version is None:
        out.append(Check("transformer_engine", False, "Transformer Engine: not installed (the `gpu` extra; needs CUDA)"))
    else:
        _, why = backends.te_support("fp8")
        importable = "not importable" not in why
        out.append(Check("transformer_engine", importable,
                         f"Transformer Engine: {version}, {'importable' if importable else why}"))
    out.append(_precision("fp8", device))
    out.append(_precision("nvfp4", device))
    try:
        auto = backends.resolve_backend("auto", device)
        out.append(Check("auto", None, f"explore.precision auto on {device}: {auto.name} — {auto.reason}"))
    except SolrlError as exc:  # a Transformer Engine too old for auto to use it
        out.append(Check("auto", False, f"explore.precision auto on {device}: no — {exc}"))
    used, model_device = devices_auto()
    out.append(Check("devices", None, f"orchestration.devices auto (model.device {model_device}): {', '.join(used)}"))
    return out


def report() -> dict:
    """The doctor as a plain dict (what --json prints)."""
    return {"checks": [asdict(c) for c in checks()], "cuda_devices": cuda_devices(),
            "transformer_engine": te_version(), "torch": torch.__version__}


def format_checks(rows: list[Check]) -> str:
    mark = {True: "ok  ", False: "no  ", None: "    "}
    return "\n".join(f"{mark[c.ok]}{c.text}" for c in rows)
