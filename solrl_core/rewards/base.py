"""The reward interface: a named scorer of (uint8 image, prompt) pairs, with its own batching, device and preprocessing.

A reward class declares what it needs (`needs`, `source`, `spec_keys`), resolves its files from a `RewardModelSpec`
without loading them (`resolve`), loads itself (`load`), and scores one batch (`score_batch`). `Reward.scores`
splits any number of images into batches of `batch_size` and runs them under `torch.no_grad` (model rewards) with a
progress bar when there is more than one batch; `Reward.__call__` does the same and refuses non-finite scores.
`ModelReward` is the base of the rewards with weight files: `load(spec)` = `cls(cls.resolve(spec), spec)`.

Dtype: a spec without one runs a torch reward in its class's `cuda_dtype` (bfloat16) on a CUDA device and in float32
elsewhere (`default_dtype`); the resolved name is `Reward.dtype` and enters `fingerprint()`. Scores are read back
as float64 numpy, one read-back per batch (`host_scores`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from solrl_core.errors import SolrlError
from solrl_core.excerpts import cut, excerpt
from solrl_core.config.limits import MAX_BATCH, MAX_FRAMES
from solrl_core.frames import evenly_spaced

DType = Literal["float32", "float16", "bfloat16"]
COMMON_KEYS = frozenset({"batch_size", "device", "dtype", "video_frames", "video_aggregate"})
# the keys of an image reward scoring videos: nothing to do for a reward of whole videos or a model of images
FRAME_KEYS = ("video_frames", "video_aggregate")
# a reward served by `solrl serve-reward` instead of loaded here: any reward takes them (solrl_core/rewards/remote.py)
REMOTE_KEYS = frozenset({"url", "timeout_s", "retries", "concurrency"})
CPU_DTYPE: DType = "float32"


class RewardModelSpec(BaseModel):
    """Where a reward's files are and how to run it: one entry of the `reward_models:` config section.

    Only the keys a reward lists in `spec_keys` may be set for it (see `Reward.spec_keys`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    path: str | None = Field(None, description="weights: a directory (transformers layout) or a checkpoint file")
    processor: str | None = Field(None, description="CLIP processor/tokenizer directory; default: `path`")
    arch: str | None = Field(None, description="hpsv2: open_clip model name or a model-config JSON; default ViT-H-14")
    med_config: str | None = Field(None, description="imagereward: med_config.json; default: next to `path`")
    tokenizer: str | None = Field(None, description="imagereward: bert-base-uncased dir or vocab.txt")
    batch_size: int | None = Field(  # strict: true or 2.5 is refused, not read as 1 or 2
        None, ge=1, le=MAX_BATCH, strict=True,
        description=f"images per forward pass, a whole number from 1 to {MAX_BATCH:,}; default: the reward's own")
    device: str = Field("cpu", description="cpu | cuda | cuda:N | auto (cuda when available)")
    dtype: DType | None = Field(None, description="weights/activations dtype; default: bfloat16 on a CUDA device, "
                                "float32 on the CPU")
    allow_download: bool = Field(False, description="fetch missing files from the Hugging Face hub")
    url: str | None = Field(None, pattern=r"^https?://\S+$", description="score through the reward server at "
                            "this URL (`solrl serve-reward NAME`) instead of loading the reward here")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="url, endpoint: seconds one request may take")
    retries: int = Field(4, ge=0, le=20, strict=True, description="url, endpoint: tries after a failed request "
                         "(connection, timeout, 408, 429, 5xx), with a doubling back-off")
    concurrency: int = Field(4, ge=1, le=64, strict=True, description="url, endpoint: requests in flight at once")
    # chat_judge: a VLM through an OpenAI-compatible chat endpoint (solrl_core/rewards/chat_judge.py)
    endpoint: str | None = Field(None, pattern=r"^https?://\S+$", description="chat_judge: the chat server's base "
                                 "URL (vLLM, SGLang: http://HOST:8000/v1)")
    model: str | None = Field(None, description="chat_judge: the served model to ask; default: the endpoint's only one")
    template: str | None = Field(None, description="chat_judge: the question sent with each image, {prompt} standing "
                                 "for its prompt; default: a 1-10 rating of prompt match and quality")
    parser: str = Field("number", description="chat_judge: number | yes_no | regex:PATTERN (one group: the score)")
    score_range: tuple[float, float] | None = Field(None, description="chat_judge: [low, high] of the answer's "
                                                    "scale, mapped onto 0..1 (answers outside are unparsable); "
                                                    "default [1, 10]")
    temperature: float = Field(0.0, ge=0, le=2, description="chat_judge: sampling temperature of the first ask")
    max_tokens: int = Field(16, ge=1, le=32768, strict=True, description="chat_judge: tokens an answer may take")
    image_size: int | None = Field(None, ge=16, le=8192, strict=True, description="chat_judge: the longer side "
                                   "images are sent at (resized); default: as generated")
    api_key_env: str = Field("SOLRL_JUDGE_API_KEY", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="chat_judge: "
                             "the environment variable holding the endpoint's API key (never the key itself)")
    answer_retries: int = Field(2, ge=0, le=10, strict=True, description="chat_judge: times an answer without a "
                                "score (a refusal, or one the parser cannot read) is asked again")
    flow_updates: int | None = Field(None, ge=1, le=100, strict=True, description="flow_motion, flow_smoothness: "
                                     "RAFT's iterative flow updates; default 20 (VBench's)")
    video_frames: int | None = Field(
        None, ge=1, le=MAX_FRAMES, strict=True,
        description="videos: how many frames an image reward scores, evenly spaced from the first to the last, the "
        "video's score their mean (Flow-Factory's PickScore averages every frame, its CLIP score takes the first: "
        "video_frames: 1); null = every frame")
    video_aggregate: Literal["mean", "min"] | None = Field(
        None, description="videos: how an image reward's scores of the picked frames make the video's score: mean "
        "(the default, as Flow-Factory's PickScore) or min (the worst frame, so one broken frame is not averaged "
        "away; solrl's option, no peer's)")

    @field_validator("parser")
    @classmethod
    def _known_parser(cls, value: str) -> str:
        from solrl_core.rewards.chat_answers import ScoreRange, answer_parser

        try:
            answer_parser(value, ScoreRange(0.0, 1.0))
        except SolrlError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator("score_range")
    @classmethod
    def _increasing(cls, value: tuple[float, float] | None) -> tuple[float, float] | None:
        if value is not None and not value[0] < value[1]:
            raise ValueError("needs [low, high] with low < high")
        return value


