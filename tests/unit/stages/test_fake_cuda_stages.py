"""The GPU paths without a GPU: every stage of an iteration and the evaluation, for the embedded models and each real
backbone (each its classes at tiny sizes, random weights: the embedded ones at one layer), with the model in bf16 on a
CUDA device faked by solrl_core/testing/fake_cuda.py.

On a CPU every tensor lives on one device, so a CPU tensor meeting the model's weights (noise drawn on the CPU and
never moved, conditioning pulled to the input's device, a constant made without a device) goes unnoticed; here it
raises as it does on a GPU. Host syncs are counted: the sampling loop and the update's micro-batch loop must have
none (a sync per step stalls the GPU every step), which shows as a count that does not grow with the steps.

What the fake device cannot do is compute: values read back are placeholders (zeros), so these tests check where
tensors live and what syncs, not numbers (the CPU tests check those). Prompts are encoded on the CPU first (the
text cache), because Qwen-Image's prompt encoding needs `nonzero`, an op whose output shape depends on data.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from solrl_core.models.backbones.registry import load_backbone
from solrl_core.models.backbones.tiny import tiny_models as tiny_model_specs
from solrl_core.config.loading import load_config
from solrl_core.evaluate import run_eval
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from solrl_core.models.sampler import sample
from solrl_core.stages.runner import run_stage
from solrl_core.run.stage_table import STAGES
from solrl_core.testing.fake_cuda import fake_cuda
from solrl_core.models.text_cache import CACHE_DIR, TextCache, run_prompts

from one_layer_embedded import one_layer_embedded
from repo_paths import ROOT, TINY

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

# the embedded image and video models (one layer) and every real backbone `make-tiny` writes but the editing ones
# (they sample edit prompts: their own test below)
BACKBONES = ("embedded", "embedded_video", *(key for key, spec in tiny_model_specs().items() if not spec.edits))
# the embedded video model's world in the tiny run (its shipped weights)
EMBEDDED_VIDEO = ["model.kind=embedded_video", "prompts.train=builtin:motion-train", "eval.prompts=builtin:motion-test",
                  "rewards={embedded_motion: 1.0}"]
# one prompt, four seeds, two steps: what the fake device costs is per op, so fewer ops are what makes this fast
# (two steps: Flow-GRPO's SDE on both of them, AWM's one time per sample, what a 2-step schedule holds)
SMALL = ["model.device=cuda", "model.dtype=bfloat16", "prompts.per_iteration=1", "explore.seeds_per_prompt=4",
         "explore.batch_size=2", "explore.steps=2", "select.k=2", "regenerate.steps=2", "regenerate.batch_size=2",
         "train.micro_batch=4", "eval.num_prompts=1", "eval.seeds_per_prompt=2", "eval.steps=2", "eval.batch_size=2",
         "objective.flow_grpo.window_start=0", "objective.flow_grpo.window_size=null",
         "objective.awm.times_per_sample=1"]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    """model -> the directory `solrl make-tiny` writes (tiny model, rewards, prompts, run overrides), or for the
    embedded models their one-layer copies (tests/support/one_layer_embedded.py), made when first asked for."""
    from solrl_core.tiny_bundle import make_tiny_bundle

    made: dict[str, str] = {}

    def get(model: str) -> str:
        if model not in made:
            out = tmp_path_factory.mktemp(model)
            made[model] = (one_layer_embedded(model, out) if model.startswith("embedded")
                           else str(make_tiny_bundle(model, out)["dir"]))
        return made[model]

    return get


def _config(model: str, tiny_models, *overrides):
    if model.startswith("embedded"):
        world = EMBEDDED_VIDEO if model == "embedded_video" else []
        return load_config(TINY, [*world, f"model.path={tiny_models(model)}", *SMALL, "eval.every=1", *overrides])
    preset = ROOT / "configs" / "presets" / f"{model}_sol_rl_pickscore.yaml"
    return load_config(preset, [f"model.path={tiny_models(model)}", *SMALL, "eval.every=1", "train.processes=1",
                                "train.dist_backend=gloo", *overrides])


def _cpu_backbone(cfg):
    return load_backbone(cfg.model.model_copy(update={"device": "cpu"}))


def _run(path, cfg) -> RunDir:
    """A run directory of `cfg` whose prompts are already encoded (on the CPU) into its text cache."""
    run = RunDir(path)
    prepare_run(run, cfg)
    cpu = _cpu_backbone(cfg)
    TextCache(run.root / CACHE_DIR, cpu, cfg.model).ensure(run_prompts(cfg, cpu))
    return run


@pytest.mark.parametrize("model", BACKBONES)
def test_an_iteration_and_its_evaluation_run_on_a_faked_gpu(model, tiny_models, tmp_path, one_torch_thread):
    """quantize (its calibration forward), explore, both score stages (the preset's reward), select, regenerate, the
    update (its three forwards, the loss, the optimizer step) and the evaluation: no CPU/CUDA mix; θ stays fp32
    over the bf16 base."""
    cfg = _config(model, tiny_models)
    run = _run(tmp_path / "run", cfg)
    with fake_cuda():
        for stage in STAGES:
            run_stage(run, cfg, 0, stage, progress=False)
        evaluation = run_eval(run, cfg, 1)
    assert all(run.is_complete(0, stage) for stage in STAGES)
    assert evaluation["samples"] == 2
    adapters = load_file(str(run.checkpoint_dir(0) / "adapters.safetensors"))
    assert adapters and {t.dtype for t in adapters.values()} == {torch.float32}


@pytest.mark.parametrize("objective", ["flow_grpo", "awm"])
@pytest.mark.parametrize("model", ["embedded", "flux1"])
def test_the_other_objectives_iterations_run_on_a_faked_gpu(objective, model, tiny_models, tmp_path,
                                                             one_torch_thread):
    """Flow-GRPO's path: SDE rollouts with their trajectories and log-probabilities, and its update (θ with the
    gradient, the reference forward of its KL term, the clipped-ratio loss); AWM's: the noised final samples, its
    θ_old and reference forwards and its float64 log-likelihoods; all on the device."""
    cfg = _config(model, tiny_models, f"objective.name={objective}")
    run = _run(tmp_path / "run", cfg)
    with fake_cuda():
        for stage in STAGES:
            run_stage(run, cfg, 0, stage, progress=False)
    assert all(run.is_complete(0, stage) for stage in STAGES)
    assert run.manifest(0, "update")["summary"]["objective"] == objective


@pytest.mark.parametrize("model", ["embedded", "flux1"])
def test_full_fine_tuning_iterations_run_on_a_faked_gpu(model, tiny_models, tmp_path, one_torch_thread):
    """`train.adapter: full` over two iterations and the evaluation: the update's bf16 forwards over fp32 master
    weights, its torch.distributed.checkpoint save, the next iteration's explore copy and regenerate built from θ_old
    read back onto the device, the evaluation's EMA; no CPU/CUDA mix."""
    cfg = _config(model, tiny_models, "train.adapter=full", "train.optimizer.lr=1e-5", "quant.lora_branch=false")
    run = _run(tmp_path / "run", cfg)
    with fake_cuda():
        for iteration in (0, 1):
            for stage in STAGES:
                run_stage(run, cfg, iteration, stage, progress=False)
        evaluation = run_eval(run, cfg, 2)
    assert all(run.is_complete(i, stage) for i in (0, 1) for stage in STAGES)
    assert evaluation["samples"] == 2 and evaluation["ema"]
    assert json.loads((run.checkpoint_dir(1) / "state.json").read_text())["adapter"] == "full"


