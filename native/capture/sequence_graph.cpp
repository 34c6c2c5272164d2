#include "sequence_graph.hpp"

#include <algorithm>

#include "driver.hpp"

namespace kc {

namespace {

std::string where(const std::vector<int>& path) {
  std::string s;
  for (int i : path) s += (s.empty() ? "" : ".") + std::to_string(i);
  return "node " + s;
}

void copy_node(SequenceCapture& seq, CUgraphNode node, int stream, const std::string& at) {
  CUDA_MEMCPY3D p{};
  KC_CHECK(cuGraphMemcpyNodeGetParams, (node, &p), "the memcpy " + at + " in kerncap's model");
  const bool linear = p.Height <= 1 && p.Depth <= 1 && p.srcMemoryType != CU_MEMORYTYPE_ARRAY &&
                      p.dstMemoryType != CU_MEMORYTYPE_ARRAY && !p.srcY && !p.srcZ && !p.dstY && !p.dstZ;
  if (!linear)
    throw std::runtime_error("the memcpy " + at + " is a 2-D, 3-D or array copy; kerncap records 1-D copies in a "
                             "sequence");
  auto device = [](CUmemorytype t) { return t == CU_MEMORYTYPE_DEVICE || t == CU_MEMORYTYPE_UNIFIED; };
  const uint64_t n = p.WidthInBytes;
  const uint64_t src = device(p.srcMemoryType) ? uint64_t(p.srcDevice) + p.srcXInBytes
                                               : uint64_t(reinterpret_cast<uintptr_t>(p.srcHost)) + p.srcXInBytes;
  const uint64_t dst = device(p.dstMemoryType) ? uint64_t(p.dstDevice) + p.dstXInBytes
                                               : uint64_t(reinterpret_cast<uintptr_t>(p.dstHost)) + p.dstXInBytes;
  if (device(p.srcMemoryType) && device(p.dstMemoryType))
    seq.log().copy("memcpy node", "d2d", dst, src, n, stream);
  else if (device(p.dstMemoryType))
    seq.add_h2d("memcpy node", dst, reinterpret_cast<const void*>(uintptr_t(src)), n, stream);
  else if (device(p.srcMemoryType))
    seq.log().copy("memcpy node", "d2h", dst, src, n, stream);
  else
    seq.log().note("the memcpy " + at + " copies host to host: not replayed");
}

void memset_node(SequenceCapture& seq, CUgraphNode node, int stream, const std::string& at) {
  CUDA_MEMSET_NODE_PARAMS p{};
  KC_CHECK(cuGraphMemsetNodeGetParams, (node, &p), "the memset " + at + " in kerncap's model");
  if (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4)
    throw std::runtime_error("the memset " + at + " has element size " + std::to_string(p.elementSize));
  seq.log().memset("memset node", uint64_t(p.dst), p.value, p.elementSize, p.width, p.height ? p.height : 1,
                   p.pitch, stream);
}

}  // namespace

namespace {

void add_edge(std::vector<SeqEdge>& in, const SeqEdge& e) {
  if (std::find(in.begin(), in.end(), e) == in.end()) in.push_back(e);
}

// Node i's edges: to the one step of a dependency that made one (with the edge's data),
// else to each step standing for it; a root's are the level's entry edges.
std::vector<SeqEdge> in_edges(const ModelLevel& L, int i, const std::vector<SeqEdge>& entry,
                              const std::vector<bool>& is_step, const std::vector<std::vector<size_t>>& stands) {
  std::vector<SeqEdge> in = L.deps[size_t(i)].empty() ? entry : std::vector<SeqEdge>{};
  for (size_t k = 0; k < L.deps[size_t(i)].size(); ++k) {
    const size_t p = size_t(L.deps[size_t(i)][k]);
    const CUgraphEdgeData& d = L.dep_data[size_t(i)][k];
    if (is_step[p])
      add_edge(in, SeqEdge{stands[p][0], d.type, d.from_port, d.to_port});
    else
      for (size_t st : stands[p]) add_edge(in, SeqEdge{st, 0, 0, 0});
  }
  return in;
}

// The steps standing for a level: those standing for its nodes no node depends on, each
// once; a level without nodes passes its entry steps through.
std::vector<size_t> level_leaves(const std::vector<bool>& has_dependent,
                                 const std::vector<std::vector<size_t>>& stands, const std::vector<SeqEdge>& entry) {
  const size_t n = stands.size();
  std::vector<size_t> leaves;
  for (size_t i = 0; i < n; ++i)
    if (!has_dependent[i])
      for (size_t st : stands[i])
        if (std::find(leaves.begin(), leaves.end(), st) == leaves.end()) leaves.push_back(st);
  if (!n)
    for (const SeqEdge& e : entry) leaves.push_back(e.step);
  return leaves;
}

// One launch's walk: the state shared by its levels (the path names nodes in errors).
struct GraphWalker {
  SequenceCapture& seq;
  const ExecModel& m;
  int stream;
  const std::function<void(CUgraphNode)>& kernel_node;
  GraphWalk out;
  std::vector<int> path;

