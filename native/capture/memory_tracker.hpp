// Live device allocations of the process, kept from the allocation callbacks so the
// capture knows every region the kernel could reach (docs/capture-format.md,
// "Regions"). VMM memory counts by its *mapped* ranges (cuMemMap), since only mapped
// pages can be read. Pinned and registered host memory is tracked too (with the flags
// it was allocated or registered with): the capture snapshots what the device can reach.
#pragma once
#include <cuda.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace kc {

struct TrackedRegion {
  uint64_t base = 0;
  uint64_t size = 0;
  const char* api = "";   // the allocating call, e.g. "cuMemAlloc_v2", "cuMemMap"
  const char* kind = "";  // device | managed | async | vmm
  CUcontext ctx = nullptr;
  uint64_t reserve_base = 0, reserve_size = 0;  // vmm: the enclosing cuMemAddressReserve range
  // vmm: the physical allocation (cuMemCreate handle) mapped here, numbered per process
  // from 1, and the offset of `base` into it. regions_for() sets `physical` only on
  // ranges whose allocation is mapped at more than one place (docs/capture-format.md,
  // "Aliased mappings"); each such mapping is a region of its own.
  uint64_t physical = 0, physical_offset = 0;
  uint64_t end() const { return base + size; }
};

struct HostRegion {
  uint64_t base = 0;
  uint64_t size = 0;
  const char* api = "";   // cuMemHostAlloc | cuMemAllocHost_v2 | cuMemHostRegister_v2
  unsigned flags = 0;     // CU_MEMHOSTALLOC_* or CU_MEMHOSTREGISTER_* as the app passed them
  uint64_t end() const { return base + size; }
};

class MemoryTracker {
 public:
  void on_alloc(uint64_t base, uint64_t size, const char* api, const char* kind, CUcontext ctx);
  void on_free(uint64_t base);
  void on_reserve(uint64_t base, uint64_t size);
  void on_address_free(uint64_t base);
  // cuMemMap(ptr, size, offset, handle): `handle` names the physical allocation.
  void on_map(uint64_t base, uint64_t size, uint64_t offset = 0, uint64_t handle = 0);
  void on_unmap(uint64_t base, uint64_t size);
  void on_host_alloc(uint64_t base, uint64_t size, const char* api, unsigned flags = 0);
  void on_host_free(uint64_t base);
  void drop_context(CUcontext ctx);

  // Regions to snapshot for a launch in `ctx`: that context's allocations plus every
  // mapped VMM range (adjacent mappings of one reservation merged), sorted by base.
  std::vector<TrackedRegion> regions_for(CUcontext ctx) const;
  std::vector<HostRegion> host_regions() const;

 private:
  // Removes entries of `m` overlapping [base, base+size); trims partial overlaps (keeping
  // the mappings-per-physical-allocation counts of mapped_ right).
  void carve(std::map<uint64_t, TrackedRegion>& m, uint64_t base, uint64_t size);

  mutable std::mutex mu_;
  std::map<uint64_t, TrackedRegion> allocs_;    // cuMemAlloc*, managed, async
  std::map<uint64_t, TrackedRegion> mapped_;    // cuMemMap ranges
  std::map<uint64_t, uint64_t> reservations_;   // base -> size
  std::map<uint64_t, HostRegion> host_;
  std::map<uint64_t, uint64_t> physical_ids_;   // cuMemCreate handle -> its number
  std::map<uint64_t, size_t> physical_refs_;    // number -> mapped_ entries mapping it
  uint64_t next_physical_ = 1;
};

// Aliased mappings among `regions` (as regions_for returns them) that the replay cannot
// back with one physical allocation: the mappings of one allocation that do not cover
// the same extent of it (docs/replay.md, "Aliased mappings"). One warning per allocation,
// naming the regions by their index in `regions`.
std::vector<std::string> alias_warnings(const std::vector<TrackedRegion>& regions);

}  // namespace kc
