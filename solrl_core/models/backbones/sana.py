"""Backbone adapter of SANA (1600M, 1024 px) through diffusers: SanaTransformer2DModel, AutoencoderDC (DC-AE,
spatial compression 32), a Gemma-2 text encoder.

`SanaPipeline.from_pretrained(model.path)` loads the components (solrl_core.models.backbones.diffusers_pipeline); the
adapter uses the pipeline's own `encode_prompt` (with the complex human instruction the pipeline prepends by
default, and its first-plus-last-tokens selection), its VAE scaling and image post-processing. Sampling is solrl's,
so the pipeline's resolution binning is never involved. The transformer gets the timestep as the pipeline passes
it: sigma × num_train_timesteps (1000) × the transformer's `timestep_scale` (1.0 for SANA 1600M).

Official settings (docs/method.md) are written in the native Sana code's module names. diffusers splits the
native fused projections, so one native name can stand for several diffusers modules:

| native Sana | what it is | diffusers SanaTransformer2DModel |
|---|---|---|
| `attn.qkv` | self-attention, fused q/k/v (LoRA; kept in high precision) | `attn1.to_q`, `attn1.to_k`, `attn1.to_v` |
| `attn.proj` | self-attention output (LoRA) | `attn1.to_out.0` |
| `cross_attn.q_linear` | cross-attention query (LoRA) | `attn2.to_q` |
| `cross_attn.kv_linear` | cross-attention, fused k/v of the caption (LoRA) | `attn2.to_k`, `attn2.to_v` |
| `cross_attn.proj` | cross-attention output (LoRA) | `attn2.to_out.0` |
| `t_embedder` | timestep MLP (kept) | `time_embed.emb.timestep_embedder` |
| `t_block` | AdaLN-single modulation (kept) | `time_embed.linear` |
| `cfg_embedder` | guidance embedding (kept) | `time_embed.guidance_embedder`, only with `guidance_embeds` (not 1600M) |
| `y_embedder` | caption projection (kept) | `caption_projection` |
| `x_embedder` | patch embedding, a conv (kept) | `patch_embed` |
| `final_layer` | final modulated norm + Linear (kept) | `norm_out`, `proj_out` |
| `logvar_linear` | training-time head (kept) | not built by diffusers |

The defaults (solrl_core/models/backbones/specs/sana.py) map every native name, the guidance variant's too; on the
standard 1600M model the names it lacks select nothing.

Quantization coverage. In diffusers' standard SANA 1600M config the two Linear layers wider than 2240, the AdaLN
modulation `time_embed.linear` (2240→13440) and the caption projection's 2304→2240, are skipped by name; every
other Linear is at most 2240 wide (attention 2240→2240, proj_out 2240→32) and the feed-forward (GLUMBConv) is made
of convolutions. So the official rule (skip if max(in, out) ≤ 2240) leaves **no** Linear to quantize: the "4-bit"
explore copy equals the full-precision model. The official runs used a native-code "LinearFFN" variant, whose Linear
feed-forward (and fused 2240→4480 cross-attention k/v) are wide enough. This adapter keeps the official rule as its
default, so the explore copy is honest about it (the quantize stage's report shows a 0% low-precision share). To
make the explore copy 4-bit on diffusers SANA, set `quant.min_width` below 2240 (every value in 0..2239 selects the
same layers): the self-attention output and the four cross-attention projections of every block (5 × 20 Linear,
2240→2240) then run in NVFP4 — 100 of 166 Linear layers, 59% of the Linear weights, 54% of the Linear FLOPs of a
1024 px sample (1024 image + 300 caption tokens); the convolutions (the feed-forward, 47% of all matmul weights)
stay in full precision either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence

import torch

from solrl_core.models.backbones.base import Conditioning, module_device
from solrl_core.models.backbones.diffusers_pipeline import DiffusersPipelineBackbone, square_side
from solrl_core.models.backbones.specs.sana import SPEC


def default_instruction() -> list[str]:
    """The complex human instruction SanaPipeline prepends to prompts by default (its `__call__` default)."""
    from diffusers import SanaPipeline

    return list(inspect.signature(SanaPipeline.__call__).parameters["complex_human_instruction"].default)


class SanaBackbone(DiffusersPipelineBackbone):
    name = "sana"
    defaults = SPEC.defaults
    pipeline_class = "SanaPipeline"
    title = "SANA"
    text_encoder_names = ("text_encoder",)

    @classmethod
    def meta_inputs(cls, config: dict, image_tokens: int, text_tokens: int, batch: int = 1) -> dict:
        side = square_side(config, image_tokens)
        return dict(
            hidden_states=torch.randn(batch, config["in_channels"], side, side),
            encoder_hidden_states=torch.randn(batch, text_tokens, config["caption_channels"]),
            timestep=torch.ones(batch),
        )

    def __init__(self, pipe, model):
        super().__init__(pipe, model)
        self.instruction = default_instruction()
        self.timestep_per_sigma = self._timestep_per_sigma()

    def _timestep_per_sigma(self) -> float:
        return float(self.scheduler_config["num_train_timesteps"]) * float(self.transformer.config.timestep_scale)

    def adopt_sibling_schedule(self, path: str) -> None:
        super().adopt_sibling_schedule(path)
        self.timestep_per_sigma = self._timestep_per_sigma()  # the sibling's transformer's timestep scale

    @torch.no_grad()
    def encode_prompts(self, prompts: Sequence[str]) -> Conditioning:
        """Gemma-2 hidden states (B, max_sequence_length, 2304) and their attention mask (B, max_sequence_length),
        encoded as SanaPipeline encodes prompts: the complex human instruction prepended, then the first token and
        the last max_sequence_length - 1 kept. The empty prompt (the unconditional input of classifier-free
        guidance) is encoded as the pipeline encodes its negative prompt: without the instruction."""
        self.require_text_encoders()
        prompts = list(prompts)
        rows: dict[bool, list[int]] = {True: [], False: []}
        for i, prompt in enumerate(prompts):
            rows[bool(prompt)].append(i)
        embeds: list[torch.Tensor | None] = [None] * len(prompts)
        masks: list[torch.Tensor | None] = [None] * len(prompts)
        for conditional, index in rows.items():
            if not index:
                continue
            e, m, _, _ = self.pipe.encode_prompt(
                [prompts[i] for i in index],
                do_classifier_free_guidance=False,
                device=self.device,
                max_sequence_length=self.max_sequence_length,
                complex_human_instruction=self.instruction if conditional else None,
            )
            for j, i in enumerate(index):
                embeds[i], masks[i] = e[j], m[j]
        return {"encoder_hidden_states": torch.stack(embeds), "encoder_attention_mask": torch.stack(masks)}

    def velocity(
        self,
        transformer: torch.nn.Module,
        x_t: torch.Tensor,
        sigma: torch.Tensor,
        cond: Conditioning,
        guidance: float = 1.0,
    ) -> torch.Tensor:
        """The transformer's output (the flow velocity eps - x0) as SanaPipeline's denoising loop calls it."""
        dtype, device = transformer.dtype, module_device(transformer)
        timestep = (sigma.to(device=device, dtype=torch.float32) * self.timestep_per_sigma).expand(x_t.shape[0])
        out = transformer(
            x_t.to(device=device, dtype=dtype),
            encoder_hidden_states=cond["encoder_hidden_states"].to(device=device, dtype=dtype),
            encoder_attention_mask=cond["encoder_attention_mask"].to(device),
            timestep=timestep,
            return_dict=False,
        )[0]
        return out.to(x_t.dtype)

    def sigmas(self, steps: int) -> list[float]:
        """Uniform sigmas 1, 1 - 1/steps, ..., 1/steps (terminal 0 excluded), not shifted.

        SANA's diffusers scheduler config carries `flow_shift` 3.0, which its own DPM-Solver sampling applies
        (sigma -> 3 sigma / (1 + 2 sigma)). The reference samples SANA with an Euler ODE on uniform sigmas from 1 to
        0, unshifted (`pipeline_with_logprob_sana` in NVlabs/Sana diffusion/post_training/diffusers_patch/
        pipeline_with_logprob.py; docs/method.md), so the shift is deliberately not applied here."""
        if steps < 1:
            raise ValueError("steps must be >= 1")
        return [1.0 - i / steps for i in range(steps)]
