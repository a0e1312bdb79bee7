// The decode hand-off through host-mapped memory (ops/cuda_handoff.h says the protocol and why).
//
// Memory order, GPU side (PTX memory model): publish's threads store x/ids/weights with ordinary
// stores, each thread fences at system scope, the block meets at a barrier and thread 0 stores
// ready with st.release.sys; collect's thread 0 polls done and the error word with ld.relaxed.sys
// (the two loads issue back to back, so a poll costs one PCIe round trip), fences at system scope
// once it sees done == step (the acquire half), and the block reads the result with ld.global.cv
// (never a cached copy). Host side (x86-64 or Arm, cache-coherent with PCIe): acquire loads of
// ready, a release store of done after the result, through std::atomic_ref on the mapped words.
#include "ops/cuda_handoff.h"
#include "quant/cuda/check.cuh"

#include <atomic>
#include <cstring>
#include <thread>
#include <utility>

namespace mox::cuda {

namespace {

// Each protocol word has its own 128 bytes: its own cache line on the host even with the adjacent-
// line prefetcher pairing 64-byte lines, and its own L2 sector group on the GPU. Layout:
//   [0] step, [128] error, per slot [256 + 256 slot] ready and [+128] done, then x, ids, weights,
//   result, each starting on a 128-byte boundary.
constexpr size_t kLine = 128;
constexpr size_t kStepAt = 0, kErrorAt = kLine, kSlotsAt = 2 * kLine;
constexpr int kThreads = 256;
// done[slot] = step | kFailed: the host's computation failed (steps stay below 2^31), so the GPU
// learns it from the word it polls anyway, with no second PCIe read on the success path.
constexpr uint32_t kFailed = 0x80000000u;

size_t ready_at(int64_t slot) {
    return kSlotsAt + static_cast<size_t>(slot) * 2 * kLine;
}
size_t done_at(int64_t slot) {
    return ready_at(slot) + kLine;
}
size_t round_line(size_t b) {
    return (b + kLine - 1) / kLine * kLine;
}

// The error word: the code in the low byte, slot + 1 above it (0: no error).
__host__ __device__ uint32_t error_word(HandoffError e, int64_t slot) {
    return static_cast<uint32_t>(e) | static_cast<uint32_t>(slot + 1) << 8;
}

__device__ __forceinline__ uint32_t load_relaxed_sys(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void store_relaxed_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.relaxed.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void store_release_sys(uint32_t* p, uint32_t v) {
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Nanoseconds of the GPU's global timer (the same clock for every SM).
__device__ __forceinline__ uint64_t global_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// One block: x [d] and the routing (k ids, k weights) into mapped memory, then ready = step.
// vec: d % 4 == 0 and both float pointers 16-byte aligned (float4 stores: a quarter of the
// instructions; a warp's stores coalesce into full PCIe writes either way).
__global__ void publish_kernel(const float* __restrict__ x, const int32_t* __restrict__ ids,
                               const float* __restrict__ weights, int d, int k, bool vec, float* hx,
                               int32_t* hids, float* hweights, const uint32_t* step_word, uint32_t* ready) {
    const int t = static_cast<int>(threadIdx.x);
    // Thread 0 reads the step first: the PCIe read is in flight while the stores below issue.
    const uint32_t step = t == 0 ? load_relaxed_sys(step_word) : 0;
    const int d4 = vec ? d / 4 : 0;
    for (int i = t; i < d4; i += kThreads)
        reinterpret_cast<float4*>(hx)[i] = reinterpret_cast<const float4*>(x)[i];
    for (int i = 4 * d4 + t; i < d; i += kThreads) hx[i] = x[i];
    for (int i = t; i < k; i += kThreads) {
        hids[i] = ids[i];
        hweights[i] = weights[i];
    }
    __threadfence_system();  // this thread's stores reach the host before anything it does later
    __syncthreads();
    if (t == 0) {
        __threadfence_system();
        store_release_sys(ready, step);
    }
}

// One block: thread 0 waits for done == step, then every thread copies the result [d] to out (zeros
// if the step failed, this wait included).
__global__ void collect_kernel(const float* hresult, int d, bool vec, float* __restrict__ out,
                               const uint32_t* step_word, const uint32_t* done, uint32_t* error,
                               uint32_t my_error, uint64_t timeout_ns) {
    __shared__ int ok;
    const int t = static_cast<int>(threadIdx.x);
    if (t == 0) {
        const uint64_t start = global_ns();
        const uint32_t step = load_relaxed_sys(step_word);
        int good = 0;
        for (;;) {
            const uint32_t seen = load_relaxed_sys(done);
            const uint32_t err = load_relaxed_sys(error);
            if (err != 0) break;  // this step failed already (keep the first error)
            if (seen == step) {
                __threadfence_system();  // acquire: the host's result stores precede its done store
                good = 1;
                break;
            }
            if (seen == (step | kFailed)) break;  // the host recorded cpu_failed before this
            if (global_ns() - start > timeout_ns) {
                store_relaxed_sys(error, my_error);
                break;
            }
            __nanosleep(64);  // a poll is a PCIe round trip (~1 us) anyway; this only spaces them
        }
        ok = good;
    }
    __syncthreads();
    const int d4 = vec ? d / 4 : 0;
    if (ok) {
        // Four loads in flight per thread before any store: each is a PCIe round trip, and a store
        // right after its load would wait for it before the next load issues (2048 floats: one trip).
        const auto* src = reinterpret_cast<const float4*>(hresult);
        auto* dst = reinterpret_cast<float4*>(out);
        for (int base = 0; base < d4; base += 4 * kThreads) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (base + j * kThreads + t < d4) v[j] = __ldcv(src + base + j * kThreads + t);
#pragma unroll
            for (int j = 0; j < 4; ++j)
                if (base + j * kThreads + t < d4) dst[base + j * kThreads + t] = v[j];
        }
        for (int i = 4 * d4 + t; i < d; i += kThreads) out[i] = __ldcv(hresult + i);
    } else {
        for (int i = t; i < d; i += kThreads) out[i] = 0.0f;
    }
}

bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
    asm volatile("pause" ::: "memory");
#elif defined(__aarch64__)
    asm volatile("yield" ::: "memory");
#endif
}

}  // namespace

HandoffChannel::HandoffChannel(int64_t n_slots, int64_t n_embd, int64_t k)
    : n_slots_(n_slots), n_embd_(n_embd), k_(k) {
    MOX_CHECK(n_slots >= 1 && n_slots < (int64_t{1} << 23), "hand-off channel of {} slots", n_slots);
    MOX_CHECK(n_embd >= 1 && n_embd <= (int64_t{1} << 24) && k >= 1 && k <= 4096,
              "hand-off of {} floats, {} experts", n_embd, k);
    const size_t fl = static_cast<size_t>(n_embd) * sizeof(float), kb = static_cast<size_t>(k) * 4;
    const size_t x_at = ready_at(n_slots), ids_at = x_at + round_line(fl), w_at = ids_at + round_line(kb),
                 result_at = w_at + round_line(kb);
    bytes_ = result_at + round_line(fl);
    // Mapped: kernels read and write it directly; portable: any context of the process may use it.
    const cudaError_t err = cudaHostAlloc(&host_, bytes_, cudaHostAllocMapped | cudaHostAllocPortable);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        host_ = nullptr;
        fail("--device cuda: {} bytes of mapped page-locked memory for the CPU expert hand-off: {}", bytes_,
             cudaGetErrorString(err));
    }
    std::memset(host_, 0, bytes_);  // every word starts at 0, which no step uses
    void* d = nullptr;
    const cudaError_t err2 = cudaHostGetDevicePointer(&d, host_, 0);
    if (err2 != cudaSuccess) {
        (void)cudaFreeHost(host_);
        host_ = nullptr;
        cuda_fail(err2, "cudaHostGetDevicePointer(&d, host, 0)", __FILE__, __LINE__);
    }
    dev_ = static_cast<uint8_t*>(d);
    auto* base = static_cast<uint8_t*>(host_);
    x_ = reinterpret_cast<float*>(base + x_at);
    ids_ = reinterpret_cast<int32_t*>(base + ids_at);
    weights_ = reinterpret_cast<float*>(base + w_at);
    result_ = reinterpret_cast<float*>(base + result_at);
}

