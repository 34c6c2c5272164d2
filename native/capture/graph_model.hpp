// kerncap's model of the executable CUDA graphs that hold the target kernel.
//
// Kernels launched by cuGraphLaunch never pass through the launch callbacks, and the
// driver cannot be asked what an executable graph (CUgraphExec) holds or which
// parameters its nodes carry after an update. So, at instantiation, every graph that
// holds a matching kernel node (at any depth of child graphs) is cloned: the clone is
// the *model* of that executable graph. Every later update of the executable graph
// (per-node parameter setters, cuGraphExecUpdate, node enable/disable) is mirrored
// onto the model, so at any launch the model carries the parameters in force.
//
// The model gives: which matching kernel nodes one launch runs, in a fixed
// topological order (how dispatches are counted), and the graphs that reproduce the
// state at the target node: the target's ancestors (the prefix) and the target alone
// (docs/graphs.md). All methods make driver calls: call them with kerncap's reentrancy
// guard set. Thread-safe: one mutex, held only by graph calls (never by plain launches).
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "func_cache.hpp"

namespace kc {

class KernelMatcher;

// One level of a model: the top graph or the embedded graph of a child-graph node.
struct ModelLevel {
  CUgraph graph = nullptr;                  // owned by the model (top) or by its child node
  std::vector<CUgraphNode> nodes;           // cuGraphGetNodes order (creation order)
  std::vector<CUgraphNodeType> types;
  std::vector<FuncInfo*> funcs;             // kernel nodes: the launched function, else null
  std::vector<std::vector<int>> deps;       // deps[i]: indices node i depends on
  std::vector<std::vector<CUgraphEdgeData>> dep_data;  // dep_data[i][k]: the data of edge deps[i][k] -> i
  std::vector<int> order;                   // a topological order (ties: creation order)
  std::map<int, std::unique_ptr<ModelLevel>> children;  // child-graph node index -> its level
};

// A kernel node to count: its path of node indices from the top level down.
struct NodeRef {
  std::vector<int> path;
  FuncInfo* func = nullptr;
};

struct ExecModel {
  uint64_t id = 0;                 // 1, 2, ... in instantiation order (the manifest's exec id)
  CUgraphExec exec = nullptr;
  CUcontext ctx = nullptr;
  std::unique_ptr<ModelLevel> top; // the clone
  // Top-level nodes of the graph(s) the app instantiated or updated from, mapped to
  // model indices: the exec's own setters name nodes by these handles.
  std::unordered_map<CUgraphNode, int> src_index;
  std::vector<bool> disabled;      // top level, by model index (cuGraphNodeSetEnabled)
  std::vector<NodeRef> targets;    // enabled matching kernel nodes in the model's linear order
  size_t total_nodes = 0;          // all levels
  std::string built_by;            // "stream capture" | "graph API"
  uint64_t instantiate_flags = 0;
  uint64_t launches = 0;           // cuGraphLaunch calls seen (counted or not)
  uint64_t updates = 0;            // mirrored updates since instantiation
  std::string refused;             // non-empty: the target cannot be captured from this exec (why)
  CUstream last_stream = nullptr;
  bool last_stream_set = false;
  std::atomic<int> launching{0};   // threads inside cuGraphLaunch of this exec now
};

// What the launch of one executable graph means for dispatch counting.
struct GraphLaunchView {
  ExecModel* model = nullptr;      // null: the exec holds no matching kernel node
  size_t count = 0;                // enabled matching kernel nodes this launch runs
};

class GraphRegistry {
 public:
  explicit GraphRegistry(FuncCache& funcs) : funcs_(funcs) {}
  ~GraphRegistry();

  // Graph construction (API exits, successful calls only).
  void on_capture_end(CUgraph g);                 // cuStreamEndCapture: built by stream capture
  void on_conditional_bodies(CUgraphNode node, const CUgraph* bodies, unsigned n);
  void on_kernel_node_added(CUgraph g, FuncInfo* fi);  // a matching kernel node entered graph g
  // Entry-point capture sees no node-created events: a stream-captured graph is walked
  // when its capture ends instead.
  void on_captured_graph(CUgraph g, const KernelMatcher* matcher);

