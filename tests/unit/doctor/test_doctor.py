"""`solrl doctor`: its lines follow the backends' and placement's own rules on played machines; the GPU bench's
logic on a CPU at tiny sizes (the GPU path itself needs CUDA; without CUDA, in a fresh process:
tests/e2e/test_doctor_gpu_bench.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

from played_gpus import play_cuda_devices
from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.doctor import gpu_bench, probe
from solrl_core.errors import SolrlError
from solrl_core.models.quant import backends
from solrl_core.planner.calibration import load_calibration
from solrl_core.planner.cost_model import Throughput, forward_seconds
from solrl_core.planner.gpus import get_gpu


pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not


def _play(monkeypatch, capability, te_ok, te_why="", gpus=2, name="NVIDIA H100 80GB HBM3"):
    """This process sees ``gpus`` CUDA devices of ``capability``, with or without a working TE."""
    play_cuda_devices(monkeypatch, gpus)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda k=None: name)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda k: SimpleNamespace(total_memory=80 * 2**30))
    monkeypatch.setattr(backends, "device_capability", lambda device="cpu": capability)
    monkeypatch.setattr(backends, "te_support", lambda kind: (te_ok, te_why))
    monkeypatch.setattr(backends, "scaled_mm_available", lambda: True)
    monkeypatch.setattr(probe, "te_version", lambda: "2.9.0" if te_ok else None)


def _by_key(rows):
    return {c.key: c for c in rows}


def test_hopper_without_te_runs_fp8_through_scaled_mm_on_every_gpu(monkeypatch):
    _play(monkeypatch, (9, 0), False, "transformer-engine is not importable (ImportError: no module)")
    rows = _by_key(probe.checks())
    assert rows["cuda"].ok and "2 device(s)" in rows["cuda"].text and "sm_90" in rows["cuda"].text
    assert rows["transformer_engine"].ok is False
    assert rows["fp8"].ok and "torch._scaled_mm" in rows["fp8"].text
    assert rows["nvfp4"].ok is False and "not Blackwell" in rows["nvfp4"].text
    assert backends.resolve_backend("auto", "cuda:0").name == "fp8"
    assert "auto on cuda:0: fp8" in rows["auto"].text
    assert rows["devices"].text.endswith("cuda:0, cuda:1")


def test_blackwell_with_te_picks_nvfp4(monkeypatch):
    _play(monkeypatch, (10, 0), True, gpus=1, name="NVIDIA B200")
    rows = _by_key(probe.checks())
    assert rows["transformer_engine"].ok and "2.9.0" in rows["transformer_engine"].text
    assert rows["nvfp4"].ok and "transformer_engine" in rows["nvfp4"].text
    assert "auto on cuda:0: nvfp4" in rows["auto"].text
    assert rows["devices"].text.endswith(": cuda:0")


def test_cpu_machine_says_emulation_and_cpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rows = _by_key(probe.checks())
    assert rows["cuda"].ok is False and rows["fp8"].ok is False and rows["nvfp4"].ok is False
    assert "auto on cpu: nvfp4_emulated" in rows["auto"].text
    assert rows["devices"].text.endswith(": cpu")


def test_solrl_doctor_json(capsys):
    from solrl.cli.main import main

    assert main(["doctor", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [c["key"] for c in out["checks"]] == ["cuda", "transformer_engine", "fp8", "nvfp4", "auto", "devices"]


TINY_FLUX = dict(num_attention_heads=2, attention_head_dim=16, axes_dims_rope=[4, 6, 6], joint_attention_dim=32,
                 pooled_projection_dim=32)


def test_bench_on_cpu_at_tiny_size_writes_a_report_the_planner_reads(tmp_path):
    report = gpu_bench.run_bench(tmp_path, "flux1", "cpu", planner_gpu="h100", blocks=2, repeats=1, batch=4,
                                 config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8, min_width=16,
                                 micro_batch=2)
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk == json.loads(json.dumps(report))
    assert "| bf16 |" in (tmp_path / "report.md").read_text()
    assert report["model"]["blocks"] == 2 and report["model"]["cut_by"] == "asked"
    tp = report["throughput"]
    assert "no CUDA device" in tp["fp8"]["skipped"] and "no CUDA device" in tp["nvfp4"]["skipped"]
    for name in ("bf16", "fp8_emulated", "nvfp4_emulated"):
        assert tp[name]["replaced_layers"] > 0 and tp[name]["seconds_per_forward"] > 0
    assert tp["nvfp4_emulated"]["low_precision_flops"] < report["model"]["flops_per_forward"]
    # 4-bit blocks err more than 8-bit per-tensor E4M3, both well below 1 on random weights
    err = report["rel_error"]
    assert 0 < err["fp8_emulated_vs_bf16"] < err["nvfp4_emulated_vs_bf16"] < 0.5

    # the regenerate and update stages ran at the micro-batch (peaks are CUDA's: none on a CPU)
    assert report["stages"]["ok"] == ["regenerate", "update"] and report["stages"]["micro_batch"] == 2
    assert report["stages"]["peak_gib"] == {"regenerate": None, "update": None}
    assert "- update: peak" in (tmp_path / "report.md").read_text()

    cal = load_calibration(tmp_path / "report.json")
    assert cal.gpu == "h100" and cal.measured_tflops["bf16"] == pytest.approx(tp["bf16"]["tflops"])


def test_bench_flops_are_the_planners_count_of_the_same_model_at_the_presets_explore_batch():
    from solrl_core.planner.flops import count_flops, example_inputs

    report = gpu_bench.measure("flux1", "cpu", blocks=2, repeats=1, precisions=("bf16",),
                               config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8, min_width=16)
    preset = load_config(ROOT / "configs" / "presets" / "flux1_sol_rl_hpsv2.yaml")
    batch = preset.explore.batch_size
    assert report["model"]["batch"] == batch and batch > 1
    m, config = gpu_bench._config("flux1", None, TINY_FLUX)
    config = gpu_bench._with_blocks(config, 2)
    meta = build_meta_model_from(config)
    one = count_flops(meta, lambda: meta(**example_inputs(m.spec.kind, config, 16, 8), return_dict=False)).total
    assert report["model"]["flops_per_forward"] == batch * one  # the timed call is the whole batch
    assert report["model"]["flops_per_sample"] == one
    assert (config["num_layers"], config["num_single_layers"]) == (1, 1)


def test_bench_batch_follows_the_run_config_and_the_batch_option():
    kw = dict(blocks=2, repeats=1, precisions=("bf16",), config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8,
              min_width=16)
    preset = load_config(ROOT / "configs" / "presets" / "flux1_sol_rl_hpsv2.yaml", ["explore.batch_size=3"])
    from_config = gpu_bench.measure("flux1", "cpu", run_config=preset, **kw)["model"]
    assert (from_config["batch"], from_config["batch_from"]) == (3, "explore.batch_size of the sol_rl preset")
    asked = gpu_bench.measure("flux1", "cpu", run_config=preset, batch=2, **kw)
    assert (asked["model"]["batch"], asked["model"]["batch_from"]) == (2, "asked")
    row = asked["throughput"]["bf16"]
    assert row["seconds_per_sample"] == pytest.approx(row["seconds_per_forward"] / 2)
    assert asked["model"]["flops_per_forward"] == pytest.approx(2 / 3 * from_config["flops_per_forward"])


def _registered_parameters(build):
    """(dtype, bytes) of every parameter registered on any module while ``build()`` runs."""
    from torch.nn.modules.module import register_module_parameter_registration_hook

    seen = []

    def hook(module, name, param):
        if param is not None:
            seen.append((param.dtype, param.numel() * param.element_size()))

    handle = register_module_parameter_registration_hook(hook)
    try:
        model = build()
    finally:
        handle.remove()
    return model, seen


def test_bench_model_is_built_in_its_dtype_never_in_fp32_first():
    _, config = gpu_bench._config("flux1", None, TINY_FLUX)
    model, seen = _registered_parameters(lambda: gpu_bench._build(config, "cpu", torch.bfloat16))
    assert seen and {dtype for dtype, _ in seen} == {torch.bfloat16}  # every parameter created in bf16
    n_params = sum(p.numel() for p in model.parameters())
    assert sum(size for _, size in seen) == 2 * n_params  # no fp32 weights were ever allocated
    assert torch.get_default_dtype() == torch.float32  # restored
    _, seen32 = _registered_parameters(lambda: gpu_bench._build(config, "cpu", torch.float32))
    assert {dtype for dtype, _ in seen32} == {torch.float32}  # the hook sees what a build allocates


def test_bench_dtype_is_the_presets_model_dtype():
    report = gpu_bench.measure("flux1", "cpu", blocks=2, repeats=1, precisions=("bf16",), batch=1,
                               config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8, min_width=16)
    preset = load_config(ROOT / "configs" / "presets" / "flux1_sol_rl_hpsv2.yaml")
    assert report["model"]["dtype"] == preset.model.dtype == "bfloat16"


def test_default_dtype_is_restored_when_the_build_fails():
    with pytest.raises(RuntimeError, match="boom"):
        with gpu_bench.default_dtype(torch.bfloat16):
            assert torch.get_default_dtype() == torch.bfloat16
            raise RuntimeError("boom")
    assert torch.get_default_dtype() == torch.float32


def build_meta_model_from(config: dict):
    import diffusers

    with torch.device("meta"):
        return getattr(diffusers, config["_class_name"]).from_config(config)


def test_share_rate_reproduces_the_measured_seconds_in_the_planner():
    """The low-precision rate the bench solves, fed back through the planner's forward_seconds, gives the measured
    forward time again (one split, one place: planner.model.forward_seconds)."""
    flops, low, bf16_tflops, seconds = 10e12, 8e12, 400.0, 0.012
    rate = gpu_bench._share_rate(flops, low, seconds, {"tflops": bf16_tflops})
    h100 = get_gpu("h100")
    tp = Throughput(h100, 1, 0.4, {"bf16": bf16_tflops / h100.bf16, "fp8": rate / h100.fp8})
    fwd = SimpleNamespace(total=flops, low_precision=low)
    assert forward_seconds(fwd, "fp8", tp) == pytest.approx(seconds)
    assert gpu_bench._share_rate(flops, low, 0.001, {"tflops": bf16_tflops}) is None  # faster than the bf16 rest


@pytest.mark.parametrize("name, key", [("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA GB200", "gb200"),
                                       ("NVIDIA B200", "b200"), ("NVIDIA RTX PRO 6000 Blackwell Server Edition",
                                                                 "rtx-pro-6000"), ("Tesla T4", None)])
def test_planner_gpu_of_device_names(name, key):
    assert gpu_bench.planner_gpu_of(name) == key


def test_bench_refuses_an_unknown_model(tmp_path):
    with pytest.raises(SolrlError, match="unknown model"):
        gpu_bench.measure("nope", "cpu")


def _tiny_preset(*overrides):
    return load_config(ROOT / "configs" / "presets" / "flux1_sol_rl_hpsv2.yaml",
                       ["train.lora_rank=4", "train.lora_alpha=8", "train.lora_targets=[to_q, to_v]", *overrides])


def test_stage_peaks_run_both_stages_and_leave_w0_untouched():
    from solrl_core.models.backbones.registry import backbone_spec

    m, config = gpu_bench._config("flux1", None, TINY_FLUX)
    config = gpu_bench._with_blocks(config, 2)
    base = gpu_bench._build(config, "cpu", torch.float32)
    before = {k: v.clone() for k, v in base.state_dict().items()}
    out = gpu_bench.stage_peaks(base, m.spec.kind, config, 16, 8, 2, _tiny_preset(), backbone_spec("flux1").defaults,
                                "cpu", torch.float32)
    assert out["ok"] == ["regenerate", "update"] and out["lora_rank"] == 4
    after = base.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # W0 is shared, never written


def test_stage_peaks_attach_theta_as_the_update_does(monkeypatch):
    """θ comes from stages.checkpoints.attach_policy with the run config (its modules, rank and dtype), not from a
    cast of the bench's own: the policy it trains is the one attach_policy returned, untouched."""
    import solrl_core.stages.checkpoints as checkpoints
    from solrl_core.models.backbones.registry import backbone_spec

    m, config = gpu_bench._config("flux1", None, TINY_FLUX)
    config = gpu_bench._with_blocks(config, 2)
    defaults = backbone_spec("flux1").defaults
    cfg = _tiny_preset()
    attached, attach_policy = [], checkpoints.attach_policy

    def recording_attach(run_cfg, backbone):
        policy = attach_policy(run_cfg, backbone)
        attached.append((policy, [p.dtype for p in policy.trainable_parameters()]))
        return policy

    monkeypatch.setattr(checkpoints, "attach_policy", recording_attach)
    base = gpu_bench._build(config, "cpu", torch.bfloat16)
    out = gpu_bench.stage_peaks(base, m.spec.kind, config, 16, 8, 2, cfg, defaults, "cpu", torch.bfloat16)
    assert len(attached) == 1
    policy, dtypes_at_attach = attached[0]
    assert [p.dtype for p in policy.trainable_parameters()] == dtypes_at_attach  # the bench cast nothing
    assert out["theta_dtype"] == str(dtypes_at_attach[0]).split(".")[-1]
    names = policy.named_adapter_parameters()
    assert names and all(k.split(".lora_")[0].endswith(("to_q", "to_v")) for k in names)  # the config's targets
    assert {p.shape[0] for k, p in names.items() if "lora_A" in k} == {4}  # the config's rank


