#include "graph_model.hpp"

#include <algorithm>
#include <functional>
#include <queue>
#include <stdexcept>

#include "config.hpp"
#include "driver.hpp"

namespace kc {

namespace {

std::vector<CUgraphNode> graph_nodes(CUgraph g) {
  size_t n = 0;
  KC_CHECK(cuGraphGetNodes, (g, nullptr, &n), "a CUDA graph's node count");
  std::vector<CUgraphNode> nodes(n);
  if (n) KC_CHECK(cuGraphGetNodes, (g, nodes.data(), &n), "a CUDA graph's nodes");
  nodes.resize(n);
  return nodes;
}

// The function a kernel node launches (a CUkernel handle passed as CUfunction when the
// node names a CUkernel, like the launch callbacks see cudart's launches).
CUfunction kernel_node_function(CUgraphNode node) {
  CUDA_KERNEL_NODE_PARAMS p{};
  KC_CHECK(cuGraphKernelNodeGetParams, (node, &p), "a kernel node's parameters");
  return p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
}

void CUDA_CB neutral_host_fn(void*) {}

// A graph's edges with their data. Edges may carry data (programmatic dependencies, as
// XLA's command buffers make): the driver fails a query without the data array with
// CUDA_ERROR_LOSSY_QUERY, so the data is always asked for (cuGraphGetEdges_v2).
struct Edges {
  std::vector<CUgraphNode> from, to;
  std::vector<CUgraphEdgeData> data;
};
Edges graph_edges(CUgraph g) {
  Edges e;
  size_t n = 0;
  KC_CHECK(cuGraphGetEdges, (g, nullptr, nullptr, nullptr, &n), "a CUDA graph's edge count");
  e.from.resize(n), e.to.resize(n), e.data.resize(n);
  if (n) KC_CHECK(cuGraphGetEdges, (g, e.from.data(), e.to.data(), e.data.data(), &n), "a CUDA graph's edges");
  e.from.resize(n), e.to.resize(n), e.data.resize(n);
  return e;
}

// A node's incoming (`dependents` false) or outgoing edges, with their data (as above).
std::vector<CUgraphNode> node_edges(CUgraphNode node, bool dependents, std::vector<CUgraphEdgeData>& data) {
  size_t n = 0;
  if (dependents) KC_CHECK(cuGraphNodeGetDependentNodes, (node, nullptr, nullptr, &n), "a graph node's dependent count");
  else KC_CHECK(cuGraphNodeGetDependencies, (node, nullptr, nullptr, &n), "a graph node's dependency count");
  std::vector<CUgraphNode> out(n);
  data.assign(n, CUgraphEdgeData{});
  if (n && dependents)
    KC_CHECK(cuGraphNodeGetDependentNodes, (node, out.data(), data.data(), &n), "a graph node's dependents");
  else if (n)
    KC_CHECK(cuGraphNodeGetDependencies, (node, out.data(), data.data(), &n), "a graph node's dependencies");
  out.resize(n), data.resize(n);
  return out;
}

// Removes `node` from `g` while keeping the order it imposed: every dependency of the
// node becomes a dependency of every node that depended on it. The new edges are full
// (default) dependencies whatever the data of the two they replace: a programmatic edge
// through a node that does not run orders no less as a full one (it only runs later).
void bypass_and_destroy(CUgraph g, CUgraphNode node) {
  std::vector<CUgraphEdgeData> in_data, out_data;
  const std::vector<CUgraphNode> deps = node_edges(node, false, in_data);
  const std::vector<CUgraphNode> outs = node_edges(node, true, out_data);
  KC_CHECK(cuGraphDestroyNode, (node), "a graph node outside the replayed part");
  for (CUgraphNode a : deps)
    for (CUgraphNode b : outs) KC_CHECK(cuGraphAddDependencies, (g, &a, &b, nullptr, 1), "a bypass edge");
}

// Ancestors of node `i` within one level (not including i).
std::vector<bool> ancestors(const ModelLevel& L, int i) {
  std::vector<bool> seen(L.nodes.size(), false);
  std::vector<int> stack(L.deps[size_t(i)].begin(), L.deps[size_t(i)].end());
  while (!stack.empty()) {
    int k = stack.back();
    stack.pop_back();
    if (seen[size_t(k)]) continue;
    seen[size_t(k)] = true;
    for (int d : L.deps[size_t(k)]) stack.push_back(d);
  }
  return seen;
}

// The level of a clone that corresponds to `L`: same creation order, same types.
std::vector<CUgraphNode> matching_nodes(const ModelLevel& L, CUgraph clone_level, bool top) {
  std::vector<CUgraphNode> out(L.nodes.size());
  if (top) {
    for (size_t i = 0; i < L.nodes.size(); ++i)
      KC_CHECK(cuGraphNodeFindInClone, (&out[i], L.nodes[i], clone_level), "a node of the model in its copy");
    return out;
  }
  std::vector<CUgraphNode> got = graph_nodes(clone_level);
  if (got.size() != L.nodes.size())
    throw std::runtime_error("a copy of a child graph has " + std::to_string(got.size()) + " nodes, the model " +
                             std::to_string(L.nodes.size()));
  for (size_t i = 0; i < got.size(); ++i) {
    CUgraphNodeType t;
    KC_CHECK(cuGraphNodeGetType, (got[i], &t), "a node of a child graph's copy");
    if (t != L.types[i]) throw std::runtime_error("a copy of a child graph lists its nodes in another order");
  }
  return got;
}

}  // namespace

const char* node_type_name(CUgraphNodeType t) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "kernel";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "memcpy";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "memset";
    case CU_GRAPH_NODE_TYPE_HOST: return "host";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "child graph";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "empty";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "event wait";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "event record";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL: return "external semaphore signal";
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT: return "external semaphore wait";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "memory allocation";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "memory free";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "batch memory operation";
    case CU_GRAPH_NODE_TYPE_CONDITIONAL: return "conditional";
    default: return "unknown";
  }
}

