"""θ and θ_old in float32 over a bf16 base (the GPU presets' model.dtype): the training state, one update step against
the fp32 computation, checkpoints of either dtype, the soft update, the EMA, the merged weights and the fp32 branch."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors.torch import load as st_load
from safetensors.torch import load_file
from safetensors.torch import save as st_save

from solrl_core.models.backbones.cache import load_backbone
from solrl_core.models.backbones.embedded import EmbeddedBackbone
from solrl_core.config.schema import OptimizerConfig
from solrl_core.config.loading import load_config
from solrl_core.models.quant.lora_branch import attach_lora_branches
from solrl_core.rl.policy import ADAPTERS, DEFAULT, MASTER_DTYPE, OLD, EmaWeights, LoraPolicy
from solrl_core.run.rundir import STAGES, RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.runner import run_stage
from solrl_core.stages.transformer_copies import weight_sharing_transformer
from repo_paths import TINY

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # conftest: tiny models on a busy 2-core machine

PROMPTS = ["a red circle", "two blue squares", "a green triangle on the left", "three small red circles"]


@pytest.fixture(scope="module")
def bf16_backbone():
    return EmbeddedBackbone.from_pretrained(dtype=torch.bfloat16)


@pytest.fixture(scope="module")
def batch(bf16_backbone):
    """x_t, sigma, conditioning (bf16, as the bf16 text encoder makes it) and a regression target."""
    g = torch.Generator().manual_seed(2)
    x_t = torch.randn(4, *bf16_backbone.latent_shape, generator=g)
    target = torch.randn(x_t.shape, generator=g)
    return x_t, torch.tensor([0.2, 0.5, 0.7, 0.9]), bf16_backbone.encode_prompts(PROMPTS), target


def attach(transformer: torch.nn.Module, defaults) -> LoraPolicy:
    """The policy with θ set to fp32 values that bf16 cannot hold (B ≠ 0, so every factor gets a gradient)."""
    policy = LoraPolicy.attach(transformer, defaults.lora_targets, rank=4, alpha=8, seed=0)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.copy_(0.05 * torch.randn(p.shape, generator=g))
    return policy


def policy_on(backbone: EmbeddedBackbone) -> LoraPolicy:
    return attach(weight_sharing_transformer(backbone), backbone.defaults)  # W0 shared, as the stages attach it


def loss_of(backbone, policy, batch) -> torch.Tensor:
    x_t, sigma, cond, target = batch
    with policy.adapter(DEFAULT):
        v = backbone.velocity(policy.transformer, x_t, sigma, cond)
    assert v.dtype == torch.float32  # the velocity comes back in the latents' dtype
    return (v - target).square().mean()


def adamw(params) -> torch.optim.AdamW:
    """AdamW with the configuration's defaults (lr 3e-4, weight decay 1e-4)."""
    o = OptimizerConfig()
    return torch.optim.AdamW(params, lr=o.lr, betas=o.betas, weight_decay=o.weight_decay, eps=o.eps)


def flat(tensors) -> torch.Tensor:
    return torch.cat([t.detach().float().flatten() for t in tensors])


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def test_adapters_optimizer_and_ema_are_fp32_over_a_bf16_base(bf16_backbone, batch):
    policy = policy_on(bf16_backbone)
    base = [p for name, p in policy.transformer.named_parameters() if "lora_" not in name]
    assert base and all(p.dtype == torch.bfloat16 for p in base)
    assert policy.transformer.dtype == torch.bfloat16  # what the backbones cast the model's inputs to
    for name in ADAPTERS:
        assert all(p.dtype == MASTER_DTYPE for p in policy.named_adapter_parameters(name).values())
    in_model = {id(p) for name, p in policy.transformer.named_parameters() if f".{DEFAULT}." in name}
    assert {id(p) for p in policy.trainable_parameters()} == in_model  # the optimizer steps the model's own tensors
    ema = EmaWeights(policy)
    optimizer = adamw(policy.trainable_parameters())
    loss_of(bf16_backbone, policy, batch).backward()
    assert all(p.grad.dtype == torch.float32 for p in policy.trainable_parameters())
    optimizer.step()
    ema.update(policy, step=1)
    states = [optimizer.state[p] for p in policy.trainable_parameters()]
    assert all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in states)
    assert all(v.dtype == torch.float32 for v in ema.state_dict().values())
    for name in ADAPTERS:
        assert all(v.dtype == torch.float32 for v in policy.adapter_state_dict(name).values())
        assert all(a.dtype == b.dtype == torch.float32 for a, b, _ in policy.lora_factors(name).values())


