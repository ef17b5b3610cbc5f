"""One iteration of the tiny config trained through a plug-in backbone adapter by `solrl train` (the plug-ins in
process: tests/unit/plugins/test_plugins.py)."""

from __future__ import annotations

import os

import yaml
from safetensors.numpy import load_file

from cli_processes import solrl, tracking_set
from repo_paths import TINY
from plugin_package import write_package

def test_one_iteration_of_the_tiny_config_trains_through_a_plug_in_adapter(session_env, tmp_path):
    package = write_package(tmp_path / "plugins", "solrl_test_plugin")
    env = {**session_env, "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path / "plugins"),
                                                                        session_env.get("PYTHONPATH")]))}
    kind, run_dir = f"{package}.adapter:MyBackbone", tmp_path / "run"
    solrl(env, "train", str(TINY), "--iterations", "1", "--set", f"model.kind={kind}", "--run-dir", str(run_dir),
          "--no-progress", *tracking_set(session_env))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["model"]["kind"] == kind
    saved = [load_file(p) for p in run_dir.rglob("adapters.safetensors")]
    assert saved, "the update wrote no adapters"
    for tensors in saved:  # the plug-in's LoRA targets, not the embedded backbone's
        layers = {key.split(".lora_")[0].rsplit(".", 1)[-1] for key in tensors}
        assert layers == {"to_q", "to_v"}
