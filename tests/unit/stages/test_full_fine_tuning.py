"""`train.adapter: full` on the embedded model, stage by stage in this process: the initial checkpoint holds no
weights (θ = θ_old = W0), the update trains every weight and saves θ, θ_old, the EMA and AdamW's state with
torch.distributed.checkpoint, the next iteration's explore copy and regenerate sample θ_old and its update resumes
AdamW, the evaluation reads the EMA, and the cached W0 is never written. What it cannot do yet is refused naming
the key. The policy itself, on one process and on 2 ranks: tests/unit/rl/test_full_policy.py,
tests/e2e/test_full_policy_ranks.py."""

from __future__ import annotations

import json

import pytest
import torch

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.stages.checkpoints import POLICY_DIR, STATE_FILE, full_weights
from solrl_core.stages.runner import run_stage

pytestmark = pytest.mark.slow  # whole iterations: `make test` runs it, `make test-fast` not

SMALL = ["prompts.per_iteration=2", "explore.seeds_per_prompt=4", "explore.batch_size=4", "select.k=2",
         "explore.steps=3", "regenerate.steps=4", "regenerate.batch_size=4", "train.micro_batch=16", "eval.every=0",
         "eval.rewards=null", "eval.gold=null", "tracking.grid_prompts=0", "train.adapter=full",
         "train.optimizer.lr=1e-5"]


def test_two_iterations_train_every_weight_and_leave_w0_alone(tmp_path, one_torch_thread):
    from solrl_core.evaluate import policy_transformer

    cfg = load_config(ROOT / "configs" / "families" / "sol_rl.yaml", SMALL)
    run = RunDir(tmp_path / "run")
    backbone = load_backbone(cfg)
    w0 = {k: v.clone() for k, v in backbone.transformer.state_dict().items()}
    for iteration in (0, 1):
        for stage in STAGES:
            run_stage(run, cfg, iteration, stage, progress=False)
    assert not (run.init_dir / POLICY_DIR).exists()
    first, second = (run.checkpoint_dir(i) for i in (0, 1))
    written = sorted(p.name for p in (first / POLICY_DIR).iterdir())  # safetensors and a JSON index: no pickle
    assert written == ["model-00001-of-00001.safetensors", "model.safetensors.index.json"]
    state = json.loads((second / STATE_FILE).read_text())
    assert state["adapter"] == "full" and state["step"] == 2 * cfg.train.optimizer_steps  # AdamW resumed
    assert all(torch.equal(v, w0[k]) for k, v in load_backbone(cfg).transformer.state_dict().items())

    theta_old = full_weights(backbone, second, "old")
    assert theta_old.keys() == dict(backbone.transformer.named_parameters()).keys()
    moved = [k for k, v in theta_old.items() if not torch.equal(v, w0[k])]
    assert len(moved) > len(theta_old) // 2  # every kind of weight trains, not a few layers
    quantized = json.loads((run.stage_dir(1, "quantize") / "report.json").read_text())
    assert quantized["totals"]["layers_replaced"] > 0

    evaluated, ema_used = policy_transformer(cfg, second)
    ema = full_weights(backbone, second, "ema")
    assert ema_used and all(torch.equal(p, ema[k]) for k, p in evaluated.named_parameters())
    assert not all(torch.equal(ema[k], theta_old[k]) for k in moved)


@pytest.mark.parametrize("sets, key", [
    (["quant.lora_branch=true"], "quant.lora_branch: a LoRA branch beside the quantized W0 needs LoRA"),
    (["explore.sibling.path=/x", "explore.sibling.policy=delta"], "explore.sibling.policy: delta adds θ_old's"),
])
def test_what_full_fine_tuning_cannot_do_yet_is_refused_naming_the_key(sets, key):
    with pytest.raises(SolrlError, match=key):
        load_config(ROOT / "configs" / "families" / "sol_rl.yaml", ["train.adapter=full", *sets])