def test_bench_cuda_path_builds_on_the_device_in_bf16_and_attaches_theta_there():
    """The bench's own code on a (faked) H100: the model made on cuda in the preset's dtype, inputs and θ on the
    same device (a CPU tensor meeting a CUDA one raises), the report naming the planner's GPU."""
    from solrl_core.testing.fake_cuda import fake_cuda

    _, config = gpu_bench._config("flux1", None, TINY_FLUX)
    with fake_cuda():
        model, seen = _registered_parameters(lambda: gpu_bench._build(config, "cuda", torch.bfloat16))
        assert {p.device.type for p in model.parameters()} == {"cuda"}
        report = gpu_bench.measure("flux1", "cuda", blocks=2, repeats=1, precisions=("bf16",), batch=2,
                                   config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8, min_width=16,
                                   micro_batch=2)
    assert {dtype for dtype, _ in seen} == {torch.bfloat16}
    assert report["device"]["planner_gpu"] == "h100" and report["model"]["dtype"] == "bfloat16"
    assert report["throughput"]["bf16"]["impl"] == "torch" and report["stages"]["ok"] == ["regenerate", "update"]


def test_bench_times_each_precision_compiled_beside_eager(tmp_path):
    """What the first GPU measures in one run (`auto`: inductor on CUDA); traced here with aot_eager on a CPU."""
    report = gpu_bench.run_bench(tmp_path, "flux1", "cpu", planner_gpu="h100", blocks=2, repeats=1, batch=2,
                                 precisions=("bf16",), config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8,
                                 min_width=16, compile_backend="aot_eager")
    rows = {name: row for name, row in report["throughput"].items() if "compiled" in row}
    assert set(rows) == {"bf16"}
    compiled = rows["bf16"]["compiled"]
    assert compiled["backend"] == "aot_eager" and compiled["rel_error"] < 1e-5
    assert compiled["seconds_per_forward"] > 0 and compiled["compile_seconds"] > 0
    assert compiled["speedup"] == pytest.approx(rows["bf16"]["seconds_per_forward"] / compiled["seconds_per_forward"])
    text = (tmp_path / "report.md").read_text()
    assert "compiled as a run compiles its sampling copies (torch.compile, aot_eager)" in text and "| bf16 | " in text
    assert "compiled" not in gpu_bench.measure("flux1", "cpu", blocks=2, repeats=1, batch=1, precisions=("bf16",),
                                               config_overrides=TINY_FLUX, image_tokens=16, text_tokens=8,
                                               min_width=16)["throughput"]["bf16"]  # auto on a CPU: eager only
