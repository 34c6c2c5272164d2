#include "module_registry.hpp"

#include <algorithm>
#include <set>

#include "config.hpp"
#include "sha256.hpp"

namespace kc {

namespace {
thread_local ModuleCollector* tl_collector = nullptr;
}

ModuleCollector::ModuleCollector() : prev_(tl_collector) { tl_collector = this; }
ModuleCollector::~ModuleCollector() { tl_collector = prev_; }
bool ModuleCollector::note_loaded(uint32_t module_id) {
  if (!tl_collector) return false;
  tl_collector->ids_.push_back(module_id);
  return true;
}

void ModuleRegistry::on_module_loaded(uint32_t module_id, const void* data, size_t size,
                                      const KernelMatcher& matcher) {
  try {
    Cubin view = Cubin::parse(data, size, /*copy=*/false);
    bool wanted = false;
    for (const std::string& fn : view.function_names()) {
      if (matcher.matches_symbol(fn)) { wanted = true; break; }
    }
    if (!wanted) return;
    auto kept = std::make_shared<KeptCubin>();
    kept->module_id = module_id;
    kept->cubin = Cubin::parse(data, size, /*copy=*/true);
    kept->sha256 = sha256_hex(data, size);
    std::lock_guard<std::mutex> lock(mu_);
    kept_[module_id] = std::move(kept);
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    if (parse_failures_.size() < 8)
      parse_failures_.push_back("cubin of module " + std::to_string(module_id) + " (" + std::to_string(size) +
                                " bytes) could not be read: " + e.what());
  }
}

void ModuleRegistry::on_module_unloading(uint32_t module_id) {
  std::lock_guard<std::mutex> lock(mu_);
  kept_.erase(module_id);
  auto drop = [module_id](auto& m) {
    for (auto it = m.begin(); it != m.end();) {
      auto& v = it->second;
      v.erase(std::remove(v.begin(), v.end(), module_id), v.end());
      it = v.empty() ? m.erase(it) : std::next(it);
    }
  };
  drop(by_module_);
  drop(by_library_);
}

void ModuleRegistry::pair_module(CUmodule mod, const std::vector<uint32_t>& ids) {
  if (!mod || ids.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& v = by_module_[mod];
  for (uint32_t id : ids)
    if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
}

void ModuleRegistry::pair_library(CUlibrary lib, const std::vector<uint32_t>& ids) {
  if (!lib || ids.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto& v = by_library_[lib];
  for (uint32_t id : ids)
    if (std::find(v.begin(), v.end(), id) == v.end()) v.push_back(id);
}

bool ModuleRegistry::any_kept(const std::vector<uint32_t>& ids) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t id : ids)
    if (kept_.count(id)) return true;
  return false;
}

std::vector<uint32_t> ModuleRegistry::ids_for_module(CUmodule mod) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_module_.find(mod);
  return it == by_module_.end() ? std::vector<uint32_t>() : it->second;
}

std::vector<uint32_t> ModuleRegistry::ids_for_library(CUlibrary lib) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_library_.find(lib);
  return it == by_library_.end() ? std::vector<uint32_t>() : it->second;
}

std::vector<std::string> ModuleRegistry::parse_failures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return parse_failures_;
}

namespace {

bool agrees(const KeptCubin& k, const std::string& mangled, const DriverFuncAttrs& attrs) {
  KernelInfo ki = k.cubin.kernel_info(mangled);
  if (attrs.num_regs >= 0 && ki.num_regs >= 0 && ki.num_regs != attrs.num_regs) return false;
  if (attrs.local_size_bytes >= 0 && ki.frame_size >= 0 && ki.frame_size != attrs.local_size_bytes) return false;
  return ki.num_regs >= 0;  // agreement needs at least the register count
}

size_t distinct(const std::vector<std::shared_ptr<const KeptCubin>>& v) {
  std::set<std::string> s;
  for (const auto& k : v) s.insert(k->sha256);
  return s.size();
}

}  // namespace

CubinChoice ModuleRegistry::choose(const std::string& mangled, const std::vector<uint32_t>& handle_ids,
                                   const DriverFuncAttrs& attrs) const {
  CubinChoice c;
  std::vector<std::shared_ptr<const KeptCubin>> holding, via_handle;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [id, k] : kept_) {
      if (!k->cubin.has_function(mangled)) continue;
      holding.push_back(k);
      if (std::find(handle_ids.begin(), handle_ids.end(), id) != handle_ids.end()) via_handle.push_back(k);
    }
  }
  c.candidates = int(distinct(holding));
  if (holding.empty()) return c;

  auto pick_by_attrs = [&](const std::vector<std::shared_ptr<const KeptCubin>>& pool) {
    std::vector<std::shared_ptr<const KeptCubin>> ok;
    for (const auto& k : pool)
      if (agrees(*k, mangled, attrs)) ok.push_back(k);
    return ok;
  };

  if (!via_handle.empty()) {
    c.selection = "handle";
    c.cubin = via_handle.front();
    if (distinct(via_handle) > 1) {  // one handle, several different cubins: let the attributes decide
      auto ok = pick_by_attrs(via_handle);
      if (!ok.empty()) c.cubin = ok.front();
      if (distinct(ok) != 1) {
        c.selection = "ambiguous";
        c.warnings.push_back("the module handle of " + mangled + " maps to " + std::to_string(distinct(via_handle)) +
                             " different cubins and their attributes do not single one out; replay may use the "
                             "wrong binary");
      }
    }
  } else if (distinct(holding) == 1) {
    c.selection = "unique-symbol";
    c.cubin = holding.front();
  } else {
    auto ok = pick_by_attrs(holding);
    if (distinct(ok) == 1) {
      c.selection = "attributes";
      c.cubin = ok.front();
    } else {
      c.selection = "ambiguous";
      c.cubin = ok.empty() ? holding.front() : ok.front();
      c.warnings.push_back("cubin selection ambiguous: " + std::to_string(c.candidates) + " cubins hold " + mangled +
                           ", the launch handle was not paired with any and " +
                           std::to_string(distinct(ok)) +
                           " agree with the driver's attributes; capture with CUDA_MODULE_LOADING=EAGER "
                           "or check the replay against the original output");
    }
  }
  KernelInfo ki = c.cubin->cubin.kernel_info(mangled);
  if (attrs.num_regs >= 0 && ki.num_regs >= 0) c.verified.emplace_back("num_regs", ki.num_regs == attrs.num_regs);
  if (attrs.local_size_bytes >= 0 && ki.frame_size >= 0)
    c.verified.emplace_back("local_size_bytes", ki.frame_size == attrs.local_size_bytes);
  for (const auto& [attr, ok] : c.verified)
    if (!ok)
      c.warnings.push_back("the chosen cubin's " + attr + " for " + mangled +
                           " differs from what the driver reports for the launched function");
  return c;
}

}  // namespace kc