  std::vector<size_t> walk(const ModelLevel& L, bool top, const std::vector<SeqEdge>& entry);
  bool record(const ModelLevel& L, int i, CUgraphNodeType t, const std::string& at, const std::vector<SeqEdge>& in,
              std::vector<size_t>& stands);
};

// Each node's edges to the steps it depends on (graph_deps). A node that makes no step
// (skipped, disabled, a host-to-host copy) stands for the steps it depends on, so edges
// pass through it as full dependencies; a child graph node's edges go to its roots, and
// the steps of its leaves stand for it. Returns the steps that stand for the level.
std::vector<size_t> GraphWalker::walk(const ModelLevel& L, bool top, const std::vector<SeqEdge>& entry) {
  const size_t n = L.nodes.size();
  std::vector<std::vector<size_t>> stands(n);  // the steps standing for node i
  std::vector<bool> is_step(n, false), has_dependent(n, false);
  for (size_t i = 0; i < n; ++i)
    for (int d : L.deps[i]) has_dependent[size_t(d)] = true;
  for (int i : L.order) {
    std::vector<SeqEdge> in = in_edges(L, i, entry, is_step, stands);
    auto through = [&] {
      for (const SeqEdge& e : in) stands[size_t(i)].push_back(e.step);
    };
    if (top && size_t(i) < m.disabled.size() && m.disabled[size_t(i)]) {
      out.skipped["disabled"]++;
      through();
      continue;
    }
    path.push_back(i);
    ++out.nodes;
    const CUgraphNodeType t = L.types[size_t(i)];
    const std::string at = where(path) + " of executable graph #" + std::to_string(m.id);
    const size_t before = seq.log().steps().size();
    const bool child = record(L, i, t, at, in, stands[size_t(i)]);
    const size_t after = seq.log().steps().size();
    if (after == before + 1) {
      is_step[size_t(i)] = true;
      stands[size_t(i)] = {before};
      seq.log().set_graph_deps(before, in);
    } else if (after != before) {
      throw std::runtime_error("the " + std::string(node_type_name(t)) + " " + at + " made " +
                               std::to_string(after - before) + " steps; kerncap expected one");
    } else if (!child) {
      through();
    }
    path.pop_back();
  }
  return level_leaves(has_dependent, stands, entry);
}

// Node i (of type t, named `at`) by its type: a step, a skip, a child level walked in place
// (then its steps go to `stands` and it returns true) or a refusal.
bool GraphWalker::record(const ModelLevel& L, int i, CUgraphNodeType t, const std::string& at,
                         const std::vector<SeqEdge>& in, std::vector<size_t>& stands) {
  switch (t) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      kernel_node(L.nodes[size_t(i)]);
      return false;
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      copy_node(seq, L.nodes[size_t(i)], stream, at);
      return false;
    case CU_GRAPH_NODE_TYPE_MEMSET:
      memset_node(seq, L.nodes[size_t(i)], stream, at);
      return false;
    case CU_GRAPH_NODE_TYPE_GRAPH: {
      auto c = L.children.find(i);
      if (c == L.children.end()) throw std::runtime_error("the child graph " + at + " is not in kerncap's model");
      stands = walk(*c->second, false, in);
      return true;
    }
    case CU_GRAPH_NODE_TYPE_EMPTY:
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      out.skipped[node_type_name(t)]++;
      return false;
    case CU_GRAPH_NODE_TYPE_HOST:
      throw std::runtime_error("executable graph #" + std::to_string(m.id) + " holds a host node (" + where(path) +
                               "): its callback runs host code kerncap cannot replay");
    default:
      throw std::runtime_error("executable graph #" + std::to_string(m.id) + " holds a " + node_type_name(t) +
                               " node (" + where(path) + "): kerncap cannot replay it as a sequence");
  }
}

}  // namespace

GraphWalk record_graph_launch(SequenceCapture& seq, const ExecModel& m, int stream,
                              const std::function<void(CUgraphNode)>& kernel_node) {
  GraphWalker w{seq, m, stream, kernel_node, {}, {}};
  w.walk(*m.top, true, {});
  return w.out;
}

}  // namespace kc
