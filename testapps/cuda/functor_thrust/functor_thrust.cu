// functor_thrust: a kernel that comes from a framework template, in a translation unit
// that includes thrust. The framework part mimics Kokkos: parallel_for wraps the user's
// functor and a RangePolicy in a ParallelFor driver and launches
// cuda_parallel_launch_local_memory<Driver>, so the captured kernel is a template
// instance named after the driver type. Thrust (and through it CUB and libcu++) puts
// internal-linkage device globals into the module whose names embed a per-TU hash
// (_ZN32_INTERNAL_<hash>_..._4cuda3std3__45__cpo5beginE): a recompile must reproduce
// them for the replay to restore the module's globals.
//
// Target: cuda_parallel_launch_local_memory<ParallelFor<Smooth3, RangePolicy>>, launched
// three times (dispatches 0..2); inputs are small dyadic numbers, so sums are exact.
#include <thrust/device_vector.h>
#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include "common/testapp.hpp"

namespace minikokkos {

struct RangePolicy {
  int begin;
  int end;
};

namespace impl {

template <class Functor, class Policy>
struct ParallelFor {
  Functor functor;
  Policy policy;
  __device__ void operator()() const {
    const int stride = static_cast<int>(gridDim.x * blockDim.x);
    for (int i = policy.begin + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); i < policy.end; i += stride)
      functor(i);
  }
};

template <class Driver>
__global__ __launch_bounds__(256) void cuda_parallel_launch_local_memory(const Driver driver) {
  driver();
}

}  // namespace impl

template <class Functor>
void parallel_for(const char* label, RangePolicy policy, const Functor& functor) {
  const impl::ParallelFor<Functor, RangePolicy> driver{functor, policy};
  const int n = policy.end - policy.begin;
  const int grid = n > 0 ? (n + 255) / 256 : 1;
  impl::cuda_parallel_launch_local_memory<<<grid < 1024 ? grid : 1024, 256>>>(driver);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    std::fprintf(stderr, "parallel_for %s: %s\n", label, cudaGetErrorString(err));
    std::exit(1);
  }
}

}  // namespace minikokkos

// The user's functors.
struct Scale {
  float* data;
  float factor;
  __device__ void operator()(int i) const { data[i] *= factor; }
};

struct Smooth3 {
  const float* in;
  float* out;
  int n;
  __device__ void operator()(int i) const {
    const float left = i > 0 ? in[i - 1] : 0.0f;
    const float right = i + 1 < n ? in[i + 1] : 0.0f;
    out[i] = 0.25f * left + 0.5f * in[i] + 0.25f * right;
  }
};

struct Dyadic {
  __host__ __device__ float operator()(float v) const { return static_cast<float>(static_cast<int>(v) % 1024) / 64.0f; }
};

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : (1 << 22);
  if (n <= 1) {
    std::fprintf(stderr, "functor_thrust: n must be at least 2\n");
    return 2;
  }
  thrust::device_vector<float> in(n), out(n, 0.0f);
  thrust::sequence(in.begin(), in.end());
  thrust::transform(in.begin(), in.end(), in.begin(), Dyadic());
  TA_CHECK(cudaDeviceSynchronize());
  float* in_p = thrust::raw_pointer_cast(in.data());
  float* out_p = thrust::raw_pointer_cast(out.data());

  testapp::Report report;
  report.add("in", in_p);
  report.add("out", out_p);
  report.add("n", static_cast<unsigned long long>(n));
  report.write();

  double checksum = 0.0;
  for (int round = 0; round < 3; ++round) {
    TA_CHECK(cudaMemset(out_p, 0, size_t(n) * sizeof(float)));  // every dispatch changes `out`
    minikokkos::parallel_for("smooth", {0, n}, Smooth3{in_p, out_p, n});
    checksum += thrust::reduce(out.begin(), out.end(), 0.0);
  }
  minikokkos::parallel_for("scale", {0, n}, Scale{out_p, 0.5f});
  TA_CHECK(cudaDeviceSynchronize());
  std::printf("functor_thrust: checksum %.1f\n", checksum);
  testapp::mark_done();
  return 0;
}
