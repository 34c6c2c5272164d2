// CUDA graphs (docs/graphs.md): the graph models kept from construction,
// instantiation and updates, and a dispatch captured inside a graph launch.
#include "inject_state.hpp"

namespace kc {
namespace inject {

// CUDA graphs (docs/graphs.md)

void refuse_graph_buckets(State& s, ExecModel* m, const std::vector<CUgraphNode>& extra, const std::string& why,
                          bool launched);

// The executable graph, the graph and the flags of a successful cuGraphInstantiate*
// call at its exit; false when the call says it made none.
bool instantiate_args(CUpti_CallbackId cbid, const void* p, CUgraphExec*& exec, CUgraph& g, uint64_t& flags) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate: {
      auto* q = static_cast<const cuGraphInstantiate_params*>(p);
      exec = q->phGraphExec, g = q->hGraph;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2: {
      auto* q = static_cast<const cuGraphInstantiate_v2_params*>(p);
      exec = q->phGraphExec, g = q->hGraph;
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags: {
      auto* q = static_cast<const cuGraphInstantiateWithFlags_params*>(p);
      exec = q->phGraphExec, g = q->hGraph, flags = q->flags;
      break;
    }
    default: {  // cuGraphInstantiateWithParams(_ptsz): same layout
      auto* q = static_cast<const cuGraphInstantiateWithParams_params*>(p);
      exec = q->phGraphExec, g = q->hGraph;
      if (q->instantiateParams) {
        if (q->instantiateParams->result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) return false;
        flags = q->instantiateParams->flags;
      }
      break;
    }
  }
  return exec && *exec && g;
}

// A stream capture ended with a graph: the graph registry models it.
void graph_captured(State& s, CUpti_CallbackId cbid, const void* p, const KernelMatcher* matcher) {
  CUgraph* g = cbid == CUPTI_DRIVER_TRACE_CBID_cuStreamEndCapture
                   ? static_cast<const cuStreamEndCapture_params*>(p)->phGraph
                   : static_cast<const cuStreamEndCapture_ptsz_params*>(p)->phGraph;
  if (g && *g) {
    s.graphs.on_capture_end(*g);
    if (s.entry_points) s.graphs.on_captured_graph(*g, matcher);
  }
}

// An executable graph instantiated: modelled, or refused (the dispatch count would be wrong).
void graph_instantiated(State& s, CUpti_CallbackId cbid, const void* p, const KernelMatcher* matcher) {
  CUgraphExec* exec = nullptr;
  CUgraph g = nullptr;
  uint64_t flags = 0;
  if (!instantiate_args(cbid, p, exec, g, flags)) return;
  const std::string refused = s.graphs.on_instantiate(*exec, g, flags, matcher);
  if (!refused.empty()) {
    // The dispatch count would be wrong from here on: stop, and say why (a set names
    // the buckets that ran only there and goes on with the others).
    ExecModel* m = s.graphs.find(*exec);
    const std::string why = "executable graph #" + std::to_string(m ? m->id : 0) + ": " + refused;
    if (s.cfg.set) refuse_graph_buckets(s, m, s.graphs.conditional_target_nodes(g, matcher), why, false);
    capture_failed(s, "graph_refused", why);
  }
}

// An executable graph updated after instantiation: mirrored onto its model.
void graph_updated(State& s, CUpti_CallbackId cbid, const void* p, const KernelMatcher* matcher) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams_v2: {
      auto* q = static_cast<const cuGraphExecKernelNodeSetParams_v2_params*>(p);
      s.graphs.on_exec_kernel_params(q->hGraphExec, q->hNode, q->nodeParams, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecKernelNodeSetParams: {
      // The v1 struct is the v2 one without its last two fields.
      auto* q = static_cast<const cuGraphExecKernelNodeSetParams_params*>(p);
      if (!q->nodeParams) break;
      CUDA_KERNEL_NODE_PARAMS v2{};
      std::memcpy(&v2, q->nodeParams, sizeof(CUDA_KERNEL_NODE_PARAMS_v1));
      s.graphs.on_exec_kernel_params(q->hGraphExec, q->hNode, &v2, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecNodeSetParams: {
      auto* q = static_cast<const cuGraphExecNodeSetParams_params*>(p);
      s.graphs.on_exec_node_params(q->hGraphExec, q->hNode, q->nodeParams, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemcpyNodeSetParams: {
      auto* q = static_cast<const cuGraphExecMemcpyNodeSetParams_params*>(p);
      s.graphs.on_exec_memcpy_params(q->hGraphExec, q->hNode, q->copyParams);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecMemsetNodeSetParams: {
      auto* q = static_cast<const cuGraphExecMemsetNodeSetParams_params*>(p);
      s.graphs.on_exec_memset_params(q->hGraphExec, q->hNode, q->memsetParams);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecChildGraphNodeSetParams:
      s.graphs.on_exec_unfollowed_update(static_cast<const cuGraphExecChildGraphNodeSetParams_params*>(p)->hGraphExec,
                                         "cuGraphExecChildGraphNodeSetParams");
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecBatchMemOpNodeSetParams:
      s.graphs.on_exec_unfollowed_update(static_cast<const cuGraphExecBatchMemOpNodeSetParams_params*>(p)->hGraphExec,
                                         "cuGraphExecBatchMemOpNodeSetParams");
      break;
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2: {
      auto* q = static_cast<const cuGraphExecUpdate_v2_params*>(p);
      s.graphs.on_exec_update(q->hGraphExec, q->hGraph, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate: {
      auto* q = static_cast<const cuGraphExecUpdate_params*>(p);
      s.graphs.on_exec_update(q->hGraphExec, q->hGraph, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled: {
      auto* q = static_cast<const cuGraphNodeSetEnabled_params*>(p);
      s.graphs.on_node_enabled(q->hGraphExec, q->hNode, q->isEnabled != 0, matcher);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy:
      s.graphs.on_exec_destroy(static_cast<const cuGraphExecDestroy_params*>(p)->hGraphExec);
      break;
    default:
      break;
  }
}

// Nodes added to a graph: conditional bodies, graph memory.
void graph_built(State& s, CUpti_CallbackId cbid, const void* p, CUcontext ctx) {
  switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode:
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode_v2: {
      // Same leading fields in both: the node, the graph, then (v2) edge data.
      CUgraphNodeParams* np;
      CUgraphNode* node;
      if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphAddNode) {
        auto* q = static_cast<const cuGraphAddNode_params*>(p);
        np = q->nodeParams, node = q->phGraphNode;
      } else {
        auto* q = static_cast<const cuGraphAddNode_v2_params*>(p);
        np = q->nodeParams, node = q->phGraphNode;
      }
      if (np && node && np->type == CU_GRAPH_NODE_TYPE_CONDITIONAL && np->conditional.phGraph_out)
        s.graphs.on_conditional_bodies(*node, np->conditional.phGraph_out, np->conditional.size);
      break;
    }
    case CUPTI_DRIVER_TRACE_CBID_cuGraphAddMemAllocNode: {
      // Graph memory lives at a fixed address for the graph's lifetime and is mapped
      // while the graph's pool holds it: a region like any other, checked at capture.
      auto* q = static_cast<const cuGraphAddMemAllocNode_params*>(p);
      if (q->nodeParams && q->nodeParams->dptr)
        s.mem.on_alloc(q->nodeParams->dptr, q->nodeParams->bytesize, "cuGraphAddMemAllocNode", "graph", ctx);
      break;
    }
    default:
      break;
  }
}

// Graph construction, instantiation and updates (API exit, successful calls, while armed).
void track_graph(State& s, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles) {
  const void* p = cb->functionParams;
  const KernelMatcher* matcher = s.matcher.get();
  Guard guard;
  if (roles & kCaptureEnd) return graph_captured(s, cbid, p, matcher);
  if (roles & kGraphInstantiate) return graph_instantiated(s, cbid, p, matcher);
  if (roles & kGraphUpdate) return graph_updated(s, cbid, p, matcher);
  if (roles & kGraphBuild) graph_built(s, cbid, p, cb->context);
}

// The launch as the kernel node in the model describes it (parameters in force).
LaunchDesc node_launch(CUgraphNode node, CUstream stream, bool per_thread, std::vector<CUlaunchAttribute>& attrs) {
  CUDA_KERNEL_NODE_PARAMS p{};
  KC_CHECK(cuGraphKernelNodeGetParams, (node, &p), "the target kernel node in kerncap's model");
  LaunchDesc d;
  d.api = "cuGraphLaunch";
  d.f = p.func ? p.func : reinterpret_cast<CUfunction>(p.kern);
  d.grid[0] = p.gridDimX, d.grid[1] = p.gridDimY, d.grid[2] = p.gridDimZ;
  d.block[0] = p.blockDimX, d.block[1] = p.blockDimY, d.block[2] = p.blockDimZ;
  d.shared_mem = p.sharedMemBytes;
  d.stream = stream;
  d.per_thread_default = per_thread;
  d.kernel_params = p.kernelParams;
  d.extra = p.extra;
  // Node attributes that change how the kernel runs; the rest stay at their defaults.
  const CUkernelNodeAttrID ids[] = {CU_LAUNCH_ATTRIBUTE_COOPERATIVE, CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                    CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
                                    CU_LAUNCH_ATTRIBUTE_PRIORITY, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,
                                    CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION};
  for (CUkernelNodeAttrID id : ids) {
    CUkernelNodeAttrValue v;
    std::memset(&v, 0, sizeof v);
    if (KC_CU(cuGraphKernelNodeGetAttribute)(node, id, &v) != CUDA_SUCCESS) continue;
    static const CUkernelNodeAttrValue zero{};
    if (!std::memcmp(&v, &zero, sizeof v)) continue;
    if (id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION && v.clusterDim.x <= 1 && v.clusterDim.y <= 1 && v.clusterDim.z <= 1)
      continue;
    CUlaunchAttribute a;
    std::memset(&a, 0, sizeof a);
    a.id = id;
    a.value = v;
    attrs.push_back(a);
    if (id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && v.cooperative) d.cooperative = true;
  }
  d.attrs = attrs.empty() ? nullptr : attrs.data();
  d.num_attrs = unsigned(attrs.size());
  return d;
}

// Instantiates `g` (destroyed here), launches it on `stream` and waits. Returns the
// launch's result so a faulting target is reported as the target's failure.
CUresult run_graph_copy(CUgraph g, CUstream stream, const std::string& what) {
  CUgraphExec exec = nullptr;
  CUresult r = KC_CU(cuGraphInstantiateWithFlags)(&exec, g, 0);
  KC_CU(cuGraphDestroy)(g);
  check(r, "cuGraphInstantiateWithFlags", what);
  r = KC_CU(cuGraphLaunch)(exec, stream);
  if (r == CUDA_SUCCESS) r = KC_CU(cuStreamSynchronize)(stream);
  KC_CU(cuGraphExecDestroy)(exec);
  return r;
}

// Where the target node sits in the launched executable graph (the manifest's launch.graph).
GraphOrigin graph_origin(const ExecModel& m, const NodeRef& target) {
  GraphOrigin origin;
  origin.exec_id = m.id;
  origin.exec_launch = m.launches - 1;
  origin.node_index = linear_index(m, target);
  origin.nodes = m.total_nodes;
  origin.targets = m.targets.size();
  for (size_t i = 0; i < m.targets.size(); ++i)
    if (m.targets[i].path == target.path) origin.target_index = i;
  origin.path = target.path;
  origin.built_by = m.built_by;
  origin.updates = m.updates;
  origin.instantiate_flags = m.instantiate_flags;
  origin.edges = edge_kinds(m);
  return origin;
}

// The graph of the nodes before the target; throws when the state at the target cannot
// be reproduced that way.
CUgraph prefix_graph(ExecModel& m, const NodeRef& target, PrefixPlan& plan, CUevent neutral) {
  CUgraph prefix = build_prefix_graph(m, target, plan, neutral);
  if (plan.refusals.empty()) return prefix;
  KC_CU(cuGraphDestroy)(prefix);
  std::string why;
  for (const std::string& r : plan.refusals) why += (why.empty() ? "" : "; ") + r;
  throw std::runtime_error("the state at the target node cannot be reproduced: " + why);
}

// The dispatch is a kernel node of this launch of an executable graph. Everything
// happens at cuGraphLaunch's entry, with every other thread held: kerncap runs a copy
// of the graph's nodes before the target (pre-state), then the target alone
// (post-state), from its model of the graph. Under keep-running the app's memory is
// then put back as it was, and the app's own launch runs the whole graph once.
void start_graph_capture(State& s, ExecModel& m, const NodeRef& target, uint64_t index, CUstream stream,
                         bool per_thread, uint32_t bucket) {
  if (!claim_capture(s)) return;
  if (!hold_other_threads(s, this_thread(), target.func->demangled, index, bucket)) return;
  Guard guard;
  std::vector<CUlaunchAttribute> attrs;
  std::string dir;
  const char* kind = nullptr;  // set when the capture failed
  std::string msg;
  bool prefix_ran = false;
  std::unique_ptr<CaptureSession> session;
  CUstream own = nullptr;
  CUevent neutral = nullptr;
  try {
    LaunchDesc desc = node_launch(model_node(m, target), stream, per_thread, attrs);
    Recovered recovered;
    if (s.entry_points) {
      recovered = recover_cubin(s, desc.f, *target.func);
      if (!recovered.error.empty()) throw std::runtime_error(recovered.error);
    }
    session = std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, desc, *target.func, index,
                                               capture_name(s, index), blob_pool(s));
    describe_launch(s, *session, bucket);
    if (!recovered.warning.empty()) session->add_warning(recovered.warning);
    GraphOrigin origin = graph_origin(m, target);
    KC_CHECK(cuStreamCreate, (&own, CU_STREAM_NON_BLOCKING), "kerncap's stream for the graph's nodes");
    KC_CHECK(cuEventCreate, (&neutral, CU_EVENT_DISABLE_TIMING), "kerncap's stand-in event");
    KC_CHECK(cuCtxSynchronize, (), "the target's context before the graph's nodes run");
    // The app goes on after this capture (keep-running, or a set's next dispatch): keep
    // what its memory was, to put it back after kerncap ran part of the graph itself.
    if (s.cfg.keep_running || s.cfg.set) session->snapshot_baseline();
    PrefixPlan plan;
    CUgraph prefix = prefix_graph(m, target, plan, neutral);
    origin.prefix_nodes = plan.prefix_nodes;
    origin.skipped = plan.skipped;
    session->set_graph_origin(origin);
    prefix_ran = true;
    check(run_graph_copy(prefix, own, "the nodes before the target"), "cuGraphLaunch",
          "a copy of the nodes before " + target.func->demangled + " in its CUDA graph");
    session->before_launch();
    const CUresult r = run_graph_copy(build_target_graph(m, target), own, "the target node alone");
    dir = session->after_launch(r);
  } catch (const std::exception& e) {
    kind = dynamic_cast<const IoError*>(&e) != nullptr ? "disk" : "capture_failed";
    bool restored = false;
    if (session) {
      restored = session->restore_after_failure();
      session->abort();
    }
    msg = std::string("capture of ") + target.func->demangled + " (dispatch " + std::to_string(index) +
          ", a node of CUDA graph #" + std::to_string(m.id) + ") failed: " + e.what();
    if (prefix_ran && !restored) {
      capture_failed(s, kind, msg);
      // kerncap ran part of the graph itself; without the baseline the app's memory
      // would hold those writes twice. Stop it rather than let it compute garbage.
      s.report.add_error("app_stopped", "kerncap stopped the app: it had run nodes of the graph before the "
                                        "failure and could not put the app's memory back");
      session.reset();
      if (own) KC_CU(cuStreamDestroy)(own);
      if (neutral) KC_CU(cuEventDestroy)(neutral);
      s.quiesce.unlock();
      write_proc(s);
      std::fflush(nullptr);
      ::_exit(3);
    }
  }
  session.reset();
  if (own) KC_CU(cuStreamDestroy)(own);
  if (neutral) KC_CU(cuEventDestroy)(neutral);
  s.quiesce.unlock();
  if (kind) capture_attempt_failed(s, kind, msg, index, bucket);
  else capture_over(s, dir, index, bucket);
}

// The buckets of an executable graph's targets that kerncap cannot capture there
// (refused graph, or the target inside a conditional body): named with the reason.
// `launched`: at a launch of the graph (its nodes ran and count), else at instantiation.
void refuse_graph_buckets(State& s, ExecModel* m, const std::vector<CUgraphNode>& extra, const std::string& why,
                          bool launched) {
  if (!s.buckets) return;
  Guard guard;
  bool changed = false;
  std::vector<CUgraphNode> nodes = extra;
  if (m && m->top)
    for (const NodeRef& ref : m->targets) nodes.push_back(model_node(*m, ref));
  for (CUgraphNode n : nodes) {
    try {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(n, nullptr, false, attrs);
      FuncInfo* fi = s.funcs.get(d.f, s.matcher.get());
      if (!fi->matched || !set_kernel_ok(s, *fi)) continue;
      changed |= s.buckets->mark_refused(s.buckets->classify(*fi, d, nullptr, launched), why);
    } catch (const std::exception& e) {
      s.report.add_error("graph_refused", std::string("a refused graph's kernel node could not be read: ") + e.what());
    }
  }
  if (changed) write_buckets(s, false);
}

// A launch of an executable graph holding `count` dispatches of a set's kernel.
void set_graph_launch(State& s, ExecModel& m, uint64_t before, size_t count, const CUpti_CallbackData* cb,
                      CUstream stream, bool per_thread) {
  std::vector<uint32_t> buckets(count, UINT32_MAX);
  try {
    Guard guard;
    for (size_t i = 0; i < count; ++i) {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(model_node(m, m.targets[i]), stream, per_thread, attrs);
      bool is_new = false;
      buckets[i] = s.buckets->classify(*m.targets[i].func, d, &is_new);
      if (is_new) s.buckets->set_first_dispatch(buckets[i], before + i);
    }
  } catch (const std::exception& e) {
    s.report.add_error("capture_failed", "executable graph #" + std::to_string(m.id) +
                                             ": its kernel nodes could not be read: " + e.what());
    return;
  }
  LaunchTag tag;
  tag.graph = true;
  tag.candidates = buckets;
  s.attribution->tag(cb->correlationId, std::move(tag));
  for (size_t i = 0; i < count; ++i)
    if (s.armed.load(std::memory_order_acquire) && set_wants(s, *m.targets[i].func, before + i, buckets[i]))
      start_graph_capture(s, m, m.targets[i], before + i, stream, per_thread, buckets[i]);
}


void graph_launch_enter(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb) {
  auto* p = static_cast<const cuGraphLaunch_params*>(cb->functionParams);  // _ptsz: same layout
  const bool per_thread = cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz;
  t.graph_model = nullptr;
  if (t.seq_owner) {
    Guard guard;
    ExecModel* m = s.graphs.find(p->hGraph);
    abort_sequence(s, t, "capture_failed",
                   "the sequence's thread launched a CUDA graph (" +
                       (m ? "executable graph #" + std::to_string(m->id) : std::string("an executable graph")) +
                       ") inside the window; capture that graph launch on its own with --sequence graph");
  }
  if (!s.armed.load(std::memory_order_acquire) || g_benchmark.load(std::memory_order_acquire) != 0) return;
  LaunchDesc d;
  d.stream = p->hStream;
  d.per_thread_default = per_thread;
  std::string why;
  if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why))
    return;  // becomes a child graph node of the graph being captured: counted when that runs
  std::string refusal;
  GraphLaunchView v;
  {
    Guard guard;
    v = s.graphs.on_launch_enter(p->hGraph, p->hStream, refusal);
  }
  if (!v.model) return;
  t.graph_model = v.model;
  if (!refusal.empty()) {
    const std::string why = "executable graph #" + std::to_string(v.model->id) + ": " + refusal;
    capture_failed(s, "graph_refused", why);
    if (s.cfg.set) refuse_graph_buckets(s, v.model, {}, why, true);  // the set goes on
    else write_proc(s);
    return;
  }
  // NVTX and device selection apply to the graph launch: its nodes run inside the
  // ranges open at cuGraphLaunch, on its context's device.
  if (!v.count || !selected_launch(s, t, cb->context)) return;
  const uint64_t before = s.target_matches.fetch_add(v.count, std::memory_order_acq_rel);
  if (s.seq_trigger) {
    if (s.cfg.seq_mode == SeqMode::Graph && s.cfg.dispatch >= before && s.cfg.dispatch < before + v.count)
      start_sequence_graph(s, t, *v.model, p->hStream, per_thread);
  } else if (s.cfg.set) {
    set_graph_launch(s, *v.model, before, v.count, cb, p->hStream, per_thread);
  } else if (s.cfg.dispatch >= before && s.cfg.dispatch < before + v.count) {
    const NodeRef target = v.model->targets[size_t(s.cfg.dispatch - before)];
    start_graph_capture(s, *v.model, target, s.cfg.dispatch, p->hStream, per_thread, UINT32_MAX);
  }
}

void graph_launch_exit(ThreadState& t) {
  if (!t.graph_model) return;
  t.graph_model->launching.fetch_sub(1, std::memory_order_acq_rel);
  t.graph_model = nullptr;
}

}  // namespace inject
}  // namespace kc
