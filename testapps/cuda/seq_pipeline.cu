// seq_pipeline: a CUDA C++ pipeline over two streams joined by events, with a
// device-to-device copy between kernels, a fill and a host-to-device copy from pageable
// memory freed right after it: the sequence tests of issue 29 (tests/gpu/test_sequences.py,
// docs/sequences.md). The pipeline runs inside the NVTX range "pipeline" (instances 0 and
// 1: it runs twice, the second time on other inputs):
//
//   s0: sp_scale   tmp = 2 x + 0.5                   launch 0
//       record e0
//   s1: wait e0; copy z <- tmp (device to device); sp_square  w = z * z      launch 1
//       record e1
//   s0: sp_add     y = tmp + 1                       launch 2
//       wait e1
//       sp_combine out = y + w                       launch 3
//       memset scratch (32-bit 7s); bias <- host (pageable, freed right after)
//       sp_bias    out += bias + scratch             launch 4
//
// Modes (argv[1]): pipeline (default); unclosed (the range's push has no pop); graph_host
// (a captured graph with a host node, launched once); crossproc (the run's end kernel
// runs in a child process); ctx2 (a launch of the window in a second CUDA context).
//
// The pruned sequences of docs/prune.md (tests/gpu/test_sequences.py), each in its own
// NVTX range, instance 0, before the pipeline's rounds:
//   chain:  sp_stash  table[0] = masked ^ key    (the address of `hidden`, in no aligned
//                                                 parameter word: only table's post-state holds it)
//           fill `mark` (0x11 bytes)             (no launch takes mark: a memory operation keeps it)
//           sp_follow sink = 3 * hidden[i]       (through table[0])
//           with `ballast` (16 MiB of 0x5a) that nothing reaches
//   hidden: sp_scale  tmp = 2 x + 0.5
//           sp_hide   hidden[i] = i / 2           (through masked ^ key, stored nowhere: prune refuses)
// Neither prints anything but errors; the pipeline's `flag` is reached by no launch of
// the pipeline's window either.
#include <cuda.h>
#include <dlfcn.h>
#include <nvtx3/nvToolsExt.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/testapp.hpp"

extern char** environ;

__global__ void sp_scale(const float* x, float* tmp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tmp[i] = 2.0f * x[i] + 0.5f;
}
__global__ void sp_square(const float* z, float* w, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) w[i] = z[i] * z[i];
}
__global__ void sp_add(const float* tmp, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = tmp[i] + 1.0f;
}
__global__ void sp_combine(const float* y, const float* w, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = y[i] + w[i];
}
__global__ void sp_bias(float* out, const float* bias, const unsigned* scratch, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += bias[i % 1024] + float(scratch[i] & 0xf);
}
__global__ void sp_marker(unsigned* flag) { *flag += 1u; }
__global__ void sp_stash(unsigned long long* table, unsigned long long masked, unsigned long long key) {
  if (blockIdx.x == 0 && threadIdx.x == 0) table[0] = masked ^ key;
}
__global__ void sp_follow(const unsigned long long* table, float* sink, int n) {
  const float* src = reinterpret_cast<const float*>(table[0]);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) sink[i] = 3.0f * src[i];
}
__global__ void sp_hide(unsigned long long masked, unsigned long long key, int n) {
  float* p = reinterpret_cast<float*>(masked ^ key);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = 0.5f * float(i);
}
__global__ void sp_init(float* x, int n, float k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = float(i % 1009) * k - 3.0f;
}

static void host_step(void* p) { *static_cast<int*>(p) += 1; }

