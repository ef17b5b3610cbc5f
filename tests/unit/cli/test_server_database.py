"""`make server`'s Prefect database is its own (a file of the checkout, PREFECT_DB, or a database URL of the
environment), not the ~/.prefect/prefect.db of Prefect's and solrl's temporary servers; the servers themselves:
tests/e2e/test_servers.py."""

from __future__ import annotations



from solrl.flows.prefect_server import temporary_server_env
from solrl.flows.servers import DATABASE_URL, DATABASE_URL_SETTINGS, prefect_server_env


def _database(monkeypatch, env: dict[str, str]) -> str:
    """The database URL Prefect's settings resolve to in the environment `env`."""
    from prefect.settings import Settings

    for name in (*DATABASE_URL_SETTINGS, "PREFECT_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    url = Settings().server.database.connection_url
    return url.get_secret_value() if hasattr(url, "get_secret_value") else url


def test_make_servers_database_is_its_own_not_the_temporary_servers(monkeypatch, tmp_path):
    home = {"PREFECT_HOME": str(tmp_path / "home")}
    database = tmp_path / "checkout" / ".prefect" / "prefect.db"
    served = prefect_server_env(4310, database, environ={})
    assert served[DATABASE_URL] == f"sqlite+aiosqlite:///{database}"
    assert _database(monkeypatch, {**home, **served}) == f"sqlite+aiosqlite:///{database}"
    for name in DATABASE_URL_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PREFECT_HOME", home["PREFECT_HOME"])
    temporary = _database(monkeypatch, temporary_server_env())  # what solrl's temporary server runs with
    assert temporary == f"sqlite+aiosqlite:///{tmp_path / 'home' / 'prefect.db'}" != served[DATABASE_URL]
    # told otherwise: a database URL in the environment wins; no --database: Prefect's default
    for name in DATABASE_URL_SETTINGS:
        assert DATABASE_URL not in prefect_server_env(4310, database, environ={name: "postgresql+asyncpg://db/p"})
    assert DATABASE_URL not in prefect_server_env(4310)


def test_a_postgresql_database_is_given_to_prefect_through_asyncpg(monkeypatch, tmp_path):
    from solrl.flows.server_database import is_database_url, sync_database_url

    url = "postgresql://solrl@127.0.0.1:5432/prefect"
    served = prefect_server_env(4310, url, environ={})
    assert served[DATABASE_URL] == "postgresql+asyncpg://solrl@127.0.0.1:5432/prefect"
    assert _database(monkeypatch, {"PREFECT_HOME": str(tmp_path), **served}) == served[DATABASE_URL]
    assert is_database_url(url) and is_database_url("postgresql+psycopg2://h/db") and not is_database_url("/x/p.db")
    assert sync_database_url("postgresql+asyncpg://u@h:1/db") == "postgresql://u@h:1/db"
