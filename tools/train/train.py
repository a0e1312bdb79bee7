#!/usr/bin/env python3
"""Train mox-tiny, a small qwen35moe-architecture model, and record its reference outputs.

--preset routing trains the routing model instead (docs/training.md, "The routing model"): 40
layers, 256 experts top-8, Qwen's aux-loss coefficient 0.001, a learning rate that decays over
the wall-clock budget (--schedule time), bf16 weights in one model.safetensors plus
tokenizer.json and summary.json, no references (record_routing.py records its routing). The
mox-tiny outputs below are those of the default preset.

Runs on one CUDA GPU (PyTorch + transformers 5.17, class Qwen3_5MoeForCausalLM, config
model_type "qwen3_5_moe_text"). Input: the folder made by prepare_data.py +
train_tokenizer.py (tokenizer.json, train.npy, val.npy, ppl_ids.npy). Output (--out):

  model-00001-of-00002.safetensors, model-00002-of-00002.safetensors
                       the weights rounded to float16, split in two files (each < 16 MiB)
  config.json          the HF config the model was built from
  train_log.csv        one row per logged step; val_loss filled on evaluation rows
  references.json      greedy generations, perplexities, summaries (see record_references)
  references.npz       arrays: logits golden, per-token NLLs, routing choices
  run.log              this program's log

Training: fp32 master weights, bf16 autocast, AdamW, linear warm-up then cosine decay over
--max-steps, a wall-clock stop (--time-limit) as a guard, router load-balancing loss on.
Every --eval-every steps the whole validation stream is scored; the weights of the best
evaluation are the ones kept (the run is short and the corpus small, so the last step is not
always the best). Everything random derives from --seed; GPU kernels (atomics in the
embedding backward, grouped GEMMs) can still make two runs differ in the last bits.

References are computed from the float16-rounded weights loaded into a float32 model on the
CPU (eager attention, eager expert loop), i.e. from exactly the values an F16 GGUF holds.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

PROMPTS = [
    "Once upon a time",
    "The king said to his servants,",
    "In the beginning",
    "And Jesus said to them,",
]
N_NEW = 64  # greedy tokens per prompt
LOGITS_TOKENS = 64  # length of the logits golden (prefix of the perplexity text)


# Model shape per preset; --layers / --hidden / --experts / --expert-ff / --shared-ff override
# them (the CPU smoke test of the routing pipeline runs a 4-layer, 16-expert copy).
PRESETS = {
    "mox-tiny": {
        "model": {"hidden_size": 256, "num_hidden_layers": 8, "num_experts": 48, "moe_intermediate_size": 32,
                  "shared_expert_intermediate_size": 128},
        "defaults": {},
    },
    # Qwen3.6-35B-A3B's routing shape (40 layers, 256 experts, top-8, a shared expert, expert width
    # a quarter of the hidden size) at mox-tiny's hidden size and head shapes.
    "routing": {
        "model": {"hidden_size": 256, "num_hidden_layers": 40, "num_experts": 256, "moe_intermediate_size": 64,
                  "shared_expert_intermediate_size": 64},
        "defaults": {
            "vocab_size": 8192, "eos_id": 8189, "lr": 1e-3, "warmup": 50, "max_steps": 1_000_000,
            "time_limit": 330.0, "schedule": "time", "eval_every": 1_000_000, "eval_every_s": 45.0,
            "dropout": 0.0, "aux_coef": 0.001, "skip_references": True, "save_format": "bf16",
            "summary_name": "summary.json",
        },
    },
}


class Log:
    """Print to stdout and to run.log, flushed at once (the device returns what is left)."""

    def __init__(self, path):
        self.f = open(path, "w")

    def __call__(self, *parts):
        line = " ".join(str(p) for p in parts)
        print(line, flush=True)
        self.f.write(line + "\n")
        self.f.flush()


def make_config(args):
    # Same block structure as Qwen3.6-35B-A3B, scaled down: 3 Gated DeltaNet layers then one
    # gated full-attention layer, repeated; routed experts (softmax, top-k, renormalised) plus
    # a sigmoid-gated shared expert in every layer; partial RoPE (1/4 of the head); untied
    # embeddings. DeltaNet has twice as many value heads as key heads, as in the real model,
    # so the GGUF converter's grouped->tiled value-head reorder is exercised.
    head_dim = 64
    shape = dict(PRESETS[args.preset]["model"])
    for key, arg in [("hidden_size", "hidden"), ("num_hidden_layers", "layers"), ("num_experts", "experts"),
                     ("moe_intermediate_size", "expert_ff"), ("shared_expert_intermediate_size", "shared_ff")]:
        if getattr(args, arg) is not None:
            shape[key] = getattr(args, arg)
    return Qwen3_5MoeTextConfig(
        vocab_size=args.vocab_size,
        hidden_size=shape["hidden_size"],
        num_hidden_layers=shape["num_hidden_layers"],
        full_attention_interval=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=head_dim,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        num_experts=shape["num_experts"],
        num_experts_per_tok=8,
        moe_intermediate_size=shape["moe_intermediate_size"],
        shared_expert_intermediate_size=shape["shared_expert_intermediate_size"],
        router_aux_loss_coef=args.aux_coef,
        output_router_logits=False,
        max_position_embeddings=4096,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        initializer_range=0.02,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            # Text-only positions are equal on all three M-RoPE axes, so the sections change
            # nothing numerically; they are sized to the 8 rotary frequency pairs (16 dims)
            # the way [11, 11, 10] fits Qwen's 32.
            "mrope_section": [3, 3, 2],
            "mrope_interleaved": True,
        },
        bos_token_id=None,
        eos_token_id=args.eos_id,
        pad_token_id=None,  # an Embedding padding_idx would freeze that row at zero
    )


def add_dropout(model, p):
    """Dropout on the embeddings and on every mixer / MoE output, for training only.

    The HF class has no residual dropout; forward hooks add it without touching the
    architecture (dropout is the identity in eval mode, and the reference model has no hooks).
    With ~2M training tokens and ~30 epochs this is what keeps validation loss falling.
    """

    def drop(t):
        return torch.nn.functional.dropout(t, p, model.training)

    def hook(module, inputs, out):
        return (drop(out[0]),) + tuple(out[1:]) if isinstance(out, tuple) else drop(out)

    model.model.embed_tokens.register_forward_hook(hook)
    for layer in model.model.layers:
        (layer.linear_attn if hasattr(layer, "linear_attn") else layer.self_attn).register_forward_hook(hook)
        layer.mlp.register_forward_hook(hook)


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        # Norm weights, DeltaNet A_log / dt_bias and the depthwise conv are not decayed.
        (decay if p.ndim >= 2 and "conv1d" not in name else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_at(step, args, time_after_warmup=None):
    """Linear warm-up over --warmup steps, then cosine decay to --min-lr-frac. With --schedule
    time the decay also follows the wall clock: its progress is the larger of the steps' and
    the seconds' (since the warm-up ended, out of what is left of --time-limit), so a run
    stopped by the time limit ends annealed whatever the GPU's speed."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, args.max_steps - args.warmup))
    if args.schedule == "time" and time_after_warmup is not None:  # (seconds since, seconds left then)
        t = max(t, min(1.0, time_after_warmup[0] / max(1e-9, time_after_warmup[1])))
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * t)))


