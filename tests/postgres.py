"""A throwaway PostgreSQL server for the tests, from the Debian ``postgresql`` package."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.ports import free_port


def find_postgres_bin() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``, on PATH or where Debian puts them."""
    on_path = shutil.which("initdb")
    if on_path:
        return Path(os.path.realpath(on_path)).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


class PostgresServer:
    """initdb + pg_ctl in a temporary folder; trust auth on 127.0.0.1 only."""

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="factory-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        # PostgreSQL refuses to run as root: run it as the package's `postgres` user then.
        self.prefix: list[str] = []
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
            self.prefix = ["runuser", "-u", "postgres", "--"]

    def _run(self, *args: str) -> None:
        subprocess.run([*self.prefix, *args], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bindir / "pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.root / "log"),
            "-w",
            "start",
        )

    def stop(self) -> None:
        try:
            self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def add_password_role(self, role: str, password: str) -> None:
        """A superuser role that must log in over TCP with ``password`` (SCRAM), unlike ``postgres``."""
        import psycopg2

        hba = self.data / "pg_hba.conf"
        rule = f"host all {role} 127.0.0.1/32 scram-sha-256\n"
        hba.write_text(rule + hba.read_text())  # first matching line wins
        with contextlib.closing(psycopg2.connect(self.url.replace("+psycopg2", ""))) as connection:
            connection.autocommit = True
            with connection.cursor() as cursor:
                cursor.execute(f"CREATE ROLE {role} LOGIN SUPERUSER PASSWORD %s", (password,))
                cursor.execute("SELECT pg_reload_conf()")
