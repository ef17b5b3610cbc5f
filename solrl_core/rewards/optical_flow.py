"""Video rewards from optical flow: how much a video moves, and how well its frames follow their motion.

Both run torchvision's RAFT (Teed & Deng, ECCV 2020; `torchvision.models.optical_flow`) between consecutive frames,
the first frame of a pair to the second, frames padded (edge-replicated) to a multiple of 8, in [-1, 1], 20 flow
updates (VBench's iterations). RAFT's correlation pyramid needs at least 128 px: smaller videos are upscaled
(bilinear) until their short side is 128, and scored at that size (both scores are relative to the frame's size):

  flow_motion      VBench's dynamic degree (Huang et al., CVPR 2024, vbench/dynamic_degree.py), continuous: per pair,
                   the mean of the largest 5 % of flow magnitudes over VBench's "moving" threshold (6 px at a 256 px
                   short side, scaled by the frame's short side), capped at 1; the video's score is the pairs' mean,
                   in [0, 1]. A still video scores 0. VBench's own verdict is binary (moving when enough pairs pass);
                   its streaming variant averages the same capped ratio, which is what a ranking needs.
  flow_smoothness  1 - the flow-warping error (Lai et al., ECCV 2018, "Learning Blind Video Temporal Consistency"):
                   the second frame warped back onto the first along the flow (bilinear), the mean absolute
                   difference (of 1) over the pixels whose source lies inside the frame, averaged over pairs, in
                   [0, 1]. Unlike Lai et al. no occlusion mask (it would take the backward flow too). A still video
                   scores 1, as one whose motion the flow explains; weigh it beside a reward that asks for motion.

Weights: torchvision's RAFT checkpoints (`arch`: raft_large, the default as VBench's RAFT, or raft_small), read with
torch.load(weights_only=True); with downloads allowed, from torchvision's own URL for the C+T weights.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.rewards import model_files
from solrl_core.rewards.base import ModelReward, RewardModelSpec, host_scores

# arch -> (torchvision builder, checkpoint file torchvision names it, the weights enum member it downloads)
ARCHS = {
    "raft_large": ("raft_large", "raft_large_C_T_V2-1bb1363a.pth", "Raft_Large_Weights.C_T_V2"),
    "raft_small": ("raft_small", "raft_small_C_T_V2-01064c6d.pth", "Raft_Small_Weights.C_T_V2"),
}
DEFAULT_ARCH = "raft_large"
FLOW_UPDATES = 20  # VBench's RAFT iterations
TOP_FRACTION = 0.05  # VBench: the mean of the largest 5 % of flow magnitudes
MOVING_PX_AT_256 = 6.0  # VBench's threshold at a 256 px short side
MIN_SIDE = 128  # RAFT's smallest input: 16 feature-map cells at 1/8


def _arch(spec: RewardModelSpec, reward: str) -> str:
    import os

    arch = spec.arch or os.environ.get(model_files.env_name(reward, "arch")) or DEFAULT_ARCH
    if arch not in ARCHS:
        raise SolrlError(f"{reward}: unknown RAFT architecture '{arch}' (reward_models.{reward}.arch: "
                         f"{' or '.join(ARCHS)})")
    return arch


def consecutive_flows(model, videos, updates: int = FLOW_UPDATES):
    """RAFT flow (B, frames - 1, 2, H, W) from each frame to the next of `videos` (B, frames, 3, H, W) in [-1, 1],
    on their device: every pair of the batch in one forward, padded to a multiple of 8 and cropped back."""
    import torch.nn.functional as F

    b, t, c, h, w = videos.shape
    first = videos[:, :-1].reshape(-1, c, h, w)
    second = videos[:, 1:].reshape(-1, c, h, w)
    pad = (0, -w % 8, 0, -h % 8)
    if any(pad):
        first, second = F.pad(first, pad, mode="replicate"), F.pad(second, pad, mode="replicate")
    flow = model(first, second, num_flow_updates=updates)[-1][..., :h, :w]
    return flow.reshape(b, t - 1, 2, h, w)


def motion_degree(flow, top_fraction: float = TOP_FRACTION):
    """(B,) VBench's continuous dynamic degree of flows (B, pairs, 2, H, W): per pair the mean of the largest
    `top_fraction` of magnitudes over the moving threshold, capped at 1, averaged over pairs."""
    b, pairs, _, h, w = flow.shape
    magnitude = flow.float().norm(dim=2).reshape(b, pairs, h * w)
    top = magnitude.topk(max(1, int(h * w * top_fraction)), dim=-1).values.mean(-1)
    threshold = MOVING_PX_AT_256 * min(h, w) / 256.0
    return (top / threshold).clamp(max=1.0).mean(-1)


def warping_error(frames, flow):
    """(B,) mean absolute difference between each frame and the next warped back onto it along `flow`, over the
    pixels whose source is inside the frame: frames (B, frames, 3, H, W) in [0, 1], flow (B, frames - 1, 2, H, W)."""
    import torch
    import torch.nn.functional as F

    b, t, c, h, w = frames.shape
    ys, xs = torch.meshgrid(torch.arange(h, device=flow.device), torch.arange(w, device=flow.device), indexing="ij")
    flow = flow.float().reshape(-1, 2, h, w)
    x = xs + flow[:, 0]
    y = ys + flow[:, 1]
    grid = torch.stack((2 * x / max(w - 1, 1) - 1, 2 * y / max(h - 1, 1) - 1), dim=-1)
    nxt = frames[:, 1:].reshape(-1, c, h, w).float()
    warped = F.grid_sample(nxt, grid, mode="bilinear", padding_mode="border", align_corners=True)
    inside = ((x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)).float().unsqueeze(1)
    error = ((warped - frames[:, :-1].reshape(-1, c, h, w).float()).abs() * inside).sum(dim=(1, 2, 3))
    counted = (inside.sum(dim=(1, 2, 3)) * c).clamp(min=1.0)
    return (error / counted).reshape(b, t - 1).mean(-1)


class _RaftReward(ModelReward):
    """A reward of whole videos from RAFT's flow between consecutive frames (`flows`); subclasses score the flow."""

    needs = "a torchvision RAFT checkpoint (raft_large_C_T_V2-1bb1363a.pth, or raft_small's with arch: raft_small)"
    source = "torchvision's RAFT weights (download.pytorch.org/models/), or allow_download: true"
    spec_keys = frozenset({"path", "arch", "flow_updates"})
    takes_videos = True
    default_batch_size = 4
    cuda_dtype = "float32"  # float32 only (VBench runs RAFT without mixed precision)

    @classmethod
    def resolve(cls, spec: RewardModelSpec) -> dict[str, Path]:
        arch = _arch(spec, cls.name)
        checkpoint = ARCHS[arch][1]
        path, _ = model_files.candidate(cls.name, "path", spec.path, checkpoint)
        if (path is None or not path.is_file()) and model_files.downloads_allowed(spec):
            path = _download(cls.name, arch)
        if path is None or not path.is_file():
            raise model_files.missing_error(cls.name, "path", "RAFT weights", path,
                                            f"download torchvision's {checkpoint}", checkpoint)
        return {"path": path}

    def __init__(self, files: dict[str, Path], spec: RewardModelSpec):
        super().__init__(files, spec)
        from torchvision.models import optical_flow

        if self.dtype != "float32":
            raise SolrlError(f"reward_models.{self.name}.dtype: RAFT runs in float32 only, as VBench runs it (got "
                             f"{self.dtype}; remove the key)")
        self.arch = _arch(spec, self.name)
        state = model_files.load_state_dict(self.name, files["path"])
        model = getattr(optical_flow, ARCHS[self.arch][0])(weights=None, progress=False)
        try:
            model.load_state_dict(state)
        except RuntimeError as exc:
            first = str(exc).strip().splitlines()[0]
            raise SolrlError(f"{self.name}: {files['path']} is not a torchvision {self.arch} checkpoint ({first}); "
                             f"check reward_models.{self.name}.arch") from None
        self.model = model.to(self.torch_device).eval()
        self.flow_updates = spec.flow_updates or FLOW_UPDATES

    def flows(self, videos: np.ndarray):
        """(frames in [0, 1] (B, frames, 3, H, W) float32, RAFT flows (B, frames - 1, 2, H, W)) on the device."""
        import torch

        if videos.shape[1] < 2:
            raise SolrlError(f"{self.name} needs videos of at least 2 frames, got {videos.shape[1]}")
        import torch.nn.functional as F

        frames = torch.from_numpy(np.ascontiguousarray(videos)).to(self.torch_device)
        frames = frames.permute(0, 1, 4, 2, 3).float() / 255.0
        b, t, c, h, w = frames.shape
        if min(h, w) < MIN_SIDE:
            size = (round(h * MIN_SIDE / min(h, w)), round(w * MIN_SIDE / min(h, w)))
            frames = F.interpolate(frames.reshape(b * t, c, h, w), size=size, mode="bilinear", align_corners=False)
            frames = frames.clamp(0, 1).reshape(b, t, c, *size)
        with torch.no_grad():
            return frames, consecutive_flows(self.model, frames * 2 - 1, self.flow_updates)

    def score_flows(self, frames, flow):
        """(B,) scores on the device of the frames in [0, 1] and their consecutive flows (`flows`)."""
        raise NotImplementedError

    def score_batch(self, images: np.ndarray, prompts: list[str]) -> np.ndarray:
        return host_scores(self.score_flows(*self.flows(images)))

    def fingerprint(self) -> str:
        import json

        return json.dumps({**json.loads(super().fingerprint()), "arch": self.arch, "flow_updates": self.flow_updates},
                          sort_keys=True)


