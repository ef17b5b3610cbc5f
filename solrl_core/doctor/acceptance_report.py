"""The GPU acceptance's report: DIR/acceptance.json (the record) and DIR/acceptance.md (the same, to read).

acceptance.json:
  ``invocations``  one per command that wrote into DIR: when, the arguments, the machine (``machine``: GPUs with
                   name, capability and memory, torch and its CUDA/cuDNN, Python, the versions of the packages the
                   runs import)
  ``steps``        by name, in run order; each: ``kind`` (bench, make, run), ``ok``, ``seconds``, ``invocation``
                   (index), and when it failed ``error`` (one line: the exception's type and first line, and the
                   innermost solrl_core frame), ``traceback`` (its last lines), ``at`` (a run's stage then running).
                   A bench: ``report`` (`solrl doctor --gpu-bench`'s report.json, also written in DIR/bench/MODEL/).
                   A run: ``subject``, ``precision``, ``stage_seconds`` / ``rewards`` per iteration, ``evaluation``,
                   ``peak_gib``, ``run_dir``.
  ``running``      the step under way (present only while one runs, or if the command was killed in it).
A later command with the same DIR replaces the steps it runs again and keeps the others.
"""

from __future__ import annotations

import json
import platform
import time
import traceback
from importlib import metadata
from pathlib import Path

import torch

REPORT_KEY = "solrl_acceptance_report"
JSON_NAME, MD_NAME = "acceptance.json", "acceptance.md"
# distributions whose versions the report records (the runs import them; a GPU image may lack some: docs/gpu.md)
PACKAGES = ("torch", "diffusers", "transformers", "peft", "accelerate", "safetensors", "zarr", "numcodecs",
            "pydantic", "numpy", "tokenizers", "huggingface-hub")
TRACEBACK_LINES = 40