def test_an_explore_sibling_runs_on_a_faked_gpu(tiny_models, tmp_path, one_torch_thread):
    """explore.sibling on the device: the sibling's transformer is loaded onto the model's device in its dtype, its
    conditioning probe, θ_old's update added to it and its explore all run there."""
    cfg = _config("flux1", tiny_models, f"explore.sibling.path={tiny_models('flux1')}")
    run = _run(tmp_path / "run", cfg)
    with fake_cuda():
        for stage in STAGES:
            run_stage(run, cfg, 0, stage, progress=False)
        run_stage(run, cfg, 1, "quantize", progress=False)
        run_stage(run, cfg, 1, "explore", progress=False)
    assert run.manifest(1, "explore")["summary"]["candidates"] == 4
    assert json.loads((run.stage_dir(1, "quantize") / "report.json").read_text())["sibling"] == tiny_models("flux1")


@pytest.mark.parametrize("model", ["embedded", "flux1"])
def test_an_explore_with_full_precision_steps_runs_on_a_faked_gpu(model, tiny_models, tmp_path, one_torch_thread):
    """Step-selective precision on the device: the explore copy and θ_old's full-precision model (the regenerate's
    LoRA branch on W0) take turns by step, both on the device, their samples in the pool; and the ODE and SDE loops
    over them read nothing back (the step picks the model, not a value)."""
    from solrl_core.models.sde_sampler import sample_sde
    from solrl_core.stages.quantize import explore_sampler
    from solrl_core.stages.context import StageContext

    cfg = _config(model, tiny_models, "explore.steps=3", "explore.full_precision_first=1",
                  "explore.full_precision_last=1")
    run = _run(tmp_path / "run", cfg)
    cond = _cpu_backbone(cfg).encode_prompts(["a red circle", "a blue square"])
    with fake_cuda() as gpu:
        for stage in ("quantize", "explore"):
            run_stage(run, cfg, 0, stage, progress=False)
        backbone = load_backbone(cfg.model)
        model_of_steps = explore_sampler(StageContext(run, cfg, 0, False), backbone)
        on_device = {k: v.to("cuda") for k, v in cond.items()}
        syncs = len(gpu.syncs)
        for steps in (3, 4):
            assert sample(backbone, model_of_steps, on_device, backbone.initial_noise([1, 2]), steps).x0.is_cuda
            assert sample_sde(backbone, model_of_steps, on_device, [1, 2], steps, noise_level=0.7).x0.is_cuda
        assert gpu.syncs[syncs:] == []
    assert run.manifest(0, "explore")["summary"]["candidates"] == 4


