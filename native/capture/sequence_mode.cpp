// Sequences (KERNCAP_SEQUENCE, docs/sequences.md): the window's opening, its
// recorded launches and calls, its end (sequence_capture.hpp).
#include "inject_state.hpp"

namespace kc {
namespace inject {

// Sequences (KERNCAP_SEQUENCE, docs/sequences.md): one window of the owner thread's
// work captured as one reproducer. The window holds every other thread at its
// driver-API entry from its opening to its end, as one dispatch's capture does from the
// target's entry to its exit; the owner's own calls run and are recorded.

uint64_t seq_thread(State& s, ThreadState& t) {
  if (!t.seq_tid) t.seq_tid = s.seq_threads.fetch_add(1, std::memory_order_relaxed) + 1;
  return t.seq_tid;
}

// What the window was asked to be (sequence.json "selection").
std::string sequence_selection(const State& s) {
  JsonWriter w;
  w.begin_object().field("mode", seq_mode_name(s.cfg.seq_mode));
  if (!s.cfg.kernel.empty())
    w.field("kernel", s.cfg.kernel).field("match", match_mode_name(s.cfg.match)).field("dispatch", s.cfg.dispatch);
  if (!s.cfg.nvtx.empty()) w.field("nvtx", s.cfg.nvtx).field("nvtx_match", s.cfg.nvtx_regex ? "regex" : "substring");
  if (s.cfg.seq_mode == SeqMode::Nvtx) w.field("instance", s.cfg.dispatch).field("path", s.seq_path);
  if (s.cfg.seq_count) w.field("count", s.cfg.seq_count);
  if (!s.cfg.seq_until.empty()) w.field("until", s.cfg.seq_until);
  w.end_object();
  return w.str();
}

// proc-<pid>.json's "sequence": where this process's window stands.
std::string sequence_report(State& s) {
  JsonWriter w;
  std::lock_guard<std::mutex> lock(s.seq_mu);
  w.begin_object().field("mode", seq_mode_name(s.cfg.seq_mode)).field("state", seq_state_name(s.seq_trigger->state()));
  w.field("instances_seen", s.seq_trigger->instances_seen()).field("launches", s.seq_trigger->launches());
  w.field("until_seen", s.seq_until_seen.load()).field("path", s.seq_path).end_object();
  return w.str();
}

bool until_matches(State& s, const FuncInfo& fi) {
  if (!s.seq_until) return false;
  std::lock_guard<std::mutex> lock(s.until_mu);
  auto [it, fresh] = s.until_cache.try_emplace(&fi, false);
  if (fresh) it->second = s.seq_until->matches(fi.name, fi.demangled);
  return it->second;
}

std::string sequence_what(const State& s) {
  switch (s.cfg.seq_mode) {
    case SeqMode::Nvtx:
      return "the sequence of NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "'";
    case SeqMode::Graph:
      return "the sequence of the graph launch running dispatch " + std::to_string(s.cfg.dispatch) + " of '" +
             s.cfg.kernel + "'";
    default:
      return "the sequence from dispatch " + std::to_string(s.cfg.dispatch) + " of '" + s.cfg.kernel + "'";
  }
}

// Opens the window on this thread: claims the run's capture, holds the other threads,
// drains and takes the pre-state. False (the failure reported) when it cannot.
bool open_sequence(State& s, ThreadState& t) {
  const std::string what = sequence_what(s);
  auto fail = [&](const char* kind, const std::string& message) {
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      s.seq_trigger->failed();
    }
    s.seq_pending.store(false, std::memory_order_release);
    if (!message.empty()) capture_attempt_failed(s, kind, message, s.cfg.dispatch, UINT32_MAX);
    return false;
  };
  if (!claim_capture(s)) return fail("", "");
  const std::string why = s.quiesce.lock(s.slots, my_slot(s, t));
  if (!why.empty()) return fail("capture_failed", what + " failed at its start: " + why);
  auto seq = std::make_unique<SequenceCapture>(s.cfg, s.mem, s.modules, sequence_selection(s));
  seq->set_job(s.job);
  seq->set_interception(interception_name(s));
  seq->set_arrays(&s.arrays);
  const char* kind = nullptr;
  std::string message;
  try {
    Guard guard;
    seq->open();
  } catch (const IoError& e) {
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    kind = "capture_failed";
    message = what + " failed at its start: " + e.what();
  }
  if (kind) {
    {
      Guard guard;
      seq->abort();
      seq.reset();
    }
    s.quiesce.unlock();
    return fail(kind, message);
  }
  s.seq = std::move(seq);
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->opened(seq_thread(s, t));
  }
  s.seq_pending.store(false, std::memory_order_release);
  t.seq_owner = true;
  return true;
}

