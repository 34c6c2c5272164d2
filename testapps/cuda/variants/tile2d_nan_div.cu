// Planted bug (issue 30): NaNs from a division: v * k / k with k = c mod 64 is exact
// (small dyadic values) except where k is 0: 0 / 0 in every 64th column.
#define TILE2D_BODY(r, c, v) ((v) * static_cast<float>((c) & 63) / static_cast<float>((c) & 63))
#include "../tile2d/tile2d_kernel.cuh"
