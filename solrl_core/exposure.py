"""Servers beyond loopback: authenticated, or refused.

Every server solrl starts binds 127.0.0.1 unless told otherwise. Asked to bind another address (a team's servers on
one node, reached from the others), a server requires its library's own authentication (docs/security.md): the
Prefect server's basic auth (PREFECT_SERVER_API_AUTH_STRING, which its clients send as PREFECT_API_AUTH_STRING),
MLflow's basic-auth app (MLFLOW_TRACKING_USERNAME and MLFLOW_TRACKING_PASSWORD, which MLflow's clients send).
Without it the server refuses to start, in one line, unless `--insecure` says the address is already protected some
other way (a private network, a proxy); then it starts with a warning."""

from __future__ import annotations

import ipaddress

from solrl_core.errors import SolrlError

LOOPBACK_NAMES = ("localhost",)
WILDCARDS = ("0.0.0.0", "::", "[::]")  # every address of the machine


def local_address(host: str) -> str:
    """Where a process on this machine reaches a server bound to `host` (a wildcard bind: 127.0.0.1)."""
    return "127.0.0.1" if host in WILDCARDS else host


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps a server reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:  # a host name: it may resolve anywhere
        return False


def check_exposure(host: str, server: str, lets_a_caller: str, authenticated: bool, how: str,
                   insecure: bool = False) -> str | None:
    """None when `server` may bind `host` as asked: loopback, or `authenticated`; with `insecure`, the warning line to
    print; otherwise a SolrlError saying what anyone reaching the port could do and `how` to authenticate."""
    if is_loopback(host) or authenticated:
        return None
    if insecure:
        return (f"warning: the {server} listens on {host} without authentication (--insecure): anyone who reaches "
                f"the port can {lets_a_caller}")
    raise SolrlError(f"the {server} would listen on {host}, beyond this machine, without authentication: anyone who "
                     f"reaches the port could {lets_a_caller}; {how}, or bind 127.0.0.1, or pass --insecure when "
                     "the address is protected otherwise (docs/security.md)")
