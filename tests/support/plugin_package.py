"""A package outside solrl with a backbone adapter and a reward (the plug-ins a user writes), written into a test's
folder: `write_package`, and the `package` fixture that puts one on sys.path."""

from __future__ import annotations

import textwrap

import pytest

ADAPTER = '''
import dataclasses

from solrl_core.models.backbones.embedded import EmbeddedBackbone


class MyBackbone(EmbeddedBackbone):
    """The embedded model with LoRA on the query and value projections only."""

    name = "mybackbone"
    defaults = dataclasses.replace(EmbeddedBackbone.defaults, lora_targets=["to_q", "to_v"])


class NotABackbone:
    pass
'''

REWARD = '''
import numpy as np

from solrl_core.rewards.base import Reward


class Brightness(Reward):
    """Mean pixel value in [0, 1]."""

    name = "brightness"
    default_batch_size = 3

    def score_batch(self, images, prompts):
        return images.reshape(len(images), -1).mean(axis=1) / 255.0
'''


def write_package(root, name: str) -> str:
    package = root / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "adapter.py").write_text(textwrap.dedent(ADAPTER))
    (package / "reward.py").write_text(textwrap.dedent(REWARD))
    return name


@pytest.fixture
def package(tmp_path, monkeypatch, request):
    name = write_package(tmp_path / "plugins", f"plug_{request.node.name.split('[')[0][5:25]}")
    monkeypatch.syspath_prepend(str(tmp_path / "plugins"))
    return name
