"""Method caches that die with their module (solrl_core/models/module_caches.py), on toy modules memoized with
functools.lru_cache and with diffusers' lru_cache_unless_export (Qwen-Image's case: tests/unit/models/backbones/
test_backbone_qwenimage.py)."""

from __future__ import annotations

import copy
import functools
import gc
import weakref

import pytest
import torch
from diffusers.utils.torch_utils import lru_cache_unless_export

from solrl_core.models.module_caches import _class_cache, own_method_caches


class Plain(torch.nn.Module):
    calls = 0

    @functools.lru_cache(maxsize=3)
    def table(self, n: int) -> torch.Tensor:
        type(self).calls += 1
        return torch.arange(n)

    def forward(self, n: int) -> torch.Tensor:
        return self.table(n)


class Diffusers(Plain):
    @lru_cache_unless_export(maxsize=None)
    def table(self, n: int) -> torch.Tensor:
        type(self).calls += 1
        return torch.arange(n) * 2


@pytest.mark.parametrize("klass, size", [(Plain, 3), (Diffusers, None)])
def test_each_module_gets_its_own_cache_of_the_same_size_freed_with_it(klass, size):
    model = own_method_caches(torch.nn.Sequential(klass(), torch.nn.Sequential(klass())))
    first, inner = model[0], model[1][0]
    klass.calls = 0
    assert first(4).tolist() == (list(range(4)) if klass is Plain else [0, 2, 4, 6])
    first(4)
    inner(4)
    assert klass.calls == 2  # one computation per module: the second call of `first` was a hit
    assert _class_cache(first.table.__func__).cache_info().maxsize == size and first.table.__func__ is not inner.table.__func__
    twin = own_method_caches(copy.deepcopy(first))  # a copy of a module that had one gets a new one
    assert twin.table.__func__ is not first.table.__func__ and twin(4).tolist() == first(4).tolist()
    gone = weakref.ref(first)
    del model, first, twin
    gc.collect()
    assert gone() is None


def test_a_module_without_memoized_methods_is_left_as_it_is():
    model = torch.nn.Linear(2, 2)
    assert own_method_caches(model) is model and "forward" not in vars(model)
