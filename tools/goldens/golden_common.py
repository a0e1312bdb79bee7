"""What the golden scripts share (make_qwen3moe_goldens.py, make_mixtral_goldens.py,
make_phimoe_goldens.py, make_qwen35_goldens.py): the
perturbation of a tiny random model's parameters, and the run that writes its checkpoint, logits
and goldens.json. Each script builds its config and model, then calls `write_goldens`."""

import copy
import hashlib
import json
import math
import os
import platform

import numpy as np
import torch
import transformers


def perturb(model: torch.nn.Module, gen: torch.Generator) -> None:
    """Draws every parameter from a distribution chosen by its role: RMSNorm weights around 1 (used
    as they are), embeddings N(0, 1), the lm head and routers scaled to logits of std ~3 (peaked
    distributions, routing far from uniform), projections by fan-in (activations stay O(1)). Values
    are rounded to bfloat16, so the BF16 checkpoint holds them exactly."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            def normal(std, mean=0.0):
                return torch.randn(p.shape, generator=gen) * std + mean

            if name.endswith("norm.weight"):
                v = normal(0.3, 1.0)
            elif name.endswith("embed_tokens.weight"):
                v = normal(1.0)
            elif name.endswith("norm.bias"):  # LayerNorm
                v = normal(0.1)
            elif name == "lm_head.weight":
                v = normal(3.0 / math.sqrt(p.shape[-1]))
            elif name.endswith(".gate.weight") or name.endswith("router.weight"):  # the router
                v = normal(0.3)
            else:  # fan-in is the last axis
                v = normal(1.0 / math.sqrt(p.shape[-1]))
            p.copy_(v.to(torch.bfloat16).to(torch.float32))


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_goldens(model, cfg, out: str, *, generator: str, seed: int, n_tokens: int, decode_prefill: int,
                  routers: list, n_experts: int, top_k: int, short_prefill: int = 0) -> None:
    """Saves the checkpoint (BF16) to out/hf and writes logits_prefill.npy (one forward over the
    prompt), logits_decode.npy (prefill decode_prefill tokens with a cache, then the rest one at a
    time), with short_prefill > 0 logits_short.npy (one forward over the first short_prefill tokens
    alone: a model whose rotary depends on the sequence length), and goldens.json (versions, seed,
    prompt, per-layer expert usage of the prefill, config, file hashes). `routers` are the router
    modules, one per layer, in layer order (none for a dense model)."""
    os.makedirs(out, exist_ok=True)
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(os.path.join(out, "hf"))
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, cfg.vocab_size, size=n_tokens).astype(np.int64)
    ids = torch.from_numpy(prompt)[None, :]

    usage = {}  # layer -> how often each expert was picked over the prefill

    def count_routes(layer):
        def fn(module, inputs, output):
            outs = output if isinstance(output, tuple) else (output,)
            picked = [o for o in outs if torch.is_tensor(o) and not o.is_floating_point()]
            chosen = picked[0] if picked else torch.topk(outs[0], top_k, dim=-1).indices
            usage[layer] = torch.bincount(chosen.reshape(-1), minlength=n_experts).tolist()
        return fn

    handles = [r.register_forward_hook(count_routes(i)) for i, r in enumerate(routers)]
    with torch.no_grad():
        prefill = model(input_ids=ids, use_cache=False).logits[0].float().numpy()
    for h in handles:
        h.remove()

    with torch.no_grad():
        step = model(input_ids=ids[:, :decode_prefill], use_cache=True)
        cache = step.past_key_values
        decode = []
        for t in range(decode_prefill, n_tokens):
            step = model(input_ids=ids[:, t:t + 1], past_key_values=cache, use_cache=True)
            cache = step.past_key_values
            decode.append(step.logits[0, -1].float().numpy())
    decode = np.stack(decode)

    if short_prefill > 0:
        with torch.no_grad():
            short = model(input_ids=ids[:, :short_prefill], use_cache=False).logits[0].float().numpy()
        np.save(os.path.join(out, "logits_short.npy"), short.astype(np.float32))
    np.save(os.path.join(out, "logits_prefill.npy"), prefill.astype(np.float32))
    np.save(os.path.join(out, "logits_decode.npy"), decode.astype(np.float32))
    files = sorted(os.path.relpath(os.path.join(d, n), out) for d, _, ns in os.walk(out) for n in ns
                   if n != "goldens.json")
    meta = {
        "generator": generator,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "numpy": np.__version__},
        "seed": seed,
        "device": "cpu",
        "dtype": "float32 compute; weights bfloat16-exact, stored as BF16",
        "attn_implementation": "eager",
        "experts_implementation": "eager",
        "prompt_ids": prompt.tolist(),
        "n_tokens": n_tokens,
        "decode_prefill": decode_prefill,
        "logits_prefill": {"file": "logits_prefill.npy", "shape": list(prefill.shape)},
        "logits_decode": {"file": "logits_decode.npy", "shape": list(decode.shape),
                          "positions": [decode_prefill, n_tokens - 1]},
        **({"logits_short": {"file": "logits_short.npy", "shape": [short_prefill, cfg.vocab_size]}}
           if short_prefill > 0 else {}),
        "expert_usage_prefill": {str(k): v for k, v in sorted(usage.items())},
        "config": cfg.to_dict(),
        "sha256": {f: sha256(os.path.join(out, f)) for f in files},
    }
    with open(os.path.join(out, "goldens.json"), "w") as f:
        json.dump(meta, f, indent=1)
    max_diff = float(np.abs(decode - prefill[decode_prefill:]).max())
    print(f"wrote {out}: prefill {prefill.shape}, decode {decode.shape}, "
          f"max |decode - prefill| = {max_diff:.3g}, layer 0 expert usage {usage.get(0, 'none (dense)')}")
    with open(os.path.join(out, "hf", "config.json")) as f:
        print("hf config:", f.read()[:300])
