// graph_device: the target (gd_scale) runs only in a graph that a kernel launches on
// the GPU (device graph launch). kerncap cannot see such launches, so extract must
// refuse with the reason, and the app must still finish with its own result.
#include "common/testapp.hpp"

__global__ void gd_scale(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 0.5f + 1.0f;
}

__global__ void gd_launcher(cudaGraphExec_t exec) { cudaGraphLaunch(exec, cudaStreamGraphFireAndForget); }

int main() {
  const int n = 1 << 14;
  float* p = nullptr;
  TA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  TA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  cudaStream_t s;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  TA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gd_scale<<<(n + 255) / 256, 256, 0, s>>>(p, n);
  TA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  TA_CHECK(cudaGraphInstantiate(&exec, g, cudaGraphInstantiateFlagDeviceLaunch));
  TA_CHECK(cudaGraphUpload(exec, s));
  // A device graph is launched by a kernel that itself runs in a graph.
  cudaGraph_t host_graph;
  TA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  gd_launcher<<<1, 1, 0, s>>>(exec);
  TA_CHECK(cudaStreamEndCapture(s, &host_graph));
  cudaGraphExec_t host_exec;
  TA_CHECK(cudaGraphInstantiate(&host_exec, host_graph, 0));
  for (int k = 0; k < 3; ++k) {
    TA_CHECK(cudaGraphLaunch(host_exec, s));
    TA_CHECK(cudaStreamSynchronize(s));
  }
  TA_CHECK(cudaGraphExecDestroy(host_exec));
  TA_CHECK(cudaGraphDestroy(host_graph));
  float first = 0.0f;
  TA_CHECK(cudaMemcpy(&first, p, sizeof first, cudaMemcpyDeviceToHost));
  if (first != 1.75f) {  // three steps of p = p/2 + 1 from 0
    std::fprintf(stderr, "graph_device: p[0] = %.9g, expected 1.75\n", first);
    return 1;
  }
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(g));
  testapp::mark_done();
  return 0;
}
