"""Checks every diffusers-pipeline backbone adapter must pass, shared by the tests of tests/unit/models/backbones/
(FLUX.1, SD3.5, SANA, Qwen-Image), and the tiny model loaded as those tests load it."""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from solrl_core.config.schema import ModelConfig
from solrl_core.errors import SolrlError
from solrl_core.models.backbones import registry
from solrl_core.models.backbones.base import Backbone
from solrl_core.models.backbones.tiny import make_tiny_model
from solrl_core.models.quant.linear import skip_match
from solrl_core.rl.policy import LoraPolicy

PROMPTS = ["a red circle", "two blue squares on the left"]
RES = 64  # the resolution the tiny models are tested at


def load_tiny(kind: str, path: Path, resolution: int = RES) -> Backbone:
    """The adapter of model.kind `kind` on the tiny directory `path`."""
    return registry.load_backbone(ModelConfig(kind=kind, path=str(path), resolution=resolution))


def assert_same_directory(a: Path, b: Path) -> None:
    """Two tiny-model directories hold the same files with the same bytes."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    _, mismatch, errors = filecmp.cmpfiles(a, b, [str(f) for f in files_a], shallow=False)
    assert not mismatch and not errors, mismatch + errors


def assert_complete_and_small(path: Path, components: dict[str, str], max_mb: float = 5.0) -> None:
    """model_index.json lists `components` (name -> class) and each has its subfolder; the directory is small."""
    index = json.loads((path / "model_index.json").read_text())
    for name, cls in components.items():
        assert index[name][1] == cls, (name, index[name])
        assert (path / name).is_dir(), name
    size = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert size < max_mb * 2**20, f"{size / 2**20:.1f} MB"


def assert_made_again_alike(tiny_dir: Path, name: str, tmp_path: Path, backbone: Backbone) -> None:
    """`make_tiny_model(name)` is seeded (made again, the same bytes) and its transformer's Linear widths are multiples
    of 16 (the NVFP4 block)."""
    assert_linear_widths_multiple_of_16(backbone.transformer)
    assert_same_directory(tiny_dir, make_tiny_model(name, tmp_path / "again"))


def assert_linear_widths_multiple_of_16(model: nn.Module) -> None:
    bad = [(n, m.in_features, m.out_features) for n, m in model.named_modules()
           if isinstance(m, nn.Linear) and (m.in_features % 16 or m.out_features % 16)]
    assert not bad, bad


def assert_noise_is_per_seed(backbone: Backbone) -> None:
    a = backbone.initial_noise([3, 4])
    assert a.shape == (2, *backbone.latent_shape) and a.dtype == torch.float32
    assert torch.equal(a, backbone.initial_noise([3, 4]))
    assert torch.equal(a[1], backbone.initial_noise([4])[0])  # independent of the batch it is drawn in
    assert not torch.equal(a[0], a[1])


def assert_encoding_deterministic_and_batch_first(backbone: Backbone, shapes: dict[str, tuple]) -> None:
    cond = backbone.encode_prompts(PROMPTS)
    assert {k: tuple(v.shape) for k, v in cond.items()} == shapes
    again = backbone.encode_prompts(PROMPTS)
    for key in cond:
        assert torch.equal(cond[key], again[key]), key
        single = backbone.encode_prompts(PROMPTS[1:])[key]
        torch.testing.assert_close(single[0], cond[key][1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(cond[key][0], cond[key][1]), f"{key}: two prompts encode alike"


def assert_velocity_batch_consistent(backbone: Backbone, **kwargs) -> None:
    """Shape and finiteness, and each row of a batch with per-sample sigmas equals that sample run alone."""
    cond = backbone.encode_prompts(PROMPTS)
    x = backbone.initial_noise([0, 1])
    sigma = torch.tensor([0.9, 0.3])
    v = backbone.velocity(backbone.transformer, x, sigma, cond, **kwargs)
    assert v.shape == x.shape and v.dtype == x.dtype and torch.isfinite(v).all()
    for i in range(2):
        row = {k: c[i : i + 1] for k, c in cond.items()}
        alone = backbone.velocity(backbone.transformer, x[i : i + 1], sigma[i : i + 1], row, **kwargs)
        torch.testing.assert_close(alone[0], v[i], atol=1e-5, rtol=1e-5)
    other = backbone.velocity(backbone.transformer, x, torch.tensor([0.5, 0.5]), cond, **kwargs)
    assert not torch.allclose(other, v), "the velocity ignores sigma"


def assert_decode(backbone: Backbone, latents: torch.Tensor, reference: np.ndarray) -> None:
    """decode() gives uint8 (B, H, W, 3) equal to the pipeline's own decode (float in [0, 1]) up to rounding, and
    the same images (up to rounding) whatever model.decode_chunk is."""
    images = backbone.decode(latents)
    side = backbone.resolution
    assert images.shape == (latents.shape[0], side, side, 3) and images.dtype == np.uint8
    expected = (reference * 255).round()
    assert np.abs(images.astype(np.int16) - expected.astype(np.int16)).max() <= 1
    old = backbone.decode_chunk
    try:
        backbone.decode_chunk = 1
        chunked = backbone.decode(latents)  # batch-size dependent kernels may round a pixel the other way
        assert np.abs(chunked.astype(np.int16) - images.astype(np.int16)).max() <= 1
    finally:
        backbone.decode_chunk = old


def assert_lora_targets_and_skip_names(backbone: Backbone, other_variants: frozenset[str] = frozenset()) -> None:
    """Every LoRA target names at least one nn.Linear (as peft matches suffixes), LoRA attaches to exactly those
    Linear layers and the velocity runs through them; every quant skip name matches at least one module (except
    `other_variants`: names of modules only another variant of the architecture has, checked by the caller)."""
    transformer = backbone.transformer
    names = [n for n, _ in transformer.named_modules()]
    linears = {n for n, m in transformer.named_modules() if isinstance(m, nn.Linear)}
    targeted = set()
    for target in backbone.defaults.lora_targets:
        hits = {n for n in linears if n == target or n.endswith("." + target)}
        assert hits, f"LoRA target {target!r} matches no nn.Linear"
        targeted |= hits
    for skip in set(backbone.defaults.quant_skip_names) - other_variants:
        assert any(skip_match(n, [skip]) for n in names), f"quant skip name {skip!r} matches no module"

    import copy

    policy = LoraPolicy.attach(copy.deepcopy(transformer), backbone.defaults.lora_targets, rank=4, alpha=8)
    wrapped = {n.removesuffix(".base_layer") for n, m in policy.transformer.named_modules()
               if n.endswith(".base_layer") and isinstance(m, nn.Linear)}
    assert wrapped == targeted
    cond = backbone.encode_prompts(PROMPTS[:1])
    x = backbone.initial_noise([0])
    v = backbone.velocity(policy.transformer, x, torch.tensor([0.7]), cond)
    torch.testing.assert_close(v, backbone.velocity(transformer, x, torch.tensor([0.7]), cond))  # ΔW starts at 0


def assert_text_encoders_released(backbone: Backbone, encoders: tuple[str, ...]) -> None:
    """release_text_encoders() drops the pipeline's `encoders`, encoding is then refused in one error, and the
    conditioning encoded before still runs the velocity."""
    cond = backbone.encode_prompts(PROMPTS)
    backbone.release_text_encoders()
    assert all(getattr(backbone.pipe, name) is None for name in encoders)
    with pytest.raises(SolrlError, match="released"):
        backbone.encode_prompts(PROMPTS)
    v = backbone.velocity(backbone.transformer, backbone.initial_noise([0, 1]), torch.tensor([0.5, 0.5]), cond)
    assert torch.isfinite(v).all()  # cached conditioning still works


def assert_path_errors(kind: str, tiny_dir: Path, tmp_path: Path, subfolder: str) -> Path:
    """model.path unset, absent, a hub name without allow_downloads, a copy of the tiny directory without
    `subfolder`: one-line errors naming the fix. Returns that broken copy."""
    def load(path):
        return registry.load_backbone(ModelConfig(kind=kind, path=path))

    with pytest.raises(SolrlError, match="model.path is required"):
        load(None)
    with pytest.raises(SolrlError, match="does not exist"):
        load(str(tmp_path / "nowhere" / kind))
    with pytest.raises(SolrlError, match="allow_downloads"):
        load("solrl-tests/no-such-model")
    broken = shutil.copytree(tiny_dir, tmp_path / "broken")
    shutil.rmtree(broken / subfolder)
    with pytest.raises(SolrlError, match=rf"lacks the subfolder\(s\) {subfolder}") as err:
        load(str(broken))
    assert "\n" not in str(err.value)
    return broken
