// XLA's autotuner inside the captured app (docs/capture-format.md, "Dispatch counting").
//
// XLA autotunes GEMM fusions while it compiles: each candidate config of the fusion is
// launched, then checked by XLA's helper kernels (RedzoneAllocatorKernelImpl, the
// redzone checker; xla_fp_comparison, the result comparator; RepeatBufferKernel,
// which fills the inputs). Those candidate launches are not the app's dispatches. No
// hook reaches into XLA's C++, so kerncap recognises them by time: a launch of the
// target within `window` of a helper launch is an autotuning launch and is not counted.
// That can misjudge (a real launch right after autotuning, a candidate that runs longer
// than the window): the manifest says what was skipped and how it was decided.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace kc {

class XlaAutotune {
 public:
  // An autotuner helper kernel, by mangled or demangled name.
  static bool is_helper(const std::string& name);
  // Window length from KERNCAP_XLA_AUTOTUNE_MS (default 50 ms; 0 turns the skipping off).
  static uint64_t window_from_env();

  explicit XlaAutotune(uint64_t window_ns = window_from_env()) : window_ns_(window_ns) {}
  void on_helper(uint64_t now_ns);
  // Whether a target launch at `now_ns` falls inside autotuning (then counted as skipped).
  bool skip_target(uint64_t now_ns);
  bool seen() const { return helpers_.load(std::memory_order_relaxed) > 0; }
  uint64_t helpers() const { return helpers_.load(std::memory_order_relaxed); }
  uint64_t skipped() const { return skipped_.load(std::memory_order_relaxed); }
  uint64_t window_ns() const { return window_ns_; }
  // The manifest's warning for a capture in a process where XLA ran ("" when it did not
  // and no XLA library is loaded).
  std::string note(bool xla_loaded) const;

  static uint64_t now_ns();

 private:
  uint64_t window_ns_;
  std::atomic<uint64_t> last_helper_ns_{0};
  std::atomic<uint64_t> helpers_{0};
  std::atomic<uint64_t> skipped_{0};
};

// True when a library of XLA (jaxlib, its CUDA plugin, TensorFlow) is loaded.
bool xla_loaded();

}  // namespace kc
