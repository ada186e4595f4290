"""Where a model comes from: the ``vllm_fleet_model`` reference, its manifest, and the controller's cache.

A reference is a dict with exactly one source key:

- ``repo`` (Hugging Face Hub ``org/name``) with ``revision`` (a commit hash; a branch is accepted with a warning);
  ``huggingface_hub`` talks to the Hub (``HF_ENDPOINT`` for a Hub mirror), the token is ``vllm_fleet_hf_token``;
- ``url`` (an HTTP(S) mirror or artifact server: the files plus ``manifest`` - default ``manifest.json`` -
  ``{"revision": ..., "files": [{"path", "size", "sha256"}]}``);
- ``path`` (shared storage mounted on the hosts at the same path: nothing is staged).

Optional: ``name`` (the directory under the hosts' model root; default the repo's or URL's last part), ``gated``.
A plain string stays what it always was: a model directory (or config.json) on the controller.

The controller reads only the small files the planner needs (:data:`SMALL_FILES`) into its cache
(``<cache>/<key>/<revision>/``, with the resolved ``manifest.json``); offline (``offline=True``,
``VLLM_FLEET_OFFLINE=1`` or ``HF_HUB_OFFLINE=1``) it plans from that cache, or from the local Hub cache, and says so.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The files the planner reads (config, weight index, ModelOpt's quantization, generation and tokenizer configs).
SMALL_FILES = ("config.json", "model.safetensors.index.json", "hf_quant_config.json", "generation_config.json",
               "tokenizer_config.json")
SOURCE_KEYS = ("repo", "url", "path")
REF_KEYS = (*SOURCE_KEYS, "revision", "name", "manifest", "gated")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
DEFAULT_ROOT = "/srv/models"


class ModelSourceError(ValueError):
    """A reference, manifest or source the controller cannot use; the message says what to change."""


@dataclass(frozen=True)
class ModelRef:
    """One parsed ``vllm_fleet_model`` reference."""

    kind: str  #: "hub", "mirror" or "path"
    source: str  #: the repo id, the mirror's base URL or the shared path
    revision: str | None
    name: str
    manifest: str = "manifest.json"
    gated: bool = False

    @property
    def key(self) -> str:
        """The controller cache's directory for this source."""
        if self.kind == "hub":
            return "hub--" + self.source.replace("/", "--")
        return f"{self.kind}--{self.name}--{hashlib.sha256(self.source.encode()).hexdigest()[:12]}"

    @property
    def pinned(self) -> bool:
        """A Hub commit hash (mirror revisions are the manifest's, fixed by the server)."""
        return self.kind != "hub" or bool(self.revision and _COMMIT.match(self.revision))

    def describe(self) -> str:
        return {"hub": f"Hub {self.source}@{self.revision}", "mirror": f"mirror {self.source}",
                "path": f"shared path {self.source}"}[self.kind]


def is_reference(value: Any) -> bool:
    """True for a dict reference (a source key), False for a path or an inline config.json dict."""
    return isinstance(value, Mapping) and any(k in value for k in SOURCE_KEYS)


