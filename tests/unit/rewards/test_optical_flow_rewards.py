"""flow_motion and flow_smoothness (solrl_core/rewards/optical_flow.py): their formulas against independent numpy
references (VBench's top-5 % statistic, a bilinear warp by scipy), their flows against torchvision's RAFT called one
pair at a time, and their one-line errors. RAFT-small with random weights (the tiny bundle's)."""

import numpy as np
import pytest
import torch
from scipy.ndimage import map_coordinates

from solrl_core.errors import SolrlError
from solrl_core.rewards.base import parse_spec
from solrl_core.rewards.optical_flow import FlowMotion, FlowSmoothness, motion_degree, warping_error
from solrl_core.rewards.registry import score_images
from solrl_core.rewards.tiny import write_tiny_raft

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def raft_spec(tmp_path_factory):
    return {"path": str(write_tiny_raft(tmp_path_factory.mktemp("raft"), seed=0)), "arch": "raft_small",
            "flow_updates": 2}


def _load(cls, spec, **keys):
    return cls.load(parse_spec(cls.name, {**spec, **keys}, cls.spec_keys))


def _vbench_degree(flow: np.ndarray) -> float:
    """VBench's per-pair statistic written out for one video's flows (pairs, 2, H, W): the mean of the largest 5 %
    of magnitudes, over 6 px scaled by the short side / 256, capped at 1, averaged over the pairs."""
    values = []
    for pair in flow:
        rad = np.sqrt(pair[0] ** 2 + pair[1] ** 2).ravel()
        top = np.sort(rad)[::-1][: int(rad.size * 0.05)].mean()
        values.append(min(top / (6.0 * min(pair.shape[1:]) / 256.0), 1.0))
    return float(np.mean(values))


def _scipy_warping_error(frames: np.ndarray, flow: np.ndarray) -> float:
    """Lai et al.'s warping error for one video (frames (T, 3, H, W) in [0, 1], flows (T-1, 2, H, W)), bilinear by
    scipy, over the pixels whose source lies inside the frame."""
    t, c, h, w = frames.shape
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    errors = []
    for i in range(t - 1):
        x, y = xs + flow[i, 0], ys + flow[i, 1]
        inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
        warped = np.stack([map_coordinates(frames[i + 1, ch], [y, x], order=1, mode="nearest") for ch in range(c)])
        errors.append(np.abs(warped - frames[i])[:, inside].sum() / (inside.sum() * c))
    return float(np.mean(errors))


def test_motion_degree_is_vbenchs_top_five_percent_over_the_moving_threshold():
    rng = np.random.default_rng(0)
    flow = np.zeros((3, 2, 2, 128, 160), np.float32)  # 3 videos, 2 pairs; threshold 6 * 128 / 256 = 3 px
    flow[1, :, 0] = 1.5  # everything moves half the threshold
    few = rng.choice(128 * 160, int(128 * 160 * 0.05), replace=False)  # 5 % of the pixels move 3 px, the rest not
    flow[2, 0, 1].reshape(-1)[few] = 3.0
    flow[2, 1] = rng.normal(0, 2, (2, 128, 160))
    got = motion_degree(torch.from_numpy(flow)).numpy()
    np.testing.assert_allclose(got, [_vbench_degree(f) for f in flow], rtol=1e-5)
    assert got[0] == 0.0 and got[1] == pytest.approx(0.5)  # a still video; a uniform half-threshold move


def test_warping_error_is_zero_where_the_flow_explains_the_next_frame():
    rng = np.random.default_rng(1)
    first = rng.random((3, 24, 32)).astype(np.float32)
    frames = np.stack([first, np.roll(first, 2, axis=2)])[None]  # the content moves 2 px right
    explained = np.zeros((1, 1, 2, 24, 32), np.float32)
    explained[:, :, 0] = 2.0
    assert warping_error(torch.from_numpy(frames), torch.from_numpy(explained)).item() == pytest.approx(0, abs=1e-6)
    still = warping_error(torch.from_numpy(frames), torch.zeros_like(torch.from_numpy(explained))).item()
    assert still > 0.2
    subpixel = rng.normal(0, 1.5, (1, 1, 2, 24, 32)).astype(np.float32)
    np.testing.assert_allclose(warping_error(torch.from_numpy(frames), torch.from_numpy(subpixel)).numpy(),
                               [_scipy_warping_error(frames[0], subpixel[0])], rtol=1e-4)