std::string edge_kind(const CUgraphEdgeData& d) {
  if (d.type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && !d.from_port && !d.to_port) return "default";
  if (d.type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && !d.to_port) {
    if (d.from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC) return "programmatic";
    if (d.from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER) return "programmatic (launch order)";
  }
  return "type " + std::to_string(unsigned(d.type)) + ", ports " + std::to_string(unsigned(d.from_port)) + "->" +
         std::to_string(unsigned(d.to_port));
}

std::map<std::string, size_t> edge_kinds(const ExecModel& m) {
  std::map<std::string, size_t> out;
  std::function<void(const ModelLevel&)> walk = [&](const ModelLevel& L) {
    for (const auto& in : L.dep_data)
      for (const CUgraphEdgeData& d : in) out[edge_kind(d)]++;
    for (const auto& [i, child] : L.children) walk(*child);
  };
  if (m.top) walk(*m.top);
  return out;
}

GraphRegistry::~GraphRegistry() = default;

// ---------------------------------------------------------------------------------
// Construction

void GraphRegistry::on_capture_end(CUgraph g) {
  std::lock_guard<std::mutex> lock(mu_);
  captured_graphs_.insert(g);
}

void GraphRegistry::on_conditional_bodies(CUgraphNode node, const CUgraph* bodies, unsigned n) {
  std::lock_guard<std::mutex> lock(mu_);
  for (unsigned i = 0; i < n; ++i) {
    if (!bodies[i]) continue;
    conditional_bodies_.insert(bodies[i]);
    conditional_nodes_[node].push_back(bodies[i]);
  }
}

void GraphRegistry::on_kernel_node_added(CUgraph g, FuncInfo* fi) {
  if (!fi || !fi->matched) return;
  std::lock_guard<std::mutex> lock(mu_);
  graphs_with_target_.insert(g);
  if (conditional_bodies_.count(g)) bodies_with_target_.insert(g);
}

