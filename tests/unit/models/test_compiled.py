"""Compiled sampling copies (`model.compile`, solrl_core/models/compiled.py): the same samples as eager, the code
compiled once per process and reused by every later copy of the same structure, once more per new batch shape and
never per batch, and the copies that stay eager. Traced with `aot_eager` (dynamo's capture and AOTAutograd's
functionalized graph, without generating kernels: seconds, where inductor's C++ compile takes a minute on 2 cores);
inductor's kernels against eager on every backbone: solrl_core/bench/compiled_vs_eager.py, docs/lab/compile-2026-11-29.md."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from repo_paths import TINY
from solrl_core.config.loading import load_config
from solrl_core.models.backbones.registry import load_backbone
from solrl_core.models.compiled import compile_enabled, compile_mode, compiled_copy, is_compiled
from solrl_core.models.sampler import sample
from solrl_core.models.step_cache import enable_step_cache
from solrl_core.run.pool import read_table
from solrl_core.run.rundir import RunDir
from solrl_core.run_config import prepare_run
from solrl_core.stages.runner import run_stage
from solrl_core.stages.transformer_copies import weight_sharing_transformer
from solrl_core.testing.fake_cuda import fake_cuda

pytestmark = pytest.mark.slow  # whole iterations or models: `make test` runs it, `make test-fast` not

TRACED = ["model.compile=true", "model.compile_backend=aot_eager"]


@pytest.fixture
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def backbone():
    return load_backbone(load_config(TINY).model)


def _graphs() -> int:
    return counters["stats"]["unique_graphs"]


def _sample(backbone, transformer, seeds):
    cond = backbone.encode_prompts(["a red circle"] * len(seeds))
    return sample(backbone, transformer, cond, backbone.initial_noise(seeds), 3).x0


def test_a_new_copy_runs_the_code_compiled_for_the_first(backbone, fresh_dynamo, one_torch_thread):
    cfg = load_config(TINY, TRACED).model
    eager = _sample(backbone, weight_sharing_transformer(backbone), [1, 2, 3, 4])
    for _ in range(3):  # three iterations' copies
        copy_ = compiled_copy(weight_sharing_transformer(backbone), cfg)
        assert is_compiled(copy_)
        torch.testing.assert_close(_sample(backbone, copy_, [1, 2, 3, 4]), eager, rtol=1e-5, atol=1e-6)
    assert _graphs() == 1


def test_a_new_batch_shape_compiles_once_and_never_per_batch(backbone, fresh_dynamo, one_torch_thread):
    cfg = load_config(TINY, TRACED).model
    copy_ = compiled_copy(weight_sharing_transformer(backbone), cfg)
    for seeds in ([1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11], [12, 13, 14]):  # two full batches, two last ones
        _sample(backbone, copy_, seeds)
    assert _graphs() == 2


def test_a_copy_with_a_step_cache_or_on_a_faked_gpu_runs_eager(backbone, fresh_dynamo, one_torch_thread):
    cfg = load_config(TINY, TRACED).model
    cached = enable_step_cache(copy.deepcopy(backbone.transformer), "taylorseer",
                               {"cache_interval": 2, "disable_cache_before_step": 2})
    assert not is_compiled(compiled_copy(cached, cfg))
    assert not is_compiled(compiled_copy(weight_sharing_transformer(backbone), load_config(TINY).model))  # auto, CPU
    with fake_cuda():
        gpu_cfg = load_config(TINY, ["model.device=cuda", "model.dtype=bfloat16"]).model
        on_gpu = load_backbone(gpu_cfg)
        assert compile_enabled(gpu_cfg) and compile_mode(gpu_cfg) == "max-autotune-no-cudagraphs"
        assert not is_compiled(compiled_copy(weight_sharing_transformer(on_gpu), gpu_cfg))
    assert _graphs() == 0


def test_the_settings_say_when_to_compile():
    assert not compile_enabled(load_config(TINY).model)  # auto on a CPU
    assert compile_enabled(load_config(TINY, ["model.compile=true"]).model)
    assert compile_mode(load_config(TINY).model) == "default"
    assert compile_mode(load_config(TINY, ["model.compile_mode=reduce-overhead"]).model) == "reduce-overhead"
    with fake_cuda():
        assert not compile_enabled(load_config(TINY, ["model.device=cuda", "model.compile=false"]).model)


def test_an_iteration_with_compiled_copies_samples_what_eager_samples(tmp_path, fresh_dynamo, one_torch_thread):
    """The explore (its quantized copy), the regenerate and the evaluation sample through the compiled code; the
    pools hold the eager run's latents."""
    from solrl_core.evaluate import run_eval

    small = ["prompts.per_iteration=1", "explore.seeds_per_prompt=4", "explore.batch_size=4", "select.k=2",
             "regenerate.batch_size=2", "eval.num_prompts=1", "eval.seeds_per_prompt=2", "eval.batch_size=2"]
    pools = {}
    for name, settings in (("eager", small), ("compiled", [*small, *TRACED])):
        cfg = load_config(TINY, settings)
        run = RunDir(tmp_path / name)
        prepare_run(run, cfg)
        for stage in ("quantize", "explore", "score_explore", "select", "regenerate"):
            run_stage(run, cfg, 0, stage, progress=False)
        pools[name] = {
            "explore": read_table(run.stage_dir(0, "score_explore") / "rewards.zarr", ["reward"])[0]["reward"],
            "regenerate": read_table(run.stage_dir(0, "regenerate") / "samples.zarr", ["latent"])[0]["latent"],
            "eval": run_eval(run, cfg, 0)["metrics"]}
    assert _graphs() >= 2  # the explore copy's quantized structure and the full-precision copies'
    for stage in ("explore", "regenerate"):
        np.testing.assert_allclose(pools["compiled"][stage], pools["eager"][stage], rtol=1e-4, atol=1e-5)
    assert pools["compiled"]["eval"] == pytest.approx(pools["eager"]["eval"], abs=1e-4)
