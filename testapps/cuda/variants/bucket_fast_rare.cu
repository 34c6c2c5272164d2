// Variant of buckets' bk_scale: byte-exact, fast only on the rare bucket (n = 2^16).
#define BK_FAST_N (1 << 16)
#include "../buckets_kernel.cuh"
