"""The pure content builder of the tiny model (plugins/module_utils/tiny_model.py)."""

from __future__ import annotations

import builtins
import itertools
import json
from typing import Any

import pytest
from ansible_collections.vllm_fleet.fleet.plugins.module_utils import tiny_model as tm
from ansible_collections.vllm_fleet.fleet.plugins.plugin_utils.planner.rules import CPU_ATTENTION_HEAD_SIZES


@pytest.fixture(scope="module")
def files() -> dict[str, str]:
    return tm.build_tiny_model()


@pytest.fixture(scope="module")
def tokenizer(files: dict[str, str]) -> dict[str, Any]:
    return json.loads(files["tokenizer.json"])


def test_files_are_the_four_hf_files(files: dict[str, str]) -> None:
    assert sorted(files) == sorted(tm.FILENAMES)
    for content in files.values():
        assert content.endswith("\n")
        json.loads(content)


def test_deterministic() -> None:
    assert tm.build_tiny_model() == tm.build_tiny_model()


def test_pure_no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_open(*_a: object, **_k: object) -> None:
        raise AssertionError("the pure builder must not open files")

    monkeypatch.setattr(builtins, "open", no_open)
    assert "config.json" in tm.build_tiny_model()


def test_config_matches_the_tiny_llama(files: dict[str, str]) -> None:
    config = json.loads(files["config.json"])
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["model_type"] == "llama"
    assert (config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]) == (256, 4, 2)
    assert config["head_dim"] == 64 == config["hidden_size"] // config["num_attention_heads"]
    assert config["num_hidden_layers"] == 2
    assert config["vocab_size"] == 512
    assert config["max_position_embeddings"] == 4096
    assert config["torch_dtype"] == "bfloat16"
    assert config["bos_token_id"] == 1 and config["eos_token_id"] == 2


def test_generation_config_tokens(files: dict[str, str]) -> None:
    generation = json.loads(files["generation_config.json"])
    assert generation["bos_token_id"] == 1 and generation["eos_token_id"] == 2


def test_max_position_embeddings_option() -> None:
    files = tm.build_tiny_model(max_position_embeddings=2048)
    assert json.loads(files["config.json"])["max_position_embeddings"] == 2048
    assert json.loads(files["tokenizer_config.json"])["model_max_length"] == 2048


def test_vocab_is_exactly_vocab_size_with_contiguous_ids(tokenizer: dict[str, Any]) -> None:
    vocab = tokenizer["model"]["vocab"]
    assert len(vocab) == 512
    assert sorted(vocab.values()) == list(range(512))
    assert [vocab[t] for t in ("<unk>", "<s>", "</s>")] == [0, 1, 2]


def test_every_byte_has_a_token(tokenizer: dict[str, Any]) -> None:
    vocab = tokenizer["model"]["vocab"]
    byte_map = tm.bytes_to_unicode()
    assert len(set(byte_map.values())) == 256
    assert all(ch in vocab for ch in byte_map.values())


def test_merges_are_well_formed(tokenizer: dict[str, Any]) -> None:
    vocab = tokenizer["model"]["vocab"]
    merges = tokenizer["model"]["merges"]
    assert len(merges) == 512 - 3 - 256
    seen = set(tm.bytes_to_unicode().values())
    for merge in merges:
        left, right = merge.split(" ")
        assert left in seen and right in seen, merge  # parts exist before the merge
        assert vocab[left + right] > max(vocab[left], vocab[right])
        seen.add(left + right)


def _bpe_encode(tokenizer: dict[str, Any], text: str) -> list[int]:
    """Reference byte-level BPE encoder (lowest-rank merge first), independent of `tokenizers`."""
    vocab = tokenizer["model"]["vocab"]
    ranks = {tuple(m.split(" ")): i for i, m in enumerate(tokenizer["model"]["merges"])}
    byte_map = tm.bytes_to_unicode()
    ids = []
    for piece in tm._PRETOKEN_RE.findall(text):
        word = [byte_map[b] for b in piece.encode("utf-8")]
        while len(word) > 1:
            pairs = [(ranks.get((a, b), 10**9), i) for i, (a, b) in enumerate(itertools.pairwise(word))]
            rank, i = min(pairs)
            if rank == 10**9:
                break
            word[i : i + 2] = [word[i] + word[i + 1]]
        ids.extend(vocab[t] for t in word)
    return ids


def test_merges_compress_english_and_bytes_round_trip(tokenizer: dict[str, Any]) -> None:
    text = "The planner computes the key value cache of the fleet."
    ids = _bpe_encode(tokenizer, text)
    assert len(ids) < len(text.encode()) / 2  # trained merges really merge
    inverse = {v: k for k, v in tokenizer["model"]["vocab"].items()}
    byte_of = {ch: b for b, ch in tm.bytes_to_unicode().items()}
    decoded = bytes(byte_of[ch] for i in ids for ch in inverse[i]).decode("utf-8")
    assert decoded == text


def test_tokenizer_json_shape(tokenizer: dict[str, Any]) -> None:
    assert tokenizer["model"]["type"] == "BPE"
    assert tokenizer["pre_tokenizer"]["type"] == "ByteLevel"
    assert tokenizer["decoder"]["type"] == "ByteLevel"
    assert [t["content"] for t in tokenizer["added_tokens"]] == ["<unk>", "<s>", "</s>"]
    assert all(t["special"] for t in tokenizer["added_tokens"])
    assert tokenizer["post_processor"]["special_tokens"]["<s>"]["ids"] == [1]


def test_tokenizer_config_names_the_special_tokens(files: dict[str, str]) -> None:
    config = json.loads(files["tokenizer_config.json"])
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["added_tokens_decoder"]["1"]["content"] == "<s>"
    assert "messages" in config["chat_template"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"hidden_size": 64}, "head_dim 16"),
        ({"hidden_size": 250}, "not a multiple of num_attention_heads"),
        ({"num_key_value_heads": 3}, "not a multiple of num_key_value_heads"),
        ({"dtype": "int8"}, "dtype must be"),
    ],
)
def test_bad_shapes_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tm.build_config(**kwargs)


def test_too_small_vocab_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 259"):
        tm.build_tokenizer(100)


def test_corpus_too_small_for_vocab_is_refused() -> None:
    with pytest.raises(ValueError, match="merges"):
        tm.train_bpe("ab", 5)


def test_head_sizes_are_the_planners() -> None:
    """module_utils runs on the hosts and cannot import the planner, so tiny_model keeps its own copy of vLLM's CPU
    attention head sizes; it must equal the one home, planner/rules.py CPU_ATTENTION_HEAD_SIZES."""
    assert tuple(tm.SUPPORTED_HEAD_DIMS) == CPU_ATTENTION_HEAD_SIZES
