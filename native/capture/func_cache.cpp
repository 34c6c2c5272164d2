#include "func_cache.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "config.hpp"
#include "driver.hpp"

namespace kc {

FuncInfo* FuncCache::get(CUfunction f, const KernelMatcher* matcher) {
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = live_.find(f);
    if (it != live_.end()) return it->second;
  }
  auto info = std::make_unique<FuncInfo>();
  const char* name = nullptr;
  if (KC_CU(cuFuncGetName)(&name, f) == CUDA_SUCCESS && name) {
    info->name = name;
  } else if (KC_CU(cuKernelGetName)(&name, reinterpret_cast<CUkernel>(f)) == CUDA_SUCCESS && name) {
    info->name = name;
    info->is_kernel = true;
  }
  info->resolved = !info->name.empty();
  if (!info->resolved) info->name = "<unknown kernel>";
  info->demangled = demangle(info->name);
  info->matched = info->resolved && matcher && matcher->matches(info->name, info->demangled);

  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = live_.find(f);
  if (it != live_.end()) return it->second;  // another thread resolved it first
  FuncInfo* raw = info.get();
  all_.push_back(std::move(info));
  live_.emplace(f, raw);
  return raw;
}

void FuncCache::clear() {
  std::unique_lock<std::shared_mutex> lock(mu_);
  live_.clear();
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

std::vector<std::pair<std::string, uint64_t>> FuncCache::launch_counts(size_t limit) const {
  std::map<std::string, uint64_t> merged;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (const auto& fi : all_) {
      uint64_t n = fi->launches.load(std::memory_order_relaxed);
      if (n) merged[fi->demangled] += n;
    }
  }
  std::vector<std::pair<std::string, uint64_t>> out(merged.begin(), merged.end());
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  if (out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace kc
