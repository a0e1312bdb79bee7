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

void l2_norm(float* x, int64_t n, float eps) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * x[i];
    const float scale = static_cast<float>(1.0 / std::max(std::sqrt(sum), static_cast<double>(eps)));
    for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

void rope_neox(float* head, int64_t n_rot, int64_t pos, double theta) {
    const int64_t half = n_rot / 2;
    for (int64_t i = 0; i < half; ++i) {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        const double angle = static_cast<double>(pos) * freq;
        const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
        const float a = head[i], b = head[i + half];
        head[i] = a * c - b * s;
        head[i + half] = a * s + b * c;
    }
}

void rope_norm(float* head, int64_t n_rot, int64_t pos, double theta) {
    for (int64_t i = 0; i < n_rot / 2; ++i) {
        const double freq = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(n_rot));
        const double angle = static_cast<double>(pos) * freq;
        const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
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
