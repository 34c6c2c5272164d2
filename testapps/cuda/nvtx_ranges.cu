// nvtx_ranges: one kernel (nv_tagged) launched in every kind of NVTX context, each
// launch with its own `tag` argument, so a test can tell from the captured parameters
// which launch an --nvtx selection picked (docs/selection.md):
//   tag 1  outside any range
//   tag 2  outer/inner.7          (default domain, nested push/pop)
//   tag 3  outer
//   tag 4  kcdomain:phase.B       (named domain, registered string)
//   tag 5  window                 (start/end range opened on the main thread, launch on another thread)
//   tag 6  outer/inner.7          (the second launch in that path)
// CUDA is initialised first: ranges opened before a process's first CUDA call are not
// seen (the capture library is loaded by cuInit).
#include <nvtx3/nvToolsExt.h>

#include <thread>

#include "common/testapp.hpp"

__global__ void nv_tagged(float* out, const float* in, int n, int tag) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 0.5f + float(tag);
}

int main() {
  const int n = 1 << 16;
  float *in = nullptr, *out = nullptr;
  TA_CHECK(cudaMalloc(&in, n * sizeof(float)));
  TA_CHECK(cudaMalloc(&out, n * sizeof(float)));
  TA_CHECK(cudaMemset(in, 0, n * sizeof(float)));
  TA_CHECK(cudaMemset(out, 0, n * sizeof(float)));
  testapp::Report report;
  report.add("in", in);
  report.add("out", out);
  report.write();

  auto launch = [&](int tag) {
    nv_tagged<<<(n + 255) / 256, 256>>>(out, in, n, tag);
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
  };

  launch(1);
  nvtxRangePushA("outer");
  nvtxRangePushA("inner.7");
  launch(2);
  nvtxRangePop();
  launch(3);
  nvtxRangePop();

  nvtxDomainHandle_t domain = nvtxDomainCreateA("kcdomain");
  nvtxStringHandle_t phase = nvtxDomainRegisterStringA(domain, "phase.B");
  nvtxEventAttributes_t attrs{};
  attrs.version = NVTX_VERSION;
  attrs.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attrs.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attrs.message.registered = phase;
  nvtxDomainRangePushEx(domain, &attrs);
  launch(4);
  nvtxDomainRangePop(domain);

  nvtxRangeId_t window = nvtxRangeStartA("window");
  std::thread([&] { launch(5); }).join();
  nvtxRangeEnd(window);

  nvtxRangePushA("outer");
  nvtxRangePushA("inner.7");
  launch(6);
  nvtxRangePop();
  nvtxRangePop();
  nvtxDomainDestroy(domain);
  testapp::mark_done();
  return 0;
}
