"""The GPU acceptance command (solrl_core.doctor.acceptance) at toy sizes on a CPU: its command line, shared by
tests/unit/doctor/test_acceptance.py (in process) and tests/e2e/test_acceptance_imports.py (in a subprocess)."""

from __future__ import annotations

import json

from repo_paths import TINY

# measure()'s keyword arguments for a FLUX.1 transformer of toy widths, few tokens, one timed repeat
TINY_BENCH = {"config_overrides": {"num_attention_heads": 2, "attention_head_dim": 16, "axes_dims_rope": [4, 6, 6],
                                   "joint_attention_dim": 32, "pooled_projection_dim": 32},
              "image_tokens": 16, "text_tokens": 8, "min_width": 16, "micro_batch": 2, "repeats": 1}


def acceptance_argv(out, *more):
    return ["--out", str(out), "--device", "cpu", "--bench", "flux1", "--blocks", "2", "--batch", "2",
            "--bench-options", json.dumps(TINY_BENCH), "--iterations", "1", "--config", str(TINY), *more]
