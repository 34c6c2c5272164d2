#include "func_cache.hpp"

#include <algorithm>
#include <map>
#include <mutex>

#include "config.hpp"
#include "driver.hpp"
#include "xla_autotune.hpp"

namespace kc {

bool is_nccl_kernel(const std::string& demangled) {
  // Free functions demangle to "ncclDevKernel_...(...)"; templated ones may carry "void ".
  std::string s = demangled.rfind("void ", 0) == 0 ? demangled.substr(5) : demangled;
  return s.rfind("ncclKernel", 0) == 0 || s.rfind("ncclDevKernel", 0) == 0;
}

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
  info->xla_helper = info->resolved && XlaAutotune::is_helper(info->demangled);
  if (info->matched && is_nccl_kernel(info->demangled)) {
    info->matched = false;
    info->refused = true;
  }

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

namespace {
uint64_t launches_of(const FuncInfo& fi, const FuncCache::ExtraCounts* extra) {
  uint64_t n = fi.launches.load(std::memory_order_relaxed);
  if (extra) {
    auto it = extra->find(&fi);
    if (it != extra->end()) n += it->second;
  }
  return n;
}
}  // namespace

std::vector<std::pair<std::string, uint64_t>> FuncCache::launch_counts(size_t limit, const ExtraCounts* extra) const {
  std::map<std::string, uint64_t> merged;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    for (const auto& fi : all_) {
      uint64_t n = launches_of(*fi, extra);
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

std::vector<const FuncInfo*> FuncCache::all() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<const FuncInfo*> out;
  out.reserve(all_.size());
  for (const auto& fi : all_) out.push_back(fi.get());
  return out;
}

std::vector<std::string> FuncCache::refused_names(const ExtraCounts* extra) const {
  std::vector<std::string> out;
  std::shared_lock<std::shared_mutex> lock(mu_);
  for (const auto& fi : all_)
    if (fi->refused && launches_of(*fi, extra) &&
        std::find(out.begin(), out.end(), fi->demangled) == out.end())
      out.push_back(fi->demangled);
  return out;
}

}  // namespace kc
