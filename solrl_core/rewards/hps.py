"""HPSv2.1: an open_clip ViT-H-14 whose weights are the HPS v2.1 checkpoint (no separate head).

Checkpoint: HPS_v2.1_compressed.pt from the hub repo xswu/HPSv2, a dict whose "state_dict" holds every weight of
open_clip's `ViT-H-14` (the same names and shapes as `open_clip.create_model("ViT-H-14", pretrained=None)`), so
the LAION base weights are not needed. It is read with torch.load(weights_only=True).

Score, as HPSv2's `img_score.score`: cos(image features, text features), both from the model's forward with
normalised outputs (no logit scale). Preprocessing, as HPSv2's validation transform: image to [0, 1], resize so the
longest side is the model's image size (bicubic, antialiased, on the tensor), pad the short side with zeros
(centred), normalise with the OpenAI CLIP mean/std; text: open_clip's tokenizer (77 tokens, bundled BPE vocab).
Differences from the reference: it runs ViT-H-14 under fp16 autocast on GPU; here the weights are cast to the
spec's dtype (default: bfloat16 on CUDA, float32 on the CPU). Prompts repeated within a batch are encoded once.

`arch` selects the open_clip architecture: a built-in name (default "ViT-H-14") or the path of an open_clip model
config JSON, registered at runtime under its file stem (this is how the tests build a tiny HPS).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards import model_files
from solrl_core.rewards.base import ModelReward, RewardModelSpec, host_scores, torch_dtype
from solrl_core.rewards.preprocess import normalised_pixels

DEFAULT_ARCH = "ViT-H-14"
CHECKPOINT = "HPS_v2.1_compressed.pt"


def _arch(spec: RewardModelSpec) -> str:
    return spec.arch or os.environ.get(model_files.env_name("hpsv2", "arch")) or DEFAULT_ARCH


def register_arch(arch: str) -> str:
    """open_clip model name for `arch`: a built-in name, or a config JSON file added to open_clip's registry."""
    import open_clip

    if arch.endswith(".json"):
        path = model_files.expand(arch)
        if not path.is_file():
            raise SolrlError(f"hpsv2: no open_clip model config at {path} (reward_models.hpsv2.arch)")
        if path.stem not in open_clip.list_models():
            open_clip.add_model_config(path)
        return path.stem
    if arch not in open_clip.list_models():
        raise SolrlError(f"hpsv2: unknown open_clip architecture '{arch}' (reward_models.hpsv2.arch)")
    return arch


class HPSv2(ModelReward):
    name = "hpsv2"
    title = "HPSv2.1"
    summary = "HPS v2.1 (open_clip ViT-H-14 fine-tuned on human preferences): cos(image, text)"
    needs = f"{CHECKPOINT} (the full ViT-H-14 state dict)"
    source = f"hub xswu/HPSv2, file {CHECKPOINT}"
    spec_keys = frozenset({"path", "arch"})

    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        path, _ = model_files.candidate(cls.name, "path", spec.path, CHECKPOINT)
        if (path is None or not path.is_file()) and model_files.downloads_allowed(spec):
            path = model_files.hub_file(cls.name, "xswu/HPSv2", CHECKPOINT)
        if path is None or not path.is_file():
            raise model_files.missing_error(cls.name, "path", "weights", path, f"download {CHECKPOINT} from xswu/HPSv2", CHECKPOINT)
        files = {"path": path}
        arch = _arch(spec)
        if arch.endswith(".json"):
            arch_path = model_files.expand(arch)
            if not arch_path.is_file():
                raise SolrlError(f"hpsv2: no open_clip model config at {arch_path} (reward_models.hpsv2.arch)")
            files["arch"] = arch_path
        return files

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        super().__init__(files, spec)
        import open_clip

        arch = str(files["arch"]) if "arch" in files else _arch(spec)
        with model_files.quiet_logs():
            model_name = register_arch(arch)
            state = model_files.load_state_dict(self.name, files["path"])
            with model_files.skip_init():
                model = open_clip.create_model(model_name, pretrained=None, device="cpu")
            try:
                result = model.load_state_dict(state, strict=False)
            except RuntimeError as exc:
                first = str(exc).strip().splitlines()[-1].strip()
                raise SolrlError(f"hpsv2: {files['path']} does not fit open_clip {model_name} ({first})") from None
            if result.missing_keys or result.unexpected_keys:
                missing, extra = result.missing_keys, result.unexpected_keys
                example = (missing or extra)[0]
                raise SolrlError(
                    f"hpsv2: {files['path']} does not fit open_clip {model_name}: {len(missing)} weights missing, "
                    f"{len(extra)} unexpected (e.g. '{example}'); check reward_models.hpsv2.arch"
                )
            self.tokenizer = open_clip.get_tokenizer(model_name)
        self.model = model.to(self.torch_device, dtype=torch_dtype(self.dtype)).eval()
        size = model.visual.image_size
        self.image_size = int(size[0] if isinstance(size, (tuple, list)) else size)
        self.mean = list(getattr(model.visual, "image_mean", None) or open_clip.OPENAI_DATASET_MEAN)
        self.std = list(getattr(model.visual, "image_std", None) or open_clip.OPENAI_DATASET_STD)

    def pixels(self, images: np.ndarray):
        """HPSv2's validation transform, batched: longest side to image_size, zero-pad to a square, normalise."""
        x = normalised_pixels(images, self.image_size, "longest", "bicubic", self.mean, self.std)
        return x.to(self.torch_device, dtype=next(self.model.parameters()).dtype)

    def embeddings(self, images: np.ndarray, prompts: list[str]):
        """(unit image features (B, D), unit text features (B, D)) in float32."""
        import torch

        unique = list(dict.fromkeys(prompts))
        index = torch.tensor([unique.index(p) for p in prompts], device=self.torch_device)
        text = self.model.encode_text(self.tokenizer(unique).to(self.torch_device), normalize=True).float()
        image = self.model.encode_image(self.pixels(images), normalize=True).float()
        return image, text[index]

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        image, text = self.embeddings(images, prompts)
        return host_scores((image * text).sum(-1))
