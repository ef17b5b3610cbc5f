"""The text-embedding cache: each prompt is encoded once per run and its conditioning stored with the run.

Layout: `<run>/text_cache/<model key>/<prompt key>.safetensors`, one file per prompt holding that prompt's
conditioning tensors without the batch dimension (safetensors metadata: the prompt and the model config). The
model key hashes the backbone kind and the `model:` settings the encoders depend on (path, dtype, device, text
length), so another model or precision never reads these embeddings; the prompt key hashes the prompt text, and an
edit prompt's source images' bytes with it (solrl_core/edit_sources.py): an editing model's conditioning of a prompt
holds its sources' encoding too, made once and reused by every stage. Explore, regenerate, the update and the
evaluation all take their conditioning from here (`StageContext.encode`).

With `model.release_text_encoders`, the whole train and evaluation prompt sets are encoded up front and the
backbone's text encoders are released; a prompt missing from the cache afterwards is an error.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import save_file
from tqdm.auto import tqdm

from solrl_core.edit_sources import Sources, file_digest, load_images
from solrl_core.models.backbones.base import Backbone, Conditioning
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.errors import SolrlError
from solrl_core.prompts import CALIBRATION_PROMPT, eval_prompt_set, eval_sources, train_prompt_set, train_sources
from solrl_core.run.storage import as_path, is_remote, load_tensors_with_metadata, location, save_tensors

CACHE_DIR = "text_cache"
# model: settings that do not change what the text encoders output
_NOT_IN_KEY = ("sampler", "gradient_checkpointing", "decode_chunk", "release_text_encoders", "allow_downloads",
               "resolution")


def model_key(model_cfg) -> str:
    """Hash of the `model:` settings the text encoders depend on."""
    settings = model_cfg.model_dump(mode="json", exclude=set(_NOT_IN_KEY))
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def prompt_key(prompt: str, sources: Sources = ()) -> str:
    """The cache file's name of a prompt (with its source images, for an edit prompt)."""
    text = prompt + "".join(f"\0{file_digest(path)}" for path in sources)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


