// buckets: one kernel (bk_scale) at four shapes, like a model whose decode steps
// dominate while a prefill-sized launch is rare (docs/selection.md, shape buckets):
//   n = 2^20  x 24 launches   (the common bucket)
//   n = 2^18  x  8
//   n = 2^17  x  4
//   n = 2^16  x  2            (the rare bucket)
// Mode `refused` adds a fifth shape (n = 2^19) that runs only inside the body of a
// conditional (if) CUDA graph node, which kerncap cannot capture from: a set names it.
// argv[2] (optional): MiB of ballast device memory, filled, so that snapshots cost what
// they cost in a real app (bench/sets.py).
#include <string>
#include <vector>

#include "buckets_kernel.cuh"
#include "common/testapp.hpp"

namespace {

constexpr int kMaxN = 1 << 20;

__global__ void bk_fill(float* p, int n, float base) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + float(i % 1000) / 1000.0f;  // in [base, base + 1)
}

void run_refused(float* y, const float* x, const float* b, cudaStream_t s) {
  const int n = 1 << 19;
  cudaGraph_t g;
  TA_CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle handle;
  TA_CHECK(cudaGraphConditionalHandleCreate(&handle, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams cp{};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = handle;
  cp.conditional.type = cudaGraphCondTypeIf;
  cp.conditional.size = 1;
  cudaGraphNode_t cnode;
  TA_CHECK(cudaGraphAddNode(&cnode, g, nullptr, nullptr, 0, &cp));
  float a = 2.0f;
  int nn = n;
  void* args[] = {&y, &x, &b, &a, &nn};
  cudaKernelNodeParams kp{};
  kp.func = reinterpret_cast<void*>(bk_scale);
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  cudaGraphNode_t knode;
  TA_CHECK(cudaGraphAddKernelNode(&knode, cp.conditional.phGraph_out[0], nullptr, 0, &kp));
  cudaGraphExec_t exec;
  TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < 3; ++i) TA_CHECK(cudaGraphLaunch(exec, s));
  TA_CHECK(cudaStreamSynchronize(s));
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(g));
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "default";
  const long ballast_mib = argc > 2 ? std::atol(argv[2]) : 0;
  float *x = nullptr, *b = nullptr, *y = nullptr, *ballast = nullptr;
  TA_CHECK(cudaMalloc(&x, kMaxN * sizeof(float)));
  TA_CHECK(cudaMalloc(&b, kMaxN * sizeof(float)));
  TA_CHECK(cudaMalloc(&y, kMaxN * sizeof(float)));
  bk_fill<<<(kMaxN + 255) / 256, 256>>>(x, kMaxN, 1.0f);
  bk_fill<<<(kMaxN + 255) / 256, 256>>>(b, kMaxN, 1.0f);
  if (ballast_mib > 0) {
    const long count = ballast_mib << 18;  // floats
    TA_CHECK(cudaMalloc(&ballast, count * sizeof(float)));
    for (long at = 0; at < count; at += kMaxN)
      bk_fill<<<(kMaxN + 255) / 256, 256>>>(ballast + at, int(std::min<long>(kMaxN, count - at)), 5.0f);
  }
  TA_CHECK(cudaDeviceSynchronize());
  testapp::Report report;
  report.add("x", x);
  report.add("b", b);
  report.add("y", y);
  report.write();

  cudaStream_t s;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  struct Shape { int n, launches; };
  const std::vector<Shape> shapes = {{1 << 20, 24}, {1 << 18, 8}, {1 << 17, 4}, {1 << 16, 2}};
  // Interleaved like a serving loop: every step runs the common shape, others now and then.
  for (int step = 0; step < 24; ++step) {
    for (const Shape& sh : shapes) {
      if (step % (24 / sh.launches) != 0) continue;
      TA_CHECK(cudaMemsetAsync(y, 0, sh.n * sizeof(float), s));  // the kernel writes every byte anew
      bk_scale<<<(sh.n + 255) / 256, 256, 0, s>>>(y, x, b, 2.0f, sh.n);
      TA_CHECK(cudaGetLastError());
    }
  }
  TA_CHECK(cudaStreamSynchronize(s));
  if (mode == "refused") run_refused(y, x, b, s);
  std::vector<float> head(4);
  TA_CHECK(cudaMemcpy(head.data(), y, sizeof(float) * head.size(), cudaMemcpyDeviceToHost));
  if (!(head[0] > 2.9f && head[0] < 3.1f)) {  // 2 * 1.0 + 1.0
    std::fprintf(stderr, "buckets: y[0] = %g, expected 3\n", head[0]);
    return 1;
  }
  if (ballast) TA_CHECK(cudaFree(ballast));
  testapp::mark_done();
  return 0;
}
