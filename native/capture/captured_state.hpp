// What both capture kinds (one dispatch, a sequence) ask the driver about the state they
// capture, the same way: the readable device regions of a context, the host regions and
// whether the device reaches them, the GPU for the provenance. The answers feed the one
// manifest writer (manifest_writer.hpp).
#pragma once
#include <cuda.h>

#include <string>
#include <vector>

#include "manifest_writer.hpp"
#include "memory_tracker.hpp"
#include "snapshot.hpp"

namespace kc {

// The tracked regions of `ctx` that can be read now (graph memory only while its pool
// maps it; the others are named in `warnings`, `when` saying at which point).
std::vector<TrackedRegion> readable_regions(const MemoryTracker& mem, CUcontext ctx, const char* when,
                                            std::vector<std::string>& warnings);

// The process's pinned and registered host allocations, each with the device pointer
// kernels reach it by and whether it is snapshotted (registered I/O memory never is).
std::vector<HostItem> find_host_items(const MemoryTracker& mem, std::vector<std::string>& warnings);

// The snapshot items of regions, globals and the snapshotted host items, in that order.
std::string region_label(size_t i, const TrackedRegion& r);
SnapshotItem region_item(size_t i, const TrackedRegion& r);
SnapshotItem global_item(const CapturedGlobal& g);
SnapshotItem host_item(size_t h, const HostItem& hi);

// Name, compute capability, UUID, driver version of `device`; a failing query leaves its field empty.
GpuIdentity gpu_identity(CUdevice device);

}  // namespace kc
