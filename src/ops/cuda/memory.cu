#include "ops/cuda_memory.h"
#include "quant/cuda/check.cuh"

#include <cuda_profiler_api.h>

#include <algorithm>
#include <atomic>
#include <utility>

namespace mox::cuda {

int device_count() {
    int count = 0;
    // No driver / no device are normal states on CPU-only machines: report 0 and clear the error.
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}

void set_device(int device) {
    MOX_CUDA_CHECK(cudaSetDevice(device));
}

void set_blocking_sync(bool blocking) {
    MOX_CUDA_CHECK(cudaSetDeviceFlags(blocking ? cudaDeviceScheduleBlockingSync : cudaDeviceScheduleAuto));
}

void device_synchronize() {
    MOX_CUDA_CHECK(cudaDeviceSynchronize());
}

void profiler_start() {
    MOX_CUDA_CHECK(cudaProfilerStart());
}

void profiler_stop() {
    MOX_CUDA_CHECK(cudaProfilerStop());
}

void copy_to_device(void* device, const void* host, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return;
    MOX_CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream));
}

void copy_to_host(void* host, const void* device, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return;
    MOX_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_on_device(void* dst, const void* src, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return;
    MOX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void copy_to_host_async(void* host, const void* device, size_t bytes, StreamHandle stream) {
    if (bytes == 0) return;
    MOX_CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream));
}

void launch_host_func(StreamHandle stream, HostFn fn, void* arg) {
    MOX_CUDA_CHECK(cudaLaunchHostFunc(stream, fn, arg));
}

// ---- accounting

namespace {
std::atomic<uint64_t> g_allocated{0}, g_peak{0}, g_budget{0}, g_context{0};

void count_alloc(size_t bytes) {
    const uint64_t now = g_allocated.fetch_add(bytes) + bytes;
    uint64_t peak = g_peak.load();
    while (now > peak && !g_peak.compare_exchange_weak(peak, now)) {
    }
}
}  // namespace

DeviceMemory device_memory() {
    size_t free = 0, total = 0;
    MOX_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return {total, free};
}

void set_vram_budget(uint64_t bytes) {
    MOX_CUDA_CHECK(cudaFree(nullptr));  // the context exists from here on
    const DeviceMemory m = device_memory();
    // What is in use now that is not ours: the context (and whatever else runs on the GPU).
    g_context = m.total - m.free - std::min<uint64_t>(g_allocated.load(), m.total - m.free);
    g_budget = bytes;
}
uint64_t vram_budget() { return g_budget.load(); }
uint64_t context_bytes() { return g_context.load(); }
uint64_t allocated_bytes() { return g_allocated.load(); }
uint64_t peak_allocated_bytes() { return g_peak.load(); }

// ---- DeviceBuffer

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes == 0) return;
    const uint64_t budget = g_budget.load();
    if (budget > 0 && g_context.load() + g_allocated.load() + bytes > budget)
        fail("--vram-budget {:.2f} GiB: allocating {:.1f} MiB more would bring mox's GPU memory to {:.2f} GiB "
             "(CUDA context {:.0f} MiB + {:.2f} GiB already allocated)",
             budget / 1073741824.0, bytes / 1048576.0, (g_context.load() + g_allocated.load() + bytes) / 1073741824.0,
             g_context.load() / 1048576.0, g_allocated.load() / 1073741824.0);
    MOX_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    count_alloc(bytes);
}

DeviceBuffer::~DeviceBuffer() {
    // Destructors must not throw; a failing cudaFree means the context is already broken.
    if (ptr_) {
        (void)cudaFree(ptr_);
        g_allocated -= bytes_;
    }
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_) {
            (void)cudaFree(ptr_);
            g_allocated -= bytes_;
        }
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::upload(const void* host, size_t bytes, size_t offset, StreamHandle stream) {
    MOX_CHECK(offset + bytes <= bytes_, "upload of {} bytes at {} into a buffer of {}", bytes, offset,
              bytes_);
    if (bytes == 0) return;
    MOX_CUDA_CHECK(
        cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, host, bytes, cudaMemcpyHostToDevice, stream));
}

void DeviceBuffer::download(void* host, size_t bytes, size_t offset, StreamHandle stream) const {
    MOX_CHECK(offset + bytes <= bytes_, "download of {} bytes at {} from a buffer of {}", bytes, offset,
              bytes_);
    if (bytes == 0) return;
    MOX_CUDA_CHECK(cudaMemcpyAsync(host, static_cast<const char*>(ptr_) + offset, bytes,
                                   cudaMemcpyDeviceToHost, stream));
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
}

void DeviceBuffer::zero(StreamHandle stream) {
    if (bytes_ == 0) return;
    MOX_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, bytes_, stream));
}

// ---- ScratchArena

void* ScratchArena::alloc(size_t bytes, size_t align) {
    MOX_CHECK(align >= 16 && (align & (align - 1)) == 0, "alignment {}", align);
    const size_t start = (used_ + align - 1) & ~(align - 1);
    if (start + bytes > buffer_.size())
        fail("CUDA scratch arena: {} bytes requested with {} of {} in use", bytes, used_, buffer_.size());
    used_ = start + bytes;
    high_water_ = std::max(high_water_, used_);
    return static_cast<char*>(buffer_.data()) + start;
}

// ---- PinnedBuffer

PinnedBuffer::~PinnedBuffer() {
    if (ptr_) (void)cudaFreeHost(ptr_);
}

PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
    if (this != &other) {
        if (ptr_) (void)cudaFreeHost(ptr_);
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

PinnedBuffer PinnedBuffer::try_alloc(size_t bytes, std::string* why) {
    PinnedBuffer out;
    if (bytes == 0) return out;
    void* p = nullptr;
    const cudaError_t err = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();  // not sticky: clear it so later calls do not see it
        if (why) *why = fmt::format("cudaHostAlloc of {} bytes: {}", bytes, cudaGetErrorString(err));
        return out;
    }
    out.ptr_ = p;
    out.bytes_ = bytes;
    return out;
}

// ---- HostRegistration

HostRegistration::~HostRegistration() {
    if (ptr_) (void)cudaHostUnregister(ptr_);
}

HostRegistration::HostRegistration(HostRegistration&& other) noexcept
    : ptr_(std::exchange(other.ptr_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}

HostRegistration& HostRegistration::operator=(HostRegistration&& other) noexcept {
    if (this != &other) {
        if (ptr_) (void)cudaHostUnregister(ptr_);
        ptr_ = std::exchange(other.ptr_, nullptr);
        bytes_ = std::exchange(other.bytes_, 0);
    }
    return *this;
}

HostRegistration HostRegistration::try_register(const void* p, size_t bytes, std::string* why) {
    HostRegistration out;
    if (bytes == 0) return out;
    void* q = const_cast<void*>(p);
    const cudaError_t err = cudaHostRegister(q, bytes, cudaHostRegisterPortable | cudaHostRegisterReadOnly);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        if (why) *why = fmt::format("cudaHostRegister of {} bytes: {}", bytes, cudaGetErrorString(err));
        return out;
    }
    out.ptr_ = q;
    out.bytes_ = bytes;
    return out;
}

// ---- Stream

Stream::Stream() {
    MOX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

Stream::~Stream() {
    if (stream_) (void)cudaStreamDestroy(stream_);
}

Stream::Stream(Stream&& other) noexcept : stream_(std::exchange(other.stream_, nullptr)) {}

Stream& Stream::operator=(Stream&& other) noexcept {
    if (this != &other) {
        if (stream_) (void)cudaStreamDestroy(stream_);
        stream_ = std::exchange(other.stream_, nullptr);
    }
    return *this;
}

void Stream::synchronize() const {
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void Stream::wait(EventHandle event) const {
    MOX_CUDA_CHECK(cudaStreamWaitEvent(stream_, event, 0));
}

// ---- Event

Event::Event() {
    MOX_CUDA_CHECK(cudaEventCreate(&event_));
}

Event::~Event() {
    if (event_) (void)cudaEventDestroy(event_);
}

Event::Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}

Event& Event::operator=(Event&& other) noexcept {
    if (this != &other) {
        if (event_) (void)cudaEventDestroy(event_);
        event_ = std::exchange(other.event_, nullptr);
    }
    return *this;
}

void Event::record(StreamHandle stream) {
    MOX_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void Event::synchronize() const {
    MOX_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool Event::done() const {
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) {
        (void)cudaGetLastError();  // not an error: clear it so the next check does not see it
        return false;
    }
    MOX_CUDA_CHECK(e);
    return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
    float ms = 0;
    MOX_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, end.event_));
    return ms;
}

// ---- Graph

Graph::~Graph() {
    if (exec_) (void)cudaGraphExecDestroy(exec_);
}

Graph::Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}

Graph& Graph::operator=(Graph&& other) noexcept {
    if (this != &other) {
        if (exec_) (void)cudaGraphExecDestroy(exec_);
        exec_ = std::exchange(other.exec_, nullptr);
    }
    return *this;
}

void Graph::begin_capture(StreamHandle stream) {
    MOX_CHECK(stream != nullptr, "graph capture needs a created stream, not the legacy default one");
    // Relaxed: the launchers may query and set kernel attributes while capturing.
    MOX_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
}

Graph Graph::end_capture(StreamHandle stream) {
    cudaGraph_t graph = nullptr;
    MOX_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    Graph out;
    const cudaError_t err = cudaGraphInstantiate(&out.exec_, graph, 0);
    (void)cudaGraphDestroy(graph);
    if (err != cudaSuccess) cuda_fail(err, "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__);
    return out;
}

void Graph::abort_capture(StreamHandle stream) noexcept {
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
}

void Graph::launch(StreamHandle stream) const {
    MOX_CHECK(exec_ != nullptr, "launch of an empty graph");
    MOX_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
}

// ---- weights

size_t weight_bytes(const ops::Weight& w) {
    return static_cast<size_t>(w.n_expert * w.n_out) * w.row_bytes;
}

DeviceWeight upload_weight(const ops::Weight& host, StreamHandle stream) {
    MOX_CHECK(host.valid(), "upload of an empty weight");
    const size_t bytes = weight_bytes(host);
    DeviceWeight out;
    out.buffer = DeviceBuffer(bytes + 16);
    out.buffer.upload(host.data, bytes, 0, stream);
    // The pad is zeroed so that a vector load past the last row reads defined bytes.
    MOX_CUDA_CHECK(cudaMemsetAsync(out.buffer.as<char>() + bytes, 0, 16, stream));
    MOX_CUDA_CHECK(cudaStreamSynchronize(stream));
    out.view = host;
    out.view.data = out.buffer.as<const uint8_t>();
    return out;
}

}  // namespace mox::cuda