def _download(reward: str, arch: str) -> Path:
    """torchvision's checkpoint of `arch`, fetched into torch's hub cache (only when downloads are allowed)."""
    import torch
    from torchvision.models import optical_flow

    enum_name, member = ARCHS[arch][2].split(".")
    url = getattr(getattr(optical_flow, enum_name), member).url
    try:
        torch.hub.load_state_dict_from_url(url, progress=False, weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any download failure becomes one user-facing line
        raise SolrlError(f"{reward}: could not download {url} ({type(exc).__name__}: {exc})") from None
    return Path(torch.hub.get_dir()) / "checkpoints" / ARCHS[arch][1]


class FlowMotion(_RaftReward):
    name = "flow_motion"
    title = "flow motion"
    summary = ("videos: VBench's dynamic degree, continuous - RAFT's largest 5 % of flow between consecutive frames "
               "over VBench's moving threshold, capped at 1, averaged, in [0, 1]; a still video scores 0")

    @staticmethod
    def score_flows(frames, flow):
        return motion_degree(flow)


class FlowSmoothness(_RaftReward):
    name = "flow_smoothness"
    title = "flow smoothness"
    summary = ("videos: 1 - the flow-warping error between consecutive frames (Lai et al. 2018; RAFT's flow), in "
               "[0, 1]: frames that follow their motion score high; a still video scores 1")

    @staticmethod
    def score_flows(frames, flow):
        return 1.0 - warping_error(frames, flow)
