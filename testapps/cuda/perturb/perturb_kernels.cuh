// The perturbation test's targets (testapps/cuda/perturb/perturb_pair.cu). The variants
// in ../variants/pair_fma_*.cu declare the same signatures, so their mangled names and
// parameter layouts match and `kerncap validate --cubin` can swap them in.
#pragma once

// out = a*b + 1, element-wise over a rows x cols matrix, visited in transposed order:
// consecutive threads touch elements `cols` apart (uncoalesced on purpose: the faster
// variants visit them in order). Every element is computed exactly once, by one fmaf,
// so any visiting order gives the same bytes.
__global__ void pair_fma(const float* a, const float* b, float* out, int rows, int cols) {
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  const long long n = static_cast<long long>(rows) * cols;
  if (t >= n) return;
  const long long i = (t % rows) * cols + t / rows;
  out[i] = fmaf(a[i], b[i], 1.0f);
}

// out[i] = table[pos[i]], the position stored as a float and used as an unsigned index:
// correct for the non-negative positions the app stores, an access gigabytes away for
// a negative one. Perturbed validation must report that as the captured kernel's own
// fault, not as the variant's.
__global__ void gather_unsigned(const float* pos, const float* table, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = table[static_cast<unsigned>(static_cast<int>(pos[i]))];
}
