"""Which binds count as loopback, and what a server beyond it without authentication does: refuse in one line, or
with --insecure start with a warning (solrl_core/exposure.py)."""

from __future__ import annotations

import pytest

from solrl_core.errors import SolrlError
from solrl_core.exposure import check_exposure, is_loopback


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                            ("localhost", True), ("0.0.0.0", False), ("::", False),
                                            ("10.1.2.3", False), ("node7.cluster", False)])
def test_loopback_binds(host, loopback):
    assert is_loopback(host) is loopback


def test_beyond_loopback_needs_authentication_or_insecure():
    args = ("10.1.2.3", "Prefect server", "run any deployment")
    assert check_exposure("127.0.0.1", *args[1:], authenticated=False, how="set X") is None
    assert check_exposure(*args, authenticated=True, how="set X") is None
    with pytest.raises(SolrlError, match=r"^the Prefect server would listen on 10.1.2.3, beyond this machine, without "
                                         r"authentication: anyone who reaches the port could run any deployment; "
                                         r"set X, or bind 127.0.0.1, or pass --insecure"):
        check_exposure(*args, authenticated=False, how="set X")
    warning = check_exposure(*args, authenticated=False, how="set X", insecure=True)
    assert warning.startswith("warning: the Prefect server listens on 10.1.2.3 without authentication (--insecure)")
