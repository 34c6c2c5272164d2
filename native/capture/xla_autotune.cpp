#include "xla_autotune.hpp"

#include <link.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

namespace kc {

bool XlaAutotune::is_helper(const std::string& name) {
  static const char* helpers[] = {"RedzoneAllocatorKernel", "redzone_checker", "xla_fp_comparison",
                                  "xla_int_comparison", "RepeatBufferKernel"};
  for (const char* h : helpers)
    if (name.find(h) != std::string::npos) return true;
  return false;
}

uint64_t XlaAutotune::window_from_env() {
  const char* v = std::getenv("KERNCAP_XLA_AUTOTUNE_MS");
  if (!v || !*v) return 50ull * 1000 * 1000;
  char* end = nullptr;
  const unsigned long long ms = std::strtoull(v, &end, 10);
  return end && !*end ? ms * 1000 * 1000 : 50ull * 1000 * 1000;
}

uint64_t XlaAutotune::now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

void XlaAutotune::on_helper(uint64_t now) {
  last_helper_ns_.store(now, std::memory_order_relaxed);
  helpers_.fetch_add(1, std::memory_order_relaxed);
}

bool XlaAutotune::skip_target(uint64_t now) {
  if (!window_ns_ || !seen()) return false;
  const uint64_t last = last_helper_ns_.load(std::memory_order_relaxed);
  if (now < last || now - last > window_ns_) return false;
  skipped_.fetch_add(1, std::memory_order_relaxed);
  return true;
}

std::string XlaAutotune::note(bool loaded) const {
  if (!seen() && !loaded) return std::string();
  const std::string ms = std::to_string(window_ns_ / 1000000);
  if (!seen())
    return "XLA is loaded in the captured process but its autotuner's helper kernels (RedzoneAllocatorKernelImpl, "
           "xla_fp_comparison) were not seen before the capture: if XLA autotunes this kernel later, or its "
           "autotuning launched no helper, the captured dispatch may be an autotuning candidate run. Check the "
           "kernel's launches in launches.json and pick a later --dispatch if in doubt";
  if (!window_ns_)
    return "XLA's autotuner ran in the captured process (" + std::to_string(helpers()) +
           " helper kernel launches) and KERNCAP_XLA_AUTOTUNE_MS=0 turned off skipping its candidate runs: "
           "the dispatch count includes them";
  return "XLA's autotuner ran in the captured process (" + std::to_string(helpers()) +
         " launches of its helper kernels); " + std::to_string(skipped()) +
         " launch(es) of the target within " + ms +
         " ms of a helper launch were taken as autotuning candidate runs and not counted as dispatches. "
         "kerncap judges this by time (XLA has no hook): a real launch right after autotuning may have been "
         "skipped too, a candidate running longer than the window counted (KERNCAP_XLA_AUTOTUNE_MS sets it)";
}

namespace {
int find_xla(struct dl_phdr_info* info, size_t, void* data) {
  const char* n = info->dlpi_name;
  // jaxlib's xla_extension / _jax, the PJRT plugin xla_cuda_plugin.so, TensorFlow.
  if (n && (std::strstr(n, "xla_") || std::strstr(n, "libxla") || std::strstr(n, "jaxlib") ||
            std::strstr(n, "jax_cuda") || std::strstr(n, "libtensorflow"))) {
    *static_cast<bool*>(data) = true;
    return 1;
  }
  return 0;
}
}  // namespace

bool xla_loaded() {
  bool found = false;
  dl_iterate_phdr(find_xla, &found);
  return found;
}

}  // namespace kc
