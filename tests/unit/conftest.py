"""Make `ansible_collections.vllm_fleet.fleet` importable (the `make collections` symlink) for every unit test."""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

ROOT = Path(__file__).resolve().parents[2]
_COLLECTIONS = ROOT / "collections"
if not (_COLLECTIONS / "ansible_collections/vllm_fleet/fleet").exists():
    raise RuntimeError("collections/ansible_collections/vllm_fleet/fleet is missing: run `make collections`")
if str(_COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(_COLLECTIONS))


# A real published config.json (tests/fixtures/planner/checkpoints/SOURCES.json: ai-dynamo/aiconfigurator
# aic-core/src/aiconfigurator_core/model_configs/openai--gpt-oss-20b_config.json @ 095f58a5).
GPT_OSS_CONFIG = ROOT / "tests" / "fixtures" / "planner" / "checkpoints" / "gpt-oss-20b" / "config.json"


class MirrorFiles(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, bytes]] = {}

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        data = self.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def model_mirror() -> Iterator[str]:
    config = GPT_OSS_CONFIG.read_bytes()
    weights = b"\x01" * 1000
    manifest = {"revision": "r7", "files": [
        {"path": "config.json", "size": len(config), "sha256": hashlib.sha256(config).hexdigest()},
        {"path": "model.safetensors", "size": len(weights), "sha256": hashlib.sha256(weights).hexdigest()}]}
    MirrorFiles.files = {"/m/gpt-oss-20b/manifest.json": json.dumps(manifest).encode(), "/m/gpt-oss-20b/config.json": config}
    server = ThreadingHTTPServer(("127.0.0.1", 0), MirrorFiles)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/m/gpt-oss-20b"
    server.shutdown()
