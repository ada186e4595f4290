"""Content of a tiny, weightless Hugging Face model directory that vLLM can serve.

Pure: standard library only, no I/O. ``build_tiny_model()`` returns ``{filename: content}``; the
Ansible module ``vllm_fleet.fleet.tiny_model`` and ``scripts/testbed/40-tiny-model.sh`` write it.

The model is a ``LlamaForCausalLM`` (hidden 256, 4 attention heads, 2 KV heads, head_dim 64,
2 layers, vocab 512, bf16, 4096 positions). It has no weights: vLLM serves it with
``--load-format dummy`` (random weights). head_dim 64 is one the CPU attention kernel supports
(16 crashes it).

The tokenizer is a byte-level BPE in the Hugging Face ``tokenizers`` JSON format: the 256 byte
symbols, 3 special tokens, and BPE merges *trained here* (deterministically) on a small built-in
English text until the vocabulary holds exactly ``vocab_size`` tokens.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any, Final

# What vLLM 0.32 / transformers expect in config.json; kept small so CPU serving is quick.
DEFAULT_HIDDEN_SIZE: Final = 256
DEFAULT_NUM_HEADS: Final = 4
DEFAULT_NUM_KV_HEADS: Final = 2
DEFAULT_NUM_LAYERS: Final = 2
DEFAULT_VOCAB_SIZE: Final = 512
DEFAULT_INTERMEDIATE_SIZE: Final = 512
DEFAULT_MAX_POSITION_EMBEDDINGS: Final = 4096
DEFAULT_DTYPE: Final = "bfloat16"

# The CPU attention kernel of vLLM supports these head sizes (16 crashes it). A host-side copy of the planner's
# rules.CPU_ATTENTION_HEAD_SIZES: module_utils runs on the managed hosts and cannot import the controller's
# plugin_utils; tests/unit/tiny_model/test_tiny_model_content.py checks that the two are equal.
SUPPORTED_HEAD_DIMS: Final = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

UNK_TOKEN: Final = "<unk>"
BOS_TOKEN: Final = "<s>"
EOS_TOKEN: Final = "</s>"
SPECIAL_TOKENS: Final = (UNK_TOKEN, BOS_TOKEN, EOS_TOKEN)  # ids 0, 1, 2 (as in Llama 2)

FILENAMES: Final = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json")

# A plain chat template so /v1/chat/completions works too.
CHAT_TEMPLATE: Final = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)

# Training text for the BPE merges (written for this project).
_CORPUS: Final = """
The fleet takes bare metal servers from a plain operating system to tuned and monitored model
endpoints. Each host reports its graphics processors, memory, interconnect and driver version. The
planner reads those facts, the model configuration and the workload profile, and it computes the
engine arguments: tensor parallel size, memory utilization, maximum model length, block size and the
number of sequences that can run at the same time. The key value cache holds the attention keys and
values of every token in every running request; its size decides how many requests fit. A server
starts, loads the weights, profiles the memory, allocates the cache and then answers health checks.
Requests stream tokens back to the client while the scheduler batches prefill and decode steps.
Prometheus scrapes the metrics endpoint every few seconds and alerts when the queue grows, when the
cache is full, or when the time to first token rises above the target. Operators roll out a new image
one host at a time, wait for the health gate, and roll back when the error rate climbs. This small
model has random weights, so its answers are noise, but the shapes, the tokenizer and the server are
real, and every number the planner predicts can be checked against the log of a running server.
Hello world! What is the capital of France? Paris is the capital of France. One two three four five
six seven eight nine ten. 0 1 2 3 4 5 6 7 8 9 10 100 1000 2026.
"""

# ASCII approximation of the GPT-2 pre-tokenizer regex (the corpus is ASCII).
_PRETOKEN_RE: Final = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte → printable character map used by byte-level BPE."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    mapping = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in mapping:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def train_bpe(corpus: str, num_merges: int) -> list[tuple[str, str]]:
    """Deterministic byte-level BPE training: most frequent pair first, ties by the pair itself.

    Raises ValueError when the corpus cannot yield ``num_merges`` merges.
    """
    byte_map = bytes_to_unicode()
    word_counts: dict[tuple[str, ...], int] = {}
    for piece in _PRETOKEN_RE.findall(corpus):
        word = tuple(byte_map[b] for b in piece.encode("utf-8"))
        word_counts[word] = word_counts.get(word, 0) + 1
    words = list(word_counts.items())
    merges: list[tuple[str, str]] = []
    while len(merges) < num_merges:
        pairs: dict[tuple[str, str], int] = {}
        for word, count in words:
            for pair in itertools.pairwise(word):
                pairs[pair] = pairs.get(pair, 0) + count
        if not pairs:
            raise ValueError(f"the training text yields only {len(merges)} merges, {num_merges} wanted")
        best = min(pairs, key=lambda p: (-pairs[p], p))
        merges.append(best)
        joined = best[0] + best[1]
        new_words = []
        for word, count in words:
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(joined)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words.append((tuple(out), count))
        words = new_words
    return merges


def build_tokenizer(vocab_size: int = DEFAULT_VOCAB_SIZE) -> dict[str, Any]:
    """A Hugging Face ``tokenizers`` JSON document (byte-level BPE) with exactly ``vocab_size`` tokens."""
    base = len(SPECIAL_TOKENS) + 256
    if vocab_size < base:
        raise ValueError(f"vocab_size must be at least {base} (3 special tokens + 256 bytes), got {vocab_size}")
    vocab: dict[str, int] = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for ch in sorted(bytes_to_unicode().values()):
        vocab[ch] = len(vocab)
    merges = train_bpe(_CORPUS, vocab_size - base)
    for left, right in merges:
        vocab[left + right] = len(vocab)
    if len(vocab) != vocab_size:  # a merge produced a token that already existed
        raise ValueError(f"BPE training produced {len(vocab)} distinct tokens, {vocab_size} wanted")
    added_tokens = [
        {
            "id": vocab[tok],
            "content": tok,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for tok in SPECIAL_TOKENS
    ]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens,
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [
                {"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
            ],
            "pair": [
                {"SpecialToken": {"id": BOS_TOKEN, "type_id": 0}},
                {"Sequence": {"id": "A", "type_id": 0}},
                {"SpecialToken": {"id": BOS_TOKEN, "type_id": 1}},
                {"Sequence": {"id": "B", "type_id": 1}},
            ],
            "special_tokens": {BOS_TOKEN: {"id": BOS_TOKEN, "ids": [vocab[BOS_TOKEN]], "tokens": [BOS_TOKEN]}},
        },
        "decoder": dict(byte_level),
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [f"{left} {right}" for left, right in merges],
        },
    }


def build_config(
    *,
    hidden_size: int = DEFAULT_HIDDEN_SIZE,
    num_attention_heads: int = DEFAULT_NUM_HEADS,
    num_key_value_heads: int = DEFAULT_NUM_KV_HEADS,
    num_hidden_layers: int = DEFAULT_NUM_LAYERS,
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    intermediate_size: int = DEFAULT_INTERMEDIATE_SIZE,
    max_position_embeddings: int = DEFAULT_MAX_POSITION_EMBEDDINGS,
    dtype: str = DEFAULT_DTYPE,
) -> dict[str, Any]:
    """config.json of the tiny LlamaForCausalLM; raises ValueError on shapes vLLM's CPU lane rejects."""
    if hidden_size % num_attention_heads:
        raise ValueError(f"hidden_size {hidden_size} is not a multiple of num_attention_heads {num_attention_heads}")
    if num_attention_heads % num_key_value_heads:
        raise ValueError(
            f"num_attention_heads {num_attention_heads} is not a multiple of num_key_value_heads {num_key_value_heads}"
        )
    head_dim = hidden_size // num_attention_heads
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"head_dim {head_dim} is not supported by vLLM's CPU attention; use one of {SUPPORTED_HEAD_DIMS}")
    if dtype not in ("bfloat16", "float16", "float32"):
        raise ValueError(f"dtype must be bfloat16, float16 or float32, got {dtype!r}")
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_attention_heads": num_attention_heads,
        "num_key_value_heads": num_key_value_heads,
        "head_dim": head_dim,
        "num_hidden_layers": num_hidden_layers,
        "vocab_size": vocab_size,
        "max_position_embeddings": max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-05,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "mlp_bias": False,
        "initializer_range": 0.02,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": SPECIAL_TOKENS.index(BOS_TOKEN),
        "eos_token_id": SPECIAL_TOKENS.index(EOS_TOKEN),
        "torch_dtype": dtype,
    }


