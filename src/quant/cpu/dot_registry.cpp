// The dot-kernel registry: CPU feature detection, the scalar reference kernels, and the lookup
// that picks the fastest kernel per (weight type, ISA cap).
#include "core/error.h"
#include "quant/cpu/kernels.h"
#include "quant/dot.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace mox::quant {

std::string_view isa_name(Isa isa) {
    switch (isa) {
        case Isa::scalar: return "scalar";
        case Isa::avx2: return "avx2";
        case Isa::avx512: return "avx512";
    }
    return "?";
}

std::optional<Isa> isa_from_name(std::string_view name) {
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
        if (isa_name(isa) == name) return isa;
    return std::nullopt;
}

namespace {

// CPUID feature bits (Intel SDM vol. 2, CPUID): read directly rather than through
// __builtin_cpu_supports, whose accepted names differ between GCC and Clang versions.
Isa detect_isa() {
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::scalar;
    const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
    if (!(osxsave && avx)) return Isa::scalar;
    // The OS must save the wider register state too (XCR0), or the instructions fault.
    uint32_t xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    const bool os_avx = (xcr0_lo & 0x6) == 0x6;
    const bool os_avx512 = os_avx && (xcr0_lo & 0xe0) == 0xe0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::scalar;
    const bool avx2 = os_avx && fma && f16c && (b & (1u << 5));
    const bool avx512 = avx2 && os_avx512 && (b & (1u << 16)) /* F */ && (b & (1u << 17)) /* DQ */ &&
                        (b & (1u << 30)) /* BW */ && (b & (1u << 31)) /* VL */ && (c & (1u << 11)) /* VNNI */;
    if (avx512) return Isa::avx512;
    if (avx2) return Isa::avx2;
#endif
    return Isa::scalar;
}

}  // namespace

Isa host_isa() {
    static const Isa isa = [] {
        Isa detected = detect_isa();
        // MOX_ISA caps the tier (tests and benchmarks compare tiers on one machine).
        if (const char* cap = std::getenv("MOX_ISA"); cap && *cap) {
            const auto want = isa_from_name(cap);
            if (!want) fail("MOX_ISA={}: expected scalar, avx2 or avx512", cap);
            detected = std::min(detected, *want);
        }
        return detected;
    }();
    return isa;
}

namespace {

// Reference kernel: dequantize the weight row, then one sequential fp32 dot per activation row, so a
// result never depends on the thread count or the batch it was computed in.
template <TypeId W>
void scalar_dot(int64_t n, const void* w, const void* act, size_t act_stride, int n_cols, float* out) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(n));
    traits(W).dequantize(w, row.data(), n);
    for (int j = 0; j < n_cols; ++j) {
        const auto* a = reinterpret_cast<const float*>(static_cast<const uint8_t*>(act) + j * act_stride);
        float sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += row[static_cast<size_t>(i)] * a[i];
        out[j] = sum;
    }
}

constexpr std::array kWeightTypes = {
    TypeId::f32,     TypeId::f16,    TypeId::bf16,   TypeId::q4_0,    TypeId::q4_1,  TypeId::q5_0,
    TypeId::q5_1,    TypeId::q8_0,   TypeId::q8_1,   TypeId::q2_k,    TypeId::q3_k,  TypeId::q4_k,
    TypeId::q5_k,    TypeId::q6_k,   TypeId::q8_k,   TypeId::iq2_xxs, TypeId::iq2_xs, TypeId::iq2_s,
    TypeId::iq3_xxs, TypeId::iq3_s,  TypeId::iq1_s,  TypeId::iq1_m,   TypeId::iq4_nl, TypeId::iq4_xs,
    TypeId::mxfp4,
};

template <size_t... I>
std::vector<DotKernel> scalar_kernels(std::index_sequence<I...>) {
    return {DotKernel{kWeightTypes[I], TypeId::f32, Isa::scalar, &scalar_dot<kWeightTypes[I]>}...};
}

const std::vector<DotKernel>& registry() {
    static const std::vector<DotKernel> table = [] {
        std::vector<DotKernel> all = scalar_kernels(std::make_index_sequence<kWeightTypes.size()>());
        for (auto make : {cpu::legacy_kernels_avx2, cpu::legacy_kernels_avx512, cpu::kquant_kernels_avx2,
                          cpu::kquant_kernels_avx512, cpu::iq_kernels_avx2, cpu::iq_kernels_avx512,
                          cpu::float_kernels_avx2, cpu::float_kernels_avx512}) {
            const cpu::KernelTable t = make();
            all.insert(all.end(), t.kernels, t.kernels + t.count);
        }
        return all;
    }();
    return table;
}

}  // namespace

const DotKernel& dot_kernel(TypeId weight, Isa max_isa) {
    const DotKernel* best = nullptr;
    for (const DotKernel& k : registry())
        if (k.weight == weight && k.isa <= max_isa && (!best || k.isa > best->isa)) best = &k;
    if (!best) fail("no dot kernel for weight type {}", type_name(weight));
    return *best;
}

std::vector<DotKernel> all_dot_kernels() { return registry(); }

void quantize_activations(TypeId act, const float* x, void* dst, int64_t n) {
    if (act == TypeId::f32) {
        std::memcpy(dst, x, static_cast<size_t>(n) * sizeof(float));
        return;
    }
    const TypeTraits& t = traits(act);
    MOX_CHECK(t.quantize != nullptr, "no quantizer for activation type {}", t.name);
    t.quantize(x, dst, n);
}

size_t activation_row_bytes(TypeId act, int64_t n) { return row_bytes(act, n); }

}  // namespace mox::quant
