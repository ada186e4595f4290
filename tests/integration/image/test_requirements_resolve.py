"""Every image row installs: pip resolves each profile's exact requirement set for the image's Python and platform.

The cuda rows are only rendered by the unit tests; a pin that cannot install (a torch that was never published for
that Python, a dependency with no wheel for the image's glibc) would surface in a fleet build. Here pip resolves
each row of ``COMPAT_TABLE`` the way the vllm_image role's wheelhouse step downloads it (``build_plan()
["pip_download"]``: ``--only-binary=:all:``, the image's ``--python-version``, every manylinux ``--platform`` its glibc
accepts, the row's own extra indexes) plus its constraints file when the role has one, as a dry run with an
install report:

    python -m pip install --dry-run --ignore-installed --report <file> <pip_download args> [-c <constraints>] <pins>

No index is named here: pip uses the controller's pip configuration (index, mirror, find-links), as the role
does. Needs the network, so it is an integration test. A row whose own extra index (``extra_index_urls``, e.g. the
cu129 wheels) cannot be reached from this host is skipped with that reason; any other failure fails.
``VLLM_FLEET_PIP_FIND_LINKS`` (folders, ``:``-separated) adds find-links like the role's ``vllm_image_pip_find_links``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import COMPAT_TABLE, ImageProfile

pytestmark = [pytest.mark.integration, pytest.mark.resolve]

ROOT = Path(__file__).resolve().parents[3]
CONSTRAINTS = ROOT / "roles" / "vllm_image" / "files" / "constraints"
TIMEOUT_S = float(os.environ.get("VLLM_FLEET_RESOLVE_TIMEOUT", "900"))
UNREACHABLE = re.compile(r"NameResolutionError|Failed to establish a new connection|ConnectTimeout|"
                         r"Temporary failure in name resolution|Network is unreachable")

#: Rows known not to install with --only-binary=:all:, each with why (strict: the test fails once they do). Empty:
#: a dependency published only as an sdist goes into the row's ``sdist_wheels`` (built first, as the role does).
KNOWN_BROKEN: dict[tuple[str, str], str] = {}


def row_id(profile: ImageProfile) -> str:
    return f"{profile.vllm_version}-{profile.key}"


@dataclass(frozen=True)
class Resolution:
    profile: ImageProfile
    command: list[str]
    returncode: int
    output: str
    report: dict[str, Any] | None

    def installed(self) -> dict[str, str]:
        """Resolved distribution name (normalised) → version."""
        items = (self.report or {}).get("install") or []
        return {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"] for i in items}


def command(profile: ImageProfile, report: Path) -> list[str]:
    """The dry-run install of one row, with exactly the role's download arguments (and, like the role, its
    ``sdist_wheels`` built first into a folder the download finds)."""
    row = profile.as_dict()
    plan = image_build.build_plan(row, repository="vllm-fleet/vllm", base_image=str(row["base_image"]),
                                  base_image_id="sha256:" + "0" * 64, template_sha256="0" * 64)
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--disable-pip-version-check",
           "--report", str(report), *plan["pip_download"]]
    for folder in filter(None, os.environ.get("VLLM_FLEET_PIP_FIND_LINKS", "").split(":")):
        cmd.append(f"--find-links={folder}")
    if plan["sdist_wheels"]:
        built = report.parent / f"{row_id(profile)}-sdist-wheels"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--no-deps",
                        "--wheel-dir", str(built), *plan["sdist_wheels"]], check=True, capture_output=True,
                       timeout=TIMEOUT_S)
        cmd.append(f"--find-links={built}")
    constraints = CONSTRAINTS / f"{plan['wheelhouse_name']}.txt"
    if constraints.is_file():
        cmd += ["-c", str(constraints)]
    return cmd + list(plan["render"]["requirements"])


def resolve(profile: ImageProfile, folder: Path) -> Resolution:
    report = folder / f"{row_id(profile)}.json"
    cmd = command(profile, report)
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=TIMEOUT_S)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, output = -1, f"timed out after {TIMEOUT_S:.0f} s: {exc}"
    data = json.loads(report.read_text()) if code == 0 and report.is_file() else None
    return Resolution(profile, cmd, code, output, data)


@pytest.fixture(scope="module")
def resolutions(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Resolution]]:
    """All rows resolved at once (each takes a minute or two; they are independent)."""
    folder = tmp_path_factory.mktemp("resolve")
    with ThreadPoolExecutor(max_workers=len(COMPAT_TABLE)) as pool:
        results = list(pool.map(lambda p: resolve(p, folder), COMPAT_TABLE))
    yield {row_id(r.profile): r for r in results}


def _tail(output: str, lines: int = 25) -> str:
    kept = [line for line in output.splitlines() if "is ignored: it is neither a file nor a directory" not in line]
    return "\n".join(kept[-lines:])


@pytest.mark.parametrize("profile", COMPAT_TABLE, ids=row_id)
def test_row_resolves(profile: ImageProfile, resolutions: dict[str, Resolution]) -> None:
    result = resolutions[row_id(profile)]
    broken = KNOWN_BROKEN.get((profile.vllm_version, profile.key))
    if result.returncode != 0:
        hosts = {urlparse(u).hostname for u in profile.extra_index_urls}
        if hosts and UNREACHABLE.search(result.output) and any(h and h in result.output for h in hosts):
            pytest.skip(f"{row_id(profile)}: its extra index ({', '.join(sorted(h for h in hosts if h))}) cannot be "
                        "reached from this host; the row is checked where it can")
        if broken:
            pytest.xfail(broken)
        pytest.fail(f"{row_id(profile)} does not install for Python {profile.python_version} on glibc "
                    f"{profile.glibc}:\n$ {' '.join(result.command)}\n{_tail(result.output)}")
    assert broken is None, f"{row_id(profile)} installs now: remove it from KNOWN_BROKEN ({broken})"
    installed = result.installed()
    for pin in profile.requirements:
        name, _sep, version = pin.partition("==")
        assert installed.get(name.lower()) == version, (pin, installed.get(name.lower()))


@pytest.mark.parametrize("profile", [p for p in COMPAT_TABLE if p.torch_cuda], ids=row_id)
def test_torch_brings_the_rows_cuda(profile: ImageProfile, resolutions: dict[str, Resolution]) -> None:
    """The CUDA runtime torch pulls in is the row's ``torch_cuda`` (so the base image's CUDA, and hence the minimum
    driver the row derives from it, is at least what the wheels need)."""
    result = resolutions[row_id(profile)]
    if result.report is None:
        pytest.skip(f"{row_id(profile)} did not resolve (see test_row_resolves)")
    runtime = {name: v for name, v in result.installed().items() if name.startswith("nvidia-cuda-runtime")}
    assert runtime, f"{row_id(profile)}: torch pulled in no nvidia-cuda-runtime wheel"
    assert all(v.startswith(f"{profile.torch_cuda}.") for v in runtime.values()), (profile.torch_cuda, runtime)
