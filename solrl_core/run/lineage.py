"""The identity of a completed stage or evaluation: a fresh id per completion, the ids of the inputs it read, and the
id a re-run keeps when its artifact is bit for bit the one it replaces (solrl_core/run/staleness.py reads them)."""

from __future__ import annotations

import uuid

from solrl_core.run.integrity import FILES_KEY


def new_completion_id() -> str:
    return uuid.uuid4().hex


def lineage(completion_id: str | None = None, inputs: dict | None = None) -> dict:
    """The manifest keys read here: the completion's id (a new one when not given) and the ids of its inputs."""
    keys = {"id": completion_id or new_completion_id()}
    if inputs is not None:
        keys["inputs"] = inputs
    return keys


def kept_id(previous: dict | None, files: dict, completion_id: str | None) -> str | None:
    """The id of a completion whose artifact has the inventory `files`: the `previous` completion's (the record it
    replaces) when that one's artifact had the same files, sizes and digests, else `completion_id`."""
    if isinstance(previous, dict) and previous.get("id") and previous.get(FILES_KEY) == files:
        return previous["id"]
    return completion_id
