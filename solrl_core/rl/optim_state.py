"""Optimizer state ↔ safetensors-compatible tensors + JSON-able metadata (no pickle), exactly.

Tensor values (Adam moments, step counts, tensor learning rates) go to the tensor dict under ``state/<param id>/<key>``
or ``param_groups/<group>/<key>``; everything else (floats, bools, None, the param id lists, tuples such as betas,
recorded as lists plus a note to turn them back into tuples) goes to the metadata.
"""

from __future__ import annotations

import torch

FORMAT = "solrl-optimizer-v1"
_SCALARS = (bool, int, float, str, type(None))


def _split(values: dict, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    plain, tensor_keys, tuple_keys = {}, [], []
    for key, value in values.items():
        if isinstance(value, torch.Tensor):
            tensors[f"{prefix}/{key}"] = value.detach().to("cpu", copy=True).contiguous()
            tensor_keys.append(key)
        elif isinstance(value, (list, tuple)) and all(isinstance(x, _SCALARS) for x in value):
            plain[key] = list(value)
            if isinstance(value, tuple):
                tuple_keys.append(key)
        elif isinstance(value, _SCALARS):
            plain[key] = value
        else:
            raise TypeError(f"optimizer entry {prefix}/{key} of type {type(value).__name__} cannot be stored")
    return {"values": plain, "tensors": tensor_keys, "tuples": tuple_keys}


def _join(entry: dict, prefix: str, tensors: dict[str, torch.Tensor]) -> dict:
    values = {k: (tuple(v) if k in entry["tuples"] else v) for k, v in entry["values"].items()}
    for key in entry["tensors"]:
        values[key] = tensors[f"{prefix}/{key}"].clone()
    return values


def optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict]:
    """(tensors, meta): tensors for ``safetensors.torch.save``, meta for ``json.dumps``."""
    state_dict = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    state = [
        {"id": int(pid), **_split(values, f"state/{int(pid)}", tensors)} for pid, values in state_dict["state"].items()
    ]
    groups = [_split(group, f"param_groups/{i}", tensors) for i, group in enumerate(state_dict["param_groups"])]
    meta = {"format": FORMAT, "optimizer": type(optimizer).__name__, "state": state, "param_groups": groups}
    return tensors, meta


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict[str, torch.Tensor], meta: dict) -> None:
    """Load what `optimizer_to_tensors` produced into `optimizer` (built over the same parameters, in order)."""
    if meta.get("format") != FORMAT:
        raise ValueError(f"optimizer metadata format {meta.get('format')!r} is not {FORMAT!r}")
    if meta.get("optimizer") != type(optimizer).__name__:
        raise ValueError(f"saved state is for {meta.get('optimizer')}, not {type(optimizer).__name__}")
    state = {int(e["id"]): _join(e, f"state/{int(e['id'])}", tensors) for e in meta["state"]}
    groups = [_join(g, f"param_groups/{i}", tensors) for i, g in enumerate(meta["param_groups"])]
    optimizer.load_state_dict({"state": state, "param_groups": groups})
