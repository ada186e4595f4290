# Copyright: (c) 2026, vllm-fleet contributors
# Apache-2.0 (see galaxy.yml)
"""Action for vllm_fleet.fleet.vllm_dashboards: vLLM's own Grafana dashboards, on the controller.

For each vLLM version: the release's source archive from the package index the controller's pip is configured
with (``pip config list``: index-url and extra-index-url, or pip's own default; no index is named here), checked
against the size and sha256 pinned in plugins/plugin_utils/observe/upstream_dashboards.py, cached, and the
dashboards read out of it and adapted (upstream_dashboards.adapt). Nothing on any host changes: the task returns
the dashboards, and the role writes them with ``copy``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys
import tarfile
from typing import Any
from urllib.parse import urlparse
from urllib.request import url2pathname

from ansible.errors import AnsibleActionFail
from ansible.module_utils.urls import ConnectionError as UrlConnectionError
from ansible.module_utils.urls import open_url
from ansible.plugins.action import ActionBase
from ansible_collections.vllm_fleet.fleet.plugins.module_utils.atomic_write import write_atomic
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.observe import upstream_dashboards as ud

PROJECT = "vllm"


def pip_indexes(python: str = sys.executable) -> tuple[list[str], str | None]:
    """The simple indexes pip would read (index-url first, then each extra-index-url) and its CA bundle, from
    ``pip config list`` (files and PIP_* variables); pip's own default index when none is configured."""
    try:
        listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True,
                                check=False, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        listed = ""
    index: list[str] = []
    extra: list[str] = []
    cert = None
    for line in listed.splitlines():
        key, _sep, raw = line.partition("=")
        name = key.rsplit(".", 1)[-1]
        values = shlex.split(raw.strip().strip("'\""))
        if name == "index-url" and values:
            index = values[:1]
        elif name == "extra-index-url":
            extra += [v for v in values if v not in extra]
        elif name == "cert" and values:
            cert = values[0]
    if not index:
        # pip's own default index, when nothing else is configured
        try:
            from pip._internal.models.index import PyPI
        except ImportError:
            index = []
        else:
            index = [PyPI.simple_url]
    return index + extra, cert


def _read(url: str, accept: str, cafile: str | None, timeout: float = 60) -> tuple[bytes, str]:
    if url.startswith("file:"):
        path = url2pathname(urlparse(url).path)
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        with open(path, "rb") as handle:
            return handle.read(), url
    response = open_url(url, headers={"Accept": accept}, timeout=timeout, http_agent="vllm-fleet",
                        ca_path=cafile if cafile and os.path.exists(cafile) else None)
    return response.read(), response.geturl()


def fetch_sdist(rel: ud.Release, cache_dir: str, indexes: list[str], cafile: str | None = None) -> tuple[str, str]:
    """The release's source archive in ``cache_dir`` (downloaded from the first index that lists it, then checked
    against its pinned size and sha256): its path and where it came from ("cache" or the address)."""
    path = os.path.join(os.path.expanduser(cache_dir), rel.sdist)
    if os.path.exists(path) and _digest(path) == rel.sha256:
        return path, "cache"
    tried = []
    for index in indexes:
        page_url = index.rstrip("/") + f"/{PROJECT}/"
        try:
            page, final = _read(page_url, "application/vnd.pypi.simple.v1+json, text/html;q=0.5", cafile)
            url = ud.sdist_url(page.decode("utf-8", "replace"), final, rel.sdist)
            data, _final = _read(url, "*/*", cafile, timeout=600)
        except (OSError, ValueError, UrlConnectionError) as exc:
            tried.append(f"{page_url}: {exc}")
            continue
        if len(data) != rel.size or hashlib.sha256(data).hexdigest() != rel.sha256:
            tried.append(f"{url}: {len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()} (pinned: "
                         f"{rel.size} bytes, {rel.sha256})")
            continue
        write_atomic(path, data)
        return path, url
    raise ud.UpstreamDashboardError(f"{rel.sdist} from no configured index: " + "; ".join(tried or ["no index"]))


def _digest(path: str) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def read_dashboards(path: str, rel: ud.Release) -> dict[str, dict[str, Any]]:
    """The upstream dashboards of one release, by key, as vLLM ships them."""
    models = {}
    with tarfile.open(path, "r:gz") as archive:
        for dashboard in ud.DASHBOARDS:
            member = archive.extractfile(f"{rel.top}/{dashboard.member}")
            if member is None:
                raise ud.UpstreamDashboardError(f"{rel.sdist} has no {dashboard.member}")
            models[dashboard.key] = json.load(member)
    return models


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("versions", "datasource_uid", "datasource_name", "index_url", "cache_dir"))

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        args = self._task.args
        versions = args.get("versions")
        if not isinstance(versions, list) or not versions:
            raise AnsibleActionFail("vllm_dashboards: versions must be a non-empty list of vLLM versions")
        uid, name = str(args.get("datasource_uid") or "prometheus"), str(args.get("datasource_name") or "Prometheus")
        cache_dir = str(args.get("cache_dir") or "~/.cache/vllm-fleet/vllm-sdist")
        index_url = str(args.get("index_url") or "")
        indexes, cafile = ([index_url], None) if index_url else pip_indexes()
        dashboards, sources = [], []
        try:
            for version in sorted({str(v) for v in versions}):
                rel = ud.release(version)
                path, source = fetch_sdist(rel, cache_dir, indexes, cafile)
                sources.append({"version": version, "archive": path, "from": source})
                shipped = read_dashboards(path, rel)
                for dashboard in ud.DASHBOARDS:
                    model = ud.adapt(shipped[dashboard.key], rel, dashboard, uid, name)
                    dashboards.append({"file": ud.file_name(rel, dashboard), "uid": model["uid"],
                                       "title": model["title"], "version": version, "model": model})
        except (ud.UpstreamDashboardError, OSError, tarfile.TarError, ValueError) as exc:
            raise AnsibleActionFail(f"vllm_dashboards: {exc}") from exc
        result.update(changed=False, dashboards=dashboards, sources=sources)
        return result
