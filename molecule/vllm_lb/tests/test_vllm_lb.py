"""vllm_lb verifier on a systemd host: the vllm-fleet-lb unit runs HAProxy, health checks mark a live and a dead
backend, traffic reaches the live one, the admin socket drains and restores a server (what vllm_serve does during a
rollout), a changed configuration reloads without restarting the master, and --check changes nothing."""

from __future__ import annotations

import csv
import io
import json
import shlex
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import PlaybookRun, run_playbook

testinfra_hosts = ["ansible://vf-prov-vllm_lb"]

FRONT = "http://127.0.0.1:18390"
STATS = "http://127.0.0.1:18391/stats;csv"
CONFIG = "/etc/vllm-fleet/lb/haproxy.cfg"
SOCKET = "/run/vllm-fleet-lb/admin.sock"


class _Replica(BaseHTTPRequestHandler):
    """A stand-in for a vLLM replica: /health 200, every other path answers with its name."""

    def do_GET(self) -> None:
        body = b"" if self.path == "/health" else b"replica-a"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def replica_a() -> Iterator[None]:
    server = ThreadingHTTPServer(("127.0.0.1", 18392), _Replica)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield
    server.shutdown()


def _status() -> dict[str, str]:
    with urllib.request.urlopen(STATS, timeout=5) as response:
        rows = csv.DictReader(io.StringIO(response.read().decode().lstrip("# ")))
        return {row["svname"]: row["status"] for row in rows if row["pxname"] == "vllm"}


def _wait(server: str, prefix: str, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while not (status := _status().get(server, "")).startswith(prefix) and time.monotonic() < deadline:
        time.sleep(0.5)
    return status


def _main_pid(host) -> str:  # type: ignore[no-untyped-def]
    return str(host.run("systemctl show --property MainPID --value vllm-fleet-lb").stdout.strip())


def _admin(host, command: str) -> str:  # type: ignore[no-untyped-def]
    """One command on HAProxy's admin socket, from inside the container (python3 is on every managed host)."""
    script = (
        "import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
        "s.sendall(sys.argv[2].encode() + b'\\n'); print(s.recv(65536).decode())"
    )
    result = host.run(f"python3 -c {shlex.quote(script)} {SOCKET} {shlex.quote(command)}")
    assert result.rc == 0, result.stderr
    return str(result.stdout)


def test_the_unit_runs_haproxy(host) -> None:  # type: ignore[no-untyped-def]
    service = host.service("vllm-fleet-lb")
    assert service.is_running and service.is_enabled
    assert host.file(f"/proc/{_main_pid(host)}/comm").content_string.strip() == "haproxy"
    assert host.run(f"haproxy -c -q -f {CONFIG}").rc == 0
    assert host.socket("tcp://127.0.0.1:18390").is_listening
    assert not host.socket("tcp://0.0.0.0:18390").is_listening


def test_health_checks_and_traffic(replica_a: None) -> None:
    assert _wait("replica-a", "UP").startswith("UP"), _status()
    assert _wait("replica-b", "DOWN").startswith("DOWN"), _status()
    for _request in range(5):  # every request goes to the live server
        with urllib.request.urlopen(f"{FRONT}/v1/models", timeout=10) as response:
            assert response.read() == b"replica-a"


def test_the_admin_socket_drains_and_restores(host, replica_a: None) -> None:  # type: ignore[no-untyped-def]
    assert _wait("replica-a", "UP").startswith("UP"), _status()
    _admin(host, "set server vllm/replica-a state drain")
    try:
        assert _status()["replica-a"].startswith("DRAIN"), _status()
    finally:
        _admin(host, "set server vllm/replica-a state ready")
    assert _wait("replica-a", "UP").startswith("UP"), _status()


def test_a_changed_configuration_reloads_without_a_restart(  # type: ignore[no-untyped-def]
    host, replica_a: None, converge_playbook: Path
) -> None:
    pid = _main_pid(host)
    changed = run_playbook(converge_playbook, "-e", json.dumps({"vllm_lb_check_rise": 3}))
    try:
        assert changed.rc == 0, changed.output[-3000:]
        assert sum(c["changed"] for c in changed.recap.values()) >= 1, changed.recap
        assert "rise 3" in host.file(CONFIG).content_string
        assert host.service("vllm-fleet-lb").is_running
        assert _main_pid(host) == pid, "HAProxy's master was restarted instead of reloaded"
        assert _wait("replica-a", "UP").startswith("UP"), _status()
    finally:
        restored = run_playbook(converge_playbook)
    assert restored.rc == 0, restored.output[-3000:]
    assert "rise 2" in host.file(CONFIG).content_string


def test_check_mode_on_the_converged_host_changes_nothing(check_run: PlaybookRun) -> None:
    assert check_run.rc == 0, check_run.output[-3000:]
    assert all(c["changed"] == 0 for c in check_run.recap.values()), check_run.recap
