"""The Transformer Engine version solrl needs: the `gpu` extra's bound, and a too-old TE refused in one line where
the explore precision is resolved (on a played GPU: no TE is needed here)."""

import tomllib

import pytest

from repo_paths import ROOT
from solrl_core.errors import SolrlError
from solrl_core.models.quant import backends, te_backend
from solrl_core.models.quant.backends import resolve_backend

OLD = (r"^transformer-engine 2\.8\.0 is installed, solrl needs 2\.9 or newer: "
       r"pip install 'transformer-engine\[pytorch\]>=2\.9'")


def test_the_gpu_extra_asks_for_the_version_the_code_needs():
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    assert extra == [f"transformer-engine[pytorch]>={'.'.join(map(str, te_backend.TE_MIN_VERSION))}"]


@pytest.mark.parametrize("found", ["2.9.0", "2.9.0.dev0+abc1234", "2.10.1", "3.0", None, "unknown"])
def test_new_enough_or_unknown_versions_pass(found):
    te_backend.check_te_version(found)


@pytest.mark.parametrize("found", ["2.8.0", "2.8.0+cu12", "1.13", "2.1"])
def test_older_versions_are_one_line_errors_naming_found_and_needed(found):
    with pytest.raises(SolrlError) as err:
        te_backend.check_te_version(found)
    msg = str(err.value)
    assert msg.startswith(f"transformer-engine {found} is installed, solrl needs 2.9 or newer") and "\n" not in msg


def _play(monkeypatch, capability, te_version):
    """A GPU of `capability` whose TE (installed as `te_version`) says it runs NVFP4/FP8 when new enough."""
    monkeypatch.setattr(backends, "device_capability", lambda device="cpu": capability)
    monkeypatch.setattr(backends, "te_support", lambda kind: (True, ""))
    monkeypatch.setattr(te_backend, "installed_te_version", lambda: te_version)


@pytest.mark.parametrize("name", ["auto", "nvfp4", "fp8"])
def test_a_too_old_te_is_refused_where_the_precision_is_resolved(monkeypatch, name):
    _play(monkeypatch, (10, 0), "2.8.0")
    with pytest.raises(SolrlError, match=OLD):  # not a silent fallback to torch._scaled_mm or the emulation
        resolve_backend(name, "cuda")
    _play(monkeypatch, (10, 0), "2.9.1")
    assert resolve_backend(name, "cuda").impl == "transformer_engine"


def test_a_too_old_te_does_not_matter_where_it_is_not_used(monkeypatch):
    _play(monkeypatch, (8, 0), "2.8.0")  # no FP8 tensor cores: TE is never asked
    assert resolve_backend("auto", "cuda").name == "nvfp4_emulated"
    _play(monkeypatch, None, "2.8.0")  # no CUDA device
    assert resolve_backend("auto", "cpu").name == "nvfp4_emulated"
    _play(monkeypatch, (10, 0), "2.8.0")
    for name in ("nvfp4_emulated", "fp8_emulated", "bf16", "fp32"):  # asked for by name: no TE
        assert resolve_backend(name, "cuda").name == name
