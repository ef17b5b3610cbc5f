"""The embedded editing world: a source scene of the shapes world (solrl_core/worlds/shapes.py), an instruction that
changes one of its attributes, and the target scene the instruction asks for, whose render is the edit's answer.

Instructions, one per (source, change):

    colour    "make it blue" | "make them blue"                    (count 1 | 2 or 3)
    shape     "turn it into a square" | "turn them into squares"
    count     "make it one" | "make it two" | "make it three"     (a positioned source loses its position: a count
                                                                   above one has none)
    position  "move it to the left" | "... to the right" | "... to the top" | "... to the bottom"  (from the
              opposite edge: one object placed at an edge; from anywhere else it may already be there)

An edit keeps what its instruction does not name: the colour, shape and count of every edit but the one it changes,
and for colour and shape edits the layout too (every object where it was, at its size: the target is drawn from the
source's random draws). `render_pair` draws both images from one generator state, so the target of a colour or shape
edit differs from its source only in the changed attribute's pixels. solrl_core/rewards/embedded_edit.py scores an
edited image against its edit.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path

import numpy as np

from solrl_core.errors import SolrlError
from solrl_core.worlds.shapes import COLOURS, COUNTS, SHAPES, Scene, all_scenes, parse_prompt, render_scene

KINDS = ("colour", "shape", "count", "position")
_OPPOSITE = {"left": "right", "right": "left", "top": "bottom", "bottom": "top"}
_COUNT_WORDS = {1: "one", 2: "two", 3: "three"}
PROMPT_SEPARATOR = ": "  # between an edit prompt's source scene and its instruction (`Edit.prompt`)


@dataclass(frozen=True)
class Edit:
    """A source scene and the one attribute an instruction changes (`kind`) to `value`."""

    source: Scene
    kind: str
    value: str | int | None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SolrlError(f"unknown edit kind {self.kind!r}; expected one of {', '.join(KINDS)}")
        if self.kind == "position" and _OPPOSITE.get(self.source.position) != self.value:
            raise SolrlError(f"a position edit moves one object from an edge to the opposite one; not "
                             f"{self.source.prompt!r} to {self.value!r}")
        before = {"colour": self.source.colour, "shape": self.source.shape, "count": self.source.count,
                  "position": self.source.position}[self.kind]
        if self.value == before:
            raise SolrlError(f"the edit {self.instruction!r} changes nothing in {self.source.prompt!r}")
        self.target  # noqa: B018 - a value outside the world raises here

    @property
    def target(self) -> Scene:
        if self.kind == "count":
            return replace(self.source, count=int(self.value), position=self.source.position if self.value == 1
                           else None)
        return replace(self.source, **{self.kind: self.value})

    @property
    def instruction(self) -> str:
        many = self.source.count > 1
        if self.kind == "colour":
            return f"make {'them' if many else 'it'} {self.value}"
        if self.kind == "shape":
            return f"turn them into {self.value}s" if many else f"turn it into a {self.value}"
        if self.kind == "count":
            return f"make it {_COUNT_WORDS[int(self.value)]}"
        return f"move it to the {self.value}"

    @property
    def prompt(self) -> str:
        """The edit as the world's editing model and reward read it: the source scene's prompt, then the instruction
        ("a red circle on the left: make it blue"); the reward needs the scene the instruction applies to, which
        an instruction alone does not name (`edit_of_prompt` reads it back)."""
        return f"{self.source.prompt}{PROMPT_SEPARATOR}{self.instruction}"

    @property
    def keeps_layout(self) -> bool:
        """Whether every object stays where it was, at its size (colour and shape edits)."""
        return self.kind in ("colour", "shape")


def edits_of(source: Scene) -> list[Edit]:
    """Every edit of `source`: each other colour, shape and count, and (one object at an edge) the opposite edge."""
    values = {"colour": list(COLOURS), "shape": list(SHAPES), "count": list(COUNTS),
              "position": [_OPPOSITE[source.position]] if source.position else []}
    current = {"colour": source.colour, "shape": source.shape, "count": source.count, "position": source.position}
    return [Edit(source, kind, value) for kind in KINDS for value in values[kind] if value != current[kind]]


@lru_cache(maxsize=1)
def all_edits() -> tuple[Edit, ...]:
    return tuple(edit for scene in all_scenes() for edit in edits_of(scene))


def parse_edit(source_prompt: str, instruction: str) -> Edit:
    """The edit `instruction` makes of the scene `source_prompt`; SolrlError in one line outside the grammar."""
    source = parse_prompt(source_prompt)
    wanted = " ".join(str(instruction).lower().split())
    for edit in edits_of(source):
        if edit.instruction == wanted:
            return edit
    raise SolrlError(f"instruction {instruction!r} is not an edit of {source.prompt!r} in the embedded editing world "
                     "(e.g. 'make it blue', 'turn it into a square', 'make it two', 'move it to the left')")


def edit_of_prompt(prompt: str) -> Edit:
    """The edit of an edit prompt ("a red circle on the left: make it blue", `Edit.prompt`); SolrlError in one line
    for anything else."""
    source, sep, instruction = str(prompt).partition(PROMPT_SEPARATOR)
    if not sep:
        raise SolrlError(f"{prompt!r} is not an edit prompt of the embedded editing world (the source scene, "
                         f"{PROMPT_SEPARATOR!r}, the instruction: 'a red circle on the left: make it blue')")
    return parse_edit(source, instruction)


@lru_cache(maxsize=1)
def _held_out() -> tuple[bool, ...]:
    """Per edit of `all_edits`, in order: whether it is held out (a deterministic ~20%, spread over sources and
    kinds)."""
    return tuple((index * 7 + KINDS.index(edit.kind)) % 5 == 0 for index, edit in enumerate(all_edits()))


def train_edits() -> list[Edit]:
    return [edit for edit, held in zip(all_edits(), _held_out()) if not held]


def test_edits() -> list[Edit]:
    return [edit for edit, held in zip(all_edits(), _held_out()) if held]


def render_pair(edit: Edit, rng: np.random.Generator, resolution: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(source, target) uint8 images (resolution, resolution, 3), drawn from the same state of `rng` (which then
    stands where the source's draws left it): a colour or shape edit's target keeps the source's layout."""
    state = rng.bit_generator.state
    source = render_scene(edit.source, rng, resolution)
    after = rng.bit_generator.state
    rng.bit_generator.state = state
    target = render_scene(edit.target, rng, resolution)
    rng.bit_generator.state = after
    return source, target