def val_windows(val, seq_len):
    n = (val.numel() // seq_len) * seq_len
    return val[:n].view(-1, seq_len)


@torch.no_grad()
def evaluate(model, windows, batch):
    """Mean next-token loss over non-overlapping windows (each scored from an empty state)."""
    model.eval()
    total, count = 0.0, 0
    for i in range(0, windows.shape[0], batch):
        x = windows[i : i + batch]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=x.is_cuda):  # fp32 on the CPU
            logits = model(input_ids=x, use_cache=False).logits
        nll = torch.nn.functional.cross_entropy(
            logits[:, :-1].float().reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1), reduction="sum"
        )
        total += nll.item()
        count += x[:, 1:].numel()
    model.train()
    return total / count


def train(args, log, device):
    data = args.data
    train_ids = torch.from_numpy(np.load(os.path.join(data, "train.npy")).astype(np.int64))
    val_ids = torch.from_numpy(np.load(os.path.join(data, "val.npy")).astype(np.int64))
    log(f"train tokens {train_ids.numel()}  val tokens {val_ids.numel()}")
    train_gpu = train_ids.to(device)
    windows = val_windows(val_ids, args.seq_len)
    if args.val_max_windows:
        windows = windows[: args.val_max_windows]
    windows = windows.to(device)

    torch.manual_seed(args.seed)
    config = make_config(args)
    model = Qwen3_5MoeForCausalLM(config)
    model.set_attn_implementation("sdpa")
    model.set_experts_implementation(args.experts_impl)
    if args.dropout > 0:
        add_dropout(model, args.dropout)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"params {n_params}  layer types {config.layer_types}")
    log(f"rotary inv_freq {model.model.rotary_emb.inv_freq.numel()} pairs  experts impl {config._experts_implementation}")

    opt = torch.optim.AdamW(
        param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda"
    )
    gen = torch.Generator().manual_seed(args.seed + 1)
    offsets = torch.arange(args.seq_len, device=device)
    span = train_ids.numel() - args.seq_len

    rows = []
    best = (float("inf"), -1, None)
    t0 = time.time()
    acc_loss = torch.zeros((), device=device)
    acc_aux = torch.zeros((), device=device)
    acc_n = 0
    step = 0
    stop_reason = "max_steps"
    t_warm = None  # wall clock when the warm-up ended (--schedule time)
    next_eval_s = args.eval_every_s
    model.train()
    while step < args.max_steps:
        now = time.time() - t0
        if now > args.time_limit:
            stop_reason = "time_limit"
            break
        if step == args.warmup:
            t_warm = now
        lr = lr_at(step, args, None if t_warm is None else (now - t_warm, args.time_limit - t_warm))
        for g in opt.param_groups:
            g["lr"] = lr
        starts = torch.randint(0, span, (args.batch,), generator=gen).to(device, non_blocking=True)
        x = train_gpu[starts[:, None] + offsets]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda"):
            out = model(input_ids=x, labels=x, output_router_logits=True, use_cache=False)
        out.loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        acc_loss += out.loss.detach() - config.router_aux_loss_coef * out.aux_loss.detach()
        acc_aux += out.aux_loss.detach()
        acc_n += 1
        step += 1

        is_eval = step % args.eval_every == 0 or step == args.max_steps
        if args.eval_every_s > 0 and time.time() - t0 >= next_eval_s:
            is_eval = True
            next_eval_s = (time.time() - t0) + args.eval_every_s
        if step % args.log_every == 0 or is_eval:
            elapsed = time.time() - t0
            row = {
                "step": step,
                "tokens": step * args.batch * args.seq_len,
                "elapsed_s": round(elapsed, 2),
                "lr": lr,
                "train_loss": (acc_loss / acc_n).item(),
                "aux_loss": (acc_aux / acc_n).item(),
                "grad_norm": gnorm.item(),
                "val_loss": "",
            }
            acc_loss.zero_()
            acc_aux.zero_()
            acc_n = 0
            if is_eval:
                v = evaluate(model, windows, args.eval_batch)
                row["val_loss"] = v
                if v < best[0]:
                    best = (v, step, {k: t.detach().clone() for k, t in model.state_dict().items()})
            rows.append(row)
            log(
                f"step {step:6d} tok {row['tokens']:>11d} {elapsed:7.1f}s lr {lr:.2e} loss {row['train_loss']:.4f} "
                f"aux {row['aux_loss']:.4f} gn {row['grad_norm']:.2f}"
                + (f" val {row['val_loss']:.4f} (ppl {math.exp(row['val_loss']):.2f})" if is_eval else "")
                + f" {row['tokens'] / max(elapsed, 1e-9):,.0f} tok/s"
            )

    train_time = time.time() - t0
    # Score the last weights too, then keep whichever evaluated best.
    v = evaluate(model, windows, args.eval_batch)
    if v < best[0]:
        best = (v, step, None)
    elif best[2] is not None:
        model.load_state_dict(best[2])
    log(f"stopped: {stop_reason} after {step} steps, {train_time:.1f}s; kept step {best[1]} val loss {best[0]:.4f}")

    with open(os.path.join(args.out, "train_log.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()) if rows else ["step"])
        w.writeheader()
        w.writerows(rows)
    summary = {
        "steps": step,
        "stop_reason": stop_reason,
        "train_seconds": round(train_time, 1),
        "tokens_seen": step * args.batch * args.seq_len,
        "epochs": round(step * args.batch * args.seq_len / train_ids.numel(), 2),
        "kept_step": best[1],
        "val_loss_bf16": best[0],
        "val_ppl_bf16": math.exp(best[0]),
        "params": n_params,
        "active_params_per_token": active_params(config, n_params),
        "config": {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers", "num_experts",
                   "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size",
                   "router_aux_loss_coef", "vocab_size")},
    }
    return model, config, summary


def active_params(config, n_params):
    """Parameters one token uses: all but the routed experts it did not select."""
    per_expert = 3 * config.hidden_size * config.moe_intermediate_size
    unused = config.num_experts - config.num_experts_per_tok
    return n_params - config.num_hidden_layers * unused * per_expert


def bench(args, log, device):
    """Time a few training steps per experts implementation and batch size."""
    train_ids = torch.from_numpy(np.load(os.path.join(args.data, "train.npy")).astype(np.int64)).to(device)
    for impl in ["grouped_mm", "eager"]:
        for batch in [32, 64, 128]:
            torch.manual_seed(args.seed)
            model = Qwen3_5MoeForCausalLM(make_config(args))
            model.set_attn_implementation("sdpa")
            model.set_experts_implementation(impl)
            model.to(device).train()
            opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
            x = train_ids[: batch * args.seq_len].view(batch, args.seq_len)
            try:
                for i in range(6):
                    if i == 2:
                        torch.cuda.synchronize()
                        t = time.time()
                    with torch.autocast("cuda", dtype=torch.bfloat16):
                        out = model(input_ids=x, labels=x, output_router_logits=True, use_cache=False)
                    out.loss.backward()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                torch.cuda.synchronize()
                dt = (time.time() - t) / 4
                log(f"bench {impl:10s} batch {batch:4d}: {dt * 1000:7.1f} ms/step {batch * args.seq_len / dt:12,.0f} tok/s loss {out.loss.item():.3f} mem {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
            except Exception as e:  # report and go on: the point is to compare
                log(f"bench {impl} batch {batch}: FAILED {type(e).__name__}: {str(e)[:300]}")
            del model, opt
            torch.cuda.empty_cache()


def write_config_extras(path):
    """Add the keys converters read: the class to load, and the layer pattern as an interval
    (the real Qwen3.6 config carries both layer_types and full_attention_interval). A plain
    JSON edit rather than config attributes, so nothing can fail this late in a run."""
    with open(path) as f:
        cfg = json.load(f)
    cfg["architectures"] = ["Qwen3_5MoeForCausalLM"]
    cfg["full_attention_interval"] = 4
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def save_bf16(model, out_dir):
    """Round every tensor to bfloat16 (the routing model: its size does not matter, it stays on
    the GPU machine) and write one model.safetensors."""
    sd = {k: v.detach().to("cpu", torch.bfloat16).contiguous() for k, v in model.state_dict().items()}
    path = os.path.join(out_dir, "model.safetensors")
    save_file(sd, path, metadata={"format": "pt"})
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 24), b""):
            h.update(block)
    return sd, {"model.safetensors": h.hexdigest()}


