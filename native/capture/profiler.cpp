#include "profiler.hpp"

#include <cupti.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "config.hpp"
#include "json_writer.hpp"
#include "launch_attribution.hpp"

namespace kc {
namespace profiler {
namespace {

constexpr size_t kBufferSize = 8u << 20;  // 8 MB: ~40k kernel records per buffer
constexpr size_t kPoolKeep = 8;           // buffers kept for reuse

struct State {
  std::mutex mu;
  std::vector<uint8_t*> pool;
  // CUPTI hands the same name pointer to every record of a kernel: look it up
  // first, and confirm with strcmp so a reused pointer can never misattribute.
  std::unordered_map<const char*, size_t> by_ptr;
  std::unordered_map<std::string, size_t> by_name;
  std::vector<KernelStats> stats;
  uint64_t dropped = 0;
  bool running = false;
  LaunchAttribution* attribution = nullptr;
};

State& state() {
  static State* s = new State;  // never destroyed: records may arrive while the process exits
  return *s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  State& s = state();
  uint8_t* b = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.pool.empty()) {
      b = s.pool.back();
      s.pool.pop_back();
    }
  }
  if (!b) b = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
  *buffer = b;
  *size = b ? kBufferSize : 0;
  *max_records = 0;
}

KernelStats& stats_for(State& s, const char* name) {
  auto it = s.by_ptr.find(name);
  if (it != s.by_ptr.end() && std::strcmp(s.stats[it->second].name.c_str(), name) == 0) return s.stats[it->second];
  std::string key(name);
  auto jt = s.by_name.find(key);
  size_t idx;
  if (jt == s.by_name.end()) {
    idx = s.stats.size();
    s.stats.emplace_back();
    s.stats.back().name = key;
    s.by_name.emplace(std::move(key), idx);
  } else {
    idx = jt->second;
  }
  s.by_ptr[name] = idx;
  return s.stats[idx];
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    CUpti_Activity* rec = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
      if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && rec->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      const char* name = k->name ? k->name : "<unnamed>";
      if (!std::strcmp(name, "kerncap_chunk_fingerprint")) continue;  // kerncap's own (snapshot.cpp)
      const uint64_t ns = k->end > k->start ? k->end - k->start : 0;
      if (s.attribution) {
        const RecordView r{name,
                           {unsigned(k->gridX), unsigned(k->gridY), unsigned(k->gridZ)},
                           {unsigned(k->blockX), unsigned(k->blockY), unsigned(k->blockZ)},
                           unsigned(k->dynamicSharedMemory),
                           ns};
        if (!s.attribution->on_record(k->correlationId, r)) continue;
      }
      KernelStats& st = stats_for(s, name);
      st.calls += 1;
      st.total_ns += ns;
      st.min_ns = std::min(st.min_ns, ns);
      st.max_ns = std::max(st.max_ns, ns);
      st.grid[0] = k->gridX; st.grid[1] = k->gridY; st.grid[2] = k->gridZ;
      st.block[0] = k->blockX; st.block[1] = k->blockY; st.block[2] = k->blockZ;
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS) s.dropped += dropped;
    if (s.pool.size() < kPoolKeep) {
      s.pool.push_back(buffer);
      buffer = nullptr;
    }
  }
  std::free(buffer);
}

std::string cupti_error(CUptiResult r, const char* call) {
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  return std::string(call) + " failed: " + (msg ? msg : "unknown CUPTI error") + " (" + std::to_string(int(r)) + ")";
}

}  // namespace

std::string start(LaunchAttribution* attribution) {
  {
    std::lock_guard<std::mutex> lock(state().mu);
    state().attribution = attribution;
  }
  CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
  if (r != CUPTI_SUCCESS) return cupti_error(r, "cuptiActivityRegisterCallbacks");
  r = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  if (r != CUPTI_SUCCESS) return cupti_error(r, "cuptiActivityEnable(CONCURRENT_KERNEL)");
  std::lock_guard<std::mutex> lock(state().mu);
  state().running = true;
  return std::string();
}

void flush() {
  if (state().running) cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

void flush_and_stop() {
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.running) return;
    s.running = false;
  }
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
}

std::vector<KernelStats> stats() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().stats;
}

uint64_t dropped_records() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().dropped;
}

std::string to_json(int pid, const std::vector<std::pair<std::string, std::string>>& extra) {
  std::vector<KernelStats> all = stats();
  std::sort(all.begin(), all.end(), [](const KernelStats& a, const KernelStats& b) {
    return a.total_ns != b.total_ns ? a.total_ns > b.total_ns : a.name < b.name;
  });
  JsonWriter w;
  w.begin_object().field("pid", pid).key("kernels").begin_array();
  for (const KernelStats& k : all) {
    w.begin_object()
        .field("name", k.name)
        .field("demangled", demangle(k.name))
        .field("calls", k.calls)
        .field("total_ns", k.total_ns)
        .field("min_ns", k.calls ? k.min_ns : 0)
        .field("max_ns", k.max_ns);
    w.key("grid").begin_array().value(k.grid[0]).value(k.grid[1]).value(k.grid[2]).end_array();
    w.key("block").begin_array().value(k.block[0]).value(k.block[1]).value(k.block[2]).end_array();
    w.end_object();
  }
  w.end_array().field("dropped_records", dropped_records());
  for (const auto& [key, json] : extra) w.key(key).raw(json);
  w.end_object();
  return w.str();
}

}  // namespace profiler
}  // namespace kc