def parse_spec(name: str, data: Any, allowed: frozenset[str]) -> RewardModelSpec:
    """Validate one `reward_models.<name>` entry (a mapping, a RewardModelSpec, or None) for a reward."""
    if data is None:
        return RewardModelSpec()
    if isinstance(data, RewardModelSpec):
        spec = data
    else:
        if not isinstance(data, dict):
            raise SolrlError(f"reward_models.{name}: expected a mapping of keys, got {type(data).__name__}")
        try:
            spec = RewardModelSpec.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                raise SolrlError(f"reward_models.{cut(name)}: unknown key '{cut(key)}'") from None
            message = err["msg"].removeprefix("Value error, ")  # a validator's own words, as it wrote them
            raise SolrlError(f"reward_models.{cut(name)}.{key}: {message} "
                             f"(got {excerpt(err.get('input'))})") from None
    takes = allowed | COMMON_KEYS | REMOTE_KEYS | {"allow_download"}
    extra = sorted(k for k in spec.model_fields_set if k not in takes)
    if extra:
        known = ", ".join(sorted(takes))
        raise SolrlError(f"reward_models.{name}: key '{extra[0]}' does not apply to {name} (it takes: {known})")
    return spec


def check_images(images: np.ndarray, prompts: Sequence[str], videos: bool = False) -> np.ndarray:
    images = np.asarray(images)
    if images.ndim != (5 if videos else 4) or images.shape[-1] != 3:
        raise ValueError(f"images must be uint8 {'(B, frames, H, W, 3)' if videos else '(B, H, W, 3)'}, got shape "
                         f"{images.shape}")
    if images.dtype != np.uint8:
        raise ValueError(f"images must be uint8, got {images.dtype}")
    if len(prompts) != len(images):
        raise ValueError(f"{len(images)} images but {len(prompts)} prompts")
    return images


