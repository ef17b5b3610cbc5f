"""Credentials of a redacted URL found again: a run directory records its tracking store redacted
(solrl_core/redaction.py), and a later command needs the URL it stands for."""

from __future__ import annotations

import os

from solrl_core.errors import SolrlError
from solrl_core.redaction import MASK, redact

# A credential-bearing URL seen in this process (a config's tracking.uri, MLFLOW_TRACKING_URI), by its redacted form:
# what a run directory records (run.json, config.yaml) is redacted, and `with_credentials` finds the URL it stands for.
_KNOWN: dict[str, str] = {}
# where a later command finds the credentials of a recorded, redacted URL
CREDENTIAL_SOURCES = ("MLFLOW_TRACKING_URI",)


def remember(url: str | None) -> str | None:
    """Note `url` (when it carries credentials) so that its redacted form can be used again in this process."""
    if url and redact(url) != url:
        _KNOWN[redact(url)] = url
    return url


def with_credentials(url: str) -> str:
    """The URL a redacted `url` (as a run directory records it) stands for: one this process has seen (`remember`),
    or an environment variable of CREDENTIAL_SOURCES whose redacted form it is; `url` itself when it holds no mask.
    A SolrlError saying where to give the credentials otherwise."""
    if MASK not in url:
        return url
    if url in _KNOWN:
        return _KNOWN[url]
    for name in CREDENTIAL_SOURCES:
        value = os.environ.get(name)
        if value and redact(value) == url:
            return remember(value)
    raise SolrlError(f"{url}: the run directory records this store without its credentials; export "
                     f"{CREDENTIAL_SOURCES[0]}=<the same URI with them>, or give the config that has them "
                     "(solrl train CONFIG --run-dir ...)")
