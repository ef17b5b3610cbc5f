"""The GPU acceptance command (`python -m solrl_core.doctor.acceptance`, docs/gpu.md) on a CPU: the whole path at
tiny sizes — a bench, a tiny model made, runs through the stage registry and an evaluation — and its report (what
it imports, in a fresh process: tests/e2e/test_acceptance_imports.py)."""

from __future__ import annotations

import json

import pytest
import torch

from repo_paths import ROOT
from solrl_core.config.loading import load_config
from solrl_core.doctor import acceptance, acceptance_report, acceptance_runs
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import load_run_config
from solrl_core.run.stage_table import STAGES
from acceptance_options import acceptance_argv

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not


def test_acceptance_on_cpu_reports_every_step_and_a_failure_stops_none(tmp_path, capsys):
    out = tmp_path / "acc"
    # fp8 needs a CUDA GPU: those runs fail at their quantize stage, and every other step still runs
    rc = acceptance.main(acceptance_argv(out, "--runs", "embedded", "tiny-flux1", "--precisions", "fp8", "nvfp4_emulated"))
    assert rc == 1
    data = json.loads((out / "acceptance.json").read_text())
    steps = data["steps"]
    assert list(steps) == ["bench flux1", "make tiny-flux1", "run embedded fp8", "run embedded nvfp4_emulated",
                           "run tiny-flux1 fp8", "run tiny-flux1 nvfp4_emulated"]
    assert "running" not in data
    machine = data["invocations"][0]["machine"]
    assert machine["torch"] == torch.__version__ and machine["device"] == "cpu"
    assert machine["packages"]["diffusers"] and machine["packages"]["pydantic"]

    bench = steps["bench flux1"]
    assert bench["ok"] and bench["report"] == json.loads((out / "bench" / "flux1" / "report.json").read_text())
    assert (bench["report"]["model"]["blocks"], bench["report"]["model"]["batch"]) == (2, 2)

    for subject in ("embedded", "tiny-flux1"):
        failed = steps[f"run {subject} fp8"]
        assert not failed["ok"] and failed["at"] == "quantize (iteration 0)"
        assert failed["error"].startswith("SolrlError: explore precision 'fp8' needs an FP8 GPU")
        assert "(solrl_core/models/quant/backends.py:" in failed["error"]  # where it was raised
        assert "Traceback" in failed["traceback"] and failed["peak_gib"] is None

        run = steps[f"run {subject} nvfp4_emulated"]
        assert run["ok"] and "at" not in run and "error" not in run
        rd = RunDir(run["run_dir"])
        cfg = load_run_config(rd)
        assert (cfg.iterations, cfg.explore.precision, cfg.model.device) == (1, "nvfp4_emulated", "cpu")
        assert run["model"] == {"kind": cfg.model.kind, "device": "cpu", "dtype": cfg.model.dtype}
        summaries = {stage: rd.manifest(0, stage)["summary"] for stage in STAGES}
        assert run["stage_seconds"] == {"0": {stage: s["seconds"] for stage, s in summaries.items()}}
        assert run["rewards"]["0"] == {"explore_mean": summaries["score_explore"]["mean"],
                                       "final_mean": summaries["score_final"]["mean"],
                                       "loss": summaries["update"]["loss"]}
        assert run["evaluation"]["step"] == 1 and run["evaluation"]["metrics"] == rd.evaluation(1)["metrics"]
        assert run["peak_gib"] is None  # CUDA's figure
    tiny = load_run_config(RunDir(steps["run tiny-flux1 nvfp4_emulated"]["run_dir"]))
    assert (tiny.model.kind, tiny.model.path) == ("flux1", steps["make tiny-flux1"]["dir"])

    md = (out / "acceptance.md").read_text()
    assert "4 of 6 steps passed." in md and "| run embedded fp8 | 0 | FAIL at quantize (iteration 0) |" in md
    assert "| flux1 | 2 / 57 | 2 | bfloat16 | bf16 |" in md
    assert "| run embedded nvfp4_emulated | 0 | " in md
    assert capsys.readouterr().out == md


