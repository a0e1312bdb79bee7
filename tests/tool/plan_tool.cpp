// Helper for tests/py/test_plan.py: writes the made-up hardware profiles of the planner's C++ tests
// (tests/plan/plan_fixtures.h) as profile JSON files, and full-size model files without weights.
//   plan_tool profile h200|3090|cpu PATH
//   plan_tool sparse-model q4_k_m|ud PATH
#include "../plan/plan_fixtures.h"

#include "core/error.h"
#include "plan/hardware.h"

#include <fmt/format.h>

#include <cstring>
#include <string>

int main(int argc, char** argv) {
    using namespace mox;
    try {
        if (argc != 4) fail("usage: plan_tool profile h200|3090|cpu PATH | sparse-model q4_k_m|ud PATH");
        const std::string what = argv[1], kind = argv[2], path = argv[3];
        if (what == "profile") {
            plan::HardwareProfile p;
            if (kind == "h200")
                p = plan::fixtures::h200_like();
            else if (kind == "3090")
                p = plan::fixtures::rtx3090_like();
            else if (kind == "cpu")
                p = plan::fixtures::cpu_only_like();
            else
                fail("unknown profile '{}'", kind);
            plan::save_profile(p, path);
        } else if (what == "sparse-model") {
            const models::Hparams hp = models::synth_preset("qwen3.6-35b-a3b");
            const bool ud = kind == "ud";
            if (!ud && kind != "q4_k_m") fail("unknown model kind '{}'", kind);
            plan::fixtures::write_sparse_model(path, hp, [&](const models::TensorSpec& t) {
                if (ud && t.name.find("_exps") != std::string::npos)
                    return t.layer < plan::fixtures::kFatLayers ? quant::TypeId::q8_0 : quant::TypeId::q4_k;
                return models::choose_tensor_type(t, models::QuantMix::q4_k_m, hp);
            });
        } else {
            fail("unknown command '{}'", what);
        }
    } catch (const Error& e) {
        fmt::print(stderr, "plan_tool: {}\n", e.what());
        return 1;
    }
    return 0;
}
