#!/usr/bin/env python3
"""Turn a training run's output into the committed assets of mox-tiny.

Input: --run, the folder train.py wrote on the GPU machine (as it came back), and --data,
the folder of prepare_data.py + train_tokenizer.py. Output:

  --assets (assets/mox-tiny):
    config.json, tokenizer.json, data_manifest.json, tokenizer_stats.json
    train_log.csv, training_run.log, loss.png
    reference/references.json          greedy generations, perplexities, run summary
    reference/ppl_text.txt             the perplexity golden text
    reference/*.npy                    ppl_ids, nll_full, nll_windows_512, logits_ids, logits,
                                       routing_full [layer, token, k], routing_counts [layer, expert]
    reference/routing_stats.json       skew and temporal locality of the routing
  --weights-out (repeatable): the two float16 safetensors files, checked against the hashes
    the run recorded. They are not committed (29 MB, and the GGUF made from them is).

Also checks that this machine's tokenizer gives the recorded prompt ids and decodes the
recorded generations to the recorded text.
"""
import argparse
import csv
import hashlib
import json
import os
import shutil

import numpy as np


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def routing_stats(routing, n_experts):
    """routing: [n_layers, n_tokens, k] expert ids chosen for consecutive tokens of one text."""
    n_layers, n_tokens, k = routing.shape
    layers = []
    for layer in range(n_layers):
        ids = routing[layer]
        counts = np.bincount(ids.reshape(-1), minlength=n_experts)
        share = counts / counts.sum()
        nz = share[share > 0]
        chosen = np.zeros((n_tokens, n_experts), dtype=bool)
        chosen[np.arange(n_tokens)[:, None], ids] = True
        # A selection "repeats within d" when the same expert was chosen by one of the d
        # previous tokens in the same layer.
        def repeat_within(d):
            hits = total = 0
            for t in range(d, n_tokens):
                recent = chosen[t - d : t].any(axis=0)
                hits += int(recent[ids[t]].sum())
                total += k
            return hits / total

        layers.append(
            {
                "layer": layer,
                "counts": counts.tolist(),
                "max_share_vs_uniform": float(share.max() * n_experts),
                "min_share_vs_uniform": float(share.min() * n_experts),
                "unused_experts": int((counts == 0).sum()),
                "normalized_entropy": float(-(nz * np.log(nz)).sum() / np.log(n_experts)),
                "top8_experts_share": float(np.sort(share)[::-1][:8].sum()),
                "repeat_next_token": repeat_within(1),
                "repeat_within_8": repeat_within(8),
            }
        )
    p = k / n_experts
    return {
        "text": "reference/ppl_text.txt",
        "tokens": n_tokens,
        "experts": n_experts,
        "top_k": k,
        "uniform_random_baseline": {"repeat_next_token": p, "repeat_within_8": 1 - (1 - p) ** 8},
        "mean_over_layers": {
            key: float(np.mean([entry[key] for entry in layers]))
            for key in ("repeat_next_token", "repeat_within_8", "normalized_entropy", "max_share_vs_uniform")
        },
        "layers": layers,
    }


def plot(rows, kept_step, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tok = [int(r["tokens"]) / 1e6 for r in rows]
    train = [float(r["train_loss"]) for r in rows]
    val = [(int(r["tokens"]) / 1e6, float(r["val_loss"])) for r in rows if r["val_loss"]]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    ax.plot(tok, train, label="train loss (cross-entropy, dropout on)")
    ax.plot([v[0] for v in val], [v[1] for v in val], "o-", label="validation loss")
    kept = [r for r in rows if int(r["step"]) == kept_step]
    if kept:
        ax.axvline(int(kept[0]["tokens"]) / 1e6, color="gray", ls="--", label=f"kept weights (step {kept_step})")
    ax.set_xlabel("training tokens (millions)")
    ax.set_ylabel("loss (nats / token)")
    ax.set_title("mox-tiny training")
    ax.set_ylim(0.8, 8.5)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--assets", required=True)
    ap.add_argument("--weights-out", action="append", default=[])
    args = ap.parse_args()
    ref_dir = os.path.join(args.assets, "reference")
    os.makedirs(ref_dir, exist_ok=True)

    with open(os.path.join(args.run, "references.json")) as f:
        refs = json.load(f)
    for name, digest in refs["safetensors_sha256"].items():
        src = os.path.join(args.run, name)
        if sha256(src) != digest:
            raise SystemExit(f"{name}: hash differs from the one the run recorded")
        for out in args.weights_out:
            os.makedirs(out, exist_ok=True)
            shutil.copyfile(src, os.path.join(out, name))

    with open(os.path.join(args.run, "config.json")) as f:
        config = json.load(f)
    # Runs made before train.py wrote these keys get them here (same values).
    config.setdefault("architectures", ["Qwen3_5MoeForCausalLM"])
    config.setdefault("full_attention_interval", 4)
    for out in [args.assets] + args.weights_out:
        with open(os.path.join(out, "config.json"), "w") as f:
            json.dump(config, f, indent=2, sort_keys=True)
            f.write("\n")
    for out in args.weights_out:
        shutil.copyfile(os.path.join(args.data, "tokenizer.json"), os.path.join(out, "tokenizer.json"))

    for name in ("tokenizer.json", "data_manifest.json", "tokenizer_stats.json"):
        shutil.copyfile(os.path.join(args.data, name), os.path.join(args.assets, name))
    shutil.copyfile(os.path.join(args.run, "train_log.csv"), os.path.join(args.assets, "train_log.csv"))
    shutil.copyfile(os.path.join(args.run, "run.log"), os.path.join(args.assets, "training_run.log"))
    shutil.copyfile(os.path.join(args.data, "ppl_text.txt"), os.path.join(ref_dir, "ppl_text.txt"))
    with open(os.path.join(args.run, "train_log.csv")) as f:
        plot(list(csv.DictReader(f)), refs["kept_step"], os.path.join(args.assets, "loss.png"))

    arrays = np.load(os.path.join(args.run, "references.npz"))
    for name in arrays.files:
        np.save(os.path.join(ref_dir, f"{name}.npy"), arrays[name])
    if not np.array_equal(arrays["ppl_ids"], np.load(os.path.join(args.data, "ppl_ids.npy"))):
        raise SystemExit("the run scored different perplexity ids than --data holds")

    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(args.data, "tokenizer.json"))
    for g in refs["greedy"]:
        if tok.encode(g["prompt"], add_special_tokens=False).ids != g["prompt_ids"]:
            raise SystemExit(f"prompt {g['prompt']!r} tokenizes differently here")
        if tok.decode(g["new_ids"], skip_special_tokens=False) != g["text"]:
            raise SystemExit(f"generation for {g['prompt']!r} decodes differently here")
    refs["args"].pop("out", None)
    refs["args"].pop("data", None)
    with open(os.path.join(ref_dir, "references.json"), "w") as f:
        json.dump(refs, f, indent=1)
        f.write("\n")

    stats = routing_stats(arrays["routing_full"], config["num_experts"])
    with open(os.path.join(ref_dir, "routing_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
        f.write("\n")
    print(json.dumps(stats["mean_over_layers"], indent=1))
    print(json.dumps(stats["uniform_random_baseline"], indent=1))


if __name__ == "__main__":
    main()
