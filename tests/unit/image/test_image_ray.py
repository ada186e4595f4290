"""Ray in the image (issue 12): the pin per vLLM version (compat.py ``ray_requirements``), the build plan with Ray on
(same pip step, wheelhouse, another tag) and off (byte for byte the image without Ray), and the role's default
``vllm_image_ray`` derived from the host's launch record."""

from __future__ import annotations

import difflib
import hashlib
import re
import subprocess
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import compat
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.build import ImageBuildError, build_plan
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import COMPAT_TABLE, select_image
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner import releases

from ._image_render import ROLE, plan_for, render
from .test_dockerfile_render import _hadolint

ROOT = Path(__file__).resolve().parents[3]
H200 = ["9.0"]

#: Computed with the code before Ray existed (same calls as below): tag, sha256 of the rendered Dockerfile and the
#: wheelhouse digest. With Ray off nothing may differ: the CI caches the default cpu image by this tag, and a changed
#: default would rebuild every fleet's image. A deliberate change of the image (template, inputs) updates this table
#: (last: issue 31, cuda images check their install by importing vLLM and torch, `vllm --version`
#: needs a GPU there; the cpu Dockerfile differs only in the labels carrying the template checksum and tag).
BEFORE_RAY = {
    ("0.32.0", "cpu", "wheelhouse"): ("0.32.0-cpu-663024f52313",
                                      "8ec48c383d94d0f4ed476d38fd6efa5b65cc11ac508e0d55d05abdefd6fa3bea",
                                      "fd3e9deed5cd886f"),
    ("0.32.0", "cpu", "index"): ("0.32.0-cpu-7d3606782c3f",
                                 "074255dbe0db9131596c35279290d166d54dc84b3dadeba17e21631d6f1175ba",
                                 "a9ae78fec0098b36"),
    ("0.33.0", "cu130", "wheelhouse"): ("0.33.0-cu130-43a2ae677ad1",
                                        "6543f1ee2d22df781103b5a34e9341cb471677693a603c73a5fdbd442ddba5e8",
                                        "f0c92ce16a7f0c07"),
    ("0.33.0", "cu130", "index"): ("0.33.0-cu130-61332f1d2317",
                                   "936ed4865d157ae4bc8f0682b8788180de92fde11661647b3d8f7267d340d65e",
                                   "76d7e63e0054716d"),
    ("0.32.0", "cu129", "wheelhouse"): ("0.32.0-cu129-5af97252fdbc",
                                        "dd6e7e3f648ec289903f14a7717c1a09ff52340074fd4f9e3565c3e1ea199f46",
                                        "8547ac0dd8d18ebc"),
    ("0.32.0", "cu129", "index"): ("0.32.0-cu129-9a9abece73c7",
                                   "d94d07ed66b058559900419cba3dfb5010843d941fd507cc16f11c333c9f4544",
                                   "a2376ffe451bf3cf"),
    ("0.6.3.post1", "cu121", "wheelhouse"): ("0.6.3.post1-cu121-36f35ee5c7ba",
                                             "b7cbcd75541010c143db48f9bb1c58ebac774523938242f39c5151404262443e",
                                             "d72678cb2a25d8e7"),
    ("0.6.3.post1", "cu121", "index"): ("0.6.3.post1-cu121-511d9d8798fe",
                                        "094eaad4ac624b689f9748a1ce3aefb8a59032419c51cbb32e5560454757276e",
                                        "2e4e34e842eebbee"),
}
#: The decisions the table above was computed for: (vLLM, driver, variant).
DECISIONS = {"cpu": ("0.32.0", None, "cpu"), "cu130": ("0.33.0", "580.159.04", "cuda"),
             "cu129": ("0.32.0", "575.57.08", "cuda"), "cu121": ("0.32.0", "535.261.03", "cuda")}


def _decision(key: str) -> compat.ImageDecision:
    version, driver, variant = DECISIONS[key]
    return select_image(version, driver, [] if variant == "cpu" else H200, variant=variant)


def _options(mode: str) -> dict[str, Any]:
    return {"constraints_sha256": "c" * 64} if mode == "wheelhouse" else {"install_mode": "index"}


