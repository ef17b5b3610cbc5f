"""The text-embedding cache: equal to fresh encoding, read back without the encoders, keyed by model, release."""

from __future__ import annotations


import pytest
import torch

from solrl_core.models import text_cache
from solrl_core.config.schema import ModelConfig
from solrl_core.config.loading import load_config
from solrl_core.errors import SolrlError
from solrl_core.run.rundir import RunDir
from solrl_core.models.backbones.cache import load_backbone
from solrl_core.prompts import CALIBRATION_PROMPT, prompt_set, train_prompt_set
from solrl_core.stages.context import StageContext
from solrl_core.stages.draws import iteration_prompts
from solrl_core.models.text_cache import TextCache, model_key, run_text_cache
from repo_paths import TINY

PROMPTS = ["a red circle", "two blue squares", "a red circle", "three green triangles on the left"]


class CountingBackbone:
    """The embedded backbone, counting the prompts its text encoders see and the release calls."""

    def __init__(self, backbone):
        self.inner = backbone
        self.defaults = backbone.defaults
        self.edits = backbone.edits
        self.encoded: list[str] = []
        self.released = 0

    def encode_prompts(self, prompts):
        if self.released:
            raise RuntimeError("text encoders were released")
        self.encoded += list(prompts)
        return self.inner.encode_prompts(prompts)

    def release_text_encoders(self):
        self.released += 1


@pytest.fixture(scope="module")
def embedded():
    return load_backbone(load_config(TINY))


@pytest.fixture
def counting(embedded):
    return CountingBackbone(embedded)


def test_cached_conditioning_equals_fresh_encoding(tmp_path, embedded, counting):
    cache = TextCache(tmp_path, counting, ModelConfig())
    cond = cache.get(PROMPTS)
    fresh = embedded.encode_prompts(PROMPTS)
    assert cond.keys() == fresh.keys()
    for key in fresh:
        assert cond[key].shape == fresh[key].shape and torch.equal(cond[key], fresh[key]), key
    assert sorted(counting.encoded) == sorted(set(PROMPTS))  # each distinct prompt encoded once
    files = sorted(p.name for p in (tmp_path / model_key(ModelConfig())).iterdir())
    assert files == sorted(cache.path(p).name for p in set(PROMPTS))
    cache.get(PROMPTS[:2])
    assert len(counting.encoded) == 3  # nothing new


def test_a_second_run_reads_the_cache_without_the_encoder(tmp_path, embedded, counting):
    TextCache(tmp_path, CountingBackbone(embedded), ModelConfig()).get(PROMPTS)
    again = TextCache(tmp_path, counting, ModelConfig())  # a new process / stage: nothing in memory
    cond = again.get(list(reversed(PROMPTS)))
    assert counting.encoded == []
    fresh = embedded.encode_prompts(list(reversed(PROMPTS)))
    assert all(torch.equal(cond[k], fresh[k]) for k in fresh)


def test_the_key_follows_the_model_config(tmp_path):
    base = ModelConfig()
    assert model_key(base) != model_key(ModelConfig(dtype="bfloat16"))
    assert model_key(base) != model_key(ModelConfig(max_sequence_length=77))
    assert model_key(base) != model_key(ModelConfig(path=str(tmp_path)))
    # settings the text encoders do not depend on share the embeddings
    assert model_key(base) == model_key(ModelConfig(release_text_encoders=True, sampler="dpmpp_2m", decode_chunk=2))


def test_another_model_config_does_not_read_the_cache(tmp_path, embedded, counting):
    TextCache(tmp_path, CountingBackbone(embedded), ModelConfig()).get(PROMPTS)
    other = TextCache(tmp_path, counting, ModelConfig(max_sequence_length=77))
    other.get(PROMPTS[:1])
    assert counting.encoded == PROMPTS[:1]
    assert other.directory != TextCache(tmp_path, counting, ModelConfig()).directory


def test_a_file_holding_another_prompt_is_refused(tmp_path, counting):
    cache = TextCache(tmp_path, counting, ModelConfig())
    cache.get(["a red circle"])
    cache.path("a red circle").rename(cache.path("a blue circle"))
    with pytest.raises(SolrlError, match="holds another prompt"):
        TextCache(tmp_path, counting, ModelConfig()).get(["a blue circle"])


def test_release_encodes_the_run_prompts_up_front_then_frees_the_encoders(tmp_path, monkeypatch, counting):
    monkeypatch.setattr(text_cache, "_RUN_CACHES", {})
    monkeypatch.setattr(text_cache, "load_backbone", lambda cfg: counting)
    cfg = load_config(TINY, ["model.release_text_encoders=true", "eval.every=1", "eval.num_prompts=3"])
    run = RunDir(tmp_path / "run")
    cache = run_text_cache(run, cfg)
    expected = {*train_prompt_set(cfg), *prompt_set(cfg.eval.prompts, "eval.prompts")[:3], CALIBRATION_PROMPT}
    assert set(counting.encoded) == expected and len(counting.encoded) == len(expected)
    assert counting.released == 1 and cache.released
    assert run_text_cache(run, cfg) is cache  # one per run and process
    # the stages' conditioning now comes from the cache alone
    ctx = StageContext(run, cfg, 0, progress=False)
    cond = ctx.encode(iteration_prompts(cfg, 0))
    assert cond["encoder_hidden_states"].shape[0] == cfg.prompts.per_iteration
    with pytest.raises(SolrlError, match="release_text_encoders"):
        ctx.encode(["a prompt of no set"])
    # a later process finds everything on disk: no encoding at all before the release
    monkeypatch.setattr(text_cache, "_RUN_CACHES", {})
    counting.encoded.clear()
    run_text_cache(run, cfg)
    assert counting.encoded == [] and counting.released == 2


