"""Model staging for real: playbooks/stage.yml on container hosts from an HTTP mirror on 127.0.0.1.

A real HTTP server (127.0.0.1, STAGE ports 18600-18699; Range requests honoured, every request logged) serves a
generated model - the project's tiny model (plugins/module_utils/tiny_model.py) plus a 4 MiB weights file of
seeded random bytes - and its manifest (sizes + sha256). Three container hosts (vf-stage-a/b/c, the project's
debootstrap image vllm-fleet/debian:bookworm, host network, Ansible's docker connection) stage it:

- hosts stage in batches of 2 (each printing its progress while it downloads): the first transfer of the
  weights is cut after 1 MiB, the first batch fails saying so and the third host is not started; the next run
  resumes the two with ``Range: bytes=1048576-`` (seen in the server's log), downloads the third whole, and
  verifies every sha256;
- a second run is ``changed=0``; ``--check --diff`` of a new revision shows the files and bytes it would
  download and writes nothing;
- a revision whose weights were corrupted on the mirror is refused (the symlink keeps the old revision);
- the fixed revision switches atomically, and ``vllm_fleet_model_keep=1`` prunes the old one;
- a fourth host whose model root is a 1 MiB tmpfs is refused by the fleet check before any host changes.

playbooks/stage.yml rather than site.yml: site.yml's other stages (image build, vLLM start) take minutes and are
proven by the fleet lab (tests/integration/deploy), where the stage play runs and has nothing to stage.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration._helpers import docker, free_port, recap
from tests.integration._mirror import Mirror, serving

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
# The project's tiny model, read from its file: the installed package maps plugin_utils, not module_utils.
_SPEC = importlib.util.spec_from_file_location("_vf_tiny_model", ROOT / "plugins" / "module_utils" / "tiny_model.py")
assert _SPEC is not None and _SPEC.loader is not None
_TINY = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_TINY)
build_tiny_model = _TINY.build_tiny_model
BIN = ROOT / ".venv" / "bin"
IMAGE = os.environ.get("VLLM_FLEET_BASE_IMAGE", "vllm-fleet/debian:bookworm")
HOSTS = ("vf-stage-a", "vf-stage-b", "vf-stage-c")
SMALL = "vf-stage-small"
WEIGHTS = 4 << 20
CUT = 1 << 20


def model_files(seed: int) -> dict[str, bytes]:
    files = {name: (text if isinstance(text, bytes) else str(text).encode()) for name, text in build_tiny_model().items()}
    files["weights.bin"] = random.Random(seed).randbytes(WEIGHTS)
    return files


def on_host(host: str, command: str) -> str:
    return docker("exec", host, "sh", "-c", command, check=False)


class Lab:
    def __init__(self, workdir: Path, port: int, mirror: Mirror) -> None:
        self.workdir, self.port, self.mirror = workdir, port, mirror
        self.seconds: list[float] = []

    def inventory(self, hosts: tuple[str, ...]) -> Path:
        path = self.workdir / f"hosts-{len(hosts)}.yml"
        host_vars: dict[str, Any] = {h: {"ansible_connection": "community.docker.docker",
                                         "ansible_python_interpreter": "/usr/bin/python3"} for h in hosts}
        inventory = {"all": {"children": {"vllm_servers": {"children": {"cpu_lane": {"hosts": host_vars}}}},
                             "vars": {"vllm_fleet_model": {"url": f"http://127.0.0.1:{self.port}/tiny"},
                                      "vllm_fleet_model_cache": str(self.workdir / "cache"),
                                      "vllm_fleet_stage_batch": 2}}}
        path.write_text(yaml.safe_dump(inventory))
        return path

    def run(self, *extra: str, hosts: tuple[str, ...] = HOSTS) -> tuple[int, str]:
        env = {**os.environ, "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1", "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
        start = time.monotonic()
        result = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(self.inventory(hosts)),
                                 str(ROOT / "playbooks" / "stage.yml"), *extra], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=600, check=False)
        self.seconds.append(time.monotonic() - start)
        return result.returncode, result.stdout + result.stderr


@pytest.fixture(scope="module")
def lab() -> Iterator[Lab]:
    if not docker("image", "inspect", "--format", "{{.Id}}", IMAGE, check=False):
        pytest.fail(f"{IMAGE} is not built: make testbed-base")
    workdir = Path(tempfile.mkdtemp(prefix="vf-stage-"))
    port = free_port(range(18600, 18700))
    with serving(Mirror("tiny"), port) as mirror:
        yield from _lab(workdir, port, mirror)


def _lab(workdir: Path, port: int, mirror: Mirror) -> Iterator[Lab]:
    for host in (*HOSTS, SMALL):
        docker("rm", "-f", host, check=False)
    for host in HOSTS:
        docker("run", "-d", "--name", host, "--network", "host", IMAGE, "sleep", "infinity")
    docker("run", "-d", "--name", SMALL, "--network", "host", "--tmpfs", "/srv/models:size=1m", IMAGE, "sleep", "infinity")
    try:
        yield Lab(workdir, port, mirror)
    finally:
        for host in (*HOSTS, SMALL):
            docker("rm", "-f", host, check=False)
        shutil.rmtree(workdir, ignore_errors=True)


def _current(host: str) -> str:
    return on_host(host, "readlink /srv/models/tiny")


def test_stage_resume_verify_idempotent_check_corrupt_prune_disk(lab: Lab) -> None:
    r1 = model_files(1)
    total = sum(len(d) for d in r1.values())
    lab.mirror.publish("r1", r1)

    # 1. Interrupted: every host's first transfer of the weights stops after 1 MiB.
    lab.mirror.cut = {"/tiny/weights.bin"}
    rc, out = lab.run()
    assert rc != 0, out[-3000:]
    assert "the transfer was interrupted after 1048576 of 4194304 bytes" in out, out[-3000:]
    assert all(_current(h) == "" for h in HOSTS), "nothing may be switched into place after an interrupted run"
    # Batches of 2 (vllm_fleet_stage_batch): the first batch failed, so the third host was never started.
    for host in HOSTS[:2]:
        size = on_host(host, "stat -c %s /srv/models/.revisions/tiny/r1/weights.bin.partial")
        assert size == str(CUT), (host, size)
    assert on_host(HOSTS[2], "ls -A /srv/models 2>/dev/null") == ""

    # 2. The next run resumes with a Range request and verifies.
    lab.mirror.cut = set()
    lab.mirror.log.clear()
    rc, out = lab.run()
    assert rc == 0, out[-4000:]
    # Batches of vllm_fleet_stage_batch=2 bound the hosts downloading at once: 3 hosts, 2 batches.
    assert out.count("PLAY [Stage | Put the model on the hosts") == 2, out[-3000:]
    ranges = [r for m, p, r in lab.mirror.log if p == "/tiny/weights.bin" and m == "GET"]
    assert sorted(ranges) == ["", f"bytes={CUT}-", f"bytes={CUT}-"], ranges
    assert out.count(f"{WEIGHTS - CUT} bytes downloaded of {total} ({CUT} resumed)") == 2, out
    assert out.count(f"{total} bytes downloaded of {total} (0 resumed)") == 1, out
    # Each host's progress while it ran (async job + watch loop), ending verified at the total.
    for host in HOSTS:
        assert f"ok: [{host}] => (item=tiny@r1: verified {total} of {total} bytes (100 %)" in out, out[-3000:]
    for host in HOSTS:
        assert _current(host) == ".revisions/tiny/r1"
        digest = on_host(host, "sha256sum /srv/models/tiny/weights.bin").split()[0]
        assert digest == hashlib.sha256(r1["weights.bin"]).hexdigest()
    first_seconds = lab.seconds[-1]

    # 3. A second run changes nothing; so does --check --diff of the same revision.
    rc, out = lab.run()
    assert rc == 0, out[-3000:]
    assert all(recap(out)[h]["changed"] == 0 for h in HOSTS), out[-3000:]
    rc, out = lab.run("--check", "--diff")
    assert rc == 0 and all(recap(out)[h]["changed"] == 0 for h in HOSTS), out[-3000:]

    # 4. A new revision: --check --diff says what would download and how many bytes, and writes nothing.
    r2 = model_files(2)
    r2["config.json"] = r1["config.json"]
    lab.mirror.publish("r2", r2)
    rc, out = lab.run("--check", "--diff")
    assert rc == 0, out[-3000:]
    assert all(recap(out)[h]["changed"] == 1 for h in HOSTS), out[-3000:]
    assert f"download weights.bin ({WEIGHTS} bytes)" in out and f"bytes of {sum(len(d) for d in r2.values())}" in out, out
    assert all(_current(h) == ".revisions/tiny/r1" for h in HOSTS)
    assert on_host(HOSTS[0], "ls /srv/models/.revisions/tiny") == "r1"

    # 5. The mirror serves corrupted weights for r2: refused, r1 stays in place.
    bad = bytearray(r2["weights.bin"])
    bad[12345] ^= 0xFF
    lab.mirror.publish("r2", r2, served={"weights.bin": bytes(bad)})
    rc, out = lab.run()
    assert rc != 0 and "weights.bin: refused, the bytes do not match the published checksum" in out, out[-3000:]
    assert all(_current(h) == ".revisions/tiny/r1" for h in HOSTS)

    # 6. Fixed: r2 switches into place; keeping one revision prunes r1.
    lab.mirror.publish("r2", r2)
    rc, out = lab.run("-e", "vllm_fleet_model_keep=1")
    assert rc == 0, out[-3000:]
    for host in HOSTS:
        assert _current(host) == ".revisions/tiny/r2"
        assert on_host(host, "ls /srv/models/.revisions/tiny") == "r2"

    # 7. A host whose model root cannot hold the checkpoint: the fleet is refused before any host changes.
    lab.mirror.publish("r3", model_files(3))
    rc, out = lab.run(hosts=(*HOSTS, SMALL))
    assert rc != 0, out[-3000:]
    assert re.search(rf"{SMALL}: tiny needs \d+ bytes at /srv/models .* are free: free space, or set "
                     "vllm_fleet_model_root", out), out[-3000:]
    assert all(_current(h) == ".revisions/tiny/r2" for h in HOSTS)
    assert on_host(SMALL, "ls -A /srv/models") == ""
    print(f"\n[stage] {len(HOSTS)} hosts x {total} bytes from 127.0.0.1:{lab.port}: resumed run {first_seconds:.1f} s "
          f"({CUT} bytes resumed on 2 hosts); runs: {', '.join(f'{s:.1f}' for s in lab.seconds)} s")
