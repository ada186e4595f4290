"""The model reference (planner/model_source.py): parsing, revision and token handling, the mirror's manifest, the
controller cache and offline mode; and the Hub path through huggingface_hub against a pre-populated Hub cache."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import model_source as ms

from tests.unit.conftest import MirrorFiles

ROOT = Path(__file__).resolve().parents[3]
# A real published config.json (tests/fixtures/planner/checkpoints/SOURCES.json: ai-dynamo/aiconfigurator
# aic-core/src/aiconfigurator_core/model_configs/openai--gpt-oss-20b_config.json @ 095f58a5).
GPT_OSS = ROOT / "tests" / "fixtures" / "planner" / "checkpoints" / "gpt-oss-20b" / "config.json"
COMMIT = "6cee5e81ee83917806bbde320786a8fb61efebee"  # a 40-hex revision name for the cache (not the Hub's)


def test_a_hub_reference_needs_a_revision_and_a_branch_warns() -> None:
    with pytest.raises(ms.ModelSourceError, match="has no revision: pin the commit hash"):
        ms.parse_reference({"repo": "openai/gpt-oss-20b"})
    branch = ms.parse_reference({"repo": "openai/gpt-oss-20b", "revision": "main"})
    assert not branch.pinned and branch.name == "gpt-oss-20b"
    assert "is a branch, not a commit" in ms.reference_warnings(branch)[0]
    pinned = ms.parse_reference({"repo": "openai/gpt-oss-20b", "revision": COMMIT})
    assert pinned.pinned and ms.reference_warnings(pinned) == []


@pytest.mark.parametrize(("value", "message"), [
    ({"repo": "gpt-oss-20b", "revision": "main"}, "must be a Hub repository 'org/name'"),
    ({"repo": "a/b", "url": "http://x/y", "revision": "main"}, "give exactly one source"),
    ({"repo": "a/b", "revision": "main", "revison": "x"}, "unknown key"),
    ({"url": "ftp://mirror/x"}, "must be an http(s) URL"),
    ({"path": "models/x"}, "absolute path"),
    ({"repo": "a/b", "revision": "main", "gated": "yes"}, "gated must be true or false"),
    ({"url": "http://m/x", "name": "../x"}, "plain directory name"),
])
def test_bad_references_are_refused_with_the_fix(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ms.ModelSourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ms.parse_reference(value)


def test_a_gated_repository_without_a_token_is_refused_before_any_request() -> None:
    with pytest.raises(ms.ModelSourceError, match="is gated: set vllm_fleet_hf_token"):
        ms.resolve({"repo": "meta-llama/Llama-3.1-8B", "revision": COMMIT, "gated": True}, offline=False, token=None)


def test_a_manifest_needs_sizes_sha256_and_a_revision() -> None:
    good = {"revision": "r1", "files": [{"path": "config.json", "size": 3, "sha256": "a" * 64}]}
    assert ms.total_bytes(ms.parse_manifest(good, "m")) == 3
    for bad in ({"files": good["files"]}, {"revision": "r1", "files": [{"path": "../x", "size": 1, "sha256": "a" * 64}]},
                {"revision": "r1", "files": [{"path": "x", "size": 1, "sha256": "abc"}]}, {"revision": "r1", "files": []}):
        with pytest.raises(ms.ModelSourceError):
            ms.parse_manifest(bad, "m")


def test_a_mirror_is_read_into_the_cache_and_offline_plans_from_it(model_mirror: str, tmp_path: Path) -> None:
    cache = str(tmp_path / "cache")
    online = ms.resolve({"url": model_mirror}, cache_dir=cache, offline=False)
    assert online.manifest["revision"] == "r7" and ms.total_bytes(online.manifest) == GPT_OSS.stat().st_size + 1000
    assert (Path(online.directory) / "config.json").read_bytes() == GPT_OSS.read_bytes()
    assert not (Path(online.directory) / "model.safetensors").exists(), "the controller reads only the small files"
    urls = [f["url"] for f in ms.file_urls(online.ref, online.manifest)]
    assert urls == [f"{model_mirror}/config.json", f"{model_mirror}/model.safetensors"]
    offline = ms.resolve({"url": model_mirror}, cache_dir=cache, offline=True)
    assert offline.directory == online.directory and offline.note.startswith("offline: planned from the controller cache")
    with pytest.raises(ms.ModelSourceError, match="is revision r7, the inventory pins r6"):
        ms.resolve({"url": model_mirror, "revision": "r6"}, cache_dir=cache, offline=False)
    with pytest.raises(ms.ModelSourceError, match="not in the controller cache"):
        ms.resolve({"url": model_mirror + "-other"}, cache_dir=cache, offline=True)


def test_a_mirror_serving_a_config_that_differs_from_its_manifest_is_refused(model_mirror: str, tmp_path: Path) -> None:
    MirrorFiles.files["/m/gpt-oss-20b/config.json"] = b"{}"
    with pytest.raises(ms.ModelSourceError, match="sha256 differs from the manifest"):
        ms.resolve({"url": model_mirror}, cache_dir=str(tmp_path), offline=False)


def _hub_cache(base: Path) -> dict[str, str]:
    """A Hub cache as huggingface_hub lays it out: blobs (LFS ones named by their sha256), a snapshot, refs/main."""
    repo = base / "models--openai--gpt-oss-20b"
    (repo / "blobs").mkdir(parents=True)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    config = GPT_OSS.read_bytes()
    weights = b"\x02" * 4096
    blobs = {"config.json": ("c" * 40, config), "model-00001-of-00001.safetensors":
             (hashlib.sha256(weights).hexdigest(), weights)}
    for name, (blob, data) in blobs.items():
        (repo / "blobs" / blob).write_bytes(data)
        os.symlink(os.path.join("..", "..", "blobs", blob), snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return {"weights_sha256": hashlib.sha256(weights).hexdigest(), "config_sha256": hashlib.sha256(config).hexdigest()}


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "vllm_fleet.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **env}, cwd=ROOT, check=False, timeout=120)


def test_vllm_fleet_plan_model_org_name_offline_from_the_hub_cache(tmp_path: Path) -> None:
    sums = _hub_cache(tmp_path / "hub")
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "VLLM_FLEET_MODEL_CACHE": str(tmp_path / "vf")}
    gpu = ["--gpu", "NVIDIA H200", "--json"]
    by_hub = _cli("plan", "--model", "openai/gpt-oss-20b", "--revision", "main", *gpu, env=env)
    assert by_hub.returncode == 0, by_hub.stderr
    assert "offline: planned from the Hub cache" in by_hub.stderr and "is a branch, not a commit" in by_hub.stderr
    by_path = _cli("plan", "--model", str(GPT_OSS), *gpu, env=env)
    assert by_path.returncode == 0, by_path.stderr
    hub_plan, path_plan = json.loads(by_hub.stdout), json.loads(by_path.stdout)
    for plan in (hub_plan, path_plan):
        plan["engine_args"].pop("model")
        plan["cli_args"] = [a for a in plan["cli_args"] if not a.startswith("/")]
    assert hub_plan["engine_args"] == path_plan["engine_args"]
    manifest = json.loads((tmp_path / "vf" / "hub--openai--gpt-oss-20b" / COMMIT / "manifest.json").read_text())
    assert manifest["revision"] == COMMIT
    assert {f["path"]: f["sha256"] for f in manifest["files"]} == {
        "config.json": sums["config_sha256"], "model-00001-of-00001.safetensors": sums["weights_sha256"]}
    # The second time the controller cache answers (the manifest it wrote), and says so.
    again = _cli("plan", "--model", "openai/gpt-oss-20b", "--revision", COMMIT, *gpu, env=env)
    assert again.returncode == 0 and "offline: planned from the controller cache" in again.stderr, again.stderr
    missing = _cli("plan", "--model", "openai/gpt-oss-120b", "--revision", COMMIT, *gpu, env=env)
    assert missing.returncode == 2 and "neither in the controller cache" in missing.stderr, missing.stderr


def test_hub_files_get_the_urls_huggingface_hub_builds() -> None:
    import huggingface_hub as hub  # the 'hub' extra, part of 'site' and 'dev': a missing install fails here

    ref = ms.parse_reference({"repo": "openai/gpt-oss-20b", "revision": COMMIT})
    urls = ms.file_urls(ref, {"revision": COMMIT, "files": [{"path": "config.json", "size": 1, "sha256": "a" * 64}]})
    assert urls[0]["url"] == hub.hf_hub_url("openai/gpt-oss-20b", "config.json", revision=COMMIT)
    assert COMMIT in urls[0]["url"]
