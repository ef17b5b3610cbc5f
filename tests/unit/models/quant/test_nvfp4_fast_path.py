"""quantize_dequantize's fused float path gives exactly the values of encode -> decode (the code path)."""

import pytest
import torch

from solrl_core.models.quant.nvfp4 import nvfp4_decode, nvfp4_encode, quantize_dequantize


def _reference(x, fmt):
    codes, scales, s = nvfp4_encode(x, fmt)
    return nvfp4_decode(codes, scales, s, x.shape)


@pytest.mark.parametrize("fmt", ["nvfp4", "nvfp4_2d"])
def test_fused_path_equals_encode_decode(fmt):
    gen = torch.Generator().manual_seed(7)
    tensors = [torch.randn(64, 160, generator=gen) * 10 ** torch.empty(64, 1).uniform_(-6, 4, generator=gen)]
    # exact ties and binade edges of E2M1 after scaling: a block whose amax is 6 keeps values at their grid
    ties = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, -0.25, -2.5, -5.0, 1.99, 3.99, 0.0, 7.0, -9.0])
    tensors.append(ties.repeat(32, 1))
    tensors.append(torch.zeros(16, 48))
    tensors.append(torch.randn(33, 50, generator=gen))  # padding in both dims
    for x in tensors:
        torch.testing.assert_close(quantize_dequantize(x, fmt), _reference(x, fmt), rtol=0, atol=0)


def test_fused_path_on_batched_activations():
    x = torch.randn(4, 64, 128, generator=torch.Generator().manual_seed(3)) * 3
    torch.testing.assert_close(quantize_dequantize(x, "nvfp4"), _reference(x, "nvfp4"), rtol=0, atol=0)
