"""vLLM's own Grafana dashboards, pinned per vLLM version, provisioned next to the fleet dashboard.

Pure Python, standard library only, no I/O. vLLM ships its dashboards in its source tree
(``examples/observability/``), which is in the release's source archive on the package index (the sdist; the wheel
has no examples). :data:`RELEASES` says, per verified vLLM version, which archive (name, size, sha256 as the index
publishes them) and which members are the dashboards; ``plugins/module_utils/vllm_sdist.py`` fetches and checks the
archive, :func:`adapt` points a dashboard at the fleet's Prometheus datasource and gives it a uid and a title of its
own, so several vLLM versions' dashboards sit side by side.
"""

from __future__ import annotations

import copy
import html.parser
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.releases import (
    RELEASES as VERIFIED_RELEASES,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import DEFAULT_VLLM_VERSION


class UpstreamDashboardError(ValueError):
    """A vLLM version without pinned dashboards, or an index page without the release's source archive."""


@dataclass(frozen=True)
class Dashboard:
    key: str  # short name in the file name and the uid
    member: str  # path inside the source archive, below its top folder vllm-<version>/
    title: str


@dataclass(frozen=True)
class Release:
    version: str
    sdist: str  # file name on the index
    size: int
    sha256: str

    @property
    def top(self) -> str:
        return self.sdist.removesuffix(".tar.gz")


#: The dashboards of vLLM 0.32 and 0.33 (the same three files in both source trees).
DASHBOARDS: tuple[Dashboard, ...] = (
    Dashboard("overview", "examples/observability/prometheus_grafana/grafana.json", "overview"),
    Dashboard("performance", "examples/observability/dashboards/grafana/performance_statistics.json",
              "performance statistics"),
    Dashboard("queries", "examples/observability/dashboards/grafana/query_statistics.json", "query statistics"),
)

#: Source archives as the package index publishes them (name, size in bytes, sha256): each release block's
#: ``archive`` (planner/releases/).
RELEASES: dict[str, Release] = {r.version: Release(r.version, r.archive.sdist, r.archive.size, r.archive.sha256)
                                for r in VERIFIED_RELEASES}


def release(version: str) -> Release:
    """The pinned source archive of a vLLM version; refused, with the known versions, when there is none."""
    found = RELEASES.get(str(version))
    if found is None:
        raise UpstreamDashboardError(
            f"no pinned vLLM dashboards for vLLM {version!r} (known: {', '.join(sorted(RELEASES))}): set "
            "monitoring_vllm_dashboards_versions to known versions, or monitoring_vllm_dashboards_enabled: false"
        )
    return found


def fleet_versions(hosts: Iterable[str], hostvars: Mapping[str, Any], default: str = DEFAULT_VLLM_VERSION
                   ) -> list[str]:
    """The vLLM versions the fleet's launch records run (``vllm_fleet_launch.image.vllm_version``), sorted;
    ``[default]`` (the GPU hosts' default vLLM) when no host has a record (monitoring run without preflight)."""
    found = set()
    for host in hosts:
        launch = (hostvars.get(host) or {}).get("vllm_fleet_launch") or {}
        version = (launch.get("image") or {}).get("vllm_version")
        if version:
            found.add(str(version))
    return sorted(found) or [default]


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: dict[str, str] = {}
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            self.links[data.strip()] = self._href
            self._href = None


def sdist_url(page: str, page_url: str, filename: str) -> str:
    """The download address of ``filename`` on a project page of a simple package index: PEP 691 JSON or PEP 503
    HTML; relative links resolved against ``page_url``, the hash fragment dropped (the caller checks the digest)."""
    try:
        data = json.loads(page)
    except ValueError:
        parser = _Links()
        parser.feed(page)
        links = parser.links
    else:
        links = {str(f.get("filename")): str(f.get("url")) for f in data.get("files") or [] if isinstance(f, dict)}
    if filename not in links:
        raise UpstreamDashboardError(f"{page_url} lists no {filename}")
    return urljoin(page_url, links[filename]).split("#", 1)[0]


def file_name(rel: Release, dashboard: Dashboard) -> str:
    return f"vllm-{rel.version}-{dashboard.key}.json"


def adapt(model: Mapping[str, Any], rel: Release, dashboard: Dashboard, datasource_uid: str,
          datasource_name: str) -> dict[str, Any]:
    """vLLM's dashboard as the fleet provisions it: its own uid and title per vLLM version (several versions side
    by side), its datasource variable set to the fleet's Prometheus, the panels and queries untouched."""
    out = copy.deepcopy(dict(model))
    out.pop("id", None)
    out["uid"] = re.sub(r"[^a-z0-9-]", "-", f"vllm-{rel.version}-{dashboard.key}")
    out["title"] = f"vLLM {rel.version} {dashboard.title}"
    out["tags"] = sorted({*(str(t) for t in out.get("tags") or []), "vllm", f"vllm-{rel.version}"})
    out["description"] = (f"vLLM's own dashboard ({dashboard.member} in {rel.sdist}, sha256 {rel.sha256[:12]}), "
                          "provisioned by vllm-fleet")
    for variable in (out.get("templating") or {}).get("list") or []:
        if isinstance(variable, dict) and variable.get("type") == "datasource":
            variable["current"] = {"selected": True, "text": datasource_name, "value": datasource_uid}
    return out


def queries(model: Any) -> list[str]:
    """Every PromQL expression of a dashboard: the ``expr`` of each target, in rows and nested panels too."""
    found: list[str] = []
    if isinstance(model, Mapping):
        for key, value in model.items():
            if key == "expr" and isinstance(value, str) and value.strip():
                found.append(value)
            else:
                found += queries(value)
    elif isinstance(model, list):
        for item in model:
            found += queries(item)
    return found


def variables(model: Mapping[str, Any]) -> list[str]:
    """The names of a dashboard's template variables."""
    return [str(v.get("name")) for v in (model.get("templating") or {}).get("list") or [] if isinstance(v, Mapping)]
