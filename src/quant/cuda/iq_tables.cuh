// Device copies of the grid tables of the i-quants (IQ2_*, IQ3_*, IQ1_*), for the segment decoders
// in quant/cuda/segments.cuh. Only .cu files include this header.
//
// The numbers come from the same generated file as the host tables (quant/iq_grids.inc), included
// here a second time as the member list of a struct, so the device image carries them as initialised
// data (no upload at run time, nothing to do before the first launch, safe inside graph capture).
// The .inc spells each table `const std::array<T, N> name = {...};`; inside iq_data, `std::array`
// names the plain array type T[N] (the alias below), so each line declares a plain array member with
// a default member initializer, which device code indexes without calling host functions.
//
// Placement: __device__ global memory, read through the read-only path (__ldg, L1-cached). Lanes of
// a warp index unrelated entries, which __constant__ memory would serialise; the tables (33 KiB in
// all, iq1s_grid 16 KiB) are too large to stage in shared memory next to the activations.
// A `const` namespace-scope variable has internal linkage, so each .cu file that includes this
// header gets its own copy (no relocatable device code needed).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mox::cuda::iq_data {

// Only for the .inc below: see the header comment.
namespace std {
template <class T, ::std::size_t N>
using array = T[N];
}  // namespace std

struct Grids {
#include "quant/iq_grids.inc"
};

}  // namespace mox::cuda::iq_data

namespace mox::cuda::seg {

__device__ const iq_data::Grids kIqGrids{};

// Entry i of an 8-byte grid (IQ2_*, IQ1_*) as two little-endian words: bytes 0-3 and 4-7.
__device__ __forceinline__ uint2 grid8(const uint64_t* grid, uint32_t i) {
    return __ldg(reinterpret_cast<const uint2*>(grid) + i);
}

// Entry i of a 4-byte grid (IQ3_*).
__device__ __forceinline__ uint32_t grid4(const uint32_t* grid, uint32_t i) {
    return __ldg(grid + i);
}

// ksigns_iq2xs[i]: the 7 stored sign bits plus their parity as bit 7 (quant/iq_grids.h).
__device__ __forceinline__ uint32_t ksigns(uint32_t i) {
    return __ldg(kIqGrids.ksigns_iq2xs + i);
}

}  // namespace mox::cuda::seg
