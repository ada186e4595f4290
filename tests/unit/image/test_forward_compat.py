"""CUDA forward compatibility (issue 31): one test per row of NVIDIA's rules (image/forward_compat.py), fed by the
recorded GPU facts of real hosts (tests/fixtures/gpu), through the image choice, preflight's image check and the
build plan (vLLM's switch, the cuda-compat wheel, the tag)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import build as image_build
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image import forward_compat as fc
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import (
    ImageCompatError,
    select_image,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.images import image_compat_check
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.preflight.record import check_fleet

from ._image_render import BASE_ID, ROLE, template_sha256

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "gpu"


def facts(name: str, **override: Any) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / name / "expected_facts.json").read_text())
    if "gpu_name" in override:  # the same host with another GPU model (the driver stays the recorded one)
        for gpu in data["gpus"]:
            gpu["name"] = override["gpu_name"]
    if "driver" in override:
        data["driver_version"] = override["driver"]
    return data


def choose(host: dict[str, Any], choice: str = "auto", allow_fallback: bool = False) -> Any:
    gpus = host["gpus"]
    return select_image("0.32.0", host["driver_version"], [g["compute_capability"] for g in gpus],
                        gpu_names=[g["name"] for g in gpus], forward_compat=choice, allow_fallback=allow_fallback)


# ---- the rows --------------------------------------------------------------------------------------------------

def test_row_native_driver_needs_no_compat() -> None:
    """R580 (h200x2, 580.159.04) >= 580.65.06: CUDA 13.0 natively, no switch."""
    decision = choose(facts("h200x2"))
    assert decision.profile.key == "cu130" and decision.forward_compat is None
    assert fc.decide("13.0", "580.159.04", ["NVIDIA H200"]).mode == "native"


@pytest.mark.parametrize("fixture", ["a100_40gb_x4", "h100x8_nvswitch", "l4_x1", "l40s_x4_pcie", "a100_80gb_x8"])
def test_row_datacenter_gpu_on_an_older_branch_runs_cuda_13_through_cuda_compat(fixture: str) -> None:
    """R535 (A100, cited LTSB row), R550 (H100, L4), R560 (L40S), R570 (A100 80GB): cuda-compat-13-0 + the switch."""
    host = facts(fixture)
    decision = choose(host)
    assert decision.profile.key == "cu130" and decision.profile.vllm_version == "0.32.0"
    assert not decision.fallback
    forward = decision.forward_compat
    assert forward is not None and forward["mode"] == "forward"
    assert forward["package"] == "cuda-compat-13-0" and forward["compat_driver"] == "580.65.06"
    assert forward["env"] == {"VLLM_ENABLE_CUDA_COMPATIBILITY": "1"}
    assert host["driver_version"] in decision.reason and "forward compatibility" in decision.reason
    assert image_compat_check(host, {"vllm_version": "0.32.0"}) is None  # preflight lets it through


@pytest.mark.parametrize("gpu", ["NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 5090", "NVIDIA GeForce RTX 3090"])
def test_row_consumer_gpu_on_the_same_driver_is_refused_with_the_driver_to_install(gpu: str) -> None:
    host = facts("a100_40gb_x4", gpu_name=gpu)  # the R535 host's driver, a GeForce card
    with pytest.raises(ImageCompatError) as caught:
        choose(host)
    message = str(caught.value)
    assert "consumer" in message and "install driver >= 580.65.06 (R580+)" in message
    refusal = image_compat_check(host, {"vllm_version": "0.32.0"})
    assert refusal is not None and "install driver >= 580.65.06" in refusal


def test_row_workstation_rtx_only_when_the_user_says_so() -> None:
    host = facts("h100x8_nvswitch", gpu_name="NVIDIA RTX 6000 Ada Generation")
    with pytest.raises(ImageCompatError, match="workstation"):
        choose(host)
    assert choose(host, choice="true").forward_compat["mode"] == "forward"  # the user's value wins


def test_row_gpu_unknown_to_the_catalogue_is_not_assumed_datacenter() -> None:
    with pytest.raises(fc.ForwardCompatError, match="unknown"):
        fc.decide("13.0", "535.183.01", ["NVIDIA Mystery Accelerator"])


@pytest.mark.parametrize("driver", ["525.147.05", "470.256.02"])
def test_row_driver_too_old_even_for_forward_compat_is_refused_with_the_minimum(driver: str) -> None:
    host = facts("a100_40gb_x4", driver=driver)
    with pytest.raises(ImageCompatError) as caught:
        choose(host)
    assert "older than R535" in str(caught.value) and "580.65.06" in str(caught.value)


def test_forward_compat_off_keeps_the_old_refusal_and_the_fallback() -> None:
    host = facts("a100_40gb_x4")
    with pytest.raises(ImageCompatError, match=r"cu130: CUDA 13.0 needs driver >= 580.65.06; cu129: CUDA 12.9 needs "
                       r"driver >= 575.51.03\)\."):
        choose(host, choice="false")
    with pytest.raises(fc.ForwardCompatError, match="forward compatibility is off"):
        fc.decide("13.0", "535.183.01", ["NVIDIA A100-SXM4-40GB"], choice="false")
    old = choose(host, choice="false", allow_fallback=True)
    assert old.fallback and old.profile.vllm_version == "0.6.3.post1"
    # the default of select_image itself (callers that do not ask) is unchanged
    assert select_image("0.32.0", "535.183.01", ["8.0"]).profile.key == "cu121"


def test_forward_compat_comes_before_the_fallback() -> None:
    assert choose(facts("a100_40gb_x4"), allow_fallback=True).profile.key == "cu130"


def test_bad_choice_is_refused() -> None:
    with pytest.raises(fc.ForwardCompatError, match="not one of"):
        fc.decide("13.0", "535.183.01", ["NVIDIA A100-SXM4-40GB"], choice="maybe")


# ---- the image it builds ----------------------------------------------------------------------------------------

def _plan(decision: Any, **options: Any) -> dict[str, Any]:
    profile = image_build.for_cuda_base(decision.profile.as_dict(), "project")
    return image_build.build_plan(profile, repository="vllm-fleet/vllm", base_image=image_build.resolve_base_image(
        profile), base_image_id=BASE_ID, template_sha256=template_sha256(), forward_compat=decision.forward_compat,
        **options)


def test_the_forward_compatible_image_sets_the_switch_and_carries_the_compat_wheel() -> None:
    decision = choose(facts("a100_40gb_x4"))
    plan = _plan(decision, cuda_compat_sha256="a" * 64)
    wheel = plan["cuda_compat_wheel"]
    assert wheel["requirement"] == "vllm-fleet-cuda-compat-13-0==580.65.06"
    assert wheel["requirement"] in plan["render"]["requirements"]
    env = plan["render"]["env"]
    assert env["VLLM_ENABLE_CUDA_COMPATIBILITY"] == "1"
    # the path vLLM puts first on LD_LIBRARY_PATH (env_override.py:69) is where the wheel's libraries land
    assert env["VLLM_CUDA_COMPATIBILITY_PATH"] == "/opt/venv/lib/python3.11/site-packages/vllm_fleet_cuda_compat_13_0/lib"
    assert plan["render"]["labels"]["org.vllm-fleet.cuda.forward-compat"] == "cuda-compat-13-0"
    native = _plan(choose(facts("h200x2")))
    assert native["tag"] != plan["tag"] and "cuda_compat" not in native["tag_inputs"]
    assert not native["cuda_compat_wheel"] and "VLLM_ENABLE_CUDA_COMPATIBILITY" not in native["render"]["env"]
    assert _plan(decision, cuda_compat_sha256="b" * 64)["tag"] != plan["tag"]  # the libraries are an input


def test_the_forward_compatible_image_without_libraries_is_refused_with_the_fix() -> None:
    with pytest.raises(image_build.ImageBuildError, match="vllm_image_cuda_compat_dir"):
        _plan(choose(facts("a100_40gb_x4")))
    with pytest.raises(image_build.ImageBuildError, match="wheelhouse"):
        _plan(choose(facts("a100_40gb_x4")), cuda_compat_sha256="a" * 64, install_mode="index")


def test_the_compat_wheel_script_packs_the_libraries_pip_can_install(tmp_path: Path) -> None:
    src = tmp_path / "compat"
    src.mkdir()
    (src / "libcuda.so.580.65.06").write_bytes(b"\x7fELF fake")
    (src / "libcuda.so.1").symlink_to("libcuda.so.580.65.06")
    (src / "libnvidia-ptxjitcompiler.so.580.65.06").write_bytes(b"\x7fELF ptx")
    wheel = fc.compat_wheel("13.0", "580.65.06", "3.11")
    run = subprocess.run([sys.executable, str(ROLE / "files" / "cuda_compat_wheel.py"), str(src), str(tmp_path / "wh"),
                          wheel["dist"], wheel["module"], wheel["version"], wheel["filename"]],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    with zipfile.ZipFile(tmp_path / "wh" / wheel["filename"]) as archive:
        names = set(archive.namelist())
        assert f"{wheel['module']}/lib/libcuda.so.1" in names  # the link became a file
        metadata = archive.read(f"{wheel['module']}-580.65.06.dist-info/METADATA").decode()
        record = archive.read(f"{wheel['module']}-580.65.06.dist-info/RECORD").decode()
    assert "Name: vllm-fleet-cuda-compat-13-0" in metadata and "Version: 580.65.06" in metadata
    assert all(name in record for name in names)
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                          str(target), str(tmp_path / "wh" / wheel["filename"])], capture_output=True, text=True,
                         check=False)
    assert pip.returncode == 0, pip.stderr
    assert (target / wheel["module"] / "lib" / "libcuda.so.1").read_bytes() == b"\x7fELF fake"


def test_the_compat_wheel_script_refuses_a_folder_without_libcuda(tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(ROLE / "files" / "cuda_compat_wheel.py"), str(tmp_path), str(tmp_path),
                          "d", "m", "1", "m-1-py3-none-linux_x86_64.whl"], capture_output=True, text=True, check=False)
    assert run.returncode == 1 and "no libcuda.so" in run.stderr
    assert not io.StringIO(run.stdout).read()


# ---- preflight: refused before any host changes ---------------------------------------------------------------

def _record(host: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"facts": host, "plan": {"vllm_version": "0.32.0"}, **extra}


def test_preflight_refuses_forward_compat_without_the_compat_files() -> None:
    host = facts("a100_40gb_x4")
    errors = check_fleet({"gpu1": _record(host)}, image_compat_check)
    assert len(errors) == 1 and errors[0].startswith("gpu1: ") and "vllm_image_cuda_compat_dir" in errors[0]
    assert "upgrade the driver to >= 580.65.06" in errors[0]
    assert check_fleet({"gpu1": _record(host, image_cuda_compat_dir="/srv/cuda-compat-13-0")}, image_compat_check) == []
    assert check_fleet({"h200": _record(facts("h200x2"))}, image_compat_check) == []  # native: nothing asked


def test_preflight_honours_forward_compat_off_and_refuses_geforce() -> None:
    off = check_fleet({"gpu1": _record(facts("a100_40gb_x4"), image_forward_compat="false",
                                       image_cuda_compat_dir="/srv/c")}, image_compat_check)
    assert len(off) == 1 and "needs driver >= 580.65.06" in off[0]
    geforce = check_fleet({"pc": _record(facts("a100_40gb_x4", gpu_name="NVIDIA GeForce RTX 4090"),
                                         image_cuda_compat_dir="/srv/c")}, image_compat_check)
    assert len(geforce) == 1 and "consumer" in geforce[0] and "install driver >= 580.65.06" in geforce[0]