// A failure inside the open window: the partial capture goes, the other threads go on.
void abort_sequence(State& s, ThreadState& t, const char* kind, const std::string& message) {
  if (!t.seq_owner) return;
  {
    Guard guard;
    if (s.seq) s.seq->abort();
    s.seq.reset();
  }
  t.seq_owner = t.seq_graph = t.seq_close_pending = t.seq_in_call = false;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->failed();
  }
  s.quiesce.unlock();
  capture_attempt_failed(s, kind, sequence_what(s) + " failed: " + message, s.cfg.dispatch, UINT32_MAX);
}

void close_sequence(State& s, ThreadState& t) {
  const char* kind = nullptr;
  std::string message, dir;
  try {
    Guard guard;
    dir = s.seq->close();
  } catch (const IoError& e) {
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    kind = "capture_failed";
    message = e.what();
  }
  if (kind) return abort_sequence(s, t, kind, message);
  {
    Guard guard;
    s.seq.reset();
  }
  t.seq_owner = t.seq_graph = t.seq_close_pending = t.seq_in_call = false;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    s.seq_trigger->done();
  }
  s.quiesce.unlock();
  capture_over(s, dir, s.cfg.dispatch, UINT32_MAX);
}

// Records a launch of the owner; false when the window was given up.
bool record_sequence_launch(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  const std::string at = "launch " + std::to_string(s.seq->log().launches()) + " of the sequence (" + fi.demangled + ")";
  std::string why;
  if (s.active_captures.load(std::memory_order_acquire) > 0 && stream_is_capturing(d, why)) {
    abort_sequence(s, t, "capture_failed", at + " is recorded into a CUDA graph by stream capture, not run: " + why);
    return false;
  }
  CUcontext ctx = cb->context;
  if (!ctx) {  // the entry points leave a launch's context to us (attach_entry_points)
    Guard guard;
    if (KC_CU(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS) ctx = nullptr;
  }
  if (ctx && ctx != s.seq->context()) {
    CUdevice dev = -1;
    {
      Guard guard;
      if (KC_CU(cuCtxGetDevice)(&dev) != CUDA_SUCCESS) dev = -1;
    }
    abort_sequence(s, t, "sequence_crosses",
                   "the sequence crosses CUDA contexts: " + at + " ran on device " + std::to_string(dev) +
                       (dev == s.seq->device() ? " in another context" : "") + ", the sequence began on device " +
                       std::to_string(s.seq->device()) + "; a sequence replays in one context of one GPU");
    return false;
  }
  try {
    Guard guard;
    if (s.entry_points && !s.seq->knows(&fi)) {
      const Recovered r = recover_cubin(s, d.f, fi);
      if (!r.error.empty()) throw std::runtime_error(r.error);
      if (!r.warning.empty()) s.seq->add_warning(r.warning);
    }
    s.seq->add_launch(d, fi, s.nvtx ? s.nvtx->context().path : std::string(), false);
  } catch (const IoError& e) {
    abort_sequence(s, t, "disk", disk_message(s, e));
    return false;
  } catch (const std::exception& e) {
    abort_sequence(s, t, "capture_failed", at + ": " + e.what());
    return false;
  }
  return true;
}

// A launch while a sequence may be in the works; true when it was recorded in the window.
bool sequence_launch_enter(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  if (!t.seq_owner && s.seq_until && until_matches(s, fi)) s.seq_until_seen.fetch_add(1, std::memory_order_relaxed);
  if (!t.seq_owner && s.seq_pending.load(std::memory_order_acquire)) {
    bool mine;
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      mine = s.seq_trigger->on_work(seq_thread(s, t));
    }
    if (mine && !open_sequence(s, t)) return false;
  }
  if (!t.seq_owner) return false;
  if (!record_sequence_launch(s, t, d, fi, cb)) return true;  // given up: the launch runs as the app's
  bool close;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    close = s.seq_trigger->on_launch(until_matches(s, fi));
  }
  if (close) {
    t.seq_close_pending = true;
    t.seq_close_corr = cb->correlationId;
  }
  return true;
}