def check_finite(name: str, values: np.ndarray, prompts: Sequence[str] | None = None) -> None:
    """SolrlError naming the reward (and the first bad image) when any score is NaN or infinite."""
    bad = np.flatnonzero(~np.isfinite(values))
    if len(bad):
        first = int(bad[0])
        where = f"; first at image {first}"
        if prompts is not None and first < len(prompts):
            where += f" (prompt {prompts[first]!r})"
        raise SolrlError(f"reward {name} returned non-finite values ({len(bad)} of {len(values)}{where})")


class Reward:
    """Base class. Subclasses set the class attributes and implement `score_batch` (and `load`/`resolve` if they need
    files)."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # as tables and preset headers print it (e.g. "HPSv2.1"); default: the name
    summary: ClassVar[str] = ""
    needs: ClassVar[str] = "nothing"  # what files it needs, for `solrl rewards list`
    source: ClassVar[str] = ""  # where to get them
    needs_weights: ClassVar[bool] = False
    needs_server: ClassVar[bool] = False  # asks a server it does not start (loading it asks the server)
    spec_keys: ClassVar[frozenset[str]] = frozenset()  # spec keys besides batch_size/device/dtype/allow_download
    default_batch_size: ClassVar[int] = 64
    uses_torch: ClassVar[bool] = False
    cuda_dtype: ClassVar[DType] = "bfloat16"  # what a torch reward runs in on a CUDA device when its spec names none
    takes_videos: ClassVar[bool] = False  # scores whole videos (B, frames, H, W, 3), and only them
    # scores edits: `score_batch(images, prompts, sources)` also sees each image's prompt's source images (B, sources,
    # H, W, 3) uint8 at the image's size (an edit prompt set's; solrl_core/edit_sources.py), the prompt being the
    # instruction
    edits: ClassVar[bool] = False
    video_frames: int | None = None  # an image reward on videos: the frames it scores (RewardModelSpec.video_frames)
    video_aggregate: str | None = None  # and how their scores make the video's (RewardModelSpec.video_aggregate)
    # the shortest edge its preprocessing first resizes images to, where that first step is resize_shortest_pil
    # (solrl_core/rewards/preprocess.py): a served reward's clients send images at that size, its scores unchanged bit
    # for bit (resizing again is the identity); None: images are sent as generated
    input_size: int | None = None

    def __init__(self, batch_size: int | None = None, device: str = "cpu", dtype: DType | None = None):
        self.batch_size = int(batch_size or self.default_batch_size)
        self.device = device
        if dtype is None:  # a reward without torch has no dtype to run in: float32 keeps its fingerprint
            dtype = default_dtype(torch_device(device), self.cuda_dtype) if self.uses_torch else CPU_DTYPE
        self.dtype: DType = dtype

    # ---- files -------------------------------------------------------------------------------------------------
    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        """The files this reward would load under `spec` (raises SolrlError naming the first missing one)."""
        return {}

    @classmethod
    def load(cls, spec: RewardModelSpec | None = None) -> Reward:
        spec = spec or RewardModelSpec()
        return cls(batch_size=spec.batch_size, device=spec.device, dtype=spec.dtype)

    # ---- scoring -----------------------------------------------------------------------------------------------
    def score_batch(self, images: np.ndarray, prompts: list[str], sources: np.ndarray | None = None) -> np.ndarray:
        """Scores of one batch; `sources` only for a reward that `edits` (the others never get it)."""
        raise NotImplementedError

    def __call__(self, images: np.ndarray, prompts: Sequence[str], progress: bool | None = None,
                 sources: np.ndarray | None = None) -> np.ndarray:
        """Scores (B,) float64 of uint8 images (B, H, W, 3) for their prompts (and, for a reward that `edits`, the
        prompts' source images (B, sources, H, W, 3)), `batch_size` at a time; a SolrlError naming the reward when
        any is NaN or infinite.

        progress: True/False forces the bar on/off; None shows it only for more than one batch on a terminal.
        """
        scores = self.scores(images, prompts, progress, sources)
        check_finite(self.name, scores, prompts)
        return scores

    def scores(self, images: np.ndarray, prompts: Sequence[str], progress: bool | None = None,
               sources: np.ndarray | None = None) -> np.ndarray:
        """As `__call__`, without the finiteness check (for callers that name the bad rows themselves)."""
        from tqdm.auto import tqdm

        if self.edits and sources is None:
            raise SolrlError(f"reward {self.name} scores edits: it needs the prompts' source images (a JSONL prompt "
                             "set whose lines have \"images\", and an editing model)")
        if self.edits and len(sources) != len(images):
            raise ValueError(f"{len(images)} images but {len(sources)} rows of source images")
        images = np.asarray(images)
        if images.ndim == 5 and not self.takes_videos:
            return self.frame_scores(images, prompts, progress)
        if images.ndim == 4 and self.takes_videos:
            raise SolrlError(f"reward {self.name} scores videos; the model makes images (a video backbone: wan)")
        images = check_images(images, prompts, self.takes_videos)
        prompts = [str(p) for p in prompts]
        n = len(images)
        starts = range(0, n, self.batch_size)
        disable = (not progress) if progress is not None else (len(starts) <= 1 or None)
        out = []
        with self._inference():
            for start in tqdm(starts, desc=f"reward {self.name}", unit="batch", disable=disable, leave=False):
                stop = start + self.batch_size
                batch = (images[start:stop], prompts[start:stop])
                if self.edits:
                    batch += (np.asarray(sources[start:stop]),)
                values = np.asarray(self.score_batch(*batch), dtype=np.float64)
                if values.shape != (min(stop, n) - start,):
                    raise SolrlError(f"reward {self.name} returned shape {values.shape} for {min(stop, n) - start} images")
                out.append(values)
        return np.concatenate(out) if out else np.zeros(0, np.float64)

    def frame_scores(self, videos: np.ndarray, prompts: Sequence[str], progress: bool | None = None) -> np.ndarray:
        """An image reward's scores of videos (B, frames, H, W, 3): the mean (or with `video_aggregate` min, the
        minimum) of its scores of `video_frames` of each video's frames (`frames.evenly_spaced`), each frame scored
        for its video's prompt."""
        picked = evenly_spaced(videos.shape[1], self.video_frames)
        frames = videos[:, picked].reshape(-1, *videos.shape[2:])
        scores = self.scores(frames, [str(p) for p in prompts for _ in picked], progress)
        per_frame = scores.reshape(len(videos), len(picked))
        return per_frame.min(axis=1) if self.video_aggregate == "min" else per_frame.mean(axis=1)

    def fingerprint(self) -> str:
        """What decides this reward's scores besides its inputs: name, files, batch size, device, dtype (the resolved
        one), as JSON."""
        files = {k: str(v) for k, v in sorted(getattr(self, "files", {}).items())}
        # set frame keys only: earlier runs' fingerprints unchanged
        video = {key: getattr(self, key) for key in FRAME_KEYS if getattr(self, key) is not None}
        return json.dumps({"name": self.name, "files": files, "batch_size": self.batch_size, "device": self.device,
                           "dtype": self.dtype, **video}, sort_keys=True)

    def _inference(self):
        if not self.uses_torch:
            return contextlib.nullcontext()
        import torch

        return torch.no_grad()


