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
