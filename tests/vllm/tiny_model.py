"""Writes a tiny random-weight Llama that vLLM's CPU engine serves: no model
hub, a few megabytes, seeded so every run writes the same model.

- ``LlamaConfig``: 2 layers, hidden size 128, 2 attention heads of 64
  (vLLM's CPU attention kernels take heads 64 wide, not 16), 2048 positions;
- a word-level tokenizer over a fixed vocabulary (``w0`` … ``w{N-1}``, with
  ``<unk>``, ``<s>`` and ``</s>``), saved as ``tokenizer.json`` for
  ``PreTrainedTokenizerFast``.

    python tiny_model.py DIR
"""

import sys

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

VOCAB_WORDS = 500
SPECIAL = ["<unk>", "<s>", "</s>"]


def main():
    out = sys.argv[1]
    vocab = {token: i for i, token in enumerate(SPECIAL + [f"w{i}" for i in range(VOCAB_WORDS)])}
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(out)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"],
        torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)


if __name__ == "__main__":
    main()