def save_fp16(model, out_dir):
    """Round every tensor to float16 and write it as two safetensors halves."""
    sd = {k: v.detach().to("cpu", torch.float16).contiguous() for k, v in model.state_dict().items()}
    total = sum(t.numel() * 2 for t in sd.values())
    parts, acc = [{}, {}], 0
    for k in sd:  # state_dict order: embeddings, layers 0..7, final norm, lm_head
        parts[0 if acc < total / 2 else 1][k] = sd[k]
        acc += sd[k].numel() * 2
    files = {}
    for i, part in enumerate(parts):
        name = f"model-{i + 1:05d}-of-00002.safetensors"
        path = os.path.join(out_dir, name)
        save_file(part, path, metadata={"format": "pt"})
        files[name] = hashlib.sha256(open(path, "rb").read()).hexdigest()
    return sd, files


def nll_per_token(logits, ids):
    return torch.nn.functional.cross_entropy(logits[:-1].float(), ids[1:], reduction="none")


@torch.no_grad()
def record_references(sd16, config, args, log):
    """Reference outputs from the float16 weights in a float32 CPU model."""
    from tokenizers import Tokenizer

    torch.set_num_threads(os.cpu_count() or 8)
    ref = Qwen3_5MoeForCausalLM(config)
    ref.load_state_dict({k: v.float() for k, v in sd16.items()})
    ref.set_attn_implementation("eager")
    ref.set_experts_implementation("eager")
    ref.eval()
    # Generate exactly N_NEW tokens: no stop at <|endoftext|> (it is recorded if produced).
    ref.generation_config.eos_token_id = None
    ref.generation_config.pad_token_id = args.eos_id
    tok = Tokenizer.from_file(os.path.join(args.data, "tokenizer.json"))
    res, arrays = {}, {}

    # (a) greedy generation, two ways: generate() with its cache (prefill = chunked DeltaNet,
    # decode = recurrent form), and a cache-less argmax loop over the whole sequence. The
    # margin between the best and second-best logit says how robust each choice is.
    gens = []
    for p in PROMPTS:
        ids = tok.encode(p, add_special_tokens=False).ids
        x = torch.tensor([ids])
        out = ref.generate(x, do_sample=False, max_new_tokens=N_NEW)
        cached = out[0, len(ids) :].tolist()
        seq, margins = list(ids), []
        for _ in range(N_NEW):
            logits = ref(input_ids=torch.tensor([seq]), use_cache=False).logits[0, -1]
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            seq.append(int(top.indices[0]))
        plain = seq[len(ids) :]
        gens.append(
            {
                "prompt": p,
                "prompt_ids": ids,
                "new_ids": cached,
                "text": tok.decode(cached, skip_special_tokens=False),
                "no_cache_new_ids": plain,
                "cache_and_no_cache_agree": cached == plain,
                "min_top2_margin": min(margins),
                "top2_margins": [round(m, 4) for m in margins],
                "eos_positions": [i for i, t in enumerate(cached) if t == args.eos_id],
            }
        )
        log(f"greedy [{p}] agree={cached == plain} min margin {min(margins):.3f}: {gens[-1]['text']!r}")
    res["greedy"] = gens

    # (b) perplexity of the held-out text, scored as one sequence and as independent
    # windows of --seq-len tokens (every token but each window's first is predicted).
    ppl_ids = torch.from_numpy(np.load(os.path.join(args.data, "ppl_ids.npy")).astype(np.int64))
    captured = []
    hooks = [
        layer.mlp.gate.register_forward_hook(lambda m, i, o: captured.append(o[2].to(torch.uint8)))
        for layer in ref.model.layers
    ]
    full_logits = ref(input_ids=ppl_ids[None], use_cache=False).logits[0]
    for h in hooks:
        h.remove()
    routing = torch.stack(captured)  # [n_layers, n_tokens, top_k] expert ids
    nll_full = nll_per_token(full_logits, ppl_ids)
    nll_win = []
    for s in range(0, ppl_ids.numel(), args.seq_len):
        w = ppl_ids[s : s + args.seq_len]
        if w.numel() > 1:
            nll_win.append(nll_per_token(ref(input_ids=w[None], use_cache=False).logits[0], w))
    nll_win = torch.cat(nll_win)
    res["perplexity"] = {
        "text": "ppl_text.txt (Ruth 1-4, Bible in Basic English; held out of training)",
        "n_tokens": int(ppl_ids.numel()),
        "full_sequence": {"scored_tokens": int(nll_full.numel()), "mean_nll": float(nll_full.mean()), "ppl": float(nll_full.mean().exp())},
        f"windows_of_{args.seq_len}": {"scored_tokens": int(nll_win.numel()), "mean_nll": float(nll_win.mean()), "ppl": float(nll_win.mean().exp())},
    }
    log(f"ppl full {res['perplexity']['full_sequence']['ppl']:.3f}  windows {res['perplexity'][f'windows_of_{args.seq_len}']['ppl']:.3f}")
    arrays["ppl_ids"] = ppl_ids.numpy().astype(np.int32)
    arrays["nll_full"] = nll_full.numpy()
    arrays[f"nll_windows_{args.seq_len}"] = nll_win.numpy()
    arrays["routing_full"] = routing.numpy()

    # (c) full logits of a short sequence: the first LOGITS_TOKENS tokens of the text.
    x = ppl_ids[:LOGITS_TOKENS]
    arrays["logits_ids"] = x.numpy().astype(np.int32)
    arrays["logits"] = ref(input_ids=x[None], use_cache=False).logits[0].numpy().astype(np.float32)
    res["logits"] = {"ids": "references.npz:logits_ids", "logits": "references.npz:logits [64, vocab] float32"}

    # Routing summary on the perplexity text (the full report is made offline from routing_full).
    n_exp = config.num_experts
    counts = np.stack([np.bincount(r.reshape(-1), minlength=n_exp) for r in routing.numpy()])
    arrays["routing_counts"] = counts
    res["routing_counts_per_layer"] = counts.tolist()
    return res, arrays


