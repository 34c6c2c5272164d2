// Planted bug (issue 30): a wrong scale in one row block: tile row 4 (rows 256-319)
// comes out twice as large.
#define TILE2D_BODY(r, c, v) (blockIdx.y == 4 ? 2.0f * (v) : (v))
#include "../tile2d/tile2d_kernel.cuh"
