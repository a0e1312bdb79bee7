#!/usr/bin/env python3
"""Record an HF qwen3_5_moe checkpoint's routing over the evaluation texts, as mox traces.

Input: --model, a folder with config.json + safetensors (train.py --preset routing writes one);
--data, the folder with the token files (NAME.npy, uint16, from train_tokenizer.py
--eval-texts). Each text is run as one sequence from an empty state, no BOS (as `mox run`
reads a prompt), and every MoE layer's router choice is recorded: the top-k expert ids per
token in the router's order (torch.topk of the softmax, most probable first).

Output (--out): NAME.moxroute for each text, in the format of src/models/routing_trace.h
(architecture "qwen35moe", model name = the --model folder's name, as `mox convert` names the
GGUF), and routing_summary.json: per text its tokens, mean NLL / perplexity, and locality
figures of the trace (what is compared with the published Qwen3 numbers): the share of a token's experts that
the previous token chose too, the share chosen within the previous 8 tokens, per-layer
popularity (the share of selections the 10% most used experts get), and the hit rate of a
per-layer LRU cache of N experts (accesses in router order, each token's k one after another).

These are the HF-side cross-check for the traces `mox run --routing-trace-out` records.
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
from transformers import Qwen3_5MoeForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import routing_trace  # noqa: E402

ARCH = "qwen35moe"
LRU_SLOTS = [8, 16, 24, 32, 48, 64, 96, 128, 192]


@torch.no_grad()
def route(model, ids, device):
    """ids [T] -> (expert ids [T, n_layers, k] int64, mean next-token NLL)."""
    captured = []
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda m, i, o: captured.append(o[2].detach().to("cpu")))
        for layer in model.model.layers
    ]
    try:
        x = torch.from_numpy(ids.astype(np.int64))[None].to(device)
        logits = model(input_ids=x, use_cache=False).logits[0].float()
    finally:
        for h in hooks:
            h.remove()
    if len(captured) != len(model.model.layers):
        raise SystemExit(f"captured {len(captured)} router outputs for {len(model.model.layers)} layers")
    nll = torch.nn.functional.cross_entropy(logits[:-1], x[0, 1:], reduction="mean").item()
    return torch.stack(captured, dim=1).numpy(), nll


def lru_hits(layer_ids, slots):
    """Hit rate of an LRU cache of each size in `slots`, for one layer's ids [T, k]."""
    stack, dist = [], []
    for row in layer_ids:
        for e in row.tolist():
            try:
                d = stack.index(e)
                stack.pop(d)
            except ValueError:
                d = 1 << 30
            stack.insert(0, e)
            dist.append(d)
    dist = np.asarray(dist)
    return {n: float((dist < n).mean()) for n in slots}


def locality(ids, n_expert):
    """Figures for a trace ids [T, L, k]."""
    t, n_layers, k = ids.shape
    sets = np.zeros((t, n_layers, n_expert), dtype=bool)
    np.put_along_axis(sets, ids, True, axis=2)
    prev1 = (sets[1:] & sets[:-1]).sum(-1) / k  # [T-1, L]
    within8 = []
    for s in range(1, t):
        window = sets[max(0, s - 8) : s].any(0)
        within8.append((window & sets[s]).sum(-1) / k)
    within8 = np.asarray(within8)
    counts = sets.sum(0)  # [L, E]
    top = max(1, n_expert // 10)
    top_share = np.sort(counts, axis=1)[:, ::-1][:, :top].sum(1) / counts.sum(1)
    lru = [lru_hits(ids[:, li], [n for n in LRU_SLOTS if n < n_expert]) for li in range(n_layers)]
    lru_mean = {str(n): float(np.mean([h[n] for h in lru])) for n in lru[0]}
    return {
        "next_token_reuse": float(prev1.mean()),
        "reuse_within_8": float(within8.mean()),
        "next_token_reuse_per_layer": [round(float(v), 4) for v in prev1.mean(0)],
        "top10pct_experts_share_per_layer": [round(float(v), 4) for v in top_share],
        "unused_experts_per_layer": [int(v) for v in (counts == 0).sum(1)],
        "lru_hit_rate_by_slots_per_layer": lru_mean,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="HF checkpoint folder (config.json + safetensors)")
    ap.add_argument("--data", required=True, help="folder with NAME.npy token files")
    ap.add_argument("--out", required=True)
    ap.add_argument("--texts", nargs="+", default=["eval_prose", "eval_dialogue", "eval_code"])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="compute type")
    ap.add_argument("--name", default=None, help="model name in the traces (default: the --model folder's name)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()

    dtype = getattr(torch, args.dtype)
    model = Qwen3_5MoeForCausalLM.from_pretrained(args.model, dtype=dtype)
    model.set_attn_implementation("sdpa" if args.device.startswith("cuda") else "eager")
    model.set_experts_implementation("eager")  # the reference loop: every dtype, every device
    model.to(args.device).eval()
    cfg = model.config
    name = args.name or os.path.basename(os.path.normpath(args.model))
    layers = list(range(cfg.num_hidden_layers))  # every layer of qwen3_5_moe is an MoE layer
    print(f"{name}: {cfg.num_hidden_layers} layers, {cfg.num_experts} experts, top-{cfg.num_experts_per_tok}, {args.device} {args.dtype}", flush=True)

    summary = {"model": name, "arch": ARCH, "device": args.device, "dtype": args.dtype, "texts": {}}
    for text in args.texts:
        ids = np.load(os.path.join(args.data, f"{text}.npy"))
        routes, nll = route(model, ids, args.device)
        if routes.shape != (ids.size, len(layers), cfg.num_experts_per_tok):
            raise SystemExit(f"{text}: routing shape {routes.shape}")
        path = os.path.join(args.out, f"{text}.moxroute")
        routing_trace.write(path, ARCH, name, cfg.num_experts, layers, routes)
        back = routing_trace.read(path)  # what we wrote is what the format says
        if not np.array_equal(back["ids"], routes):
            raise SystemExit(f"{path}: read-back differs")
        stats = locality(routes, cfg.num_experts)
        summary["texts"][text] = {
            "trace": os.path.basename(path),
            "bytes": os.path.getsize(path),
            "n_tokens": int(ids.size),
            "mean_nll": nll,
            "ppl": math.exp(nll),
            **stats,
        }
        print(
            f"{text}: {ids.size} tokens, ppl {math.exp(nll):.2f}, next-token reuse {stats['next_token_reuse']:.3f}, "
            f"within 8 {stats['reuse_within_8']:.3f}, LRU {stats['lru_hit_rate_by_slots_per_layer']}",
            flush=True,
        )
    summary["seconds"] = round(time.time() - t0, 1)
    with open(os.path.join(args.out, "routing_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
