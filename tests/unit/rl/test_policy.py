import copy
import json

import pytest
import torch
from diffusers import SD3Transformer2DModel
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from solrl_core.rl.optim_state import optimizer_from_tensors, optimizer_to_tensors
from solrl_core.rl.policy import EmaWeights, LoraPolicy, ema_decay, old_policy_eta

CONFIG = dict(
    sample_size=8, patch_size=2, in_channels=3, out_channels=3, num_layers=2, attention_head_dim=16,
    num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32,
    pos_embed_max_size=16,
)
TARGETS = ["to_q", "to_k", "to_v", "to_out.0"]


def make_model(seed=0):
    torch.manual_seed(seed)
    return SD3Transformer2DModel(**CONFIG).eval()


def inputs(seed=1):
    g = torch.Generator().manual_seed(seed)
    return dict(
        hidden_states=torch.randn(2, 3, 8, 8, generator=g),
        encoder_hidden_states=torch.randn(2, 5, 32, generator=g),
        pooled_projections=torch.randn(2, 32, generator=g),
        timestep=torch.tensor([100.0, 700.0]),
    )


def forward(model, x, grad=False):
    with torch.set_grad_enabled(grad):
        return model(**x, return_dict=False)[0]


def attach(model, seed=0):
    return LoraPolicy.attach(model, TARGETS, rank=4, alpha=8, seed=seed)


@torch.no_grad()
def randomize(policy, name, seed):
    g = torch.Generator().manual_seed(seed)
    for p in policy.named_adapter_parameters(name).values():
        p.copy_(0.1 * torch.randn(p.shape, generator=g))


def check_flags(policy):
    assert all(p.requires_grad for p in policy.named_adapter_parameters("default").values())
    assert not any(p.requires_grad for p in policy.named_adapter_parameters("old").values())
    lora = {id(p) for n in ("default", "old") for p in policy.named_adapter_parameters(n).values()}
    assert not any(p.requires_grad for p in policy.transformer.parameters() if id(p) not in lora)


def sgd_like_step(policy, x, opt):
    opt.zero_grad()
    with policy.adapter("default"):
        out = forward(policy.transformer, x, grad=True)
    (out**2).mean().backward()
    opt.step()


def test_attach_identical_adapters_flags_and_seeded_init():
    model, x = make_model(), inputs()
    rng_before = torch.get_rng_state()
    policy = attach(model, seed=3)
    assert torch.equal(rng_before, torch.get_rng_state())
    check_flags(policy)
    assert len(policy.trainable_parameters()) == 2 * 4 * 2  # A and B x 4 targets x 2 blocks
    with policy.adapter("default"):
        out_default = forward(model, x)
    with policy.adapter("old"):
        check_flags(policy)
        out_old = forward(model, x)
    with policy.reference():
        check_flags(policy)
    check_flags(policy)
    assert policy.active == "default"
    assert torch.equal(out_default, out_old)
    for a, b in zip(policy.trainable_parameters(), policy.named_adapter_parameters("old").values()):
        assert torch.equal(a, b)

    same = attach(make_model(), seed=3).adapter_state_dict("default")
    other = attach(make_model(), seed=4).adapter_state_dict("default")
    mine = policy.adapter_state_dict("default")
    assert all(torch.equal(mine[k], same[k]) for k in mine)
    assert any(not torch.equal(mine[k], other[k]) for k in mine)


def test_step_moves_default_only():
    model, x = make_model(), inputs()
    policy = attach(model)
    old_before = {k: v.clone() for k, v in policy.named_adapter_parameters("old").items()}
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2)
    sgd_like_step(policy, x, opt)
    with policy.adapter("default"):
        out_default = forward(model, x)
    with policy.adapter("old"):
        out_old = forward(model, x)
    assert not torch.allclose(out_default, out_old)
    for k, p in policy.named_adapter_parameters("old").items():
        assert torch.equal(p, old_before[k]) and p.grad is None
    check_flags(policy)


def test_reference_is_the_base_model():
    model, x = make_model(), inputs()
    base = copy.deepcopy(model)
    policy = attach(model)
    randomize(policy, "default", 1)
    randomize(policy, "old", 2)
    with policy.reference():
        out_ref = forward(model, x)
    torch.testing.assert_close(out_ref, forward(base, x), rtol=0, atol=1e-6)
    with policy.adapter("default"):
        assert not torch.allclose(forward(model, x), out_ref, atol=1e-4)


def test_soft_update_and_eta():
    policy = attach(make_model())
    randomize(policy, "default", 1)
    randomize(policy, "old", 2)
    theta = {k: v.clone() for k, v in policy.named_adapter_parameters("default").items()}
    theta_old = {k: v.clone() for k, v in policy.named_adapter_parameters("old").items()}
    policy.soft_update_old(0.3)
    for k, p in policy.named_adapter_parameters("old").items():
        torch.testing.assert_close(p, 0.3 * theta_old[k] + 0.7 * theta[k])
    for k, p in policy.named_adapter_parameters("default").items():
        assert torch.equal(p, theta[k])
    assert old_policy_eta(0) == 0.0
    assert old_policy_eta(100) == pytest.approx(0.1)
    assert old_policy_eta(400) == pytest.approx(0.4)
    assert old_policy_eta(5000) == 0.5


