"""Serving the app as `factory ui` does: uvicorn in this process, with two things set for a team.

- A request too malformed to reach the app (a broken request line or header) is answered by
  uvicorn itself, with a 400 of its own. uvicorn's HTTP/1.1 protocol (h11) writes that answer
  without the headers the app sets, so ours adds the Content-Security-Policy the app's answers carry:
  every response the server sends has it.
- Arrow's memory pool is jemalloc, not the default mimalloc: mimalloc keeps what each thread freed,
  and the app reads Parquet on many threads at once, so the server's memory grew with each new
  read; jemalloc hands freed memory back (docs/benchmarks.md, "The UI under load").
- Once listening, it prints the URL it listens on to stdout, ``-q`` or not: uvicorn's own line
  goes to the log, which ``-q`` silences, and with ``--port 0`` nothing else names the port.
"""

from __future__ import annotations

import contextlib
import socket

import h11
import pyarrow as pa
import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.h11_impl import H11Protocol

from lakehouse.errors import InputError
from ui.app import CSP


class _Protocol(H11Protocol):
    """uvicorn's h11 protocol, whose own 400 answer carries the UI's Content-Security-Policy."""

    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-security-policy", CSP.encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=msg.encode("ascii")),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event))
        self.transport.close()


def check_can_listen(host: str, port: int) -> None:
    """Refuse (``InputError``) an address this process cannot listen on, before the app is built:
    uvicorn would say so only in its log, and exit 3."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as exc:
        raise InputError(f"--host {host}: {exc.strerror}") from None
    with socket.socket(family, kind) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as exc:
            raise InputError(
                f"cannot listen on {host}:{port}: {exc.strerror}; choose another --port (0 picks a free one) or --host"
            ) from None


class _Server(uvicorn.Server):
    """uvicorn's server, which prints the URL it listens on once it does."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            # The bound socket's port, not the one asked for: --port 0 asks the system for any.
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"listening on {_url(self.config.host, port)}", flush=True)


def _url(host: str, port: int) -> str:
    """``http://host:port``, an IPv6 address in brackets (as uvicorn writes it)."""
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(app: FastAPI, host: str, port: int, log_level: str) -> None:
    """Serve ``app`` until interrupted."""
    with contextlib.suppress(NotImplementedError):  # a pyarrow built without jemalloc: its default pool
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, http=_Protocol))
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C stops the server: a normal end, as uvicorn.run has it
        server.run()
    if not server.started:  # as uvicorn.run exits when it could not start (the port taken meanwhile)
        raise SystemExit(3)