// ctx2's driver calls, resolved at run time (the app links no libcuda, as kerncap's builds may have none).
template <class F>
F driver(const char* name) {
  static void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  void* f = lib ? dlsym(lib, name) : nullptr;
  if (!f) {
    std::fprintf(stderr, "seq_pipeline: driver entry point %s not found\n", name);
    std::exit(1);
  }
  return reinterpret_cast<F>(f);
}
#define CU_CHECK(call)                                                                    \
  do {                                                                                    \
    CUresult r_ = (call);                                                                 \
    if (r_ != CUDA_SUCCESS) {                                                             \
      std::fprintf(stderr, "%s:%d: %s failed: CUresult %d\n", __FILE__, __LINE__, #call, int(r_)); \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "pipeline";
  // argv[2]: n (default 2^20; a smaller n keeps a capture small: tests/gpu/make_small_fixtures.py)
  const int n = argc > 2 ? std::atoi(argv[2]) : (1 << 20);
  if (n <= 0) {
    std::fprintf(stderr, "seq_pipeline: bad n\n");
    return 2;
  }
  const size_t bytes = n * sizeof(float);
  if (mode == "child") {  // crossproc: the run's end kernel, in another process
    unsigned* flag = nullptr;
    TA_CHECK(cudaMalloc(&flag, sizeof(unsigned)));
    TA_CHECK(cudaMemset(flag, 0, sizeof(unsigned)));
    sp_marker<<<1, 1>>>(flag);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
    return 0;
  }
  float *x, *tmp, *y, *z, *w, *out, *bias;
  unsigned *scratch, *flag;
  for (float** p : {&x, &tmp, &y, &z, &w, &out}) TA_CHECK(cudaMalloc(p, bytes));
  TA_CHECK(cudaMalloc(&bias, 1024 * sizeof(float)));
  TA_CHECK(cudaMalloc(&scratch, bytes));
  TA_CHECK(cudaMalloc(&flag, sizeof(unsigned)));
  for (void* p : {(void*)tmp, (void*)y, (void*)z, (void*)w, (void*)out, (void*)scratch})
    TA_CHECK(cudaMemset(p, 0, bytes));
  TA_CHECK(cudaMemset(bias, 0, 1024 * sizeof(float)));
  TA_CHECK(cudaMemset(flag, 0, sizeof(unsigned)));
  cudaStream_t s0, s1;
  TA_CHECK(cudaStreamCreate(&s0));
  TA_CHECK(cudaStreamCreate(&s1));
  cudaEvent_t e0, e1;
  TA_CHECK(cudaEventCreateWithFlags(&e0, cudaEventDisableTiming));
  TA_CHECK(cudaEventCreateWithFlags(&e1, cudaEventDisableTiming));
  const int grid = (n + 255) / 256;

  testapp::Report report;
  report.add("x", x);
  report.add("tmp", tmp);
  report.add("y", y);
  report.add("z", z);
  report.add("w", w);
  report.add("out", out);
  report.add("bias", bias);
  report.add("scratch", scratch);
  report.add("flag", flag);
  report.add("n", static_cast<unsigned long long>(n));
  // chain and hidden: their own buffers (the other modes' captures stay as they were)
  const bool linked = mode == "chain" || mode == "hidden";
  unsigned long long* table = nullptr;
  float *hidden = nullptr, *sink = nullptr;
  unsigned char *mark = nullptr, *ballast = nullptr;
  const size_t mark_bytes = 1 << 20, ballast_bytes = 16 << 20;
  const unsigned long long key = 0x5a5a5a5a5a5a5a5aull;  // masked ^ key: no region's address either
  if (linked) {
    TA_CHECK(cudaMalloc(&table, 4096));
    TA_CHECK(cudaMalloc(&hidden, bytes));
    TA_CHECK(cudaMalloc(&sink, bytes));
    TA_CHECK(cudaMalloc(&mark, mark_bytes));
    TA_CHECK(cudaMalloc(&ballast, ballast_bytes));
    TA_CHECK(cudaMemset(table, 0, 4096));
    TA_CHECK(cudaMemset(sink, 0, bytes));
    TA_CHECK(cudaMemset(mark, 0, mark_bytes));
    TA_CHECK(cudaMemset(ballast, 0x5a, ballast_bytes));
    sp_init<<<grid, 256>>>(hidden, n, 0.003f);
    TA_CHECK(cudaGetLastError());
    sp_init<<<grid, 256>>>(x, n, 0.001f);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
    report.add("table", table);
    report.add("hidden", hidden);
    report.add("sink", sink);
    report.add("mark", mark);
    report.add("ballast", ballast);
    report.add("key", key);
  }
  report.write();

  if (linked) {
    const unsigned long long masked = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(hidden)) ^ key;
    nvtxRangePushA(mode.c_str());
    if (mode == "chain") {
      sp_stash<<<1, 32, 0, s0>>>(table, masked, key);
      TA_CHECK(cudaGetLastError());
      TA_CHECK(cudaMemsetAsync(mark, 0x11, mark_bytes, s0));
      sp_follow<<<grid, 256, 0, s0>>>(table, sink, n);
      TA_CHECK(cudaGetLastError());
    } else {
      sp_scale<<<grid, 256, 0, s0>>>(x, tmp, n);
      TA_CHECK(cudaGetLastError());
      sp_hide<<<grid, 256, 0, s0>>>(masked, key, n);
      TA_CHECK(cudaGetLastError());
    }
    nvtxRangePop();
    TA_CHECK(cudaStreamSynchronize(s0));
    TA_CHECK(cudaDeviceSynchronize());
    testapp::mark_done();
    return 0;
  }

  if (mode == "graph_host") {
    // A graph holding a kernel and a host node: a sequence of its launch is refused.
    int calls = 0;
    cudaGraph_t g;
    cudaGraphExec_t exec;
    TA_CHECK(cudaStreamBeginCapture(s0, cudaStreamCaptureModeGlobal));
    sp_scale<<<grid, 256, 0, s0>>>(x, tmp, n);
    TA_CHECK(cudaLaunchHostFunc(s0, host_step, &calls));
    sp_add<<<grid, 256, 0, s0>>>(tmp, y, n);
    TA_CHECK(cudaStreamEndCapture(s0, &g));
    TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    TA_CHECK(cudaGraphLaunch(exec, s0));
    TA_CHECK(cudaStreamSynchronize(s0));
    testapp::mark_done();
    return 0;
  }

  CUcontext other = nullptr;
  if (mode == "ctx2") {
    TA_CHECK(cudaFree(nullptr));  // the primary context, current
    CUdevice dev;
    CU_CHECK(driver<CUresult (*)(CUdevice*, int)>("cuDeviceGet")(&dev, 0));
    CUcontext primary = nullptr;
    CU_CHECK(driver<CUresult (*)(CUcontext*)>("cuCtxGetCurrent")(&primary));
    // cuCtxCreate_v4 (CUDA 12.5+): the new context becomes current; put the primary back.
    CU_CHECK(driver<CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice)>("cuCtxCreate_v4")(
        &other, nullptr, 0, dev));
    CU_CHECK(driver<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(primary));
  }

  for (int round = 0; round < 2; ++round) {
    sp_init<<<grid, 256>>>(x, n, round ? 0.002f : 0.001f);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
    std::vector<float> host(1024);
    for (int i = 0; i < 1024; ++i) host[i] = 0.25f * float(i % 7) + float(round);
    nvtxRangePushA("pipeline");
    sp_scale<<<grid, 256, 0, s0>>>(x, tmp, n);
    TA_CHECK(cudaGetLastError());
    if (mode == "ctx2") {  // the window's next launch in another context
      CU_CHECK(driver<CUresult (*)(CUcontext)>("cuCtxSetCurrent")(other));
      float* elsewhere = nullptr;
      TA_CHECK(cudaMalloc(&elsewhere, bytes));
      sp_add<<<grid, 256>>>(elsewhere, elsewhere, n);
      TA_CHECK(cudaGetLastError());
      TA_CHECK(cudaDeviceSynchronize());
      testapp::mark_done();
      return 0;
    }
    TA_CHECK(cudaEventRecord(e0, s0));
    TA_CHECK(cudaStreamWaitEvent(s1, e0, 0));
    TA_CHECK(cudaMemcpyAsync(z, tmp, bytes, cudaMemcpyDeviceToDevice, s1));
    sp_square<<<grid, 256, 0, s1>>>(z, w, n);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaEventRecord(e1, s1));
    sp_add<<<grid, 256, 0, s0>>>(tmp, y, n);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaStreamWaitEvent(s0, e1, 0));
    sp_combine<<<grid, 256, 0, s0>>>(y, w, out, n);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaMemsetAsync(scratch, 7, bytes, s0));
    {
      // Pageable host memory, freed as soon as the copy returns: the capture keeps the
      // bytes from the copy itself.
      float* pageable = new float[1024];
      std::memcpy(pageable, host.data(), 1024 * sizeof(float));
      TA_CHECK(cudaMemcpyAsync(bias, pageable, 1024 * sizeof(float), cudaMemcpyHostToDevice, s0));
      delete[] pageable;
    }
    sp_bias<<<grid, 256, 0, s0>>>(out, bias, scratch, n);
    TA_CHECK(cudaGetLastError());
    if (mode == "crossproc") {
      // The run from sp_scale was asked to end at sp_marker, which only a child process runs.
      pid_t pid = 0;
      char self[] = "child";
      char* child_argv[] = {argv[0], self, nullptr};
      if (posix_spawn(&pid, argv[0], nullptr, nullptr, child_argv, environ) != 0) {
        std::fprintf(stderr, "seq_pipeline: posix_spawn failed\n");
        return 1;
      }
      int status = 0;
      waitpid(pid, &status, 0);
      TA_CHECK(cudaDeviceSynchronize());
      testapp::mark_done();
      return 0;
    }
    if (mode != "unclosed") nvtxRangePop();
    TA_CHECK(cudaStreamSynchronize(s0));
    TA_CHECK(cudaStreamSynchronize(s1));
  }
  TA_CHECK(cudaDeviceSynchronize());
  testapp::mark_done();
  return 0;
}
