// Another CUPTI subscriber: the app subscribes to CUPTI callbacks itself, before its
// first CUDA call, as a profiler built into an app would. CUPTI allows one subscriber
// per process, so either kerncap's or the app's subscription is refused; the capture
// test checks that kerncap says so in one clear message either way.
#include <cupti.h>

#include "common/testapp.hpp"

static void CUPTIAPI on_api(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

__global__ void cupti_first_scale(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 2.0f + 1.0f;
}

int main() {
  CUpti_SubscriberHandle sub;
  CUptiResult r = cuptiSubscribe(&sub, on_api, nullptr);
  if (r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    std::fprintf(stderr, "cupti_first: cuptiSubscribe failed: %s (another CUPTI subscriber holds the process)\n",
                 text ? text : "?");
    return 3;
  }
  cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  const int n = 1 << 20;
  float* p = nullptr;
  TA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  TA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  cupti_first_scale<<<(n + 255) / 256, 256>>>(p, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  TA_CHECK(cudaFree(p));
  cuptiUnsubscribe(sub);
  testapp::mark_done();
  return 0;
}
