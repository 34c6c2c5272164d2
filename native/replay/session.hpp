// One replay session: a capture restored at its original virtual addresses, kept
// resident on the GPU so that replays, timings and validations of the captured cubin
// or of variants cost a module load, a device-to-device restore and the launch.
//
// Call order (the Python server drives it): Session(ordinal) -> reserve -> map ->
// load_state -> set_launch -> load_module -> time / validate (any number of times,
// load_module again for a variant). Reservations come first so that nothing else in
// the process takes the captured addresses.
#pragma once
#include <cuda.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "compare.hpp"
#include "kernel.hpp"
#include "resources.hpp"

namespace kc::replay {

struct SpanSpec {
  std::string label;  // "2 (regions 3, 4)"
  unsigned long long base = 0;
  unsigned long long size = 0;
};

// A region (restored at `base`) or a module global (global_name set; its address
// comes from the loaded module). Chunk lists follow docs/capture-format.md.
struct ItemSpec {
  std::string label;  // "region 3", "global scale"
  std::string global_name;
  unsigned long long base = 0;
  unsigned long long size = 0;
  std::vector<std::optional<std::string>> pre, post;
};

struct CompareSpec {
  std::string dtype;  // empty: byte-exact only
  double atol = 0.0, rtol = 0.0;
};

struct CompareOut {
  unsigned long long mismatched_bytes = 0;
  unsigned long long first_byte = kNone;
  unsigned long long mismatched_elements = 0;
  unsigned long long first_element = kNone;
  double max_abs = 0.0, max_rel = 0.0;
  unsigned long long window_offset = 0;  // byte offset of the windows below
  std::string expected, actual;          // a few bytes from the first mismatch on
};

class Session {
 public:
  explicit Session(int ordinal);
  size_t granularity() const { return granularity_; }
  std::pair<int, int> compute_capability() const;
  std::string device_name() const;
  std::string device_uuid() const;  // "GPU-xxxxxxxx-xxxx-...", as nvidia-smi and the manifest write it
  int ordinal() const { return ctx_.ordinal(); }

  void reserve(const std::vector<SpanSpec>& spans);
  void map(const std::vector<std::pair<unsigned long long, unsigned long long>>& ranges);
  void load_state(const std::string& blob_dir, unsigned long long chunk_size, const std::vector<ItemSpec>& items,
                  int threads);
  void set_launch(LaunchSpec spec);
  std::map<std::string, long long> load_module(const std::string& image, const std::string& label);

  // Warm-up, then one CUDA-event time per iteration (ms). Before each launch only
  // what the baseline wrote is restored; the optional L2 flush is outside the timing.
  std::vector<double> time(int iterations, int warmup, bool flush_l2);
  // Restores the whole pre-state, launches once, compares every item on the GPU with
  // its expected post-state (pre-state for items the baseline did not write).
  std::vector<CompareOut> validate(const std::vector<CompareSpec>& specs);

  std::vector<std::string> notes() const;
  // Empty when the context is usable; else the sticky error cuCtxSynchronize reports.
  std::string health();

 private:
  struct Item {
    ItemSpec spec;
    CUdeviceptr target = 0;
    size_t global_index = 0;
    DeviceBuffer pre, post;                               // resident copies
    std::vector<std::pair<size_t, size_t>> written;       // offset, length (chunk-granular)
  };
  void require_kernel(const char* what) const;
  CUdeviceptr target_of(const Item& item) const;
  void restore_all();
  void restore_written();
  void launch();

  PrimaryContext ctx_;
  size_t granularity_ = 0;
  std::vector<Reservation> reservations_;
  std::vector<Mapping> mappings_;
  std::vector<Item> items_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<LaunchConfig> launch_;
  std::unique_ptr<LoadedKernel> kernel_;
  std::unique_ptr<Comparer> comparer_;
  DeviceBuffer results_;
  DeviceBuffer l2_scratch_;
};

}  // namespace kc::replay