class TextCache:
    """Conditioning of prompts, encoded by `backbone` at most once and kept under `root/<model key>/`.

    `get(prompts)` returns batch-first conditioning on the model's device. Recently used prompts stay in memory
    (up to `memory_items`), the rest is read back from disk when needed.
    """

    def __init__(self, root: Path, backbone: Backbone, model_cfg, batch_size: int = 16, memory_items: int = 128):
        self.backbone = backbone
        self.model_json = model_cfg.model_dump_json()
        self.directory = as_path(root) / model_key(model_cfg)
        self.device = torch.device(model_cfg.device)
        self.batch_size = batch_size
        self.memory_items = memory_items
        self.released = False
        self.encoded = 0  # prompts this object had the text encoders encode
        self._memory: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()

    def path(self, prompt: str, sources: Sources = ()) -> Path:
        """The cache file of a prompt (with its sources)."""
        return self._file(prompt_key(prompt, sources))

    def _file(self, key: str) -> Path:
        return self.directory / f"{key}.safetensors"

    def _keys(self, prompts: Sequence[str], sources: Sequence[Sources] | None) -> list[str]:
        if sources is None:
            return [prompt_key(p) for p in prompts]
        if len(sources) != len(prompts):
            raise ValueError(f"{len(prompts)} prompts but {len(sources)} source lists")
        if not self.backbone.edits:
            raise SolrlError(f"the prompts have source images (an edit prompt set), but model.kind "
                             f"{self.backbone.name} does not edit images: use an editing model (e.g. flux1-kontext)")
        return [prompt_key(p, s) for p, s in zip(prompts, sources)]

    def missing(self, prompts: Sequence[str], sources: Sequence[Sources] | None = None) -> list[int]:
        """The positions of the distinct prompts (in order) that are neither in memory nor on disk."""
        seen, out = set(), []
        for i, key in enumerate(self._keys(prompts, sources)):
            if key not in seen and key not in self._memory and not self._file(key).is_file():
                out.append(i)
            seen.add(key)
        return out

    def ensure(self, prompts: Sequence[str], progress: bool = False, desc: str = "encode prompts",
               sources: Sequence[Sources] | None = None) -> int:
        """Encode and store every prompt (with its `sources`, per prompt) not cached yet; return how many were
        encoded."""
        todo = self.missing(prompts, sources)
        if todo and self.released:
            raise SolrlError(
                f"the text encoders were released (model.release_text_encoders) but {len(todo)} prompt(s) are not in "
                f"the text cache, e.g. '{prompts[todo[0]]}'; turn release_text_encoders off or add them to the prompt "
                "sets"
            )
        bar = tqdm(total=len(todo), desc=desc, unit="prompt", leave=False, disable=not progress or not todo)
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            texts = [prompts[i] for i in chunk]
            if sources is None:
                cond = self.backbone.encode_prompts(texts)
            else:
                cond = self.backbone.encode_prompts(texts, [load_images(sources[i]) for i in chunk])
            for row, i in enumerate(chunk):
                tensors = {k: v[row].detach().to("cpu").contiguous() for k, v in cond.items()}
                key = prompt_key(prompts[i], sources[i] if sources is not None else ())
                self._store(key, prompts[i], tensors)
                self._remember(key, tensors)
            self.encoded += len(chunk)
            bar.update(len(chunk))
        bar.close()
        return len(todo)

    def get(self, prompts: Sequence[str], sources: Sequence[Sources] | None = None) -> Conditioning:
        """Batch-first conditioning of `prompts` (repeats allowed; an edit prompt with its `sources`), on the model's
        device."""
        if not prompts:
            raise ValueError("no prompts to encode")
        self.ensure(prompts, sources=sources)
        rows = [self._load(key, p) for key, p in zip(self._keys(prompts, sources), prompts)]
        return {k: torch.stack([r[k] for r in rows]).to(self.device) for k in rows[0]}

    def release_encoders(self, groups: Sequence[tuple[Sequence[str], Sequence[Sources] | None]],
                         progress: bool = False) -> None:
        """Encode every prompt of `groups` (prompts, and their sources or None) not cached yet (progress bar), then
        free the backbone's text encoders."""
        for prompts, sources in groups:
            self.ensure(prompts, progress=progress, desc="encode all prompts of the run", sources=sources)
        if not self.released:
            self.backbone.release_text_encoders()
            self.released = True

    def _store(self, key: str, prompt: str, tensors: dict[str, torch.Tensor]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._file(key)
        metadata = {"prompt": prompt, "model": self.model_json}
        if is_remote(path):  # one PUT: atomic per object
            save_tensors(tensors, path, metadata=metadata)
            return
        tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
        save_file(tensors, str(tmp), metadata=metadata)
        os.replace(tmp, path)

    def _remember(self, key: str, tensors: dict[str, torch.Tensor]) -> None:
        self._memory[key] = tensors
        self._memory.move_to_end(key)
        while len(self._memory) > self.memory_items:
            self._memory.popitem(last=False)

    def _load(self, key: str, prompt: str) -> dict[str, torch.Tensor]:
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        path = self._file(key)
        tensors, metadata = load_tensors_with_metadata(path)
        if metadata.get("prompt") != prompt:  # a hash collision or a foreign file: never hand out another's embedding
            raise SolrlError(f"text cache file {path} holds another prompt; delete {path.parent} and re-run")
        self._remember(key, tensors)
        return tensors


_RUN_CACHES: dict[tuple[str, str], TextCache] = {}


def run_text_cache(run, cfg, progress: bool = False) -> TextCache:
    """The text cache of a run directory (one per process and model config). With model.release_text_encoders the
    run's train and evaluation prompts (and the empty prompt when guidance needs it) are encoded up front and the
    text encoders are released."""
    key = (location(run.root), cfg.model.model_dump_json())
    cache = _RUN_CACHES.get(key)
    if cache is None:
        cache = TextCache(run.root / CACHE_DIR, load_backbone(cfg), cfg.model)
        while len(_RUN_CACHES) >= 2:  # like the backbone cache: the runs of this process, most recent two
            _RUN_CACHES.pop(next(iter(_RUN_CACHES)))
        _RUN_CACHES[key] = cache
        if cfg.model.release_text_encoders:
            cache.release_encoders(run_prompt_groups(cfg, cache.backbone), progress=progress)
    return cache


def needs_uncond(cfg, backbone: Backbone) -> bool:
    """Whether a sampler of this run uses classifier-free guidance (and so the empty prompt's conditioning)."""
    scales = (cfg.guidance.rollout, cfg.guidance.eval)
    return not backbone.defaults.distilled_guidance and any(g != 1.0 for g in scales)


def run_prompt_groups(cfg, backbone: Backbone) -> list[tuple[list[str], list[Sources] | None]]:
    """`run_prompts` as the cache encodes them: the train set and the evaluated prompts each with their source images
    (an edit prompt set's), then the prompts that have none. An edit prompt set sampled under classifier-free guidance
    adds the empty prompt with each of its sources (the unconditional branch of an editing model sees the source:
    stages/sampling.py `SamplingSettings.uncond_of`)."""
    sets = [(train_prompt_set(cfg), train_sources(cfg), cfg.guidance.rollout)]
    if cfg.eval.every:
        sets.append((eval_prompt_set(cfg), eval_sources(cfg), cfg.guidance.eval))
    guided = not backbone.defaults.distilled_guidance
    groups = [(prompts, sources) for prompts, sources, _ in sets]
    groups += [([""] * len(sources), sources) for _, sources, g in sets if sources is not None and guided and g != 1.0]
    uncond = needs_uncond(cfg, backbone) and not backbone.edits
    groups.append(([CALIBRATION_PROMPT, *([""] if uncond else [])], None))
    return [(list(prompts), None if sources is None else list(sources)) for prompts, sources in groups]


def run_prompts(cfg, backbone: Backbone) -> list[str]:
    """Every prompt a run encodes: the train set, the evaluated prompts (when the run evaluates), the quantize
    calibration prompt, and the empty prompt when classifier-free guidance is used."""
    prompts = [*train_prompt_set(cfg), *(eval_prompt_set(cfg) if cfg.eval.every else []), CALIBRATION_PROMPT]
    if needs_uncond(cfg, backbone):
        prompts.append("")
    return list(dict.fromkeys(prompts))
