// Small per-vector operations of the forward pass (reference versions, fp32).
#pragma once

#include <cstdint>

namespace mox::ops {

// out = x / sqrt(mean(x^2) + eps) * w   (w may be null: no weight). In place allowed.
void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out);
// out = (x - mean(x)) / sqrt(var(x) + eps) * w + b, var the population variance (torch's LayerNorm).
// In place allowed.
void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out);
// x /= max(||x||_2, eps)  (llama.cpp's form; equal to HF's rsqrt(|x|^2 + eps) up to rounding).
void l2_norm(float* x, int64_t n, float eps);

float silu(float x);
float sigmoid(float x);
float softplus(float x);  // ln(1 + e^x), identity above 20 as torch's default threshold

// Optional parts of a rotary embedding: per-pair frequency divisors (Phi-3's long/short factors:
// angle / factors[i]) and a scale of cos and sin (rope.scaling.attn_factor).
struct RopeScaling {
    const float* factors = nullptr;  // [n_rot / 2], null: all one
    float attn_factor = 1.0f;
};
// NEOX rotary embedding on the first n_rot dims of one head: element i pairs with i + n_rot/2;
// angle = pos * theta^(-2i/n_rot). Dims n_rot.. are untouched.
void rope_neox(float* head, int64_t n_rot, int64_t pos, double theta, const RopeScaling& scaling = {});
// NORM rotary embedding (llama.cpp's rope type 0, Llama/Mixtral files whose q/k rows the converter
// permuted): adjacent elements (2i, 2i+1) pair up; angle = pos * theta^(-2i/n_rot).
void rope_norm(float* head, int64_t n_rot, int64_t pos, double theta, const RopeScaling& scaling = {});

// Numerically stable softmax in place.
void softmax(float* x, int64_t n);

}  // namespace mox::ops
