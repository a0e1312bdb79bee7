#!/usr/bin/env python3
"""Makes the Phi-3.5-MoE goldens in tests/data/goldens/phimoe/ with Hugging Face transformers.

A tiny random-weight PhimoeForCausalLM (4 layers, 2 query / 1 key-value heads of 64, 16 experts
top-2 chosen by sparsemixer as Phi-3.5-MoE, LayerNorm with biases, q/k/v/o and lm-head biases,
longrope rotary with distinct short and long factors and an mscale), every parameter perturbed away
from its initial value (golden_common.perturb). Weights are rounded to bfloat16 and saved as BF16
while the forward runs in float32 on those exact values.

The original context is 64 tokens, and logits_short.npy holds a forward of the first 48 tokens
alone, inside it. transformers 5.17 computed all three outputs with the short factor set, the
150-token ones too (tests/py/test_goldens_phimoe.py says how that was measured and how the test
meets it); mox, as llama.cpp, takes the long set once a sequence's context exceeds 64.

Written files: hf/ (the checkpoint), logits_prefill.npy [n_tokens, vocab], logits_decode.npy
[n_tokens - K, vocab], logits_short.npy [48, vocab], goldens.json.

Regenerate (CPU only, seconds; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_phimoe_goldens.py --out tests/data/goldens/phimoe
"""

import argparse
import sys

import torch
from transformers import PhimoeConfig, PhimoeForCausalLM

from golden_common import perturb, write_goldens

SEED = 20261203
HEAD_DIM = 64


def factors(gen: torch.Generator, low: float, high: float) -> list:
    """HEAD_DIM / 2 rotary frequency divisors, ascending from low to high with jitter."""
    base = torch.linspace(low, high, HEAD_DIM // 2)
    return [float(v) for v in base * (1 + 0.05 * torch.rand(HEAD_DIM // 2, generator=gen))]


def config() -> PhimoeConfig:
    gen = torch.Generator().manual_seed(SEED + 1)
    return PhimoeConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=64,  # the experts' width
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=HEAD_DIM,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        num_local_experts=16,
        num_experts_per_tok=2,
        router_jitter_noise=0.01,
        input_jitter_noise=0.0,
        attention_bias=True,
        lm_head_bias=True,
        sliding_window=None,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "longrope",
            "rope_theta": 10000.0,
            "short_factor": factors(gen, 1.0, 1.5),
            "long_factor": factors(gen, 1.0, 12.0),
            "short_mscale": 1.25,
            "long_mscale": 1.25,
            "original_max_position_embeddings": 64,
        },
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/phimoe")
    args = ap.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    cfg = config()
    model = PhimoeForCausalLM(cfg)
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    perturb(model, torch.Generator().manual_seed(SEED))
    model.eval()
    routers = []
    for layer in model.model.layers:
        moe = getattr(layer, "mlp", None) or layer.block_sparse_moe
        routers.append(getattr(moe, "router", None) or moe.gate)
    write_goldens(model, cfg, args.out, generator="tools/goldens/make_phimoe_goldens.py", seed=SEED,
                  n_tokens=150, decode_prefill=89, routers=routers, n_experts=cfg.num_local_experts,
                  top_k=cfg.num_experts_per_tok, short_prefill=48)
    return 0


if __name__ == "__main__":
    sys.exit(main())
