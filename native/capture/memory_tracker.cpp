#include "memory_tracker.hpp"

#include <algorithm>
#include <cstdio>

namespace kc {

void MemoryTracker::carve(std::map<uint64_t, TrackedRegion>& m, uint64_t base, uint64_t size) {
  const uint64_t end = base + size;
  auto refs = [&](const TrackedRegion& r, int delta) {
    if (!r.physical) return;
    size_t& n = physical_refs_[r.physical];
    n += delta;
    if (n == 0) {  // no mapping left: the handle's value may come back for a new allocation
      physical_refs_.erase(r.physical);
      for (auto h = physical_ids_.begin(); h != physical_ids_.end(); ++h)
        if (h->second == r.physical) { physical_ids_.erase(h); break; }
    }
  };
  auto it = m.upper_bound(base);
  if (it != m.begin()) --it;
  while (it != m.end() && it->second.base < end) {
    TrackedRegion r = it->second;
    if (r.end() <= base) { ++it; continue; }
    it = m.erase(it);
    if (r.base < base) {  // keep the part below the carved range
      TrackedRegion lo = r;
      lo.size = base - r.base;
      m.emplace(lo.base, lo);
      refs(lo, +1);
    }
    if (r.end() > end) {  // and the part above it
      TrackedRegion hi = r;
      hi.base = end;
      hi.size = r.end() - end;
      hi.physical_offset += end - r.base;
      it = m.emplace(hi.base, hi).first;
      refs(hi, +1);
      ++it;
    }
    refs(r, -1);
  }
}

void MemoryTracker::on_alloc(uint64_t base, uint64_t size, const char* api, const char* kind, CUcontext ctx) {
  if (!base || !size) return;
  std::lock_guard<std::mutex> lock(mu_);
  // The driver just handed out this range: anything we still list there is stale.
  carve(allocs_, base, size);
  TrackedRegion r;
  r.base = base; r.size = size; r.api = api; r.kind = kind; r.ctx = ctx;
  allocs_[base] = r;
}

void MemoryTracker::on_free(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  allocs_.erase(base);
}

void MemoryTracker::on_reserve(uint64_t base, uint64_t size) {
  if (!base || !size) return;
  std::lock_guard<std::mutex> lock(mu_);
  reservations_[base] = size;
}

void MemoryTracker::on_address_free(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = reservations_.find(base);
  if (it == reservations_.end()) return;
  carve(mapped_, base, it->second);
  reservations_.erase(it);
}

void MemoryTracker::on_map(uint64_t base, uint64_t size, uint64_t offset, uint64_t handle) {
  if (!base || !size) return;
  std::lock_guard<std::mutex> lock(mu_);
  carve(mapped_, base, size);
  TrackedRegion r;
  r.base = base; r.size = size; r.api = "cuMemMap"; r.kind = "vmm";
  if (handle) {
    auto id = physical_ids_.find(handle);
    if (id == physical_ids_.end()) id = physical_ids_.emplace(handle, next_physical_++).first;
    r.physical = id->second;
    r.physical_offset = offset;
    ++physical_refs_[r.physical];
  }
  auto it = reservations_.upper_bound(base);
  if (it != reservations_.begin()) {
    --it;
    if (base >= it->first && base + size <= it->first + it->second) {
      r.reserve_base = it->first;
      r.reserve_size = it->second;
    }
  }
  mapped_[base] = r;
}

void MemoryTracker::on_unmap(uint64_t base, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  carve(mapped_, base, size);
}

void MemoryTracker::on_host_alloc(uint64_t base, uint64_t size, const char* api, unsigned flags) {
  if (!base) return;
  std::lock_guard<std::mutex> lock(mu_);
  host_[base] = HostRegion{base, size, api, flags};
}

void MemoryTracker::on_host_free(uint64_t base) {
  std::lock_guard<std::mutex> lock(mu_);
  host_.erase(base);
}

void MemoryTracker::drop_context(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = allocs_.begin(); it != allocs_.end();) it = it->second.ctx == ctx ? allocs_.erase(it) : std::next(it);
}

std::vector<TrackedRegion> MemoryTracker::regions_for(CUcontext ctx) const {
  std::vector<TrackedRegion> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [b, r] : allocs_)
    if (!ctx || !r.ctx || r.ctx == ctx) out.push_back(r);
  auto aliased = [&](const TrackedRegion& r) {
    auto n = physical_refs_.find(r.physical);
    return r.physical && n != physical_refs_.end() && n->second > 1;
  };
  bool last_aliased = false;
  for (const auto& [b, m] : mapped_) {
    TrackedRegion r = m;
    const bool alias = aliased(r);
    if (!alias) r.physical = r.physical_offset = 0;
    if (!alias && !last_aliased && !out.empty() && out.back().kind == r.kind && out.back().end() == r.base &&
        out.back().reserve_base == r.reserve_base && r.reserve_base != 0) {
      out.back().size += r.size;  // PyTorch expandable segments map page by page
    } else {
      out.push_back(r);  // a mapping of an aliased allocation stays a region of its own
    }
    last_aliased = alias;
  }
  std::sort(out.begin(), out.end(), [](const TrackedRegion& a, const TrackedRegion& b) { return a.base < b.base; });
  // Allocations and mappings come from disjoint address ranges; should a stale entry
  // ever overlap a newer one, keep regions disjoint by trimming the earlier one.
  std::vector<TrackedRegion> disjoint;
  for (const TrackedRegion& r : out) {
    if (!disjoint.empty() && disjoint.back().end() > r.base) {
      disjoint.back().size = r.base - disjoint.back().base;
      if (disjoint.back().size == 0) disjoint.pop_back();
    }
    disjoint.push_back(r);
  }
  return disjoint;
}

std::vector<HostRegion> MemoryTracker::host_regions() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HostRegion> out;
  for (const auto& [b, h] : host_) out.push_back(h);
  return out;
}

std::vector<std::string> alias_warnings(const std::vector<TrackedRegion>& regions) {
  std::map<uint64_t, std::vector<size_t>> by_physical;
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].physical) by_physical[regions[i].physical].push_back(i);
  std::vector<std::string> out;
  for (const auto& [phys, ids] : by_physical) {
    if (ids.size() < 2) continue;
    const TrackedRegion& first = regions[ids.front()];
    bool same = true;
    for (size_t i : ids)
      same = same && regions[i].physical_offset == first.physical_offset && regions[i].size == first.size;
    if (same) continue;
    std::string list;
    for (size_t i : ids) {
      const TrackedRegion& r = regions[i];
      char buf[160];
      std::snprintf(buf, sizeof buf, "%sregion %zu (0x%llx, %llu bytes at offset %llu)", list.empty() ? "" : ", ", i,
                    static_cast<unsigned long long>(r.base), static_cast<unsigned long long>(r.size),
                    static_cast<unsigned long long>(r.physical_offset));
      list += buf;
    }
    out.push_back("physical allocation " + std::to_string(phys) + " is mapped at " + std::to_string(ids.size()) +
                  " places that cover different parts of it: " + list +
                  "; the replay cannot map one allocation there and gives each region its own memory, so a "
                  "kernel writing through one address and reading through another will not validate");
  }
  return out;
}

}  // namespace kc
