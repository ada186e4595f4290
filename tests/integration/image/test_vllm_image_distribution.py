"""The vllm_image role's distribution modes, for real: push to a registry, load from a tarball.

- push: a real Docker Distribution 2.8 registry (Debian's docker-registry, scripts/testbed/55-registry.sh)
  runs as a plain process on 127.0.0.1 (IMAGE ports 18150-18199, storage and config in a temp dir). The
  image pushed carries the already-built cpu image's content-addressed tag (.cache/vllm-image-ref, never
  rebuilt here); by default it is a 329 MB stand-in to keep CI fast, VLLM_FLEET_IMAGE_PUSH_REAL=1 pushes the
  real ~4 GB cpu image (see push_image); the tag is checked through
  the registry HTTP API (/v2/<name>/tags/list and the manifest digest); after `docker rmi` of the
  registry-qualified tag the role pulls it back; the run after that changes nothing, also in check mode.
- load: to keep CI fast the image distributed is vllm-fleet/debian:bookworm (329 MB) tagged under a
  throw-away repository with the cpu image's content-addressed tag, so the role finds it "built". The role
  saves it to a tarball in a temp cache dir; after the tag is removed from the engine (this engine is both
  controller and host) the role loads it back; the next run changes nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
REF_FILE = ROOT / ".cache" / "vllm-image-ref"
WHEELHOUSE = ROOT / ".cache" / "vllm-image" / "wheelhouse"
REGISTRY_PORTS = range(18150, 18200)
SMALL_IMAGE = "vllm-fleet/debian:bookworm"


def _docker(*args: str, check: bool = True) -> str:
    result = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"docker {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout.strip()


def _image_id(ref: str) -> str:
    return _docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)


def _playbook(*extra: str) -> tuple[str, dict[str, int]]:
    """playbooks/image.yml on the local inventory (cpu variant, same inputs as 50-vllm-image.sh)."""
    cmd = [str(ROOT / ".venv/bin/ansible-playbook"), "playbooks/image.yml", "-i", "inventories/local/hosts.yml",
           "-e", "vllm_image_variant=cpu", "-e", f"vllm_image_wheelhouse_dir={WHEELHOUSE}", *extra]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    recap = re.search(r"^localhost\s*:\s*(.*)$", out, flags=re.M)
    assert recap, out[-2000:]
    return out, {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", recap.group(1))}


def _http(url: str, method: str = "GET") -> tuple[int, dict[str, str], str]:
    req = urllib.request.Request(url, method=method, headers={
        "Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode(errors="replace")


@pytest.fixture(scope="module")
def image_ref() -> str:
    """The cpu image built once per run by scripts/testbed/50-vllm-image.sh (built here only if missing)."""
    if not REF_FILE.exists():
        result = subprocess.run(["bash", "scripts/testbed/50-vllm-image.sh"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    ref = REF_FILE.read_text().strip()
    assert _image_id(ref), f"{ref} is not built"
    return ref


def _free_port() -> int:
    for port in REGISTRY_PORTS:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port in 18150-18199")


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Docker Distribution registry on 127.0.0.1:<port>; yields 'host:port'."""
    if shutil.which("docker-registry") is None:
        result = subprocess.run(["bash", "scripts/testbed/55-registry.sh"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    work = tmp_path_factory.mktemp("vf-img-registry")
    port = _free_port()
    (work / "config.yml").write_text(
        "version: 0.1\nlog: {level: warn}\n"
        f"storage:\n  filesystem: {{rootdirectory: {work / 'data'}}}\n  delete: {{enabled: true}}\n"
        f"http:\n  addr: 127.0.0.1:{port}\n")
    log = (work / "registry.log").open("w")
    proc = subprocess.Popen(["docker-registry", "serve", str(work / "config.yml")], stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, (work / "registry.log").read_text()
            try:
                if _http(f"http://127.0.0.1:{port}/v2/")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, "registry did not answer /v2/ in 30 s"
            time.sleep(0.3)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def push_image(image_ref: str) -> Iterator[str]:
    """The image the push test distributes. Default (CI): the 329 MB base image tagged under a throw-away
    repository with the cpu image's content-addressed tag — the role's code path is the same. With
    VLLM_FLEET_IMAGE_PUSH_REAL=1: the real ~4 GB cpu image itself (its first push to an empty registry took
    ~6 min of this test's 6.5 min on the shared 2-core test bed: the engine gzips every layer)."""
    if os.environ.get("VLLM_FLEET_IMAGE_PUSH_REAL") == "1":
        yield image_ref
        return
    ref = f"vf-img-push-{uuid.uuid4().hex[:8]}/vllm:{image_ref.rsplit(':', 1)[1]}"
    _docker("tag", SMALL_IMAGE, ref)
    try:
        yield ref
    finally:
        _docker("rmi", ref, check=False)


def test_push_pull_and_rerun(push_image: str, registry: str, tmp_path: Path) -> None:
    image_ref = push_image
    repository, tag = image_ref.rsplit(":", 1)
    pushed = f"{registry}/{image_ref}"
    ref_file = tmp_path / "ref"
    args = ("-e", "vllm_image_distribution=push", "-e", f"vllm_image_registry={registry}",
            "-e", "vllm_image_registry_insecure=true", "-e", f"vllm_image_ref_file={ref_file}",
            "-e", f"vllm_image_repository={repository}")
    api = f"http://127.0.0.1:{registry.rsplit(':', 1)[1]}/v2/{repository}"
    assert _http(f"{api}/tags/list")[0] == 404             # nothing there before the role runs
    try:
        # Check mode first: it reports the push and pushes nothing.
        _, counts = _playbook(*args, "--check")
        assert counts["changed"] >= 1 and counts["failed"] == 0
        assert _http(f"{api}/tags/list")[0] == 404

        out, counts = _playbook(*args)
        assert counts["failed"] == 0
        assert "Push the image to the registry" in out and counts["changed"] >= 1, out[-3000:]
        assert "build | Build the image" not in out          # pushed as built by 50-vllm-image.sh
        status, _, body = _http(f"{api}/tags/list")
        assert status == 200 and json.loads(body) == {"name": repository, "tags": [tag]}
        status, headers, _ = _http(f"{api}/manifests/{tag}")
        assert status == 200
        digest = headers.get("Docker-Content-Digest", "")
        assert digest.startswith("sha256:")
        assert ref_file.read_text().strip() == pushed          # the deploy role gets the registry reference

        # A host lacking the registry-qualified tag pulls it back (the image stays: it is also tagged locally).
        _docker("rmi", pushed)
        assert not _image_id(pushed)
        _, counts = _playbook(*args, "--check")
        assert counts["changed"] >= 1 and not _image_id(pushed)   # check mode pulled nothing
        out, counts = _playbook(*args)
        assert counts["changed"] >= 1 and counts["failed"] == 0, out[-3000:]
        assert _image_id(pushed) == _image_id(image_ref)
        repo_digests = json.loads(_docker("image", "inspect", "--format", "{{json .RepoDigests}}", pushed))
        assert f"{registry}/{repository}@{digest}" in repo_digests

        # Everything in place: nothing changes, nothing is pushed again, the tag stays content-addressed.
        out, counts = _playbook(*args)
        assert counts["changed"] == 0, out[-3000:]
        assert json.loads(_http(f"{api}/tags/list")[2])["tags"] == [tag]
    finally:
        _docker("rmi", pushed, check=False)


def test_load_from_a_tarball_and_rerun(image_ref: str, tmp_path: Path) -> None:
    tag = image_ref.rsplit(":", 1)[1]
    repository = f"vf-img-load-{uuid.uuid4().hex[:8]}/vllm"
    ref = f"{repository}:{tag}"                             # the tag does not depend on the repository name
    cache = tmp_path / "cache"
    ref_file = tmp_path / "ref"
    args = ("-e", "vllm_image_distribution=load", "-e", f"vllm_image_repository={repository}",
            "-e", f"vllm_image_cache_dir={cache}", "-e", f"vllm_image_ref_file={ref_file}")
    small_id = _image_id(SMALL_IMAGE)
    assert small_id, f"{SMALL_IMAGE} missing: run scripts/testbed/20-base-image.sh"
    _docker("tag", SMALL_IMAGE, ref)
    try:
        out, counts = _playbook(*args)
        assert counts["failed"] == 0 and counts["changed"] >= 1, out[-3000:]
        assert ref_file.read_text().strip() == ref
        archives = list(cache.glob("*.tar"))
        assert len(archives) == 1 and not list(cache.glob("*.partial")), archives
        with tarfile.open(archives[0]) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert manifest[0]["RepoTags"] == [ref]
        mtime = archives[0].stat().st_mtime_ns

        # The host lacks the tag: check mode reports the load, the real run copies nothing (controller) and loads.
        _docker("rmi", ref)
        assert not _image_id(ref)
        _, counts = _playbook(*args, "--check")
        assert counts["changed"] >= 1 and not _image_id(ref)
        out, counts = _playbook(*args)
        assert counts["changed"] >= 1 and counts["failed"] == 0, out[-3000:]
        assert "Load the image (docker load)" in out
        assert _image_id(ref) == small_id                     # loaded from the tarball, not rebuilt
        assert archives[0].stat().st_mtime_ns == mtime        # the tarball was not written again

        out, counts = _playbook(*args)
        assert counts["changed"] == 0, out[-3000:]
    finally:
        _docker("rmi", ref, check=False)