def parse_reference(value: Any) -> ModelRef:
    """Check and parse a dict reference; :class:`ModelSourceError` says what to change."""
    if not is_reference(value):
        raise ModelSourceError(f"vllm_fleet_model reference needs one of {', '.join(SOURCE_KEYS)}")
    unknown = sorted(set(map(str, value)) - set(REF_KEYS))
    if unknown:
        raise ModelSourceError(f"vllm_fleet_model has unknown key(s) {', '.join(unknown)} (known: {', '.join(REF_KEYS)})")
    given = [k for k in SOURCE_KEYS if k in value]
    if len(given) > 1:
        raise ModelSourceError(f"vllm_fleet_model gives {' and '.join(given)}: give exactly one source")
    kind_key = given[0]
    source = value[kind_key]
    if not isinstance(source, str) or not source.strip():
        raise ModelSourceError(f"vllm_fleet_model.{kind_key} must be a non-empty string, got {source!r}")
    revision = value.get("revision")
    if revision is not None and (not isinstance(revision, str) or not revision.strip() or "/" in revision):
        raise ModelSourceError(f"vllm_fleet_model.revision must be a commit hash (or a branch name), got {revision!r}")
    if kind_key == "repo":
        if not _REPO.match(source):
            raise ModelSourceError(f"vllm_fleet_model.repo must be a Hub repository 'org/name', got {source!r}")
        if revision is None:
            raise ModelSourceError(f"vllm_fleet_model.repo {source} has no revision: pin the commit hash "
                                   "(the Hub page's 'Files' history; a branch like 'main' is accepted with a warning)")
        kind, default_name = "hub", source.split("/")[1]
    elif kind_key == "url":
        parsed = urllib.parse.urlparse(source)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ModelSourceError(f"vllm_fleet_model.url must be an http(s) URL, got {source!r}")
        kind, default_name = "mirror", parsed.path.rstrip("/").rsplit("/", 1)[-1] or parsed.netloc
        source = source.rstrip("/")
    else:
        if not source.startswith("/"):
            raise ModelSourceError(f"vllm_fleet_model.path must be an absolute path on shared storage, got {source!r}")
        kind, default_name = "path", source.rstrip("/").rsplit("/", 1)[-1]
    name = value.get("name", default_name)
    if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", name):
        raise ModelSourceError(f"vllm_fleet_model.name must be a plain directory name, got {name!r}")
    manifest = value.get("manifest", "manifest.json")
    if not isinstance(manifest, str) or not manifest:
        raise ModelSourceError(f"vllm_fleet_model.manifest must be a file name, got {manifest!r}")
    gated = value.get("gated", False)
    if not isinstance(gated, bool):
        raise ModelSourceError(f"vllm_fleet_model.gated must be true or false, got {gated!r}")
    return ModelRef(kind, source, revision, name, manifest, gated)


def reference_warnings(ref: ModelRef) -> list[str]:
    """A branch name instead of a commit: the fleet may get two checkpoints."""
    if ref.kind == "hub" and not ref.pinned:
        return [f"vllm_fleet_model.revision {ref.revision!r} of {ref.source} is a branch, not a commit: hosts staged "
                "at different times may get different checkpoints; pin the commit hash it resolves to"]
    return []


