// graph_pdl: a CUDA graph whose edges carry data (issue 43), as XLA's command buffers'
// do: pdl_producer -> pdl_consumer is a programmatic dependency
// (cudaGraphKernelNodePortProgrammatic, cudaGraphDependencyTypeProgrammatic: the consumer
// may start before the producer ends and waits in cudaGridDependencySynchronize),
// pdl_consumer -> pdl_tail an ordinary one. The graph is launched 3 times (L0..L2):
//   producer: x += 1; mid = 2x + 1; then triggers its dependents
//   consumer: waits for the producer's memory; out = mid + 3 (+ out, accumulated)
//   tail:     tail = out / 2
// so dispatch N of pdl_consumer is launch LN, after LN's producer (x = N+1, mid = 2N+3).
// The app prints the edge types the runtime reports and checks its own results at the end.
#include <cstdio>
#include <vector>

#include "common/testapp.hpp"

constexpr int kN = 1 << 14;
constexpr int kBlock = 256;
constexpr int kGrid = (kN + kBlock - 1) / kBlock;
constexpr int kLaunches = 3;

__global__ void pdl_producer(float* x, float* mid, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    x[i] += 1.0f;
    mid[i] = 2.0f * x[i] + 1.0f;
  }
  cudaTriggerProgrammaticLaunchCompletion();
}

__global__ void pdl_consumer(const float* mid, float* out, int n) {
  cudaGridDependencySynchronize();  // the producer's writes are visible from here on
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] += mid[i] + 3.0f;
}

__global__ void pdl_tail(const float* out, float* tail, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tail[i] = 0.5f * out[i];
}

int main() {
  float *x, *mid, *out, *tail;
  TA_CHECK(cudaMalloc(&x, kN * sizeof(float)));
  TA_CHECK(cudaMalloc(&mid, kN * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, kN * sizeof(float)));
  TA_CHECK(cudaMalloc(&tail, kN * sizeof(float)));
  TA_CHECK(cudaMemset(x, 0, kN * sizeof(float)));
  TA_CHECK(cudaMemset(mid, 0, kN * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, kN * sizeof(float)));
  TA_CHECK(cudaMemset(tail, 0, kN * sizeof(float)));
  testapp::Report report;
  report.add("x", x);
  report.add("mid", mid);
  report.add("out", out);
  report.add("tail", tail);
  report.write();

  int n = kN;
  cudaGraph_t g;
  TA_CHECK(cudaGraphCreate(&g, 0));
  cudaKernelNodeParams p{};
  p.gridDim = dim3(kGrid);
  p.blockDim = dim3(kBlock);
  cudaGraphNode_t prod, cons, tl;
  void* prod_args[] = {&x, &mid, &n};
  p.func = reinterpret_cast<void*>(pdl_producer);
  p.kernelParams = prod_args;
  TA_CHECK(cudaGraphAddKernelNode(&prod, g, nullptr, 0, &p));
  void* cons_args[] = {&mid, &out, &n};
  p.func = reinterpret_cast<void*>(pdl_consumer);
  p.kernelParams = cons_args;
  TA_CHECK(cudaGraphAddKernelNode(&cons, g, nullptr, 0, &p));
  void* tail_args[] = {&out, &tail, &n};
  p.func = reinterpret_cast<void*>(pdl_tail);
  p.kernelParams = tail_args;
  TA_CHECK(cudaGraphAddKernelNode(&tl, g, nullptr, 0, &p));
  cudaGraphEdgeData programmatic{};
  programmatic.from_port = cudaGraphKernelNodePortProgrammatic;
  programmatic.type = cudaGraphDependencyTypeProgrammatic;
  TA_CHECK(cudaGraphAddDependencies(g, &prod, &cons, &programmatic, 1));
  TA_CHECK(cudaGraphAddDependencies(g, &cons, &tl, nullptr, 1));

  // What the runtime reports: without the data array the query is lossy.
  size_t ne = 0;
  TA_CHECK(cudaGraphGetEdges(g, nullptr, nullptr, nullptr, &ne));
  std::vector<cudaGraphNode_t> from(ne), to(ne);
  std::vector<cudaGraphEdgeData> data(ne);
  cudaError_t lossy = cudaGraphGetEdges(g, from.data(), to.data(), nullptr, &ne);
  (void)cudaGetLastError();
  TA_CHECK(cudaGraphGetEdges(g, from.data(), to.data(), data.data(), &ne));
  std::printf("graph_pdl: %zu edges, query without data: %s;", ne, cudaGetErrorName(lossy));
  for (size_t e = 0; e < ne; ++e)
    std::printf(" type=%u from_port=%u", unsigned(data[e].type), unsigned(data[e].from_port));
  std::printf("\n");

  cudaGraphExec_t exec;
  TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  cudaStream_t s;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int l = 0; l < kLaunches; ++l) TA_CHECK(cudaGraphLaunch(exec, s));
  TA_CHECK(cudaStreamSynchronize(s));

  // x = 3; mid = 7; out = (3 + 3) + (5 + 3) + (7 + 3) = 24; tail = 12.
  std::vector<float> h(kN);
  const struct { const float* buf; float want; const char* name; } checks[] = {
      {x, 3.0f, "x"}, {mid, 7.0f, "mid"}, {out, 24.0f, "out"}, {tail, 12.0f, "tail"}};
  for (const auto& c : checks) {
    TA_CHECK(cudaMemcpy(h.data(), c.buf, kN * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < kN; ++i)
      if (h[i] != c.want) {
        std::fprintf(stderr, "graph_pdl: %s[%d] = %g, expected %g\n", c.name, i, h[i], c.want);
        return 1;
      }
  }
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(g));
  TA_CHECK(cudaStreamDestroy(s));
  std::printf("graph_pdl: ok\n");
  testapp::mark_done();
  return 0;
}
