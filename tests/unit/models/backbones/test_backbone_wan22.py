"""Wan2.2-T2V-A14B adapter on the tiny two-expert Wan directory (`solrl make-tiny wan22`), checked against WanPipeline:
which expert each step calls, the latents after several steps under the pipeline's two guidance scales, the decoded
frames; and LoRA on each choice of experts trains that expert alone."""

import copy
import json

import numpy as np
import pytest
import torch
from torch import nn

import backbone_checks as checks
from backbone_checks import PROMPTS, RES
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.errors import ConfigError, SolrlError
from solrl_core.models.backbones.registry import backbone_spec
from solrl_core.models.experts import TimestepExperts
from solrl_core.models.sampler import sample
from solrl_core.rl.policy import LoraPolicy
from solrl_core.stages.checkpoints import lora_target_modules

MODEL_KIND = TINY_MODEL = "wan22"
FRAMES = 5
SPEC = backbone_spec(TINY_MODEL)


def record_experts(backbone):
    """Hooks on both experts; the list they fill with (expert, first timestep of the call), in call order."""
    calls = []
    hooks = [module.register_forward_hook(
        lambda _m, _a, kwargs, _out, name=name: calls.append((name, float(kwargs["timestep"].reshape(-1)[0]))),
        with_kwargs=True) for name, module in backbone.transformer.experts().items()]
    return calls, hooks


def per_step(calls):
    """One (expert, timestep) per step: the pipeline calls the expert twice per step under CFG, the sampler once."""
    steps = []
    for call in calls:
        if not steps or steps[-1] != call:
            steps.append(call)
    return steps


