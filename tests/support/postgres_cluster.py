"""A throw-away PostgreSQL server for a test: Debian's `postgresql` package's binaries (what docs/operations.md tells
a team to install), a cluster in a temporary folder on loopback with trust authentication, stopped and removed after.

PostgreSQL refuses to run as root: as root (a container, CI) the cluster belongs to the package's `postgres` user."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from cli_processes import free_port

USER = "solrl"
SEARCH = ("/usr/lib/postgresql/*/bin",)  # Debian's layout; also whatever `initdb` is on PATH


def server_binaries() -> Path:
    """The folder of `initdb` and `postgres`; AssertionError saying what to install when there is none."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    folders = sorted((p for pattern in SEARCH for p in Path("/").glob(pattern.lstrip("/"))),
                     key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    assert folders, "the PostgreSQL server tests need PostgreSQL's server binaries: apt install postgresql"
    return folders[-1]


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


@contextlib.contextmanager
def postgres_server(databases: tuple[str, ...] = ()) -> Iterator[str]:
    """Yields the server's URL without a database (postgresql://solrl@127.0.0.1:PORT), `databases` created."""
    binaries = server_binaries()
    folder = Path(tempfile.mkdtemp(prefix="solrl-pg-"))  # not under pytest's tmp: its parents are root's alone
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    subprocess.run(_as_owner([str(binaries / "initdb"), "-D", str(data), "-U", USER, "-A", "trust", "-E", "UTF8",
                              "--no-sync"]), check=True, capture_output=True)
    port = free_port()
    server = subprocess.Popen(_as_owner([str(binaries / "postgres"), "-D", str(data), "-p", str(port), "-k",
                                         str(folder), "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"]),
                              stdout=subprocess.DEVNULL, stderr=open(folder / "log", "w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while subprocess.run([str(binaries / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                             capture_output=True).returncode != 0:
            assert server.poll() is None and time.monotonic() < deadline, (folder / "log").read_text()
            time.sleep(0.2)
        for name in databases:
            subprocess.run([str(binaries / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", USER, name],
                           check=True, capture_output=True)
        yield f"postgresql://{USER}@127.0.0.1:{port}"
    finally:
        server.terminate()  # SIGTERM: PostgreSQL's smart shutdown, once the clients are gone
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        shutil.rmtree(folder, ignore_errors=True)
