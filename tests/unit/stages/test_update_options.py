"""The update's memory and guidance options: W0 shared with the policy, model.gradient_checkpointing (LoRA and full
fine-tuning), guidance.train."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.stages.checkpoints import POLICY_DIR, attach_policy
from solrl_core.stages.runner import run_stage
from solrl_core.stages.update import enable_gradient_checkpointing
from repo_paths import TINY

FAST = ["explore.precision=fp32", "explore.seeds_per_prompt=4", "select.k=2", "train.micro_batch=4"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A run with every stage of iteration 0 but the update."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    run = RunDir(tmp_path_factory.mktemp("prepared") / "run")
    cfg = load_config(TINY, FAST)
    try:
        for stage in ("quantize", "explore", "score_explore", "select", "regenerate", "score_final"):
            run_stage(run, cfg, 0, stage, progress=False)
    finally:
        torch.set_num_threads(threads)
    return run.root


def _update(prepared: Path, tmp_path: Path, name: str, *overrides: str) -> dict[str, torch.Tensor]:
    """The update's checkpoint tensors: the adapters' file, or under full fine-tuning every file of its policy
    folder (θ, θ_old, the EMA, AdamW's moments)."""
    root = tmp_path / name
    shutil.copytree(prepared, root)
    run_stage(RunDir(root), load_config(TINY, [*FAST, *overrides]), 0, "update", progress=False)
    checkpoint = root / "iter_0000" / "update" / "checkpoint"
    if not (checkpoint / POLICY_DIR).is_dir():
        return load_file(str(checkpoint / "adapters.safetensors"))
    return {f"{path.name}:{key}": value for path in sorted((checkpoint / POLICY_DIR).glob("*.safetensors"))
            for key, value in load_file(str(path)).items()}


def test_policy_trains_on_the_cached_w0_without_copying_or_changing_it(prepared, tmp_path, one_torch_thread):
    cfg = load_config(TINY, FAST)
    backbone = load_backbone(cfg)  # the process-wide cached backbone the update stage uses too
    w0 = {k: v.clone() for k, v in backbone.transformer.state_dict().items()}
    policy = attach_policy(cfg, backbone)
    cached = {p.data_ptr() for p in backbone.transformer.parameters()}
    base = [p for name, p in policy.transformer.named_parameters() if "lora_" not in name]
    assert len(base) == len(cached) and {p.data_ptr() for p in base} == cached  # the same storage, not a copy
    assert policy.trainable_parameters() and all(p.data_ptr() not in cached for p in policy.trainable_parameters())
    # peft wrapped the policy's module tree, not the cached one
    assert not hasattr(backbone.transformer, "peft_config")
    assert not any("lora" in name for name, _ in backbone.transformer.named_modules())
    adapters = _update(prepared, tmp_path, "shared")  # the real update stage, in this process
    assert any(v.abs().sum() > 0 for k, v in adapters.items() if k.startswith("default.") and "lora_B" in k)
    after = backbone.transformer.state_dict()
    assert after.keys() == w0.keys() and all(torch.equal(after[k], w0[k]) for k in w0)


@pytest.mark.parametrize("adapter", ["lora", pytest.param("full", marks=pytest.mark.slow)])  # full: a whole model
def test_gradient_checkpointing_recomputes_and_trains_the_same(prepared, tmp_path, monkeypatch, one_torch_thread,
                                                               adapter):
    calls = []
    original = torch.utils.checkpoint.checkpoint

    def counting(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(torch.utils.checkpoint, "checkpoint", counting)
    lr = ["train.optimizer.lr=1e-5"] if adapter == "full" else []  # the whole transformer moves
    plain = _update(prepared, tmp_path, "plain", f"train.adapter={adapter}", *lr)
    assert calls == []
    checkpointed = _update(prepared, tmp_path, "checkpointed", f"train.adapter={adapter}", *lr,
                           "model.gradient_checkpointing=true")
    assert len(calls) > 0  # the transformer blocks ran under torch.utils.checkpoint
    assert plain.keys() == checkpointed.keys()
    # Adam-moved weights, compared exactly: the same micro-batches and the same forward recomputed, so the same
    # arithmetic bit for bit (a tolerance would only hide a change of it, and Adam amplifies any such change)
    for key in plain:
        torch.testing.assert_close(checkpointed[key], plain[key], rtol=0, atol=0)
    if adapter == "lora":
        assert any(not torch.equal(v, torch.zeros_like(v)) for k, v in plain.items() if "lora_B" in k)
    else:  # θ moved from θ_old's start: AdamW's second moments are not all zero
        assert any(torch.count_nonzero(v) for k, v in plain.items() if "exp_avg_sq" in k)


def test_gradient_checkpointing_needs_a_model_that_supports_it():
    with pytest.raises(SolrlError, match="does not support gradient checkpointing"):
        enable_gradient_checkpointing(torch.nn.Linear(2, 2))


def test_train_guidance_needs_distilled_guidance(prepared, tmp_path, monkeypatch):
    """Refused at load for a registered kind (tests/unit/config/test_settings_that_break_a_stage.py), and by the
    update itself where the config check cannot know (a plug-in kind: the check passes)."""
    from solrl_core.config import checks

    with pytest.raises(SolrlError, match="guidance.train is 2, but model.kind embedded has no distilled guidance"):
        _update(prepared, tmp_path, "cfg", "guidance.train=2.0")
    monkeypatch.setattr(checks, "train_guidance_problem", lambda cfg: None)
    with pytest.raises(SolrlError, match="guidance.train = 2.0 needs a backbone with distilled guidance"):
        _update(prepared, tmp_path, "cfg2", "guidance.train=2.0")


def test_train_guidance_reaches_every_velocity_of_a_distilled_backbone(prepared, tmp_path, monkeypatch,
                                                                       one_torch_thread):
    backbone = load_backbone(load_config(TINY, FAST))
    seen = []
    velocity = backbone.velocity

    def recording(transformer, x_t, sigma, cond, guidance=1.0):
        seen.append(guidance)
        return velocity(transformer, x_t, sigma, cond, guidance)

    from solrl_core.config import checks

    monkeypatch.setattr(backbone, "defaults", dataclasses.replace(backbone.defaults, distilled_guidance=True))
    monkeypatch.setattr(backbone, "velocity", recording)
    monkeypatch.setattr(checks, "train_guidance_problem", lambda cfg: None)  # the kind's spec is not distilled
    _update(prepared, tmp_path, "distilled", "guidance.train=3.5")
    assert len(seen) >= 3 and set(seen) == {3.5}
