// Probe for issue 25 (textures and surfaces): answers the driver-behaviour questions the
// capture and replay of CUDA arrays and texture/surface objects rest on. Run by
// tests/gpu/texture_probe.sh on the GPU machine; prints one "Qn ..." line per answer.
//
//   texture_probe            the questions below (preloaded with libkerncap_entry.so, it
//                            attaches its own dispatcher to name the driver calls cudart makes)
//   texture_probe invalid N  a kernel sampling through handle N (0, or a destroyed one):
//                            what a replay reading a handle it never created gets
//
// Q1 which driver entry points cudart 13 calls for cudaMallocArray, cudaMalloc3DArray,
//    cudaMallocMipmappedArray, cudaGetMipmappedArrayLevel, cudaCreateTextureObject,
//    cudaCreateSurfaceObject, cudaMemcpy2DToArray, cudaFreeArray, cudaDestroy*Object
// Q2 do texture and surface handles share one counter? are destroyed values reused?
// Q3 does cudaFreeArray succeed while a texture object over the array lives?
// Q4 cuArray3DGetDescriptor of a cudaMallocArray array (Depth, Flags)
// Q5 cuMemcpy3D between device memory with a packed (unaligned) pitch and an array
// Q6 cuMipmappedArrayGetLevel twice: the same CUarray?
// Q7 does cudart pass a resource view descriptor to cuTexObjectCreate when given none?
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define RT(call)                                                                                      \
  do {                                                                                                \
    cudaError_t e_ = (call);                                                                          \
    if (e_ != cudaSuccess) {                                                                          \
      std::printf("ERROR %s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));         \
      std::exit(1);                                                                                   \
    }                                                                                                 \
  } while (0)

static void* cuda_lib() {
  static void* h = dlopen("libcuda.so.1", RTLD_NOW);
  return h;
}
template <class F>
static F drv(const char* name) {
  void* p = cuda_lib() ? dlsym(cuda_lib(), name) : nullptr;
  if (!p) {
    std::printf("ERROR no driver entry point %s\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(p);
}
static std::string err(CUresult r) {
  const char* n = nullptr;
  drv<CUresult (*)(CUresult, const char**)>("cuGetErrorName")(r, &n);
  return n ? n : std::to_string(int(r));
}

// -- Q1: the watched driver calls each cudart call makes (through libkerncap_entry.so) -----
static std::vector<std::string> seen;
static bool view_passed = false, view_seen = false;
static void dispatch(CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  if (cb->callbackSite != CUPTI_API_ENTER) return;
  seen.push_back(cb->functionName);
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuTexObjectCreate) {
    view_seen = true;
    view_passed = static_cast<const cuTexObjectCreate_params*>(cb->functionParams)->pResViewDesc != nullptr;
  }
}
static void q1(const char* what) {
  std::string names;
  for (const std::string& s : seen) names += " " + s;
  std::printf("Q1 %s ->%s\n", what, names.empty() ? " (no watched call)" : names.c_str());
  seen.clear();
}

__global__ void sample(cudaTextureObject_t t, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(t, i) + 1.0f;
}

static int invalid_handle(unsigned long long h) {
  float* out = nullptr;
  RT(cudaMalloc(&out, 256 * sizeof(float)));
  RT(cudaMemset(out, 0xff, 256 * sizeof(float)));
  sample<<<1, 256>>>(h, out, 256);
  cudaError_t launch = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  float host[4] = {};
  cudaError_t copy = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  std::printf("Q8 sampling through handle %llu: launch %s, sync %s, copy %s, out[0..3] = %g %g %g %g\n", h,
              cudaGetErrorName(launch), cudaGetErrorName(sync), cudaGetErrorName(copy), host[0], host[1], host[2],
              host[3]);
  return 0;
}

int main(int argc, char** argv) {
  if (argc > 2 && !std::strcmp(argv[1], "invalid")) return invalid_handle(std::strtoull(argv[2], nullptr, 0));
  RT(cudaFree(nullptr));  // context
  using Attach = int (*)(void (*)(CUpti_CallbackId, const CUpti_CallbackData*));
  auto attach = reinterpret_cast<Attach>(dlsym(RTLD_DEFAULT, "kerncap_entry_attach"));
  if (attach) std::printf("Q1 watching through libkerncap_entry.so: %d entry points\n", attach(dispatch));
  else std::printf("Q1 not preloaded with libkerncap_entry.so: Q1 is not answered\n");

  cudaChannelFormatDesc f = cudaCreateChannelDesc<float>();
  cudaArray_t a2 = nullptr, a3 = nullptr, asurf = nullptr;
  RT(cudaMallocArray(&a2, &f, 700, 300));
  q1("cudaMallocArray(700x300 float)");
  RT(cudaMallocArray(&asurf, &f, 700, 300, cudaArraySurfaceLoadStore));
  q1("cudaMallocArray(surface load/store)");
  RT(cudaMalloc3DArray(&a3, &f, make_cudaExtent(64, 32, 8), cudaArrayLayered));
  q1("cudaMalloc3DArray(layered)");
  cudaMipmappedArray_t mip = nullptr;
  RT(cudaMallocMipmappedArray(&mip, &f, make_cudaExtent(64, 64, 0), 3));
  q1("cudaMallocMipmappedArray");
  cudaArray_t level1 = nullptr, level1b = nullptr;
  RT(cudaGetMipmappedArrayLevel(&level1, mip, 1));
  q1("cudaGetMipmappedArrayLevel");
  RT(cudaGetMipmappedArrayLevel(&level1b, mip, 1));
  seen.clear();
  std::printf("Q6 cudaGetMipmappedArrayLevel twice: %s CUarray (%p, %p)\n", level1 == level1b ? "the same" : "another",
              static_cast<void*>(level1), static_cast<void*>(level1b));
  std::vector<float> host(700 * 300);
  for (size_t i = 0; i < host.size(); ++i) host[i] = float(i);
  RT(cudaMemcpy2DToArray(a2, 0, 0, host.data(), 700 * 4, 700 * 4, 300, cudaMemcpyHostToDevice));
  q1("cudaMemcpy2DToArray");

  cudaResourceDesc res{};
  res.resType = cudaResourceTypeArray;
  res.res.array.array = a2;
  cudaTextureDesc td{};
  td.filterMode = cudaFilterModeLinear;
  td.normalizedCoords = 1;
  cudaTextureObject_t t1 = 0, t2 = 0, t3 = 0, t4 = 0;
  RT(cudaCreateTextureObject(&t1, &res, &td, nullptr));
  q1("cudaCreateTextureObject");
  if (view_seen) std::printf("Q7 cudart passes a resource view to cuTexObjectCreate when given none: %s\n",
                             view_passed ? "yes" : "no (NULL)");
  res.res.array.array = asurf;
  cudaSurfaceObject_t s1 = 0, s2 = 0;
  RT(cudaCreateSurfaceObject(&s1, &res));
  q1("cudaCreateSurfaceObject");
  RT(cudaCreateTextureObject(&t2, &res, &td, nullptr));
  RT(cudaCreateSurfaceObject(&s2, &res));
  RT(cudaDestroyTextureObject(t2));
  q1("cudaDestroyTextureObject");
  RT(cudaCreateTextureObject(&t3, &res, &td, nullptr));
  seen.clear();
  std::printf("Q2 handles in creation order: texture %llu, surface %llu, texture %llu, surface %llu; after destroying "
              "texture %llu the next texture is %llu (%s)\n",
              t1, s1, t2, s2, t2, t3, t3 == t2 ? "reused" : "not reused");

  // Q3: free an array a live texture object reads.
  cudaArray_t doomed = nullptr;
  RT(cudaMallocArray(&doomed, &f, 16));
  res.res.array.array = doomed;
  RT(cudaCreateTextureObject(&t4, &res, &td, nullptr));
  seen.clear();
  cudaError_t freed = cudaFreeArray(doomed);
  q1("cudaFreeArray");
  std::printf("Q3 cudaFreeArray while texture %llu reads the array: %s\n", t4, cudaGetErrorName(freed));

  // Q4: the driver's descriptor of cudart's arrays.
  using GetDesc = CUresult (*)(CUDA_ARRAY3D_DESCRIPTOR*, CUarray);
  auto get_desc = drv<GetDesc>("cuArray3DGetDescriptor_v2");
  for (auto [name, arr] : {std::pair<const char*, cudaArray_t>{"2-D", a2}, {"surface", asurf}, {"layered", a3},
                           {"mip level 1", level1}}) {
    CUDA_ARRAY3D_DESCRIPTOR d{};
    CUresult r = get_desc(&d, reinterpret_cast<CUarray>(arr));
    std::printf("Q4 %s array: %s, %zux%zux%zu format 0x%x x%u flags 0x%x\n", name, err(r).c_str(), d.Width, d.Height,
                d.Depth, unsigned(d.Format), d.NumChannels, d.Flags);
  }
  seen.clear();

  // Q5: device memory with a packed pitch (700 floats = 2800 bytes, not 512-aligned) <-> array.
  using Memcpy3D = CUresult (*)(const CUDA_MEMCPY3D*);
  using Memcpy3DAsync = CUresult (*)(const CUDA_MEMCPY3D*, CUstream);
  auto memcpy3d = drv<Memcpy3D>("cuMemcpy3D_v2");
  auto memcpy3d_async = drv<Memcpy3DAsync>("cuMemcpy3DAsync_v2");
  float* packed = nullptr;
  RT(cudaMalloc(&packed, host.size() * 4));
  CUDA_MEMCPY3D c{};
  c.srcMemoryType = CU_MEMORYTYPE_ARRAY;
  c.srcArray = reinterpret_cast<CUarray>(a2);
  c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  c.dstDevice = reinterpret_cast<CUdeviceptr>(packed);
  c.dstPitch = 2800;
  c.dstHeight = 300;
  c.WidthInBytes = 2800;
  c.Height = 300;
  c.Depth = 1;
  CUresult r1 = memcpy3d(&c);
  std::vector<float> back(host.size());
  RT(cudaMemcpy(back.data(), packed, back.size() * 4, cudaMemcpyDeviceToHost));
  const bool same = back == host;
  CUDA_MEMCPY3D w{};
  w.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  w.srcDevice = reinterpret_cast<CUdeviceptr>(packed);
  w.srcPitch = 2800;
  w.srcHeight = 300;
  w.dstMemoryType = CU_MEMORYTYPE_ARRAY;
  w.dstArray = reinterpret_cast<CUarray>(asurf);
  w.WidthInBytes = 2800;
  w.Height = 300;
  w.Depth = 1;
  CUresult r2 = memcpy3d_async(&w, nullptr);
  RT(cudaDeviceSynchronize());
  std::printf("Q5 cuMemcpy3D array -> device (pitch 2800): %s, bytes %s; cuMemcpy3DAsync device (pitch 2800) -> "
              "array: %s\n", err(r1).c_str(), same ? "equal" : "DIFFER", err(r2).c_str());
  seen.clear();
  RT(cudaDestroyTextureObject(t1));
  RT(cudaDestroyTextureObject(t3));
  RT(cudaDestroyTextureObject(t4));
  RT(cudaDestroySurfaceObject(s1));
  q1("cudaDestroySurfaceObject (after 3 cudaDestroyTextureObject)");
  RT(cudaDestroySurfaceObject(s2));
  RT(cudaFreeArray(a2));
  q1("cudaFreeArray (after cudaDestroySurfaceObject)");
  RT(cudaFreeMipmappedArray(mip));
  q1("cudaFreeMipmappedArray");
  std::printf("Q9 destroyed texture handle for the invalid-handle run: %llu\n", t2);
  if (attach) attach(nullptr);
  std::printf("done\n");
  return 0;
}
