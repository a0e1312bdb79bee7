// The GPU forward's greedy entry (Model::forward_argmax) against the full logits of forward: the
// same tokens, only the arg max copied back, and the logits after all when the pick is refused.
#include "cuda_test_util.h"

#include "gguf/reader.h"
#include "models/model.h"
#include "models/synth.h"

#include <unistd.h>
#include <algorithm>
#include <filesystem>
#include <string>

namespace mox::models {

namespace {

std::string tiny_model() {
    const std::string p = (std::filesystem::temp_directory_path() /
                           ("mox_cuda_model_test_" + std::to_string(getpid()) + ".gguf"))
                              .string();
    SynthOptions o;
    o.hparams = synth_preset("tiny");
    o.hparams.n_layer = 4;
    o.mix = QuantMix::q8_0;
    o.seed = 11;
    write_synthetic_model(p, o);
    return p;
}

int32_t host_argmax(const std::vector<float>& row, int64_t n) {
    return static_cast<int32_t>(std::max_element(row.begin(), row.begin() + n) - row.begin());
}

}  // namespace

TEST(CudaModel, ForwardArgmaxFollowsTheLogitsGreedyPath) {
    MOX_REQUIRE_CUDA_DEVICE();
    const std::string path = tiny_model();
    {
        const gguf::File file = gguf::File::open(path);
        Model model(file, 2, quant::host_isa(), false, Device::cuda);
        const StateOptions so{.n_ctx = 64};
        auto ref = model.new_state(so), fast = model.new_state(so);
        const int64_t V = model.n_vocab();
        const std::vector<int32_t> prompt = {5, 17, 250, 3};
        std::vector<float> ref_logits, fast_logits;
        SequenceBatch r{ref.get(), prompt}, f{fast.get(), prompt};
        model.forward(std::span(&r, 1), false, ref_logits);
        std::optional<int32_t> pick = model.forward_argmax(std::span(&f, 1), V, fast_logits);
        ASSERT_TRUE(pick.has_value()) << "the GPU path finds the arg max on the device";
        EXPECT_TRUE(fast_logits.empty()) << "only the arg max comes back";
        int32_t next = host_argmax(ref_logits, V);
        EXPECT_EQ(*pick, next);
        for (int step = 0; step < 24; ++step) {
            SequenceBatch rs{ref.get(), std::span<const int32_t>(&next, 1)};
            model.forward(std::span(&rs, 1), false, ref_logits);
            const int32_t want = host_argmax(ref_logits, V);
            SequenceBatch fs{fast.get(), std::span<const int32_t>(&next, 1)};
            pick = model.forward_argmax(std::span(&fs, 1), V, fast_logits);
            ASSERT_TRUE(pick.has_value()) << step;
            EXPECT_TRUE(fast_logits.empty()) << step;
            ASSERT_EQ(*pick, want) << "step " << step;
            next = want;
        }
        EXPECT_EQ(ref->n_past(), fast->n_past());

        // A pick at or past n_candidates is refused: the row comes back, equal to forward's.
        SequenceBatch rs{ref.get(), std::span<const int32_t>(&next, 1)};
        model.forward(std::span(&rs, 1), false, ref_logits);
        const int32_t top = host_argmax(ref_logits, V);
        SequenceBatch fs{fast.get(), std::span<const int32_t>(&next, 1)};
        pick = model.forward_argmax(std::span(&fs, 1), top, fast_logits);  // ids [0, top): top is out
        if (top == 0) {
            EXPECT_FALSE(true) << "the random model's pick is id 0: choose another prompt";
        } else {
            EXPECT_FALSE(pick.has_value());
            ASSERT_EQ(fast_logits.size(), ref_logits.size());
            EXPECT_EQ(fast_logits, ref_logits);
        }
    }
    std::filesystem::remove(path);
}

}  // namespace mox::models
