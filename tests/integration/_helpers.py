"""Small helpers the integration tests share: loopback ports, docker calls, the test bed's cpu image."""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
REF_FILE = ROOT / ".cache" / "vllm-image-ref"


def free_port(ports: Iterable[int]) -> int:
    """The first port of ``ports`` nobody listens on at 127.0.0.1 (each test area owns its own range)."""
    tried = list(ports)
    for port in tried:
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {tried[0]}-{tried[-1]}")


def docker(*args: str, check: bool = True) -> str:
    """Run the docker CLI; stdout stripped. ``check`` turns a non-zero exit into an AssertionError."""
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def image_id(ref: str) -> str:
    """The local image id of ``ref``, or "" when it is not there."""
    return docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)


def cpu_image_ref() -> str:
    """The cpu image built once per run by scripts/testbed/50-vllm-image.sh (built here only if missing)."""
    if not REF_FILE.exists():
        result = subprocess.run(["bash", "scripts/testbed/50-vllm-image.sh"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    ref = REF_FILE.read_text().strip()
    assert image_id(ref), f"{ref} is not built"
    return ref


def image_playbook(*extra: str) -> tuple[str, dict[str, int]]:
    """playbooks/image.yml on the local inventory (cpu variant, same inputs as 50-vllm-image.sh).

    Returns the output and the localhost recap counts; a failed run fails the test with the output's tail.
    """
    wheelhouse = ROOT / ".cache" / "vllm-image" / "wheelhouse"
    cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "playbooks/image.yml", "-i", "inventories/local/hosts.yml",
           "-e", "vllm_image_variant=cpu", "-e", f"vllm_image_wheelhouse_dir={wheelhouse}", *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    recap = re.search(r"^localhost\s*:\s*(.*)$", out, flags=re.M)
    assert recap, out[-2000:]
    return out, {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}


def completion(port: int, model: str, *, api_key: str | None = None, max_tokens: int = 8, timeout: float = 120,
               ignore_eos: bool = False) -> dict[str, Any]:
    """POST /v1/completions to 127.0.0.1:``port``; the decoded answer (an HTTP error fails the test)."""
    payload: dict[str, Any] = {"model": model, "prompt": "The fleet", "max_tokens": max_tokens, "temperature": 0}
    if ignore_eos:
        payload["ignore_eos"] = True
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/completions", json.dumps(payload), headers)
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    assert resp.status == 200, f"HTTP {resp.status}: {data[:300]!r}"
    answer: dict[str, Any] = json.loads(data)
    return answer


def recap(out: str) -> dict[str, dict[str, int]]:
    """Per host, the counts of an ansible-playbook output's PLAY RECAP (ok, changed, failed, ...)."""
    counts: dict[str, dict[str, int]] = {}
    for line in out.split("PLAY RECAP")[-1].splitlines():
        match = re.match(r"^(\S+)\s+:\s+(.*)$", line.strip())
        if match:
            counts[match.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", match.group(2))}
    return counts


def record_figure(path: Path, label: str, name: str, value: Any) -> None:
    """Add one measured figure to a lab's figures file (JSON) and print it with the lab's label."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = value
    path.write_text(json.dumps(data, indent=2) + "\n")
    print(f"\n[{label}] {name}: {json.dumps(value)}")


@contextmanager
def running_prometheus(workdir: Path, port: int, ready_s: float = 60) -> Iterator[str]:
    """A real Prometheus (the test bed's) on 127.0.0.1:``port`` with ``workdir``/prometheus.yml, ready; yields its
    URL, stops it."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: run scripts/testbed/60-prometheus.sh (make testbed)")
    log = (workdir / "prometheus.log").open("wb")
    process = subprocess.Popen([binary, f"--config.file={workdir / 'prometheus.yml'}",
                                f"--storage.tsdb.path={workdir / 'data'}", f"--web.listen-address=127.0.0.1:{port}"],
                               stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("Prometheus did not become ready:\n" + (workdir / "prometheus.log").read_text())
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()
