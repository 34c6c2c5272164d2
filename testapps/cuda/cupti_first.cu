// Another CUPTI subscriber: the app subscribes to CUPTI callbacks itself, before its
// first CUDA call, as a profiler built into an app would. CUPTI allows one subscriber
// per process, so either kerncap's or the app's subscription is refused; the capture
// test checks that kerncap says so in one clear message either way.
// `cupti_first late`: the app launches first and subscribes only then, keeping the
// subscription to its exit, as a profiler started mid-run would (test_profile.py).
#include <cupti.h>

#include <cstring>

#include "common/testapp.hpp"

static void CUPTIAPI on_api(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {}

__global__ void cupti_first_scale(float* p, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * 2.0f + 1.0f;
}

static bool subscribe(CUpti_SubscriberHandle* sub) {
  CUptiResult r = cuptiSubscribe(sub, on_api, nullptr);
  if (r != CUPTI_SUCCESS) {
    const char* text = nullptr;
    cuptiGetResultString(r, &text);
    std::fprintf(stderr, "cupti_first: cuptiSubscribe failed: %s (another CUPTI subscriber holds the process)\n",
                 text ? text : "?");
    return false;
  }
  cuptiEnableDomain(1, *sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  return true;
}

int main(int argc, char** argv) {
  const bool late = argc > 1 && std::strcmp(argv[1], "late") == 0;
  CUpti_SubscriberHandle sub;
  if (!late && !subscribe(&sub)) return 3;
  const int n = 1 << 20;
  float* p = nullptr;
  TA_CHECK(cudaMalloc(&p, n * sizeof(float)));
  TA_CHECK(cudaMemset(p, 0, n * sizeof(float)));
  cupti_first_scale<<<(n + 255) / 256, 256>>>(p, n);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());
  if (late) {
    if (!subscribe(&sub)) return 3;
    cupti_first_scale<<<(n + 255) / 256, 256>>>(p, n);  // kept subscribed to the exit
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaDeviceSynchronize());
  }
  TA_CHECK(cudaFree(p));
  if (!late) cuptiUnsubscribe(sub);
  testapp::mark_done();
  return 0;
}
