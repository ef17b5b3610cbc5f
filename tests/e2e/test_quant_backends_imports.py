"""Transformer Engine is never imported when the quantization modules are, in a fresh interpreter that blocks it
(the backends: tests/unit/models/quant/test_quant_backends.py)."""

import subprocess
import sys

import pytest


# ---------------------------------------------------------------- resolution


# ---------------------------------------------------------------- apply_backend on a tiny SD3


# ---------------------------------------------------------------- Transformer Engine wiring (fake TE)


@pytest.mark.e2e
def test_transformer_engine_is_never_imported_at_module_import():
    code = """
import sys
class Block:
    attempts = []
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] == 'transformer_engine':
            Block.attempts.append(name)
            raise ImportError('blocked for the test')
        return None
sys.meta_path.insert(0, Block())
import solrl_core.models.quant, solrl_core.models.quant.backends, solrl_core.models.quant.te_backend, solrl_core.models.quant.guardrail
import solrl_core.models.quant.sync
solrl_core.models.quant.resolve_backend('auto', 'cpu')
assert Block.attempts == [], Block.attempts
assert not any(m.startswith('transformer_engine') for m in sys.modules)
print('ok')
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
