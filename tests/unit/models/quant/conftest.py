"""test_te_backend.py runs Transformer Engine on a real GPU: collected only where transformer-engine imports (a GPU
machine with the `gpu` extra), so that a CPU suite has nothing skipped; pytest's header says when it is left out.
The TE wiring is tested without TE, against a fake, in test_quant_backends.py."""

from __future__ import annotations


def _transformer_engine_problem() -> str | None:
    try:
        import transformer_engine.pytorch  # noqa: F401
    except Exception as exc:  # noqa: BLE001 - ModuleNotFoundError on CPU; OSError/RuntimeError on a broken CUDA setup
        return type(exc).__name__
    return None


_PROBLEM = _transformer_engine_problem()
collect_ignore = ["test_te_backend.py"] if _PROBLEM else []


def pytest_report_header(config):
    if _PROBLEM:
        return (f"tests/unit/models/quant/test_te_backend.py not collected: transformer-engine is not importable here "
                f"({_PROBLEM}); it needs CUDA and the gpu extra")
    return None
