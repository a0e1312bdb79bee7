#!/usr/bin/env python3
"""Makes the Qwen3-MoE goldens in tests/data/goldens/qwen3moe/ with Hugging Face transformers.

A tiny random-weight Qwen3MoeForCausalLM (4 layers, 4 query / 2 key-value heads of head_dim 64, so
head_dim != hidden / heads as in Qwen3-30B-A3B, 16 experts top-4 with the top-k renormalised as the
released checkpoints set it, no shared expert, full NEOX rotary at theta 1e6) with every parameter
perturbed away from its initial value: the RMSNorm weights (used as is, no +1) are random around 1,
the q/k norms too, and the routers are scaled so routing is far from uniform.

Weights are rounded to bfloat16 and saved as BF16 (as real checkpoints are) while the forward runs in
float32 on those exact values, so every engine can hold the weights losslessly in F32.

Written files (all small):
  hf/config.json, hf/generation_config.json, hf/model.safetensors   the checkpoint (save_pretrained)
  logits_prefill.npy            [n_tokens, vocab] float32: one forward over the whole prompt
  logits_decode.npy             [n_tokens - K, vocab] float32: prefill K tokens with a cache, then feed
                                prompt tokens K..n-1 one at a time (teacher forcing); row i is the
                                logits at position K + i
  goldens.json                  versions, seed, prompt ids, K, config, expert usage, file hashes

Regenerate (CPU only, seconds; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_qwen3moe_goldens.py --out tests/data/goldens/qwen3moe
"""

import argparse
import copy
import hashlib
import json
import math
import os
import platform
import sys

import numpy as np
import torch
import transformers
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

SEED = 20261201
N_TOKENS = 160
DECODE_PREFILL = 97


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


def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Draws every parameter from a distribution chosen by its role (see module docstring)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            def normal(std, mean=0.0):
                return torch.randn(p.shape, generator=gen) * std + mean

            if name.endswith("norm.weight"):  # plain RMSNorm weights, used as is
                v = normal(0.3, 1.0)
            elif name.endswith("embed_tokens.weight"):
                v = normal(1.0)
            elif name == "lm_head.weight":  # logits with std ~3: peaked distributions, clear argmax
                v = normal(3.0 / math.sqrt(p.shape[-1]))
            elif name.endswith("mlp.gate.weight"):  # router: logits with std ~3, far from uniform
                v = normal(0.3)
            else:  # projections: fan-in scaling keeps activations O(1); fan-in is the last axis
                v = normal(1.0 / math.sqrt(p.shape[-1]))
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/qwen3moe")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)

    cfg = config()
    model = Qwen3MoeForCausalLM(cfg)
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    perturb(model, gen)
    model.eval()

    os.makedirs(args.out, exist_ok=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(os.path.join(args.out, "hf"))

    rng = np.random.default_rng(SEED)
    prompt = rng.integers(0, cfg.vocab_size, size=N_TOKENS).astype(np.int64)
    ids = torch.from_numpy(prompt)[None, :]

    usage = {}  # layer -> how often each expert was picked over the prefill

    def count_routes(layer):
        def fn(module, inputs, output):
            picked = [o for o in output if torch.is_tensor(o) and not o.is_floating_point()]
            usage[layer] = torch.bincount(picked[0].reshape(-1), minlength=cfg.num_experts).tolist()
        return fn

    handles = [model.model.layers[L].mlp.gate.register_forward_hook(count_routes(L))
               for L in range(cfg.num_hidden_layers)]
    with torch.no_grad():
        prefill = model(input_ids=ids, use_cache=False).logits[0].float().numpy()
    for h in handles:
        h.remove()

    with torch.no_grad():
        out = model(input_ids=ids[:, :DECODE_PREFILL], use_cache=True)
        cache = out.past_key_values
        decode = []
        for t in range(DECODE_PREFILL, N_TOKENS):
            out = model(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            decode.append(out.logits[0, -1].float().numpy())
    decode = np.stack(decode)

    np.save(os.path.join(args.out, "logits_prefill.npy"), prefill.astype(np.float32))
    np.save(os.path.join(args.out, "logits_decode.npy"), decode.astype(np.float32))

    files = sorted(os.path.relpath(os.path.join(d, n), args.out) for d, _, ns in os.walk(args.out) for n in ns
                   if n != "goldens.json")
    meta = {
        "generator": "tools/goldens/make_qwen3moe_goldens.py",
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "seed": SEED,
        "device": "cpu",
        "dtype": "float32 compute; weights bfloat16-exact, stored as BF16",
        "attn_implementation": "eager",
        "experts_implementation": "eager",
        "prompt_ids": prompt.tolist(),
        "n_tokens": N_TOKENS,
        "decode_prefill": DECODE_PREFILL,
        "logits_prefill": {"file": "logits_prefill.npy", "shape": list(prefill.shape)},
        "logits_decode": {"file": "logits_decode.npy", "shape": list(decode.shape),
                          "positions": [DECODE_PREFILL, N_TOKENS - 1]},
        "expert_usage_prefill": {str(k): v for k, v in sorted(usage.items())},
        "config": cfg.to_dict(),
        "sha256": {f: sha256(os.path.join(args.out, f)) for f in files},
    }
    with open(os.path.join(args.out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
    max_diff = float(np.abs(decode - prefill[DECODE_PREFILL:]).max())
    print(f"wrote {args.out}: prefill {prefill.shape}, decode {decode.shape}, "
          f"max |decode - prefill| = {max_diff:.3g}, layer 0 expert usage {usage[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
