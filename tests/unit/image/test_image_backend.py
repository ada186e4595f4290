"""backend.py: BuildKit where a Docker CLI on the builder can drive it, the classic builder otherwise."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.vllm_fleet.fleet.plugins.filter.image import vllm_image_build_backend
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.backend import (
    BuildBackendError,
    choose_backend,
    docker_version,
)

# This machine: a docker 28 CLI without buildx on PATH shadows Debian 12's 20.10 CLI (BuildKit built in).
NEW_CLI_NO_BUILDX = {"cli": "/usr/local/bin/docker", "client": "28.2.2", "server": "20.10.24+dfsg1", "buildx": False}
DEBIAN_CLI = {"cli": "/usr/bin/docker", "client": "20.10.24+dfsg1", "server": "20.10.24+dfsg1", "buildx": False}
DOCKER_CE = {"cli": "/usr/bin/docker", "client": "27.5.1", "server": "27.5.1", "buildx": True}


@pytest.mark.parametrize(("text", "expected"), [
    ("20.10.24+dfsg1", (20, 10)), ("28.2.2", (28, 2)), ("v0.12.1", (0, 12)), ("", None), ("unknown", None),
])
def test_docker_version_is_major_minor(text: str, expected: tuple[int, int] | None) -> None:
    assert docker_version(text) == expected


def test_auto_skips_a_cli_without_buildx_for_the_builtin_one() -> None:
    choice = choose_backend("auto", [NEW_CLI_NO_BUILDX, DEBIAN_CLI])
    assert choice["backend"] == "buildkit" and choice["cli"] == "/usr/bin/docker"
    assert choice["env"] == {"DOCKER_BUILDKIT": "1"}
    assert "built in" in choice["reason"]


def test_buildx_plugin_drives_buildkit_on_any_cli_version() -> None:
    choice = choose_backend("auto", [DOCKER_CE])
    assert (choice["backend"], choice["cli"]) == ("buildkit", "/usr/bin/docker")
    assert "buildx plugin" in choice["reason"]


@pytest.mark.parametrize(("probe", "why"), [
    (NEW_CLI_NO_BUILDX, "/usr/local/bin/docker 28.2.2 has no buildx plugin"),
    (dict(DEBIAN_CLI, server="19.03.15"), "RUN --mount needs 20.10 or later"),
    (dict(DEBIAN_CLI, server=""), "/usr/bin/docker cannot reach the Docker engine"),
    (dict(DEBIAN_CLI, client="18.09.1"), "/usr/bin/docker 18.09.1 has no buildx plugin"),
    (dict(DEBIAN_CLI, client=""), "/usr/bin/docker did not report its version"),
])
def test_auto_falls_back_to_classic_and_says_why(probe: dict[str, object], why: str) -> None:
    choice = choose_backend("auto", [probe])
    assert choice["backend"] == "classic" and choice["cli"] == "" and choice["env"] == {}
    assert why in choice["reason"]
    assert "buildx plugin would let BuildKit write the venv once" in choice["reason"]


def test_no_cli_at_all() -> None:
    assert "no docker CLI found" in choose_backend("auto", [])["reason"]


def test_the_same_cli_twice_counts_once() -> None:
    choice = choose_backend("auto", [NEW_CLI_NO_BUILDX, NEW_CLI_NO_BUILDX])
    assert choice["reason"].count("has no buildx plugin") == 1


def test_classic_asked_is_classic_even_where_buildkit_works() -> None:
    choice = choose_backend("classic", [DOCKER_CE])
    assert choice["backend"] == "classic" and "vllm_image_build_backend: classic" in choice["reason"]


def test_buildkit_asked_where_no_cli_can_fails_with_what_to_do() -> None:
    assert choose_backend("buildkit", [NEW_CLI_NO_BUILDX, DEBIAN_CLI])["cli"] == "/usr/bin/docker"
    with pytest.raises(BuildBackendError, match="install the buildx plugin") as info:
        choose_backend("buildkit", [NEW_CLI_NO_BUILDX])
    assert "28.2.2 has no buildx plugin" in str(info.value)


def test_filter_wraps_errors() -> None:
    assert vllm_image_build_backend([DEBIAN_CLI])["backend"] == "buildkit"
    assert vllm_image_build_backend(None)["backend"] == "classic"
    with pytest.raises(AnsibleFilterError, match="vllm_image_build_backend: build backend 'kaniko'"):
        vllm_image_build_backend([DEBIAN_CLI], requested="kaniko")
