// smooth: y = w (*) x, a 64-tap filter, launched 5 times (n = 1<<22 by default, argv[1]
// overrides; argv[2] the launch count, for bench/apply_speedup.py's warm-up runs; then any of
// "vmm": x and y from cuMemCreate + cuMemMap, as a replay maps them, instead of cudaMalloc
// (bench/apply_speedup.py --alloc vmm); "idle=US": the GPU drained after every launch and
// left idle US microseconds (--idle US); "nomemset": y not zeroed before each launch
// (--no-memset); facts §52). Inputs are small dyadic numbers so every sum is exact in float32.
#include <unistd.h>

#include <cstring>

#include "common/testapp.hpp"
#include "smooth/smooth_kernel.cuh"

// `bytes` of device memory the way kerncap's replay backs a region: a reservation, one
// physical allocation of whole minimum granules, mapped read-write (never freed: the
// process ends). The driver API through cudart's entry points, as vmm_ring.cu.
static float* vmm_alloc(size_t bytes) {
  using testapp::cu_check;
  using testapp::driver_entry;
  auto granularity_of = reinterpret_cast<CUresult (*)(size_t*, const CUmemAllocationProp*,
                                                      CUmemAllocationGranularity_flags)>(
      driver_entry("cuMemGetAllocationGranularity"));
  auto reserve = reinterpret_cast<CUresult (*)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long)>(
      driver_entry("cuMemAddressReserve"));
  auto create = reinterpret_cast<CUresult (*)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*,
                                              unsigned long long)>(driver_entry("cuMemCreate"));
  auto map = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
                                           unsigned long long)>(driver_entry("cuMemMap"));
  auto set_access = reinterpret_cast<CUresult (*)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t)>(
      driver_entry("cuMemSetAccess"));
  CUmemAllocationProp prop = {};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t granularity = 0;
  cu_check(granularity_of(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM), "cuMemGetAllocationGranularity");
  const size_t size = (bytes + granularity - 1) / granularity * granularity;
  CUdeviceptr p = 0;
  cu_check(reserve(&p, size, granularity, 0, 0), "cuMemAddressReserve");
  CUmemGenericAllocationHandle handle = 0;
  cu_check(create(&handle, size, &prop, 0), "cuMemCreate");
  cu_check(map(p, size, 0, handle, 0), "cuMemMap");
  CUmemAccessDesc access = {};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  cu_check(set_access(p, size, &access, 1), "cuMemSetAccess");
  return reinterpret_cast<float*>(p);
}

__global__ void init_smooth(float* x, float* w, int n, int taps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = static_cast<float>((i * 37) % 64) / 64.0f;
  if (i < taps) w[i] = static_cast<float>(1 + (i % 5)) / 16.0f;
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 22);
  const int launches = argc > 2 ? std::atoi(argv[2]) : 5;
  const int taps = 64;
  if (n < taps || launches < 1) {
    std::fprintf(stderr, "smooth: n must be at least %d and launches at least 1\n", taps);
    return 2;
  }
  bool vmm = false, synced = false, memset = true;
  int idle_us = 0;  // after a drain (synced)
  for (int a = 3; a < argc; ++a) {
    if (std::strcmp(argv[a], "vmm") == 0) vmm = true;
    else if (std::strncmp(argv[a], "idle=", 5) == 0) synced = true, idle_us = std::atoi(argv[a] + 5);
    else if (std::strcmp(argv[a], "nomemset") == 0) memset = false;
    else {
      std::fprintf(stderr, "smooth: unknown mode %s (vmm, idle=US, nomemset)\n", argv[a]);
      return 2;
    }
  }
  testapp::app_name() = "smooth";
  float *x = nullptr, *y = nullptr, *w = nullptr;
  if (vmm) {
    TA_CHECK(cudaSetDevice(0));
    TA_CHECK(cudaFree(nullptr));  // the primary context, current
    x = vmm_alloc(size_t(n) * sizeof(float));
    y = vmm_alloc(size_t(n) * sizeof(float));
  } else {
    TA_CHECK(cudaMalloc(&x, size_t(n) * sizeof(float)));
    TA_CHECK(cudaMalloc(&y, size_t(n) * sizeof(float)));
  }
  TA_CHECK(cudaMalloc(&w, taps * sizeof(float)));
  const int block = 256, grid = (n + block - 1) / block;
  init_smooth<<<grid, block>>>(x, w, n, taps);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("x", x);
  report.add("y", y);
  report.add("w", w);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  for (int it = 0; it < launches; ++it) {
    if (memset) TA_CHECK(cudaMemsetAsync(y, 0, size_t(n) * sizeof(float)));  // every dispatch changes y
    smooth<<<grid, block>>>(x, y, w, n, taps);
    TA_CHECK(cudaGetLastError());
    if (synced) TA_CHECK(cudaDeviceSynchronize());
    if (idle_us) usleep(idle_us);
  }
  TA_CHECK(cudaDeviceSynchronize());
  if (!vmm) {
    TA_CHECK(cudaFree(x));
    TA_CHECK(cudaFree(y));
  }
  TA_CHECK(cudaFree(w));
  testapp::mark_done();
  return 0;
}
