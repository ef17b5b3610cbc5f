"""The database of a `make server` server: a SQLite file, or a PostgreSQL database (`SERVER_DATABASE=postgresql://...`,
the store Prefect and MLflow recommend for a team: concurrent writers from several workers, no SQLite busy errors).

`make server SERVER_DATABASE=postgresql://USER@HOST:PORT` gives Prefect the database `prefect` and MLflow the database
`mlflow` of that server (both created beforehand: docs/operations.md). The password comes from PGPASSWORD or
~/.pgpass (libpq's and asyncpg's own sources), or from the URL; errors print the URL redacted. Prefect's server talks
to PostgreSQL through asyncpg (a Prefect dependency), MLflow's through psycopg2 (the `solrl[postgres]` extra).
"""

from __future__ import annotations

from urllib.parse import urlparse

from solrl_core.errors import SolrlError
from solrl_core.excerpts import one_line
from solrl_core.redaction import redact

POSTGRES_SCHEMES = ("postgresql", "postgres")
PREFECT_DRIVER = "postgresql+asyncpg"  # the async driver Prefect's server needs
CONNECT_TIMEOUT_S = 10


def is_database_url(value: str) -> bool:
    """A PostgreSQL URL (postgresql://, postgresql+DRIVER://) rather than a SQLite file."""
    return urlparse(str(value)).scheme.split("+")[0] in POSTGRES_SCHEMES


def prefect_database_url(url: str) -> str:
    """`url` as Prefect's server connects to it (asyncpg)."""
    return PREFECT_DRIVER + url[url.index("://"):]


def sync_database_url(url: str) -> str:
    """`url` with the default synchronous driver (psycopg2), as MLflow and the check below connect."""
    return "postgresql" + url[url.index("://"):]


def check_database(url: str, server: str) -> None:
    """SolrlError in one line, naming `server`, the URL (redacted) and what to do, when the PostgreSQL database at
    `url` does not answer (no server there, a wrong password, a database not created yet)."""
    from sqlalchemy import create_engine, text

    from solrl.flows.service_checks import check_database_driver

    plain = sync_database_url(url)
    check_database_driver(plain, f"{server}'s database")
    from sqlalchemy.engine import make_url

    engine = create_engine(plain, connect_args={"connect_timeout": CONNECT_TIMEOUT_S})
    try:
        with engine.connect() as connection:
            connection.execute(text("select 1"))
    except Exception as exc:  # noqa: BLE001 - whatever the driver raises, it is one line for the user
        cause = one_line(str(getattr(exc, "orig", exc)).strip().removeprefix("FATAL:").strip())
        name = make_url(plain).database
        hint = (f"; create it: createdb {_createdb_options(plain)}{name}" if "does not exist" in cause
                else "; is PostgreSQL running there, and PGPASSWORD or ~/.pgpass set?")
        raise SolrlError(f"{server}'s database {redact(url)}: {cause}{hint}") from None
    finally:
        engine.dispose()


def _createdb_options(url: str) -> str:
    from sqlalchemy.engine import make_url

    parts = make_url(url)
    options = [f"-h {parts.host}"] if parts.host else []
    options += [f"-p {parts.port}"] if parts.port else []
    options += [f"-U {parts.username}"] if parts.username else []
    return " ".join(options) + (" " if options else "")


def require_database(url: str, server: str) -> None:
    """`check_database`, as a server about to start says it: the one-line error and exit 2."""
    import sys

    from solrl.flows.user_errors import report

    try:
        check_database(url, server)
    except SolrlError as exc:
        sys.exit(report(exc))
