#include "core/topology.h"

#include <fmt/format.h>
#include <hwloc.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include <unistd.h>

namespace mox {

namespace {

// One hwloc topology for the process; hwloc calls on it are serialised by the mutex.
struct Hwloc {
    hwloc_topology_t topo = nullptr;
    std::mutex mutex;
    Hwloc() {
        if (hwloc_topology_init(&topo) != 0 || hwloc_topology_load(topo) != 0) {
            if (topo) hwloc_topology_destroy(topo);
            topo = nullptr;
        }
    }
    ~Hwloc() {
        if (topo) hwloc_topology_destroy(topo);
    }
};

Hwloc& hwloc() {
    static Hwloc h;
    return h;
}

}  // namespace

const Topology& topology() {
    static const Topology t = [] {
        Topology r;
        r.logical_cpus = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
        r.physical_cores = r.logical_cpus;
        Hwloc& h = hwloc();
        if (!h.topo) return r;
        std::lock_guard lock(h.mutex);
        const int cores = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE);
        const int pus = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_PU);
        const int nodes = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_NUMANODE);
        if (cores > 0) r.physical_cores = cores;
        if (pus > 0) r.logical_cpus = pus;
        if (nodes > 0) r.numa_nodes = nodes;
        return r;
    }();
    return t;
}

bool pin_current_thread_to_core(int core) {
    Hwloc& h = hwloc();
    if (!h.topo) return false;
    std::lock_guard lock(h.mutex);
    const int n = hwloc_get_nbobjs_by_type(h.topo, HWLOC_OBJ_CORE);
    if (n <= 0) return false;
    hwloc_obj_t obj = hwloc_get_obj_by_type(h.topo, HWLOC_OBJ_CORE, static_cast<unsigned>(core % n));
    if (!obj || !obj->cpuset) return false;
    // One hardware thread of the core: the OS cannot move the thread between siblings.
    hwloc_cpuset_t set = hwloc_bitmap_dup(obj->cpuset);
    hwloc_bitmap_singlify(set);
    const int rc = hwloc_set_cpubind(h.topo, set, HWLOC_CPUBIND_THREAD);
    hwloc_bitmap_free(set);
    return rc == 0;
}

bool interleave_memory(void* addr, size_t len) {
    if (topology().numa_nodes <= 1 || len == 0) return true;
    Hwloc& h = hwloc();
    if (!h.topo) return false;
    // mbind works on whole pages: widen the range to page boundaries.
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t begin = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
    const uintptr_t end = (reinterpret_cast<uintptr_t>(addr) + len + page - 1) & ~(page - 1);
    addr = reinterpret_cast<void*>(begin);
    len = end - begin;
    std::lock_guard lock(h.mutex);
    const hwloc_const_nodeset_t all = hwloc_topology_get_topology_nodeset(h.topo);
    return hwloc_set_area_membind(h.topo, addr, len, all, HWLOC_MEMBIND_INTERLEAVE, HWLOC_MEMBIND_BYNODESET) == 0;
}

std::string describe_topology() {
    const Topology& t = topology();
    return fmt::format("{} physical cores, {} hardware threads, {} NUMA node{}", t.physical_cores, t.logical_cpus,
                       t.numa_nodes, t.numa_nodes == 1 ? "" : "s");
}

}  // namespace mox
