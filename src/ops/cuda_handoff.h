// The decode hand-off between a CUDA graph and a host thread through host-mapped memory (routed
// experts computed by the CPU in the middle of the GPU's decode step). Plain C++ (STYLE.md
// #8); the kernels and the host side are ops/cuda/handoff.cu, linked only with -DMOX_CUDA=ON.
//
// Why not a host node (cudaLaunchHostFunc): the driver wakes one of its threads per node and the
// stream then waits for that thread's completion signal, ~55 us per round trip on an H200 on top of
// the CPU's work, and two copy nodes around it. Here the GPU and a host thread that is already awake
// (the one that launched the graph) talk through words in page-locked, device-mapped memory, so a
// round trip is a few PCIe transactions.
//
// The protocol, per decode step (the graph is replayed unchanged: it reads the step number from
// mapped memory, never from its launch parameters):
//   host: begin_step() clears the error word and writes step = s (s > 0, different every step);
//         launches the graph; then for each slot (host layer) in the graph's order:
//         wait_ready(slot, s) -> compute from x()/ids()/weights() into result() -> answer(slot, s).
//   GPU:  publish(slot) stores x, ids, weights into the mapped buffers, fences at system scope and
//         stores ready[slot] = s; collect(slot) spins until done[slot] == s (or the error word is
//         set, or its time limit passes) and copies result() into device memory, zeros on failure.
// Neither side can wait for ever: collect gives up after `timeout_ns` and records gpu_timeout;
// answer(ok = false) records cpu_failed before releasing the GPU; wait_ready gives up after its own
// limit or when the stream failed or finished without publishing, recording host_abort so that every
// later collect of the step returns at once. After the stream finished, status() says what happened.
//
// One set of x/ids/weights/result buffers serves every slot: the slots of a step run one after the
// other (collect of slot i precedes publish of slot i + 1 in stream order, and the host answers slot
// i before it waits for slot i + 1).
#pragma once

#include "quant/cuda_stream.h"

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace mox::cuda {

enum class HandoffError : uint32_t {
    none = 0,
    gpu_timeout = 1,  // collect waited past its limit for the host's answer
    cpu_failed = 2,   // the host answered that its computation failed
    host_abort = 3,   // the host gave up waiting for publish (its limit, or a failed stream)
};

struct HandoffStatus {
    HandoffError error = HandoffError::none;
    int64_t slot = -1;  // where it happened (-1: none)
};

// Mapped pinned memory for n_slots hand-offs of one token (n_embd floats of x and of result, k ids
// and k weights), plus the words of the protocol. Move-only; a channel must not be destroyed while a
// graph that uses it may still run.
class HandoffChannel {
public:
    // 20 s: far beyond any CPU expert computation (~0.2 ms), short enough that a bug shows as an
    // error instead of a hung GPU.
    static constexpr uint64_t kDefaultTimeoutNs = 20'000'000'000ull;

    HandoffChannel() = default;
    // Throws mox::Error (naming CUDA's reason) if mapped page-locked memory cannot be had.
    HandoffChannel(int64_t n_slots, int64_t n_embd, int64_t k);
    ~HandoffChannel();
    HandoffChannel(HandoffChannel&& other) noexcept;
    HandoffChannel& operator=(HandoffChannel&& other) noexcept;
    HandoffChannel(const HandoffChannel&) = delete;
    HandoffChannel& operator=(const HandoffChannel&) = delete;

    bool empty() const { return host_ == nullptr; }
    int64_t slots() const { return n_slots_; }

    // ---- device side: launches on `stream`, capturable in a graph (kernel nodes only).
    // x [n_embd], ids [k], weights [k]: device memory.
    void publish(int64_t slot, const float* x, const int32_t* ids, const float* weights,
                 StreamHandle stream) const;
    // out [n_embd], device memory: the host's result, or zeros if the hand-off failed.
    void collect(int64_t slot, float* out, StreamHandle stream,
                 uint64_t timeout_ns = kDefaultTimeoutNs) const;

    // ---- host side, one thread; the stream must not be running a step of this channel.
    // Clears the error word and publishes the next step number (1..2^31-1: never 0, the words'
    // initial value).
    uint32_t begin_step();
    // Spins (pause, then yields after a millisecond) until the GPU published `slot` of `step`: true.
    // false: the step already failed (the error word is set; stop serving, the graph finishes on its
    // own). Throws mox::Error, after recording host_abort so the GPU stops waiting too, when
    // `timeout` passes, or when `stream` failed or finished without publishing the slot.
    bool wait_ready(int64_t slot, uint32_t step, StreamHandle stream,
                    std::chrono::nanoseconds timeout = std::chrono::nanoseconds(kDefaultTimeoutNs +
                                                                                10'000'000'000ull));
    // Valid between wait_ready and answer of a slot: the published inputs, and where the result goes.
    const float* x() const { return x_; }
    const int32_t* ids() const { return ids_; }
    const float* weights() const { return weights_; }
    float* result() const { return result_; }
    // Releases the GPU waiting in collect(slot): ok = false records cpu_failed first, so the GPU
    // writes zeros and every later collect of the step returns at once.
    void answer(int64_t slot, uint32_t step, bool ok);
    // Records host_abort for `slot`: every collect of the step returns at once.
    void abort(int64_t slot);
    // What went wrong in the last step (read after the stream finished it).
    HandoffStatus status() const;

private:
    uint32_t* word(size_t offset) const;
    const uint8_t* device(const void* host) const;

    void* host_ = nullptr;    // the mapped allocation (host address)
    uint8_t* dev_ = nullptr;  // the same memory's device address
    size_t bytes_ = 0;
    int64_t n_slots_ = 0, n_embd_ = 0, k_ = 0;
    float* x_ = nullptr;
    int32_t* ids_ = nullptr;
    float* weights_ = nullptr;
    float* result_ = nullptr;
    uint32_t step_ = 0;
};

}  // namespace mox::cuda
