#include "launch_buckets.hpp"

#include <algorithm>
#include <cstring>

#include "json_writer.hpp"
#include "xxh64.hpp"

namespace kc {

bool looks_like_device_pointer(uint64_t v) { return v >= (uint64_t(1) << 40) && v < (uint64_t(1) << 48); }

namespace {

void put(std::vector<unsigned char>& key, const void* p, size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  key.insert(key.end(), b, b + n);
}

}  // namespace

uint32_t LaunchBuckets::find_or_add(uint64_t key, Bucket&& proto, bool* is_new, bool count) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it != by_key_.end()) {
    if (count) ++buckets_[it->second].launches;
    if (is_new) *is_new = false;
    return it->second;
  }
  const auto id = uint32_t(buckets_.size());
  proto.id = id;
  proto.launches = count ? 1 : 0;
  buckets_.push_back(std::move(proto));
  by_key_.emplace(key, id);
  if (is_new) *is_new = true;
  return id;
}

uint32_t LaunchBuckets::classify(const FuncInfo& fi, const LaunchDesc& d, bool* is_new, bool count) {
  const std::vector<ParamSlot>* layout = nullptr;
  {
    std::shared_lock<std::shared_mutex> lock(layout_mu_);
    auto it = layouts_.find(&fi);
    if (it != layouts_.end()) layout = &it->second;
  }
  if (!layout) {
    auto slots = param_layout(d.f, fi.is_kernel ? reinterpret_cast<CUkernel>(d.f) : nullptr);
    std::unique_lock<std::shared_mutex> lock(layout_mu_);
    layout = &layouts_.emplace(&fi, std::move(slots)).first->second;  // node-based: stays valid
  }
  thread_local std::vector<unsigned char> bytes, key;
  Bucket b;
  b.kernel = fi.name;
  std::copy(d.grid, d.grid + 3, b.grid);
  std::copy(d.block, d.block + 3, b.block);
  b.smem = d.shared_mem;
  key.clear();
  put(key, fi.name.data(), fi.name.size());
  put(key, d.grid, sizeof d.grid);
  put(key, d.block, sizeof d.block);
  put(key, &d.shared_mem, sizeof d.shared_mem);
  if (!param_bytes(d, *layout, bytes)) {
    b.scalars_known = false;
  } else {
    // The `extra` form without a driver layout: the whole buffer is one argument.
    std::vector<ParamSlot> whole;
    const std::vector<ParamSlot>* slots = layout;
    bool fits = !layout->empty();
    for (const ParamSlot& p : *layout) fits = fits && p.offset + p.size <= bytes.size();
    if (!fits && !bytes.empty()) {
      whole.push_back(ParamSlot{0, 0, bytes.size()});
      slots = &whole;
    }
    for (const ParamSlot& p : *slots) {
      if (p.offset + p.size > bytes.size()) continue;
      unsigned char* v = bytes.data() + p.offset;
      if (p.size == 8) {
        uint64_t x;
        std::memcpy(&x, v, 8);
        if (looks_like_device_pointer(x)) continue;
      } else if (p.size > 8) {
        for (uint64_t at = (8 - p.offset % 8) % 8; at + 8 <= p.size; at += 8) {
          uint64_t x;
          std::memcpy(&x, v + at, 8);
          if (looks_like_device_pointer(x)) std::memset(v + at, 0, 8);
        }
      }
      put(key, &p.index, sizeof p.index);
      put(key, v, p.size);
      ScalarArg s{p.index, uint32_t(p.size), std::string()};
      s.hex = p.size <= 16 ? to_hex(v, p.size) : "xxh64:" + xxh64_hex(xxh64(v, p.size));
      b.scalars.push_back(std::move(s));
    }
  }
  return find_or_add(xxh64(key.data(), key.size()), std::move(b), is_new, count);
}

