"""What ``pkb-ray serve`` settles before it serves: a port something listens on is refused (a
second service would share it through Serve's SO_REUSEPORT and get half the requests), and the
API docs need no CDN. No Ray is started here."""

import re
import socket
import subprocess
import sys
import time

import pytest
from fastapi.testclient import TestClient

from conftest import REPO
from pkb_ray.serve.main import port_in_use


def _listener(reuse_port: bool) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind (uvicorn, Serve's proxy)
    if reuse_port:  # as Ray Serve's proxy binds
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("reuse_port", [False, True])
def test_a_port_something_listens_on_is_in_use(reuse_port):
    with _listener(reuse_port) as sock:
        port = sock.getsockname()[1]
        assert port_in_use("127.0.0.1", port) and port_in_use("0.0.0.0", port) and port_in_use("localhost", port)
    assert port_in_use("127.0.0.1", port) is None  # closed: free again
    assert port_in_use("127.0.0.1", 0) is None


def test_a_connection_left_in_time_wait_does_not_make_a_port_busy():
    """A service that just stopped leaves its connections in TIME_WAIT: the port is free for the next."""
    with _listener(False) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server's side closes first: its port has a connection in TIME_WAIT
        client.close()
    time.sleep(0.1)
    assert port_in_use("127.0.0.1", port) is None


def test_the_command_refuses_a_busy_port_before_starting_anything(tmp_path):
    with _listener(True) as sock:
        port = sock.getsockname()[1]
        start = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "pkb_ray.cli", "serve", f"serve.port={port}",
                              f"serve.dir={tmp_path / 'service'}"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
    assert run.returncode == 2, run.stderr[-2000:]
    assert run.stderr.strip().splitlines()[-1] == (
        f"pkb-ray serve: serve.port: 127.0.0.1:{port} is in use (Address already in use): another service "
        f"(another pkb-ray serve?) listens there; stop it or choose another serve.port")
    assert time.monotonic() - start < 60 and not (tmp_path / "service").exists()  # no Ray, no service folder


def test_the_api_docs_pages_load_their_scripts_from_the_service():
    from pkb_ray.serve.app import api

    client = TestClient(api)
    for page in ("/docs", "/redoc"):
        reply = client.get(page)
        assert reply.status_code == 200 and "text/html" in reply.headers["content-type"]
        assets = re.findall(r'(?:src|href)="([^"]+)"', reply.text)
        assert len(assets) >= 2 and all(a.startswith("/docs-assets/") for a in assets), assets
        for asset in assets:
            got = client.get(asset)
            assert got.status_code == 200 and len(got.content) > 1000, asset
    assert client.get("/docs-assets/swagger-ui.css").headers["content-type"].startswith("text/css")
    assert client.get("/docs-assets/nothing.js").status_code == 404
    assert (REPO / "pyproject.toml").read_text().count("fastapi-offline") == 1  # a dependency, not a CDN
