"""Errors a resource limit caused, anywhere in their chain of causes, are named in one line with the limit
(solrl_core/resource_limits.py); the soft open-file limit is raised to the hard one."""

from __future__ import annotations

import errno
import resource

import pytest

import solrl_core.resource_limits as limits
from solrl.flows.user_errors import as_user_error


def _caused_by(cause: BaseException) -> RuntimeError:
    try:
        try:
            raise cause
        except BaseException as exc:
            raise RuntimeError("a task failed") from exc
    except RuntimeError as outer:
        return outer


def test_the_soft_open_file_limit_is_raised_to_the_hard_one():
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft, hard = before
    if hard != resource.RLIM_INFINITY and hard < 128:
        pytest.fail(f"this machine's hard open-file limit {hard} leaves no room for the check")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (100, hard))
        limits.raise_open_file_limit()
        raised = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        want = limits.OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, limits.OPEN_FILES_WANTED)
        assert raised == want
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


def test_too_many_open_files_is_named():
    error = as_user_error(_caused_by(OSError(errno.EMFILE, "Too many open files")))
    assert error is not None and "open files (ulimit -n)" in str(error) and "ulimit -n 4096" in str(error)


@pytest.mark.parametrize("cause", [OSError(errno.EFBIG, "File too large"), RuntimeError("disk I/O error"),
                                   RuntimeError("Server error '500 Internal Server Error' for url 'http://x/api'")])
def test_a_file_size_limit_is_named_only_when_one_is_set(monkeypatch, cause):
    exc = _caused_by(cause)
    monkeypatch.setattr(limits, "_soft", lambda which: 2 * 1024**2 if which == resource.RLIMIT_FSIZE else None)
    error = as_user_error(exc)
    assert error is not None and "file-size limit of 2.0 MiB (ulimit -f 2048" in str(error)
    monkeypatch.setattr(limits, "_soft", lambda which: None)  # no limit: not this cause (a 500 is the server's)
    assert limits.limit_error(exc) is None


@pytest.mark.parametrize("cause", [MemoryError(), ImportError("libtorch_cpu.so: failed to map segment from shared "
                                                              "object")])
def test_an_address_space_limit_is_named(monkeypatch, cause):
    monkeypatch.setattr(limits, "_soft", lambda which: 3 * 1024**3 if which == resource.RLIMIT_AS else None)
    error = as_user_error(_caused_by(cause))
    assert error is not None and "address-space limit of 3.0 GiB (ulimit -v 3145728)" in str(error)


def test_limits_high_enough_pass(monkeypatch):
    monkeypatch.setattr(limits, "_soft", lambda which: None)
    limits.check_resource_limits()
    monkeypatch.setattr(limits, "_soft", lambda which: {resource.RLIMIT_NOFILE: 16}.get(which))
    with pytest.raises(limits.SolrlError, match="at most 16 files"):
        limits.check_resource_limits()
