"""`solrl plan --calibration`: the planner priced with measured throughput (a doctor report.json)."""

from __future__ import annotations

import json

import pytest

from solrl_core.errors import SolrlError
from solrl_core.planner.calibration import load_calibration
from solrl_core.planner.flops import forward_flops
from solrl_core.planner.gpus import get_gpu
from solrl_core.planner.cost_model import plan


def _report(tmp_path, gpu="h100", **tflops):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"device": {"planner_gpu": gpu},
                                "throughput": {p: {"tflops": t} for p, t in tflops.items()}}))
    return path


def test_uniform_calibration_scales_every_stage_by_the_utilisation_ratio(tmp_path):
    h100 = get_gpu("h100")
    cal = load_calibration(_report(tmp_path, bf16=0.5 * h100.bf16, fp8=0.5 * h100.fp8))
    assert cal.per_precision() == pytest.approx({"bf16": 0.5, "fp8": 0.5, "nvfp4": 0.5})
    stated = plan("flux1", "h100", utilisation=0.4)
    measured = plan("flux1", "h100", calibration=cal)
    for family, row in stated["families"].items():
        for stage, seconds in row["seconds"].items():
            assert measured["families"][family]["seconds"][stage] == pytest.approx(seconds * 0.4 / 0.5)
    assert measured["utilisation_source"].startswith("calibrated") and measured["calibration"]["gpu"] == "h100"


def test_per_precision_calibration_prices_the_4bit_share_at_its_own_rate(tmp_path):
    h100 = get_gpu("h100")
    cal = load_calibration(_report(tmp_path, bf16=0.2 * h100.bf16, fp8=0.6 * h100.fp8))
    result = plan("flux1", "h100", family="sol_rl", gpus=8, calibration=cal)
    fwd = forward_flops("flux1")
    s = result["families"]["sol_rl"]["shapes"]
    per_forward = (fwd.low_precision / (h100.fp8 * 1e12 * 0.6 * 8)
                   + (fwd.total - fwd.low_precision) / (h100.bf16 * 1e12 * 0.2 * 8))
    assert result["families"]["sol_rl"]["explore_precision"] == "fp8"
    assert result["families"]["sol_rl"]["seconds"]["explore_denoise"] == pytest.approx(
        s["prompts"] * s["seeds"] * s["explore_steps"] * per_forward)
    # on a Blackwell, NVFP4 (not measured on the H100) takes the measured bf16 utilisation: all at 0.2
    b200 = plan("flux1", "b200", calibration=cal)
    same = plan("flux1", "b200", utilisation=0.2)
    assert b200["families"]["sol_rl"]["seconds"]["iteration"] == pytest.approx(
        same["families"]["sol_rl"]["seconds"]["iteration"])
    assert any("nvfp4 not measured" in a for a in b200["assumptions"])


@pytest.mark.parametrize("content, message", [
    (None, "calibration report not found"),
    ("{not json", "is not valid JSON"),
    ('{"throughput": {"bf16": {"tflops": 100}}}', "names no planner GPU"),
    ('{"device": {"planner_gpu": "h100"}, "throughput": {"fp8": {"tflops": 100}}}', "no measured bf16"),
    ('{"device": {"planner_gpu": "a100"}, "throughput": {"bf16": {"tflops": 100}, "fp8": {"tflops": 100}}}',
     "without native fp8"),
])
def test_bad_reports_are_one_line_errors(tmp_path, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SolrlError, match=message):
        load_calibration(path)


def test_cli_bad_calibration_exits_2_with_one_line(tmp_path, capsys):
    from solrl.cli.main import main

    assert main(["plan", "flux1", "--gpu", "h100", "--calibration", str(tmp_path / "missing.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "calibration report not found" in err[0]


def test_cli_plan_with_calibration(tmp_path, capsys):
    from solrl.cli.main import main

    h100 = get_gpu("h100")
    path = _report(tmp_path, bf16=0.25 * h100.bf16)
    assert main(["plan", "flux1", "--gpu", "h100", "--json", "--calibration", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    stated = plan("flux1", "h100", utilisation=0.25)
    assert out["families"]["naive_scaling"]["seconds"]["iteration"] == pytest.approx(
        stated["families"]["naive_scaling"]["seconds"]["iteration"])


def test_paper_comparison_shows_calibrated_errors_beside_stated(tmp_path):
    from solrl_core.planner.compare import compare, format_markdown

    b200 = get_gpu("b200")
    cal = load_calibration(_report(tmp_path, "b200", bf16=0.5 * b200.bf16, fp8=0.5 * b200.fp8,
                                   nvfp4=0.5 * b200.nvfp4))
    result = compare("b200", 8, 0.4, calibration=cal)
    for stated, calibrated in zip(result["rows"], result["calibrated"]["rows"]):
        assert calibrated["predicted_s"] == pytest.approx(stated["predicted_s"] * 0.4 / 0.5)
        assert calibrated["error"] == pytest.approx(calibrated["predicted_s"] / stated["paper_s"] - 1)
    text = format_markdown(result)
    assert "| calibrated (s) |" in text and "Mean |error| stated" in text
