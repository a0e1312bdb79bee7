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

}  // namespace mox::cuda
