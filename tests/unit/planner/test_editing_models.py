"""The editing models in the planner: a forward counted with the source's tokens after the generated image's (their
adapters' `meta_inputs`), against their base models' counts at the same sizes."""

import pytest

from solrl_core.planner.flops import forward_flops

pytestmark = pytest.mark.slow  # five meta-device forwards of 12-20 B models


def test_a_kontext_forward_is_flux1s_with_twice_the_image_tokens():
    kontext, flux = forward_flops("flux1-kontext"), forward_flops("flux1")
    assert kontext.image_tokens == flux.image_tokens == 1024 and kontext.params == flux.params
    doubled = forward_flops("flux1", image_tokens=2 * flux.image_tokens)
    assert (kontext.linear, kontext.attention, kontext.low_precision) == (
        doubled.linear, doubled.attention, doubled.low_precision)
    assert kontext.total > 1.9 * flux.total


def test_a_qwen_image_edit_forward_reads_the_source_in_its_image_and_text_tokens():
    edit = forward_flops("qwenimage-edit")
    assert (edit.image_tokens, edit.text_tokens) == (1024, 512)  # the source's 324 Qwen2.5-VL tokens in the text
    # Linear FLOPs are a * image tokens + b * text tokens (two streams): a from Qwen-Image at two image sizes
    small, base = (forward_flops("qwenimage", image_tokens=n, text_tokens=512) for n in (256, 1024))
    per_image_token = (base.linear - small.linear) / (1024 - 256)
    assert edit.linear == pytest.approx(base.linear + 1024 * per_image_token, rel=1e-12)  # 1,024 more: the source's
    assert edit.attention > base.attention