void GraphRegistry::on_captured_graph(CUgraph g, const KernelMatcher* matcher) {
  if (!holds_target(g, matcher, 0)) return;
  std::lock_guard<std::mutex> lock(mu_);
  graphs_with_target_.insert(g);
}

bool GraphRegistry::holds_target(CUgraph g, const KernelMatcher* matcher, int depth) {
  if (depth > 32) return false;
  for (CUgraphNode n : graph_nodes(g)) {
    CUgraphNodeType t;
    KC_CHECK(cuGraphNodeGetType, (n, &t), "a graph node's type");
    if (t == CU_GRAPH_NODE_TYPE_KERNEL) {
      if (funcs_.get(kernel_node_function(n), matcher)->matched) return true;
    } else if (t == CU_GRAPH_NODE_TYPE_GRAPH) {
      CUgraph child = nullptr;
      KC_CHECK(cuGraphChildGraphNodeGetGraph, (n, &child), "a child graph node's graph");
      if (holds_target(child, matcher, depth + 1)) return true;
    }
  }
  return false;
}

std::unique_ptr<ModelLevel> GraphRegistry::build_level(CUgraph g, const KernelMatcher* matcher, bool owns,
                                                       size_t& total, std::string& refused) {
  (void)owns;
  auto L = std::make_unique<ModelLevel>();
  L->graph = g;
  L->nodes = graph_nodes(g);
  const size_t n = L->nodes.size();
  total += n;
  L->types.resize(n);
  L->funcs.assign(n, nullptr);
  L->deps.assign(n, {});
  std::unordered_map<CUgraphNode, int> index;
  for (size_t i = 0; i < n; ++i) index.emplace(L->nodes[i], int(i));
  for (size_t i = 0; i < n; ++i) {
    KC_CHECK(cuGraphNodeGetType, (L->nodes[i], &L->types[i]), "a graph node's type");
    switch (L->types[i]) {
      case CU_GRAPH_NODE_TYPE_KERNEL:
        L->funcs[i] = funcs_.get(kernel_node_function(L->nodes[i]), matcher);
        break;
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        CUgraph child = nullptr;
        KC_CHECK(cuGraphChildGraphNodeGetGraph, (L->nodes[i], &child), "a child graph node's graph");
        L->children[int(i)] = build_level(child, matcher, false, total, refused);
        break;
      }
      default:
        break;
    }
  }
  L->dep_data.assign(n, {});
  const Edges edges = graph_edges(g);
  for (size_t e = 0; e < edges.from.size(); ++e) {
    auto a = index.find(edges.from[e]), b = index.find(edges.to[e]);
    if (a == index.end() || b == index.end()) throw std::runtime_error("a CUDA graph edge names a node outside it");
    L->deps[size_t(b->second)].push_back(a->second);
    L->dep_data[size_t(b->second)].push_back(edges.data[e]);
  }
  // Kahn's algorithm, ties broken by creation order: the same graph always gives the
  // same order, which is what makes "the N-th dispatch" well defined inside a graph.
  std::vector<int> indeg(n, 0);
  std::vector<std::vector<int>> outs(n);
  for (size_t i = 0; i < n; ++i)
    for (int d : L->deps[i]) {
      ++indeg[i];
      outs[size_t(d)].push_back(int(i));
    }
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t i = 0; i < n; ++i)
    if (!indeg[i]) ready.push(int(i));
  while (!ready.empty()) {
    int i = ready.top();
    ready.pop();
    L->order.push_back(i);
    for (int o : outs[size_t(i)])
      if (--indeg[size_t(o)] == 0) ready.push(o);
  }
  if (L->order.size() != n) throw std::runtime_error("a CUDA graph has a cycle");
  return L;
}

