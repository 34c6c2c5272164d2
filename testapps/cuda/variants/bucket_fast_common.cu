// Variant of buckets' bk_scale: byte-exact, fast only on the common bucket (n = 2^20).
#define BK_FAST_N (1 << 20)
#include "../buckets_kernel.cuh"
