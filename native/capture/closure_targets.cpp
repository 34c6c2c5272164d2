#include "closure_targets.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kc {

namespace {

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string size_text(uint64_t n) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 || v == double(uint64_t(v)) ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace

std::string HostMapping::describe() const {
  return "[" + hex(lo) + ", +" + size_text(hi - lo) + ") " + perms + " " + (path.empty() ? "[anonymous]" : path);
}

HostMappings HostMappings::parse(const std::string& text) {
  HostMappings out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    unsigned long long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%llx-%llx", &lo, &hi) != 2 || hi <= lo) continue;
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    fields >> range >> perms >> offset >> dev >> inode;
    std::getline(fields >> std::ws, path);
    out.maps_.push_back(HostMapping{lo, hi, perms, path});
  }
  std::sort(out.maps_.begin(), out.maps_.end(), [](const HostMapping& a, const HostMapping& b) { return a.lo < b.lo; });
  return out;
}

HostMappings HostMappings::of_this_process() {
  std::ifstream f("/proc/self/maps");
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str());
}

const HostMapping* HostMappings::find(uint64_t address) const {
  auto it = std::upper_bound(maps_.begin(), maps_.end(), address,
                             [](uint64_t a, const HostMapping& m) { return a < m.lo; });
  if (it == maps_.begin()) return nullptr;
  --it;
  return address < it->hi ? &*it : nullptr;
}

void ClosureTargets::add(TargetHit::Kind kind, int index, uint64_t base, uint64_t size) {
  if (size == 0) return;
  std::vector<Range>& list = ranges_[kind];
  auto at = std::upper_bound(list.begin(), list.end(), base, [](uint64_t b, const Range& r) { return b < r.base; });
  list.insert(at, Range{base, size, index});
}

TargetHit ClosureTargets::find(uint64_t v) const {
  // Ranges of one kind are disjoint: the last one starting at or below v is the only
  // candidate of that kind. Kinds are asked in TargetHit order (regions first).
  for (int k = TargetHit::kRegion; k <= TargetHit::kHost; ++k) {
    const std::vector<Range>& list = ranges_[k];
    auto it = std::upper_bound(list.begin(), list.end(), v, [](uint64_t b, const Range& r) { return b < r.base; });
    if (it == list.begin()) continue;
    --it;
    if (v - it->base < it->size) return TargetHit{TargetHit::Kind(k), it->index, v - it->base};
  }
  for (const Handle& h : handles_)
    if (h.value == v) return TargetHit{TargetHit::kHandle, h.index, 0};
  return TargetHit{};
}

std::string ClosureTargets::unresolved_reason(uint64_t v, bool in_struct, const HostMappings& maps) const {
  if (!looks_like_address(v) || find(v)) return std::string();
  const HostMapping* m = maps.find(v);
  if (!m) return std::string();  // no mapping at all: not an address of this process
  if (m->accessible())
    return "host memory kerncap does not capture (" + m->describe() +
           "): pageable memory the GPU reaches through HMM/ATS, or pinned memory allocated before kerncap "
           "was loaded";
  if (in_struct && v % 256) return std::string();
  return "a device address in no allocation kerncap tracked (inside the driver's reservation " + m->describe() +
         "): memory of another context or process (IPC), or allocated before kerncap was loaded";
}

}  // namespace kc
