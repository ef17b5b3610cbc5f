"""User-facing errors: the CLI prints their message as one line and exits non-zero."""

from solrl_core.redaction import redact_text


class SolrlError(Exception):
    """An error the user can fix; its message says what to fix, in one line. A URL it quotes loses its credentials
    (solrl_core/redaction.py): the message reaches terminals, CI logs and Prefect's run states."""

    def __init__(self, *args):
        super().__init__(*(redact_text(a) if isinstance(a, str) else a for a in args))


class ConfigError(SolrlError):
    """A configuration file or override is invalid."""


class MissingInputError(SolrlError):
    """A stage was asked to run before the stage that produces its inputs."""


class RunDirLockedError(SolrlError):
    """Another process holds the run directory."""


class DamagedArtifactError(SolrlError):
    """A file of the run directory is missing, truncated or altered since its producer recorded it."""
