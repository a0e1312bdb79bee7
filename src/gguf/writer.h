// Streaming GGUF writer (v3, little-endian). Tensor infos are declared up front (their sizes follow
// from shape and type), the header is written once, then each tensor's data is streamed in order,
// in as many pieces as the producer likes: a 20 GB file needs only one piece in memory at a time.
//
//   Writer w(path);
//   w.set("general.architecture", Value::string("qwen35moe"));
//   w.add_tensor("token_embd.weight", {2048, 248320}, TypeId::q4_k);
//   w.write_header();
//   w.write_data(bytes_part1); w.write_data(bytes_part2); ...   // exactly n_bytes per tensor, in order
//   w.finish();
#pragma once

#include "gguf/value.h"
#include "quant/types.h"

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace mox::gguf {

class Writer {
public:
    explicit Writer(const std::string& path, uint32_t alignment = 32);
    ~Writer();  // closes the file; a Writer destroyed before finish() removes its partial file
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // Adds or replaces a metadata entry (order of first insertion is kept).
    void set(const std::string& key, Value value);
    // Declares a tensor; ne in ggml order (ne[0] contiguous). Returns its index.
    size_t add_tensor(const std::string& name, std::span<const int64_t> ne, quant::TypeId type);
    size_t add_tensor(const std::string& name, std::initializer_list<int64_t> ne, quant::TypeId type) {
        return add_tensor(name, std::span<const int64_t>(ne.begin(), ne.size()), type);
    }
    uint64_t tensor_bytes(size_t index) const;

    void write_header();
    // Appends data to the current tensor; moves on to the next when the current one is complete
    // (alignment padding is inserted automatically). Writing past the declared sizes is an error.
    void write_data(std::span<const uint8_t> bytes);
    // Checks that every tensor got exactly its bytes, flushes and closes.
    void finish();

private:
    struct Tensor {
        std::string name;
        std::vector<int64_t> ne;
        quant::TypeId type;
        uint64_t n_bytes;
    };
    void put(const void* data, size_t n);
    void pad_to_alignment();

    std::string path_;
    uint32_t alignment_;
    std::FILE* file_ = nullptr;
    uint64_t written_ = 0;
    std::vector<KeyValue> metadata_;
    std::vector<Tensor> tensors_;
    bool header_written_ = false;
    bool finished_ = false;
    size_t current_ = 0;         // tensor being streamed
    uint64_t current_done_ = 0;  // its bytes written so far
};

}  // namespace mox::gguf
