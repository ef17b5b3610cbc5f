"""Low-precision explore copies: NVFP4 / FP8 numerics (emulated and, on capable GPUs, real), backends chosen by
name, the LoRA sync, the fidelity guardrail, and coverage of the real backbones.

Transformer Engine is never imported here; ``solrl_core.models.quant.te_backend`` imports it lazily when a TE backend
is built. ``solrl_core.lab.quant_coverage`` (diffusers) is not imported here either.
"""

from solrl_core.models.quant.backends import (
    BACKENDS,
    CONCRETE_BACKENDS,
    BackendChoice,
    apply_backend,
    device_capability,
    resolve_backend,
    runnable_backends,
)
from solrl_core.models.quant.fp8 import fp8_decode, fp8_encode, fp8_quantize_dequantize
from solrl_core.models.quant.guardrail import Escalation, FidelityGuardrail
from solrl_core.models.quant.layers import BF16Linear, FP8EmulatedLinear, ScaledMMFP8Linear
from solrl_core.models.quant.linear import (
    LayerRow,
    NVFP4EmulatedLinear,
    QuantReport,
    eligible_linears,
    quantize_linears,
    replace_linears,
    skip_match,
)
from solrl_core.models.quant.nvfp4 import (
    QDQ_FORMATS,
    e2m1_codes,
    e2m1_values,
    nvfp4_decode,
    nvfp4_encode,
    quantize_dequantize,
    round_to_e2m1,
    to_e4m3,
)
from solrl_core.models.quant.sync import changed_keys, requantize_changed

__all__ = [
    "BACKENDS",
    "BF16Linear",
    "BackendChoice",
    "CONCRETE_BACKENDS",
    "Escalation",
    "FP8EmulatedLinear",
    "FidelityGuardrail",
    "LayerRow",
    "NVFP4EmulatedLinear",
    "QDQ_FORMATS",
    "QuantReport",
    "ScaledMMFP8Linear",
    "apply_backend",
    "changed_keys",
    "device_capability",
    "e2m1_codes",
    "e2m1_values",
    "eligible_linears",
    "fp8_decode",
    "fp8_encode",
    "fp8_quantize_dequantize",
    "nvfp4_decode",
    "nvfp4_encode",
    "quantize_dequantize",
    "quantize_linears",
    "replace_linears",
    "requantize_changed",
    "resolve_backend",
    "runnable_backends",
    "round_to_e2m1",
    "skip_match",
    "to_e4m3",
]
