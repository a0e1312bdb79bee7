#!/usr/bin/env python3
"""Makes the Mixtral goldens in tests/data/goldens/mixtral/ with Hugging Face transformers.

A tiny random-weight MixtralForCausalLM (4 layers, 2 query / 1 key-value heads of 64, 8 experts
top-2 as Mixtral-8x7B, rotate-half rotary at theta 1e6, which llama.cpp's files carry as NORM rotary
on permuted q/k rows), every parameter perturbed away from its initial value
(golden_common.perturb). Weights are rounded to bfloat16 and saved as BF16 while the forward runs
in float32 on those exact values.

Written files: hf/ (the checkpoint), logits_prefill.npy [n_tokens, vocab], logits_decode.npy
[n_tokens - K, vocab] (prefill K tokens with a cache, then one at a time), goldens.json.

Regenerate (CPU only, seconds; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_mixtral_goldens.py --out tests/data/goldens/mixtral
"""

import argparse
import sys

import torch
from transformers import MixtralConfig, MixtralForCausalLM

from golden_common import perturb, write_goldens

SEED = 20261202


def config() -> MixtralConfig:
    return MixtralConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=64,  # the experts' width
        num_hidden_layers=4,
        num_attention_heads=2,  # heads of 64 (hidden / heads, as Mixtral's): a width the GPU kernels have
        num_key_value_heads=1,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        num_local_experts=8,
        num_experts_per_tok=2,
        sliding_window=None,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6},
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/mixtral")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    cfg = config()
    model = MixtralForCausalLM(cfg)
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    perturb(model, torch.Generator().manual_seed(SEED))
    model.eval()
    layers = model.model.layers
    routers = [(getattr(layer, "mlp", None) or layer.block_sparse_moe).gate for layer in layers]
    write_goldens(model, cfg, args.out, generator="tools/goldens/make_mixtral_goldens.py", seed=SEED,
                  n_tokens=150, decode_prefill=89, routers=routers, n_experts=cfg.num_local_experts,
                  top_k=cfg.num_experts_per_tok)
    return 0


if __name__ == "__main__":
    sys.exit(main())
