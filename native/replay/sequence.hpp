// A captured sequence as one replayable program (docs/sequences.md): its modules (the
// captured cubins, or a variant in place of one, or a fused kernel's), its launches with
// their captured configurations and parameter bytes, and the copies, fills, event records
// and waits and host synchronizations between them, in the order the app enqueued them.
//
// Replay orders (`mode`):
//   streams  each step on a private stream standing for the app's stream it ran on; event
//            records and waits replayed on private events; the legacy default stream's
//            implicit synchronization with blocking streams and host synchronizations
//            replayed as waits; forked from and joined back into the session's stream.
//   serial   every step on the session's stream, in the recorded order (a valid order of
//            any race-free app: waits only name earlier records).
//   graph    the streams order captured once into a CUDA graph (stream capture) and
//            launched as one graph: no launch gaps between kernels. A graph launch's
//            steps (`graph_edges`) are captured with the graph's own edges instead: each
//            step's node depends on exactly the steps it depended on in the app's graph,
//            with the edges' data (a programmatic dependency stays programmatic).
// The session treats the program as it treats one kernel: restore, run, compare, time.
#pragma once
#include <cuda.h>

#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "kernel.hpp"
#include "resources.hpp"

namespace kc::replay {

struct SeqGlobalSpec {
  size_t index = 0;      // the global's number among the session's module globals
  std::string name;      // its name in this module's image ("" : the image does not define it)
  std::string captured;  // its captured name
  size_t size = 0;
};

struct SeqModuleSpec {
  std::string image;  // cubin bytes
  std::string label;  // "module 2 (cubins/<sha>.cubin)", a variant's path
  std::vector<SeqGlobalSpec> globals;
};

struct SeqStepSpec {
  std::string op;      // launch | copy | memset | record | wait | sync
  std::string label;   // names the step in errors: "launch 3 (rmsnorm_kernel)"
  int stream = -1;     // the app's stream (index), -1: a context-wide sync
  size_t module = 0;   // launch: index into the modules
  LaunchSpec launch;   // launch
  std::string kind;    // copy: d2d | h2d | d2h
  unsigned long long dst = 0, src = 0, bytes = 0;
  std::string payload;  // h2d: the host bytes
  unsigned value = 0, element = 1;
  unsigned long long width = 0, height = 1, pitch = 0;
  int event = -1;
  std::string scope;   // sync: context | stream | event
  // A graph launch's step: (earlier step, edge type, from_port, to_port) per edge into it
  // (sequence.json "graph_deps"; CUgraphEdgeData's values).
  std::vector<std::tuple<size_t, unsigned, unsigned, unsigned>> graph_deps;
};

struct SeqSpec {
  std::vector<SeqModuleSpec> modules;
  std::vector<SeqStepSpec> steps;
  std::vector<std::string> stream_kinds;  // per app stream: legacy | per-thread | user
  std::vector<bool> blocking;             // per app stream: synchronizes with the legacy stream
  int events = 0;
  size_t globals = 0;                     // module globals of the session (numbered as it numbers them)
  std::string mode = "streams";           // streams | serial | graph
  bool graph_edges = false;               // the steps are one graph launch's, with graph_deps
};

class SequenceProgram {
 public:
  // Loads every module and prepares every launch; throws Error("variant", …) naming the
  // module or launch that does not fit the capture.
  SequenceProgram(SeqSpec spec, const std::string& label);
  ~SequenceProgram();
  SequenceProgram(const SequenceProgram&) = delete;
  SequenceProgram& operator=(const SequenceProgram&) = delete;

  // Enqueues steps [begin, end) after the work already on `main`; `main` waits for all of
  // them. `marks` (not in graph mode): one (start, end) event pair per launch step of the
  // range, in order, recorded around it on its stream. Graph mode enqueues the whole
  // program as one graph launch (begin and end must span it).
  void enqueue(CUstream main, size_t begin, size_t end, const std::vector<std::pair<CUevent, CUevent>>* marks);
  size_t steps() const { return spec_.steps.size(); }
  const std::string& mode() const { return spec_.mode; }
  const std::string& step_label(size_t i) const { return spec_.steps.at(i).label; }
  bool is_launch(size_t i) const { return spec_.steps.at(i).op == "launch"; }
  // The session's module global `index` in this program (0: no module of it defines it).
  CUdeviceptr global_address(size_t index) const { return index < globals_.size() ? globals_[index] : 0; }
  // The first launch's kernel attributes (what the session reports for a program).
  std::map<std::string, long long> attributes() const;
  const std::vector<std::string>& notes() const { return notes_; }

 private:
  void issue(size_t i, CUstream s, const std::vector<std::pair<CUevent, CUevent>>* marks);
  CUstream stream_for(const SeqStepSpec& step, CUstream main) const;
  void before_step(const SeqStepSpec& step, CUstream s, CUstream main);
  void after_step(const SeqStepSpec& step, CUstream s);
  void build_graph(CUstream main);
  void capture_graph_edges(CUstream main);

  SeqSpec spec_;
  std::string label_;
  std::vector<Module> modules_;
  std::vector<CUfunction> funcs_;                      // per step (null for other ops)
  std::vector<std::unique_ptr<LaunchConfig>> configs_;  // per step (null for other ops)
  std::vector<std::unique_ptr<PinnedBuffer>> payloads_; // per step (h2d only)
  std::unique_ptr<PinnedBuffer> d2h_scratch_;
  std::vector<CUdeviceptr> globals_;
  std::vector<std::unique_ptr<Stream>> streams_;        // per app stream (streams and graph modes)
  std::vector<Event> events_;                           // the app's events
  std::vector<Event> tails_;                            // per stream: its latest work, for waits
  Event fork_, legacy_fence_;
  std::vector<bool> fence_seen_;                        // per stream: waited for the latest legacy fence
  bool fence_live_ = false;
  CUgraphExec graph_ = nullptr;
  size_t mark_ = 0;  // the next pair of `marks` in enqueue()
  std::vector<std::string> notes_;
};

}  // namespace kc::replay
