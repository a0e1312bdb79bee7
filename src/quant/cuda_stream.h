// The opaque CUDA handles that plain C++ headers pass around. cudaStream_t is `CUstream_st*`,
// cudaEvent_t is `CUevent_st*` and cudaGraphExec_t is `CUgraphExec_st*`; declaring the structs here lets launchers take a stream without any
// CUDA header (STYLE.md #8). A null StreamHandle is CUDA's legacy default stream.
#pragma once

struct CUstream_st;
struct CUevent_st;
struct CUgraphExec_st;

namespace mox::cuda {

using StreamHandle = CUstream_st*;
using EventHandle = CUevent_st*;
using GraphExecHandle = CUgraphExec_st*;

}  // namespace mox::cuda
