"""Every response the UI sends carries its Content-Security-Policy: pages, every error page, and the
400 that `factory ui`'s server writes itself for a request too malformed to reach the app. And HEAD
is answered as GET, without the body."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest
from starlette.testclient import TestClient

import ui.app
from tests.conftest import REPO
from tests.corpora import make_table
from tests.ui.served import served_ui
from ui.app import CSP, create_app
from ui.sources import Sources


@pytest.fixture
def client(catalog, factory_home):
    make_table(catalog, "raw.web", 5, files=1)
    return TestClient(create_app(Sources(None, [factory_home])), raise_server_exceptions=False)


@pytest.mark.parametrize(
    ("method", "url", "status"),
    [
        ("GET", "/", 200),
        ("GET", "/tables/raw.web", 200),
        ("GET", "/no/such/page", 404),  # no route
        ("GET", "/tables/raw.nothing", 404),  # a FactoryError: no such table
        ("GET", "/tables/bad..name", 400),  # a FactoryError: a malformed name
        ("GET", "/tables/raw.web/snapshots/main/documents?page_no=abc", 400),  # a validation error
        ("POST", "/", 405),  # an HTTPException of Starlette's own
    ],
)
def test_every_page_and_error_page_carries_the_policy(client, method, url, status):
    response = client.request(method, url)
    assert response.status_code == status
    assert response.headers["content-security-policy"] == CSP


@pytest.mark.parametrize(
    ("method", "url", "allow"),
    [
        ("POST", "/", "GET, HEAD"),
        ("DELETE", "/runs/x/checkpoints/3", "GET, HEAD"),
        # Two routes answer the path: Starlette's own 405 named only the first one's methods.
        ("PUT", "/playground", "GET, HEAD, POST"),
        ("DELETE", "/ratings", "GET, HEAD, POST"),
    ],
)
def test_a_405_names_the_methods_its_path_answers(client, method, url, allow):
    """RFC 9110: a 405 response carries an Allow header."""
    response = client.request(method, url)
    assert response.status_code == 405 and response.headers.get("allow") == allow, response.headers
    assert response.headers["content-security-policy"] == CSP


def test_an_internal_error_page_carries_the_policy(client, monkeypatch):
    def broken(_catalog):
        raise RuntimeError("a bug")

    monkeypatch.setattr(ui.app, "table_rows", broken)
    response = client.get("/")
    assert response.status_code == 500 and "RuntimeError" in response.text
    assert response.headers["content-security-policy"] == CSP


@pytest.mark.engine
def test_the_servers_own_400_for_a_malformed_request_carries_the_policy(catalog, factory_home):
    make_table(catalog, "raw.web", 5, files=1)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "factory_cli.main", "ui", "--port", str(port), "--quiet"],
        cwd=REPO,
        env=os.environ.copy(),
        stderr=subprocess.PIPE,
    )
    try:
        for malformed in (b"GET /x y z\r\n\r\n", b"GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n"):
            status, headers, _ = _ask(port, malformed)
            assert status.startswith(b"HTTP/1.1 400"), status
            assert headers.get(b"content-security-policy") == CSP.encode()
        status, headers, _ = _ask(port, b"GET /tables/bad..name HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 400") and headers.get(b"content-security-policy") == CSP.encode()
    finally:
        server.terminate()
        server.wait(timeout=30)


@pytest.mark.engine
def test_head_is_answered_as_get_without_the_body(catalog, factory_home):
    # A load balancer's health check and `curl -I` send HEAD; FastAPI's routes answered it with a 405.
    make_table(catalog, "raw.web", 5, files=1)
    pages = ["/", "/tables/raw.web", "/tables/raw.web/snapshots/main/documents", "/decisions", "/samples"]
    with served_ui() as url:
        port = urlsplit(url).port
        for path, code in [*((page, b"200") for page in pages), ("/tables/raw.nothing", b"404")]:
            _, _, get_body = _ask(port, _request("GET", path))
            status, headers, body = _ask(port, _request("HEAD", path))
            assert status.split(b" ")[1] == code, (path, status)
            assert body == b"" and headers[b"content-length"] == str(len(get_body)).encode(), path
            assert headers[b"content-security-policy"] == CSP.encode()


def _request(method: str, path: str) -> bytes:
    return f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()


def _ask(port: int, request: bytes) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """The status line, headers and body the server answers ``request`` with, sent as raw bytes
    (every request here ends with the server closing the connection)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            connection = socket.create_connection(("127.0.0.1", port), timeout=10)
            break
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    with connection:
        connection.sendall(request)
        answer = b""
        while chunk := connection.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status, *lines = head.split(b"\r\n")
    return status, {k.strip().lower(): v.strip() for k, v in (line.split(b":", 1) for line in lines)}, body