  // Instantiation and updates of executable graphs.
  // Returns why the target cannot be captured from this executable graph at all (device
  // launch, target inside a conditional body), or "" (also when it holds no target).
  std::string on_instantiate(CUgraphExec exec, CUgraph g, uint64_t flags, const KernelMatcher* matcher);
  void on_exec_destroy(CUgraphExec exec);
  void on_exec_update(CUgraphExec exec, CUgraph g, const KernelMatcher* matcher);
  void on_exec_kernel_params(CUgraphExec exec, CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p,
                             const KernelMatcher* matcher);
  void on_exec_node_params(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams* p, const KernelMatcher* matcher);
  void on_exec_memcpy_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMCPY3D* p);
  void on_exec_memset_params(CUgraphExec exec, CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p);
  void on_exec_unfollowed_update(CUgraphExec exec, const char* api);  // an update kerncap does not mirror
  void on_node_enabled(CUgraphExec exec, CUgraphNode node, bool enabled, const KernelMatcher* matcher);

  // At cuGraphLaunch's entry (while armed): counts the launch, notes its stream and
  // whether another thread is launching the same exec right now. `refusal` is set when
  // this launch makes the exec's target uncapturable (and the exec holds targets).
  // The caller decrements the model's `launching` at the launch's exit.
  GraphLaunchView on_launch_enter(CUgraphExec exec, CUstream stream, std::string& refusal);

  // For the report when the dispatch was never reached: graphs holding the target
  // that were built but never instantiated, instantiated but never launched, or
  // destroyed. Empty when there is nothing to say.
  std::string unreached_summary() const;

  ExecModel* find(CUgraphExec exec);
  // The matching kernel nodes inside the conditional bodies of graph `g` (set captures
  // name the buckets that ran only there: they cannot be captured).
  std::vector<CUgraphNode> conditional_target_nodes(CUgraph g, const KernelMatcher* matcher);
  std::mutex& mutex() { return mu_; }

 private:
  std::unique_ptr<ModelLevel> build_level(CUgraph g, const KernelMatcher* matcher, bool owns, size_t& total,
                                          std::string& refused);
  void rebuild_targets(ExecModel& m);
  bool holds_target(CUgraph g, const KernelMatcher* matcher, int depth);
  int model_index(ExecModel& m, CUgraphNode node, const char* api);

  FuncCache& funcs_;
  mutable std::mutex mu_;
  uint64_t next_id_ = 1;
  std::unordered_map<CUgraphExec, std::unique_ptr<ExecModel>> execs_;
  std::set<CUgraph> captured_graphs_;             // made by stream capture
  std::set<CUgraph> conditional_bodies_;
  std::map<CUgraphNode, std::vector<CUgraph>> conditional_nodes_;  // node -> its bodies
  std::set<CUgraph> bodies_with_target_;          // conditional bodies holding a matching kernel
  std::set<CUgraph> graphs_with_target_;          // any graph a matching kernel node was added to
  std::set<CUgraph> instantiated_graphs_;
  // Executable graphs with targets that are gone or never launched (for the report).
  struct Gone { uint64_t id; uint64_t launches; size_t targets; };
  std::vector<Gone> destroyed_;
  bool unmodeled_target_ = false;  // an exec without a model was updated to launch the target
};

// The matching kernel nodes of a launch come from the model: build a standalone graph
// holding `keep` nodes of the model (ancestors of the target and/or the target itself,
// by path), with host, event and external-semaphore-free neutral stand-ins where needed.
struct PrefixPlan {
  size_t prefix_nodes = 0;                        // nodes that run before the target
  std::map<std::string, size_t> skipped;          // node type -> count, not run (host callbacks, events)
  std::vector<std::string> refusals;              // node kinds that make the state at the target unknowable
};

// Resolves `ref` in the model's current node handles (the model's kernel node params
// are read from these).
CUgraphNode model_node(const ExecModel& m, const NodeRef& ref);
// Index of `ref` in the linear order over all levels (0-based), for the manifest.
size_t linear_index(const ExecModel& m, const NodeRef& ref);
const char* node_type_name(CUgraphNodeType t);
// An edge's kind for the manifest and messages: "default", "programmatic",
// "programmatic (launch order)", or "type N, ports A->B" for data kerncap does not know.
std::string edge_kind(const CUgraphEdgeData& d);
// Edges of every kind in the model, all levels, by edge_kind (the manifest's launch.graph.edges).
std::map<std::string, size_t> edge_kinds(const ExecModel& m);

// Builds the graph of everything that runs before `target` in one launch of the
// model (its ancestors, at every level), or of the target alone. The caller
// instantiates, launches and destroys it. Throws CudaError/runtime_error naming the node.
CUgraph build_prefix_graph(const ExecModel& m, const NodeRef& target, PrefixPlan& plan, CUevent neutral_event);
CUgraph build_target_graph(const ExecModel& m, const NodeRef& target);

}  // namespace kc
