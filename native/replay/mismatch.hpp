// Host side of the mismatch map (mismatch_kernels.cu, embedded as a fatbin): where a
// replayed item differs from its expected state, computed where the data is.
// engine/kerncap/replay/mismatch.py is its numpy reference and reader.
#pragma once
#include <cuda.h>

#include <string>
#include <vector>

#include "resources.hpp"

namespace kc::replay {

class Session;

struct MapSpec {
  size_t item = 0;
  std::string against = "captured";  // "captured" | "reference" (Session::compare's meaning)
  std::string dtype;                 // empty: raw bytes
  bool tolerance = false;
  double atol = 0.0, rtol = 0.0;
  unsigned long long view_start = 0, view_rows = 1, view_cols = 1, row_stride = 1;  // elements
  unsigned long long grid_rows = 1, grid_cols = 1;
  unsigned first_k = 16;
};

struct MapResult {
  std::vector<unsigned long long> totals;  // mismatched, bytes, nan, inf, outside, stale, max_abs/max_rel bits,
                                           // ratio min/max keys
  std::vector<unsigned long long> err_hist, ulp_hist, value_hist, cell_count, cell_worst, row_profile, col_profile;
  std::vector<unsigned long long> first;   // element indices of the first mismatches, ascending
  unsigned long long tail_bytes = 0;       // differing bytes after the last whole element
  double seconds = 0.0;                    // GPU time of the passes
};

// One per process (the embedded module lives in the primary context).
class Mapper {
 public:
  Mapper();
  MapResult map(CUstream s, CUdeviceptr actual, CUdeviceptr expected, CUdeviceptr pre, size_t size,
                const MapSpec& spec, const std::string& what);
  // `size` bytes at each element index of src, concatenated.
  std::string gather(CUstream s, CUdeviceptr src, size_t size, const std::vector<unsigned long long>& indices,
                     const std::string& what);

 private:
  CUfunction function(const std::string& name);
  Module module_;
};

// The session-level calls the bindings expose (kerncap._replay.mismatch_map / gather / read_state).
MapResult mismatch_map(Session& s, const MapSpec& spec);
// `which`: "actual", "expected" (against "captured" or "reference"), "pre".
std::string gather_elements(Session& s, size_t item, const std::string& which, const std::string& against,
                            size_t element_size, const std::vector<unsigned long long>& indices);
std::string read_state(Session& s, size_t item, const std::string& which, const std::string& against,
                       unsigned long long offset, unsigned long long length);

}  // namespace kc::replay
