#include "ops/basic.h"

#include <algorithm>
#include <cmath>

namespace mox::ops {

void rms_norm(const float* x, const float* w, int64_t n, float eps, float* out) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::sqrt(sum / static_cast<double>(n) + eps));
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * (w ? w[i] : 1.0f);
}

void layer_norm(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += x[i];
    const double mean = sum / static_cast<double>(n);
    double var = 0;
    for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    const double scale = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>((x[i] - mean) * scale) * w[i] + b[i];
}

void l2_norm(float* x, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::max(std::sqrt(sum), static_cast<double>(eps)));
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

namespace {
// cos and sin of pair i's angle.
void rope_angle(int64_t i, int64_t n_rot, int64_t pos, double theta, const RopeScaling& scaling, float& c, float& s) {
    double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
    if (scaling.factors) freq /= scaling.factors[i];
    const double angle = static_cast<double>(pos) * freq;
    c = static_cast<float>(std::cos(angle) * scaling.attn_factor);
    s = static_cast<float>(std::sin(angle) * scaling.attn_factor);
}
}  // namespace

void rope_neox(float* head, int64_t n_rot, int64_t pos, double theta, const RopeScaling& scaling) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        float c, s;
        rope_angle(i, n_rot, pos, theta, scaling, c, s);
        const float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = a * s + b * c;
    }
}

void rope_norm(float* head, int64_t n_rot, int64_t pos, double theta, const RopeScaling& scaling) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
        float c, s;
        rope_angle(i, n_rot, pos, theta, scaling, c, s);
        const float a = head[2 * i], b = head[2 * i + 1];
        head[2 * i] = a * c - b * s;
        head[2 * i + 1] = a * s + b * c;
    }
}

void softmax(float* x, int64_t n) {
    float max = x[0];
    for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max);
        sum += x[i];
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

}  // namespace mox::ops
