"""Price the planner with throughput measured on a GPU (``solrl doctor --gpu-bench``'s report.json).

The uncalibrated planner runs every precision at peak × one stated utilisation. A calibration replaces that
utilisation, per precision, by what the bench measured: utilisation(p) = measured TFLOP/s of the transformer
forward at p / the measured GPU's published peak at p (``planner.gpus``). Those fractions then apply to whichever
GPU is planned (on the measured GPU itself the planner's rate equals the measured one). A precision the bench did
not measure (e.g. nvfp4 on a Hopper) takes the measured bf16 utilisation; the plan says so.

report.json fields read here: ``device.planner_gpu`` (a ``planner.gpus`` key) and ``throughput[p].tflops``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from solrl_core.errors import SolrlError
from solrl_core.planner.gpus import PRECISIONS, get_gpu


@dataclass(frozen=True)
class Calibration:
    """Per-precision utilisation measured on ``gpu`` (a planner GPU key), from the report at ``source``."""

    source: str
    gpu: str
    measured_tflops: dict[str, float]
    utilisation: dict[str, float]

    def per_precision(self) -> dict[str, float]:
        """Utilisation of every planner precision: measured, else the measured bf16 one."""
        return {p: self.utilisation.get(p, self.utilisation["bf16"]) for p in PRECISIONS}

    def to_dict(self) -> dict:
        return {"source": self.source, "gpu": self.gpu, "measured_tflops": dict(self.measured_tflops),
                "utilisation": self.per_precision(), "measured": sorted(self.utilisation)}


def load_calibration(path: str | Path) -> Calibration:
    """Read a doctor report.json; SolrlError (one line) when it is missing, unreadable or lacks what is needed."""
    path = Path(path)
    hint = "make one with `solrl doctor --gpu-bench` on a CUDA machine"
    if not path.is_file():
        raise SolrlError(f"calibration report not found: {path}; {hint}")
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SolrlError(f"calibration report {path} is not valid JSON ({exc}); {hint}") from None
    if not isinstance(data, dict):
        raise SolrlError(f"calibration report {path} is not a JSON object; {hint}")
    gpu_key = (data.get("device") or {}).get("planner_gpu") if isinstance(data.get("device"), dict) else None
    if not gpu_key:
        raise SolrlError(f"calibration report {path} names no planner GPU (device.planner_gpu); rerun the bench "
                         "with --planner-gpu NAME")
    gpu = get_gpu(str(gpu_key))
    throughput = data.get("throughput")
    measured: dict[str, float] = {}
    if isinstance(throughput, dict):
        for precision, row in throughput.items():
            tflops = row.get("tflops") if isinstance(row, dict) else None
            if precision in PRECISIONS and isinstance(tflops, (int, float)) and tflops > 0:
                measured[precision] = float(tflops)
    if "bf16" not in measured:
        raise SolrlError(f"calibration report {path} has no measured bf16 throughput (throughput.bf16.tflops > 0); "
                         f"{hint}")
    utilisation = {}
    for precision, tflops in measured.items():
        peak = gpu.tflops(precision)
        if peak is None:
            raise SolrlError(f"calibration report {path} measured {precision} on {gpu.title}, which the planner "
                             f"lists without native {precision}")
        utilisation[precision] = tflops / peak
    return Calibration(str(path), gpu.key, measured, utilisation)


def assumption(cal: Calibration) -> str:
    """The plan's assumption line for a calibration."""
    us = ", ".join(f"{p} {u:.2f}" for p, u in cal.per_precision().items())
    missing = [p for p in PRECISIONS if p not in cal.utilisation]
    tail = f" ({', '.join(missing)} not measured: bf16's utilisation)" if missing else ""
    return f"utilisation calibrated per precision from {cal.source}, measured on {cal.gpu}: {us}{tail}"
