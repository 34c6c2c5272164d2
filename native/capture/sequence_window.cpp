#include "sequence_window.hpp"

#include "xxh64.hpp"

namespace kc {

const char* seq_state_name(SeqState s) {
  switch (s) {
    case SeqState::Waiting: return "waiting";
    case SeqState::Pending: return "pending";
    case SeqState::Open: return "open";
    case SeqState::Closing: return "closing";
    case SeqState::Done: return "done";
    default: return "failed";
  }
}

bool SequenceTrigger::on_range(uint64_t thread, bool was, bool now) {
  if (was == now) return false;
  if (now) {
    // An instance begins only where no window is in the works: a nested or concurrent
    // match on another thread while one is pending or open is not another instance.
    if (state_ != SeqState::Waiting) return false;
    if (instances_++ == instance_) {
      state_ = SeqState::Pending;
      owner_ = thread;
    }
    return false;
  }
  if (!owned_by(thread)) return false;
  if (state_ == SeqState::Pending) {
    state_ = SeqState::Failed;  // the instance enqueued no GPU work (the caller says so)
    return false;
  }
  return state_ == SeqState::Open;
}

void SequenceTrigger::opened(uint64_t thread) {
  owner_ = thread;
  state_ = SeqState::Open;
}

bool SequenceTrigger::on_launch(bool until_match) {
  if (state_ != SeqState::Open) return false;
  ++launches_;
  if (count_ && launches_ >= count_) return true;
  // The run's first launch is its start: "until" names a later one.
  return has_until_ && until_match && launches_ > 1;
}

// ---------------------------------------------------------------------------------

std::string SequenceLog::stream_kind(uint64_t handle, bool per_thread) {
  // CU_STREAM_LEGACY is 0x1, CU_STREAM_PER_THREAD 0x2; NULL follows the call's variant.
  if (handle == 0x2 || (handle == 0 && per_thread)) return "per-thread";
  if (handle == 0x1 || handle == 0) return "legacy";
  return "user";
}

bool SequenceLog::known_stream(uint64_t handle, bool per_thread) const {
  const std::string kind = stream_kind(handle, per_thread);
  const uint64_t key = kind == "user" ? handle : kind == "legacy" ? 1 : 2;
  return stream_ids_.count({key, kind == "per-thread"}) > 0;
}

int SequenceLog::stream(uint64_t handle, bool per_thread, bool blocking) {
  const std::string kind = stream_kind(handle, per_thread);
  const uint64_t key = kind == "user" ? handle : kind == "legacy" ? 1 : 2;
  auto [it, fresh] = stream_ids_.try_emplace({key, kind == "per-thread"}, int(streams_.size()));
  if (fresh) streams_.push_back(SeqStream{key, kind, kind != "user" || blocking});
  return it->second;
}

int SequenceLog::event_id(uint64_t handle) {
  auto [it, fresh] = events_.try_emplace(handle, int(events_.size()));
  (void)fresh;
  return it->second;
}

void SequenceLog::launch(size_t launch_index, int stream, const char* api) {
  SeqStep s;
  s.op = "launch";
  s.api = api;
  s.stream = stream;
  s.launch = launch_index;
  steps_.push_back(std::move(s));
  ++launches_;
}

void SequenceLog::copy(const char* api, const std::string& kind, uint64_t dst, uint64_t src, uint64_t bytes,
                       int stream, std::vector<ChunkHash> payload) {
  SeqStep s;
  s.op = "copy";
  s.api = api;
  s.copy_kind = kind;
  s.dst = dst, s.src = src, s.bytes = bytes;
  s.stream = stream;
  s.payload = std::move(payload);
  steps_.push_back(std::move(s));
}

void SequenceLog::memset(const char* api, uint64_t dst, uint32_t value, unsigned element, uint64_t width,
                         uint64_t height, uint64_t pitch, int stream) {
  SeqStep s;
  s.op = "memset";
  s.api = api;
  s.dst = dst, s.value = value, s.element = element;
  s.width = width, s.height = height, s.pitch = pitch;
  s.stream = stream;
  steps_.push_back(std::move(s));
}

void SequenceLog::record(const char* api, uint64_t event, int stream) {
  SeqStep s;
  s.op = "record";
  s.api = api;
  s.event = event_id(event);
  s.stream = stream;
  steps_.push_back(std::move(s));
}

void SequenceLog::wait(const char* api, int stream, uint64_t event) {
  auto it = events_.find(event);
  if (it == events_.end()) {
    ++dropped_waits_;
    return;
  }
  SeqStep s;
  s.op = "wait";
  s.api = api;
  s.event = it->second;
  s.stream = stream;
  steps_.push_back(std::move(s));
}

void SequenceLog::sync_context(const char* api) {
  SeqStep s;
  s.op = "sync";
  s.api = api;
  s.scope = "context";
  steps_.push_back(std::move(s));
}

void SequenceLog::sync_stream(const char* api, int stream) {
  SeqStep s;
  s.op = "sync";
  s.api = api;
  s.scope = "stream";
  s.stream = stream;
  steps_.push_back(std::move(s));
}

void SequenceLog::sync_event(const char* api, uint64_t event) {
  auto it = events_.find(event);
  if (it == events_.end()) return;  // recorded before the window: complete at its start
  SeqStep s;
  s.op = "sync";
  s.api = api;
  s.scope = "event";
  s.event = it->second;
  steps_.push_back(std::move(s));
}

void SequenceLog::set_graph_deps(size_t step, std::vector<SeqEdge> deps) {
  if (step >= steps_.size()) return;
  steps_[step].graph_deps = std::move(deps);
  graph_deps_ = true;
}

void SequenceLog::refuse(const std::string& why) {
  if (refusal_.empty()) refusal_ = why;
}

void SequenceLog::write_json(JsonWriter& w) const {
  w.key("streams").begin_array();
  for (size_t i = 0; i < streams_.size(); ++i)
    w.begin_object().field("id", int(i)).field("kind", streams_[i].kind).field("blocking", streams_[i].blocking).end_object();
  w.end_array();
  w.field("events", uint64_t(events_.size()));
  w.field("dropped_waits", dropped_waits_);
  w.key("steps").begin_array();
  for (const SeqStep& s : steps_) {
    w.begin_object().field("op", s.op).field("api", s.api);
    if (s.stream >= 0) w.field("stream", s.stream);
    if (s.op == "launch") {
      w.field("launch", uint64_t(s.launch));
    } else if (s.op == "copy") {
      w.field("kind", s.copy_kind).field("dst", s.dst).field("src", s.src).field("bytes", s.bytes);
      if (s.copy_kind == "h2d") {
        w.key("payload");
        write_hashes(w, s.payload);
      }
    } else if (s.op == "memset") {
      w.field("dst", s.dst).field("value", uint64_t(s.value)).field("element", s.element);
      w.field("width", s.width).field("height", s.height).field("pitch", s.pitch);
    } else if (s.op == "record" || s.op == "wait") {
      w.field("event", s.event);
    } else if (s.op == "sync") {
      w.field("scope", s.scope);
      if (s.event >= 0) w.field("event", s.event);
    }
    if (graph_deps_) {
      w.key("graph_deps").begin_array();
      for (const SeqEdge& e : s.graph_deps)
        w.begin_object().field("step", uint64_t(e.step)).field("type", e.type).field("from_port", e.from_port)
            .field("to_port", e.to_port).end_object();
      w.end_array();
    }
    w.end_object();
  }
  w.end_array();
}

}  // namespace kc
