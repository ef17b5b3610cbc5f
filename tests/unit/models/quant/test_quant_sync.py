"""LoRA sync: after a merged-weight update, re-quantizing only what changed gives exactly a fresh quantization."""

import copy

import pytest
import torch

from solrl_core.models.quant import apply_backend, changed_keys, requantize_changed
from solrl_core.models.quant.backends import BackendChoice
from tiny_transformers import LORA_TARGETS, SD35_SKIP, forward_fn, lora_update, tiny_sd3


def explore_copy(merged: dict, backend, skip, min_width):
    model = tiny_sd3()
    model.load_state_dict(merged)
    apply_backend(model, backend, skip, min_width)
    return model


CASES = [
    ("nvfp4_emulated", [], 0),  # every Linear quantized, including the adapter targets
    ("nvfp4_emulated", SD35_SKIP, 32),  # adapter targets (32-wide) stay fp32: copied, not quantized
    ("fp8_emulated", [], 0),
    ("bf16", [], 0),
    (BackendChoice("fp8", "test", "fp8", "torch._scaled_mm"), [], 0),
]


@pytest.mark.parametrize("backend,skip,min_width", CASES)
def test_sync_equals_fresh_quantization(backend, skip, min_width):
    merged0 = {k: v.clone() for k, v in tiny_sd3().state_dict().items()}
    explore = explore_copy(merged0, backend, skip, min_width)
    merged1 = lora_update(merged0, seed=1)
    merged2 = lora_update(merged1, seed=2)
    for previous, current in ((merged0, merged1), (merged1, merged2)):
        changed = requantize_changed(explore, current, previous)
        assert changed == [k for k in current if not torch.equal(current[k], previous[k])]
        assert len(changed) == 7  # 4 adapter weights, 1 bias, 1 other Linear, 1 conv weight
        fresh = explore_copy(current, backend, skip, min_width)
        got, want = explore.state_dict(), fresh.state_dict()
        assert got.keys() == want.keys()
        for k in want:
            assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
        with torch.no_grad():
            assert torch.equal(forward_fn(explore)(), forward_fn(fresh)())


def test_only_changed_layers_are_requantized(monkeypatch):
    from solrl_core.models.quant.linear import NVFP4EmulatedLinear

    merged0 = {k: v.clone() for k, v in tiny_sd3().state_dict().items()}
    explore = explore_copy(merged0, "nvfp4_emulated", [], 0)
    calls = []
    original = NVFP4EmulatedLinear.load_source

    def spy(self, weight, bias=None):
        calls.append(self)
        return original(self, weight, bias)

    monkeypatch.setattr(NVFP4EmulatedLinear, "load_source", spy)
    requantize_changed(explore, lora_update(merged0, seed=1), merged0)
    names = {n for n, m in explore.named_modules() if any(m is c for c in calls)}
    assert names == {f"transformer_blocks.0.{t}" for t in LORA_TARGETS} | {"transformer_blocks.1.ff.net.2"}
    calls.clear()
    assert requantize_changed(explore, merged0, merged0) == [] and calls == []


def test_no_previous_refreshes_everything_and_bad_keys_raise():
    merged0 = {k: v.clone() for k, v in tiny_sd3().state_dict().items()}
    explore = explore_copy(merged0, "nvfp4_emulated", [], 0)
    merged1 = lora_update(merged0, seed=3)
    assert requantize_changed(explore, merged1, None) == list(merged1)
    fresh = explore_copy(merged1, "nvfp4_emulated", [], 0)
    assert all(torch.equal(a, b) for a, b in zip(explore.state_dict().values(), fresh.state_dict().values()))
    assert changed_keys({"a": torch.ones(2)}, {"a": torch.ones(3)}) == ["a"]
    with pytest.raises(ValueError, match="no module"):
        requantize_changed(explore, {"nope.weight": torch.ones(1)}, {})
    bad = copy.copy(merged1)
    bad["transformer_blocks.0.attn.to_q.weight"] = torch.ones(3, 3)
    with pytest.raises(ValueError, match="does not fit"):
        requantize_changed(explore, bad, merged1)
