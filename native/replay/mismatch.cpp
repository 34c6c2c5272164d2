#include "mismatch.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "compare.hpp"  // dtype_size
#include "mismatch_fatbin.h"  // generated: kc_mismatch_fatbin[]
#include "session.hpp"

namespace kc::replay {
namespace {

constexpr unsigned kThreads = 256;
constexpr unsigned long long kMaxBlocks = 4096;
constexpr unsigned long long kIdxBins = 1ull << 20;  // mismatch positions, for the first-k pass
constexpr unsigned long long kMaxProfile = 65536;
constexpr unsigned long long kMaxGrid = 1024;
constexpr size_t kErrBins = 129, kUlpBins = 65, kValueBins = 3 * 260, kTotals = 10;
constexpr unsigned long long kFirstCapacity = 1ull << 16;

// Mirrors MapParams and MapBuffers in mismatch_kernels.cu.
struct MapParams {
  CUdeviceptr actual, expected, pre;
  unsigned long long n;
  unsigned long long view_start, view_rows, view_cols, row_stride;
  unsigned long long grid_rows, grid_cols, prof_rows, prof_cols, idx_bins;
  double atol, rtol;
  int tolerance;
};
struct MapBuffers {
  CUdeviceptr totals, err_hist, ulp_hist, value_hist, cell_count, cell_worst, row_prof, col_prof, idx_hist;
};

struct Kind {
  const char* dtype;
  const char* suffix;
};
constexpr Kind kKinds[] = {{"float64", "f64"}, {"float32", "f32"}, {"float16", "f16"}, {"bfloat16", "bf16"},
                           {"int32", "i32"},   {"int8", "i8"},     {"uint8", "u8"},    {"", "u8"}};

const Kind& kind_of(const std::string& dtype, const std::string& what) {
  for (const Kind& k : kKinds)
    if (dtype == k.dtype) return k;
  throw Error("input", "the mismatch map of " + what + " cannot read dtype " + dtype +
                           " (float64 float32 float16 bfloat16 int32 int8 uint8, or raw bytes)");
}

unsigned blocks_for(unsigned long long work) {
  return static_cast<unsigned>(std::clamp<unsigned long long>((work + kThreads - 1) / kThreads, 1, kMaxBlocks));
}

std::vector<unsigned long long> download(CUdeviceptr src, size_t count, const std::string& what) {
  std::vector<unsigned long long> out(count);
  if (count) KC_CHECK(cuMemcpyDtoH, (out.data(), src, count * sizeof(unsigned long long)), what);
  return out;
}

Mapper& mapper() {
  static std::unique_ptr<Mapper> m;  // created on first use, in the session's context
  if (!m) m = std::make_unique<Mapper>();
  return *m;
}

// The kernels' parameters for `spec` over `size` bytes of `unit`-byte elements; throws on
// a misaligned item or an empty or overlapping view.
MapParams params_for(CUdeviceptr actual, CUdeviceptr expected, CUdeviceptr pre, size_t size, size_t unit,
                     const MapSpec& spec, const std::string& what) {
  if (actual % unit || expected % unit || pre % unit)
    throw Error("input", what + " is not aligned for " + spec.dtype);
  if (spec.view_rows == 0 || spec.view_cols == 0 || spec.row_stride < spec.view_cols)
    throw Error("input", "the view of " + what + " is empty or its rows overlap (" + std::to_string(spec.view_rows) +
                             " x " + std::to_string(spec.view_cols) + ", row stride " +
                             std::to_string(spec.row_stride) + ")");
  const unsigned long long n = size / unit;
  return MapParams{actual, expected, pre, n, spec.view_start, spec.view_rows, spec.view_cols, spec.row_stride,
                   std::clamp<unsigned long long>(spec.grid_rows, 1, std::min(spec.view_rows, kMaxGrid)),
                   std::clamp<unsigned long long>(spec.grid_cols, 1, std::min(spec.view_cols, kMaxGrid)),
                   std::min(spec.view_rows, kMaxProfile), std::min(spec.view_cols, kMaxProfile),
                   std::max<unsigned long long>(1, std::min(n, kIdxBins)), spec.atol, spec.rtol,
                   spec.tolerance ? 1 : 0};
}

// The accumulators' places in the one buffer at `at`, u64 each in MapResult's order, then
// the u32 position histogram.
MapBuffers carve(CUdeviceptr at, size_t cells, const MapParams& p) {
  MapBuffers o;
  auto take = [&](size_t count) { CUdeviceptr here = at; at += count * 8; return here; };
  o.totals = take(kTotals);
  o.err_hist = take(kErrBins);
  o.ulp_hist = take(kUlpBins);
  o.value_hist = take(kValueBins);
  o.cell_count = take(cells);
  o.cell_worst = take(cells);
  o.row_prof = take(p.prof_rows);
  o.col_prof = take(p.prof_cols);
  o.idx_hist = at;
  return o;
}

// The downloaded u64 accumulators (laid out as carve places them) into r.
void unpack(MapResult& r, const std::vector<unsigned long long>& all, size_t cells, const MapParams& p) {
  auto slice = [&](size_t& pos, size_t count) {
    std::vector<unsigned long long> v(all.begin() + pos, all.begin() + pos + count);
    pos += count;
    return v;
  };
  size_t pos = 0;
  r.totals = slice(pos, kTotals);
  r.err_hist = slice(pos, kErrBins);
  r.ulp_hist = slice(pos, kUlpBins);
  r.value_hist = slice(pos, kValueBins);
  r.cell_count = slice(pos, cells);
  r.cell_worst = slice(pos, cells);
  r.row_profile = slice(pos, p.prof_rows);
  r.col_profile = slice(pos, p.prof_cols);
}

// The element ranges [lo, hi), as pairs, of the smallest non-empty position bins that
// together hold first_k mismatches.
std::vector<unsigned long long> first_ranges(const std::vector<unsigned>& idx, const MapParams& p, unsigned first_k) {
  const unsigned long long n = p.n;
  std::vector<unsigned long long> ranges;
  unsigned long long seen = 0;
  for (unsigned long long b = 0; b < p.idx_bins && seen < first_k; ++b) {
    if (!idx[b]) continue;
    seen += idx[b];
    // bin b holds the elements i with i * bins / n == b
    const unsigned long long lo = (b * n + p.idx_bins - 1) / p.idx_bins;
    const unsigned long long hi = ((b + 1) * n + p.idx_bins - 1) / p.idx_bins;
    ranges.push_back(lo);
    ranges.push_back(std::min(hi, n));
  }
  return ranges;
}

CUdeviceptr state_of(const Session::ItemPointers& p, const std::string& which) {
  if (which == "actual") return p.actual;
  if (which == "expected") return p.expected;
  if (which == "pre") return p.pre;
  throw Error("input", "state " + which + " of " + p.label + ": expected actual, expected or pre");
}

}  // namespace

Mapper::Mapper() : module_(kc_mismatch_fatbin, "the embedded mismatch-map kernels") {}

CUfunction Mapper::function(const std::string& name) {
  CUfunction f = nullptr;
  KC_CHECK(cuModuleGetFunction, (&f, module_.get(), name.c_str()), name + " in the embedded mismatch-map kernels");
  return f;
}

MapResult Mapper::map(CUstream s, CUdeviceptr actual, CUdeviceptr expected, CUdeviceptr pre, size_t size,
                      const MapSpec& spec, const std::string& what) {
  const Kind& kind = kind_of(spec.dtype, what);
  const size_t unit = spec.dtype.empty() ? 1 : dtype_size(spec.dtype);
  MapParams p = params_for(actual, expected, pre, size, unit, spec, what);
  const unsigned long long n = p.n;
  const size_t cells = p.grid_rows * p.grid_cols;
  // One zeroed buffer holds every accumulator (u64 each; the position histogram is u32).
  const size_t u64s = kTotals + kErrBins + kUlpBins + kValueBins + 2 * cells + p.prof_rows + p.prof_cols;
  DeviceBuffer acc(u64s * 8 + p.idx_bins * 4, "the mismatch map of " + what);
  KC_CHECK(cuMemsetD8Async, (acc.get(), 0, acc.size(), s), "the mismatch map of " + what);
  const unsigned long long ratio_min_init = ~0ull;
  KC_CHECK(cuMemcpyHtoDAsync, (acc.get() + 8 * 8, &ratio_min_init, 8, s), "the mismatch map of " + what);
  MapBuffers o = carve(acc.get(), cells, p);

  Event start, stop;
  KC_CHECK(cuEventRecord, (start.get(), s), "a timing event");
  const std::string map_name = std::string("kc_mm_map_") + kind.suffix;
  void* args[] = {&p, &o};
  if (n) KC_CHECK(cuLaunchKernel, (function(map_name), blocks_for(n), 1, 1, kThreads, 1, 1, 0, s, args, nullptr),
                  map_name + " on " + what);
  KC_CHECK(cuStreamSynchronize, (s), map_name + " on " + what);

  MapResult r;
  unpack(r, download(acc.get(), u64s, "the mismatch map of " + what), cells, p);

  // The first mismatches: the smallest position bins that together hold first_k of them.
  if (r.totals[0] && spec.first_k) {
    std::vector<unsigned> idx(p.idx_bins);
    KC_CHECK(cuMemcpyDtoH, (idx.data(), o.idx_hist, p.idx_bins * 4), "the mismatch positions of " + what);
    const std::vector<unsigned long long> ranges = first_ranges(idx, p, spec.first_k);
    const unsigned nranges = static_cast<unsigned>(ranges.size() / 2);
    DeviceBuffer dev_ranges(ranges.size() * 8, "the first mismatches of " + what);
    DeviceBuffer found((kFirstCapacity + 1) * 8, "the first mismatches of " + what);
    KC_CHECK(cuMemcpyHtoDAsync, (dev_ranges.get(), ranges.data(), ranges.size() * 8, s), "the first mismatches of " + what);
    KC_CHECK(cuMemsetD8Async, (found.get(), 0, 8, s), "the first mismatches of " + what);
    const std::string first_name = std::string("kc_mm_first_") + kind.suffix;
    CUdeviceptr rp = dev_ranges.get(), out = found.get() + 8, count = found.get();
    unsigned long long capacity = kFirstCapacity;
    void* fargs[] = {&p, &rp, const_cast<unsigned*>(&nranges), &out, &capacity, &count};
    const unsigned long long widest = n / p.idx_bins + 2;
    KC_CHECK(cuLaunchKernel, (function(first_name), blocks_for(widest), std::min(nranges, 65535u), 1, kThreads, 1, 1,
                              0, s, fargs, nullptr), first_name + " on " + what);
    KC_CHECK(cuStreamSynchronize, (s), first_name + " on " + what);
    unsigned long long got = 0;
    KC_CHECK(cuMemcpyDtoH, (&got, count, 8), "the first mismatches of " + what);
    got = std::min(got, kFirstCapacity);
    r.first = download(out, got, "the first mismatches of " + what);
    std::sort(r.first.begin(), r.first.end());
    if (r.first.size() > spec.first_k) r.first.resize(spec.first_k);
  }
  KC_CHECK(cuEventRecord, (stop.get(), s), "a timing event");
  KC_CHECK(cuEventSynchronize, (stop.get()), "a timing event");
  float ms = 0.0f;
  KC_CHECK(cuEventElapsedTime, (&ms, start.get(), stop.get()), "a timing event");
  r.seconds = ms / 1000.0;

  // Bytes past the last whole element compare byte by byte (a few at most).
  if (const size_t tail = size - n * unit) {
    std::string a(tail, '\0'), e(tail, '\0');
    KC_CHECK(cuMemcpyDtoH, (a.data(), actual + n * unit, tail), what);
    KC_CHECK(cuMemcpyDtoH, (e.data(), expected + n * unit, tail), "expected state of " + what);
    for (size_t i = 0; i < tail; ++i) r.tail_bytes += a[i] != e[i];
  }
  return r;
}

std::string Mapper::gather(CUstream s, CUdeviceptr src, size_t size, const std::vector<unsigned long long>& indices,
                           const std::string& what) {
  if (indices.empty()) return std::string();
  DeviceBuffer idx(indices.size() * 8, "element indices of " + what);
  DeviceBuffer out(indices.size() * size, "elements of " + what);
  KC_CHECK(cuMemcpyHtoDAsync, (idx.get(), indices.data(), indices.size() * 8, s), "element indices of " + what);
  unsigned long long n = indices.size();
  unsigned width = static_cast<unsigned>(size);
  CUdeviceptr sp = src, ip = idx.get(), op = out.get();
  void* args[] = {&sp, &ip, &n, &width, &op};
  KC_CHECK(cuLaunchKernel, (function("kc_mm_gather"), blocks_for(n * size), 1, 1, kThreads, 1, 1, 0, s, args, nullptr),
           "kc_mm_gather on " + what);
  KC_CHECK(cuStreamSynchronize, (s), "kc_mm_gather on " + what);
  std::string host(indices.size() * size, '\0');
  KC_CHECK(cuMemcpyDtoH, (host.data(), out.get(), host.size()), "elements of " + what);
  return host;
}

MapResult mismatch_map(Session& s, const MapSpec& spec) {
  const Session::ItemPointers p = s.item_pointers(spec.item, spec.against);
  KC_CHECK(cuStreamSynchronize, (s.stream()), "the replay stream before mapping " + p.label);
  return mapper().map(s.stream(), p.actual, p.expected, p.pre, p.size, spec, p.label);
}

std::string gather_elements(Session& s, size_t item, const std::string& which, const std::string& against,
                            size_t element_size, const std::vector<unsigned long long>& indices) {
  const Session::ItemPointers p = s.item_pointers(item, against);
  if (element_size == 0) throw Error("input", "gather of " + p.label + ": element size 0");
  for (unsigned long long i : indices)
    if (i >= p.size / element_size)
      throw Error("input", "element " + std::to_string(i) + " lies outside " + p.label + " (" +
                               format_bytes(p.size) + ")");
  return mapper().gather(s.stream(), state_of(p, which), element_size, indices, which + " state of " + p.label);
}

std::string read_state(Session& s, size_t item, const std::string& which, const std::string& against,
                       unsigned long long offset, unsigned long long length) {
  const Session::ItemPointers p = s.item_pointers(item, against);
  if (offset > p.size || length > p.size - offset)
    throw Error("input", "read of " + std::to_string(length) + " bytes at +" + std::to_string(offset) +
                             " lies outside " + p.label + " (" + format_bytes(p.size) + ")");
  KC_CHECK(cuStreamSynchronize, (s.stream()), "reading " + p.label);
  std::string out(length, '\0');
  if (length) KC_CHECK(cuMemcpyDtoH, (out.data(), state_of(p, which) + offset, length), which + " state of " + p.label);
  return out;
}

}  // namespace kc::replay
