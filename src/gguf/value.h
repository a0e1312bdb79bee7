// GGUF metadata values: the 13 value types of the format, arrays (nested allowed) included.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

namespace mox::gguf {

enum class ValueType : uint32_t {
    u8 = 0,
    i8 = 1,
    u16 = 2,
    i16 = 3,
    u32 = 4,
    i32 = 5,
    f32 = 6,
    boolean = 7,
    string = 8,
    array = 9,
    u64 = 10,
    i64 = 11,
    f64 = 12,
};

std::string_view value_type_name(ValueType t);

class Value;

struct Array {
    ValueType elem_type = ValueType::u8;
    std::vector<Value> items;
};

// One metadata value. Integers are kept in the widest storage of their signedness; `type` says
// what the file holds (the writer writes exactly that type back).
class Value {
public:
    Value() = default;
    static Value u8(uint8_t v) { return Value(ValueType::u8, uint64_t{v}); }
    static Value i8(int8_t v) { return Value(ValueType::i8, int64_t{v}); }
    static Value u16(uint16_t v) { return Value(ValueType::u16, uint64_t{v}); }
    static Value i16(int16_t v) { return Value(ValueType::i16, int64_t{v}); }
    static Value u32(uint32_t v) { return Value(ValueType::u32, uint64_t{v}); }
    static Value i32(int32_t v) { return Value(ValueType::i32, int64_t{v}); }
    static Value u64(uint64_t v) { return Value(ValueType::u64, v); }
    static Value i64(int64_t v) { return Value(ValueType::i64, v); }
    static Value f32(float v) { return Value(ValueType::f32, double{v}); }
    static Value f64(double v) { return Value(ValueType::f64, v); }
    static Value boolean(bool v) { return Value(ValueType::boolean, v); }
    static Value string(std::string v) { return Value(ValueType::string, std::move(v)); }
    static Value array(Array v) { return Value(ValueType::array, std::move(v)); }
    // Convenience builders for the common homogeneous arrays.
    static Value string_array(const std::vector<std::string>& v);
    static Value i32_array(const std::vector<int32_t>& v);
    static Value f32_array(const std::vector<float>& v);

    ValueType type() const { return type_; }
    bool is_integer() const;
    bool is_float() const { return type_ == ValueType::f32 || type_ == ValueType::f64; }

    // Typed reads; each returns nullopt when the stored type does not fit (e.g. a negative i32 read
    // as unsigned, or a string read as a number). Integer reads accept any integer type.
    std::optional<uint64_t> as_uint() const;
    std::optional<int64_t> as_int() const;
    std::optional<double> as_float() const;  // f32/f64 and integers
    std::optional<bool> as_bool() const;
    const std::string* as_string() const;
    const Array* as_array() const;

    // Human-readable, abbreviated for long arrays ("[2048 x string: "a", "b", ...]").
    std::string to_display(size_t max_items = 8) const;

    bool operator==(const Value&) const = default;

private:
    using Storage = std::variant<uint64_t, int64_t, double, bool, std::string, Array>;
    // Builds the alternative in place: moving a whole variant here trips GCC 12's
    // -Wmaybe-uninitialized under -fsanitize=address (a false positive).
    template <typename T>
    Value(ValueType t, T&& v) : type_(t), storage_(std::in_place_type<std::decay_t<T>>, std::forward<T>(v)) {}
    ValueType type_ = ValueType::u8;
    Storage storage_{uint64_t{0}};
};

inline bool operator==(const Array& a, const Array& b) { return a.elem_type == b.elem_type && a.items == b.items; }

struct KeyValue {
    std::string key;
    Value value;
};

}  // namespace mox::gguf