HandoffChannel::~HandoffChannel() {
    if (host_) (void)cudaFreeHost(host_);
}

HandoffChannel::HandoffChannel(HandoffChannel&& o) noexcept
    : host_(std::exchange(o.host_, nullptr)),
      dev_(std::exchange(o.dev_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      n_slots_(std::exchange(o.n_slots_, 0)),
      n_embd_(std::exchange(o.n_embd_, 0)),
      k_(std::exchange(o.k_, 0)),
      x_(std::exchange(o.x_, nullptr)),
      ids_(std::exchange(o.ids_, nullptr)),
      weights_(std::exchange(o.weights_, nullptr)),
      result_(std::exchange(o.result_, nullptr)),
      step_(std::exchange(o.step_, 0)) {}

HandoffChannel& HandoffChannel::operator=(HandoffChannel&& o) noexcept {
    if (this != &o) {
        HandoffChannel moved(std::move(o));
        std::swap(host_, moved.host_);
        std::swap(dev_, moved.dev_);
        std::swap(bytes_, moved.bytes_);
        std::swap(n_slots_, moved.n_slots_);
        std::swap(n_embd_, moved.n_embd_);
        std::swap(k_, moved.k_);
        std::swap(x_, moved.x_);
        std::swap(ids_, moved.ids_);
        std::swap(weights_, moved.weights_);
        std::swap(result_, moved.result_);
        std::swap(step_, moved.step_);
    }
    return *this;
}

uint32_t* HandoffChannel::word(size_t offset) const {
    return reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(host_) + offset);
}

const uint8_t* HandoffChannel::device(const void* host) const {
    return dev_ + (static_cast<const uint8_t*>(host) - static_cast<const uint8_t*>(host_));
}

void HandoffChannel::publish(int64_t slot, const float* x, const int32_t* ids, const float* weights,
                             StreamHandle stream) const {
    MOX_CHECK(!empty() && slot >= 0 && slot < n_slots_, "hand-off slot {} of {}", slot, n_slots_);
    auto* hx = const_cast<float*>(reinterpret_cast<const float*>(device(x_)));
    auto* hids = const_cast<int32_t*>(reinterpret_cast<const int32_t*>(device(ids_)));
    auto* hw = const_cast<float*>(reinterpret_cast<const float*>(device(weights_)));
    const auto* step = reinterpret_cast<const uint32_t*>(dev_ + kStepAt);
    auto* ready = reinterpret_cast<uint32_t*>(dev_ + ready_at(slot));
    const bool vec = n_embd_ % 4 == 0 && aligned16(x);
    publish_kernel<<<1, kThreads, 0, stream>>>(x, ids, weights, static_cast<int>(n_embd_),
                                               static_cast<int>(k_), vec, hx, hids, hw, step, ready);
    MOX_CUDA_CHECK_LAUNCH("handoff publish_kernel");
}

void HandoffChannel::collect(int64_t slot, float* out, StreamHandle stream, uint64_t timeout_ns) const {
    MOX_CHECK(!empty() && slot >= 0 && slot < n_slots_, "hand-off slot {} of {}", slot, n_slots_);
    const auto* hresult = reinterpret_cast<const float*>(device(result_));
    const auto* step = reinterpret_cast<const uint32_t*>(dev_ + kStepAt);
    const auto* done = reinterpret_cast<const uint32_t*>(dev_ + done_at(slot));
    auto* error = reinterpret_cast<uint32_t*>(dev_ + kErrorAt);
    const bool vec = n_embd_ % 4 == 0 && aligned16(out);
    collect_kernel<<<1, kThreads, 0, stream>>>(hresult, static_cast<int>(n_embd_), vec, out, step, done,
                                               error, error_word(HandoffError::gpu_timeout, slot),
                                               timeout_ns);
    MOX_CUDA_CHECK_LAUNCH("handoff collect_kernel");
}

uint32_t HandoffChannel::begin_step() {
    MOX_CHECK(!empty(), "hand-off step on an empty channel");
    step_ = (step_ + 1) & ~kFailed;  // 31 bits: the top one marks a failed answer
    if (step_ == 0) step_ = 1;       // 0 is every word's initial value
    std::atomic_ref<uint32_t>(*word(kErrorAt)).store(0, std::memory_order_relaxed);
    std::atomic_ref<uint32_t>(*word(kStepAt)).store(step_, std::memory_order_release);
    // The graph launch that follows must not overtake these stores (the driver's doorbell write is
    // an uncached store; a full fence orders it after them on any host).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    return step_;
}

bool HandoffChannel::wait_ready(int64_t slot, uint32_t step, StreamHandle stream,
                                std::chrono::nanoseconds timeout) {
    MOX_CHECK(!empty() && slot >= 0 && slot < n_slots_, "hand-off slot {} of {}", slot, n_slots_);
    std::atomic_ref<uint32_t> ready(*word(ready_at(slot))), error(*word(kErrorAt));
    using clock = std::chrono::steady_clock;
    const clock::time_point start = clock::now();
    clock::time_point next_query = start + std::chrono::milliseconds(1);
    for (uint32_t spin = 1;; ++spin) {
        if (ready.load(std::memory_order_acquire) == step) return true;
        if (error.load(std::memory_order_relaxed) != 0) return false;
        if (spin % 64 != 0) {
            cpu_pause();
            continue;
        }
        // Every 64 polls (a few us): the clock; after a millisecond, yield between polls (the GPU is
        // far behind: something else runs first) and ask the stream how it is once per millisecond.
        const clock::time_point now = clock::now();
        if (now - start < std::chrono::milliseconds(1)) continue;
        std::this_thread::yield();
        if (now >= next_query) {
            next_query = now + std::chrono::milliseconds(1);
            const cudaError_t q = cudaStreamQuery(stream);
            if (q != cudaSuccess && q != cudaErrorNotReady) {
                abort(slot);
                (void)cudaGetLastError();
                fail("CPU expert hand-off {}: the GPU stream failed while the host waited for it: {} ({})",
                     slot, cudaGetErrorString(q), static_cast<int>(q));
            }
            if (q == cudaSuccess) {  // finished: a publish that ran is visible by now
                if (ready.load(std::memory_order_acquire) == step) return true;
                if (error.load(std::memory_order_relaxed) != 0) return false;
                abort(slot);
                fail(
                    "CPU expert hand-off {}: the GPU finished step {} without publishing it (internal error)",
                    slot, step);
            }
        }
        if (now - start > timeout) {
            abort(slot);
            fail(
                "CPU expert hand-off {}: the GPU did not publish it within {:.1f} s (gave up; the GPU side "
                "was told to stop waiting)",
                slot, std::chrono::duration<double>(timeout).count());
        }
    }
}

void HandoffChannel::answer(int64_t slot, uint32_t step, bool ok) {
    MOX_CHECK(!empty() && slot >= 0 && slot < n_slots_, "hand-off slot {} of {}", slot, n_slots_);
    if (!ok)
        std::atomic_ref<uint32_t>(*word(kErrorAt))
            .store(error_word(HandoffError::cpu_failed, slot), std::memory_order_relaxed);
    // The result (written by any thread that finished before this call, e.g. through a thread pool's
    // join) and the error word must reach the GPU before done does: a release store, after a full
    // fence that also drains write-combining buffers in case a CPU kernel ever streams its output.
    std::atomic_thread_fence(std::memory_order_seq_cst);
    std::atomic_ref<uint32_t>(*word(done_at(slot)))
        .store(ok ? step : step | kFailed, std::memory_order_release);
}

void HandoffChannel::abort(int64_t slot) {
    MOX_CHECK(!empty(), "hand-off abort on an empty channel");
    std::atomic_ref<uint32_t>(*word(kErrorAt))
        .store(error_word(HandoffError::host_abort, slot), std::memory_order_seq_cst);
}

HandoffStatus HandoffChannel::status() const {
    if (empty()) return {};
    const uint32_t e = std::atomic_ref<uint32_t>(*word(kErrorAt)).load(std::memory_order_acquire);
    if (e == 0) return {};
    return {static_cast<HandoffError>(e & 0xffu), static_cast<int64_t>(e >> 8) - 1};
}

}  // namespace mox::cuda
