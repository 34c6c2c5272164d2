// The bookkeeping of a sequence capture (docs/sequences.md), free of driver calls so
// that it is tested on the CPU (native/capture/test/sequence_units_test.cpp):
//
// * SequenceTrigger: when the window opens and closes. nvtx: the KERNCAP_DISPATCH-th
//   time a thread's NVTX path begins to match KERNCAP_NVTX the window is *pending*; it
//   opens at that thread's first GPU work (so the pre-state is taken right before it)
//   and closes when that thread's path stops matching. run: opens at dispatch N of the
//   kernel, closes after KERNCAP_SEQ_COUNT launches or after the first later launch of a
//   kernel matching KERNCAP_SEQ_UNTIL. graph: opens at the cuGraphLaunch running
//   dispatch N, closes at its exit.
// * SequenceLog: the steps recorded inside the window, in the order the owner thread
//   enqueued them (launches, copies, fills, event records and waits, host syncs), with
//   the app's streams and events numbered in order of first use.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "json_writer.hpp"
#include "snapshot.hpp"

namespace kc {

enum class SeqState { Waiting, Pending, Open, Closing, Done, Failed };
const char* seq_state_name(SeqState s);

class SequenceTrigger {
 public:
  // `instance`: which matching NVTX range instance (0-based); `count`/`until`: how a run ends.
  SequenceTrigger(uint64_t instance, uint64_t count, bool has_until)
      : instance_(instance), count_(count), has_until_(has_until) {}

  SeqState state() const { return state_; }
  uint64_t owner() const { return owner_; }  // thread id (caller's numbering); 0: none
  bool owned_by(uint64_t thread) const { return owner_ && owner_ == thread; }
  uint64_t instances_seen() const { return instances_; }
  uint64_t launches() const { return launches_; }

  // nvtx: the calling thread's path began (now) or stopped (!now) matching. Returns true
  // when the window must close now (the owner's range ended while it was open).
  bool on_range(uint64_t thread, bool was, bool now);
  // The owner enqueues GPU work: true when this work opens a pending window (the caller
  // takes the pre-state before it).
  bool on_work(uint64_t thread) const { return state_ == SeqState::Pending && owned_by(thread); }
  // The window is open (pre-state taken) with `thread` as its owner.
  void opened(uint64_t thread);
  // A launch of the owner was recorded (its exit follows). `until_match`: its kernel
  // matches KERNCAP_SEQ_UNTIL. True when the window must close at this launch's exit.
  bool on_launch(bool until_match);
  void closing() { state_ = SeqState::Closing; }
  void done() { state_ = SeqState::Done; }
  void failed() { state_ = SeqState::Failed; }

 private:
  uint64_t instance_, count_;
  bool has_until_;
  SeqState state_ = SeqState::Waiting;
  uint64_t owner_ = 0;
  uint64_t instances_ = 0;
  uint64_t launches_ = 0;
};

struct SeqStream {
  uint64_t handle = 0;
  std::string kind;      // legacy | per-thread | user
  bool blocking = true;  // synchronizes with the legacy default stream (user streams without CU_STREAM_NON_BLOCKING)
};

// A graph launch's edge into a step (docs/sequences.md, "graph_deps"): the earlier step
// it depends on and the edge's data as the driver gave it (CUgraphEdgeData: type 0
// default, 1 programmatic; from_port 0 default, 1 programmatic, 2 launch order).
struct SeqEdge {
  size_t step = 0;
  unsigned type = 0, from_port = 0, to_port = 0;
  bool operator==(const SeqEdge& o) const {
    return step == o.step && type == o.type && from_port == o.from_port && to_port == o.to_port;
  }
};

struct SeqStep {
  std::string op;       // launch | copy | memset | record | wait | sync
  std::string api;      // the driver call
  int stream = -1;      // index into streams (-1: a context-wide sync)
  size_t launch = 0;    // launch: index into the capture's launch records
  // copy: kind d2d | h2d | d2h; h2d carries its host bytes as chunks (`payload`)
  std::string copy_kind;
  uint64_t dst = 0, src = 0, bytes = 0;
  std::vector<ChunkHash> payload;
  // memset: `element` bytes (1, 2, 4) of `value`, `width` elements per row, `height` rows `pitch` bytes apart
  uint32_t value = 0;
  unsigned element = 1;
  uint64_t width = 0, height = 1, pitch = 0;
  int event = -1;       // record / wait / sync on an event
  std::string scope;    // sync: context | stream | event
  // A step of a graph launch (--sequence graph): the steps it depends on in the graph, with
  // the edges' data (empty for a root). Written only when the log holds a graph launch.
  std::vector<SeqEdge> graph_deps;
};

class SequenceLog {
 public:
  // The app's stream, numbered at first use. `handle` as the call passed it; `per_thread`:
  // a _ptsz/_ptds variant (a NULL stream is the per-thread default stream).
  int stream(uint64_t handle, bool per_thread, bool blocking);
  // Whether this stream handle was seen (to query its flags once).
  bool known_stream(uint64_t handle, bool per_thread) const;
  static std::string stream_kind(uint64_t handle, bool per_thread);

  void launch(size_t launch_index, int stream, const char* api);
  void copy(const char* api, const std::string& kind, uint64_t dst, uint64_t src, uint64_t bytes, int stream,
            std::vector<ChunkHash> payload = {});
  void memset(const char* api, uint64_t dst, uint32_t value, unsigned element, uint64_t width, uint64_t height,
              uint64_t pitch, int stream);
  void record(const char* api, uint64_t event, int stream);
  // A wait on an event recorded before the window (already complete: the window began
  // with a drain) is dropped; counted in dropped_waits().
  void wait(const char* api, int stream, uint64_t event);
  void sync_context(const char* api);
  void sync_stream(const char* api, int stream);
  void sync_event(const char* api, uint64_t event);
  // The graph edges into step `step` (a graph launch's node); from then on every step's
  // graph_deps is written.
  void set_graph_deps(size_t step, std::vector<SeqEdge> deps);

  // The first call that makes the sequence unreplayable: "cuMemcpy2DAsync_v2 (step 7)".
  void refuse(const std::string& why);
  const std::string& refusal() const { return refusal_; }
  void note(const std::string& n) { notes_.push_back(n); }

  const std::vector<SeqStep>& steps() const { return steps_; }
  const std::vector<SeqStream>& streams() const { return streams_; }
  size_t events() const { return events_.size(); }
  uint64_t dropped_waits() const { return dropped_waits_; }
  const std::vector<std::string>& notes() const { return notes_; }
  size_t launches() const { return launches_; }

  // "streams", "events" and "steps" of sequence.json (docs/capture-format.md).
  void write_json(JsonWriter& w) const;

 private:
  int event_id(uint64_t handle);
  std::vector<SeqStream> streams_;
  std::map<std::pair<uint64_t, bool>, int> stream_ids_;
  std::map<uint64_t, int> events_;        // handles recorded inside the window -> id
  std::vector<SeqStep> steps_;
  std::string refusal_;
  std::vector<std::string> notes_;
  uint64_t dropped_waits_ = 0;
  size_t launches_ = 0;
  bool graph_deps_ = false;  // some step carries graph edges: write graph_deps for every step
};

}  // namespace kc
