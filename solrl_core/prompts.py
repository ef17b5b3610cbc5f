"""Prompt sets: builtin sets, plain text files and JSONL files, with train/test splits.

A prompt set is named by a spec string (config keys `prompts.train` and `eval.prompts`):

* `builtin:shapes-train`, `builtin:shapes-test`: the embedded model's prompts (solrl_core/worlds/shapes.py);
  `builtin:motion-train`, `builtin:motion-test`: the embedded video model's (solrl_core/worlds/motion.py);
  `builtin:edits-train`, `builtin:edits-test`: the embedded editing world's edit prompts, each with its source image
  (drawn once into a cache folder: solrl_core/worlds/edits.py `source_files`);
* a `.jsonl` file: one JSON object per line with a required "prompt" string; every other key is kept as the
  prompt's metadata (e.g. GenEval's "tag" and "include"). A "split" key assigns the line to a split, chosen by
  `prompts.split` (training) and `eval.split` (evaluation); a null split takes every line. An edit's line names
  its source image(s) under "images" (a list of paths, relative to the file's folder unless absolute): each is
  checked at load (it exists and decodes as an image) and kept as an absolute path;
* any other file: plain text, one prompt per line; blank lines and lines starting with `#` are skipped.

Blank lines are skipped in JSONL files too. Mistakes end with one line naming the file (and line) to fix.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

from solrl_core.errors import SolrlError
from solrl_core.userfiles import read_text

BUILTIN_SETS = ("builtin:shapes-train", "builtin:shapes-test", "builtin:motion-train", "builtin:motion-test",
                "builtin:edits-train", "builtin:edits-test")
CALIBRATION_PROMPT = "a red circle"  # the quantize stage's fixed calibration forward
SOURCE_IMAGES_KEY = "images"  # an edit prompt's source images, in a JSONL line


@dataclass(frozen=True)
class PromptSet:
    prompts: tuple[str, ...]
    metadata: tuple[dict, ...]  # per prompt: the JSONL line's other keys ({} for text and builtin sets)

    @property
    def sources(self) -> tuple[tuple[str, ...], ...] | None:
        """Per prompt, its source images' absolute paths (an edit prompt set), or None (a text-to-image set)."""
        if not self.metadata or SOURCE_IMAGES_KEY not in self.metadata[0]:
            return None
        return tuple(tuple(m[SOURCE_IMAGES_KEY]) for m in self.metadata)


# The prompt files of the official presets (solrl_core/config/presets.py), which solrl does not ship, and what to do
OFFICIAL_PROMPT_FILES = ("data/pickscore/train.txt", "data/pickscore/test.txt")
PROMPTS_HINT = (
    "the Pick-a-Pic 'pickscore' prompt set of the official presets is not shipped: put its train.txt and test.txt "
    "(one prompt per line; e.g. dataset/pickscore/ of the Flow-GRPO repository) in data/pickscore/, or --set "
    "prompts.train=FILE eval.prompts=FILE"
)
# the editing models' presets (configs/parts/models/flux1-kontext.yaml, qwenimage-edit.yaml)
EDIT_PROMPT_FILES = ("data/edits/train.jsonl", "data/edits/test.jsonl")
EDIT_PROMPTS_HINT = (
    "the edit prompt set of the editing models' presets is not shipped: write train.jsonl and test.jsonl in "
    'data/edits/, one {"prompt": INSTRUCTION, "images": SOURCE} per line, SOURCE an image path relative to the file '
    "(docs/editing.md), or --set prompts.train=FILE eval.prompts=FILE"
)


def missing_prompts_hint(path: str | Path) -> str:
    """A hint for a missing prompt file that is one of the official presets' (empty string otherwise)."""
    name = Path(path).as_posix()
    if name.endswith(OFFICIAL_PROMPT_FILES):
        return f" ({PROMPTS_HINT})"
    return f" ({EDIT_PROMPTS_HINT})" if name.endswith(EDIT_PROMPT_FILES) else ""


def load_prompt_set(spec: str, key: str, split: str | None = None) -> PromptSet:
    """The prompt set named by `spec` (see the module docstring); `key` names the config key in error messages."""
    stamp = None
    if not spec.startswith("builtin:"):
        path = Path(spec)
        if not path.exists():
            raise SolrlError(f"{key}: file not found: {path}{missing_prompts_hint(path)}")
        stat = path.stat()
        stamp = (stat.st_mtime_ns, stat.st_size)
    return _load(spec, key, split, stamp)


@functools.lru_cache(maxsize=16)
def _load(spec: str, key: str, split: str | None, stamp) -> PromptSet:
    if spec.startswith("builtin:"):
        rows = _builtin(spec, key)
    elif spec.endswith(".jsonl"):
        rows = _read_jsonl(Path(spec), key)
    else:
        rows = _read_text(Path(spec), key)
    if not rows:
        raise SolrlError(f"{key}: the prompt list '{spec}' is empty")
    if split is not None:
        splits = sorted({str(meta["split"]) for _, meta in rows if "split" in meta})
        if not splits:
            raise SolrlError(f"{key}: split '{split}' asked for, but '{spec}' has no \"split\" field "
                             "(only JSONL files have splits; set the split to null)")
        rows = [(prompt, meta) for prompt, meta in rows if str(meta.get("split")) == split]
        if not rows:
            raise SolrlError(f"{key}: no prompt of '{spec}' is in split '{split}' (splits: {', '.join(splits)})")
    return PromptSet(tuple(p for p, _ in rows), tuple(m for _, m in rows))


