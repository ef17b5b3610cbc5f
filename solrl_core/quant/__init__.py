"""NVFP4 emulation for the low-precision explore copy (quantize–dequantize, then a normal matmul)."""

from solrl_core.quant.linear import (
    LayerRow,
    NVFP4EmulatedLinear,
    QuantReport,
    eligible_linears,
    quantize_linears,
    skip_match,
)
from solrl_core.quant.nvfp4 import (
    e2m1_codes,
    e2m1_values,
    nvfp4_decode,
    nvfp4_encode,
    quantize_dequantize,
    round_to_e2m1,
    to_e4m3,
)

__all__ = [
    "LayerRow",
    "NVFP4EmulatedLinear",
    "QuantReport",
    "e2m1_codes",
    "e2m1_values",
    "eligible_linears",
    "nvfp4_decode",
    "nvfp4_encode",
    "quantize_dequantize",
    "quantize_linears",
    "round_to_e2m1",
    "skip_match",
    "to_e4m3",
]
