#!/usr/bin/env python3
"""Makes the Qwen3.5-MoE goldens in tests/data/goldens/qwen35moe/ with Hugging Face transformers.

A tiny random-weight Qwen3_5MoeForCausalLM (8 layers at the 3:1 DeltaNet:attention pattern, 2 key /
4 value DeltaNet heads, 16 experts top-4 plus a shared expert, partial rotary 0.25, theta 1e7) with
every parameter perturbed away from its initial value, so that no transform can be skipped unnoticed:
zero-centred norm weights are random around 0 (HF multiplies by 1 + w), the gated DeltaNet norm is
random around 1, A_log, dt_bias and the conv kernel are random, and the routers are scaled so routing
is far from uniform.

Weights are rounded to bfloat16 and saved as BF16 (as real checkpoints are) while the forward runs in
float32 on those exact values, so every engine can hold the weights losslessly in F32.

Written files (all small):
  hf/config.json, hf/generation_config.json, hf/model.safetensors   the checkpoint (save_pretrained)
  hf_multimodal_config.json     the same text model inside a Qwen3_5MoeConfig (nested text_config), as
                                multimodal checkpoints ship it; tests use it to build that layout
  logits_prefill.npy            [n_tokens, vocab] float32: one forward over the whole prompt
  logits_decode.npy             [n_tokens - K, vocab] float32: prefill K tokens with a cache, then feed
                                prompt tokens K..n-1 one at a time (teacher forcing); row i is the
                                logits at position K + i
  activations.npz               named layer inputs/outputs for the first tokens (see ACTIVATIONS)
  transforms.json               the GGUF tensors the spec's converter transforms must produce, as
                                position-weighted row checksums and a few full value lists (for the
                                numpy-free C++ test)
  goldens.json                  versions, seed, prompt ids, K, config, file hashes

Regenerate (CPU only, about a minute; needs torch and transformers 5.17 or newer):
  python3 tools/goldens/make_qwen35moe_goldens.py --out tests/data/goldens/qwen35moe
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
from transformers import Qwen3_5MoeConfig, Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

SEED = 20261129
N_TOKENS = 200
DECODE_PREFILL = 137  # not a multiple of the 64-token chunk, so prefill ends mid-chunk
N_ACTIVATION_TOKENS = 24
ACTIVATIONS = {  # name -> (layer, module path inside the decoder layer)
    "l0_mixer": (0, "linear_attn"),
    "l0_moe": (0, "mlp"),
    "l3_mixer": (3, "self_attn"),
    "l3_moe": (3, "mlp"),
}
CHECKSUM_LAYERS = (0, 3)  # one DeltaNet layer, one full-attention layer


def text_config() -> Qwen3_5MoeTextConfig:
    return Qwen3_5MoeTextConfig(
        vocab_size=512,
        hidden_size=128,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=32,
        linear_value_head_dim=32,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=16,
        num_experts_per_tok=4,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 1e7,
            "partial_rotary_factor": 0.25,
            "mrope_section": [3, 3, 2],  # sums to n_rot / 2 = 8, as [11, 11, 10] does for 64
            "mrope_interleaved": True,
        },
    )


def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Draws every parameter from a distribution chosen by its role (see module docstring)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            def normal(std, mean=0.0):
                return torch.randn(p.shape, generator=gen) * std + mean

            if name.endswith("linear_attn.norm.weight"):  # gated norm: plain weight, used as is
                v = normal(0.2, 1.0)
            elif name.endswith("norm.weight"):  # zero-centred: HF uses 1 + w
                v = normal(0.3)
            elif name.endswith("A_log"):  # A in [0.1, 4): decays that neither vanish nor stay at 1
                v = torch.empty(p.shape).uniform_(math.log(0.1), math.log(4.0), generator=gen)
            elif name.endswith("dt_bias"):
                v = torch.empty(p.shape).uniform_(-1.0, 2.0, generator=gen)
            elif name.endswith("conv1d.weight"):
                v = normal(0.5)
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


# ------------------------------------------------------------------------------------------------
# The converter transforms of shared/spec/qwen35moe.md §2.6, written out independently of the C++
# converter, applied to the HF parameters: GGUF tensor name -> float64 array in PyTorch layout
# ([rows, ne0]; ne0 contiguous).


def hf_head_of_gguf_head(h: int, n_k: int, n_v: int) -> int:
    r, g = divmod(h, n_k)  # GGUF tiles value heads: h = r * n_k + g
    return g * (n_v // n_k) + r  # HF groups them by key head: g * (n_v / n_k) + r


def expected_gguf_tensors(model, cfg) -> dict:
    sd = {k: v.detach().to(torch.float64).numpy() for k, v in model.state_dict().items()}
    n_k, n_v, dv = cfg.linear_num_key_heads, cfg.linear_num_value_heads, cfg.linear_value_head_dim
    key_dim = n_k * cfg.linear_key_head_dim
    heads = [hf_head_of_gguf_head(h, n_k, n_v) for h in range(n_v)]
    chans = [heads[j // dv] * dv + j % dv for j in range(n_v * dv)]
    F = cfg.moe_intermediate_size

    out = {
        "token_embd.weight": sd["model.embed_tokens.weight"],
        "output_norm.weight": 1.0 + sd["model.norm.weight"],
        "output.weight": sd["lm_head.weight"],
    }
    for L in CHECKSUM_LAYERS:
        p = f"model.layers.{L}."
        b = f"blk.{L}."
        out[b + "attn_norm.weight"] = 1.0 + sd[p + "input_layernorm.weight"]
        out[b + "post_attention_norm.weight"] = 1.0 + sd[p + "post_attention_layernorm.weight"]
        if cfg.layer_types[L] == "linear_attention":
            la = p + "linear_attn."
            qkv = sd[la + "in_proj_qkv.weight"]
            out[b + "attn_qkv.weight"] = np.concatenate([qkv[: 2 * key_dim], qkv[2 * key_dim:][chans]])
            out[b + "attn_gate.weight"] = sd[la + "in_proj_z.weight"][chans]
            out[b + "ssm_beta.weight"] = sd[la + "in_proj_b.weight"][heads]
            out[b + "ssm_alpha.weight"] = sd[la + "in_proj_a.weight"][heads]
            conv = sd[la + "conv1d.weight"][:, 0, :]
            out[b + "ssm_conv1d.weight"] = np.concatenate([conv[: 2 * key_dim], conv[2 * key_dim:][chans]])
            out[b + "ssm_dt.bias"] = sd[la + "dt_bias"][heads]
            out[b + "ssm_a"] = -np.exp(sd[la + "A_log"])[heads]
            out[b + "ssm_norm.weight"] = sd[la + "norm.weight"]
            out[b + "ssm_out.weight"] = sd[la + "out_proj.weight"][:, chans]
        else:
            sa = p + "self_attn."
            out[b + "attn_q.weight"] = sd[sa + "q_proj.weight"]
            out[b + "attn_k.weight"] = sd[sa + "k_proj.weight"]
            out[b + "attn_v.weight"] = sd[sa + "v_proj.weight"]
            out[b + "attn_q_norm.weight"] = 1.0 + sd[sa + "q_norm.weight"]
            out[b + "attn_k_norm.weight"] = 1.0 + sd[sa + "k_norm.weight"]
            out[b + "attn_output.weight"] = sd[sa + "o_proj.weight"]
        m = p + "mlp."
        gate_up = sd[m + "experts.gate_up_proj"]  # [E, 2F, D], gate rows first
        out[b + "ffn_gate_inp.weight"] = sd[m + "gate.weight"]
        out[b + "ffn_gate_exps.weight"] = gate_up[:, :F, :]
        out[b + "ffn_up_exps.weight"] = gate_up[:, F:, :]
        out[b + "ffn_down_exps.weight"] = sd[m + "experts.down_proj"]
        out[b + "ffn_gate_inp_shexp.weight"] = sd[m + "shared_expert_gate.weight"].reshape(-1)
        out[b + "ffn_gate_shexp.weight"] = sd[m + "shared_expert.gate_proj.weight"]
        out[b + "ffn_up_shexp.weight"] = sd[m + "shared_expert.up_proj.weight"]
        out[b + "ffn_down_shexp.weight"] = sd[m + "shared_expert.down_proj.weight"]
    return out


def checksums(a: np.ndarray) -> dict:
    """Per row (ne0 contiguous elements): sum of x[c] * (c + 1), which changes under any column
    permutation as well as any row permutation."""
    rows = a.reshape(-1, a.shape[-1])
    w = np.arange(1, rows.shape[1] + 1, dtype=np.float64)
    entry = {"ne": list(reversed(a.shape)), "row_checksums": [float(x) for x in rows @ w]}
    if a.size <= 256:
        entry["values"] = [float(x) for x in a.reshape(-1)]
    return entry


# ------------------------------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output folder, e.g. tests/data/goldens/qwen35moe")
    args = ap.parse_args()

    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    gen = torch.Generator().manual_seed(SEED)

    cfg = text_config()
    model = Qwen3_5MoeForCausalLM(cfg)
    model.set_attn_implementation("eager")
    model.set_experts_implementation("eager")
    perturb(model, gen)
    model.eval()

    os.makedirs(args.out, exist_ok=True)
    hf_dir = os.path.join(args.out, "hf")
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(hf_dir)

    # The multimodal wrapper's config around the same text model (vision tower kept tiny; the
    # converter never reads it).
    vision = dict(depth=1, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=cfg.hidden_size,
                  patch_size=2, temporal_patch_size=2, spatial_merge_size=1, num_position_embeddings=16)
    mm = Qwen3_5MoeConfig(text_config=cfg.to_dict(), vision_config=vision)
    with open(os.path.join(args.out, "hf_multimodal_config.json"), "w") as f:
        f.write(mm.to_json_string(use_diff=False))

    rng = np.random.default_rng(SEED)
    prompt = rng.integers(0, cfg.vocab_size, size=N_TOKENS).astype(np.int64)
    ids = torch.from_numpy(prompt)[None, :]

    # Full prefill, with the named activations captured on the way.
    captured = {}

    def hook(name):
        def fn(module, inputs, kwargs, output):
            x = inputs[0] if inputs else kwargs["hidden_states"]
            y = output[0] if isinstance(output, tuple) else output
            captured[name + "_in"] = x[0, :N_ACTIVATION_TOKENS].detach().float().numpy().copy()
            captured[name + "_out"] = y[0, :N_ACTIVATION_TOKENS].detach().float().numpy().copy()
        return fn

    usage = {}  # layer -> how often each expert was picked over the prefill

    def count_routes(layer):
        def fn(module, inputs, output):
            usage[layer] = torch.bincount(output[2].reshape(-1), minlength=cfg.num_experts).tolist()
        return fn

    handles = [model.model.layers[L].mlp.gate.register_forward_hook(count_routes(L)) for L in range(cfg.num_hidden_layers)]
    for name, (layer, path) in ACTIVATIONS.items():
        mod = getattr(model.model.layers[layer], path)
        handles.append(mod.register_forward_hook(hook(name), with_kwargs=True))
    with torch.no_grad():
        prefill = model(input_ids=ids, use_cache=False).logits[0].float().numpy()
    for h in handles:
        h.remove()

    # Cached decode, one token at a time after a prefill of K tokens.
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
    np.savez(os.path.join(args.out, "activations.npz"), **captured)

    expected = expected_gguf_tensors(model, cfg)
    transforms = {
        "note": "Expected tensors of an F32 conversion of hf/ (shared/spec/qwen35moe.md §2.6), computed "
                "in float64 from the HF parameters by tools/goldens/make_qwen35moe_goldens.py. "
                "row_checksums[r] = sum_c x[r][c] * (c + 1) over the ne0 contiguous elements of row r.",
        "tensors": {name: checksums(a) for name, a in expected.items()},
    }
    with open(os.path.join(args.out, "transforms.json"), "w") as f:
        json.dump(transforms, f, indent=0)

    files = sorted(os.path.relpath(os.path.join(d, n), args.out) for d, _, ns in os.walk(args.out) for n in ns
                   if n != "goldens.json")
    meta = {
        "generator": "tools/goldens/make_qwen35moe_goldens.py",
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
        "activations": {"file": "activations.npz", "tokens": N_ACTIVATION_TOKENS,
                        "modules": {k: f"model.layers.{l}.{p}" for k, (l, p) in ACTIVATIONS.items()}},
        "expert_usage_prefill": {str(k): v for k, v in sorted(usage.items())},
        "text_config": cfg.to_dict(),
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
