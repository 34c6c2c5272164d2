// many_allocs: 200,000 live small device allocations (cudaMalloc, 256 B .. 4 KiB), then
// ma_target, which reaches 4096 of them only through a device pointer table and sums
// their words. A capture must track every allocation as its own region and still
// snapshot, write and replay them all (issue 7: robustness at scale).
//   many_allocs [allocations]     (default 200000; at least 4096)
// The 4096 table entries are filled with a pattern distinct per entry (ma_fill, which
// walks the same table); every other allocation is left as cudaMalloc gave it. The sums
// are integer (wrapping, order-independent), so every run and every replay writes the
// same bytes. Prints how long the allocations took.
#include <chrono>
#include <vector>

#include "common/testapp.hpp"

constexpr long kDefaultAllocs = 200000;
constexpr int kEntries = 4096;

// Word `w` of table entry `e`: distinct per entry and per word, never all zero.
__host__ __device__ inline unsigned pattern(unsigned e, unsigned w) {
  return ((e + 1u) * 2654435761u) ^ (w * 40503u + 0x9e3779b9u);
}

__global__ void ma_fill(unsigned* const* table, const unsigned* words, int entries) {
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    unsigned* p = table[e];
    for (unsigned w = threadIdx.x; w < words[e]; w += blockDim.x) p[w] = pattern(e, w);
  }
}

// out[e] = sum of entry e's words (mod 2^32, held in 64 bits); out[entries] = sum of those.
__global__ void ma_target(const unsigned* const* table, const unsigned* words, int entries,
                          unsigned long long* out) {
  __shared__ unsigned block_sum;
  for (int e = blockIdx.x; e < entries; e += gridDim.x) {
    if (threadIdx.x == 0) block_sum = 0;
    __syncthreads();
    const unsigned* p = table[e];
    unsigned local = 0;
    for (unsigned w = threadIdx.x; w < words[e]; w += blockDim.x) local += p[w];
    atomicAdd(&block_sum, local);
    __syncthreads();
    if (threadIdx.x == 0) {
      out[e] = block_sum;
      atomicAdd(&out[entries], static_cast<unsigned long long>(block_sum));
    }
    __syncthreads();
  }
}

// 256 B .. 4 KiB in 256 B steps, mixed so that neighbours differ in size.
inline size_t alloc_size(long i) { return 256u * (1u + static_cast<unsigned>((i * 7) % 16)); }

int main(int argc, char** argv) {
  const long count = argc > 1 ? std::atol(argv[1]) : kDefaultAllocs;
  if (count < kEntries) {
    std::fprintf(stderr, "many_allocs: bad allocation count %ld (at least %d)\n", count, kEntries);
    return 2;
  }
  TA_CHECK(cudaFree(nullptr));  // create the context outside the timed loop

  std::vector<void*> allocs(count);
  size_t total_bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < count; ++i) {
    TA_CHECK(cudaMalloc(&allocs[i], alloc_size(i)));
    total_bytes += alloc_size(i);
  }
  const double alloc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("many_allocs: %ld allocations (%.1f MiB) in %.3f s\n", count, total_bytes / 1048576.0, alloc_s);

  // Entries spread evenly over the allocations, so the table spans the whole range.
  const long stride = count / kEntries;
  std::vector<unsigned*> table_h(kEntries);
  std::vector<unsigned> words_h(kEntries);
  for (int e = 0; e < kEntries; ++e) {
    const long i = e * stride;
    table_h[e] = static_cast<unsigned*>(allocs[i]);
    words_h[e] = static_cast<unsigned>(alloc_size(i) / sizeof(unsigned));
  }
  unsigned** table = nullptr;
  unsigned* words = nullptr;
  unsigned long long* out = nullptr;
  const size_t out_bytes = (kEntries + 1) * sizeof(unsigned long long);
  TA_CHECK(cudaMalloc(&table, kEntries * sizeof(unsigned*)));
  TA_CHECK(cudaMalloc(&words, kEntries * sizeof(unsigned)));
  TA_CHECK(cudaMalloc(&out, out_bytes));
  TA_CHECK(cudaMemcpy(table, table_h.data(), kEntries * sizeof(unsigned*), cudaMemcpyHostToDevice));
  TA_CHECK(cudaMemcpy(words, words_h.data(), kEntries * sizeof(unsigned), cudaMemcpyHostToDevice));
  TA_CHECK(cudaMemset(out, 0, out_bytes));
  ma_fill<<<kEntries, 128>>>(table, words, kEntries);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("allocs", static_cast<unsigned long long>(count));
  report.add("entries", static_cast<unsigned long long>(kEntries));
  report.add("stride", static_cast<unsigned long long>(stride));
  report.add("alloc_ns", static_cast<unsigned long long>(alloc_s * 1e9));
  report.add("table", table);
  report.add("words", words);
  report.add("out", out);
  report.add("first", allocs.front());
  report.add("last", allocs.back());
  report.write();

  ma_target<<<kEntries, 128>>>(table, words, kEntries, out);
  TA_CHECK(cudaGetLastError());
  TA_CHECK(cudaDeviceSynchronize());

  std::vector<unsigned long long> got(kEntries + 1);
  TA_CHECK(cudaMemcpy(got.data(), out, out_bytes, cudaMemcpyDeviceToHost));
  unsigned long long total = 0;
  for (int e = 0; e < kEntries; ++e) {
    unsigned sum = 0;
    for (unsigned w = 0; w < words_h[e]; ++w) sum += pattern(e, w);
    if (got[e] != sum) {
      std::fprintf(stderr, "many_allocs: entry %d sums to %llu, expected %u\n", e, got[e], sum);
      return 1;
    }
    total += sum;
  }
  if (got[kEntries] != total) {
    std::fprintf(stderr, "many_allocs: total %llu, expected %llu\n", got[kEntries], total);
    return 1;
  }
  for (void* p : allocs) TA_CHECK(cudaFree(p));
  TA_CHECK(cudaFree(table));
  TA_CHECK(cudaFree(words));
  TA_CHECK(cudaFree(out));
  testapp::mark_done();
  return 0;
}
