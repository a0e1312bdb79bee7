// Device memory, pinned memory, streams, events and the CUDA error path.
#include "cuda_test_util.h"

#include "core/error.h"

#include <cstring>
#include <numeric>
#include <string>

namespace mox::cuda {

using test::to_device;
using test::to_host;

TEST(CudaMemory, UploadDownloadRoundTrip) {
    MOX_REQUIRE_CUDA_DEVICE();
    std::vector<int32_t> host(1000);
    std::iota(host.begin(), host.end(), -300);
    DeviceBuffer buf = to_device(host);
    EXPECT_EQ(buf.size(), 4000u);
    EXPECT_EQ(to_host<int32_t>(buf, 1000), host);
    // A partial upload at an offset leaves the rest alone.
    const int32_t patch[2] = {7, 8};
    buf.upload(patch, sizeof(patch), 8);
    auto back = to_host<int32_t>(buf, 1000);
    EXPECT_EQ(back[2], 7);
    EXPECT_EQ(back[3], 8);
    EXPECT_EQ(back[4], host[4]);
    buf.zero();
    device_synchronize();
    for (int32_t v : to_host<int32_t>(buf, 1000)) ASSERT_EQ(v, 0);
}

TEST(CudaMemory, MoveTransfersOwnership) {
    MOX_REQUIRE_CUDA_DEVICE();
    DeviceBuffer a(64);
    void* p = a.data();
    DeviceBuffer b = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(b.data(), p);
    EXPECT_EQ(b.size(), 64u);
}

TEST(CudaMemory, FailedAllocationNamesTheCall) {
    MOX_REQUIRE_CUDA_DEVICE();
    try {
        DeviceBuffer huge(size_t{1} << 60);  // 1 EiB: no device has it
        FAIL() << "allocation of 1 EiB succeeded";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cudaMalloc"), std::string::npos) << msg;
        EXPECT_NE(msg.find("memory.cu"), std::string::npos) << msg;
    }
    // The failure is not sticky: the device still works.
    DeviceBuffer ok(256);
    ok.zero();
    device_synchronize();
}

TEST(CudaMemory, ScratchArenaBumpsAlignsAndResets) {
    MOX_REQUIRE_CUDA_DEVICE();
    ScratchArena arena(4096);
    auto* a = static_cast<char*>(arena.alloc(10));
    auto* b = static_cast<char*>(arena.alloc(10));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 256, 0u);
    EXPECT_EQ(b - a, 256);  // 10 bytes rounded up to the default alignment
    EXPECT_EQ(arena.used(), 266u);
    EXPECT_THROW(arena.alloc(4000), Error);
    arena.reset();
    EXPECT_EQ(arena.used(), 0u);
    EXPECT_EQ(static_cast<char*>(arena.alloc(4096)), a);  // reuses the same memory, no new allocation
    EXPECT_EQ(arena.high_water(), 4096u);
}

TEST(CudaMemory, PinnedBufferAndAsyncCopyOnStream) {
    MOX_REQUIRE_CUDA_DEVICE();
    std::string why;
    PinnedBuffer pinned = PinnedBuffer::try_alloc(1 << 20, &why);
    ASSERT_FALSE(pinned.empty()) << why;
    auto* p = pinned.as<float>();
    for (int i = 0; i < (1 << 18); ++i) p[i] = static_cast<float>(i) * 0.5f;
    Stream stream;
    DeviceBuffer dev(1 << 20);
    Event start, end;
    start.record(stream.handle());
    dev.upload(p, 1 << 20, 0, stream.handle());
    end.record(stream.handle());
    stream.synchronize();
    EXPECT_GE(Event::elapsed_ms(start, end), 0.0f);
    std::vector<float> back = to_host<float>(dev, 1 << 18);
    EXPECT_EQ(std::memcmp(back.data(), p, 1 << 20), 0);
    // An absurd request fails gracefully: no exception, an empty buffer and a reason.
    std::string why_huge;
    PinnedBuffer huge = PinnedBuffer::try_alloc(size_t{1} << 60, &why_huge);
    EXPECT_TRUE(huge.empty());
    EXPECT_NE(why_huge.find("cudaHostAlloc"), std::string::npos) << why_huge;
}

TEST(CudaMemory, UploadWeightKeepsShapeAndBytes) {
    MOX_REQUIRE_CUDA_DEVICE();
    std::vector<uint8_t> bytes(3 * 5 * 144);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 31 + 7);
    ops::Weight host{.data = bytes.data(),
                     .type = quant::TypeId::q4_k,
                     .n_in = 256,
                     .n_out = 5,
                     .n_expert = 3,
                     .row_bytes = 144};
    DeviceWeight dw = upload_weight(host);
    EXPECT_EQ(dw.view.n_expert, 3);
    EXPECT_EQ(dw.view.n_out, 5);
    EXPECT_EQ(dw.view.type, quant::TypeId::q4_k);
    EXPECT_NE(dw.view.data, bytes.data());
    EXPECT_GE(dw.buffer.size(), bytes.size() + 16);
    EXPECT_EQ(to_host<uint8_t>(dw.buffer, bytes.size()), bytes);
}

