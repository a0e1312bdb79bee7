// Read-only memory map of a whole file (RAII). Model files are tens of GB: mapping them lets the
// OS page weights in on demand and share them between processes, and lets the GGUF reader hand
// out pointers into the file instead of copies.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace mox {

class MappedFile {
public:
    // Maps `path` read-only. Throws mox::Error naming the path when it cannot be opened, is not a
    // regular file or cannot be mapped. An empty file maps to an empty span.
    static MappedFile open(const std::string& path);

    MappedFile() = default;
    MappedFile(MappedFile&& other) noexcept;
    MappedFile& operator=(MappedFile&& other) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;
    ~MappedFile();

    const std::string& path() const { return path_; }
    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    std::span<const uint8_t> bytes() const { return {data_, static_cast<size_t>(size_)}; }

private:
    void release() noexcept;

    std::string path_;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
};

}  // namespace mox