# ---- the pin per vLLM version ----------------------------------------------------------------------------------

def test_ray_pin_per_vllm_version() -> None:
    pins = {(p.vllm_version, p.key): p.ray_requirements for p in COMPAT_TABLE}
    assert releases.RAY_VERSION == "2.56.0"
    assert pins == {
        ("0.33.0", "cu130"): ("ray==2.56.0",),             # 0.33: no compiled-graph executor, no cupy
        ("0.32.0", "cu130"): ("ray[cgraph]==2.56.0",),     # 0.32's Ray executor runs Ray Compiled Graph
        ("0.32.0", "cu129"): ("ray[cgraph]==2.56.0",),
        ("0.6.3.post1", "cu121"): (),                      # vllm 0.6.3.post1 requires ray>=2.9 itself
        ("0.32.0", "cpu"): ("ray==2.56.0", "msgpack==1.2.4"),
    }
    for row in COMPAT_TABLE:  # exact pins only: the same Ray on every build of a row
        assert all(re.fullmatch(r"[A-Za-z0-9_.-]+(\[[a-z,]+\])?==[0-9][0-9A-Za-z.+]*", pin)
                   for pin in row.ray_requirements or ()), row.key


@pytest.mark.parametrize("version", ["0.32.0", "0.33.0"])
def test_ray_pin_is_the_one_vllm_names_as_tested(version: str) -> None:
    """vLLM declares no Ray requirement; its source names the Ray it is tested on (RDT_MIN_RAY_VERSION)."""
    source = ROOT / ".cache" / "vllm-src" / version / "vllm" / "distributed" / "weight_transfer"
    path = source / "sharded_rdt_common.py"
    if not path.is_file():
        pytest.skip(f"no unpacked vLLM {version} source under .cache/vllm-src")
    found = re.search(r'^RDT_MIN_RAY_VERSION = "([0-9.]+)"', path.read_text(), flags=re.M)
    assert found and found.group(1) == releases.RAY_VERSION


# ---- Ray off: byte for byte the image without Ray ---------------------------------------------------------------

@pytest.mark.parametrize(("version", "key", "mode"), sorted(BEFORE_RAY))
def test_without_ray_the_image_is_the_one_before_ray(version: str, key: str, mode: str) -> None:
    decision = _decision(key)
    assert decision.profile.vllm_version == version
    tag, dockerfile_sha, wheelhouse = BEFORE_RAY[(version, key, mode)]
    for plan in (plan_for(decision, **_options(mode)), plan_for(decision, ray=False, **_options(mode))):
        assert plan["tag"] == tag
        assert hashlib.sha256(render(plan).encode()).hexdigest() == dockerfile_sha
        assert plan["wheelhouse_digest"] == wheelhouse
        assert "ray" not in plan["tag_inputs"]
        assert not any(r.startswith("ray") for r in plan["render"]["requirements"])