void GraphRegistry::rebuild_targets(ExecModel& m) {
  m.targets.clear();
  std::vector<int> path;
  std::function<void(const ModelLevel&, bool)> walk = [&](const ModelLevel& L, bool top) {
    for (int i : L.order) {
      path.push_back(i);
      if (top && m.disabled[size_t(i)]) {
        path.pop_back();
        continue;  // a disabled node does not run (cuGraphNodeSetEnabled)
      }
      if (L.types[size_t(i)] == CU_GRAPH_NODE_TYPE_KERNEL && L.funcs[size_t(i)] && L.funcs[size_t(i)]->matched)
        m.targets.push_back(NodeRef{path, L.funcs[size_t(i)]});
      auto c = L.children.find(i);
      if (c != L.children.end()) walk(*c->second, false);
      path.pop_back();
    }
  };
  if (m.top) walk(*m.top, true);
}

// ---------------------------------------------------------------------------------
// Instantiation and updates

std::string GraphRegistry::on_instantiate(CUgraphExec exec, CUgraph g, uint64_t flags, const KernelMatcher* matcher) {
  std::lock_guard<std::mutex> lock(mu_);
  instantiated_graphs_.insert(g);
  execs_.erase(exec);  // a handle reused after a destroy
  // A target in a conditional body cannot be seen from here (the driver does not list
  // a conditional node's bodies): it was recorded when the kernel entered the body.
  bool in_conditional = false;
  for (CUgraphNode n : graph_nodes(g)) {
    CUgraphNodeType t;
    KC_CHECK(cuGraphNodeGetType, (n, &t), "a graph node's type");
    if (t != CU_GRAPH_NODE_TYPE_CONDITIONAL) continue;
    auto it = conditional_nodes_.find(n);
    if (it == conditional_nodes_.end()) continue;
    for (CUgraph body : it->second) in_conditional |= bodies_with_target_.count(body) > 0;
  }
  const bool visible = holds_target(g, matcher, 0);
  if (!visible && !in_conditional) return std::string();

  auto m = std::make_unique<ExecModel>();
  m->id = next_id_++;
  m->exec = exec;
  KC_CU(cuCtxGetCurrent)(&m->ctx);
  m->instantiate_flags = flags;
  m->built_by = captured_graphs_.count(g) ? "stream capture" : "graph API";
  if (in_conditional)
    m->refused = "the target kernel runs inside the body of a conditional (if/while/switch) node; whether and how "
                 "often a body runs is decided on the GPU, so kerncap cannot count or replay it";
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH)
    m->refused = "the executable graph holding the target was instantiated for device-side launch "
                 "(CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH); launches made by kernels on the GPU are invisible "
                 "to kerncap";
  if (visible) {
    CUgraph clone = nullptr;
    KC_CHECK(cuGraphClone, (&clone, g), "the executable graph's source graph (kerncap's model of it)");
    m->top = build_level(clone, matcher, true, m->total_nodes, m->refused);
    std::vector<CUgraphNode> src = graph_nodes(g);
    for (CUgraphNode s : src) {
      CUgraphNode c = nullptr;
      KC_CHECK(cuGraphNodeFindInClone, (&c, s, clone), "a node of the instantiated graph in kerncap's model");
      auto it = std::find(m->top->nodes.begin(), m->top->nodes.end(), c);
      if (it != m->top->nodes.end()) m->src_index[s] = int(it - m->top->nodes.begin());
    }
    m->disabled.assign(m->top->nodes.size(), false);
    rebuild_targets(*m);
  } else {
    m->disabled.clear();
  }
  std::string refused = m->refused;
  execs_[exec] = std::move(m);
  return refused;
}

void GraphRegistry::on_exec_destroy(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  ExecModel& m = *it->second;
  destroyed_.push_back(Gone{m.id, m.launches, m.targets.size()});
  if (m.top) KC_CU(cuGraphDestroy)(m.top->graph);
  execs_.erase(it);
}

