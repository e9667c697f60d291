"""Writes a tiny LoRA adapter for the model of :mod:`tiny_model`, in PEFT's
format (``adapter_config.json``, ``adapter_model.safetensors``), which
vLLM loads with ``--enable-lora --lora-modules NAME=DIR``: rank 8 on
``q_proj`` and ``v_proj`` of both layers, seeded random weights, a few
kilobytes. The test needs an adapter vLLM accepts, not a useful one.

    python tiny_lora.py DIR
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

#: The model's shape (tiny_model.py): hidden size 128, 2 layers, 2 heads
#: (and 2 key-value heads) of 64.
HIDDEN = 128
LAYERS = 2
RANK = 8


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(1)
    weights = {}
    for layer in range(LAYERS):
        for module in ("q_proj", "v_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            weights[f"{prefix}.lora_A.weight"] = torch.randn(RANK, HIDDEN) * 0.01
            weights[f"{prefix}.lora_B.weight"] = torch.randn(HIDDEN, RANK) * 0.01
    save_file(weights, os.path.join(out, "adapter_model.safetensors"))
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": RANK,
        "lora_alpha": 16,
        "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"],
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "base_model_name_or_path": None,
    }
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=1)


if __name__ == "__main__":
    main()
