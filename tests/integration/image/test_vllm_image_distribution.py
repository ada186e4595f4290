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
import shutil
import subprocess
import tarfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration._helpers import cpu_image_ref, docker, free_port, image_id, image_playbook

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
WHEELHOUSE = ROOT / ".cache" / "vllm-image" / "wheelhouse"
REGISTRY_PORTS = range(18150, 18200)
SMALL_IMAGE = "vllm-fleet/debian:bookworm"


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
    return cpu_image_ref()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Docker Distribution registry on 127.0.0.1:<port>; yields 'host:port'."""
    if shutil.which("docker-registry") is None:
        result = subprocess.run(["bash", "scripts/testbed/55-registry.sh"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
    work = tmp_path_factory.mktemp("vf-img-registry")
    port = free_port(REGISTRY_PORTS)
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
    docker("tag", SMALL_IMAGE, ref)
    try:
        yield ref
    finally:
        docker("rmi", ref, check=False)


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
        _out, counts = image_playbook(*args, "--check")
        assert counts["changed"] >= 1 and counts["failed"] == 0
        assert _http(f"{api}/tags/list")[0] == 404

        out, counts = image_playbook(*args)
        assert counts["failed"] == 0
        assert "Push the image to the registry" in out and counts["changed"] >= 1, out[-3000:]
        assert "build | Build the image" not in out          # pushed as built by 50-vllm-image.sh
        status, _headers, body = _http(f"{api}/tags/list")
        assert status == 200 and json.loads(body) == {"name": repository, "tags": [tag]}
        status, headers, _body = _http(f"{api}/manifests/{tag}")
        assert status == 200
        digest = headers.get("Docker-Content-Digest", "")
        assert digest.startswith("sha256:")
        assert ref_file.read_text().strip() == pushed          # the deploy role gets the registry reference

        # A host lacking the registry-qualified tag pulls it back (the image stays: it is also tagged locally).
        docker("rmi", pushed)
        assert not image_id(pushed)
        _out, counts = image_playbook(*args, "--check")
        assert counts["changed"] >= 1 and not image_id(pushed)   # check mode pulled nothing
        out, counts = image_playbook(*args)
        assert counts["changed"] >= 1 and counts["failed"] == 0, out[-3000:]
        assert image_id(pushed) == image_id(image_ref)
        repo_digests = json.loads(docker("image", "inspect", "--format", "{{json .RepoDigests}}", pushed))
        assert f"{registry}/{repository}@{digest}" in repo_digests

        # Everything in place: nothing changes, nothing is pushed again, the tag stays content-addressed.
        out, counts = image_playbook(*args)
        assert counts["changed"] == 0, out[-3000:]
        assert json.loads(_http(f"{api}/tags/list")[2])["tags"] == [tag]
    finally:
        docker("rmi", pushed, check=False)


def test_load_from_a_tarball_and_rerun(image_ref: str, tmp_path: Path) -> None:
    tag = image_ref.rsplit(":", 1)[1]
    repository = f"vf-img-load-{uuid.uuid4().hex[:8]}/vllm"
    ref = f"{repository}:{tag}"                             # the tag does not depend on the repository name
    cache = tmp_path / "cache"
    ref_file = tmp_path / "ref"
    args = ("-e", "vllm_image_distribution=load", "-e", f"vllm_image_repository={repository}",
            "-e", f"vllm_image_cache_dir={cache}", "-e", f"vllm_image_ref_file={ref_file}")
    small_id = image_id(SMALL_IMAGE)
    assert small_id, f"{SMALL_IMAGE} missing: run scripts/testbed/20-base-image.sh"
    docker("tag", SMALL_IMAGE, ref)
    try:
        out, counts = image_playbook(*args)
        assert counts["failed"] == 0 and counts["changed"] >= 1, out[-3000:]
        assert ref_file.read_text().strip() == ref
        archives = list(cache.glob("*.tar"))
        assert len(archives) == 1 and not list(cache.glob("*.partial")), archives
        with tarfile.open(archives[0]) as tar:
            manifest = json.load(tar.extractfile("manifest.json"))  # type: ignore[arg-type]
        assert manifest[0]["RepoTags"] == [ref]
        mtime = archives[0].stat().st_mtime_ns

        # The host lacks the tag: check mode reports the load, the real run copies nothing (controller) and loads.
        docker("rmi", ref)
        assert not image_id(ref)
        _out, counts = image_playbook(*args, "--check")
        assert counts["changed"] >= 1 and not image_id(ref)
        out, counts = image_playbook(*args)
        assert counts["changed"] >= 1 and counts["failed"] == 0, out[-3000:]
        assert "Load the image (docker load)" in out
        assert image_id(ref) == small_id                     # loaded from the tarball, not rebuilt
        assert archives[0].stat().st_mtime_ns == mtime        # the tarball was not written again

        out, counts = image_playbook(*args)
        assert counts["changed"] == 0, out[-3000:]
    finally:
        docker("rmi", ref, check=False)