void GraphRegistry::on_exec_update(CUgraphExec exec, CUgraph g, const KernelMatcher* matcher) {
  ExecModel* m = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = execs_.find(exec);
    if (it != execs_.end()) m = it->second.get();
  }
  if (!m) {
    // The update may bring the target into an executable graph that had none.
    if (holds_target(g, matcher, 0)) {
      (void)on_instantiate(exec, g, 0, matcher);
      std::lock_guard<std::mutex> lock(mu_);
      if (ExecModel* n = execs_.count(exec) ? execs_[exec].get() : nullptr) {
        n->built_by += " (brought in by cuGraphExecUpdate)";
        n->updates = 1;
      }
    }
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  // Nodes are paired by position (the update requires the same topology), so the
  // handles the app used so far stay valid keys, and the new graph's handles join them.
  CUgraph clone = nullptr;
  KC_CHECK(cuGraphClone, (&clone, g), "the graph an executable graph was updated from (kerncap's model of it)");
  size_t total = 0;
  std::string refused;
  std::unique_ptr<ModelLevel> top = build_level(clone, matcher, true, total, refused);
  if (m->top && top->nodes.size() != m->top->nodes.size()) {
    KC_CU(cuGraphDestroy)(clone);
    m->refused = "cuGraphExecUpdate changed the number of nodes; kerncap's model no longer matches it";
    return;
  }
  std::vector<CUgraphNode> src = graph_nodes(g);
  std::unordered_map<CUgraphNode, int> by_pos;
  for (size_t i = 0; i < src.size(); ++i) {
    CUgraphNode c = nullptr;
    KC_CHECK(cuGraphNodeFindInClone, (&c, src[i], clone), "a node of the update's graph in kerncap's model");
    auto it = std::find(top->nodes.begin(), top->nodes.end(), c);
    if (it != top->nodes.end()) by_pos[src[i]] = int(it - top->nodes.begin());
  }
  if (m->top) KC_CU(cuGraphDestroy)(m->top->graph);
  m->top = std::move(top);
  m->total_nodes = total;
  for (auto& [s, idx] : by_pos) m->src_index[s] = idx;
  if (m->disabled.size() != m->top->nodes.size()) m->disabled.assign(m->top->nodes.size(), false);
  ++m->updates;
  rebuild_targets(*m);
}

int GraphRegistry::model_index(ExecModel& m, CUgraphNode node, const char* api) {
  auto it = m.src_index.find(node);
  if (it != m.src_index.end()) return it->second;
  if (!m.targets.empty())
    m.refused = std::string(api) + " named a node kerncap's model of the executable graph does not hold";
  return -1;
}

void GraphRegistry::on_exec_kernel_params(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p,
                                          const KernelMatcher* matcher) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end() || !p) {
    // An exec kerncap does not model: only a problem if the update brings the target in.
    if (p && funcs_.get(p->func ? p->func : reinterpret_cast<CUfunction>(p->kern), matcher)->matched)
      unmodeled_target_ = true;
    return;
  }
  ExecModel& m = *it->second;
  int i = model_index(m, node, "cuGraphExecKernelNodeSetParams");
  if (i < 0 || !m.top) return;
  CUDA_KERNEL_NODE_PARAMS q = *p;
  KC_CHECK(cuGraphKernelNodeSetParams, (m.top->nodes[size_t(i)], &q), "kerncap's model of an updated kernel node");
  m.top->funcs[size_t(i)] = funcs_.get(kernel_node_function(m.top->nodes[size_t(i)]), matcher);
  ++m.updates;
  rebuild_targets(m);
}

