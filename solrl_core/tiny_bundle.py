"""`solrl make-tiny MODEL DIR`: a tiny random-weight model plus what makes an official preset run on a CPU.

DIR receives
  the tiny diffusers directory of MODEL (make_tiny_model: transformer, VAE, text encoders, tokenizers),
  rewards/          tiny reward checkpoints in the official layouts (solrl_core.rewards.tiny),
  prompts.txt       a few prompts (the official prompt set is not shipped),
  solrl_tiny.yaml   run overrides: CPU, fp32, one process, a small resolution, 2 prompts x 8 seeds, K = 4, a
                    small LoRA, evaluation off, the reward and prompt files above.
When a config's `model.path` is DIR, solrl_core.config.schema merges solrl_tiny.yaml over it (after `extends` and `--set`,
then `--set` again), so `solrl train <MODEL>_sol_rl_<reward> --set model.path=DIR` runs the
official pipeline shape end to end. The family's shape (precision, steps, select mode, regenerate) is untouched.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from solrl_core.models.backbones.tiny import make_tiny_model, tiny_spec
from solrl_core.config.schema import TINY_OVERRIDES_FILE

TINY_PROMPTS = (
    "a photo of a cat on a red sofa",
    "an astronaut riding a horse",
    "two blue squares on the left",
    "a city at night under a starry sky",
)


def tiny_run_overrides(kind: str, rewards: dict[str, dict], prompts_file: Path) -> dict:
    """The run overrides of a tiny model directory (merged over any config whose model.path points there)."""
    return {
        "model": {"kind": kind, "device": "cpu", "dtype": "float32", "resolution": 64},
        "prompts": {"train": str(prompts_file), "per_iteration": 2},
        "explore": {"seeds_per_prompt": 8, "batch_size": 8},
        "select": {"k": 4},
        "regenerate": {"batch_size": 8},
        "train": {"micro_batch": 8, "lora_rank": 4, "lora_alpha": 8, "processes": 1, "dist_backend": "gloo"},
        "eval": {"every": 0, "prompts": str(prompts_file), "num_prompts": 2, "seeds_per_prompt": 1, "steps": 2,
                 "batch_size": 2},
        "reward_models": rewards,
        "tracking": {"grid_prompts": 1},
    }


def make_tiny_bundle(model: str, out_dir: str | Path) -> dict:
    """Write the tiny model, reward checkpoints, prompts and solrl_tiny.yaml into `out_dir`; return a summary."""
    kind = tiny_spec(model).kind
    from solrl_core.rewards.tiny import write_tiny_checkpoints

    out = make_tiny_model(model, out_dir).resolve()
    rewards = write_tiny_checkpoints(out / "rewards")
    prompts_file = out / "prompts.txt"
    prompts_file.write_text("\n".join(TINY_PROMPTS) + "\n")
    overrides = tiny_run_overrides(kind, rewards, prompts_file)
    header = (f"# Run overrides of the tiny '{model}' model in this directory (written by `solrl make-tiny`).\n"
              "# Applied to any config whose model.path is this directory; --set still wins.\n")
    (out / TINY_OVERRIDES_FILE).write_text(header + yaml.safe_dump(overrides, sort_keys=False))
    return {"model": model, "kind": kind, "dir": str(out), "overrides": str(out / TINY_OVERRIDES_FILE),
            "rewards": sorted(rewards), "prompts": str(prompts_file)}