def machine(device: str) -> dict:
    """What the report says about this machine (see the module docstring)."""
    from solrl_core.doctor.probe import cuda_devices

    versions = {}
    for dist in PACKAGES:
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = None
    cudnn = torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None
    return {"device": device, "gpus": cuda_devices(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": cudnn, "python": platform.python_version(), "packages": versions}


def failure(exc: BaseException) -> dict:
    """``error`` (one line) and ``traceback`` (its last lines) of an exception a step raised."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "solrl_core" in f.filename]
    where = ""
    if ours:
        f = ours[-1]
        where = f" ({f.filename[f.filename.rindex('solrl_core'):]}:{f.lineno})"
    lines = str(exc).strip().splitlines()
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    return {"error": f"{type(exc).__name__}: {lines[0] if lines else ''}{where}",
            "traceback": "\n".join(text[-TRACEBACK_LINES:])}


class Report:
    """The report in ``out``: earlier steps read back, each step written as soon as it ends."""

    def __init__(self, out: Path, argv: list[str], device: str):
        self.out = Path(out)
        self.data = {REPORT_KEY: 1, "invocations": [], "steps": {}}
        previous = self.out / JSON_NAME
        if previous.is_file():
            try:
                old = json.loads(previous.read_text())
            except (OSError, ValueError):
                old = None
            if isinstance(old, dict) and old.get(REPORT_KEY) == 1:
                self.data = old
                self.data.pop("running", None)
        self.data["invocations"].append({"started": time.strftime("%Y-%m-%d %H:%M:%S"), "argv": list(argv),
                                         "machine": machine(device)})
        self.invocation = len(self.data["invocations"]) - 1

    def start(self, name: str) -> None:
        self.data["running"] = name
        self.write()

    def finish(self, name: str, step: dict) -> None:
        self.data.pop("running", None)
        self.data["steps"].pop(name, None)  # a step run again moves to the end
        self.data["steps"][name] = {**step, "invocation": self.invocation}
        self.write()

    def write(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / JSON_NAME).write_text(json.dumps(self.data, indent=2) + "\n")
        (self.out / MD_NAME).write_text(format_markdown(self.data))


# ------------------------------------------------------------------------------------------------- markdown


def _num(x, fmt: str = ".2f") -> str:
    return "–" if x is None else format(x, fmt)


def _machine_line(m: dict) -> str:
    gpus = "; ".join(f"{g['name']} (sm_{g['capability'][0]}{g['capability'][1]}, {g['memory_gib']} GiB)"
                     if g.get("capability") else g["name"] for g in m["gpus"]) or f"no GPU ({m['device']})"
    packages = ", ".join(f"{k} {v}" for k, v in m["packages"].items() if k != "torch" and v)
    return (f"{gpus}; torch {m['torch']}, CUDA {m['cuda'] or '–'}, cuDNN {m['cudnn'] or '–'}, "
            f"Python {m['python']}; {packages}")


def _result(step: dict) -> str:
    if step["ok"]:
        return "pass"
    return f"FAIL at {step['at']}" if step.get("at") else "FAIL"


def format_markdown(data: dict) -> str:
    steps = data["steps"]
    ok = sum(1 for s in steps.values() if s["ok"])
    out = ["# solrl GPU acceptance", ""]
    for i, inv in enumerate(data["invocations"]):
        out.append(f"- command {i} ({inv['started']}): {_machine_line(inv['machine'])}")
    out += ["", f"{ok} of {len(steps)} steps passed."]
    if data.get("running"):
        out.append(f"**Unfinished:** `{data['running']}` was running when the report was last written.")
    out += ["", "| step | command | result | seconds | error |", "|---|---:|---|---:|---|"]
    for name, s in steps.items():
        error = (s.get("error") or "").replace("|", "\\|")
        out.append(f"| {name} | {s['invocation']} | {_result(s)} | {_num(s.get('seconds'), '.1f')} | {error} |")
    benches = {n: s for n, s in steps.items() if s["kind"] == "bench" and s.get("report")}
    if benches:
        out += ["", "## Benches", "", "The transformer forward with random weights at the explore batch "
                "(`solrl doctor --gpu-bench`, whose report.md in bench/MODEL/ says more). Peaks: "
                "torch.cuda.max_memory_allocated, GiB.", "",
                "| model | blocks | batch | dtype | precision | implementation | ms / forward | TFLOP/s forward | "
                "TFLOP/s share | peak GiB |", "|---|---|---:|---|---|---|---:|---:|---:|---:|"]
        for s in benches.values():
            r = s["report"]
            m = r["model"]
            blocks = f"{m['blocks']} / {m['blocks_total']}"
            for precision, row in r["throughput"].items():
                if "skipped" in row:
                    out.append(f"| {m['key']} | {blocks} | {m['batch']} | {m['dtype']} | {precision} | not run | "
                               "| | | |")
                    continue
                out.append(f"| {m['key']} | {blocks} | {m['batch']} | {m['dtype']} | {precision} | {row['impl']} | "
                           f"{_num(1e3 * row['seconds_per_forward'], '.1f')} | {_num(row['tflops_forward'], '.3g')} | "
                           f"{_num(row['tflops'], '.3g')} | {_num(row['peak_gib'], '.1f')} |")
        out.append("")
        for s in benches.values():
            r = s["report"]
            st = r.get("stages", {})
            peaks = ", ".join(f"{k} {_num(v, '.1f')} GiB" for k, v in st.get("peak_gib", {}).items())
            errors = ", ".join(f"{k.replace('_vs_', ' vs ')} {v:.3g}" for k, v in r["rel_error"].items())
            out.append(f"- {r['model']['key']}: micro-batch {st.get('micro_batch')} peaks: "
                       f"{peaks or st.get('error', '–')}; relative errors: {errors or '–'}")
    runs = {n: s for n, s in steps.items() if s["kind"] == "run"}
    if runs:
        from solrl_core.run.stage_table import STAGES

        out += ["", "## Runs", "", "Seconds per stage (the stage manifests' summary.seconds), the explore pool's and "
                "the trained samples' mean reward, the update's loss; peak: torch.cuda.max_memory_allocated over the "
                "run (the process's cached models of earlier runs included).", "",
                "| run | iteration | " + " | ".join(STAGES) + " | explore reward | final reward | loss |",
                "|---|---:|" + "---:|" * (len(STAGES) + 3)]
        for name, s in runs.items():
            for it, seconds in s.get("stage_seconds", {}).items():
                rw = s.get("rewards", {}).get(it, {})
                cells = " | ".join(_num(seconds.get(stage)) for stage in STAGES)
                out.append(f"| {name} | {it} | {cells} | {_num(rw.get('explore_mean'), '.4f')} | "
                           f"{_num(rw.get('final_mean'), '.4f')} | {_num(rw.get('loss'), '.4f')} |")
        out.append("")
        for name, s in runs.items():
            ev = s.get("evaluation")
            metrics = ", ".join(f"{k} {v:.4f}" for k, v in ev["metrics"].items()) if ev else "not run"
            out.append(f"- {name}: peak {_num(s.get('peak_gib'), '.2f')} GiB; evaluation: {metrics}")
    return "\n".join(out) + "\n"
