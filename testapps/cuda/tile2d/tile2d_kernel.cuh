// The 2-D target of tile2d.cu and of the planted-bug variants in variants/tile2d_*.cu
// (issue 30: the mismatch report and heatmap must name where each one differs). Every
// variant declares this signature, so the mangled name (_Z6tile2dPfPKfii) and the
// parameter layout match the capture and `--cubin` can swap them in.
//
// out[r][c] = v(r, c) * colscale[c], computed in 64 x 64 tiles: a 16 x 16 block, each
// thread 4 x 4 elements. v is a small multiple of 1/4 and colscale a multiple of 1/8,
// so every product is exact in float32 and the variants' correct elements are bit-exact.
#pragma once

constexpr int kTile = 64;
constexpr int kPerThread = 4;

__device__ __forceinline__ float tile2d_value(int r, int c) {
  return static_cast<float>((r * 131 + c * 7) % 1024) * 0.25f;
}

#ifndef TILE2D_BODY
#define TILE2D_BODY(r, c, v) (v)
#endif
#ifndef TILE2D_LAST_ROW
#define TILE2D_LAST_ROW(rows) (rows)
#endif

__global__ void tile2d(float* out, const float* colscale, int rows, int cols) {
  const int r0 = blockIdx.y * kTile + threadIdx.y * kPerThread;
  const int c0 = blockIdx.x * kTile + threadIdx.x * kPerThread;
  for (int i = 0; i < kPerThread; ++i) {
    const int r = r0 + i;
    if (r >= TILE2D_LAST_ROW(rows)) continue;
    for (int j = 0; j < kPerThread; ++j) {
      const int c = c0 + j;
      if (c >= cols) continue;
      const float v = tile2d_value(r, c) * colscale[c];
      out[static_cast<size_t>(r) * cols + c] = TILE2D_BODY(r, c, v);
    }
  }
}
