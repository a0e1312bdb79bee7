// libFuzzer target for the GGUF reader: any input must either parse or throw mox::Error. A crash,
// a sanitizer report, another exception or an oversized allocation is a bug. Seeds: the checked-in
// corpus in tests/data/gguf (scripts/fuzz.sh).
#include "core/error.h"
#include "gguf/reader.h"

#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Odd inputs also enable the tensor data scan, so both paths are fuzzed.
    mox::gguf::ReadOptions options;
    options.check_tensor_data = size % 2 == 1;
    try {
        const mox::gguf::File f =
            mox::gguf::File::parse(std::span<const uint8_t>(data, size), "fuzz.gguf", options);
        // Use what a caller would use, so lazily wrong results (bad pointers, sizes) show up.
        size_t sum = 0;
        for (const mox::gguf::KeyValue& kv : f.metadata()) sum += kv.value.to_display(4).size();
        for (const mox::gguf::TensorInfo& t : f.tensors()) {
            if (f.find_tensor(t.name) != &t) __builtin_trap();
            if (!t.bytes().empty()) sum += t.bytes().front() + t.bytes().back();
        }
        (void)f.get_uint_or("general.alignment", 0);
        return sum == 0xFFFFFFFF ? 1 : 0;
    } catch (const mox::Error&) {
        return 0;
    }
}