void GraphRegistry::on_exec_node_params(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p,
                                        const KernelMatcher* matcher) {
  if (!p) return;
  if (p->type == CU_GRAPH_NODE_TYPE_KERNEL) {
    // The generic struct's kernel member (_v3) has the _v2 layout.
    static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS), "kernel node params layout");
    on_exec_kernel_params(exec, node, reinterpret_cast<const CUDA_KERNEL_NODE_PARAMS*>(&p->kernel), matcher);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  ExecModel& m = *it->second;
  int i = model_index(m, node, "cuGraphExecNodeSetParams");
  if (i < 0 || !m.top) return;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_MEMCPY:
    case CU_GRAPH_NODE_TYPE_MEMSET:
      KC_CHECK(cuGraphNodeSetParams, (m.top->nodes[size_t(i)], p), "kerncap's model of an updated node");
      ++m.updates;
      break;
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;  // never run by kerncap's replicas (docs/graphs.md)
    default:
      if (!m.targets.empty())
        m.refused = std::string("cuGraphExecNodeSetParams changed a ") + node_type_name(p->type) +
                    " node; kerncap does not follow that update";
      break;
  }
}

void GraphRegistry::on_exec_memcpy_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end() || !p) return;
  ExecModel& m = *it->second;
  int i = model_index(m, node, "cuGraphExecMemcpyNodeSetParams");
  if (i < 0 || !m.top) return;
  KC_CHECK(cuGraphMemcpyNodeSetParams, (m.top->nodes[size_t(i)], p), "kerncap's model of an updated memcpy node");
  ++m.updates;
}

void GraphRegistry::on_exec_memset_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end() || !p) return;
  ExecModel& m = *it->second;
  int i = model_index(m, node, "cuGraphExecMemsetNodeSetParams");
  if (i < 0 || !m.top) return;
  KC_CHECK(cuGraphMemsetNodeSetParams, (m.top->nodes[size_t(i)], p), "kerncap's model of an updated memset node");
  ++m.updates;
}

void GraphRegistry::on_exec_unfollowed_update(CUgraphExec exec, const char* api) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  ExecModel& m = *it->second;
  if (!m.targets.empty())
    m.refused = std::string(api) + " changed the executable graph after instantiation; kerncap does not follow "
                "that update, so the state at the target would be guessed";
}

void GraphRegistry::on_node_enabled(CUgraphExec exec, CUgraphNode node, bool enabled, const KernelMatcher* matcher) {
  (void)matcher;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  if (it == execs_.end()) return;
  ExecModel& m = *it->second;
  int i = model_index(m, node, "cuGraphNodeSetEnabled");
  if (i < 0 || size_t(i) >= m.disabled.size()) return;
  m.disabled[size_t(i)] = !enabled;
  ++m.updates;
  rebuild_targets(m);
}

// ---------------------------------------------------------------------------------
// Launches

GraphLaunchView GraphRegistry::on_launch_enter(CUgraphExec exec, CUstream stream, std::string& refusal) {
  std::lock_guard<std::mutex> lock(mu_);
  GraphLaunchView v;
  auto it = execs_.find(exec);
  if (it == execs_.end()) {
    if (unmodeled_target_ && refusal.empty())
      refusal.clear();  // reported once at exit through unreached_summary()
    return v;
  }
  ExecModel& m = *it->second;
  ++m.launches;
  if (m.launching.fetch_add(1, std::memory_order_acq_rel) > 0 && m.refused.empty())
    m.refused = "the executable graph holding the target was launched from two threads at once; which launch "
                "runs first is not defined, so neither is the N-th dispatch";
  if (m.last_stream_set && stream != m.last_stream && m.refused.empty()) {
    CUresult q = KC_CU(cuStreamQuery)(m.last_stream);
    if (q == CUDA_ERROR_NOT_READY)
      m.refused = "the executable graph holding the target was replayed on two streams at once";
  }
  m.last_stream = stream;
  m.last_stream_set = true;
  if (!m.refused.empty()) refusal = m.refused;
  v.model = &m;
  v.count = m.targets.size();
  return v;
}

ExecModel* GraphRegistry::find(CUgraphExec exec) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = execs_.find(exec);
  return it == execs_.end() ? nullptr : it->second.get();
}

