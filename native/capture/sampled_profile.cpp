#include "sampled_profile.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "config.hpp"
#include "driver.hpp"
#include "json_writer.hpp"

namespace kc {

ProfGraph* SampledProfile::graph(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it != execs_.end()) return it->second;
  auto* g = new ProfGraph;
  g->id = graphs_.size() + 1;
  g->name = "CUDA graph #" + std::to_string(g->id);
  graphs_.push_back(g);
  execs_.emplace(exec, g);
  return g;
}

void SampledProfile::instantiated(CUgraphExec exec, CUgraph graph, FuncCache& funcs) {
  // The graph's top-level kernel nodes, named by their kernels (child graphs counted).
  size_t n = 0;
  std::vector<CUgraphNode> nodes;
  std::map<std::string, size_t> kernels;
  size_t children = 0, others = 0;
  if (KC_CU(cuGraphGetNodes)(graph, nullptr, &n) == CUDA_SUCCESS && n) {
    nodes.resize(n);
    if (KC_CU(cuGraphGetNodes)(graph, nodes.data(), &n) != CUDA_SUCCESS) nodes.clear();
    nodes.resize(std::min(nodes.size(), n));
  }
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (KC_CU(cuGraphNodeGetType)(node, &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      ++children;
      continue;
    }
    if (type != CU_GRAPH_NODE_TYPE_KERNEL) {
      ++others;
      continue;
    }
    CUDA_KERNEL_NODE_PARAMS p{};
    if (KC_CU(cuGraphKernelNodeGetParams)(node, &p) != CUDA_SUCCESS) continue;
    CUfunction f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
    if (f) ++kernels[funcs.get(f, nullptr)->demangled];
  }
  std::vector<std::pair<size_t, std::string>> by_count;
  size_t total = 0;
  for (const auto& [name, count] : kernels) {
    by_count.emplace_back(count, name);
    total += count;
  }
  std::sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::lock_guard<std::mutex> lock(mu_);
  auto* g = new ProfGraph;  // a reused exec handle is another graph
  g->id = graphs_.size() + 1;
  std::string name = "CUDA graph #" + std::to_string(g->id) + ": " + std::to_string(total) + " kernel node(s)";
  if (!by_count.empty()) {
    name += " (";
    for (size_t i = 0; i < by_count.size() && i < 3; ++i)
      name += (i ? ", " : "") + by_count[i].second + (by_count[i].first > 1 ? " x" + std::to_string(by_count[i].first) : "");
    name += by_count.size() > 3 ? ", ...)" : ")";
  }
  if (children) name += ", " + std::to_string(children) + " child graph(s)";
  if (others) name += ", " + std::to_string(others) + " other node(s)";
  g->name = name;
  graphs_.push_back(g);
  execs_[exec] = g;
  epoch_.fetch_add(1, std::memory_order_acq_rel);
}

namespace {

struct Row {
  std::string name, demangled;
  uint64_t calls = 0;
  SampleStats stats;
  bool graph = false;
};

uint64_t count_of(const void* key, uint64_t shared, const std::unordered_map<const void*, uint64_t>& per_thread) {
  auto it = per_thread.find(key);
  return shared + (it == per_thread.end() ? 0 : it->second);
}

}  // namespace

std::string SampledProfile::to_json(int pid, const FuncCache& funcs,
                                    const std::unordered_map<const void*, uint64_t>& per_thread) {
  const auto stats = sampler.stats();
  std::map<std::string, Row> rows;  // by mangled name: a module reloaded gives the kernel new handles
  for (const FuncInfo* fi : funcs.all()) {
    const uint64_t calls = count_of(fi, fi->launches.load(std::memory_order_relaxed), per_thread);
    if (!calls) continue;
    Row& r = rows[fi->name];
    r.name = fi->name;
    r.demangled = fi->demangled;
    r.calls += calls;
    auto it = stats.find(fi);
    if (it != stats.end()) r.stats.merge(it->second);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const ProfGraph* g : graphs_) {
      const uint64_t calls = count_of(g, g->launches.load(std::memory_order_relaxed), per_thread);
      if (!calls) continue;
      Row& r = rows[g->name];
      r.name = r.demangled = g->name;
      r.graph = true;
      r.calls += calls;
      auto it = stats.find(g);
      if (it != stats.end()) r.stats.merge(it->second);
    }
  }
  std::vector<const Row*> order;
  for (const auto& [name, r] : rows) order.push_back(&r);
  std::sort(order.begin(), order.end(), [](const Row* a, const Row* b) {
    const double ta = a->stats.total(a->calls), tb = b->stats.total(b->calls);
    return ta != tb ? ta > tb : a->name < b->name;
  });
  JsonWriter w;
  w.begin_object().field("pid", pid).field("timing", "sampled").key("kernels").begin_array();
  for (const Row* r : order) {
    const SampleStats& s = r->stats;
    w.begin_object().field("name", r->name).field("demangled", r->graph ? r->name : r->demangled);
    w.field("calls", r->calls).field("total_ns", uint64_t(std::llround(s.total(r->calls))));
    w.field("min_ns", s.timed ? s.min_ns : 0).field("max_ns", s.max_ns);
    w.key("grid").begin_array().value(s.grid[0]).value(s.grid[1]).value(s.grid[2]).end_array();
    w.key("block").begin_array().value(s.block[0]).value(s.block[1]).value(s.block[2]).end_array();
    // timed: the samples the total comes from; preempted: those left out (sample_stats.hpp)
    const SampleStats::Kept kept = s.kept();
    w.field("timed", kept.timed).field("preempted", kept.preempted);
    w.field("total_var_ns2", s.total_variance(r->calls));
    if (r->graph) w.field("graph", true);
    w.end_object();
  }
  w.end_array().field("dropped_records", uint64_t(0)).key("sampling").raw(sampler.summary_json()).end_object();
  return w.str();
}

}  // namespace kc
