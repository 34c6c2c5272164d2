// bk_scale, the kernel of the `buckets` test app and of its variants.
//
// y = a * x + b, plus a deliberate chain of dependent `pad += x * 0` steps: with the
// app's data (x, b in [1, 2), a = 2) the result is positive, so adding the chain's
// signed zero never changes a byte, and the chain's length sets the kernel's time.
// The variants shorten it for one shape only (BK_FAST_N), so they are byte-exact and
// faster on exactly one bucket.
#pragma once

#ifndef BK_REPEAT
#define BK_REPEAT 512
#endif
#ifndef BK_FAST_N
#define BK_FAST_N (-1)
#endif

__global__ void bk_scale(float* y, const float* x, const float* b, float a, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float v = x[i];
  float pad = -0.0f;
  const int repeat = n == BK_FAST_N ? 1 : BK_REPEAT;
#pragma unroll 1
  for (int r = 0; r < repeat; ++r) pad += v * 0.0f;
  y[i] = fmaf(a, v, b[i]) + pad;
}
