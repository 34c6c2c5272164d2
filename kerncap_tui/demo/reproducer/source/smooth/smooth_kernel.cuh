// The workbench demo's kernel and the source-discovery test's target: a 1-D filter
// with its boundary check inside the inner loop. Hoisting that check out of the loop
// (and unrolling the common tap count) is the "faster edit" the tests and the demo
// make; it keeps the order of the fmaf chain, so results stay byte-identical.
#pragma once

__global__ void smooth(const float* __restrict__ x, float* __restrict__ y, const float* __restrict__ w, int n,
                       int taps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float acc = 0.0f;
  const int half = taps / 2;
  if (taps == 64 && i >= half && i + 64 - half <= n) {
    // Interior point: every tap is in range, so the check leaves the loop and it unrolls.
#pragma unroll
    for (int k = 0; k < 64; ++k) acc = fmaf(w[k], x[i + k - half], acc);
  } else {
    for (int k = 0; k < taps; ++k) {
      int j = i + k - half;
      if (j >= 0 && j < n) acc = fmaf(w[k], x[j], acc);
    }
  }
  y[i] = acc;
}