@pytest.mark.parametrize("model", ["embedded_video", "wan"])
def test_an_explore_with_a_cheaper_decode_runs_on_a_faked_gpu(model, tiny_models, tmp_path, one_torch_thread):
    """explore.decode on the device: the first latent frame resized on the device, decoded there, the pool's videos
    the first frame held, recorded in its attributes."""
    from solrl_core.run.pool import read_table

    cfg = _config(model, tiny_models, "explore.decode.frames=scored", "explore.decode.scale=0.5",
                  "rewards={jpeg: 1.0}", "reward_models={jpeg: {video_frames: 1}}")
    run = _run(tmp_path / "run", cfg)
    with fake_cuda():
        for stage in ("quantize", "explore", "score_explore"):
            run_stage(run, cfg, 0, stage, progress=False)
    table, attrs = read_table(run.stage_dir(0, "explore") / "pool.zarr", ["image"])
    assert attrs["explore_decode"] == {"scale": 0.5, "decoded_frames": 1}
    videos = table["image"]
    np.testing.assert_array_equal(videos, np.repeat(videos[:, :1], videos.shape[1], axis=1))


def _edit_set(folder) -> str:
    """Two edit prompts, each with its own random 64 px source image (the tiny models' size), in a JSONL."""
    from PIL import Image

    rng = np.random.default_rng(0)
    lines = []
    for i, instruction in enumerate(("make it blue", "turn it into a square")):
        Image.fromarray(rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)).save(folder / f"source{i}.png")
        lines.append(json.dumps({"prompt": instruction, "images": f"source{i}.png"}))
    (folder / "edits.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "edits.jsonl")


EDITING = [key for key, spec in tiny_model_specs().items() if spec.edits]  # the editing models `make-tiny` writes


@pytest.mark.parametrize("model", EDITING)
def test_an_edit_iteration_and_its_evaluation_run_on_a_faked_gpu(model, tiny_models, tmp_path, one_torch_thread):
    """Each editing model's own preset with edit prompts (sources beside the text), every stage and the evaluation,
    a model without distilled guidance under CFG (its unconditional branch encoded with each row's source): no
    CPU/CUDA mix."""
    from solrl_core.config.presets import model_rewards, preset_name, preset_path
    from solrl_core.models.text_cache import run_prompt_groups

    edits = _edit_set(tmp_path)
    distilled = tiny_model_specs()[model].defaults.distilled_guidance
    guided = [] if distilled else ["guidance.rollout=4", "guidance.eval=4"]
    cfg = load_config(preset_path(preset_name(model, "sol_rl", model_rewards(model)[0])), [
        f"model.path={tiny_models(model)}", *SMALL, "prompts.per_iteration=2", f"prompts.train={edits}",
        f"eval.prompts={edits}", "eval.num_prompts=2", "eval.seeds_per_prompt=1", "eval.every=1",
        "train.processes=1", "train.dist_backend=gloo", *guided])
    run = RunDir(tmp_path / "run")
    prepare_run(run, cfg)
    cpu = _cpu_backbone(cfg)
    cache = TextCache(run.root / CACHE_DIR, cpu, cfg.model)
    for prompts, sources in run_prompt_groups(cfg, cpu):
        cache.ensure(prompts, sources=sources)
    with fake_cuda():
        for stage in STAGES:
            run_stage(run, cfg, 0, stage, progress=False)
        evaluation = run_eval(run, cfg, 1)
    assert all(run.is_complete(0, stage) for stage in STAGES) and evaluation["samples"] == 2


def test_the_sde_sampling_loop_never_syncs(tiny_models, one_torch_thread):
    """Flow-GRPO's rollouts on the device: no sync, and as many host-to-device copies for 2 steps as for 4 (the
    window's noise goes up once)."""
    from solrl_core.models.sde_sampler import sample_sde

    cfg = _config("embedded", tiny_models)
    cond = _cpu_backbone(cfg).encode_prompts(["a red circle", "a blue square"])
    with fake_cuda() as gpu:
        backbone = load_backbone(cfg.model)
        on_device = {k: v.to("cuda") for k, v in cond.items()}
        uploads = []
        for steps in (2, 2, 4):
            before = len(gpu.uploads)
            result = sample_sde(backbone, backbone.transformer, on_device, [1, 2], steps, noise_level=0.7)
            assert result.x0.device.type == "cuda" and result.log_probs.device.type == "cuda"
            uploads.append([str(u) for u in gpu.uploads[before:] if not u.origin.startswith("diffusers/models/")])
        assert uploads[1] == uploads[2], "a host-to-device copy per step"
    assert gpu.syncs == []


@pytest.mark.parametrize("model", BACKBONES)
def test_the_sampling_loop_never_syncs(model, tiny_models, one_torch_thread):
    """The whole ODE solve on the device, whatever the step count: no sync at all, and the same host-to-device
    copies (the noise, the schedule) for 2 steps as for 4, for either solver."""
    cfg = _config(model, tiny_models)
    cond = _cpu_backbone(cfg).encode_prompts(["a red circle", "a blue square"])
    with fake_cuda() as gpu:
        backbone = load_backbone(cfg.model)
        on_device = {k: v.to("cuda") for k, v in cond.items()}
        for sampler in ("euler", "dpmpp_2m"):
            uploads = []
            for steps in (2, 2, 4):  # the first one fills the adapters' caches; Qwen-Image needs 2 steps at least
                before = len(gpu.uploads)
                result = sample(backbone, backbone.transformer, on_device, backbone.initial_noise([1, 2]), steps,
                                sampler=sampler)
                assert result.x0.device.type == "cuda"
                # copies made inside a model's forward are diffusers' own (Qwen-Image uploads its text length)
                uploads.append([str(u) for u in gpu.uploads[before:] if not u.origin.startswith("diffusers/models/")])
            assert uploads[1] == uploads[2], f"{sampler}: a host-to-device copy per step"
    assert gpu.syncs == []


@pytest.mark.parametrize("model", ["embedded", "flux1"])
def test_a_step_cached_explore_never_syncs(model, tiny_models, one_torch_thread):
    """An explore policy's TaylorSeer cache on the device: its schedule is the step's, so the loop reads nothing back
    (a data-dependent cache would sync every step), and its extrapolation stays on the device."""
    import copy

    from solrl_core.models.step_cache import enable_step_cache

    cfg = _config(model, tiny_models)
    cond = _cpu_backbone(cfg).encode_prompts(["a red circle", "a blue square"])
    with fake_cuda() as gpu:
        backbone = load_backbone(cfg.model)
        cached = enable_step_cache(copy.deepcopy(backbone.transformer), "taylorseer",
                                   {"cache_interval": 2, "disable_cache_before_step": 2})
        on_device = {k: v.to("cuda") for k, v in cond.items()}
        for steps in (6, 6):
            result = sample(backbone, cached, on_device, backbone.initial_noise([1, 2]), steps)
            assert result.x0.device.type == "cuda"
    assert gpu.syncs == []


def test_the_update_syncs_once_per_step_not_per_micro_batch(tiny_models, tmp_path, one_torch_thread):
    """The update with 1 and with 4 micro-batches per optimizer step: the same host syncs (the loss terms are read
    once per step, the gradient norm once) and host-to-device copies, so none happens per micro-batch."""
    cfg = _config("embedded", tiny_models)
    run = _run(tmp_path / "run", cfg)
    counts = {}
    with fake_cuda() as gpu:
        for stage in STAGES[:-1]:
            run_stage(run, cfg, 0, stage, progress=False)
        for micro_batch in (4, 1):  # 2 samples x 2 of their 2 times = 4 (sample, time) pairs: 1 or 4 micro-batches
            smaller = cfg.model_copy(update={"train": cfg.train.model_copy(update={"micro_batch": micro_batch})})
            before = len(gpu.syncs), len(gpu.uploads)
            summary = run_stage(run, smaller, 0, "update", force=True, progress=False)["summary"]
            counts[micro_batch] = [str(s) for s in gpu.syncs[before[0]:]], [str(u) for u in gpu.uploads[before[1]:]]
    assert summary["step"] == cfg.train.optimizer_steps
    for one, four in zip(counts[4], counts[1]):  # syncs, then host-to-device copies
        assert len(one) == len(four), set(four) - set(one)