std::vector<CUgraphNode> GraphRegistry::conditional_target_nodes(CUgraph g, const KernelMatcher* matcher) {
  std::vector<CUgraph> bodies;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (CUgraphNode n : graph_nodes(g)) {
      auto it = conditional_nodes_.find(n);
      if (it == conditional_nodes_.end()) continue;
      for (CUgraph body : it->second)
        if (bodies_with_target_.count(body)) bodies.push_back(body);
    }
  }
  std::vector<CUgraphNode> out;
  for (CUgraph body : bodies)
    for (CUgraphNode n : graph_nodes(body)) {
      CUgraphNodeType t;
      KC_CHECK(cuGraphNodeGetType, (n, &t), "a node of a conditional body");
      if (t == CU_GRAPH_NODE_TYPE_KERNEL && funcs_.get(kernel_node_function(n), matcher)->matched) out.push_back(n);
    }
  return out;
}

std::string GraphRegistry::unreached_summary() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> parts;
  size_t never_instantiated = 0;
  for (CUgraph g : graphs_with_target_)
    if (!instantiated_graphs_.count(g) && !conditional_bodies_.count(g)) ++never_instantiated;
  if (never_instantiated)
    parts.push_back(std::to_string(never_instantiated) +
                    " CUDA graph(s) holding the target were built but never instantiated");
  for (const auto& [exec, m] : execs_) {
    if (m->targets.empty() && m->refused.empty()) continue;
    if (m->launches == 0)
      parts.push_back("executable graph #" + std::to_string(m->id) + " (" + m->built_by + ", " +
                      std::to_string(m->targets.size()) + " target node(s)) was instantiated but never launched");
    else
      parts.push_back("executable graph #" + std::to_string(m->id) + " ran " + std::to_string(m->launches) +
                      " time(s) with " + std::to_string(m->targets.size()) + " target node(s) per launch");
  }
  for (const Gone& g : destroyed_) {
    if (!g.targets) continue;
    if (g.launches == 0)
      parts.push_back("executable graph #" + std::to_string(g.id) + " (" + std::to_string(g.targets) +
                      " target node(s)) was instantiated but never launched before it was destroyed");
    else
      parts.push_back("executable graph #" + std::to_string(g.id) + " was destroyed after " +
                      std::to_string(g.launches) + " launch(es) (" + std::to_string(g.targets) +
                      " target node(s) per launch)");
  }
  if (unmodeled_target_)
    parts.push_back("an executable graph kerncap did not model was updated to launch the target "
                    "(cuGraphExecKernelNodeSetParams changed its kernel)");
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out;
}

// ---------------------------------------------------------------------------------
// Replicas of one launch

CUgraphNode model_node(const ExecModel& m, const NodeRef& ref) {
  const ModelLevel* L = m.top.get();
  for (size_t d = 0; d + 1 < ref.path.size(); ++d) L = L->children.at(ref.path[d]).get();
  return L->nodes.at(size_t(ref.path.back()));
}

size_t linear_index(const ExecModel& m, const NodeRef& ref) {
  size_t count = 0;
  bool found = false;
  std::vector<int> path;
  std::function<void(const ModelLevel&)> walk = [&](const ModelLevel& L) {
    for (int i : L.order) {
      if (found) return;
      path.push_back(i);
      if (path == ref.path) {
        found = true;
        return;
      }
      ++count;
      auto c = L.children.find(i);
      if (c != L.children.end()) walk(*c->second);
      path.pop_back();
    }
  };
  walk(*m.top);
  return count;
}

