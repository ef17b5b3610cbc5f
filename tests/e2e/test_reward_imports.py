"""The reward registry without model libraries: scoring with the weight-free rewards, their preflight and
`solrl rewards list` import neither torch, transformers nor open_clip (a fresh interpreter tells)."""

import subprocess
import sys


def test_importing_and_scoring_weight_free_rewards_loads_no_model_library():
    code = (
        "import sys; import solrl_core.rewards as r; from solrl_core.rewards.tiny import sample_batch;"
        "i, p = sample_batch(2, 32); r.score_images(i, p, {'jpeg': 1.0, 'embedded': 1.0});"
        "r.preflight_rewards({'jpeg': 1.0}); from solrl_core.rewards.commands import list_rewards; list_rewards();"
        "print(sorted(m for m in ('torch', 'transformers', 'open_clip') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