// Dispatch N of the kernel: the run begins with this launch.
bool start_sequence_run(State& s, ThreadState& t, const LaunchDesc& d, FuncInfo& fi, const CUpti_CallbackData* cb) {
  if (t.seq_owner || !open_sequence(s, t)) return false;
  return sequence_launch_enter(s, t, d, fi, cb);
}

void sequence_launch_exit(State& s, ThreadState& t, const CUpti_CallbackData* cb) {
  if (!s.seq) return;
  const CUresult r = result_of(cb);
  if (r != CUDA_SUCCESS) {
    abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence failed in the app: " +
                                               cu_error_string(r));
    return;
  }
  if (t.seq_close_pending && t.seq_close_corr == cb->correlationId) close_sequence(s, t);
}

// The launch of an executable graph running dispatch N: its nodes are the window's
// steps, the app's own cuGraphLaunch runs them, the window closes at its exit.
void start_sequence_graph(State& s, ThreadState& t, ExecModel& m, CUstream stream, bool per_thread) {
  if (!open_sequence(s, t)) return;
  t.seq_graph = true;
  try {
    Guard guard;
    const int st = s.seq->stream_of(stream, per_thread);
    const GraphWalk walk = record_graph_launch(*s.seq, m, st, [&](CUgraphNode node) {
      std::vector<CUlaunchAttribute> attrs;
      const LaunchDesc d = node_launch(node, stream, per_thread, attrs);
      FuncInfo* fi = s.funcs.get(d.f, s.matcher.get());
      if (s.entry_points && !s.seq->knows(fi)) {
        const Recovered r = recover_cubin(s, d.f, *fi);
        if (!r.error.empty()) throw std::runtime_error(r.error);
        if (!r.warning.empty()) s.seq->add_warning(r.warning);
      }
      s.seq->add_launch(d, *fi, s.nvtx ? s.nvtx->context().path : std::string(), per_thread);
    });
    JsonWriter w;
    w.begin_object().field("exec_id", m.id).field("exec_launch", m.launches - 1).field("nodes", uint64_t(walk.nodes));
    w.field("built_by", m.built_by).field("updates", m.updates).field("instantiate_flags", m.instantiate_flags);
    w.field("order", "serial (kerncap's topological order of the graph)");
    w.key("skipped").begin_object();
    for (const auto& [k, n] : walk.skipped) w.field(k, uint64_t(n));
    w.end_object();
    w.key("edges").begin_object();
    for (const auto& [k, n] : edge_kinds(m)) w.field(k, uint64_t(n));
    w.end_object().end_object();
    s.seq->set_graph_json(w.str());
  } catch (const IoError& e) {
    abort_sequence(s, t, "disk", disk_message(s, e));
  } catch (const std::exception& e) {
    abort_sequence(s, t, "graph_refused", e.what());
  }
}

// An enqueueing or synchronizing call of the owner (not a launch): recorded at its
// entry; a pending window opens first (its first GPU work may be a copy).
void sequence_call(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_CallbackData* cb, uint16_t roles,
                   bool enter) {
  if (!enter) {
    if (!t.seq_in_call) return;
    t.seq_in_call = false;
    const CUresult r = result_of(cb);
    if (r != CUDA_SUCCESS && t.seq_owner)
      abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence failed in the app: " +
                                                 cu_error_string(r));
    return;
  }
  if (roles & (kAlloc | kArray | kHostMemory | kModuleLoad | kModuleUnload | kGraphInstantiate | kGraphUpdate |
               kGraphBuild | kCaptureEnd | kEntryOnly | kGraphLaunch))
    return;  // tracked as ever (allocations), or nothing the window replays
  if (!t.seq_owner && s.seq_pending.load(std::memory_order_acquire) && (roles & kEnqueue)) {
    bool mine;
    {
      std::lock_guard<std::mutex> lock(s.seq_mu);
      mine = s.seq_trigger->on_work(seq_thread(s, t));
    }
    if (mine) open_sequence(s, t);
  }
  if (!t.seq_owner || !s.seq) return;
  if (roles & kCaptureBegin) {
    abort_sequence(s, t, "capture_failed", std::string(cb->functionName) +
                                               ": a stream capture began inside the sequence (its work would not run)");
    return;
  }
  {
    Guard guard;
    try {
      s.seq->on_call(cbid, cb->functionParams, cb->functionName);
    } catch (const IoError& e) {
      abort_sequence(s, t, "disk", disk_message(s, e));
      return;
    } catch (const std::exception& e) {
      abort_sequence(s, t, "capture_failed", std::string(cb->functionName) + " inside the sequence: " + e.what());
      return;
    }
  }
  if (!s.seq->log().refusal().empty()) {  // before the call runs: the threads go on at once
    abort_sequence(s, t, "capture_failed", s.seq->log().refusal());
    return;
  }
  t.seq_in_call = true;
}