def test_loss_and_gradient_match_the_fp32_base(bf16_backbone, batch):
    """Over a bf16 base, θ's gradient is that of the same θ over the fp32 base up to bf16 arithmetic (0.5 % here)."""
    fp32_backbone = copy.copy(bf16_backbone)
    fp32_backbone.transformer = copy.deepcopy(bf16_backbone.transformer).float()  # the same W0, exactly
    grads, losses = [], []
    for backbone in (bf16_backbone, fp32_backbone):
        policy = policy_on(backbone)
        loss = loss_of(backbone, policy, batch)
        grads.append(flat(torch.autograd.grad(loss, policy.trainable_parameters())))
        losses.append(float(loss.detach()))
    assert losses[0] == pytest.approx(losses[1], rel=5e-3)
    assert relative_error(grads[0], grads[1]) < 0.03


def test_update_step_is_the_fp32_master_weight_step(bf16_backbone, batch):
    policy = policy_on(bf16_backbone)
    params = policy.trainable_parameters()
    optimizer = adamw(params)
    loss_of(bf16_backbone, policy, batch).backward()
    before = [p.detach().clone() for p in params]
    grads = [p.grad.clone() for p in params]
    optimizer.step()

    # the same gradient applied to fp32 copies by a fresh AdamW: the same arithmetic, so the same bits
    copies = [b.clone().requires_grad_() for b in before]
    for c, g in zip(copies, grads):
        c.grad = g.clone()
    reference = adamw(copies)
    reference.step()
    assert all(torch.equal(p, c) for p, c in zip(params, copies))
    for p, c in zip(params, copies):
        mine, theirs = optimizer.state[p], reference.state[c]
        assert all(torch.equal(mine[k], theirs[k]) for k in ("step", "exp_avg", "exp_avg_sq"))

    # the master weights matter: bf16 parameters would round a third of this step's update away or up
    halves = [b.to(torch.bfloat16).requires_grad_() for b in before]
    for h, g in zip(halves, grads):
        h.grad = g.to(torch.bfloat16)
    adamw(halves).step()
    update = flat(params) - flat(before)
    update_bf16 = flat(halves) - flat(b.to(torch.bfloat16) for b in before)
    assert update.abs().min() > 0
    assert relative_error(update_bf16, update) > 0.1


def test_checkpoints_load_both_ways(bf16_backbone):
    policy = policy_on(bf16_backbone)
    objects = [id(p) for p in policy.named_adapter_parameters(OLD).values()]
    theta = policy.adapter_state_dict(DEFAULT)
    policy.load_adapter_state_dict(OLD, st_load(st_save(theta)))  # fp32 file: exact
    assert all(torch.equal(p, theta[k]) for k, p in policy.named_adapter_parameters(OLD).items())
    halves = {k: v.to(torch.bfloat16) for k, v in theta.items()}
    policy.load_adapter_state_dict(OLD, st_load(st_save(halves)))  # a bf16 file (written before fp32 adapters)
    for key, p in policy.named_adapter_parameters(OLD).items():
        assert p.dtype == MASTER_DTYPE and torch.equal(p, halves[key].float())
    assert [id(p) for p in policy.named_adapter_parameters(OLD).values()] == objects  # optimizer references hold


def test_soft_update_and_ema_are_fp32_arithmetic(bf16_backbone):
    policy = policy_on(bf16_backbone)
    ema = EmaWeights(policy)
    theta0 = {k: p.detach().clone() for k, p in policy.named_adapter_parameters(DEFAULT).items()}
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in policy.trainable_parameters():
            p.add_(1e-3 * torch.randn(p.shape, generator=g))  # a step far below bf16's resolution of θ
    theta = {k: p.detach().clone() for k, p in policy.named_adapter_parameters(DEFAULT).items()}
    old = {k: p.detach().clone() for k, p in policy.named_adapter_parameters(OLD).items()}
    policy.soft_update_old(0.3)
    for key, p in policy.named_adapter_parameters(OLD).items():
        assert torch.equal(p, old[key].clone().mul_(0.3).add_(theta[key], alpha=0.7))
    decay = ema.update(policy, step=1)
    shadow = ema.state_dict()
    for key in theta:
        assert torch.equal(shadow[key], theta0[key].clone().mul_(decay).add_(theta[key], alpha=1 - decay))
    with ema.swapped_in(policy):
        assert all(torch.equal(p, shadow[k]) for k, p in policy.named_adapter_parameters(DEFAULT).items())
    assert all(torch.equal(p, theta[k]) for k, p in policy.named_adapter_parameters(DEFAULT).items())


