// The decode hand-off through host-mapped memory (ops/cuda_handoff.h): publish -> host computation
// -> collect, captured in a CUDA graph and replayed with a new step number and new inputs each time,
// as the decode graph is. The host's computation is a known function of what it received, so a stale
// or torn transfer in either direction (an old step's inputs, a result read before it was written)
// shows as a mismatch against the same function applied on the host to the inputs the test chose.
// Then the failure paths: the host never answers (the GPU gives up after a test-sized limit), the
// host reports a failure, the host gives up itself, and a stream that never publishes.
#include "cuda_test_util.h"

#include "core/error.h"
#include "ops/cuda_handoff.h"
#include "ops/cuda_probe.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

namespace mox::cuda {
namespace {

using clock_type = std::chrono::steady_clock;
constexpr uint64_t kShortNs = 50'000'000;  // 50 ms: the GPU's limit in the failure tests

// The "CPU experts" of the tests: out[j] = x[j] * w[j % k] + ids[(j + 1) % k]. The first half of the
// row is written by a second thread, as a thread pool's workers would write it.
void host_compute(const float* x, const int32_t* ids, const float* w, int64_t d, int64_t k, float* out) {
    auto part = [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) out[j] = x[j] * w[j % k] + static_cast<float>(ids[(j + 1) % k]);
    };
    std::thread other(part, 0, d / 2);
    part(d / 2, d);
    other.join();
}

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// publish then collect of `slot` on the stream: one hand-off as the decode graph enqueues it.
void enqueue(const HandoffChannel& ch, int64_t slot, const DeviceBuffer& x, const DeviceBuffer& ids,
             const DeviceBuffer& w, const DeviceBuffer& out, StreamHandle stream,
             uint64_t timeout_ns = HandoffChannel::kDefaultTimeoutNs) {
    ch.publish(slot, x.as<float>(), ids.as<int32_t>(), w.as<float>(), stream);
    ch.collect(slot, out.as<float>(), stream, timeout_ns);
}

// The inputs of the failure tests: 64 floats routed to experts {0, 1} with weight 1, and outputs
// filled with 9 (a collect that gives up must overwrite them with zeros).
struct SmallHandoff {
    static constexpr int64_t d = 64, k = 2;
    DeviceBuffer x, ids, w;
    explicit SmallHandoff(uint32_t seed)
        : x(test::to_device(test::randn(d, seed))),
          ids(test::to_device(std::vector<int32_t>{0, 1})),
          w(test::to_device(std::vector<float>{1.0f, 1.0f})) {}
    static DeviceBuffer output() { return test::to_device(std::vector<float>(d, 9.0f)); }
};

struct Shape {
    int64_t d, k;
    int64_t offset;  // floats from the start of the device buffers: 1 takes the unaligned path
};

// n_slots hand-offs chained in one graph: slot i publishes x_i, collects into out_i, and x_{i+1} =
// out_i, so each slot's input exists only once the previous slot's answer arrived.
TEST(CudaHandoff, GraphReplaysCarryEachStepsValues) {
    MOX_REQUIRE_CUDA_DEVICE();
    for (const Shape sh : {Shape{2048, 8, 0}, Shape{1001, 5, 1}}) {
        SCOPED_TRACE(::testing::Message() << "d " << sh.d << ", k " << sh.k << ", offset " << sh.offset);
        const int64_t d = sh.d, k = sh.k, n_slots = 3;
        HandoffChannel ch(n_slots, d, k);
        Stream stream;
        const auto sd = static_cast<size_t>(d), sk = static_cast<size_t>(k),
                   off = static_cast<size_t>(sh.offset);
        DeviceBuffer x0((sd + off) * sizeof(float)), ids(sk * sizeof(int32_t)), w(sk * sizeof(float));
        std::vector<DeviceBuffer> out;
        for (int64_t i = 0; i < n_slots; ++i) out.emplace_back((sd + off) * sizeof(float));
        auto at = [&](const DeviceBuffer& b) { return b.as<float>() + off; };
        Graph::begin_capture(stream.handle());
        for (int64_t i = 0; i < n_slots; ++i) {
            ch.publish(i, i == 0 ? at(x0) : at(out[static_cast<size_t>(i - 1)]), ids.as<int32_t>(),
                       w.as<float>(), stream.handle());
            ch.collect(i, at(out[static_cast<size_t>(i)]), stream.handle(), 5'000'000'000ull);
        }
        Graph g = Graph::end_capture(stream.handle());

        for (uint32_t rep = 0; rep < 6; ++rep) {
            SCOPED_TRACE(::testing::Message() << "replay " << rep);
            const std::vector<float> xs = test::randn(sd, 100 + rep);
            std::mt19937 rng(rep);
            std::vector<int32_t> id(sk);
            for (int32_t& v : id) v = static_cast<int32_t>(rng() % 256);
            const std::vector<float> ws = test::randn(sk, 200 + rep);
            x0.upload(xs.data(), sd * sizeof(float), off * sizeof(float), stream.handle());
            ids.upload(id.data(), sk * sizeof(int32_t), 0, stream.handle());
            w.upload(ws.data(), sk * sizeof(float), 0, stream.handle());
            const uint32_t step = ch.begin_step();
            g.launch(stream.handle());
            for (int64_t i = 0; i < n_slots; ++i) {
                ASSERT_TRUE(ch.wait_ready(i, step, stream.handle()));
                host_compute(ch.x(), ch.ids(), ch.weights(), d, k, ch.result());
                ch.answer(i, step, true);
            }
            stream.synchronize();
            EXPECT_EQ(ch.status().error, HandoffError::none);
            // The same chain on the host, from the inputs chosen above.
            std::vector<float> ref = xs, next(sd);
            for (int64_t i = 0; i < n_slots; ++i) {
                host_compute(ref.data(), id.data(), ws.data(), d, k, next.data());
                ref = next;
                std::vector<float> got(sd);
                out[static_cast<size_t>(i)].download(got.data(), sd * sizeof(float), off * sizeof(float),
                                                     stream.handle());
                EXPECT_EQ(got, ref) << "slot " << i;
            }
        }
    }
}

// The host never answers slot 0: its collect gives up after the short limit with zeros and
// gpu_timeout, and slot 1's collect (the default 20 s limit) returns at once because the step failed.
// The next step on the same channel works again.
TEST(CudaHandoff, GpuGivesUpWhenTheHostNeverAnswers) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t d = 256, k = 4;
    HandoffChannel ch(2, d, k);
    Stream stream;
    const std::vector<float> xs = test::randn(d, 7);
    const std::vector<int32_t> id = {3, 1, 4, 1};
    const std::vector<float> ws = {0.5f, 0.25f, 0.125f, 0.125f};
    DeviceBuffer x = test::to_device(xs), ids = test::to_device(id), w = test::to_device(ws);
    DeviceBuffer out0 = test::to_device(std::vector<float>(d, 9.0f)),
                 out1 = test::to_device(std::vector<float>(d, 9.0f));

    uint32_t step = ch.begin_step();
    const auto t0 = clock_type::now();
    enqueue(ch, 0, x, ids, w, out0, stream.handle(), kShortNs);
    enqueue(ch, 1, x, ids, w, out1, stream.handle());
    ASSERT_TRUE(ch.wait_ready(0, step, stream.handle()));
    // The routing arrived intact even though nobody answers.
    EXPECT_EQ(std::vector<int32_t>(ch.ids(), ch.ids() + k), id);
    stream.synchronize();
    const double waited = seconds_since(t0);
    std::printf("[handoff] unanswered hand-off returned after %.3f s (limit 0.050 s)\n", waited);
    EXPECT_GE(waited, 0.05);
    EXPECT_LT(waited, 5.0);
    const HandoffStatus st = ch.status();
    EXPECT_EQ(st.error, HandoffError::gpu_timeout);
    EXPECT_EQ(st.slot, 0);
    EXPECT_EQ(test::to_host<float>(out0, d), std::vector<float>(d, 0.0f));
    EXPECT_EQ(test::to_host<float>(out1, d), std::vector<float>(d, 0.0f));

    // Recovery: a normal step after the failed one.
    step = ch.begin_step();
    EXPECT_EQ(ch.status().error, HandoffError::none);
    enqueue(ch, 0, x, ids, w, out0, stream.handle(), 5'000'000'000ull);
    ASSERT_TRUE(ch.wait_ready(0, step, stream.handle()));
    host_compute(ch.x(), ch.ids(), ch.weights(), d, k, ch.result());
    ch.answer(0, step, true);
    stream.synchronize();
    EXPECT_EQ(ch.status().error, HandoffError::none);
    std::vector<float> ref(d);
    host_compute(xs.data(), id.data(), ws.data(), d, k, ref.data());
    EXPECT_EQ(test::to_host<float>(out0, d), ref);
}

// The host answers "failed": the GPU stops waiting at once (its limit is the default 20 s), writes
// zeros, and the status names the slot.
TEST(CudaHandoff, CpuFailureReleasesTheGpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    const SmallHandoff in(3);
    const int64_t d = SmallHandoff::d;
    HandoffChannel ch(2, d, SmallHandoff::k);
    Stream stream;
    DeviceBuffer out0 = SmallHandoff::output(), out1 = SmallHandoff::output();
    const uint32_t step = ch.begin_step();
    const auto t0 = clock_type::now();
    enqueue(ch, 0, in.x, in.ids, in.w, out0, stream.handle());
    enqueue(ch, 1, in.x, in.ids, in.w, out1, stream.handle());
    ASSERT_TRUE(ch.wait_ready(0, step, stream.handle()));
    ch.answer(0, step, false);
    stream.synchronize();
    EXPECT_LT(seconds_since(t0), 5.0);
    const HandoffStatus st = ch.status();
    EXPECT_EQ(st.error, HandoffError::cpu_failed);
    EXPECT_EQ(st.slot, 0);
    EXPECT_EQ(test::to_host<float>(out0, d), std::vector<float>(d, 0.0f));
    EXPECT_EQ(test::to_host<float>(out1, d), std::vector<float>(d, 0.0f));
}

// The host waits for a slot the GPU cannot publish yet (the stream is held in slot 0's collect): past
// its own limit it throws and aborts the step, which releases the GPU long before its 20 s limit.
TEST(CudaHandoff, HostGivesUpAndReleasesTheGpu) {
    MOX_REQUIRE_CUDA_DEVICE();
    const SmallHandoff in(5);
    const int64_t d = SmallHandoff::d;
    HandoffChannel ch(2, d, SmallHandoff::k);
    Stream stream;
    DeviceBuffer out = SmallHandoff::output();
    const uint32_t step = ch.begin_step();
    const auto t0 = clock_type::now();
    enqueue(ch, 0, in.x, in.ids, in.w, out, stream.handle());
    EXPECT_THROW(ch.wait_ready(1, step, stream.handle(), std::chrono::milliseconds(50)), Error);
    stream.synchronize();
    EXPECT_LT(seconds_since(t0), 5.0);
    const HandoffStatus st = ch.status();
    EXPECT_EQ(st.error, HandoffError::host_abort);
    EXPECT_EQ(st.slot, 1);
    EXPECT_EQ(test::to_host<float>(out, d), std::vector<float>(d, 0.0f));
}

// A stream that finished without publishing the slot (a graph built without it): an error at once,
// not a wait for the host's limit.
TEST(CudaHandoff, HostNoticesAStreamThatNeverPublishes) {
    MOX_REQUIRE_CUDA_DEVICE();
    HandoffChannel ch(1, 32, 1);
    Stream stream;
    const uint32_t step = ch.begin_step();
    const auto t0 = clock_type::now();
    try {
        (void)ch.wait_ready(0, step, stream.handle(), std::chrono::seconds(10));
        ADD_FAILURE() << "wait_ready returned for a slot nobody published";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("without publishing"), std::string::npos) << e.what();
    }
    EXPECT_LT(seconds_since(t0), 5.0);
    EXPECT_EQ(ch.status().error, HandoffError::host_abort);
}

// The cost of a round trip: a graph of 40 hand-offs (a Qwen3.6 decode step with every layer's experts
// on the host) whose host side only copies x to the result, replayed 50 times; printed next to the
// calibration probe's host-node round trip for comparison. Asserted: every value arrived.
TEST(CudaHandoff, RoundTripCostPrinted) {
    MOX_REQUIRE_CUDA_DEVICE();
    const int64_t d = 2048, k = 8, n_slots = 40;
    HandoffChannel ch(n_slots, d, k);
    Stream stream;
    const std::vector<float> xs = test::randn(d, 11);
    DeviceBuffer x = test::to_device(xs), ids = test::to_device(std::vector<int32_t>(k, 1));
    DeviceBuffer w = test::to_device(std::vector<float>(k, 0.125f)), out(d * sizeof(float));
    Graph::begin_capture(stream.handle());
    for (int64_t i = 0; i < n_slots; ++i) {
        ch.publish(i, i == 0 ? x.as<float>() : out.as<float>(), ids.as<int32_t>(), w.as<float>(),
                   stream.handle());
        ch.collect(i, out.as<float>(), stream.handle(), 5'000'000'000ull);
    }
    Graph g = Graph::end_capture(stream.handle());
    auto step_once = [&] {
        const uint32_t step = ch.begin_step();
        g.launch(stream.handle());
        for (int64_t i = 0; i < n_slots; ++i) {
            if (!ch.wait_ready(i, step, stream.handle())) return;
            std::copy(ch.x(), ch.x() + d, ch.result());
            ch.answer(i, step, true);
        }
        stream.synchronize();
    };
    for (int i = 0; i < 3; ++i) step_once();  // warm-up
    const int reps = 50;
    const auto t0 = clock_type::now();
    for (int i = 0; i < reps; ++i) step_once();
    const double per = seconds_since(t0) / (reps * n_slots);
    EXPECT_EQ(ch.status().error, HandoffError::none);
    EXPECT_EQ(test::to_host<float>(out, d), xs);  // the copies compose to the identity
    const double hostfn = probe_host_roundtrip_s(20, 5);
    std::printf(
        "[handoff] mapped-memory hand-off: %.2f us per round trip (publish + host copy + collect, "
        "graph of %lld); host node with copies (probe): %.2f us\n",
        per * 1e6, static_cast<long long>(n_slots), hostfn * 1e6);
}

}  // namespace
}  // namespace mox::cuda