// nvtx: a range call of this thread; the window is pending from the instance's start and
// closes when the owner's path stops matching.
void sequence_nvtx(State& s, ThreadState& t, CUpti_CallbackId cbid, const CUpti_NvtxData* d) {
  const bool was = s.nvtx->matches();
  s.nvtx->on_callback(cbid, d);
  const bool now = s.nvtx->matches();
  if (was == now || s.cfg.seq_mode != SeqMode::Nvtx) return;
  bool close;
  SeqState before, after;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    before = s.seq_trigger->state();
    close = s.seq_trigger->on_range(seq_thread(s, t), was, now);
    after = s.seq_trigger->state();
  }
  if (before != SeqState::Pending && after == SeqState::Pending) {
    s.seq_path = s.nvtx->context().path;
    s.seq_pending.store(true, std::memory_order_release);
  }
  if (before == SeqState::Pending && after == SeqState::Failed) {
    s.seq_pending.store(false, std::memory_order_release);
    capture_failed(s, "sequence_empty",
                   "NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "' (" +
                       s.seq_path + ") enqueued no GPU work on its thread: nothing to capture; pick another instance "
                       "(--dispatch) or a range that holds kernels");
    write_proc(s);
  }
  if (close && t.seq_owner && s.seq) close_sequence(s, t);
}

// At the process's exit: a window that never opened or never closed, said so.
void sequence_at_exit(State& s) {
  SeqState st;
  uint64_t seen, launches;
  {
    std::lock_guard<std::mutex> lock(s.seq_mu);
    st = s.seq_trigger->state();
    seen = s.seq_trigger->instances_seen();
    launches = s.seq_trigger->launches();
  }
  if (st == SeqState::Open && s.seq) {
    std::string why;
    if (s.cfg.seq_mode == SeqMode::Nvtx)
      why = "NVTX range instance " + std::to_string(s.cfg.dispatch) + " matching '" + s.cfg.nvtx + "' (" + s.seq_path +
            ") opened but never closed before the process ended (" + std::to_string(launches) +
            " launch(es) recorded): its push has no pop on the thread that launched its work";
    else
      why = "the run from dispatch " + std::to_string(s.cfg.dispatch) + " of '" + s.cfg.kernel +
            "' never reached its end before the process ended: " + std::to_string(launches) + " launch(es) recorded" +
            (s.cfg.seq_count ? " of --count " + std::to_string(s.cfg.seq_count) : "") +
            (!s.cfg.seq_until.empty() ? "; no later launch of a kernel matching '" + s.cfg.seq_until + "' on its thread"
                                      : std::string());
    {
      Guard guard;
      s.seq->abort();
    }
    s.report.add_error("sequence_unclosed", why);
    ::unlink(lock_path(s).c_str());
    return;
  }
  if (st == SeqState::Waiting && s.cfg.seq_mode == SeqMode::Nvtx && !s.claimed.load())
    s.report.add_error("sequence_unopened", "no instance " + std::to_string(s.cfg.dispatch) +
                                                " of an NVTX range matching '" + s.cfg.nvtx + "' began (" +
                                                std::to_string(seen) + " instance(s) seen)");
}

}  // namespace inject
}  // namespace kc