namespace {

// Counts what one kept node of the prefix runs (recursing into child graphs) and notes
// the node kinds kerncap does not run or cannot replicate.
void account(const ModelLevel& L, size_t i, PrefixPlan& plan) {
  const CUgraphNodeType t = L.types[i];
  switch (t) {
    case CU_GRAPH_NODE_TYPE_HOST:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      plan.skipped[node_type_name(t)]++;
      break;
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_SIGNAL:
    case CU_GRAPH_NODE_TYPE_EXT_SEMAS_WAIT:
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      plan.refusals.push_back(std::string("a ") + node_type_name(t) + " node runs before the target");
      break;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      auto c = L.children.find(int(i));
      if (c != L.children.end())
        for (size_t k = 0; k < c->second->nodes.size(); ++k) account(*c->second, k, plan);
      break;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
      break;
    default:
      plan.prefix_nodes++;
      break;
  }
}

// Trims one level of a copy of the model, recursing along the target's path.
// prefix=true keeps the target's ancestors (and the child-graph nodes on its path);
// prefix=false keeps only the nodes on the path. Host and event nodes kept in the
// prefix are neutralised: a host callback must run once, in the app's own launch.
void trim_level(const ExecModel& m, const ModelLevel& L, CUgraph copy_level, bool top, const NodeRef& target,
                size_t depth, bool prefix, PrefixPlan* plan, CUevent neutral_event) {
  std::vector<CUgraphNode> copy = matching_nodes(L, copy_level, top);
  const int on_path = target.path[depth];
  const bool last = depth + 1 == target.path.size();
  std::vector<bool> keep(L.nodes.size(), false);
  if (prefix) keep = ancestors(L, on_path);
  // The node on the path: a child graph node holding the target, or the target itself
  // (kept only in the target's own graph).
  keep[size_t(on_path)] = !(prefix && last);
  for (size_t i = 0; i < L.nodes.size(); ++i) {
    if (!keep[i]) {
      KC_CHECK(cuGraphDestroyNode, (copy[i]), "a graph node outside the replayed part");
      continue;
    }
    if (int(i) == on_path) continue;  // trimmed below
    if (top && i < m.disabled.size() && m.disabled[i]) {  // does not run in the app's launch either
      bypass_and_destroy(copy_level, copy[i]);
      continue;
    }
    switch (L.types[i]) {
      case CU_GRAPH_NODE_TYPE_HOST: {
        CUDA_HOST_NODE_PARAMS hp{};
        hp.fn = neutral_host_fn;
        KC_CHECK(cuGraphHostNodeSetParams, (copy[i], &hp), "a host node before the target (neutralised)");
        break;
      }
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
        KC_CHECK(cuGraphEventRecordNodeSetEvent, (copy[i], neutral_event), "an event record node before the target");
        break;
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        KC_CHECK(cuGraphEventWaitNodeSetEvent, (copy[i], neutral_event), "an event wait node before the target");
        break;
      default:
        break;
    }
    if (plan) account(L, i, *plan);
  }
  if (!last) {
    CUgraph child_copy = nullptr;
    KC_CHECK(cuGraphChildGraphNodeGetGraph, (copy[size_t(on_path)], &child_copy), "the child graph holding the target");
    trim_level(m, *L.children.at(on_path), child_copy, false, target, depth + 1, prefix, plan, neutral_event);
  }
}

}  // namespace

CUgraph build_prefix_graph(const ExecModel& m, const NodeRef& target, PrefixPlan& plan, CUevent neutral_event) {
  CUgraph copy = nullptr;
  KC_CHECK(cuGraphClone, (&copy, m.top->graph), "kerncap's model of the executable graph (prefix copy)");
  try {
    trim_level(m, *m.top, copy, true, target, 0, true, &plan, neutral_event);
  } catch (...) {
    KC_CU(cuGraphDestroy)(copy);
    throw;
  }
  return copy;
}

CUgraph build_target_graph(const ExecModel& m, const NodeRef& target) {
  CUgraph copy = nullptr;
  KC_CHECK(cuGraphClone, (&copy, m.top->graph), "kerncap's model of the executable graph (target copy)");
  try {
    trim_level(m, *m.top, copy, true, target, 0, false, nullptr, nullptr);
  } catch (...) {
    KC_CU(cuGraphDestroy)(copy);
    throw;
  }
  return copy;
}

}  // namespace kc
