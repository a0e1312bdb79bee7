// Device memory, pinned host memory, streams and events for the CUDA backend. Plain C++:
// the rest of mox never includes CUDA headers; the implementation is ops/cuda/memory.cu, linked only
// with -DMOX_CUDA=ON. Every CUDA call behind these types is checked and throws mox::Error naming the
// call, file:line and CUDA's description.
#pragma once

#include "ops/weight.h"
#include "quant/cuda_stream.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace mox::cuda {

// Number of usable CUDA devices; 0 (never throws) when there is no driver or no device, so tests
// can skip cleanly on GPU-less machines.
int device_count();

// Makes `device` current for the calling thread.
void set_device(int device);
// How host threads wait for the device (cudaSetDeviceFlags, current device): spinning (the default
// when there are more cores than GPUs: lowest latency) or blocking on a semaphore, which frees the
// core for CPU work that runs at the same time (host-resident experts).
void set_blocking_sync(bool blocking);

// Waits for all work on the current device.
void device_synchronize();

// Brackets work for a profiler started with collection off (`ncu --profile-from-start off`):
// cudaProfilerStart / cudaProfilerStop.
void profiler_start();
void profiler_stop();

// Copies between host memory and any device pointer (a buffer, an arena slice). copy_to_device is
// asynchronous on `stream`; copy_to_host returns once the bytes are on the host.
void copy_to_device(void* device, const void* host, size_t bytes, StreamHandle stream = nullptr);
void copy_to_host(void* host, const void* device, size_t bytes, StreamHandle stream = nullptr);

// Asynchronous device -> device copy on `stream`. Capturable in a graph.
void copy_on_device(void* dst, const void* src, size_t bytes, StreamHandle stream);
// Asynchronous device -> host copy on `stream` (host memory pinned, or the copy is synchronous).
// Capturable in a graph.
void copy_to_host_async(void* host, const void* device, size_t bytes, StreamHandle stream);

// Runs fn(arg) on a CUDA driver thread once the earlier work of `stream` is done; later work on the
// stream waits until it returns. Capturable (a host node of a graph). fn must not call CUDA and must
// not throw (it runs where nothing can catch): record failures for the caller to check.
using HostFn = void (*)(void* arg);
void launch_host_func(StreamHandle stream, HostFn fn, void* arg);

// Device memory accounting (--vram-budget). Every DeviceBuffer of the process counts its
// bytes; with a budget set, an allocation that would bring context + allocated past it is refused
// with a mox::Error before cudaMalloc is called. The context's bytes are what the driver reports as
// used (total - free) when the budget is set, i.e. right after the context exists: this includes
// other processes on the same GPU, which is what an honest budget must count on a shared card.
struct DeviceMemory {
    uint64_t total = 0, free = 0;  // cudaMemGetInfo of the current device
};
DeviceMemory device_memory();
// Sets the budget (0 = none) and measures the context's bytes now; call after set_device.
void set_vram_budget(uint64_t bytes);
uint64_t vram_budget();
uint64_t context_bytes();    // as measured by set_vram_budget (0 before)
uint64_t allocated_bytes();  // live DeviceBuffer bytes
uint64_t peak_allocated_bytes();

// One cudaMalloc'ed range, freed on destruction. Move-only. Sizes are in bytes.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& other) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t size() const { return bytes_; }
    bool empty() const { return ptr_ == nullptr; }

    // Asynchronous on `stream` (host memory should be pinned for real overlap; pageable works too).
    void upload(const void* host, size_t bytes, size_t offset = 0, StreamHandle stream = nullptr);
    void download(void* host, size_t bytes, size_t offset = 0, StreamHandle stream = nullptr) const;
    void zero(StreamHandle stream = nullptr);

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// Per-step scratch: one device allocation made up front, handed out by bumping an offset, reset
// wholesale between steps, so the decode loop never calls cudaMalloc per token. Running out is an
// error that names the request (the caller sized the arena wrongly), never a silent allocation.
class ScratchArena {
public:
    ScratchArena() = default;
    explicit ScratchArena(size_t bytes) : buffer_(bytes) {}

    // `bytes` rounded up to `align` (a power of two, at least 16 so vector loads stay aligned).
    void* alloc(size_t bytes, size_t align = 256);
    template <typename T>
    T* alloc(size_t count) {
        return static_cast<T*>(alloc(count * sizeof(T)));
    }
    void reset() { used_ = 0; }
    size_t used() const { return used_; }
    size_t capacity() const { return buffer_.size(); }
    size_t high_water() const { return high_water_; }

private:
    DeviceBuffer buffer_;
    size_t used_ = 0;
    size_t high_water_ = 0;
};

