"""Where a test lives and whether it is end to end (tests/conftest.py applies this at collection).

tests/unit/<area>/ mirrors the package and holds tests that start no process; tests/e2e/ holds every test that starts
processes or servers (all marked `e2e`); tests/lab/ the lab tooling's tests, of either kind. A test is e2e when it
lives under tests/e2e/, uses a fixture of E2E_FIXTURES (even indirectly), or is marked by hand; an e2e test anywhere
but tests/e2e/ and tests/lab/ is refused, naming the file to move it to.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
E2E_FOLDER = "e2e"
E2E_HOMES = frozenset({E2E_FOLDER, "lab"})  # the folders where an e2e test may live
# Fixtures that start a server or drive the CLI in subprocesses: every test using one (even indirectly) is e2e.
E2E_FIXTURES = frozenset({"session_env", "run_cli", "s3_server", "dask_cluster"})


def suite_folder(path: Path) -> str | None:
    """The first folder under tests/ of a test file (None for a file outside tests/, or at its top)."""
    try:
        parts = Path(path).resolve().relative_to(TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 else None


def mark_e2e_and_check_placement(items) -> None:
    """Mark the e2e tests of `items` (collected test items); raise pytest.UsageError naming each e2e test that lives
    outside tests/e2e/ and tests/lab/, and where to move it."""
    misplaced: dict[Path, list[str]] = {}
    for item in items:
        folder = suite_folder(item.path)
        if folder == E2E_FOLDER or E2E_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.e2e)
        if folder is not None and folder not in E2E_HOMES and item.get_closest_marker("e2e") is not None:
            misplaced.setdefault(Path(item.path).resolve().relative_to(TESTS.parent), []).append(item.name)
    if misplaced:
        raise pytest.UsageError("\n".join(
            f"{path}: {', '.join(names)} start processes or servers (marked e2e): move them to "
            f"tests/{E2E_FOLDER}/{path.name}" for path, names in sorted(misplaced.items())))


def heavy_files_first(items) -> None:
    """Order `items` (in place) file by file: the files holding an e2e or slow test first, then the others; within
    each, files with more tests first; a file's tests keep their order.

    `make test` hands xdist whole files (--dist loadfile) in this order (--no-loadscope-reorder). xdist's own order,
    by number of tests alone, left the files of one or two long e2e tests (a Prefect worker, a server, a killed run:
    minutes each) for the end, where one of them ran on a worker while the others had nothing left to do."""
    by_file: dict[str, list] = {}
    for item in items:
        by_file.setdefault(item.nodeid.split("::", 1)[0], []).append(item)

    def heavy(tests) -> bool:
        return any(t.get_closest_marker("e2e") is not None or t.get_closest_marker("slow") is not None for t in tests)

    files = sorted(by_file.values(), key=lambda tests: (not heavy(tests), -len(tests)))  # stable: ties keep their order
    items[:] = [item for tests in files for item in tests]
