#include "sequence.hpp"

#include <algorithm>
#include <cstring>
#include <map>

namespace kc::replay {

namespace {

// Rethrows a failing driver call of step `label` naming the step (the code stays: the
// server decides from it whether the context is finished).
template <class F>
void on_step(const std::string& label, F&& f) {
  try {
    f();
  } catch (const CudaError& e) {
    throw CudaError(e.code, label + ": " + e.what());
  }
}

}  // namespace

SequenceProgram::SequenceProgram(SeqSpec spec, const std::string& label) : spec_(std::move(spec)), label_(label) {
  if (spec_.mode != "streams" && spec_.mode != "serial" && spec_.mode != "graph")
    throw Error("input", "sequence replay order " + spec_.mode + ": expected streams, serial or graph");
  if (spec_.blocking.size() != spec_.stream_kinds.size())
    throw Error("input", "sequence: " + std::to_string(spec_.blocking.size()) + " blocking flags for " +
                             std::to_string(spec_.stream_kinds.size()) + " streams");
  globals_.assign(spec_.globals, 0);
  for (const SeqModuleSpec& m : spec_.modules) {
    modules_.emplace_back(m.image.data(), m.label);
    std::vector<GlobalRef> refs;
    for (const SeqGlobalSpec& g : m.globals) {
      if (g.index >= spec_.globals)
        throw Error("input", m.label + ": module global " + g.captured + " is number " + std::to_string(g.index) +
                                 " of " + std::to_string(spec_.globals));
      refs.push_back({g.captured, g.name, g.size});
    }
    const std::vector<CUdeviceptr> at = resolve_globals(modules_.back().get(), m.label, refs, notes_);
    for (size_t k = 0; k < at.size(); ++k) globals_[m.globals[k].index] = at[k];
  }
  std::map<std::pair<size_t, std::string>, CUfunction> funcs;
  size_t d2h = 0;
  funcs_.resize(spec_.steps.size(), nullptr);
  configs_.resize(spec_.steps.size());
  payloads_.resize(spec_.steps.size());
  for (size_t i = 0; i < spec_.steps.size(); ++i) {
    SeqStepSpec& st = spec_.steps[i];
    if (st.op != "sync" && (st.stream < 0 || size_t(st.stream) >= spec_.stream_kinds.size()))
      throw Error("input", st.label + ": stream " + std::to_string(st.stream) + " of " +
                               std::to_string(spec_.stream_kinds.size()));
    if ((st.op == "record" || st.op == "wait" || (st.op == "sync" && st.scope == "event")) &&
        (st.event < 0 || st.event >= spec_.events))
      throw Error("input", st.label + ": event " + std::to_string(st.event) + " of " + std::to_string(spec_.events));
    if (st.op == "launch") {
      if (st.module >= modules_.size())
        throw Error("input", st.label + ": module " + std::to_string(st.module) + " of " + std::to_string(modules_.size()));
      const auto key = std::make_pair(st.module, st.launch.kernel_name);
      auto it = funcs.find(key);
      const SeqModuleSpec& m = spec_.modules[st.module];
      if (it == funcs.end()) {
        it = funcs.emplace(key, prepare_function(modules_[st.module].get(), m.image, st.launch, m.label, notes_)).first;
      } else if (st.launch.shared_mem_bytes > 0) {
        prepare_function(modules_[st.module].get(), m.image, st.launch, m.label, notes_);  // its own smem opt-in
      }
      funcs_[i] = it->second;
      configs_[i] = std::make_unique<LaunchConfig>(st.launch);
      for (const std::string& n : configs_[i]->notes()) notes_.push_back(st.label + ": " + n);
    } else if (st.op == "copy" && st.kind == "h2d") {
      if (st.payload.size() != st.bytes)
        throw Error("capture", st.label + ": " + std::to_string(st.payload.size()) + " payload bytes for a copy of " +
                                   std::to_string(st.bytes));
      payloads_[i] = std::make_unique<PinnedBuffer>(st.bytes, st.label + " (its host bytes)");
      if (st.bytes) std::memcpy(payloads_[i]->data(), st.payload.data(), st.bytes);
      st.payload.clear();
      st.payload.shrink_to_fit();
    } else if (st.op == "copy" && st.kind == "d2h") {
      d2h = std::max<size_t>(d2h, st.bytes);
    } else if (st.op == "copy" && st.kind != "d2d") {
      throw Error("input", st.label + ": copy kind " + st.kind);
    } else if (st.op == "memset" && st.element != 1 && st.element != 2 && st.element != 4) {
      throw Error("input", st.label + ": fills of " + std::to_string(st.element) + "-byte values");
    }
  }
  if (d2h) d2h_scratch_ = std::make_unique<PinnedBuffer>(d2h, "the sequence's device-to-host copies");
  if (spec_.mode != "serial")
    for (size_t s = 0; s < spec_.stream_kinds.size(); ++s)
      streams_.push_back(std::make_unique<Stream>("the replay stream of the app's stream " + std::to_string(s)));
  events_.resize(size_t(spec_.events));
  tails_.resize(streams_.size());
  fence_seen_.assign(streams_.size(), true);
}

SequenceProgram::~SequenceProgram() {
  if (graph_) release_quietly([&] { KC_CU(cuGraphExecDestroy)(graph_); });
}

std::map<std::string, long long> SequenceProgram::attributes() const {
  for (size_t i = 0; i < funcs_.size(); ++i)
    if (funcs_[i]) return function_attributes(funcs_[i], label_);
  return {};
}

CUstream SequenceProgram::stream_for(const SeqStepSpec& step, CUstream main) const {
  if (spec_.mode == "serial" || step.stream < 0) return main;
  return streams_[size_t(step.stream)]->get();
}

// The legacy default stream synchronizes with every blocking stream: work on it waits for
// theirs, and theirs after it waits for it (a private replay stream does neither by itself).
void SequenceProgram::before_step(const SeqStepSpec& step, CUstream s, CUstream main) {
  (void)main;
  if (spec_.mode == "serial" || step.stream < 0) return;
  const size_t me = size_t(step.stream);
  if (spec_.stream_kinds[me] == "legacy") {
    for (size_t b = 0; b < streams_.size(); ++b) {
      if (b == me || !spec_.blocking[b] || spec_.stream_kinds[b] == "legacy") continue;
      KC_CHECK(cuEventRecord, (tails_[b].get(), streams_[b]->get()), "the replay's legacy-stream order");
      KC_CHECK(cuStreamWaitEvent, (s, tails_[b].get(), 0), "the replay's legacy-stream order");
    }
  } else if (spec_.blocking[me] && fence_live_ && !fence_seen_[me]) {
    KC_CHECK(cuStreamWaitEvent, (s, legacy_fence_.get(), 0), "the replay's legacy-stream order");
    fence_seen_[me] = true;
  }
}

void SequenceProgram::after_step(const SeqStepSpec& step, CUstream s) {
  if (spec_.mode == "serial" || step.stream < 0) return;
  if (spec_.stream_kinds[size_t(step.stream)] != "legacy") return;
  KC_CHECK(cuEventRecord, (legacy_fence_.get(), s), "the replay's legacy-stream order");
  fence_live_ = true;
  std::fill(fence_seen_.begin(), fence_seen_.end(), false);
}

void SequenceProgram::issue(size_t i, CUstream s, const std::vector<std::pair<CUevent, CUevent>>* marks) {
  const SeqStepSpec& st = spec_.steps[i];
  if (st.op == "launch") {
    if (marks) {
      const auto& [a, b] = marks->at(mark_++);
      KC_CHECK(cuEventRecord, (a, s), "a timing event of " + st.label);
      configs_[i]->launch(funcs_[i], s);
      KC_CHECK(cuEventRecord, (b, s), "a timing event of " + st.label);
    } else {
      configs_[i]->launch(funcs_[i], s);
    }
  } else if (st.op == "copy") {
    if (st.kind == "d2d")
      KC_CHECK(cuMemcpyDtoDAsync, (st.dst, st.src, st.bytes, s), st.label);
    else if (st.kind == "h2d")
      KC_CHECK(cuMemcpyHtoDAsync, (st.dst, payloads_[i]->data(), st.bytes, s), st.label);
    else if (st.bytes)
      KC_CHECK(cuMemcpyDtoHAsync, (d2h_scratch_->data(), st.src, st.bytes, s), st.label);
  } else if (st.op == "memset") {
    const bool flat = st.height <= 1;
    if (st.element == 1) {
      if (flat) KC_CHECK(cuMemsetD8Async, (st.dst, static_cast<unsigned char>(st.value), st.width, s), st.label);
      else KC_CHECK(cuMemsetD2D8Async, (st.dst, st.pitch, static_cast<unsigned char>(st.value), st.width, st.height, s), st.label);
    } else if (st.element == 2) {
      if (flat) KC_CHECK(cuMemsetD16Async, (st.dst, static_cast<unsigned short>(st.value), st.width, s), st.label);
      else KC_CHECK(cuMemsetD2D16Async, (st.dst, st.pitch, static_cast<unsigned short>(st.value), st.width, st.height, s), st.label);
    } else {
      if (flat) KC_CHECK(cuMemsetD32Async, (st.dst, st.value, st.width, s), st.label);
      else KC_CHECK(cuMemsetD2D32Async, (st.dst, st.pitch, st.value, st.width, st.height, s), st.label);
    }
  } else if (st.op == "record") {
    KC_CHECK(cuEventRecord, (events_[size_t(st.event)].get(), s), st.label);
  } else if (st.op == "wait") {
    KC_CHECK(cuStreamWaitEvent, (s, events_[size_t(st.event)].get(), 0), st.label);
  } else if (st.op == "sync" && spec_.mode != "serial") {
    // The host waited: everything enqueued after waits for what it waited for.
    std::vector<CUevent> done;
    if (st.scope == "event") {
      done.push_back(events_[size_t(st.event)].get());
    } else {
      for (size_t b = 0; b < streams_.size(); ++b) {
        if (st.scope == "stream" && b != size_t(st.stream)) continue;
        KC_CHECK(cuEventRecord, (tails_[b].get(), streams_[b]->get()), st.label);
        done.push_back(tails_[b].get());
      }
    }
    for (size_t b = 0; b < streams_.size(); ++b)
      for (CUevent e : done) KC_CHECK(cuStreamWaitEvent, (streams_[b]->get(), e, 0), st.label);
  }
}

void SequenceProgram::enqueue(CUstream main, size_t begin, size_t end,
                              const std::vector<std::pair<CUevent, CUevent>>* marks) {
  end = std::min(end, spec_.steps.size());
  mark_ = 0;
  if (spec_.mode == "graph") {
    if (begin != 0 || end != spec_.steps.size())
      throw Error("input", "a sequence replayed as a CUDA graph runs whole (steps 0-" + std::to_string(spec_.steps.size()) +
                               "); replay it in the streams or serial order to run part of it");
    if (!graph_) build_graph(main);
    KC_CHECK(cuGraphLaunch, (graph_, main), "the CUDA graph of " + label_);
    return;
  }
  if (!streams_.empty()) {
    KC_CHECK(cuEventRecord, (fork_.get(), main), "the sequence's fork");
    for (const auto& s : streams_) KC_CHECK(cuStreamWaitEvent, (s->get(), fork_.get(), 0), "the sequence's fork");
  }
  fence_live_ = false;
  std::fill(fence_seen_.begin(), fence_seen_.end(), true);
  for (size_t i = begin; i < end; ++i) {
    const SeqStepSpec& st = spec_.steps[i];
    const CUstream s = stream_for(st, main);
    on_step(st.label, [&] {
      before_step(st, s, main);
      issue(i, s, marks);
      after_step(st, s);
    });
  }
  for (size_t b = 0; b < streams_.size(); ++b) {
    KC_CHECK(cuEventRecord, (tails_[b].get(), streams_[b]->get()), "the sequence's join");
    KC_CHECK(cuStreamWaitEvent, (main, tails_[b].get(), 0), "the sequence's join");
  }
}

void SequenceProgram::build_graph(CUstream main) {
  // Relaxed: kerncap's own calls on other threads (none here) must not invalidate it.
  KC_CHECK(cuStreamBeginCapture, (main, CU_STREAM_CAPTURE_MODE_RELAXED), "capturing " + label_ + " into a CUDA graph");
  CUgraph g = nullptr;
  std::string failed;
  CUresult code = CUDA_SUCCESS;
  try {
    spec_.mode = "streams";
    if (spec_.graph_edges) capture_graph_edges(main);
    else enqueue(main, 0, spec_.steps.size(), nullptr);
  } catch (const CudaError& e) {
    failed = e.what();
    code = e.code;
  } catch (const std::exception& e) {
    failed = e.what();
    code = CUDA_ERROR_UNKNOWN;
  }
  spec_.mode = "graph";
  const CUresult end = KC_CU(cuStreamEndCapture)(main, &g);
  if (!failed.empty()) {
    if (g) KC_CU(cuGraphDestroy)(g);
    throw CudaError(code, "capturing " + label_ + " into a CUDA graph: " + failed);
  }
  check(end, "cuStreamEndCapture", "the CUDA graph of " + label_);
  const CUresult r = KC_CU(cuGraphInstantiateWithFlags)(&graph_, g, 0);
  KC_CU(cuGraphDestroy)(g);
  check(r, "cuGraphInstantiateWithFlags", "the CUDA graph of " + label_);
}

// The steps of one graph launch (all on one stream) captured with the app graph's edges:
// before each step the capture's dependency set is replaced by the nodes of the steps it
// depended on, with the edges' data; what the set is after the step is the step's node. A
// step that made no node (an empty copy) stands for its own dependencies.
void SequenceProgram::capture_graph_edges(CUstream main) {
  const size_t n = spec_.steps.size();
  std::vector<std::vector<CUgraphNode>> stands(n);
  std::vector<bool> own(n, false);
  for (size_t i = 0; i < n; ++i) {
    const SeqStepSpec& st = spec_.steps[i];
    std::vector<CUgraphNode> deps;
    std::vector<CUgraphEdgeData> data;
    for (const auto& [from, type, from_port, to_port] : st.graph_deps) {
      if (from >= i)
        throw Error("capture", st.label + ": its graph edge comes from step " + std::to_string(from) +
                                   ", which is not an earlier step");
      CUgraphEdgeData d{};
      d.type = static_cast<unsigned char>(type);
      d.from_port = static_cast<unsigned char>(from_port);
      d.to_port = static_cast<unsigned char>(to_port);
      const bool plain = type == CU_GRAPH_DEPENDENCY_TYPE_DEFAULT && !from_port && !to_port;
      const bool programmatic = type == CU_GRAPH_DEPENDENCY_TYPE_PROGRAMMATIC && !to_port &&
                                (from_port == CU_GRAPH_KERNEL_NODE_PORT_PROGRAMMATIC ||
                                 from_port == CU_GRAPH_KERNEL_NODE_PORT_LAUNCH_ORDER);
      if (!plain && !programmatic)
        throw Error("capture", st.label + ": its graph edge from step " + std::to_string(from) + " has type " +
                                   std::to_string(type) + ", ports " + std::to_string(from_port) + "->" +
                                   std::to_string(to_port) + "; kerncap rebuilds default and programmatic edges "
                                   "only (replay it in the streams or serial order)");
      if (!plain && (st.op != "launch" || spec_.steps[from].op != "launch" || !own[from]))
        throw Error("capture", st.label + ": its programmatic graph edge from step " + std::to_string(from) +
                                   " does not join two kernel launches");
      for (CUgraphNode node : stands[from]) {
        deps.push_back(node);
        data.push_back(own[from] ? d : CUgraphEdgeData{});
      }
    }
    on_step(st.label, [&] {
      KC_CHECK(cuStreamUpdateCaptureDependencies,
               (main, deps.data(), data.data(), deps.size(), CU_STREAM_SET_CAPTURE_DEPENDENCIES),
               "the graph edges into " + st.label);
      issue(i, main, nullptr);
      CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
      const CUgraphNode* now = nullptr;
      const CUgraphEdgeData* now_data = nullptr;
      size_t count = 0;
      KC_CHECK(cuStreamGetCaptureInfo, (main, &status, nullptr, nullptr, &now, &now_data, &count),
               "the graph node of " + st.label);
      if (count == 1 && !(deps.size() == 1 && now[0] == deps[0])) {
        stands[i] = {now[0]};
        own[i] = true;
      } else {
        stands[i] = deps;
      }
    });
  }
}

}  // namespace kc::replay