def test_merged_weights_stay_in_the_base_dtype(bf16_backbone):
    policy = policy_on(bf16_backbone)
    merged = policy.merged_state_dict(OLD)
    base = bf16_backbone.transformer.state_dict()
    assert merged.keys() == base.keys() and all(merged[k].dtype == base[k].dtype for k in base)
    for name, (lora_a, lora_b, scaling) in policy.lora_factors(OLD).items():
        key = f"{name}.weight"
        expected = (base[key].float() + (lora_b @ lora_a) * scaling).to(torch.bfloat16)
        assert torch.equal(merged[key], expected)


def test_fp32_branch_beside_the_bf16_base_matches_the_adapter(bf16_backbone):
    """quant.lora_branch's LoraBranch on a bf16 copy holds θ_old's factors in fp32 and computes the layer as peft's
    LoRA layer does, up to where the fp32 term is rounded to bf16 (before the sum here, after it in peft)."""
    policy = policy_on(bf16_backbone)
    policy.soft_update_old(0.0)  # θ_old = θ (B ≠ 0)
    branched = copy.deepcopy(bf16_backbone.transformer)
    factors = policy.lora_factors(OLD)
    assert attach_lora_branches(branched, factors) == len(factors) > 0
    g = torch.Generator().manual_seed(3)
    for name, (lora_a, lora_b, scaling) in factors.items():
        branch = branched.get_submodule(name)
        assert branch.lora_A.dtype == branch.lora_B.dtype == torch.float32
        x = torch.randn(2, 16, branch.in_features, generator=g).to(torch.bfloat16)
        with torch.no_grad(), policy.adapter(OLD):
            layer = policy.transformer.get_submodule(name)
            expected, base, got = layer(x), layer.base_layer(x), branch(x)
            low_rank = scaling * (x.float() @ lora_a.T @ lora_b.T)
        assert got.dtype == expected.dtype == torch.bfloat16 and not torch.equal(expected, base)
        # rounding the sum (both) and the fp32 term (the branch) to bf16: each within 2^-8 of its value
        bound = 2**-7 * (expected.float().abs() + low_rank.abs())
        assert ((got.float() - expected.float()).abs() <= bound).all(), name


@pytest.fixture(scope="module")
def bf16_run(tmp_path_factory):
    """Iteration 0 of the tiny run with model.dtype=bfloat16 on the embedded model, in this process."""
    run = RunDir(tmp_path_factory.mktemp("bf16") / "run")
    cfg = load_config(TINY, ["model.dtype=bfloat16", "explore.precision=fp32", "explore.seeds_per_prompt=4",
                             "select.k=2", "train.micro_batch=4"])
    cfg = prepare_run(run, cfg)
    summaries = {stage: run_stage(run, cfg, 0, stage, progress=False)["summary"] for stage in STAGES}
    return run, cfg, summaries


def test_update_iteration_over_a_bf16_base(bf16_run):
    run, cfg, summaries = bf16_run
    assert load_backbone(cfg).transformer.dtype == torch.bfloat16
    summary = summaries["update"]
    assert summary["step"] == cfg.train.optimizer_steps and summary["grad_norm"] > 0
    checkpoint = run.stage_dir(0, "update") / "checkpoint"
    adapters = load_file(str(checkpoint / "adapters.safetensors"))
    initial = load_file(str(run.init_dir / "adapters.safetensors"))
    for name in ("adapters", "ema", "optimizer"):
        tensors = load_file(str(checkpoint / f"{name}.safetensors"))
        assert tensors and all(v.dtype == torch.float32 for v in tensors.values()), name
    assert any(not torch.equal(adapters[k], initial[k]) for k in adapters if k.startswith(f"{DEFAULT}."))
