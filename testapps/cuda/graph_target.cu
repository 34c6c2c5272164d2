// graph_target: the target (graph_scale) is only ever launched from a CUDA graph made
// by stream capture: 4 nodes per launch, 3 launches. kerncap counts the nodes at each
// cuGraphLaunch and captures one at its node (docs/graphs.md) without corrupting the
// app, which checks its own result.
#include "common/testapp.hpp"

__global__ void graph_scale(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 0.5f + 1.0f;
}

int main() {
  const int n = 1 << 20;
  float* p = nullptr;
  TA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  TA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  cudaStream_t s;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  TA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < 4; ++k) graph_scale<<<(n + 255) / 256, 256, 0, s>>>(p, n);
  TA_CHECK(cudaStreamEndCapture(s, &graph));
  TA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int it = 0; it < 3; ++it) TA_CHECK(cudaGraphLaunch(exec, s));
  TA_CHECK(cudaStreamSynchronize(s));

  float first = 0.0f;
  TA_CHECK(cudaMemcpy(&first, p, sizeof(float), cudaMemcpyDeviceToHost));
  // 12 steps of p = p/2 + 1 from 0: 2 - 2^-11.
  if (first != 2.0f - 1.0f / 2048.0f) {
    std::fprintf(stderr, "graph_target: p[0] = %.9g, expected %.9g\n", first, 2.0f - 1.0f / 2048.0f);
    return 1;
  }
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(graph));
  TA_CHECK(cudaStreamDestroy(s));
  TA_CHECK(cudaFree(p));
  testapp::mark_done();
  return 0;
}