// Page-locked host memory (cudaHostAlloc). Pinning can fail on a machine with little lockable
// memory; try_alloc then returns an empty buffer and the reason, and the caller falls back to
// pageable memory (slower transfers, same results).
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    ~PinnedBuffer();
    PinnedBuffer(PinnedBuffer&& other) noexcept;
    PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;

    // Never throws for an allocation failure; `why` (if given) receives CUDA's message.
    static PinnedBuffer try_alloc(size_t bytes, std::string* why = nullptr);

    void* data() const { return ptr_; }
    template <typename T>
    T* as() const {
        return static_cast<T*>(ptr_);
    }
    size_t size() const { return bytes_; }
    bool empty() const { return ptr_ == nullptr; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A host range page-locked in place (cudaHostRegister, read-only): e.g. pages of the mapped model
// file, so that DMA from them runs at pinned speed without a copy. Ranges must not overlap another
// registration (round to pages and merge first). Unregistered on destruction. Move-only.
class HostRegistration {
public:
    HostRegistration() = default;
    ~HostRegistration();
    HostRegistration(HostRegistration&& other) noexcept;
    HostRegistration& operator=(HostRegistration&& other) noexcept;
    HostRegistration(const HostRegistration&) = delete;
    HostRegistration& operator=(const HostRegistration&) = delete;

    // Never throws for a refusal (no lockable memory, read-only mappings unsupported...): returns an
    // empty registration and CUDA's message in `why`.
    static HostRegistration try_register(const void* p, size_t bytes, std::string* why = nullptr);
    bool empty() const { return ptr_ == nullptr; }
    size_t size() const { return bytes_; }

private:
    void* ptr_ = nullptr;
    size_t bytes_ = 0;
};

// A non-blocking stream (does not synchronise with the legacy default stream).
class Stream {
public:
    Stream();
    ~Stream();
    Stream(Stream&& other) noexcept;
    Stream& operator=(Stream&& other) noexcept;
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    StreamHandle handle() const { return stream_; }
    void synchronize() const;
    // Later work on this stream waits for `event` (recorded on any stream).
    void wait(EventHandle event) const;

private:
    StreamHandle stream_ = nullptr;
};

// A timing-capable event.
class Event {
public:
    Event();
    ~Event();
    Event(Event&& other) noexcept;
    Event& operator=(Event&& other) noexcept;
    Event(const Event&) = delete;
    Event& operator=(const Event&) = delete;

    EventHandle handle() const { return event_; }
    void record(StreamHandle stream = nullptr);
    void synchronize() const;
    // Whether the work before the last record() has finished (true if never recorded); never waits.
    bool done() const;
    // Milliseconds between two recorded (and completed) events.
    static float elapsed_ms(const Event& start, const Event& end);

private:
    EventHandle event_ = nullptr;
};

// A captured sequence of launches on one stream, replayed by one call (the decode step: ~600 small
// kernels per token would otherwise cost more in launch overhead than in work). Everything the
// captured kernels read that changes between replays (token id, position) must live in device
// memory at fixed addresses. Move-only.
class Graph {
public:
    Graph() = default;
    ~Graph();
    Graph(Graph&& other) noexcept;
    Graph& operator=(Graph&& other) noexcept;
    Graph(const Graph&) = delete;
    Graph& operator=(const Graph&) = delete;

    // Launches on `stream` between begin_capture and end_capture are recorded, not run. If anything
    // throws in between, call abort_capture so the stream leaves capture mode.
    static void begin_capture(StreamHandle stream);
    static Graph end_capture(StreamHandle stream);
    static void abort_capture(StreamHandle stream) noexcept;

    void launch(StreamHandle stream) const;
    bool empty() const { return exec_ == nullptr; }

private:
    GraphExecHandle exec_ = nullptr;
};

// A weight matrix (or expert stack) copied to the device: `view` is the same ops::Weight with its
// data pointer in device memory, for the CUDA launchers. The allocation is padded by 16 bytes so
// that 16-byte vector loads at the end of the last row never leave it.
struct DeviceWeight {
    DeviceBuffer buffer;
    ops::Weight view;
};

// Bytes of the whole weight (all experts, all rows).
size_t weight_bytes(const ops::Weight& w);

// Copies a host weight (e.g. an mmapped GGUF tensor) to a new device allocation; synchronous with
// respect to `stream` (returns after the copy finished, so the host bytes may go away).
DeviceWeight upload_weight(const ops::Weight& host, StreamHandle stream = nullptr);

}  // namespace mox::cuda
