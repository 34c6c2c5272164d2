// One dispatch's capture (and a set's): claiming the run's capture, holding the other
// threads, starting and finishing a CaptureSession (capture_session.hpp).
#include "inject_state.hpp"

namespace kc {
namespace inject {

// Capture start / finish

void capture_failed(State& s, const char* kind, const std::string& message) {
  s.report.add_error(kind, message);
  if (s.cfg.set) return;  // a set goes on with its other dispatches (the failure is named)
  set_armed(s, false);
  ::unlink(lock_path(s).c_str());
}

// At the selected dispatch's API entry. True: the capture started, this thread now
// holds the quiesce lock exclusively until the launch's exit.
// This process's one capture attempt: true when it may capture (it created the
// run's capture.lock); false when it tried before or another process of the app captures.
bool claim_capture(State& s) {
  if (s.cfg.bench_passthrough) {
    // A bench process may have run calls past the dispatcher (kerncap_bench_passthrough):
    // its counts and regions can miss some, so it never captures.
    if (!s.claimed.exchange(true))
      s.report.add_error("capture_failed", "KERNCAP_BENCH_PASSTHROUGH=1 is set: a process whose driver calls may "
                                           "bypass kerncap (a bench switch) takes no capture; unset it to capture");
    return false;
  }
  if (s.owns_lock.load(std::memory_order_acquire)) return true;  // a set's later captures
  if (s.claimed.exchange(true)) return false;
  int fd = ::open(lock_path(s).c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    set_armed(s, false);
    if (err != EEXIST)  // EEXIST: another process of the app captures; not an error
      s.report.add_error("disk", "cannot create " + lock_path(s) + ": " + std::strerror(err));
    return false;
  }
  const std::string pid = std::to_string(getpid()) + "\n";
  if (::write(fd, pid.data(), pid.size()) < 0) { /* the lock is the file's existence; its content is a courtesy */ }
  ::close(fd);
  s.owns_lock.store(true, std::memory_order_release);
  return true;
}

// The capture directory of dispatch `index`: "capture", or "capture-<N>" in a set.
std::string capture_name(const State& s, uint64_t index) {
  return s.cfg.set ? "capture-" + std::to_string(index) : std::string("capture");
}

std::string blob_pool(const State& s) { return s.cfg.set ? path_join(s.cfg.out_dir, "blob-pool") : std::string(); }

// A capture ended (written or failed): what next. A single capture disarms, and unless
// --keep-running ends the process; a set re-arms for its next dispatch and ends only
// after its last (a bucket set never: it needs the whole run to see every bucket).
void capture_over(State& s, const std::string& dir, uint64_t index, uint32_t bucket) {
  bool more = false;
  if (s.cfg.set) {
    if (!dir.empty()) {
      s.captures_done.fetch_add(1, std::memory_order_relaxed);
      if (s.buckets && bucket != UINT32_MAX) s.buckets->mark_captured(bucket, index, dir);
    }
    more = s.cfg.buckets || index < s.cfg.last_dispatch();
  }
  set_armed(s, more);
  if (!dir.empty()) s.report.set_captured(dir);
  write_proc(s);
  write_buckets(s, false);
  const bool finished = s.cfg.set ? !more && s.captures_done.load() > 0 : !dir.empty();
  if (finished && !s.cfg.keep_running) {
    std::fflush(nullptr);
    ::_exit(0);
  }
}

void describe_launch(State& s, CaptureSession& session, uint32_t bucket) {
  session.set_job(s.job);
  session.set_interception(interception_name(s));
  session.set_arrays(&s.arrays);
  if (s.nvtx) session.set_nvtx(s.nvtx->context());
  if (bucket != UINT32_MAX) session.set_bucket(bucket);
  const std::string xla = s.xla.note(xla_loaded());
  if (!xla.empty()) session.add_warning(xla);
}

// A capture of dispatch `index` failed: say so; a set remembers it for the bucket (so
// it is named, not retried) and goes on.
void capture_attempt_failed(State& s, const char* kind, const std::string& message, uint64_t index, uint32_t bucket) {
  capture_failed(s, kind, message);
  if (!s.cfg.set) {
    write_proc(s);
    return;
  }
  if (s.buckets && bucket != UINT32_MAX) s.buckets->mark_failed(bucket, message);
  capture_over(s, std::string(), index, bucket);
}

std::string disk_message(const State& s, const IoError& e) {
  return std::string("capture aborted, partial capture removed: ") + e.what() + ". Free space in " + s.cfg.out_dir +
         " or write the capture elsewhere.";
}

// The capture's writer side; false (the failure reported) when the threads cannot be held.
bool hold_other_threads(State& s, ThreadState& t, const std::string& what, uint64_t index, uint32_t bucket) {
  const std::string why = s.quiesce.lock(s.slots, t.slot);
  if (why.empty()) return true;
  capture_attempt_failed(s, "capture_failed", "capture of " + what + " (dispatch " + std::to_string(index) +
                                                  ") failed before the launch: " + why,
                         index, bucket);
  return false;
}

bool start_capture(State& s, const LaunchDesc& d, const FuncInfo& fi, const CUpti_CallbackData* cb, uint64_t index,
                   uint32_t bucket) {
  if (!claim_capture(s)) return false;
  // Waits until no other thread is inside an enqueueing call; new ones wait for unlock.
  ThreadState& tl = this_thread();
  if (!hold_other_threads(s, tl, fi.demangled, index, bucket)) return false;
  Recovered recovered;
  if (s.entry_points) {
    try {
      recovered = recover_cubin(s, d.f, fi);
    } catch (const std::exception& e) {  // the other threads are held: never leave holding them
      recovered.error = std::string("reading the kernel's cubin failed: ") + e.what();
    }
    if (!recovered.error.empty()) {
      s.quiesce.unlock();
      const bool subscriber = recovered.error.rfind("cuptiSubscribe", 0) == 0;
      capture_attempt_failed(s, subscriber ? "cupti_subscriber" : "capture_failed",
                             "capture of " + fi.demangled + " (dispatch " + std::to_string(index) +
                                 ") failed before the launch: " + recovered.error,
                             index, bucket);
      return false;
    }
  }
  auto session =
      std::make_unique<CaptureSession>(s.cfg, s.mem, s.modules, d, fi, index, capture_name(s, index), blob_pool(s));
  describe_launch(s, *session, bucket);
  if (!recovered.warning.empty()) session->add_warning(recovered.warning);
  try {
    Guard guard;
    session->before_launch();
  } catch (const IoError& e) {
    { Guard guard; session->abort(); session.reset(); }
    s.quiesce.unlock();
    capture_attempt_failed(s, "disk", disk_message(s, e), index, bucket);
    return false;
  } catch (const std::exception& e) {
    { Guard guard; session->abort(); session.reset(); }
    s.quiesce.unlock();
    capture_attempt_failed(s, "capture_failed", "capture of " + fi.demangled + " (dispatch " + std::to_string(index) +
                                                    ") failed before the launch: " + e.what(),
                           index, bucket);
    return false;
  }
  tl.session = session.release();
  tl.correlation = cb->correlationId;
  tl.bucket = bucket;
  tl.index = index;
  return true;
}

void finish_capture(State& s, const CUpti_CallbackData* cb) {
  ThreadState& tl = this_thread();
  std::unique_ptr<CaptureSession> session(tl.session);
  const uint32_t bucket = tl.bucket;
  const uint64_t index = tl.index;
  tl.session = nullptr;
  tl.correlation = 0;
  std::string dir;
  const char* kind = nullptr;
  std::string message;
  try {
    Guard guard;
    dir = session->after_launch(result_of(cb));
  } catch (const IoError& e) {
    Guard guard;
    session->abort();
    kind = "disk";
    message = disk_message(s, e);
  } catch (const std::exception& e) {
    Guard guard;
    session->abort();
    kind = "capture_failed";
    message = "capture of dispatch " + std::to_string(index) + " failed after the launch: " + e.what();
  }
  {
    Guard guard;
    session.reset();  // frees the pinned ring and the snapshot stream
  }
  s.quiesce.unlock();
  if (kind) capture_attempt_failed(s, kind, message, index, bucket);
  else capture_over(s, dir, index, bucket);
}

}  // namespace inject
}  // namespace kc