def test_tiny_directory_has_two_experts_and_the_boundary(tiny_dir, tmp_path, backbone):
    checks.assert_complete_and_small(tiny_dir, {
        "transformer": "WanTransformer3DModel", "transformer_2": "WanTransformer3DModel", "vae": "AutoencoderKLWan",
        "text_encoder": "UMT5EncoderModel", "tokenizer": "T5Tokenizer", "scheduler": "UniPCMultistepScheduler"})
    pipe = backbone.pipe
    assert pipe.config.boundary_ratio == 0.875 and backbone.boundary == 875.0
    assert isinstance(backbone.transformer, TimestepExperts)
    assert backbone.transformer.expert_names == SPEC.experts == ("transformer", "transformer_2")
    assert backbone.transformer.transformer is pipe.transformer and backbone.transformer.transformer_2 is pipe.transformer_2
    high, low = pipe.transformer.state_dict(), pipe.transformer_2.state_dict()
    assert high.keys() == low.keys() and any(not torch.equal(high[k], low[k]) for k in high)  # two experts
    assert backbone.latent_shape == (16, 2, RES // 8, RES // 8)
    checks.assert_made_again_alike(tiny_dir, TINY_MODEL, tmp_path, backbone)


@pytest.mark.parametrize("steps", [4, 10, 20])
def test_the_expert_of_each_step_is_the_pipelines(backbone, steps):
    """On the model's own UniPC schedule the pipeline feeds integer timesteps (rounded down) and compares them with
    boundary_ratio x 1000; the adapter's expert of each of its sigmas (1000σ unrounded) is the same at every step,
    and both experts take part."""
    calls, hooks = record_experts(backbone)
    try:
        backbone.pipe(prompt=PROMPTS[:1], height=RES, width=RES, num_frames=FRAMES, num_inference_steps=steps,
                      guidance_scale=1.0, output_type="latent", max_sequence_length=16)
    finally:
        for hook in hooks:
            hook.remove()
    pipeline = [name for name, _ in per_step(calls)]
    assert len(pipeline) == steps and set(pipeline) == set(SPEC.experts)
    ours = [backbone.transformer.expert_at(1000 * s) for s in backbone.sigmas(steps)]
    assert ours == pipeline
    assert [t >= 875 for _, t in per_step(calls)] == [name == "transformer" for name in pipeline]


@pytest.fixture(scope="module")
def euler_backbone(tiny_dir, tmp_path_factory):
    """The tiny A14B with a flow-matching Euler scheduler (shift 3): its timesteps are 1000σ unrounded, as the
    adapter's, so the pipeline's denoising loop and the adapter's Euler sampler make the same calls."""
    from diffusers import FlowMatchEulerDiscreteScheduler, WanPipeline

    out = tmp_path_factory.mktemp("wan22-euler")
    WanPipeline.from_pretrained(tiny_dir, scheduler=FlowMatchEulerDiscreteScheduler(shift=3.0)).save_pretrained(out)
    return checks.load_tiny(MODEL_KIND, out)


@pytest.mark.parametrize("guidance,low_noise", [(1.0, None), (4.0, 3.0)])
def test_latents_and_frames_after_n_steps_match_the_pipeline(euler_backbone, guidance, low_noise):
    """Ten Euler steps from the same noise: the adapter's sampler calls the pipeline's expert at every step, and
    ends at the pipeline's latents; with classifier-free guidance, the pipeline's guidance_scale on the high-noise
    expert and its guidance_scale_2 on the low-noise one (`model.low_noise_guidance`). The decoded frames are the
    pipeline's."""
    backbone, steps = euler_backbone, 10
    backbone.low_noise_guidance = low_noise
    x = backbone.initial_noise([3, 4])
    calls, hooks = record_experts(backbone)
    try:
        kwargs = dict(prompt=PROMPTS, height=RES, width=RES, num_frames=FRAMES, num_inference_steps=steps,
                      guidance_scale=guidance, latents=x, max_sequence_length=backbone.max_sequence_length)
        if guidance > 1:
            kwargs["guidance_scale_2"] = low_noise
        reference = backbone.pipe(**kwargs, output_type="latent").frames
        pipeline = per_step(calls)
        calls.clear()
        frames = backbone.pipe(**kwargs, output_type="np").frames
        calls.clear()
        cond = backbone.encode_prompts(PROMPTS)
        uncond = backbone.encode_prompts([""]) if guidance > 1 else None
        ours = sample(backbone, backbone.transformer, cond, x, steps, sampler="euler", guidance=guidance, uncond=uncond)
        adapter = per_step(calls)
    finally:
        for hook in hooks:
            hook.remove()
        backbone.low_noise_guidance = None
    assert [n for n, _ in adapter] == [n for n, _ in pipeline] and {n for n, _ in adapter} == set(SPEC.experts)
    assert [t for _, t in adapter] == pytest.approx([t for _, t in pipeline], abs=1e-3)
    torch.testing.assert_close(ours.x0, reference, atol=2e-4, rtol=1e-4)
    video = backbone.decode(ours.x0)
    assert video.shape == (2, FRAMES, RES, RES, 3)
    assert np.abs(video.astype(np.int16) - (frames * 255).round().astype(np.int16)).max() <= 1


def test_low_noise_guidance_changes_only_the_low_noise_steps(euler_backbone):
    backbone = euler_backbone
    backbone.low_noise_guidance = 3.0
    try:
        scales = [backbone.step_guidance(float(s), 4.0) for s in backbone.sigmas(10)]
    finally:
        backbone.low_noise_guidance = None
    experts = [backbone.transformer.expert_at(1000 * s) for s in backbone.sigmas(10)]
    assert scales == [4.0 if e == "transformer" else 3.0 for e in experts] and 3.0 in scales and 4.0 in scales


def test_a_batch_across_the_boundary_runs_each_sample_through_its_expert(backbone):
    """The update's micro-batches mix times on both sides of the boundary: each sample's velocity is its expert's."""
    x, cond = backbone.initial_noise([1, 2, 3]), backbone.encode_prompts(PROMPTS + PROMPTS[:1])
    sigma = torch.tensor([0.95, 0.3, 0.9])
    both = backbone.velocity(backbone.transformer, x, sigma, cond)
    for i, expert in enumerate([backbone.pipe.transformer, backbone.pipe.transformer_2, backbone.pipe.transformer]):
        one = backbone.velocity(expert, x[i:i + 1], sigma[i:i + 1], {k: v[i:i + 1] for k, v in cond.items()})
        torch.testing.assert_close(both[i:i + 1], one, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("every_expert", [False, True])
def test_rows_routed_by_host_times_are_the_rows_routed_on_the_device(backbone, every_expert):
    """`calls_at` with each row's sigma (an update's micro-batch) or one sigma for all (a sampling step) routes the
    rows as reading their timesteps would, bit for bit, sharded (every expert runs) or not; a count that is not the
    batch's is refused."""
    x, cond = backbone.initial_noise([1, 2, 3]), backbone.encode_prompts(PROMPTS + PROMPTS[:1])
    experts = backbone.transformer
    experts.every_expert = every_expert
    try:
        for sigmas in ([0.95, 0.3, 0.9], [0.3, 0.2, 0.1], [0.95, 0.95, 0.95]):
            sigma = torch.tensor(sigmas)
            device_read = backbone.velocity(experts, x, sigma, cond)
            with backbone.calls_at(experts, sigmas):
                host = backbone.velocity(experts, x, sigma, cond)
            torch.testing.assert_close(host, device_read, atol=0, rtol=0)
            if len(set(sigmas)) == 1:
                with backbone.calls_at(experts, sigmas[0]):
                    torch.testing.assert_close(backbone.velocity(experts, x, sigma, cond), device_read, atol=0,
                                               rtol=0)
        with backbone.calls_at(experts, [0.5, 0.5]), pytest.raises(ValueError, match="2 host timesteps"):
            backbone.velocity(experts, x, torch.full((3,), 0.5), cond)
        assert experts.host_timesteps is None  # the context leaves nothing behind
    finally:
        experts.every_expert = False


def test_lora_targets_and_quant_skip_names(backbone):
    checks.assert_lora_targets_and_skip_names(backbone)


@pytest.mark.parametrize("experts", [None, ["transformer"], ["transformer_2"]])
def test_lora_on_each_choice_of_experts_trains_those_alone(tiny_dir, backbone, experts):
    """`train.experts` (null: both, the spec's default): LoRA on the chosen experts' layers alone, θ_old beside θ on
    each; a backward through a batch with a time on each side of the boundary gives gradients on the chosen experts'
    adapters and nothing elsewhere."""
    cfg = load_config(TINY, ["model.kind=wan22", f"model.path={tiny_dir}", *(
        [f"train.experts=[{','.join(experts)}]"] if experts else [])])
    chosen = experts or list(SPEC.trained_experts)
    targets = lora_target_modules(cfg, backbone)
    assert {t.split(".")[0] for t in targets} == set(chosen)
    policy = LoraPolicy.attach(copy.deepcopy(backbone.transformer), targets, rank=4, alpha=8)
    theta, old = policy.named_adapter_parameters("default"), policy.named_adapter_parameters("old")
    assert theta.keys() == old.keys() and {k.split(".")[0] for k in theta} == set(chosen)
    per_expert = {e: {k for k in theta if k.startswith(e + ".")} for e in chosen}
    assert len({len(v) for v in per_expert.values()}) == 1  # the same layers in each trained expert
    with torch.no_grad():  # ΔW != 0, so that gradients reach A as well as B
        for p in theta.values():
            p.add_(0.01 * torch.randn_like(p))
    x, cond = backbone.initial_noise([1, 2]), backbone.encode_prompts(PROMPTS)
    v = backbone.velocity(policy.transformer, x, torch.tensor([0.95, 0.3]), cond)
    v.square().mean().backward()
    for key, p in theta.items():
        assert p.grad is not None and p.grad.abs().sum() > 0, key
    untouched = [n for n, p in policy.transformer.named_parameters() if "lora_" not in n and p.grad is not None]
    assert not untouched and all(p.grad is None for p in old.values())
    others = [e for e in SPEC.experts if e not in chosen]
    assert not any(isinstance(m, nn.Linear) and ".lora_" in n and n.split(".")[0] in others
                   for n, m in policy.transformer.named_modules())


def test_full_fine_tuning_trains_every_weight_of_both_experts(backbone):
    """train.adapter: full: θ is a copy of both experts (their blocks are the blocks FSDP2 shards), and a batch
    across the boundary gives each expert's weights a gradient."""
    from solrl_core.models.blocks import transformer_blocks
    from solrl_core.rl.full_policy import FullPolicy
    from solrl_core.stages.transformer_copies import weight_sharing_transformer

    assert [name.split(".")[0] for name in transformer_blocks(backbone.transformer)] == [
        "transformer", "transformer", "transformer_2", "transformer_2"]
    policy = FullPolicy.build(weight_sharing_transformer(backbone))
    x, cond = backbone.initial_noise([1, 2]), backbone.encode_prompts(PROMPTS)
    with policy.adapter("default") as theta:
        backbone.velocity(theta, x, torch.tensor([0.95, 0.3]), cond).square().mean().backward()
    moved = {name.split(".")[0] for name, p in policy.named_adapter_parameters().items()
             if p.grad is not None and p.grad.abs().sum() > 0}
    assert moved == set(SPEC.experts)


def test_every_expert_runs_on_a_sharded_call_with_the_same_output(backbone):
    """Sharded (FSDP2, `every_expert`), a batch all on one side of the boundary still runs the other expert, in
    order, on a stand-in sample whose output is dropped: the output is the one-expert call's, and the idle expert's
    weights get zero gradients (its backward runs, as another rank's reduce-scatters need it to)."""
    x, cond = backbone.initial_noise([1, 2]), backbone.encode_prompts(PROMPTS)
    sigma = torch.tensor([0.95, 0.9])  # both the high-noise expert's
    expected = backbone.velocity(backbone.transformer, x, sigma, cond)
    sharded = copy.deepcopy(backbone.transformer).requires_grad_(True)
    sharded.every_expert = True
    calls = []
    for name, expert in sharded.experts().items():
        expert.register_forward_hook(lambda *_, name=name: calls.append(name))
    out = backbone.velocity(sharded, x, sigma, cond)
    out.square().mean().backward()
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    assert calls == list(SPEC.experts)
    grads = {name: [p.grad for p in expert.parameters()] for name, expert in sharded.experts().items()}
    assert all(g is not None and not g.any() for g in grads["transformer_2"])
    assert any(g is not None and g.any() for g in grads["transformer"])


@pytest.mark.slow  # dynamo traces both experts: `make test` runs it, `make test-fast` not
def test_the_compiled_composite_gives_the_eager_velocities(backbone):
    """`model.compile` compiles the sampling copy, the two experts' one module (its routing by timestep breaks the
    graph, the experts' calls are traced): a batch across the boundary and a batch on one side give the eager
    velocities. Traced with `aot_eager` as tests/unit/models/test_compiled.py (inductor: solrl_core/bench)."""
    from solrl_core.config.loading import load_config as load
    from solrl_core.models.compiled import compiled_copy, is_compiled
    from solrl_core.stages.transformer_copies import weight_sharing_transformer

    from torch._dynamo.utils import counters

    cfg = load(TINY, ["model.compile=true", "model.compile_backend=aot_eager"]).model
    x, cond = backbone.initial_noise([1, 2, 3]), backbone.encode_prompts(PROMPTS + PROMPTS[:1])
    torch._dynamo.reset()
    counters.clear()
    try:
        compiled = compiled_copy(weight_sharing_transformer(backbone), cfg)
        assert is_compiled(compiled)
        for sigma in (torch.tensor([0.95, 0.3, 0.9]), torch.tensor([0.3, 0.2, 0.1])):
            eager = backbone.velocity(backbone.transformer, x, sigma, cond)
            torch.testing.assert_close(backbone.velocity(compiled, x, sigma, cond), eager, rtol=1e-5, atol=1e-6)
        assert counters["graph_break"] and counters["stats"]["unique_graphs"] > 1  # traced past the routing
    finally:
        torch._dynamo.reset()


def test_a_batch_of_the_untrained_experts_times_gives_no_gradient(tiny_dir, backbone):
    cfg = load_config(TINY, ["model.kind=wan22", f"model.path={tiny_dir}", "train.experts=[transformer]"])
    policy = LoraPolicy.attach(copy.deepcopy(backbone.transformer), lora_target_modules(cfg, backbone), rank=4,
                               alpha=8)
    x, cond = backbone.initial_noise([1]), backbone.encode_prompts(PROMPTS[:1])
    v = backbone.velocity(policy.transformer, x, torch.tensor([0.3]), cond)  # the low-noise expert's time
    assert not v.requires_grad


def test_expert_settings_are_checked(tiny_dir):
    with pytest.raises(ConfigError, match=r"train.experts \['transformer_3'\]: model.kind wan22's experts are "
                                          r"transformer, transformer_2"):
        load_config(TINY, ["model.kind=wan22", f"model.path={tiny_dir}", "train.experts=[transformer_3]"])
    with pytest.raises(ConfigError, match="train.experts: model.kind embedded has one transformer, no experts"):
        load_config(TINY, ["train.experts=[transformer]"])
    with pytest.raises(ConfigError, match="model.low_noise_guidance: model.kind embedded has one transformer"):
        load_config(TINY, ["model.low_noise_guidance=3.0"])
    with pytest.raises(ConfigError, match="explore.cache.kind taylorseer: a step cache is not supported on model.kind "
                                          "wan22's experts"):
        load_config(TINY, ["model.kind=wan22", f"model.path={tiny_dir}", "explore.cache.kind=taylorseer"])


def test_each_kind_refuses_the_other_layout(tiny_dir, tmp_path):
    from diffusers import WanPipeline

    with pytest.raises(SolrlError, match=r"has two experts \(Wan 2.2 A14B: .*set model.kind: wan22"):
        checks.load_tiny("wan", tiny_dir)
    one = tmp_path / "one"
    WanPipeline.from_pretrained(tiny_dir, transformer_2=None, boundary_ratio=None).save_pretrained(one)
    with pytest.raises(SolrlError, match="is not a two-expert Wan 2.2 A14B model .*lacks transformer_2"):
        checks.load_tiny(MODEL_KIND, one)


@pytest.mark.slow  # a whole iteration in process: `make test` runs it, `make test-fast` not
def test_an_iteration_of_the_preset_training_the_low_noise_expert_alone(tmp_path, one_torch_thread):
    """`wan22_sol_rl_pickscore` on the tiny bundle (`solrl make-tiny wan22 DIR`) with train.experts [transformer_2],
    explore through update in process: the explore copy quantizes both experts' layers, and θ, θ_old and the EMA the update
    writes are transformer_2's adapters alone, θ moved by the step."""
    from safetensors.torch import load_file

    from solrl_core.run.rundir import RunDir
    from solrl_core.run_config import prepare_run
    from solrl_core.stages.runner import run_stage
    from solrl_core.tiny_bundle import make_tiny_bundle

    tiny = make_tiny_bundle(TINY_MODEL, tmp_path / "tiny")["dir"]
    # min width 16 (the preset's 5120 is wider than every tiny layer): the 4-bit copy has layers of both experts
    cfg = load_config("wan22_sol_rl_pickscore", [f"model.path={tiny}", "train.experts=[transformer_2]",
                                                 "quant.min_width=16"])
    assert (cfg.model.kind, cfg.train.experts, cfg.model.low_noise_guidance) == ("wan22", ["transformer_2"], 3.0)
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    for stage in ("quantize", "explore", "score_explore", "select", "regenerate", "score_final", "update"):
        run_stage(run, cfg, 0, stage, progress=False)
    report = json.loads((run.stage_dir(0, "quantize") / "report.json").read_text())
    assert report["precision"] == "nvfp4_emulated"
    assert {row["name"].split(".")[0] for row in report["layers"] if row["replaced"]} == set(SPEC.experts)
    init = load_file(str(run.root / "init" / "adapters.safetensors"))
    checkpoint = run.root / "iter_0000" / "update" / "checkpoint"
    after, ema = load_file(str(checkpoint / "adapters.safetensors")), load_file(str(checkpoint / "ema.safetensors"))
    assert after.keys() == init.keys()
    for prefix, tensors in (("default.", after), ("old.", after), ("", ema)):
        assert {k.removeprefix(prefix).split(".")[0] for k in tensors if k.startswith(prefix)} == {"transformer_2"}
    assert any(not torch.equal(init[k], after[k]) for k in after if k.startswith("default."))
