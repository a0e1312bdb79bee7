// The tuning values mox takes from the environment: thresholds whose best value may differ by machine
// or model, each defaulting to what the H200 measurements chose (docs/cuda.md cites them). Read once,
// at first use (`mox` reads them before any command runs), each checked: a value that does not parse
// or is out of range is a mox::Error that names the variable and what it accepts. `mox devices`
// prints them. Experiment switches whose question was answered are not here: the winner is the code.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mox {

struct Tuning {
    // core/thread_pool: how long an idle worker spins before it sleeps (MOX_SPIN_US, 0..60000000):
    // longer than the serial gaps between the ops of a decode step, short enough not to burn a core
    // between requests.
    int64_t spin_us = 200;
    // quant/cuda/matmul: dense projections of at least this many tokens run through cuBLAS
    // (MOX_CUDA_CUBLAS_MIN_TOKENS, at least 128: the memory model reserves the path's scratch from
    // there, cuda_matmul.h's kCublasMinTokens).
    int64_t cublas_min_tokens = 128;
    // ops/cuda/attention: decode graphs sized for at most this many keys take the short-context kernel
    // (MOX_CUDA_ATTN_SHORT_MAX: 256, 512 or 1024, the longest it serves).
    int64_t attn_short_max_keys = 1024;
    // quant/cuda/matmul, ops/cuda/moe_batch: the first tensor-core matmul and batched-MoE kernels (one
    // token tile, no cp.async pipeline) instead of the current ones (MOX_MATMUL_V1: 0 or 1).
    bool matmul_v1 = false;
};

// One field as `mox devices` prints it.
struct TuningField {
    const char* name;
    const char* env;  // the variable that sets it
    int64_t value = 0;
    int64_t default_value = 0;
};

// The fields of `t` in print order.
std::vector<TuningField> tuning_fields(const Tuning& t);

// "tuning: spin_us=200 (default) cublas_min_tokens=4096 (MOX_CUDA_CUBLAS_MIN_TOKENS; default 128) ...".
std::string format_tuning(const Tuning& t);

// A Tuning from `get` (a getenv): an unset or empty variable keeps the default; a bad value fails.
Tuning read_tuning(const std::function<const char*(const char*)>& get);

// The process's tuning: read_tuning(std::getenv) at the first call.
const Tuning& tuning();

// Tests: the process's tuning is `t` while this lives (the kernels read tuning() at every launch).
class ScopedTuning {
public:
    explicit ScopedTuning(const Tuning& t);
    ~ScopedTuning();
    ScopedTuning(const ScopedTuning&) = delete;
    ScopedTuning& operator=(const ScopedTuning&) = delete;

private:
    Tuning previous_;
};

}  // namespace mox
