// The machine's CPU and memory layout, read with hwloc: physical cores (the right default thread
// count for memory-bound decode: a second hyper-thread adds no bandwidth), pinning of threads to
// cores, and NUMA nodes.
#pragma once

#include <cstddef>
#include <string>

namespace mox {

struct Topology {
    int physical_cores = 1;  // cores this process may run on
    int logical_cpus = 1;    // hardware threads this process may run on
    int numa_nodes = 1;
};

// Read once per process (cpusets of containers respected: disallowed cores are not counted).
const Topology& topology();

// Binds the calling thread to physical core `core` (mod the core count). Returns false (and leaves
// the thread unbound) where the OS refuses.
bool pin_current_thread_to_core(int core);

// On machines with several NUMA nodes, asks the kernel to interleave the pages of [addr, addr+len)
// across all nodes, so threads on every node read weights at their own node's share of the
// bandwidth instead of all reading node 0. A no-op (returning true) on one node.
bool interleave_memory(void* addr, size_t len);

std::string describe_topology();

}  // namespace mox
