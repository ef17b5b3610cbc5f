"""PickScore and CLIPScore: a transformers CLIPModel directory plus a CLIP processor (tokenizer + image config).

Score of an (image, prompt) pair = logit_scale.exp() * cos(image embedding, text embedding) / scale, i.e. the
diagonal of CLIP's logits_per_image divided by a constant, as the DiffusionNFT / Sol-RL reference scorers do:
  pickscore  scale 26  (PickScore_v1; the reference brings its 100 * cos into roughly [0, 1])
  clipscore  scale 100 (openai/clip-vit-large-patch14, whose logit_scale.exp() is 100: the score is the cosine)
Preprocessing follows each reference scorer:
  pickscore  the CLIP image processor on PIL images (bicubic resize of the shortest edge, centre crop, CLIP mean/std),
             the processor of laion/CLIP-ViT-H-14-laion2B-s32B-b79K (the one PickScore was trained with);
  clipscore  torchvision on float tensors in [0, 1]: bilinear antialiased resize of the shortest edge, centre crop,
             normalise (the reference's tensor transform built from the same processor config).
Text: the CLIP tokenizer, truncated to 77 tokens and padded to 77 (CLIP's causal text tower reads the end-of-text
token, so padding never changes a score; fixed-length padding keeps scores independent of the batch's prompts).
Prompts repeated within a batch are encoded once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards import model_files
from solrl_core.rewards.base import ModelReward, RewardModelSpec, host_scores, torch_dtype
from solrl_core.rewards.preprocess import normalised_pixels

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.safetensors.index.json", "pytorch_model.bin.index.json")
TOKENIZER_FILES = (("tokenizer.json",), ("vocab.json", "merges.txt"))


def has_model(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file() and any((path / f).is_file() for f in WEIGHT_FILES)


def has_processor(path: Path) -> bool:
    if not (path.is_dir() and (path / "preprocessor_config.json").is_file()):
        return False
    return any(all((path / f).is_file() for f in group) for group in TOKENIZER_FILES)


def _features(out):
    """transformers 5 returns an output object whose pooler_output holds the projected features; 4.x a tensor."""
    return out if hasattr(out, "norm") else out.pooler_output


class _CLIPReward(ModelReward):
    repo_id: ClassVar[str]
    default_rel: ClassVar[str]  # under $SOLRL_REWARD_MODELS_DIR
    processor_repo_id: ClassVar[str]
    processor_rel: ClassVar[str | None] = None
    scale: ClassVar[float]
    image_mode: ClassVar[str]  # "pil" | "tensor"
    spec_keys = frozenset({"path", "processor"})

    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        path, _ = model_files.candidate(cls.name, "path", spec.path, cls.default_rel)
        if (path is None or not has_model(path)) and model_files.downloads_allowed(spec):
            path = model_files.hub_dir(cls.name, cls.repo_id, ["*.json", "*.txt", "*.safetensors"])
            if not has_model(path):
                path = model_files.hub_dir(cls.name, cls.repo_id, ["*.json", "*.txt", "pytorch_model.bin"])
        if path is None or not has_model(path):
            what = "weights (config.json + model.safetensors or pytorch_model.bin)"
            raise model_files.missing_error(cls.name, "path", what, path, f"download {cls.repo_id}", cls.default_rel)
        proc, _ = model_files.candidate(cls.name, "processor", spec.processor, None)
        if proc is None:
            proc = path
            if not has_processor(path) and cls.processor_rel and os.environ.get(model_files.ENV_ROOT):
                proc = model_files.expand(os.environ[model_files.ENV_ROOT]) / cls.processor_rel
        if not has_processor(proc) and model_files.downloads_allowed(spec):
            proc = model_files.hub_dir(cls.name, cls.processor_repo_id, ["*.json", "*.txt"])
        if not has_processor(proc):
            raise model_files.missing_error(
                cls.name, "processor", "CLIP processor (preprocessor_config.json + tokenizer files)", proc,
                f"download the processor files of {cls.processor_repo_id}", cls.processor_rel,
            )
        return {"path": path, "processor": proc}

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        super().__init__(files, spec)
        import torch
        from transformers import AutoTokenizer, CLIPModel

        with model_files.quiet_logs():
            try:
                model = CLIPModel.from_pretrained(files["path"], local_files_only=True, dtype=torch.float32)
                # exp(logit_scale) from the float32 weight: bfloat16 would round ln 100 to 4.59375, scaling every
                # score by 0.989
                self.logit_scale = model.logit_scale.detach().exp().to(self.torch_device)
                self.model = model.to(self.torch_device, dtype=torch_dtype(self.dtype)).eval()
                self.tokenizer = AutoTokenizer.from_pretrained(files["processor"], local_files_only=True)
            except (OSError, ValueError) as exc:
                raise SolrlError(f"{self.name}: cannot load {files['path']} ({type(exc).__name__}: {exc})") from None
        self.max_length = min(int(self.tokenizer.model_max_length), self.model.config.text_config.max_position_embeddings)
        proc_cfg = json.loads((files["processor"] / "preprocessor_config.json").read_text())
        self.image_size = self.model.config.vision_config.image_size
        if self.image_mode == "pil":
            from transformers import CLIPImageProcessorPil

            self.image_processor = CLIPImageProcessorPil(**{k: v for k, v in proc_cfg.items() if k in _PIL_KEYS})
            edge = _shortest_edge(proc_cfg.get("size", self.image_size))
            if proc_cfg.get("do_resize", True) and proc_cfg.get("resample", 3) == 3 and isinstance(edge, int):
                self.input_size = edge  # the processor begins with resize_shortest_pil (PIL's 3 is bicubic)
        else:
            self.resize = _shortest_edge(proc_cfg.get("size", self.image_size))
            crop = proc_cfg.get("crop_size", self.image_size)
            self.crop = (crop["height"], crop["width"]) if isinstance(crop, dict) else (int(crop), int(crop))
            self.mean = list(proc_cfg.get("image_mean", _OPENAI_MEAN))
            self.std = list(proc_cfg.get("image_std", _OPENAI_STD))

    def pixels(self, images: np.ndarray):
        """(B, 3, S, S) normalised pixel values on the model's device and dtype."""
        if self.image_mode == "pil":
            from PIL import Image

            pixels = self.image_processor([Image.fromarray(img) for img in images], return_tensors="pt")["pixel_values"]
        else:
            pixels = normalised_pixels(images, self.resize, "shortest", "bilinear", self.mean, self.std, self.crop)
        return pixels.to(self.torch_device, dtype=self.model.dtype)

    def embeddings(self, images: np.ndarray, prompts: list[str]):
        """(unit image embeddings (B, D), unit text embeddings (B, D)) in float32."""
        import torch

        unique = list(dict.fromkeys(prompts))
        index = torch.tensor([unique.index(p) for p in prompts], device=self.torch_device)
        tokens = self.tokenizer(
            unique, padding="max_length", truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        text = _features(
            self.model.get_text_features(
                input_ids=tokens["input_ids"].to(self.torch_device),
                attention_mask=tokens["attention_mask"].to(self.torch_device),
            )
        ).float()
        image = _features(self.model.get_image_features(pixel_values=self.pixels(images))).float()
        image = image / image.norm(dim=-1, keepdim=True)
        text = text / text.norm(dim=-1, keepdim=True)
        return image, text[index]

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        image, text = self.embeddings(images, prompts)
        logits = self.logit_scale * (image * text).sum(-1)
        return host_scores(logits / self.scale)


_OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
_OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
_PIL_KEYS = {
    "do_resize", "size", "resample", "do_center_crop", "crop_size", "do_rescale", "rescale_factor", "do_normalize",
    "image_mean", "image_std", "do_convert_rgb",
}


def _shortest_edge(size) -> int | list[int]:
    if isinstance(size, dict):
        if "shortest_edge" in size:
            return int(size["shortest_edge"])
        return [int(size["height"]), int(size["width"])]
    return int(size)


class PickScore(_CLIPReward):
    name = "pickscore"
    title = "PickScore"
    summary = "PickScore_v1 (CLIP-H fine-tuned on Pick-a-Pic): logit_scale * cos(image, text) / 26"
    needs = "PickScore_v1 model dir (config.json + weights) and the CLIP-ViT-H-14 processor files"
    source = "hub yuvalkirstain/PickScore_v1 (processor: laion/CLIP-ViT-H-14-laion2B-s32B-b79K)"
    repo_id = "yuvalkirstain/PickScore_v1"
    default_rel = "PickScore_v1"
    processor_repo_id = "laion/CLIP-ViT-H-14-laion2B-s32B-b79K"
    processor_rel = "CLIP-ViT-H-14-laion2B-s32B-b79K"
    scale = 26.0
    image_mode = "pil"


class CLIPScore(_CLIPReward):
    name = "clipscore"
    title = "CLIPScore"
    summary = "CLIP ViT-L/14 image-text similarity: logit_scale * cos(image, text) / 100"
    needs = "openai/clip-vit-large-patch14 model dir (config.json + weights + processor files)"
    source = "hub openai/clip-vit-large-patch14"
    repo_id = "openai/clip-vit-large-patch14"
    default_rel = "clip-vit-large-patch14"
    processor_repo_id = "openai/clip-vit-large-patch14"
    scale = 100.0
    image_mode = "tensor"


class CLIPEdit(CLIPScore):
    """An edit scored by CLIP (openai/clip-vit-large-patch14, CLIPScore's model and preprocessing) against its source:

      direction  cos(E_img(edited) - E_img(source), E_txt(instruction)): the CLIP directional similarity (Gal et al.
                 2022, StyleGAN-NADA; InstructPix2Pix, Brooks et al. 2023, reports it for edits), with the
                 instruction's embedding standing for the caption change, which an instruction set does not carry
      preserved  cos(E_img(edited), E_img(source)): CLIP-I of Emu Edit (Sheynin et al. 2024), what of the source is
                 kept
    score = (direction + preserved) / 2. An unchanged source scores preserved 1 and direction 0 (no change); an
    image unrelated to the source scores a low `preserved`."""

    name = "clip_edit"
    title = "CLIP edit"
    summary = "CLIP direction of the change towards the instruction, and CLIP-I similarity to the source, averaged"
    edits = True

    def score_batch(self, images: np.ndarray, prompts: list[str], sources: np.ndarray | None = None) -> np.ndarray:
        edited, text = self.embeddings(images, prompts)
        source = _features(self.model.get_image_features(pixel_values=self.pixels(sources[:, 0]))).float()
        source = source / source.norm(dim=-1, keepdim=True)
        change = edited - source
        direction = (change * text).sum(-1) / change.norm(dim=-1).clamp_min(1e-6)
        preserved = (edited * source).sum(-1)
        return host_scores((direction + preserved) / 2)
