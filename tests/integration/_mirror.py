"""A real HTTP model mirror on 127.0.0.1 for the staging tests (stage playbook, fleet lab).

:class:`Mirror` serves files under ``/<name>/`` with a manifest (``{"revision", "files": [{"path", "size",
"sha256"}]}``, the format ``vllm_fleet_model: {url: ...}`` reads), honours ``Range: bytes=N-`` (206), logs every
request with its Range header, can cut a file's full-body GETs after :attr:`Mirror.cut_at` bytes (an interrupted
transfer) and can serve other bytes than the manifest lists (a corrupted file).

:func:`tiny_safetensors` is the tiny model's checkpoint (plugins/module_utils/tiny_model.py's LlamaForCausalLM
config): every tensor vLLM's Llama loader expects, seeded normal(0, 0.02) values in the config's dtype (bf16),
RMSNorm weights 1, in the safetensors layout (8-byte little-endian header length, JSON header, raw data).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import struct
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Mirror:
    """The files by URL path, and what the handler did (requests with their Range headers)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.files: dict[str, bytes] = {}
        self.cut: set[str] = set()  # URL paths whose full-body GETs stop after cut_at bytes
        self.cut_at = 1 << 20
        self.log: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        self.url = ""

    def publish(self, revision: str, files: Mapping[str, bytes], served: Mapping[str, bytes] | None = None) -> None:
        """Put ``files`` at /<name>/ with a manifest of them; ``served`` overrides the bytes really served."""
        manifest = {"revision": revision, "files": [
            {"path": path, "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
            for path, data in sorted(files.items())]}
        with self.lock:
            self.files = {f"/{self.name}/{n}": d for n, d in {**files, **(served or {})}.items()}
            self.files[f"/{self.name}/manifest.json"] = json.dumps(manifest).encode()

    def requests(self, path: str, method: str = "GET") -> list[str]:
        """The Range headers of the requests for ``/<name>/<path>`` ("" for a whole-file request)."""
        with self.lock:
            return [r for m, p, r in self.log if p == f"/{self.name}/{path}" and m == method]


def _handler(mirror: Mirror) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _serve(self, body: bool) -> None:
            with mirror.lock:
                data = mirror.files.get(self.path)
                mirror.log.append((self.command, self.path, self.headers.get("Range", "")))
                cut = self.path in mirror.cut and not self.headers.get("Range")
            if data is None:
                self.send_error(404)
                return
            match = re.match(r"bytes=(\d+)-$", self.headers.get("Range", ""))
            start = int(match.group(1)) if match else 0
            self.send_response(206 if match else 200)
            if match:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data) - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body:
                self.wfile.write(data[start:mirror.cut_at] if cut else data[start:])
                if cut:
                    self.wfile.flush()
                    self.close_connection = True

        def do_GET(self) -> None:
            self._serve(True)

        def do_HEAD(self) -> None:
            self._serve(False)

    return Handler


@contextmanager
def serving(mirror: Mirror, port: int) -> Iterator[Mirror]:
    """Serve ``mirror`` on 127.0.0.1:``port`` (a thread per request) until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(mirror))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    mirror.url = f"http://127.0.0.1:{port}/{mirror.name}"
    try:
        yield mirror
    finally:
        server.shutdown()
        server.server_close()


def _bf16(values: list[float]) -> bytes:
    """float32 -> bfloat16 by truncation (the upper two bytes of each little-endian float32)."""
    packed = struct.pack(f"<{len(values)}f", *values)
    return b"".join(packed[i + 2:i + 4] for i in range(0, len(packed), 4))


def tiny_safetensors(config: Mapping[str, Any], seed: int) -> bytes:
    """The checkpoint of a LlamaForCausalLM ``config`` (model.safetensors), seeded values, bf16."""
    hidden, inter = int(config["hidden_size"]), int(config["intermediate_size"])
    heads, kv_heads = int(config["num_attention_heads"]), int(config["num_key_value_heads"])
    head_dim = int(config.get("head_dim") or hidden // heads)
    vocab, layers = int(config["vocab_size"]), int(config["num_hidden_layers"])
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden), "model.norm.weight": (hidden,)}
    if not config.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = (vocab, hidden)
    for i in range(layers):
        prefix = f"model.layers.{i}."
        shapes.update({
            prefix + "self_attn.q_proj.weight": (heads * head_dim, hidden),
            prefix + "self_attn.k_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.v_proj.weight": (kv_heads * head_dim, hidden),
            prefix + "self_attn.o_proj.weight": (hidden, heads * head_dim),
            prefix + "mlp.gate_proj.weight": (inter, hidden),
            prefix + "mlp.up_proj.weight": (inter, hidden),
            prefix + "mlp.down_proj.weight": (hidden, inter),
            prefix + "input_layernorm.weight": (hidden,),
            prefix + "post_attention_layernorm.weight": (hidden,),
        })
    rng = random.Random(seed)
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs, offset = [], 0
    for name in sorted(shapes):
        count = 1
        for dim in shapes[name]:
            count *= dim
        if name.endswith("norm.weight"):
            blob = _bf16([1.0] * count)
        else:
            blob = _bf16([rng.gauss(0.0, 0.02) for _i in range(count)])
        header[name] = {"dtype": "BF16", "shape": list(shapes[name]), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)  # the data starts 8-byte aligned
    return struct.pack("<Q", len(head)) + head + b"".join(blobs)
