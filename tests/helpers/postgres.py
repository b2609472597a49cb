"""A throwaway PostgreSQL server for the tests that need a real database: ``initdb`` and ``pg_ctl`` in a
temporary folder of its own (owned by the ``postgres`` user when the tests run as root, since the server
refuses to run as root), listening on a free local port, stopped and removed afterwards."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
"""Where ``initdb`` and ``pg_ctl`` are (Debian's PostgreSQL 15; ``PG_BIN`` overrides it)."""


def postgres_missing() -> str | None:
    """Why a throwaway server cannot start here, or ``None`` when it can."""
    if not (PG_BIN / "initdb").is_file():
        return f"no PostgreSQL server programs in {PG_BIN} (set PG_BIN)"
    try:
        import psycopg  # noqa: F401  (SQLAlchemy's driver for postgresql:// URLs)
    except ImportError:
        return "psycopg is not installed (the sweep extra: make install installs it)"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser to start the server as the postgres user"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """A running server for the ``with`` block: yields its SQLAlchemy URL (user ``postgres``, no password,
    database ``postgres``)."""
    folder = Path(tempfile.mkdtemp(prefix="nerf-lightning-pg-"))
    as_server_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
        as_server_user = ["runuser", "-u", "postgres", "--"]
    data, log = folder / "data", folder / "server.log"
    port = _free_port()
    try:
        subprocess.run([*as_server_user, str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust",
                        "-U", "postgres", "--no-sync"], check=True, capture_output=True)
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        subprocess.run([*as_server_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-l", str(log), "-w",
                        "-o", options, "start"], check=True, capture_output=True)
        try:
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([*as_server_user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w",
                            "stop"], capture_output=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
