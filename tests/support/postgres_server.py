"""A real PostgreSQL server of the tests' own: Debian's binaries, a temporary
folder, a free loopback port, password login; stopped and removed afterwards.

    from postgres_server import PostgresServer, postgres  # `postgres` is a pytest fixture

    with PostgresServer() as server:
        url = server.database("gradebook")   # postgresql://course:...@127.0.0.1:PORT/gradebook

As root (CI, these machines) the server runs as the `postgres` user, which owns
the data folder: PostgreSQL refuses to run as root. The folder is made under
the system's temporary folder (not pytest's, which only root may enter).
Nothing is left running: `stop()` runs in a finalizer, and a server whose
start failed is stopped before the error is raised.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

USER = "course"


def binaries() -> Path | None:
    """The newest /usr/lib/postgresql/N/bin holding initdb and pg_ctl (Debian's `postgresql`)."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb") if Path(p).with_name("pg_ctl").exists()]
    found.sort(key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)
    return found[-1] if found else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    def __init__(self, port: int | None = None):
        self.bin = binaries()
        if self.bin is None:
            raise RuntimeError("PostgreSQL's server binaries are missing (/usr/lib/postgresql/*/bin/initdb): "
                               "install Debian's postgresql (scripts/system-packages.sh does)")
        self.port = port or free_port()
        self.password = secrets.token_hex(12)
        self.folder: Path | None = None
        self.running = False
        self.as_postgres = os.geteuid() == 0

    # -- running the server's commands as its owner ----------------------------
    def _run(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        env = dict(os.environ, LC_ALL="C", LANG="C")
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env,
                              cwd=self.folder or "/")
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done

    @property
    def data(self) -> Path:
        return self.folder / "data"

    def start(self) -> "PostgresServer":
        self.folder = Path(tempfile.mkdtemp(prefix="course-postgres-"))
        try:
            secret = self.folder / "password"
            secret.write_text(self.password + "\n")
            if self.as_postgres:
                owner = pwd.getpwnam("postgres")
                os.chown(self.folder, owner.pw_uid, owner.pw_gid)
                os.chown(secret, owner.pw_uid, owner.pw_gid)
            secret.chmod(0o600)
            self._run("initdb", "-D", str(self.data), "-U", USER, f"--pwfile={secret}", "--auth=scram-sha-256",
                      "-E", "UTF8", "--no-locale", "--no-sync")
            secret.unlink()
            options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.folder} "
                       "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=50")
            self._run("pg_ctl", "-D", str(self.data), "-l", str(self.folder / "server.log"), "-o", options,
                      "-w", "-t", "60", "start")
            self.running = True
            self._wait()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, seconds: float = 30) -> None:
        import psycopg
        deadline = time.monotonic() + seconds
        while True:
            try:
                psycopg.connect(self.dsn("postgres"), connect_timeout=3).close()
                return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise

    def stop(self) -> None:
        if self.running:
            try:
                self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "60", "stop")
            except RuntimeError:
                self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
            self.running = False
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> "PostgresServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what a client needs -----------------------------------------------------
    def dsn(self, database: str) -> str:
        return f"host=127.0.0.1 port={self.port} user={USER} password={self.password} dbname={database}"

    def url(self, database: str) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{database}"

    def database(self, name: str) -> str:
        """A new, empty database `name`; its SQLAlchemy URL."""
        import psycopg
        with psycopg.connect(self.dsn("postgres"), connect_timeout=10, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)


@pytest.fixture(scope="module")
def postgres():
    """A running PostgreSQL server for the module's tests; stopped and removed after them."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.stop()
