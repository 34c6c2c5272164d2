#include "captured_state.hpp"

#include <cstring>

#include "driver.hpp"
#include "func_attributes.hpp"
#include "json_writer.hpp"

namespace kc {

std::vector<TrackedRegion> readable_regions(const MemoryTracker& mem, CUcontext ctx, const char* when,
                                            std::vector<std::string>& warnings) {
  std::vector<TrackedRegion> out;
  for (const TrackedRegion& r : mem.regions_for(ctx)) {
    // Memory of a graph's allocation node is mapped only while the graph's pool holds it.
    if (!std::strcmp(r.kind, "graph")) {
      int mapped = 0;
      if (KC_CU(cuPointerGetAttribute)(&mapped, CU_POINTER_ATTRIBUTE_MAPPED, CUdeviceptr(r.base)) != CUDA_SUCCESS ||
          !mapped) {
        warnings.push_back("graph-allocated memory " + hex_addr(r.base) + " (" + std::to_string(r.size) +
                           " bytes) is not mapped " + when + " and was not captured");
        continue;
      }
    }
    out.push_back(r);
  }
  return out;
}

// Pinned memory the device can reach has a device pointer (the host pointer itself on
// every system with unified addressing and CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM).
// Registered I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is a device's registers: reading
// it can have effects, so it is recorded, never read.
std::vector<HostItem> find_host_items(const MemoryTracker& mem, std::vector<std::string>& warnings) {
  std::vector<HostItem> items;
  for (const HostRegion& h : mem.host_regions()) {
    HostItem item;
    item.region = h;
    CUdeviceptr d = 0;
    CUresult r = KC_CU(cuMemHostGetDevicePointer)(&d, reinterpret_cast<void*>(uintptr_t(h.base)), 0);
    if (r != CUDA_SUCCESS || !d) {
      d = 0;
      if (KC_CU(cuPointerGetAttribute)(&d, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CUdeviceptr(h.base)) != CUDA_SUCCESS)
        d = 0;
    }
    item.device_pointer = uint64_t(d);
    const bool io = !std::strcmp(h.api, "cuMemHostRegister_v2") && (h.flags & CU_MEMHOSTREGISTER_IOMEMORY);
    if (io) item.why_not = "registered I/O memory (CU_MEMHOSTREGISTER_IOMEMORY) is never read by kerncap";
    else if (!item.device_pointer) item.why_not = "not mapped into the device's address space: no kernel can reach it";
    else if (h.size == 0) item.why_not = "empty";
    item.snapshot = item.why_not.empty();
    items.push_back(std::move(item));
  }
  for (size_t i = 0; i < items.size(); ++i) {
    const HostItem& h = items[i];
    if (h.snapshot || !h.device_pointer) continue;
    warnings.push_back("host region " + std::to_string(i) + " (" + h.region.api + " " + hex_addr(h.region.base) +
                       ", " + std::to_string(h.region.size) + " bytes) was not captured: " + h.why_not +
                       "; a kernel that reads it faults in replay");
  }
  return items;
}

std::string region_label(size_t i, const TrackedRegion& r) {
  return "region " + std::to_string(i) + " (" + r.api + " " + hex_addr(r.base) + ", " + std::to_string(r.size) +
         " bytes)";
}

SnapshotItem region_item(size_t i, const TrackedRegion& r) { return SnapshotItem{r.base, r.size, region_label(i, r)}; }

SnapshotItem global_item(const CapturedGlobal& g) {
  return SnapshotItem{g.address, g.size, "module global " + g.name + " (" + g.section + ")"};
}

SnapshotItem host_item(size_t h, const HostItem& hi) {
  return SnapshotItem{hi.region.base, hi.region.size,
                      "host region " + std::to_string(h) + " (" + hi.region.api + " " + hex_addr(hi.region.base) +
                          ", " + std::to_string(hi.region.size) + " bytes)",
                      true};
}

GpuIdentity gpu_identity(CUdevice device) {
  GpuIdentity g;
  char name[256] = {0};
  KC_CU(cuDeviceGetName)(name, sizeof name - 1, device);
  g.name = name;
  KC_CU(cuDeviceGetAttribute)(&g.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device);
  KC_CU(cuDeviceGetAttribute)(&g.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device);
  KC_CU(cuDriverGetVersion)(&g.driver_version);
  CUuuid uuid{};
  if (KC_CU(cuDeviceGetUuid)(&uuid, device) == CUDA_SUCCESS) {
    const std::string h = to_hex(uuid.bytes, sizeof uuid.bytes);
    g.uuid = "GPU-" + h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) + "-" +
             h.substr(20);
  }
  g.ordinal = int(device);
  return g;
}

}  // namespace kc
