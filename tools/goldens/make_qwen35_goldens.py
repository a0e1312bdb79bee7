#!/usr/bin/env python3
"""Makes the dense Qwen3.5/3.6 goldens in tests/data/goldens/qwen35/ with Hugging Face transformers.

A tiny random-weight Qwen3_5ForCausalLM (8 layers at the 3:1 DeltaNet:attention pattern, 2 key /
4 value DeltaNet heads, gated attention with partial rotary 0.25 at theta 1e7, a SwiGLU MLP of width
192 in every layer), its parameters drawn as make_qwen35moe_goldens.py draws them (zero-centred norms
around 0, the gated DeltaNet norm around 1, random A_log, dt_bias and conv kernel). Weights are
rounded to bfloat16 and saved as BF16 while the forward runs in float32 on those exact values.

Written files: hf/ (the checkpoint), logits_prefill.npy [n_tokens, vocab], logits_decode.npy
[n_tokens - K, vocab] (prefill K tokens with a cache, then one at a time; K = 137 ends mid-chunk of
the chunked delta rule), goldens.json.

Regenerate (CPU only, seconds; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_qwen35_goldens.py --out tests/data/goldens/qwen35
"""

import argparse
import sys

import torch
from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

from golden_common import write_goldens
from make_qwen35moe_goldens import perturb

SEED = 20261202


def config() -> Qwen3_5TextConfig:
    return Qwen3_5TextConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/qwen35")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    cfg = config()
    model = Qwen3_5ForCausalLM(cfg)
    model.set_attn_implementation("eager")
    perturb(model, torch.Generator().manual_seed(SEED))
    model.eval()
    write_goldens(model, cfg, args.out, generator="tools/goldens/make_qwen35_goldens.py", seed=SEED,
                  n_tokens=200, decode_prefill=137, routers=[], n_experts=0, top_k=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