def _builtin(spec: str, key: str) -> list[tuple[str, dict]]:
    from solrl_core.worlds import edits, motion, shapes

    if spec in ("builtin:edits-train", "builtin:edits-test"):  # edit prompts, each with its source image's file
        chosen = edits.train_edits() if spec.endswith("train") else edits.test_edits()
        return [(edit.prompt, {SOURCE_IMAGES_KEY: [path]}) for edit, path in zip(chosen, edits.source_files(chosen))]

    sets = {"builtin:shapes-train": shapes.train_prompts, "builtin:shapes-test": shapes.test_prompts,
            "builtin:motion-train": motion.train_prompts, "builtin:motion-test": motion.test_prompts}
    if spec not in sets:
        raise SolrlError(f"{key}: unknown builtin set '{spec}' (known: {', '.join(BUILTIN_SETS)})")
    return [(p, {}) for p in sets[spec]()]


def _read_text(path: Path, key: str) -> list[tuple[str, dict]]:
    lines = (line.strip() for line in read_text(path, key).splitlines())
    return [(line, {}) for line in lines if line and not line.startswith("#")]


def _read_jsonl(path: Path, key: str) -> list[tuple[str, dict]]:
    rows, numbers = [], []
    for number, line in enumerate(read_text(path, key).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SolrlError(f"{key}: {path} line {number} is not valid JSON ({exc.msg})") from None
        if not isinstance(item, dict):
            raise SolrlError(f"{key}: {path} line {number} must be a JSON object with a \"prompt\" key")
        prompt = item.pop("prompt", None)
        if not isinstance(prompt, str) or not prompt.strip():
            raise SolrlError(f"{key}: {path} line {number} has no \"prompt\" string")
        if SOURCE_IMAGES_KEY in item:
            item[SOURCE_IMAGES_KEY] = _source_images(item[SOURCE_IMAGES_KEY], path, number, key)
        rows.append((prompt.strip(), item))
        numbers.append(number)
    with_sources = [SOURCE_IMAGES_KEY in item for _, item in rows]
    if any(with_sources) and not all(with_sources):
        odd = numbers[with_sources.index(not with_sources[0])]
        raise SolrlError(f"{key}: {path} line {odd} {'has no' if with_sources[0] else 'has'} \"{SOURCE_IMAGES_KEY}\" "
                         f"but line {numbers[0]} {'has' if with_sources[0] else 'has none'}: an edit prompt set gives "
                         "every line its source images")
    return rows


def _source_images(value, path: Path, number: int, key: str) -> list[str]:
    """The line's source image paths, absolute, each checked to decode as an image; one line naming the first bad."""
    from PIL import Image, UnidentifiedImageError

    where = f"{key}: {path} line {number}"
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise SolrlError(f"{where}: \"{SOURCE_IMAGES_KEY}\" must be an image path or a non-empty list of them")
    found = []
    for name in value:
        image = Path(name).expanduser()
        image = image if image.is_absolute() else path.parent / image
        if not image.is_file():
            raise SolrlError(f"{where}: source image not found: {image}")
        try:
            with Image.open(image) as opened:
                opened.verify()  # the header and the data's integrity, without decoding the pixels
        except (UnidentifiedImageError, OSError, SyntaxError) as exc:
            raise SolrlError(f"{where}: source image {image} is not an image Pillow reads "
                             f"({type(exc).__name__}: {exc})") from None
        found.append(str(image.resolve()))
    return found


def prompt_set(spec: str, key: str, split: str | None = None) -> list[str]:
    """The prompts of a set (see `load_prompt_set`)."""
    return list(load_prompt_set(spec, key, split).prompts)


def train_prompt_set(cfg) -> list[str]:
    """The training prompts: `prompts.train`, split `prompts.split`."""
    return prompt_set(cfg.prompts.train, "prompts.train", cfg.prompts.split)


def train_sources(cfg) -> tuple[tuple[str, ...], ...] | None:
    """The training prompts' source images (`PromptSet.sources`), in `train_prompt_set`'s order."""
    return load_prompt_set(cfg.prompts.train, "prompts.train", cfg.prompts.split).sources


def eval_sources(cfg) -> tuple[tuple[str, ...], ...] | None:
    """The evaluated prompts' source images, in `eval_prompt_set`'s order."""
    found = load_prompt_set(cfg.eval.prompts, "eval.prompts", cfg.eval.split).sources
    return None if found is None else found[: cfg.eval.num_prompts]


def check_train_prompts(cfg) -> list[str]:
    """The training prompts (`train_prompt_set`); a SolrlError naming both numbers when an iteration would draw more
    (`prompts.per_iteration`) than the set has. An iteration draws distinct prompts (solrl_core/stages/draws.py
    `iteration_prompts`); past the set's size it would repeat prompts within one iteration (each then a separate
    group of seeds), which no one asks for by writing a larger number."""
    prompts = train_prompt_set(cfg)
    if cfg.prompts.per_iteration > len(prompts):
        split = f" (split '{cfg.prompts.split}')" if cfg.prompts.split is not None else ""
        raise SolrlError(f"prompts.per_iteration is {cfg.prompts.per_iteration} but '{cfg.prompts.train}'{split} has "
                         f"{len(prompts)} prompt{'s' if len(prompts) != 1 else ''}: each iteration draws distinct "
                         f"prompts; set prompts.per_iteration to at most {len(prompts)} or add prompts")
    return prompts


def eval_prompt_set(cfg) -> list[str]:
    """The evaluation prompts: the first `eval.num_prompts` of `eval.prompts`, split `eval.split`."""
    return prompt_set(cfg.eval.prompts, "eval.prompts", cfg.eval.split)[: cfg.eval.num_prompts]