def test_a_later_command_replaces_the_steps_it_runs_again_and_keeps_the_others(tmp_path):
    first = acceptance_report.Report(tmp_path, ["a"], "cpu")
    first.finish("bench flux1", {"kind": "bench", "ok": False, "error": "OutOfMemoryError: x"})
    first.finish("run embedded fp8", {"kind": "run", "ok": True})
    first.start("run embedded nvfp4_emulated")  # killed in this step
    second = acceptance_report.Report(tmp_path, ["b"], "cpu")
    assert "running" not in second.data
    second.finish("bench flux1", {"kind": "bench", "ok": True})
    data = json.loads((tmp_path / "acceptance.json").read_text())
    assert [inv["argv"] for inv in data["invocations"]] == [["a"], ["b"]]
    assert list(data["steps"]) == ["run embedded fp8", "bench flux1"]
    assert data["steps"]["bench flux1"] == {"kind": "bench", "ok": True, "invocation": 1}
    assert data["steps"]["run embedded fp8"]["invocation"] == 0
    assert "2 of 2 steps passed." in (tmp_path / "acceptance.md").read_text()  # the failed bench passed since
    first.start("x")
    assert "**Unfinished:** `x`" in (tmp_path / "acceptance.md").read_text()


def test_tiny_runs_take_the_tiny_models_own_overrides_but_the_configs_prompts_and_rewards(tmp_path):
    from solrl_core.tiny_bundle import tiny_run_overrides

    overrides = acceptance_runs.tiny_overrides("flux1", tmp_path)
    cfg = load_config(ROOT / "configs" / "demo.yaml",
                      overrides + acceptance_runs.run_overrides(2, "cuda", "bfloat16", "fp8"))
    demo = load_config(ROOT / "configs" / "demo.yaml")
    tiny = tiny_run_overrides("flux1", {}, tmp_path / "prompts.txt")
    assert (cfg.model.kind, cfg.model.path) == ("flux1", str(tmp_path))
    assert cfg.model.resolution == tiny["model"]["resolution"]
    assert (cfg.explore.seeds_per_prompt, cfg.select.k, cfg.train.lora_rank, cfg.eval.num_prompts) == (
        tiny["explore"]["seeds_per_prompt"], tiny["select"]["k"], tiny["train"]["lora_rank"],
        tiny["eval"]["num_prompts"])
    assert (cfg.prompts.train, cfg.eval.prompts, cfg.rewards) == (demo.prompts.train, demo.eval.prompts, demo.rewards)
    # the acceptance's own settings win over the tiny model's CPU ones
    assert (cfg.model.device, cfg.model.dtype, cfg.explore.precision, cfg.iterations) == ("cuda", "bfloat16", "fp8", 2)


def test_runs_on_cuda_use_the_official_presets_dtype():
    preset = load_config(ROOT / "configs" / "presets" / "flux1_sol_rl_hpsv2.yaml")
    assert acceptance.official_dtype() == preset.model.dtype == "bfloat16"


def test_without_cuda_or_with_an_unknown_name_it_is_one_line_exit_2_before_any_step(tmp_path, capsys):
    for args, error in ((["--runs", "flux1"], "unknown run subject 'flux1': embedded or tiny-MODEL (e.g. tiny-flux1)"),
                        (["--runs", "tiny-nope"], "unknown model 'nope' (known: "),
                        (["--bench", "nope"], "unknown model 'nope'; known: ")):
        assert acceptance.main(["--out", str(tmp_path / "r"), "--device", "cpu", *args]) == 2
        assert capsys.readouterr().err.strip().startswith(f"error: {error}")
    if not torch.cuda.is_available():
        assert acceptance.main(["--out", str(tmp_path / "r")]) == 2
        assert capsys.readouterr().err.strip().startswith("error: the GPU acceptance needs a CUDA GPU")
    assert not (tmp_path / "r").exists()


def test_the_acceptance_runs_on_one_gpu_of_a_machine_of_several():
    """Its stages run in its own process: `auto` would spread their shards over every GPU (the review's finding)."""
    from repo_paths import TINY
    from solrl_core.placement import resolve_devices
    from solrl_core.testing.fake_cuda import fake_cuda

    with fake_cuda(device_count=4):
        cfg = load_config(TINY, acceptance_runs.run_overrides(1, "cuda", "bfloat16", "fp8"))
        assert resolve_devices(cfg) == ["cuda:0"]
    assert resolve_devices(load_config(TINY, acceptance_runs.run_overrides(1, "cpu", None, "fp8"))) == ["cpu"]