TEST(CudaMemory, BudgetCountsEveryBufferAndRefusesBeforeAllocating) {
    MOX_REQUIRE_CUDA_DEVICE();
    set_vram_budget(0);  // measures the context; no limit
    const uint64_t base = allocated_bytes();
    {
        DeviceBuffer a(3 << 20);
        EXPECT_EQ(allocated_bytes(), base + (3u << 20));
        DeviceBuffer b = std::move(a);  // moving does not count twice
        EXPECT_EQ(allocated_bytes(), base + (3u << 20));
    }
    EXPECT_EQ(allocated_bytes(), base);
    // The driver's used memory includes the context: it must be at least what we counted for it.
    const DeviceMemory m = device_memory();
    EXPECT_GE(m.total - m.free, context_bytes());
    EXPECT_GT(context_bytes(), 0u);
    // A budget 1 MiB above what is in use now: 512 KiB fits, 2 MiB more is refused by name.
    set_vram_budget(context_bytes() + allocated_bytes() + (1u << 20));
    EXPECT_NO_THROW(DeviceBuffer(512 << 10));
    try {
        DeviceBuffer too_big(2 << 20);
        ADD_FAILURE() << "allocation over the budget succeeded";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--vram-budget"), std::string::npos) << e.what();
    }
    EXPECT_EQ(allocated_bytes(), base);
    set_vram_budget(0);
}

TEST(CudaMemory, HostRegistrationMakesExistingMemoryDmaable) {
    MOX_REQUIRE_CUDA_DEVICE();
    // Page-aligned host memory, as the mapped model file's pages are.
    const size_t bytes = 4 << 20;
    void* raw = std::aligned_alloc(4096, bytes);
    ASSERT_NE(raw, nullptr);
    auto* host = static_cast<float*>(raw);
    for (size_t i = 0; i < bytes / 4; ++i) host[i] = static_cast<float>(i % 1000) - 3.5f;
    {
        std::string why;
        HostRegistration reg = HostRegistration::try_register(raw, bytes, &why);
        ASSERT_FALSE(reg.empty()) << why;
        EXPECT_EQ(reg.size(), bytes);
        Stream s;
        DeviceBuffer d(bytes);
        copy_to_device(d.data(), raw, bytes, s.handle());  // asynchronous: the pages are locked
        s.synchronize();
        std::vector<float> back(bytes / 4);
        d.download(back.data(), bytes);
        device_synchronize();
        for (size_t i = 0; i < back.size(); i += 4093) ASSERT_EQ(back[i], host[i]) << i;
    }
    std::free(raw);
}

namespace {
struct Counter {
    int calls = 0;
    float seen = 0;
    const float* from = nullptr;
};
void count_call(void* arg) {
    auto* c = static_cast<Counter*>(arg);
    c->calls++;
    c->seen = *c->from;
}
}  // namespace

TEST(CudaMemory, HostFunctionRunsInStreamOrderAndInsideGraphs) {
    MOX_REQUIRE_CUDA_DEVICE();
    Stream s;
    std::string why;
    PinnedBuffer pin = PinnedBuffer::try_alloc(sizeof(float), &why);
    ASSERT_FALSE(pin.empty()) << why;
    DeviceBuffer d = to_device(std::vector<float>{42.5f});
    Counter c{.calls = 0, .seen = 0, .from = pin.as<float>()};
    // The host function sees the device -> host copy enqueued before it.
    copy_to_host_async(pin.data(), d.data(), sizeof(float), s.handle());
    launch_host_func(s.handle(), count_call, &c);
    s.synchronize();
    EXPECT_EQ(c.calls, 1);
    EXPECT_EQ(c.seen, 42.5f);
    // Captured: one call per replay, reading the value current at replay time.
    Graph::begin_capture(s.handle());
    copy_to_host_async(pin.data(), d.data(), sizeof(float), s.handle());
    launch_host_func(s.handle(), count_call, &c);
    Graph g = Graph::end_capture(s.handle());
    const float next[1] = {-7.0f};
    d.upload(next, sizeof(float));
    device_synchronize();
    g.launch(s.handle());
    g.launch(s.handle());
    s.synchronize();
    EXPECT_EQ(c.calls, 3);
    EXPECT_EQ(c.seen, -7.0f);
}

}  // namespace mox::cuda
