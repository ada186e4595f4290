"""Role vllm_lb on its own (no vLLM): the lab's self-signed certificate path and the routing policies against three
small HTTP backends on 127.0.0.1, through the role as a playbook runs it (service manager ``process``).

- TLS with vllm_lb_tls_self_signed: community.crypto makes the key and the certificate; a client that trusts the
  certificate connects (name 127.0.0.1 verified), plain HTTP on the port gets no answer, a client that does not
  trust it is refused; the second run is changed=0 and --check --diff too (the key is kept, not made again);
- cache_aware: the requests of one shared system prompt all go to one backend, six prompts spread over the three;
  with one hot prompt sent by six clients at once the load guard (hash-balance-factor 125) spills it over;
- session: one X-Session-Id stays on one backend; a configuration change reloads HAProxy (the pid changes, every
  request under way completes).

Backends answer after 0.3 s, so concurrent requests overlap and the load guard has open requests to count.
"""

from __future__ import annotations

import collections
import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from .._helpers import recap

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv" / "bin"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Backend(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        time.sleep(0.3)
        body = self.server.name.encode()  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


class Rig:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port, self.stats = _free_port(), _free_port()
        self.servers = []
        self.backends = []
        for name in ("b1", "b2", "b3"):
            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Backend)
            server.name = name  # type: ignore[attr-defined]
            threading.Thread(target=server.serve_forever, daemon=True).start()
            self.servers.append(server)
            self.backends.append({"server": name, "address": "127.0.0.1", "port": server.server_address[1]})
        self.playbook = workdir / "lb.yml"
        self.playbook.write_text(yaml.safe_dump([{
            "name": "Balancer", "hosts": "localhost", "gather_facts": False,
            "roles": [{"role": "vllm_fleet.fleet.vllm_lb"}]}]))

    def vars(self, **extra: Any) -> dict[str, Any]:
        # The role installs HAProxy from Debian's packages when it is missing, as on a user's host.
        return {"vllm_lb_install": True, "vllm_lb_service_manager": "process", "vllm_lb_port": self.port,
                "vllm_lb_stats_port": self.stats, "vllm_lb_servers": self.backends,
                "vllm_lb_config_dir": str(self.workdir / "lb"), "vllm_lb_run_dir": str(self.workdir / "run"),
                "vllm_lb_socket": str(self.workdir / "run" / "admin.sock"), "vllm_lb_tls": True,
                "vllm_lb_tls_self_signed": True, "vllm_lb_check_interval_ms": 500,
                "ansible_python_interpreter": str(VENV / "python"), **extra}

    def play(self, *args: str, **extra: Any) -> subprocess.CompletedProcess[str]:
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   PATH=f"{VENV}:{os.environ['PATH']}")
        return subprocess.run([str(VENV / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                               "-e", json.dumps(self.vars(**extra)), str(self.playbook), *args],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.workdir / "lb" / "tls" / "fleet.pem"))

    def post(self, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=30, context=self.context())
        conn.request("POST", "/v1/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json", **(headers or {})})
        answer = conn.getresponse().read().decode()
        conn.close()
        return answer

    def pid(self) -> str:
        return (self.workdir / "run" / "haproxy.pid").read_text().split()[0]


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    workdir = Path("/tmp") / f"vf-lb-{os.getpid()}"
    workdir.mkdir()
    rig = Rig(workdir)
    yield rig
    pid = workdir / "run" / "haproxy.pid"
    if pid.exists():
        subprocess.run(["pkill", "--pidfile", str(pid), "haproxy"], check=False)
    for server in rig.servers:
        server.shutdown()
    shutil.rmtree(workdir, ignore_errors=True)


def _chat(system: str, user: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def _up(rig: Rig) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            csv = http.client.HTTPConnection("127.0.0.1", rig.stats, timeout=5)
            csv.request("GET", "/stats;csv")
            text = csv.getresponse().read().decode()
            if sum(line.split(",")[17].startswith("UP") for line in text.splitlines()
                   if line.split(",")[1] in ("b1", "b2", "b3")) == 3:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError("the backends never came UP")


def test_self_signed_tls_is_made_once_and_verified(rig: Rig) -> None:
    first = rig.play(vllm_lb_policy="cache_aware")
    assert first.returncode == 0, first.stdout[-4000:]
    _up(rig)
    key = rig.workdir / "lb" / "tls" / "fleet.pem.key"
    assert key.stat().st_mode & 0o777 == 0o600
    key_text = key.read_text()
    second = rig.play(vllm_lb_policy="cache_aware")
    check = rig.play("--check", "--diff", vllm_lb_policy="cache_aware")
    for run in (second, check):
        assert run.returncode == 0, run.stdout[-4000:]
        assert recap(run.stdout)["localhost"]["changed"] == 0, run.stdout[-4000:]
    assert key.read_text() == key_text
    assert rig.post(_chat("s", "u")) in ("b1", "b2", "b3")
    plain = http.client.HTTPConnection("127.0.0.1", rig.port, timeout=10)
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):
        plain.request("GET", "/v1/models")
        plain.getresponse()
    untrusted = http.client.HTTPSConnection("127.0.0.1", rig.port, timeout=10,
                                            context=ssl.create_default_context())
    with pytest.raises(ssl.SSLCertVerificationError):
        untrusted.request("GET", "/v1/models")


def test_cache_aware_keeps_a_prefix_on_one_backend_and_spills_a_hot_one(rig: Rig) -> None:
    prompts = [f"You are assistant number {n}. " * 12 for n in range(6)]
    seen: dict[int, collections.Counter[str]] = {n: collections.Counter() for n in range(6)}
    for n, system in enumerate(prompts):
        for user in range(5):
            seen[n][rig.post(_chat(system, f"question {user}"))] += 1
    assert all(len(counter) == 1 for counter in seen.values()), seen
    assert len({next(iter(c)) for c in seen.values()}) >= 2, seen  # six prefixes are not all on one backend
    # The hot prefix: six clients at once, 0.3 s each; factor 125 lets a backend hold at most 1.25 x the average.
    with ThreadPoolExecutor(6) as pool:
        hot = collections.Counter(pool.map(lambda i: rig.post(_chat(prompts[0], f"q{i}")), range(24)))
    assert len(hot) >= 2, hot
    print(f"\n[lb] cache_aware: 6 prefixes x 5 requests, each prefix on one backend {dict(seen)}; hot prefix, "
          f"6 clients: {dict(hot)}")


def test_session_affinity_and_a_reload_that_drops_nothing(rig: Rig) -> None:
    before = rig.pid()
    results: list[str] = []
    stop = threading.Event()

    def client() -> None:
        while not stop.is_set():
            try:
                results.append(rig.post(_chat("s", "u"), {"X-Session-Id": "abc"}))
            except Exception as exc:  # every client-visible error counts
                results.append(f"error {exc}")

    threads = [threading.Thread(target=client) for _i in range(3)]
    for thread in threads:
        thread.start()
    run = rig.play(vllm_lb_policy="session")
    time.sleep(2)
    stop.set()
    for thread in threads:
        thread.join()
    assert run.returncode == 0, run.stdout[-4000:]
    assert rig.pid() != before
    assert not [r for r in results if r.startswith("error")], [r for r in results if r.startswith("error")][:5]
    _up(rig)
    sessions = {rig.post(_chat("s", "u"), {"X-Session-Id": "abc"}) for _i in range(6)}
    assert len(sessions) == 1, sessions
    print(f"\n[lb] reload under load (3 clients): {len(results)} requests, 0 failed; session abc on {sessions}")