uint32_t LaunchBuckets::classify_dims(const std::string& kernel, const unsigned grid[3], const unsigned block[3],
                                      unsigned smem) {
  std::vector<unsigned char> key;
  put(key, "dims:", 5);
  put(key, kernel.data(), kernel.size());
  put(key, grid, 3 * sizeof(unsigned));
  put(key, block, 3 * sizeof(unsigned));
  put(key, &smem, sizeof smem);
  Bucket b;
  b.kernel = kernel;
  std::copy(grid, grid + 3, b.grid);
  std::copy(block, block + 3, b.block);
  b.smem = smem;
  b.scalars_known = false;
  return find_or_add(xxh64(key.data(), key.size()), std::move(b), nullptr, true);
}

uint32_t LaunchBuckets::match_dims(const std::vector<uint32_t>& candidates, const unsigned grid[3],
                                   const unsigned block[3], unsigned smem) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (uint32_t id : candidates) {
    if (id >= buckets_.size()) continue;
    const Bucket& b = buckets_[id];
    if (std::equal(grid, grid + 3, b.grid) && std::equal(block, block + 3, b.block) && smem == b.smem) return id;
  }
  return UINT32_MAX;
}

void LaunchBuckets::add_time(uint32_t id, uint64_t ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= buckets_.size()) return;
  Bucket& b = buckets_[id];
  ++b.timed;
  b.total_ns += ns;
  b.min_ns = std::min(b.min_ns, ns);
  b.max_ns = std::max(b.max_ns, ns);
}

void LaunchBuckets::set_first_dispatch(uint32_t id, uint64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < buckets_.size() && buckets_[id].first_dispatch < 0) buckets_[id].first_dispatch = int64_t(index);
}

void LaunchBuckets::mark_captured(uint32_t id, uint64_t dispatch, const std::string& dir) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= buckets_.size()) return;
  buckets_[id].captured_dispatch = int64_t(dispatch);
  buckets_[id].capture_dir = dir;
  buckets_[id].refused.clear();
}

bool LaunchBuckets::mark_refused(uint32_t id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= buckets_.size() || !buckets_[id].capture_dir.empty() || !buckets_[id].refused.empty()) return false;
  buckets_[id].refused = why;
  return true;
}

bool LaunchBuckets::captured(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < buckets_.size() && !buckets_[id].capture_dir.empty();
}

void LaunchBuckets::mark_failed(uint32_t id, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (id >= buckets_.size()) return;
  buckets_[id].refused = why;
  buckets_[id].failed = true;
}

bool LaunchBuckets::failed(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < buckets_.size() && buckets_[id].failed;
}

std::string LaunchBuckets::kernel_of(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return id < buckets_.size() ? buckets_[id].kernel : std::string();
}

size_t LaunchBuckets::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return buckets_.size();
}

std::string LaunchBuckets::to_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  JsonWriter w;
  w.begin_array();
  for (const Bucket& b : buckets_) {
    w.begin_object().field("id", b.id).field("kernel", b.kernel);
    w.key("grid").begin_array().value(b.grid[0]).value(b.grid[1]).value(b.grid[2]).end_array();
    w.key("block").begin_array().value(b.block[0]).value(b.block[1]).value(b.block[2]).end_array();
    w.field("shared_mem_bytes", b.smem).field("scalars_known", b.scalars_known);
    w.key("scalars").begin_array();
    for (const ScalarArg& s : b.scalars)
      w.begin_object().field("index", s.index).field("size", s.size).field("hex", s.hex).end_object();
    w.end_array();
    w.field("launches", b.launches).field("timed", b.timed).field("total_ns", b.total_ns);
    w.field("min_ns", b.timed ? b.min_ns : 0).field("max_ns", b.max_ns);
    w.field("first_dispatch", b.first_dispatch).field("captured_dispatch", b.captured_dispatch);
    w.key("capture_dir");
    if (b.capture_dir.empty()) w.null();
    else w.value(b.capture_dir);
    w.key("refused");
    if (b.refused.empty()) w.null();
    else w.value(b.refused);
    w.field("failed", b.failed);
    w.end_object();
  }
  w.end_array();
  return w.str();
}

}  // namespace kc
