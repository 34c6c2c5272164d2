// vmm_ring (issue 43): one physical allocation mapped at two adjacent address ranges, a
// ring buffer that wraps by address. cuMemCreate once (S bytes, 4 granules), cuMemMap of
// that handle at [ring, ring + S) and again at [ring + S, ring + 2S) inside one
// reservation: ring[S/4 + i] is ring[i]. The target kernel ring_step reads a window that
// starts before the end of the first mapping and runs on into the second, writes each
// value times 3 to `out`, and writes value + 1 back in place: half of its writes land
// through the second mapping, in memory the first mapping shows. Launched 3 times with the
// window at different places; the GPU test captures dispatch 1.
//   vmm_ring            (no arguments)
// The driver API comes through cudart's entry points (the build machines have no libcuda).
// Exit 1 (and a line naming the call) when a driver call fails, or when the alias does not
// alias (a write through one mapping not seen through the other).
#include <cuda.h>

#include <cstdio>
#include <cstdlib>

#include "common/testapp.hpp"

__global__ void ring_init(float* ring, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) ring[i] = float(i % 1000) * 0.25f;
}

// ring: the first mapping; the window [start, start + count) may run past n into the alias.
__global__ void ring_step(float* ring, size_t start, int count, float* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float v = ring[start + i];
  out[i] = v * 3.0f;
  ring[start + i] = v + 1.0f;
}

using testapp::cu_check;

namespace {
void* entry(const char* name) { return testapp::driver_entry(name); }
}  // namespace

int main() {
  TA_CHECK(cudaSetDevice(0));
  TA_CHECK(cudaFree(nullptr));  // the primary context, current
  testapp::app_name() = "vmm_ring";
  auto granularity_of = reinterpret_cast<CUresult (*)(size_t*, const CUmemAllocationProp*,
                                                      CUmemAllocationGranularity_flags)>(
      entry("cuMemGetAllocationGranularity"));
  auto reserve = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>(
      entry("cuMemAddressReserve"));
  auto address_free = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t)>(entry("cuMemAddressFree"));
  auto create = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                              unsigned long long)>(entry("cuMemCreate"));
  auto release = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle)>(entry("cuMemRelease"));
  auto map = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                           unsigned long long)>(entry("cuMemMap"));
  auto unmap = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t)>(entry("cuMemUnmap"));
  auto set_access = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>(
      entry("cuMemSetAccess"));

  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  cu_check(granularity_of(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
  const size_t bytes = 4 * granularity;  // S: 8 MiB with the H200's 2 MiB granularity
  CUdeviceptr ring = 0;
  cu_check(reserve(&ring, 2 * bytes, granularity, 0, 0), "cuMemAddressReserve of the ring's two mappings");
  CUmemGenericAllocationHandle handle = 0;
  cu_check(create(&handle, bytes, &prop, 0), "cuMemCreate of the ring");
  cu_check(map(ring, bytes, 0, handle, 0), "cuMemMap of the ring's first mapping");
  cu_check(map(ring + bytes, bytes, 0, handle, 0), "cuMemMap of the ring's second mapping (the alias)");
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cu_check(set_access(ring, 2 * bytes, &access, 1), "cuMemSetAccess of the ring");

  const size_t n = bytes / sizeof(float);
  float* first = reinterpret_cast<float*>(ring);
  ring_init<<<unsigned((n + 255) / 256), 256>>>(first, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  float probe[2] = {0, 0};  // ring[5] read through both mappings must agree
  TA_CHECK(cudaMemcpy(&probe[0], first + 5, sizeof(float), cudaMemcpyDeviceToHost));
  TA_CHECK(cudaMemcpy(&probe[1], first + n + 5, sizeof(float), cudaMemcpyDeviceToHost));
  if (probe[0] != 1.25f || probe[1] != 1.25f) {
    std::fprintf(stderr, "vmm_ring: the second mapping does not alias the first (%g, %g)\n", probe[0], probe[1]);
    return 1;
  }

  const int count = 1 << 20;  // 4 MiB of window: half before the wrap, half after it
  float* out = nullptr;
  TA_CHECK(cudaMalloc(&out, size_t(count) * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, size_t(count) * sizeof(float)));

  testapp::Report report;
  report.add("ring", reinterpret_cast<void*>(ring));
  report.add("alias", reinterpret_cast<void*>(ring + bytes));
  report.add("bytes", static_cast<unsigned long long>(bytes));
  report.add("out", out);
  report.add("count", static_cast<unsigned long long>(count));
  report.write();

  // The window's start for launches 0, 1, 2; dispatch 1 wraps at its middle.
  const size_t starts[3] = {0, n - size_t(count) / 2, n / 4};
  for (size_t start : starts) {
    ring_step<<<(count + 255) / 256, 256>>>(first, start, count, out);
    TA_CHECK(cudaGetLastError());
  }
  TA_CHECK(cudaDeviceSynchronize());
  // After dispatch 1, ring[0] was raised through the alias: 0 + 1 (dispatch 0) + 1.
  TA_CHECK(cudaMemcpy(&probe[0], first, sizeof(float), cudaMemcpyDeviceToHost));
  if (probe[0] != 2.0f) {
    std::fprintf(stderr, "vmm_ring: ring[0] is %g after the wrap, expected 2\n", probe[0]);
    return 1;
  }
  TA_CHECK(cudaFree(out));
  cu_check(unmap(ring, bytes), "cuMemUnmap of the ring's first mapping");
  cu_check(unmap(ring + bytes, bytes), "cuMemUnmap of the ring's second mapping");
  cu_check(release(handle), "cuMemRelease of the ring");
  cu_check(address_free(ring, 2 * bytes), "cuMemAddressFree of the ring");
  std::printf("vmm_ring: ok\n");
  testapp::mark_done();
  return 0;
}