class ModelReward(Reward):
    """A reward with weight files on its own torch device: `resolve` finds the files, `__init__(files, spec)` loads
    them."""

    needs_weights = True
    uses_torch = True
    default_batch_size = 16

    @classmethod
    def load(cls, spec: RewardModelSpec | None = None) -> ModelReward:
        spec = spec or RewardModelSpec()
        return cls(cls.resolve(spec), spec)

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        super().__init__(batch_size=spec.batch_size, device=spec.device, dtype=spec.dtype)
        self.files = files
        self.torch_device = torch_device(spec.device)


def torch_device(device: str):
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SolrlError(f"device '{device}' requested for a reward, but CUDA is not available (use device: cpu)")
    return dev


def default_dtype(device, cuda_dtype: DType = "bfloat16") -> DType:
    """The dtype of a torch reward whose spec names none: `cuda_dtype` on a CUDA device, float32 elsewhere (CPUs run
    half precision slowly, and the CPU scores stay those of float32)."""
    return cuda_dtype if device.type == "cuda" else CPU_DTYPE


def host_scores(values) -> np.ndarray:
    """A (B,) device tensor of scores as float64 numpy: upcast on the device, then one read-back (numpy has no
    bfloat16)."""
    return values.detach().float().cpu().numpy().astype(np.float64)


def torch_dtype(dtype: str):
    import torch

    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
