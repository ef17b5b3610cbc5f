"""Samplers: Euler and DPM-Solver++(2M) on a flow with a closed-form solution, guidance, the run's settings."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from diffusers import DPMSolverMultistepScheduler, FlowMatchEulerDiscreteScheduler

from solrl_core.models.sampler import SAMPLERS, dpmpp_2m_step, guided_velocity, resolve_sampler, sample, schedule_sigmas
from gaussian_flow import DIM, GaussianFlow
from repo_paths import ROOT, TINY

def _problem(batch: int = 64, dtype=torch.float64, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    mu = torch.randn(batch, DIM, generator=gen, dtype=dtype)
    s = 0.3 + 0.7 * torch.rand(batch, DIM, generator=gen, dtype=dtype)
    noise = torch.randn(batch, DIM, generator=gen, dtype=dtype)
    return {"mu": mu, "s": s}, noise, mu + s * noise


def _err(x, exact) -> float:
    return float((x - exact).pow(2).mean().sqrt())


# Upper bounds of (2M error) / (Euler error) at equal steps. On a shifted schedule with few steps both solvers end
# with the same long first-order step to sigma 0 (from 0.375 at 6 steps, shift 3), which then dominates.
RATIO_BOUNDS = {1.0: {6: 0.5, 10: 0.15, 20: 0.15, 40: 0.15}, 3.0: {6: 0.95, 10: 0.7, 20: 0.3, 40: 0.2}}


@pytest.mark.parametrize("shift", [1.0, 3.0])
def test_dpmpp_2m_beats_euler_and_converges_to_the_exact_solution(shift):
    flow = GaussianFlow(shift)
    cond, noise, exact = _problem()
    reference = sample(flow, flow.transformer, cond, noise, 1000, sampler="euler").x0
    assert _err(reference, exact) < 2e-3  # the many-step Euler reference agrees with the closed form
    errors = {}
    for steps in (6, 10, 20, 40, 160, 640):
        euler = sample(flow, flow.transformer, cond, noise, steps, sampler="euler").x0
        dpm = sample(flow, flow.transformer, cond, noise, steps, sampler="dpmpp_2m").x0
        errors[steps] = (_err(euler, exact), _err(dpm, exact), _err(euler, reference), _err(dpm, reference))
    for steps, bound in RATIO_BOUNDS[shift].items():
        euler, dpm, euler_vs_ref, dpm_vs_ref = errors[steps]
        assert dpm < bound * euler and dpm_vs_ref < bound * euler_vs_ref, (steps, errors)
    # orders: 4x the steps cut Euler's error about 4x (first order) and 2M's more than 8x (order > 1.5; the large
    # log-SNR steps next to sigma = 1 keep it below the asymptotic 16x at these step counts, as in diffusers)
    assert all(e2m < e2m_prev for (_, e2m, *_), (_, e2m_prev, *_) in zip(list(errors.values())[1:], errors.values()))
    assert 3.5 < errors[160][0] / errors[640][0] < 4.5, errors
    assert errors[160][1] / errors[640][1] > 8, errors


@pytest.mark.parametrize("steps,shift", [(6, 1.0), (10, 3.0), (3, 1.0)])
def test_dpmpp_2m_matches_diffusers_dpm_solver_on_the_same_sigmas(steps, shift):
    """diffusers' DPMSolverMultistepScheduler (dpmsolver++, order 2, flow prediction, final sigma 0) driven on our
    sigmas (it cannot be given them through set_timesteps, so they are set on it) computes the same samples."""
    flow = GaussianFlow(shift)
    cond, noise, _ = _problem(batch=8, dtype=torch.float32)
    ours = sample(flow, flow.transformer, cond, noise, steps, sampler="dpmpp_2m")
    scheduler = DPMSolverMultistepScheduler(
        num_train_timesteps=1000, algorithm_type="dpmsolver++", solver_order=2, solver_type="midpoint",
        prediction_type="flow_prediction", use_flow_sigmas=True, flow_shift=1.0, final_sigmas_type="zero",
        lower_order_final=True,
    )
    scheduler.set_timesteps(steps)
    scheduler.sigmas = torch.tensor(ours.sigmas, dtype=torch.float32)
    scheduler.set_begin_index(0)
    x = noise.clone()
    for i in range(steps):
        sigma = torch.full((x.shape[0],), ours.sigmas[i] * 1000, dtype=torch.float32) / 1000
        x = scheduler.step(flow.velocity(None, x, sigma, cond), scheduler.timesteps[i], x, return_dict=False)[0]
    torch.testing.assert_close(ours.x0, x, rtol=1e-5, atol=1e-5)


def test_dpmpp_2m_step_is_the_written_formula():
    """A direct transcription of DPM-Solver++(2M) with lambda = log((1 - sigma) / sigma)."""
    gen = torch.Generator().manual_seed(1)
    x, x0, x0_prev = (torch.randn(5, generator=gen, dtype=torch.float64) for _ in range(3))
    s_prev, s, t = 0.8, 0.55, 0.3
    lam = lambda v: np.log((1 - v) / v)  # noqa: E731
    h, h_prev = lam(t) - lam(s), lam(s) - lam(s_prev)
    d1 = (x0 - x0_prev) / (h_prev / h)
    expected = (t / s) * x - (1 - t) * (np.exp(-h) - 1) * (x0 + 0.5 * d1)
    torch.testing.assert_close(dpmpp_2m_step(x, x0, x0_prev, s_prev, s, t), expected, rtol=1e-12, atol=1e-12)
    # first order (DDIM) without history or after sigma 1, and x0 itself at the last step
    first = (t / s) * x - (1 - t) * (np.exp(-h) - 1) * x0
    torch.testing.assert_close(dpmpp_2m_step(x, x0, None, None, s, t), first, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dpmpp_2m_step(x, x0, x0_prev, 1.0, s, t), first, rtol=1e-12, atol=1e-12)
    assert torch.equal(dpmpp_2m_step(x, x0, x0_prev, s_prev, s, 0.0), x0)


def test_euler_is_the_earlier_uniform_flow_match_euler_bit_for_bit():
    """The embedded default keeps its samples: Euler on backbone.sigmas equals the former sampler (diffusers'
    scheduler on np.linspace sigmas, model at timestep / 1000)."""
    flow = GaussianFlow(1.0)
    cond, noise, _ = _problem(batch=4, dtype=torch.float32)
    for steps in (3, 6, 10):
        scheduler = FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=1.0)
        scheduler.set_timesteps(sigmas=np.linspace(1.0, 0.0, steps + 1)[:-1].tolist(), device="cpu")
        x = noise.clone()
        for t in scheduler.timesteps:
            v = flow.velocity(None, x, (t / 1000).expand(x.shape[0]).to(x.dtype), cond)
            x = scheduler.step(v, t, x, return_dict=False)[0]
        result = sample(flow, flow.transformer, cond, noise, steps, sampler="euler")
        assert torch.equal(result.x0, x)
        assert result.sigmas == [float(s) for s in scheduler.sigmas] == schedule_sigmas(flow, steps)


def test_schedule_runs_on_the_backbone_sigmas_unshifted():
    flow = GaussianFlow(3.0)
    sigmas = schedule_sigmas(flow, 5)
    assert len(sigmas) == 6 and sigmas[-1] == 0.0
    np.testing.assert_allclose(sigmas[:-1], flow.sigmas(5), rtol=1e-6)


def test_classifier_free_guidance_is_one_forward_on_the_concatenated_batch():
    flow = GaussianFlow()
    cond, noise, _ = _problem(batch=3)
    uncond = {"mu": torch.zeros(1, DIM, dtype=torch.float64), "s": torch.ones(1, DIM, dtype=torch.float64)}
    x, sigma = noise * 0.7, torch.full((3,), 0.6, dtype=torch.float64)
    v = guided_velocity(flow, None, x, sigma, cond, 4.0, uncond)
    assert [c["batch"] for c in flow.calls] == [6]
    v_u = flow.velocity(None, x, sigma, {k: u.expand(3, DIM) for k, u in uncond.items()})
    v_c = flow.velocity(None, x, sigma, cond)
    torch.testing.assert_close(v, v_u + 4.0 * (v_c - v_u))

    flow.calls.clear()
    result = sample(flow, flow.transformer, cond, noise, 4, sampler="dpmpp_2m", guidance=4.0, uncond=uncond)
    assert [c["batch"] for c in flow.calls] == [6] * 4
    plain = sample(flow, flow.transformer, cond, noise, 4, sampler="dpmpp_2m")
    assert not torch.allclose(result.x0, plain.x0)

    flow.calls.clear()
    sample(flow, flow.transformer, cond, noise, 4, guidance=1.0, uncond=uncond)  # no CFG at 1.0
    assert [c["batch"] for c in flow.calls] == [3] * 4
    with pytest.raises(ValueError, match="uncond"):
        sample(flow, flow.transformer, cond, noise, 4, guidance=2.0)


def test_distilled_guidance_is_passed_to_the_model_not_cfg():
    flow = GaussianFlow(distilled=True)
    cond, noise, _ = _problem(batch=2)
    sample(flow, flow.transformer, cond, noise, 3, sampler="euler", guidance=3.5)
    assert flow.calls == [{"batch": 2, "guidance": 3.5}] * 3


def test_sampler_names():
    flow = GaussianFlow()
    assert resolve_sampler(None, flow) == "dpmpp_2m"  # the backbone's default
    assert resolve_sampler("euler", flow) == "euler"
    assert SAMPLERS == ("euler", "dpmpp_2m")
    with pytest.raises(ValueError, match="unknown sampler"):
        sample(flow, flow.transformer, *_problem(batch=1)[:2], 2, sampler="heun")


# ---- the run's settings in the stages ------------------------------------------------------------------------------


def _tiny_cfg(*overrides):
    from solrl_core.config.loading import load_config

    return load_config(TINY, ["explore.precision=fp32", "explore.seeds_per_prompt=4", "explore.batch_size=1",
                              "select.k=2", *overrides])


def test_explore_uses_the_configured_sampler_and_rollout_guidance_and_records_them(tmp_path, one_torch_thread):
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.stages.context import StageContext
    from solrl_core.stages.draws import iteration_prompts
    from solrl_core.stages.runner import run_stage

    cfg = _tiny_cfg("model.sampler=dpmpp_2m", "guidance.rollout=1.5")
    run = RunDir(tmp_path / "run")
    for stage in ("quantize", "explore"):
        run_stage(run, cfg, 0, stage, progress=False)
    cols, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["latent", "seed", "prompt_index"])
    backbone = load_backbone(cfg)
    assert attrs["sampler"] == "dpmpp_2m" and attrs["guidance"] == 1.5
    assert attrs["sigmas"] == schedule_sigmas(backbone, cfg.explore.steps)
    # row 0 again by hand: W0 (θ_old starts at zero), CFG against the empty prompt, the 2M solver
    ctx = StageContext(run, cfg, 0, progress=False)
    prompt = iteration_prompts(cfg, 0)[int(cols["prompt_index"][0])]
    x0 = sample(backbone, backbone.transformer, ctx.encode([prompt]), backbone.initial_noise([int(cols["seed"][0])]),
                cfg.explore.steps, sampler="dpmpp_2m", guidance=1.5, uncond=ctx.encode([""])).x0
    np.testing.assert_allclose(cols["latent"][0], x0[0].numpy(), rtol=0, atol=1e-5)
    plain = sample(backbone, backbone.transformer, ctx.encode([prompt]), backbone.initial_noise([int(cols["seed"][0])]),
                   cfg.explore.steps, sampler="euler").x0
    assert np.abs(cols["latent"][0] - plain[0].numpy()).max() > 1e-3


def test_an_editing_models_unconditional_branch_sees_each_rows_source(tmp_path, one_torch_thread):
    """Classifier-free guidance of an editing model: the unconditional branch is the empty prompt *with the row's
    source image*, as diffusers' edit pipelines encode their negative prompt with the image (the embedded editing
    model; a plain empty prompt would not see the source at all)."""
    from solrl_core.config.loading import load_config
    from solrl_core.edit_sources import pool_sources
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.models.backbones.cache import load_backbone
    from solrl_core.stages.context import StageContext
    from solrl_core.stages.runner import run_stage

    cfg = load_config(ROOT / "configs" / "demo_edit.yaml", [
        "explore.precision=fp32", "prompts.per_iteration=2", "explore.seeds_per_prompt=2", "explore.batch_size=4",
        "explore.keep_latents=true", "select.k=2", "guidance.rollout=2"])
    run = RunDir(tmp_path / "run")
    for stage in ("quantize", "explore"):
        run_stage(run, cfg, 0, stage, progress=False)
    cols, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["latent", "seed", "prompt_index"])
    assert attrs["guidance"] == 2
    backbone, ctx = load_backbone(cfg), StageContext(run, cfg, 0, progress=False)
    sources = pool_sources(attrs)
    assert len(set(sources)) == 2  # two edits, two source images
    for row in range(len(cols["seed"])):
        i = int(cols["prompt_index"][row])
        prompt, source = attrs["prompts"][i], sources[i]
        other = sources[1 - i]

        def guided(uncond_source):
            return sample(backbone, backbone.transformer, ctx.encode([prompt], [source]),
                          backbone.initial_noise([int(cols["seed"][row])]), cfg.explore.steps,
                          sampler=resolve_sampler(cfg.model.sampler, backbone), guidance=2.0,
                          uncond=ctx.encode([""], [uncond_source])).x0[0].numpy()

        np.testing.assert_allclose(cols["latent"][row], guided(source), rtol=0, atol=1e-4)  # batch 4 against 1
        assert np.abs(cols["latent"][row] - guided(other)).max() > 1e-2  # another source's branch: another sample


def test_qwen_image_guidance_is_the_pipelines_true_cfg():
    """Qwen-Image's pipelines rescale the guided prediction of each packed token (2x2 patch x 16 channels) to the norm
    of the conditional one's: the backbone's combination does, on tokens packed by the pipeline's own helper."""
    from diffusers import QwenImagePipeline

    from solrl_core.models.backbones.base import Backbone
    from solrl_core.models.backbones.qwenimage import QwenImageBackbone

    gen = torch.Generator().manual_seed(0)
    v_u, v_c = torch.randn(2, 16, 6, 8, generator=gen), torch.randn(2, 16, 6, 8, generator=gen)
    ours = QwenImageBackbone.combine_guidance(None, v_u, v_c, 4.0)
    pack = lambda v: QwenImagePipeline._pack_latents(v, 2, 16, 6, 8)  # noqa: E731
    comb = pack(v_u) + 4.0 * (pack(v_c) - pack(v_u))
    reference = comb * (torch.norm(pack(v_c), dim=-1, keepdim=True) / torch.norm(comb, dim=-1, keepdim=True))
    torch.testing.assert_close(pack(ours), reference, atol=1e-6, rtol=1e-6)
    plain = Backbone.combine_guidance(None, v_u, v_c, 4.0)
    assert (pack(plain) - reference).abs().max() > 0.1  # the rescale matters