def test_the_rewards_score_torchvisions_raft_flow_pair_by_pair(raft_spec):
    rng = np.random.default_rng(2)
    videos = rng.integers(0, 256, (2, 3, 128, 136, 3), dtype=np.uint8)  # 136: padded to 136, 128 unpadded
    motion, smooth = _load(FlowMotion, raft_spec), _load(FlowSmoothness, raft_spec)
    frames, flows = smooth.flows(videos)
    with torch.no_grad():
        x = torch.from_numpy(videos).permute(0, 1, 4, 2, 3).float() / 255.0 * 2 - 1
        for v in range(2):
            for t in range(2):
                one = motion.model(x[v, t:t + 1], x[v, t + 1:t + 2], num_flow_updates=2)[-1]
                torch.testing.assert_close(flows[v, t], one[0], rtol=1e-4, atol=1e-4)
    flows = flows.numpy() * 0.05  # scaled into the unsaturated range for the formula's check below
    np.testing.assert_allclose(motion_degree(torch.from_numpy(flows)).numpy(), [_vbench_degree(f) for f in flows],
                               rtol=1e-5)
    _, parts = score_images(videos, ["a", "b"], {"flow_motion": 1.0, "flow_smoothness": 1.0},
                            {"flow_motion": raft_spec, "flow_smoothness": raft_spec})
    raw = smooth.flows(videos)[1]
    np.testing.assert_allclose(parts["flow_motion"], motion_degree(raw).numpy(), rtol=1e-6)
    np.testing.assert_allclose(parts["flow_smoothness"],
                               [1 - _scipy_warping_error(frames[v].numpy(), raw[v].numpy()) for v in range(2)],
                               rtol=1e-4)


def test_small_videos_are_upscaled_to_rafts_smallest_input(raft_spec):
    videos = np.random.default_rng(3).integers(0, 256, (1, 2, 44, 60, 3), dtype=np.uint8)
    frames, flows = _load(FlowSmoothness, raft_spec).flows(videos)
    assert frames.shape == (1, 2, 3, 128, 175) and flows.shape == (1, 1, 2, 128, 175)
    scores = _load(FlowSmoothness, raft_spec)(videos, ["a"])
    assert scores.shape == (1,) and 0 <= scores[0] <= 1


def test_one_line_errors(raft_spec, tmp_path):
    with pytest.raises(SolrlError, match=r"flow_motion: no RAFT weights at .*nothing\.pth; download torchvision's "
                                         r"raft_small_C_T_V2-01064c6d\.pth, then set reward_models\.flow_motion\.path"):
        _load(FlowMotion, raft_spec, path=str(tmp_path / "nothing.pth"))
    with pytest.raises(SolrlError, match="is not a torchvision raft_large checkpoint .*check reward_models.flow_motion"
                                         ".arch"):
        _load(FlowMotion, raft_spec, arch="raft_large")
    with pytest.raises(SolrlError, match="unknown RAFT architecture 'raft_tiny'"):
        _load(FlowMotion, raft_spec, arch="raft_tiny")
    with pytest.raises(SolrlError, match=r"reward_models\.flow_smoothness\.dtype: RAFT runs in float32 only"):
        _load(FlowSmoothness, raft_spec, dtype="bfloat16")
    still = np.zeros((1, 1, 128, 128, 3), np.uint8)
    with pytest.raises(SolrlError, match="flow_motion needs videos of at least 2 frames, got 1"):
        _load(FlowMotion, raft_spec)(still, ["a"])
    with pytest.raises(SolrlError, match="flow_motion scores videos; the model makes images"):
        _load(FlowMotion, raft_spec)(still[:, 0], ["a"])