def parse_manifest(data: Any, where: str) -> dict[str, Any]:
    """A manifest ``{"revision", "files": [{"path", "size", "sha256"}]}`` checked; returns it normalised."""
    if not isinstance(data, Mapping) or not isinstance(data.get("files"), list) or not data["files"]:
        raise ModelSourceError(f"{where}: a manifest is {{\"revision\": ..., \"files\": [{{\"path\", \"size\", "
                               "\"sha256\"}, ...]}")
    files = []
    for entry in data["files"]:
        path = entry.get("path") if isinstance(entry, Mapping) else None
        size = entry.get("size") if isinstance(entry, Mapping) else None
        sha = str(entry.get("sha256", "")).lower() if isinstance(entry, Mapping) else ""
        if (not isinstance(path, str) or not path or path.startswith("/") or ".." in path.split("/")
                or not isinstance(size, int) or isinstance(size, bool) or size < 0 or not _SHA256.match(sha)):
            raise ModelSourceError(f"{where}: file entry {entry!r} needs a relative path, a size in bytes and a "
                                   "sha256 (64 hex digits)")
        files.append({"path": path, "size": size, "sha256": sha})
    revision = data.get("revision")
    if not isinstance(revision, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", revision):
        raise ModelSourceError(f"{where}: the manifest needs a revision (a plain name: it names the hosts' directory)")
    return {"revision": revision, "files": sorted(files, key=lambda f: f["path"])}


def total_bytes(manifest: Mapping[str, Any]) -> int:
    return sum(int(f["size"]) for f in manifest["files"])


def offline_default() -> bool:
    return any(os.environ.get(n, "").lower() in ("1", "true", "yes", "on") for n in ("VLLM_FLEET_OFFLINE", "HF_HUB_OFFLINE"))


def default_cache_dir() -> str:
    return os.environ.get("VLLM_FLEET_MODEL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vllm-fleet", "models")


def _hub() -> Any:
    """huggingface_hub, or a one-line refusal that says how to install it."""
    try:
        import huggingface_hub  # type: ignore[import-not-found,unused-ignore]  # pylint: disable=import-outside-toplevel
    except ImportError:
        raise ModelSourceError("a Hub reference needs huggingface_hub on the controller: pip install "
                               "'vllm-fleet[hub]' (or huggingface_hub)") from None
    return huggingface_hub


def file_urls(ref: ModelRef, manifest: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The manifest's files with the URL each host downloads it from (``hf_hub_url`` for the Hub)."""
    if ref.kind == "path":
        return []
    if ref.kind == "hub":
        hf_hub_url = _hub().hf_hub_url
        return [{**f, "url": hf_hub_url(ref.source, f["path"], revision=manifest["revision"],
                                        endpoint=os.environ.get("HF_ENDPOINT"))} for f in manifest["files"]]
    return [{**f, "url": f"{ref.source}/{urllib.parse.quote(f['path'])}"} for f in manifest["files"]]


def _sha256(path: str) -> str:
    hasher = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            hasher.update(block)
    return hasher.hexdigest()


def _http_get(url: str, token: str | None = None, timeout: float = 30) -> bytes:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as resp:
            data: bytes = resp.read()
            return data
    except urllib.error.HTTPError as exc:
        raise ModelSourceError(f"{url} answered HTTP {exc.code}: check vllm_fleet_model.url and the mirror") from None
    except (urllib.error.URLError, OSError) as exc:
        raise ModelSourceError(f"cannot reach {url} from the controller ({getattr(exc, 'reason', exc)}): start the "
                               "mirror, or plan offline from the cache (VLLM_FLEET_OFFLINE=1)") from None


@dataclass(frozen=True)
class Resolved:
    """A reference resolved on the controller: the cache directory the planner reads and the full manifest."""

    ref: ModelRef
    directory: str
    manifest: dict[str, Any]
    note: str


def _cached(cache: str, ref: ModelRef, revision: str | None) -> Resolved | None:
    base = os.path.join(cache, ref.key)
    if revision is None:
        try:
            with open(os.path.join(base, "refs", "default"), encoding="utf-8") as handle:
                revision = handle.read().strip()
        except OSError:
            return None
    elif not _COMMIT.match(revision) and os.path.isfile(os.path.join(base, "refs", revision)):
        with open(os.path.join(base, "refs", revision), encoding="utf-8") as handle:
            revision = handle.read().strip()
    directory = os.path.join(base, revision)
    try:
        with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as handle:
            manifest = parse_manifest(json.load(handle), directory)
    except (OSError, ValueError):
        return None
    return Resolved(ref, directory, manifest, f"offline: planned from the controller cache {directory}")


def _store(cache: str, ref: ModelRef, manifest: dict[str, Any], small: Mapping[str, bytes], asked: str | None) -> str:
    base = os.path.join(cache, ref.key)
    directory = os.path.join(base, manifest["revision"])
    tmp = directory + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name, data in small.items():
        with open(os.path.join(tmp, name), "wb") as handle:
            handle.write(data)
    with open(os.path.join(tmp, "manifest.json"), "w", encoding="utf-8") as handle:
        json.dump({**manifest, "source": ref.describe()}, handle, indent=1)
    shutil.rmtree(directory, ignore_errors=True)
    os.replace(tmp, directory)
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    for alias in sorted({asked or "default", "default"}):
        with open(os.path.join(base, "refs", alias), "w", encoding="utf-8") as handle:
            handle.write(manifest["revision"])
    return directory


def _resolve_mirror(ref: ModelRef, cache: str) -> Resolved:
    where = f"{ref.source}/{ref.manifest}"
    try:
        data = json.loads(_http_get(where))
    except json.JSONDecodeError as exc:
        raise ModelSourceError(f"{where} is not JSON (line {exc.lineno}): the mirror must serve the manifest") from None
    manifest = parse_manifest(data, where)
    if ref.revision and ref.revision != manifest["revision"]:
        raise ModelSourceError(f"the mirror's manifest {where} is revision {manifest['revision']}, the inventory pins "
                               f"{ref.revision}: publish that revision or change vllm_fleet_model.revision")
    small = {}
    for entry in manifest["files"]:
        if entry["path"] in SMALL_FILES:
            data_bytes = _http_get(f"{ref.source}/{entry['path']}")
            if hashlib.sha256(data_bytes).hexdigest() != entry["sha256"]:
                raise ModelSourceError(f"{ref.source}/{entry['path']}: sha256 differs from the manifest's: the mirror "
                                       "serves a corrupted file or a stale manifest")
            small[entry["path"]] = data_bytes
    return Resolved(ref, _store(cache, ref, manifest, small, ref.revision), manifest, f"read from {where}")


def _resolve_hub_offline(ref: ModelRef, cache: str) -> Resolved:
    """The local Hub cache (``HF_HUB_CACHE``): huggingface_hub finds the snapshot; sizes and sha256 from its blobs."""
    hub = _hub()
    try:
        snapshot = hub.snapshot_download(ref.source, revision=ref.revision, local_files_only=True)
    except hub.errors.LocalEntryNotFoundError:
        raise ModelSourceError(f"offline and {ref.describe()} is neither in the controller cache ({cache}) nor in the "
                               "Hub cache: run once online (or copy the cache), or unset VLLM_FLEET_OFFLINE/HF_HUB_OFFLINE"
                               ) from None
    files, small = [], {}
    for folder, _dirs, names in os.walk(snapshot):
        for name in names:
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, snapshot)
            blob = os.path.basename(os.path.realpath(full))
            sha = blob if _SHA256.match(blob) else _sha256(full)  # LFS blobs are named by their sha256
            files.append({"path": rel, "size": os.path.getsize(full), "sha256": sha})
            if rel in SMALL_FILES:
                with open(full, "rb") as handle:
                    small[rel] = handle.read()
    manifest = parse_manifest({"revision": os.path.basename(snapshot.rstrip("/")), "files": files}, snapshot)
    directory = _store(cache, ref, manifest, small, ref.revision)
    return Resolved(ref, directory, manifest, f"offline: planned from the Hub cache {snapshot}")


def _resolve_hub_online(ref: ModelRef, cache: str, token: str | None) -> Resolved:
    hub = _hub()
    api = hub.HfApi(endpoint=os.environ.get("HF_ENDPOINT"), token=token)
    try:
        info = api.model_info(ref.source, revision=ref.revision, files_metadata=True)
        files, small = [], {}
        for sib in info.siblings or []:
            sha = sib.lfs.sha256 if sib.lfs else None
            local = None
            if sib.rfilename in SMALL_FILES or not sha:
                local = hub.hf_hub_download(ref.source, sib.rfilename, revision=info.sha, token=token)
                sha = sha or _sha256(local)
            files.append({"path": sib.rfilename, "size": int(sib.size or (os.path.getsize(local) if local else 0)),
                          "sha256": sha})
            if local and sib.rfilename in SMALL_FILES:
                with open(local, "rb") as handle:
                    small[sib.rfilename] = handle.read()
    except hub.errors.GatedRepoError:
        raise ModelSourceError(f"{ref.source} is gated: accept its licence on the Hub and set vllm_fleet_hf_token "
                               "(ansible-vault)") from None
    except hub.errors.HfHubHTTPError as exc:
        raise ModelSourceError(f"the Hub refused {ref.describe()}: {str(exc).splitlines()[0]}") from None
    manifest = parse_manifest({"revision": info.sha, "files": files}, ref.describe())
    return Resolved(ref, _store(cache, ref, manifest, small, ref.revision), manifest, f"read from {ref.describe()}")


def resolve(value: Any, *, cache_dir: str | None = None, offline: bool | None = None,
            token: str | None = None) -> Resolved:
    """Resolve a reference on the controller: small files in the cache, the manifest of every file.

    :raises ModelSourceError: a bad reference, an unreachable source with nothing cached, a gated repo without token.
    """
    ref = value if isinstance(value, ModelRef) else parse_reference(value)
    cache = os.path.expanduser(cache_dir or default_cache_dir())
    offline = offline_default() if offline is None else offline
    if ref.kind == "path":
        return _resolve_path(ref)
    if offline:
        hit = _cached(cache, ref, ref.revision)
        if hit is not None:
            return hit
        if ref.kind == "hub":
            return _resolve_hub_offline(ref, cache)
        raise ModelSourceError(f"offline and {ref.describe()} is not in the controller cache {cache}: run once with "
                               "the mirror reachable, or unset VLLM_FLEET_OFFLINE")
    if ref.kind == "hub" and ref.gated and not token:
        raise ModelSourceError(f"{ref.source} is gated: set vllm_fleet_hf_token (ansible-vault) to a token that "
                               "accepted its licence")
    if ref.kind == "hub":
        return _resolve_hub_online(ref, cache, token)
    return _resolve_mirror(ref, cache)


def _resolve_path(ref: ModelRef) -> Resolved:
    if not os.path.isfile(os.path.join(ref.source, "config.json")):
        raise ModelSourceError(f"shared path {ref.source} has no config.json on the controller: mount the shared "
                               "storage here too, or use a Hub or mirror reference")
    files = []
    for folder, _dirs, names in os.walk(ref.source):
        for name in names:
            full = os.path.join(folder, name)
            files.append({"path": os.path.relpath(full, ref.source), "size": os.path.getsize(full), "sha256": "0" * 64})
    return Resolved(ref, ref.source, {"revision": "shared", "files": files}, f"read from {ref.describe()}")
