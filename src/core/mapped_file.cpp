#include "core/mapped_file.h"

#include "core/error.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace mox {

namespace {

// Closes the descriptor on every path out of open(); the mapping keeps its own reference.
struct Fd {
    int fd = -1;
    ~Fd() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

MappedFile MappedFile::open(const std::string& path) {
    Fd fd;
    fd.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd.fd < 0) fail("cannot open '{}': {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd.fd, &st) != 0) fail("cannot stat '{}': {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("cannot map '{}': not a regular file", path);

    MappedFile m;
    m.path_ = path;
    m.size_ = static_cast<uint64_t>(st.st_size);
    if (m.size_ == 0) return m;  // mmap rejects length 0; an empty span is the honest answer
    void* p = ::mmap(nullptr, static_cast<size_t>(m.size_), PROT_READ, MAP_PRIVATE, fd.fd, 0);
    if (p == MAP_FAILED) fail("cannot map '{}' ({} bytes): {}", path, m.size_, std::strerror(errno));
    m.data_ = static_cast<const uint8_t*>(p);
    return m;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
    if (this != &other) {
        release();
        path_ = std::move(other.path_);
        data_ = std::exchange(other.data_, nullptr);
        size_ = std::exchange(other.size_, 0);
    }
    return *this;
}

MappedFile::~MappedFile() {
    release();
}

void MappedFile::release() noexcept {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), static_cast<size_t>(size_));
    data_ = nullptr;
    size_ = 0;
}

}  // namespace mox