@pytest.mark.parametrize("name", ["default", "old"])
def test_merged_state_dict_reproduces_adapter_forward(name):
    model, x = make_model(), inputs()
    base_keys = list(model.state_dict())
    base_sd = {k: v.clone() for k, v in model.state_dict().items()}
    policy = attach(model)
    randomize(policy, "default", 1)
    randomize(policy, "old", 2)
    merged = policy.merged_state_dict(name)
    assert list(merged) == base_keys
    changed = {k for k in base_keys if not torch.equal(merged[k], base_sd[k])}
    assert changed and all(k.rsplit(".", 2)[-2] in ("to_q", "to_k", "to_v", "0") and k.endswith("weight") for k in changed)
    fresh = make_model(seed=99)
    fresh.load_state_dict(merged, strict=True)
    with policy.adapter(name):
        expected = forward(model, x)
    torch.testing.assert_close(forward(fresh, x), expected, rtol=0, atol=1e-5)


def test_adapter_state_roundtrip_through_safetensors():
    model, x = make_model(), inputs()
    policy = attach(model)
    randomize(policy, "default", 1)
    sd = policy.adapter_state_dict("default")
    assert list(sd) == list(policy.named_adapter_parameters("default"))
    assert all(".default." not in k and v.is_contiguous() and v.device.type == "cpu" for k, v in sd.items())
    loaded = st_load(st_save(sd))
    assert all(torch.equal(loaded[k], sd[k]) for k in sd)
    policy.load_adapter_state_dict("old", loaded)
    for a, b in zip(policy.trainable_parameters(), policy.named_adapter_parameters("old").values()):
        assert torch.equal(a, b)
    with policy.adapter("default"):
        out_default = forward(model, x)
    with policy.adapter("old"):
        assert torch.equal(forward(model, x), out_default)
    check_flags(policy)
    with pytest.raises(ValueError, match="missing"):
        policy.load_adapter_state_dict("old", dict(list(loaded.items())[1:]))


def test_ema_decay_update_and_swap():
    assert ema_decay(0) == pytest.approx(0.1)
    assert ema_decay(1) == pytest.approx(2 / 11)
    assert ema_decay(80) == pytest.approx(0.9)
    assert ema_decay(10_000) == 0.9
    policy = attach(make_model())
    randomize(policy, "default", 1)
    theta0 = {k: v.clone() for k, v in policy.named_adapter_parameters("default").items()}
    ema = EmaWeights(policy)
    randomize(policy, "default", 2)
    theta1 = {k: v.clone() for k, v in policy.named_adapter_parameters("default").items()}
    assert ema.update(policy, step=1) == pytest.approx(2 / 11)
    expected = {k: (2 / 11) * theta0[k] + (9 / 11) * theta1[k] for k in theta0}
    state = ema.state_dict()
    for k in expected:
        torch.testing.assert_close(state[k], expected[k])
    with ema.swapped_in(policy):
        for k, p in policy.named_adapter_parameters("default").items():
            assert torch.equal(p, state[k])
    for k, p in policy.named_adapter_parameters("default").items():
        assert torch.equal(p, theta1[k])
    other = EmaWeights(policy)
    other.load_state_dict(st_load(st_save(state)))
    assert all(torch.equal(other.state_dict()[k], state[k]) for k in state)


def test_optimizer_roundtrip_matches_uninterrupted_run():
    x = inputs()
    policy = attach(make_model())
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=3e-3, betas=(0.9, 0.999), weight_decay=1e-4)
    for _ in range(2):
        sgd_like_step(policy, x, opt)
    tensors, meta = optimizer_to_tensors(opt)
    tensors, meta = st_load(st_save(tensors)), json.loads(json.dumps(meta))
    adapter = st_load(st_save(policy.adapter_state_dict("default")))

    resumed = attach(make_model(), seed=123)
    resumed.load_adapter_state_dict("default", adapter)
    opt2 = torch.optim.AdamW(resumed.trainable_parameters(), lr=1.0)
    optimizer_from_tensors(opt2, tensors, meta)
    assert opt2.param_groups[0]["lr"] == 3e-3 and opt2.param_groups[0]["betas"] == (0.9, 0.999)

    sgd_like_step(policy, x, opt)
    sgd_like_step(resumed, x, opt2)
    for a, b in zip(policy.trainable_parameters(), resumed.trainable_parameters()):
        assert torch.equal(a, b)
    for a, b in zip(opt.state.values(), opt2.state.values()):
        assert all(torch.equal(a[k], b[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
