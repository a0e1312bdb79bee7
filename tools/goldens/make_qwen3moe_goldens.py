#!/usr/bin/env python3
"""Makes the Qwen3-MoE goldens in tests/data/goldens/qwen3moe/ with Hugging Face transformers.

A tiny random-weight Qwen3MoeForCausalLM (4 layers, 4 query / 2 key-value heads of head_dim 64, so
head_dim != hidden / heads as in Qwen3-30B-A3B, 16 experts top-4 with the top-k renormalised as the
released checkpoints set it, no shared expert, full NEOX rotary at theta 1e6), every parameter
perturbed away from its initial value (golden_common.perturb). Weights are rounded to bfloat16 and
saved as BF16 while the forward runs in float32 on those exact values.

Written files: hf/ (the checkpoint), logits_prefill.npy [n_tokens, vocab], logits_decode.npy
[n_tokens - K, vocab] (prefill K tokens with a cache, then one at a time), goldens.json.

Regenerate (CPU only, seconds; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_qwen3moe_goldens.py --out tests/data/goldens/qwen3moe
"""

import argparse
import sys

import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

from golden_common import perturb, write_goldens

SEED = 20261201


def config() -> Qwen3MoeConfig:
    return Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=96,  # the dense width; unused (every layer is MoE)
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        moe_intermediate_size=32,
        num_experts=16,
        num_experts_per_tok=4,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/qwen3moe")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    cfg = config()
    model = Qwen3MoeForCausalLM(cfg)
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    perturb(model, torch.Generator().manual_seed(SEED))
    model.eval()
    write_goldens(model, cfg, args.out, generator="tools/goldens/make_qwen3moe_goldens.py", seed=SEED,
                  n_tokens=160, decode_prefill=97, routers=[layer.mlp.gate for layer in model.model.layers],
                  n_experts=cfg.num_experts, top_k=cfg.num_experts_per_tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