def test_eval_uses_eval_guidance_and_steps(tmp_path, one_torch_thread):
    import json

    from PIL import Image

    from solrl_core.evaluate import run_eval
    from solrl_core.run.rundir import RunDir

    results = {}
    for guidance in (1.0, 2.0):
        cfg = _tiny_cfg("model.sampler=dpmpp_2m", f"guidance.eval={guidance}", "eval.num_prompts=2",
                        "eval.seeds_per_prompt=1", "eval.steps=3")
        run = RunDir(tmp_path / f"g{guidance}")
        summary = run_eval(run, cfg, 0)
        assert summary["sampler"] == "dpmpp_2m" and summary["guidance"] == guidance
        assert json.loads((run.root / "eval" / "step_0000" / "metrics.json").read_text())["guidance"] == guidance
        results[guidance] = np.asarray(Image.open(run.root / "eval" / "step_0000" / "samples.png"))
    assert results[1.0].shape == results[2.0].shape and not np.array_equal(results[1.0], results[2.0])


def test_a_batch_that_samples_to_nan_stops_the_stage_naming_its_rows(tmp_path, one_torch_thread, monkeypatch):
    """A quantized copy that overflows gives NaN latents, which decode to plain black images without a word; the
    pool refuses the batch instead (one check per batch, after its last step)."""
    from solrl_core.models.backbones.embedded import EmbeddedBackbone
    from solrl_core.errors import SolrlError
    from solrl_core.run.pool import read_table
    from solrl_core.run.rundir import RunDir
    from solrl_core.stages.runner import run_stage

    cfg = _tiny_cfg("explore.batch_size=2")
    run = RunDir(tmp_path / "run")
    run_stage(run, cfg, 0, "quantize", progress=False)
    real = EmbeddedBackbone.velocity
    calls = []

    def overflowing(self, transformer, x_t, sigma, cond, guidance=1.0):
        calls.append(1)
        v = real(self, transformer, x_t, sigma, cond, guidance)
        return v * float("nan") if len(calls) > cfg.explore.steps else v  # the second batch overflows

    monkeypatch.setattr(EmbeddedBackbone, "velocity", overflowing)
    with pytest.raises(SolrlError, match=r"explore it0 .*: rows 2 to 3 sampled to NaN or infinite latents"):
        run_stage(run, cfg, 0, "explore", progress=False)
    pool = run.partial_dir(0, "explore") / "pool.zarr"
    assert read_table(pool, ["batch_done"])[0]["batch_done"].tolist()[:2] == [1, 0]  # the first batch was kept