def main():
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--preset", default="mox-tiny", choices=sorted(PRESETS))
    preset = pre.parse_known_args()[0].preset
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="mox-tiny", choices=sorted(PRESETS), help="model shape and defaults")
    ap.add_argument("--data", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--eos-id", type=int, default=4093)
    ap.add_argument("--seq-len", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--eval-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=1800)
    ap.add_argument("--time-limit", type=float, default=465.0, help="seconds of training before a forced stop")
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--aux-coef", type=float, default=0.01, help="router load-balancing loss weight")
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--experts-impl", default="grouped_mm", choices=["grouped_mm", "eager", "batched_mm"])
    ap.add_argument("--skip-references", action="store_true")
    ap.add_argument("--bench", action="store_true", help="only time training steps, then exit")
    ap.add_argument("--schedule", default="steps", choices=["steps", "time"], help="what the cosine decay follows")
    ap.add_argument("--eval-every-s", type=float, default=0.0, help="also evaluate every this many seconds (0: off)")
    ap.add_argument("--save-format", default="f16-halves", choices=["f16-halves", "bf16"])
    ap.add_argument("--summary-name", default="references.json")
    ap.add_argument("--val-max-windows", type=int, default=0, help="score only the first N validation windows (0: all)")
    ap.add_argument("--device", default="cuda", help="cuda, or cpu for the smoke test")
    for name in ("layers", "hidden", "experts", "expert-ff", "shared-ff"):
        ap.add_argument(f"--{name}", type=int, default=None, help="override the preset's model shape")
    ap.set_defaults(**PRESETS[preset]["defaults"])
    args = ap.parse_args()

    os.makedirs(args.out, exist_ok=True)
    log = Log(os.path.join(args.out, "run.log"))
    import transformers

    log(f"argv {sys.argv}")
    device = torch.device(args.device)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    log(f"torch {torch.__version__} transformers {transformers.__version__} device {name}")
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    if args.bench:
        bench(args, log, device)
        return
    t_all = time.time()
    model, config, summary = train(args, log, device)
    # Written for converters: the class to load, and the layer pattern as an interval (the
    # real Qwen3.6 config carries both layer_types and full_attention_interval).
    config.save_pretrained(args.out)
    write_config_extras(os.path.join(args.out, "config.json"))
    sd16, files = (save_bf16 if args.save_format == "bf16" else save_fp16)(model, args.out)
    del model
    if args.preset != "mox-tiny":  # mox convert reads the vocabulary from the checkpoint's folder
        shutil.copyfile(os.path.join(args.data, "tokenizer.json"), os.path.join(args.out, "tokenizer.json"))
    summary["safetensors_sha256"] = files
    summary["args"] = vars(args)
    summary["versions"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    if not args.skip_references:
        t_ref = time.time()
        res, arrays = record_references(sd16, config, args, log)
        summary.update(res)
        np.savez(os.path.join(args.out, "references.npz"), **arrays)
        log(f"references took {time.time() - t_ref:.1f}s")
    with open(os.path.join(args.out, args.summary_name), "w") as f:
        json.dump(summary, f, indent=1)
    log(f"total {time.time() - t_all:.1f}s")


if __name__ == "__main__":
    main()
