#include "core/npy.h"

#include "core/error.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mox {

void write_npy_f32(const std::string& path, std::span<const float> data, const std::vector<int64_t>& shape) {
    int64_t n = 1;
    std::string dims;
    for (int64_t d : shape) {
        n *= d;
        dims += fmt::format("{}, ", d);
    }
    if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3, 4)" but "(3,)" for 1-D
    MOX_CHECK(n == static_cast<int64_t>(data.size()), "npy shape does not match data");
    std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': ({}), }}", dims);
    // Magic (6) + version (2) + header length (2) + header, padded with spaces to 64 bytes, ending in \n.
    const size_t total = 10 + header.size() + 1;
    header.append((64 - total % 64) % 64, ' ');
    header += '\n';
    std::FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot write {}: {}", path, std::strerror(errno));
    const unsigned char prefix[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<unsigned char>(header.size() & 0xFF),
                                      static_cast<unsigned char>(header.size() >> 8)};
    bool ok = std::fwrite(prefix, 1, 10, f) == 10 && std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
              std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
    ok &= std::fclose(f) == 0;
    if (!ok) fail("error writing {}", path);
}

}  // namespace mox
