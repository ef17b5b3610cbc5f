"""The setup every backbone adapter test module shares: a module names its model with MODEL_KIND (the config's
model.kind) and TINY_MODEL (the `solrl make-tiny` name; a module testing several variants overrides `tiny_name` with
a parametrized fixture), and gets the tiny directory made once per module, and the adapter loaded on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from backbone_checks import load_tiny
from solrl_core.models.backbones.tiny import make_tiny_model


@pytest.fixture(scope="module")
def tiny_name(request) -> str:
    return request.module.TINY_MODEL


@pytest.fixture(scope="module")
def tiny_dir(tiny_name, tmp_path_factory, one_torch_thread) -> Path:
    return make_tiny_model(tiny_name, tmp_path_factory.mktemp(tiny_name) / "tiny")


@pytest.fixture(scope="module")
def backbone(request, tiny_dir):
    return load_tiny(request.module.MODEL_KIND, tiny_dir)
