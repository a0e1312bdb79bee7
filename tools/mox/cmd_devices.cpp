// mox devices: the hardware mox sees (CPU threads, memory, CUDA GPUs when built with CUDA) and the
// tuning values it runs with (core/tuning.h).
#include "commands.h"
#include "core/parallel.h"
#include "core/tuning.h"
#include "core/units.h"
#ifdef MOX_HAVE_CUDA
#include "ops/cuda_device.h"
#endif

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <unistd.h>

namespace mox::cli {

void register_devices(CLI::App& app) {
    CLI::App* cmd = app.add_subcommand("devices", "List the CPU and GPUs mox can use");
    cmd->callback([] {
        const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
        fmt::print("cpu: {} hardware threads, {} RAM\n", hardware_threads(),
                   format_bytes(static_cast<uint64_t>(pages) * static_cast<uint64_t>(page)));
#ifdef MOX_HAVE_CUDA
        for (const ops::CudaDeviceInfo& d : ops::cuda_devices())
            fmt::print("cuda:{}: {} (sm_{}{}), {} SMs, {} total, {} free, ~{:.0f} GB/s peak\n", d.index, d.name, d.cc_major,
                       d.cc_minor, d.sm_count, format_bytes(d.total_bytes), format_bytes(d.free_bytes),
                       d.peak_bandwidth / 1e9);
#else
        fmt::print("cuda: not built (configure with -DMOX_CUDA=ON)\n");
#endif
        fmt::print("{}\n", format_tuning(tuning()));
    });
}

}  // namespace mox::cli