def test_release_adds_the_empty_prompt_when_cfg_is_used(tmp_path, monkeypatch, counting):
    monkeypatch.setattr(text_cache, "_RUN_CACHES", {})
    monkeypatch.setattr(text_cache, "load_backbone", lambda cfg: counting)
    cfg = load_config(TINY, ["model.release_text_encoders=true", "guidance.rollout=2.0"])
    run_text_cache(RunDir(tmp_path / "run"), cfg)
    assert "" in counting.encoded and counting.released == 1


def test_an_edit_set_under_cfg_encodes_the_empty_prompt_with_each_source():
    """An editing model's unconditional branch sees the row's source: the prompts a run encodes up front (before
    releasing the encoders) hold the empty prompt with each source of every guided phase's set, not a bare one."""
    from repo_paths import ROOT
    from solrl_core.models.text_cache import run_prompt_groups
    from solrl_core.prompts import eval_sources, train_sources

    cfg = load_config(ROOT / "configs" / "demo_edit.yaml", ["guidance.rollout=2", "eval.every=1"])
    backbone = load_backbone(cfg)
    groups = run_prompt_groups(cfg, backbone)
    empty = [sources for prompts, sources in groups if prompts and set(prompts) == {""}]
    assert empty == [list(train_sources(cfg))]  # the rollouts' set; evaluation is unguided here
    assert "" not in next(prompts for prompts, sources in groups if sources is None)
    guided_eval = run_prompt_groups(load_config(ROOT / "configs" / "demo_edit.yaml",
                                                ["guidance.eval=2", "eval.every=1"]), backbone)
    assert [s for p, s in guided_eval if p and set(p) == {""}] == [list(eval_sources(cfg))]


def test_stages_share_the_run_cache(tmp_path, monkeypatch, one_torch_thread):
    """explore fills <run>/text_cache/; a forced re-run in a fresh process state encodes nothing."""
    from solrl_core.stages.runner import run_stage

    cfg = load_config(TINY, ["explore.precision=fp32", "explore.seeds_per_prompt=2", "select.k=2",
                             "explore.batch_size=2"])
    run = RunDir(tmp_path / "run")
    monkeypatch.setattr(text_cache, "_RUN_CACHES", {})
    for stage in ("quantize", "explore"):
        run_stage(run, cfg, 0, stage, progress=False)
    stored = {p.name for p in (run.root / "text_cache" / model_key(cfg.model)).iterdir()}
    cache = TextCache(run.root / "text_cache", load_backbone(cfg), cfg.model)
    assert {cache.path(p).name for p in [*iteration_prompts(cfg, 0), CALIBRATION_PROMPT]} == stored

    real = load_backbone(cfg)
    counting = CountingBackbone(real)
    monkeypatch.setattr(real, "encode_prompts", _no_encoding)  # a stage encoding directly would fail
    monkeypatch.setattr(text_cache, "_RUN_CACHES", {})
    monkeypatch.setattr(text_cache, "load_backbone", lambda cfg: counting)
    run_stage(run, cfg, 0, "explore", force=True, progress=False)
    assert counting.encoded == []



def _no_encoding(prompts):
    raise AssertionError(f"encoded {list(prompts)} outside the text cache")


class EditingStandIn:
    """An editing backbone's encoding in miniature: the prompt's length and each source image's mean pixel."""

    defaults = None
    edits, name = True, "stand-in"

    def __init__(self):
        self.encoded: list[tuple[str, float]] = []

    def encode_prompts(self, prompts, sources=None):
        import numpy as np

        means = [float(np.asarray(images[0]).mean()) for images in sources]
        self.encoded += list(zip(prompts, means))
        return {"text": torch.tensor([[float(len(p))] for p in prompts]), "source": torch.tensor(means)[:, None]}


def _image(path, value: int):
    from PIL import Image

    Image.new("RGB", (8, 8), (value, value, value)).save(path)
    return str(path)


def test_an_edit_prompt_is_cached_with_its_sources_bytes(tmp_path):
    backbone = EditingStandIn()
    cache = TextCache(tmp_path / "cache", backbone, ModelConfig())
    dark, light = _image(tmp_path / "dark.png", 10), _image(tmp_path / "light.png", 200)
    cond = cache.get(["make it blue", "make it blue"], [(dark,), (light,)])  # one instruction, two sources
    assert cond["source"][:, 0].tolist() == [10.0, 200.0] and len(backbone.encoded) == 2
    moved = tmp_path / "moved.png"
    (tmp_path / "light.png").rename(moved)  # the same bytes elsewhere: the same entry, not encoded again
    assert cache.get(["make it blue"], [(str(moved),)])["source"].item() == 200.0 and len(backbone.encoded) == 2
    _image(moved, 90)  # the file changed: encoded again
    assert cache.get(["make it blue"], [(str(moved),)])["source"].item() == 90.0 and len(backbone.encoded) == 3
    assert TextCache(tmp_path / "cache", EditingStandIn(), ModelConfig()).get(
        ["make it blue"], [(dark,)])["source"].item() == 10.0  # read back from disk by another process's cache


def test_sources_for_a_model_that_does_not_edit_are_refused(tmp_path, counting):
    counting.edits, counting.name = False, "embedded"
    with pytest.raises(SolrlError, match="model.kind embedded does not edit images"):
        TextCache(tmp_path, counting, ModelConfig()).get(["make it blue"], [(_image(tmp_path / "a.png", 1),)])