def build_tokenizer_config(max_position_embeddings: int = DEFAULT_MAX_POSITION_EMBEDDINGS) -> dict[str, Any]:
    """tokenizer_config.json for ``AutoTokenizer`` (PreTrainedTokenizerFast reading tokenizer.json)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS_TOKEN,
        "eos_token": EOS_TOKEN,
        "unk_token": UNK_TOKEN,
        "pad_token": EOS_TOKEN,
        "model_max_length": max_position_embeddings,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(i): {
                "content": tok,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for i, tok in enumerate(SPECIAL_TOKENS)
        },
        "chat_template": CHAT_TEMPLATE,
    }


def _dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


def build_tiny_model(max_position_embeddings: int = DEFAULT_MAX_POSITION_EMBEDDINGS) -> dict[str, str]:
    """Every file of the tiny model directory: ``{filename: UTF-8 text}``. Deterministic."""
    config = build_config(max_position_embeddings=max_position_embeddings)
    generation_config = {
        "_from_model_config": True,
        "bos_token_id": config["bos_token_id"],
        "eos_token_id": config["eos_token_id"],
    }
    return {
        "config.json": _dump(config),
        "generation_config.json": _dump(generation_config),
        "tokenizer.json": _dump(build_tokenizer(config["vocab_size"])),
        "tokenizer_config.json": _dump(build_tokenizer_config(max_position_embeddings)),
    }
