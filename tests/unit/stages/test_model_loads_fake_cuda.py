"""One model load per GPU in the modes that run on one process's GPU, on a faked CUDA machine: `model.device:
cuda:0` (every stage and the evaluation share the one cached model: the update is placed as the other stages are),
and an update started through torchrun (this process holds no model when its ranks start, so rank 0 never loads
beside one on GPU 0). The device workers' mode is counted on real processes in tests/e2e/test_model_loads.py."""

from __future__ import annotations

import pytest

from one_layer_embedded import one_layer_embedded
from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.evaluate import run_eval
from solrl_core.models.backbones import cache
from solrl_core.models.backbones.registry import load_backbone
from solrl_core.models.text_cache import CACHE_DIR, TextCache, run_prompts
from solrl_core.run.rundir import RunDir
from solrl_core.run.stage_table import STAGES
from solrl_core.run_config import prepare_run
from solrl_core.stages import update
from solrl_core.stages.runner import run_stage
from solrl_core.testing.fake_cuda import fake_cuda

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

SMALL = ["model.dtype=bfloat16", "prompts.per_iteration=1", "explore.seeds_per_prompt=4", "explore.batch_size=2",
         "explore.steps=2", "select.k=2", "regenerate.steps=2", "regenerate.batch_size=2", "train.micro_batch=4",
         "eval.num_prompts=1", "eval.seeds_per_prompt=2", "eval.steps=2", "eval.batch_size=2"]


def _run(path, cfg) -> RunDir:
    """A run directory of `cfg` whose prompts are already encoded on the CPU (see test_fake_cuda_stages.py)."""
    run = RunDir(path)
    prepare_run(run, cfg)
    cpu = load_backbone(cfg.model.model_copy(update={"device": "cpu"}))
    TextCache(run.root / CACHE_DIR, cpu, cfg.model).ensure(run_prompts(cfg, cpu))
    return run


@pytest.fixture(scope="module")
def one_layer(tmp_path_factory) -> str:
    """`model.path=` of the embedded model at one layer (tests/support/one_layer_embedded.py)."""
    return f"model.path={one_layer_embedded('embedded', tmp_path_factory.mktemp('embedded'))}"


@pytest.fixture
def no_cached_models():
    cache.drop_models()
    yield
    cache.drop_models()  # no fake-device model outlives the test in this process's cache


def test_model_device_cuda0_loads_the_model_once(tmp_path, one_layer, no_cached_models, one_torch_thread):
    cfg = load_config(TINY, ["model.device=cuda:0", one_layer, *SMALL])
    run = _run(tmp_path / "run", cfg)
    before = cache.model_loads()
    with fake_cuda():
        for stage in STAGES:
            run_stage(run, cfg, 0, stage, progress=False)
        run_eval(run, cfg, 1)
        assert cache.model_loads() - before == 1 and cache.held_models() == 1
    assert run.manifest(0, "update")["summary"]["shards"][0]["model_loads"] == cache.model_loads()


def test_a_torchrun_update_starts_when_this_process_holds_no_model(tmp_path, one_layer, no_cached_models,
                                                                     monkeypatch, one_torch_thread):
    """Two GPUs, the stages here (one after another, each on its GPU), the update's two ranks by torchrun."""
    held_at_launch = []

    def launch(ctx):
        held_at_launch.append(cache.held_models())
        raise RuntimeError("torchrun is not started in this test")

    monkeypatch.setattr(update, "launch_update", launch)
    cfg = load_config(TINY, ["model.device=cuda", "train.processes=2", "train.dist_backend=nccl", one_layer, *SMALL])
    run = _run(tmp_path / "run", cfg)
    with fake_cuda(device_count=2):
        for stage in STAGES[:-1]:
            run_stage(run, cfg, 0, stage, progress=False)
        assert cache.held_models() == 2  # one per GPU, both in this process
        with pytest.raises(RuntimeError, match="torchrun is not started"):
            run_stage(run, cfg, 0, "update", progress=False)
    assert held_at_launch == [0]