# ---- Ray on ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("key", ["cpu", "cu130", "cu129"])
@pytest.mark.parametrize("mode", ["wheelhouse", "index"])
def test_with_ray_the_pin_joins_vllm_in_one_pip_step_and_the_tag_changes(key: str, mode: str) -> None:
    decision = _decision(key)
    pins = list(decision.profile.ray_requirements or ())
    off = plan_for(decision, **_options(mode))
    on = plan_for(decision, ray=True, **_options(mode))
    assert on["tag"] != off["tag"] and on["tag"].startswith(f"{decision.profile.vllm_version}-{key}-")
    assert on["render"]["requirements"] == [*decision.profile.requirements, *pins]
    assert on["tag_inputs"]["ray"] == pins
    text = render(on)
    quoted = " ".join(f"'{p}'" if "[" in p else p for p in decision.profile.requirements + tuple(pins))
    installs = [line for line in text.splitlines() if quoted in line]
    assert len(installs) == 1  # one pip step: vLLM, torch and Ray resolved together into /opt/venv
    pip_step = text.split(quoted, 1)[0].rsplit("RUN ", 1)[1]
    assert pip_step.startswith("/opt/venv/bin/pip install")
    if mode == "wheelhouse":  # the controller downloads Ray's wheels into the same wheelhouse folder (new marker)
        assert "--no-index --find-links /tmp/wheels" in pip_step
        assert on["wheelhouse_name"] == off["wheelhouse_name"]
        assert on["wheelhouse_digest"] != off["wheelhouse_digest"]
        assert on["pip_download"] == off["pip_download"]  # same platforms and indexes; the requirements add Ray
    assert f'org.vllm-fleet.ray="{" ".join(pins)}"' in text
    # Everything else is the image without Ray: only the requirement line and the labels that name the inputs differ.
    changed = [line[1:] for line in difflib.unified_diff(render(off).splitlines(), text.splitlines(), lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    allowed = re.compile(r"org\.vllm-fleet\.(image\.tag|inputs\.digest|install-mode|build-backend|ray)=|"
                         + re.escape(decision.profile.requirements[0]))
    assert changed and all(allowed.search(line) for line in changed), changed


def test_ray_from_vllms_own_requirements_changes_nothing() -> None:
    """vLLM 0.6.3.post1 (the R535 fallback) requires ray>=2.9 itself: with Ray on it is the same image."""
    decision = _decision("cu121")
    assert plan_for(decision, ray=True)["tag"] == plan_for(decision)["tag"]


def test_a_row_without_a_ray_pin_is_refused() -> None:
    profile = {**_decision("cpu").profile.as_dict(), "ray_requirements": None}
    kwargs = {"repository": "r", "base_image": "b", "base_image_id": "sha256:" + "ab" * 32, "template_sha256": "t"}
    build_plan(profile, **kwargs)  # without Ray the missing pin does not matter
    with pytest.raises(ImageBuildError, match=r"vLLM 0\.32\.0 \(cpu\) has no Ray pin .* add ray_requirements to its row"):
        build_plan(profile, ray=True, **kwargs)


@pytest.mark.parametrize("key", ["cpu", "cu130"])
def test_hadolint_clean_with_ray(key: str, tmp_path: Path) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render(plan_for(_decision(key), ray=True, constraints_sha256="c" * 64)))
    result = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


# ---- the role's default: derived from the launch record ---------------------------------------------------------

def _role_default(**variables: Any) -> bool:
    """``vllm_image_ray`` as the role's defaults/main.yml computes it for a host with these variables."""
    expression = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())["vllm_image_ray"]
    text = jinja2.Environment(undefined=jinja2.ChainableUndefined).from_string(expression).render(**variables)
    assert text in ("True", "False"), text
    return text == "True"


def test_role_default_follows_the_launch_record() -> None:
    ray_node = {"image": {"device": "cuda", "vllm_version": "0.32.0", "ref": None, "ray": True}}
    other = {"image": {"device": "cuda", "vllm_version": "0.32.0", "ref": None, "ray": False}}
    assert _role_default(vllm_fleet_launch=ray_node) is True
    assert _role_default(vllm_fleet_launch=other) is False
    # The record wins over the inventory's backend (a single host with backend ray launches no Ray).
    assert _role_default(vllm_fleet_launch=other, vllm_serve_multinode_backend="ray",
                         vllm_fleet_multinode_group="g") is False
    # A record from before Ray was recorded: no Ray.
    assert _role_default(vllm_fleet_launch={"image": {"ref": None}}) is False


def test_role_default_without_a_launch_record_reads_the_inventory() -> None:
    assert _role_default() is False
    assert _role_default(vllm_serve_multinode_backend="ray", vllm_fleet_multinode_group="big") is True
    assert _role_default(vllm_serve_multinode_backend="ray") is False        # no multi-node group: no `ray start`
    assert _role_default(vllm_serve_multinode_backend="mp", vllm_fleet_multinode_group="big") is False


def test_role_passes_ray_to_the_build_plan() -> None:
    tasks = (ROLE / "tasks" / "main.yml").read_text()
    assert "ray=vllm_image_ray | bool" in tasks
    specs = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert specs["vllm_image_ray"]["type"] == "bool"
    assert specs["vllm_image_ray"]["default"] == defaults["vllm_image_ray"]
