"""The training runs of the GPU acceptance (`solrl_core.doctor.acceptance`): a few iterations of a config through the
library alone, in this process, with the loop the Prefect flows run (`solrl_core.method.run_iteration`) and its plain
step runner: `run_config.prepare_run`, then the steps of each iteration in order, then one held-out evaluation
(`evaluate.run_eval`) after the last.

The runs' subjects: the config's own model ("embedded": configs/demo.yaml's shipped model), or a tiny random-weight
model made by `solrl make-tiny`'s library function (`models.backbones.tiny.make_tiny_model`) run with that tiny
model's own run overrides (`tiny_bundle.tiny_run_overrides`), except its prompt file and reward checkpoints, which
are not written here: those runs keep the config's prompts and rewards.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

EMBEDDED = "embedded"
TINY_PREFIX = "tiny-"
# keys of the tiny model's run overrides a run does not take: they name the files `solrl make-tiny` writes beside the
# model (prompts, reward checkpoints), which the acceptance does not write
TINY_KEYS_LEFT_OUT = (("prompts",), ("reward_models",), ("eval", "prompts"))


def tiny_model_of(subject: str) -> str | None:
    """The `make-tiny` model name of a run subject ("tiny-flux1" -> "flux1"), None for the config's own model."""
    return subject[len(TINY_PREFIX):] if subject.startswith(TINY_PREFIX) else None


def set_items(data: dict, prefix: str = "") -> list[str]:
    """``--set`` items (``a.b=value``, values as JSON, which the overrides parse as YAML) of a nested mapping."""
    out = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += set_items(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def tiny_overrides(model: str, directory: Path) -> list[str]:
    """``--set`` items running a config on the tiny ``model`` written in ``directory``: model.path and the tiny
    model's own run overrides, less TINY_KEYS_LEFT_OUT."""
    from solrl_core.models.backbones.tiny import tiny_spec
    from solrl_core.tiny_bundle import tiny_run_overrides

    data = tiny_run_overrides(tiny_spec(model).kind, {}, directory / "prompts.txt")
    for keys in TINY_KEYS_LEFT_OUT:
        node = data
        for key in keys[:-1]:
            node = node.get(key, {})
        node.pop(keys[-1], None)
    return [f"model.path={json.dumps(str(directory))}", *set_items(data)]


def run_overrides(iterations: int, device: str, dtype: str | None, precision: str) -> list[str]:
    """What every acceptance run sets: its length, device, dtype (None: the config's) and explore precision, one
    update process, and that one device alone (the stages run in this process: on a machine of several GPUs, `auto`
    would spread their shards over all of them)."""
    one = "cuda:0" if device == "cuda" else device
    out = [f"iterations={iterations}", f"model.device={device}", f"explore.precision={precision}",
           "train.processes=1", f"orchestration.devices=[{one}]"]
    return out + ([f"model.dtype={dtype}"] if dtype else [])


def run_training(run_dir: Path, cfg, iterations: int, evaluate: bool, record: dict) -> None:
    """Run ``iterations`` iterations of ``cfg`` in a fresh ``run_dir`` (anything there is removed first), then one
    evaluation if ``evaluate``; fill ``record`` as it goes, so that it holds what ran when a stage raises:
    ``stage_seconds[iteration][stage]`` (the manifests' summary.seconds), ``rewards[iteration]`` (the score stages'
    means, the update's loss), ``evaluation`` (metrics and seconds), ``at`` (the stage running, removed at the end)
    and ``peak_gib`` (torch.cuda.max_memory_allocated over the run, None off CUDA)."""
    from solrl_core.method import run_iteration
    from solrl_core.stages.runner import plain_step_runner
    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run

    cuda = torch.device(cfg.model.device).type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    shutil.rmtree(run_dir, ignore_errors=True)
    run = RunDir(run_dir)
    record.update(run_dir=str(run_dir), stage_seconds={}, rewards={})
    try:
        with run.hold():
            prepare_run(run, cfg)
            plain = plain_step_runner(run, cfg)

            def run_step(stage: str, iteration: int) -> dict:  # the plain runner, recording as it goes
                record["at"] = f"{stage} (iteration {iteration})"
                manifest = plain(stage, iteration)
                record["stage_seconds"].setdefault(str(iteration), {})[stage] = manifest["summary"]["seconds"]
                _note_rewards(record["rewards"].setdefault(str(iteration), {}), stage, manifest["summary"])
                return manifest

            for iteration in range(iterations):
                run_iteration(cfg, iteration, run_step)
            if evaluate:
                from solrl_core.evaluate import run_eval

                record["at"] = f"evaluation after {iterations} iterations"
                result = run_eval(run, cfg, iterations, progress=False)
                record["evaluation"] = {"step": iterations, "metrics": result["metrics"],
                                        "seconds": result.get("seconds")}
        record.pop("at", None)
    finally:
        record["peak_gib"] = torch.cuda.max_memory_allocated() / 2**30 if cuda else None


def _note_rewards(rewards: dict, stage: str, summary: dict) -> None:
    """The reward figures of a stage's summary: the explore pool's and the trained samples' mean reward, the loss."""
    if stage == "score_explore":
        rewards["explore_mean"] = summary.get("mean")
    elif stage == "score_final":
        rewards["final_mean"] = summary.get("mean")
    elif stage == "update":
        rewards["loss"] = summary.get("loss")
