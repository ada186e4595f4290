"""The cuda variant of the vllm_image role, built for real (issue 31) on the project's debootstrap base.

- built once by scripts/testbed/80-vllm-image-cuda.sh (playbooks/image.yml on the local inventory, vLLM 0.32.0 cu130,
  BuildKit, for the H200 fixture's driver and compute capability), reference in .cache/vllm-image-cuda-ref;
- inside it, without a GPU: torch is the table's CUDA build, vLLM's compiled extensions are there and need nothing
  but the driver's libcuda.so.1, the GPU architectures embedded in them (ELF .nv_fatbin, read by
  scripts/image_cuda_check.py) cover the table's compute capabilities, and vLLM's own parser reads the fleet's
  rendered serve commands (scripts/vllm_serve_parse.py);
- its labels say which base and why, its environment asks the NVIDIA container runtime for the GPUs.

Opt-in lane (``make image-cuda``): a 3.7 GB wheelhouse and a 9.5 GB image; the marker keeps it out of the other lanes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = [pytest.mark.integration, pytest.mark.image_cuda]

ROOT = Path(__file__).resolve().parents[3]
REF_FILE = Path(os.environ.get("VLLM_IMAGE_CUDA_REF", ROOT / ".cache" / "vllm-image-cuda-ref"))

sys.path.insert(0, str(ROOT / "collections"))
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.deploy.launch import (  # noqa: E402
    launch_record,
    launch_settings,
)
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import get_profile  # noqa: E402
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.model_files import (  # noqa: E402
    plan_for_model,
)

from tests.integration.preflight.test_serve_args_parse import same  # noqa: E402  (the same comparison as the cpu lane)

H200 = json.loads((ROOT / "tests/fixtures/gpu/h200x2/expected_facts.json").read_text())
LLAMA_8B = json.loads((ROOT / "tests/fixtures/planner/models/llama-3.1-8b/config.json").read_text())
ROW = get_profile("cu130", "0.32.0")


def _run(ref: str, *args: str, env: dict[str, str] | None = None, mounts: dict[str, str] | None = None) -> str:
    cmd = ["docker", "run", "--rm", "--network", "none", "--entrypoint", "/opt/venv/bin/python"]
    for key, value in (env or {}).items():
        cmd += ["-e", f"{key}={value}"]
    for host, container in (mounts or {}).items():
        cmd += ["-v", f"{host}:{container}:ro"]
    result = subprocess.run([*cmd, ref, *args], capture_output=True, text=True, check=False, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


@pytest.fixture(scope="module")
def image_ref() -> str:
    if not REF_FILE.exists():
        result = subprocess.run(["bash", "scripts/testbed/80-vllm-image-cuda.sh"], cwd=ROOT, capture_output=True,
                                text=True, check=False)
        assert result.returncode == 0, result.stdout + result.stderr
        print(result.stdout)
    return REF_FILE.read_text().strip()


@pytest.fixture(scope="module")
def inspect(image_ref: str) -> dict[str, Any]:
    out = subprocess.run(["docker", "image", "inspect", image_ref], capture_output=True, text=True, check=True)
    data: dict[str, Any] = json.loads(out.stdout)[0]
    return data


@pytest.fixture(scope="module")
def contents(image_ref: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_run(image_ref, "/check/image_cuda_check.py",
                                           mounts={str(ROOT / "scripts"): "/check"}))
    return data


def test_built_on_the_project_base_with_the_reason_and_the_nvidia_environment(inspect: dict[str, Any]) -> None:
    labels = inspect["Config"]["Labels"]
    assert labels["org.vllm-fleet.variant"] == "cuda" and labels["org.vllm-fleet.profile"] == "cu130"
    assert labels["org.opencontainers.image.base.name"] == "vllm-fleet/debian:bookworm"
    assert labels["org.vllm-fleet.base.kind"] == "project" and "nvidia-* wheels" in labels["org.vllm-fleet.base.reason"]
    assert labels["org.vllm-fleet.build-backend"] == "buildkit"
    assert labels["org.vllm-fleet.cuda.version"] == ROW.cuda_version
    env = dict(item.split("=", 1) for item in inspect["Config"]["Env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == "all" and env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    print(f"\n[image-cuda] size {inspect['Size'] / 1e9:.2f} GB")


def test_torch_is_the_tables_cuda_build_and_vllm_the_tables_release(contents: dict[str, Any]) -> None:
    assert contents["torch_cuda"] == ROW.torch_cuda
    assert contents["torch"].split("+")[0] == ROW.torch_version and contents["vllm"] == ROW.vllm_version
    libraries = contents["cuda_libraries"]
    assert any(name.startswith("libcudart.so.13") for name in libraries)
    assert any(name.startswith("libnccl.so") for name in libraries)


def test_compiled_extensions_are_there_and_need_only_the_driver(contents: dict[str, Any]) -> None:
    extensions = contents["extensions"]
    for name in ("vllm/_C_stable_libtorch.abi3.so", "vllm/_moe_C_stable_libtorch.abi3.so",
                 "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so", "vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"):
        assert name in extensions, sorted(extensions)
    # the loader's only complaint without a GPU: libcuda.so.1, which the NVIDIA container runtime mounts
    assert all(e["import"] in ("ok", "needs_driver") for e in extensions.values()), extensions


def _covered(cc: str, sm: list[int], ptx: list[int]) -> bool:
    """CUDA's binary compatibility: a cubin for sm_XY runs on X.Z for Z >= Y (same major); PTX for compute_XY is
    compiled by the driver for any X.Y or newer."""
    major, minor = (int(x) for x in cc.split("."))
    value = major * 10 + minor
    return any(s // 10 == major and s % 10 <= minor for s in sm) or any(p <= value for p in ptx)


def test_embedded_gpu_architectures_cover_the_tables_compute_capabilities(contents: dict[str, Any]) -> None:
    core = contents["extensions"]["vllm/_C_stable_libtorch.abi3.so"]
    moe = contents["extensions"]["vllm/_moe_C_stable_libtorch.abi3.so"]
    print(f"\n[image-cuda] _C cubins {core['sm']} ptx {core['ptx']}; _moe_C cubins {moe['sm']} ptx {moe['ptx']}")
    for entry in (core, moe):
        missing = [cc for cc in ROW.compute_capabilities if not _covered(cc, entry["sm"], entry["ptx"])]
        assert not missing, (missing, entry)
    # the architectures with their own cubins in vLLM's core kernels (the rest runs from these or from PTX)
    assert {75, 80, 86, 89, 90, 100, 120} <= set(core["sm"])
    assert contents["extensions"]["vllm/vllm_flash_attn/_vllm_fa3_C.abi3.so"]["sm"] == [90]  # FA3: Hopper only


def test_vllms_parser_reads_the_fleets_rendered_serve_commands(image_ref: str, tmp_path: Path) -> None:
    settings = launch_settings({}, address="127.0.0.1", model_dir="/srv/models/llama-3.1-8b")
    plan = plan_for_model(H200, LLAMA_8B, vllm_version="0.32.0")
    record = launch_record(plan, host="h200", settings=settings)
    cases, configs = [], []
    for i, replica in enumerate(record["replicas"]):
        argv = list(replica["argv"])
        assert argv[0] == "vllm"
        (tmp_path / f"{i}.yaml").write_text(yaml.safe_dump(replica["engine_args"], sort_keys=True))
        config = record["config_mount"]
        cases.append([f"/cases/{i}.yaml" if a == config else a for a in argv[1:]])
        configs.append(replica["engine_args"])
    cases.append(["serve", "/srv/models/llama-3.1-8b", "--worker-use-ray"])  # a removed flag: must be refused
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    for path in (tmp_path, *tmp_path.iterdir()):  # the image runs as uid 1000
        path.chmod(0o755 if path.is_dir() else 0o644)
    results = json.loads(_run(image_ref, "/check/vllm_serve_parse.py", "parse", "/cases/cases.json",
                              env={"VLLM_FLEET_PARSE_DEVICE": "cuda"},
                              mounts={str(ROOT / "scripts"): "/check", str(tmp_path): "/cases"}))
    assert len(results) == len(cases) and not results[-1]["ok"]
    for result, engine_args in zip(results[:-1], configs, strict=True):
        assert result["ok"], result
        for key, value in engine_args.items():
            parsed = result["args"].get(key.replace("-", "_"))
            assert same(parsed, value), (key, parsed, value)
