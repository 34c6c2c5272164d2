#include "launch_attribution.hpp"

#include <algorithm>

#include "json_writer.hpp"

namespace kc {

void LaunchAttribution::tag(uint32_t correlation, LaunchTag t) {
  Shard& s = shards_[correlation % kShards];
  std::lock_guard<std::mutex> lock(s.mu);
  s.tags[correlation] = std::move(t);
}

bool LaunchAttribution::on_record(uint32_t correlation, const RecordView& r) {
  LaunchTag t;
  bool found = false;
  {
    Shard& s = shards_[correlation % kShards];
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.tags.find(correlation);
    if (it != s.tags.end()) {
      found = true;
      if (it->second.graph) {
        t = it->second;  // later records of the same graph launch need it too
      } else {
        t = std::move(it->second);
        s.tags.erase(it);
      }
    }
  }
  if (!found) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    ++untagged_;
    // Launched before kerncap could tag it: outside any selection kerncap saw.
    if (nvtx_ && nvtx_->has_pattern()) return false;
  }
  if (!t.in_range) return false;
  if (buckets_) {
    uint32_t id = t.bucket;
    if (id == UINT32_MAX && !t.candidates.empty()) id = buckets_->match_dims(t.candidates, r.grid, r.block, r.smem);
    if (id == UINT32_MAX && dims_buckets_) id = buckets_->classify_dims(r.name, r.grid, r.block, r.smem);
    if (id != UINT32_MAX) buckets_->add_time(id, r.ns);
  }
  if (by_nvtx_) {
    std::lock_guard<std::mutex> lock(stats_mu_);
    Stat& st = by_path_[{t.path, r.name}];
    ++st.calls;
    st.total_ns += r.ns;
    st.min_ns = std::min(st.min_ns, r.ns);
    st.max_ns = std::max(st.max_ns, r.ns);
  }
  return true;
}

std::string LaunchAttribution::nvtx_json() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  JsonWriter w;
  w.begin_array();
  for (const auto& [key, st] : by_path_) {
    w.begin_object().field("path", nvtx_ ? nvtx_->path_of(key.first) : std::string()).field("kernel", key.second);
    w.field("calls", st.calls).field("total_ns", st.total_ns).field("min_ns", st.calls ? st.min_ns : 0);
    w.field("max_ns", st.max_ns).end_object();
  }
  w.end_array();
  return w.str();
}

uint64_t LaunchAttribution::untagged() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return untagged_;
}

}  // namespace kc