def render_pairs(edits: Sequence[Edit], rng: np.random.Generator,
                 resolution: int = 32) -> tuple[np.ndarray, np.ndarray]:
    """(sources, targets) uint8 (B, resolution, resolution, 3) for `edits`, in order."""
    pairs = [render_pair(edit, rng, resolution) for edit in edits]
    return np.stack([s for s, _ in pairs]), np.stack([t for _, t in pairs])


CACHE_ENV = "SOLRL_CACHE_DIR"  # where solrl keeps files it can make again (default: $XDG_CACHE_HOME/solrl)
SOURCES_VERSION = "edit-sources-v1"  # the folder of the world's source images: a change of their drawing renames it


def source_dir() -> Path:
    """The folder of the editing world's source images: $SOLRL_CACHE_DIR, else $XDG_CACHE_HOME/solrl (~/.cache/solrl),
    then SOURCES_VERSION."""
    root = os.environ.get(CACHE_ENV) or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "solrl"
    return Path(root).expanduser() / SOURCES_VERSION


def source_files(edits: Sequence[Edit], resolution: int = 32) -> list[str]:
    """Each edit's source image as a PNG file (its path), drawn once and kept in `source_dir()`: the source of edit i
    of `all_edits()` from the generator seeded with i, so every machine draws the same images. A prompt set of the
    world (`builtin:edits-train`, `builtin:edits-test`) names them as its sources."""
    from PIL import Image

    folder = source_dir() / f"{resolution}px"
    folder.mkdir(parents=True, exist_ok=True)
    index = {edit: i for i, edit in enumerate(all_edits())}
    paths = []
    for edit in edits:
        path = folder / f"{index[edit]:04d}.png"
        if not path.is_file():
            source, _ = render_pair(edit, np.random.default_rng(index[edit]), resolution)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            Image.fromarray(source).save(tmp, format="PNG")
            os.replace(tmp, path)
        paths.append(str(path))
    return paths
