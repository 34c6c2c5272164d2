#include "launch_sampler.hpp"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <thread>

#include "driver.hpp"
#include "json_writer.hpp"

namespace kc {
namespace {

constexpr uint32_t kWords = 1024;            // holds (samples awaiting their read) per context
constexpr uint64_t kOverdueNs = 5'000'000;   // a hold the watchdog releases: 5 ms
constexpr int kCalibrationPairs = 32;
constexpr uint64_t kCalibrationWaitNs = 50'000'000;  // a calibration pair not done in 50 ms: give up
constexpr int kCalibrationWarmup = 4;  // pairs left out: the first launches of the empty kernel load it

uint64_t now_ns() {
  return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                      std::chrono::steady_clock::now().time_since_epoch())
                      .count());
}

uint64_t next_random(uint64_t& x) {  // xorshift64*
  if (!x) x = 0x9E3779B97F4A7C15ull ^ now_ns();
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  return x * 0x2545F4914F6CDD1Dull;
}

// kerncap's own calls never count as "potentially unsafe" for a global-mode capture
// another thread of the app may be running.
struct RelaxedCapture {
  CUstreamCaptureMode prev = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool ok;
  RelaxedCapture() { ok = KC_CU(cuThreadExchangeStreamCaptureMode)(&prev) == CUDA_SUCCESS; }
  ~RelaxedCapture() {
    if (ok) KC_CU(cuThreadExchangeStreamCaptureMode)(&prev);
  }
};

// The context current for the calls made while this lives (the exit drain, a context
// being destroyed): pushed, then popped.
struct CurrentContext {
  bool pushed;
  explicit CurrentContext(CUcontext ctx) { pushed = KC_CU(cuCtxPushCurrent)(ctx) == CUDA_SUCCESS; }
  ~CurrentContext() {
    CUcontext popped;
    if (pushed) KC_CU(cuCtxPopCurrent)(&popped);
  }
};

}  // namespace

struct LaunchSampler::Pending {
  Context* ctx = nullptr;
  CUevent e0 = nullptr, e1 = nullptr;
  CUstream stream = nullptr;  // the launch's (CU_STREAM_PER_THREAD for a _ptsz call's null stream)
  uint32_t word = 0;
  const void* key = nullptr;
  double weight = 1.0;
  bool ok = false;
  bool interleaved = false;
  unsigned grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
};

struct LaunchSampler::Context {
  CUcontext ctx = nullptr;
  bool gone = false;      // destroyed: a new context may reuse the handle
  bool disabled = false;  // a driver call failed here: its launches are counted, not timed
  std::mutex mu;          // everything below
  std::vector<CUevent> events;
  size_t events_made = 0;
  std::deque<Pending*> queue;  // ended, in order, awaiting their read
  std::vector<Pending*> spare;
  std::atomic<uint32_t>* words = nullptr;  // host memory the GPU reads (cuMemHostAlloc, DEVICEMAP)
  CUdeviceptr words_dev = 0;
  std::vector<uint32_t> free_words;
  std::atomic<uint64_t> held_since[kWords] = {};  // watchdog: when the hold began, 0 when none
  std::atomic<bool> overdue[kWords] = {};         // the watchdog released it: drop the sample
  bool calibrated = false;
  std::atomic<bool> hold{true};  // false once cuStreamWaitValue32 failed here: unheld pairs from then on
  double bracket_ns = 0;            // subtracted from each sample
  double pair_ns = -1;              // calibration: a held pair around nothing (median; -1: not measured)
  double empty_kernel_pair_ns = -1; // ... and around kerncap's empty kernel
  std::string calibration;          // how bracket_ns was found
  std::string timer;                // "stamps" or "events" (and why not stamps, if asked for)
  bool calibrated_on_app = false;   // on the stream of the context's first timed launch
  CUmodule empty_module = nullptr;  // kc_sampler_empty (never unloaded: it goes with the context)
  CUfunction stamp = nullptr;       // kc_sampler_stamp, in empty_module: null when pairs are events
  // Stamped pairs: per hold word, the GPU's %globaltimer at the pair's start and end
  // (host memory the GPU writes, cuMemHostAlloc DEVICEMAP; 0: not written yet).
  std::atomic<uint64_t>* stamps = nullptr;
  CUdeviceptr stamps_dev = 0;
  std::vector<CUstream> streams;  // streams with timed launches
  std::vector<std::thread::id> stream_thread;  // per stream: the first thread that timed a launch there
  std::vector<bool> stream_shared;             // per stream: a second thread timed one there too
};

LaunchSampler::LaunchSampler() {
  if (const char* e = std::getenv("KERNCAP_PROFILE_EMPTY_KERNEL_NS")) {
    char* end = nullptr;
    const double ns = std::strtod(e, &end);
    if (*e && end && !*end && ns >= 0) empty_kernel_ns_ = ns;
  }
  const char* t = std::getenv("KERNCAP_PROFILE_TIMER");
  stamps_ = !(t && std::strcmp(t, "events") == 0);
  const char* on = std::getenv("KERNCAP_PROFILE_CALIBRATE");
  calibrate_on_app_ = !(on && std::strcmp(on, "own") == 0);
  const char* v = std::getenv("KERNCAP_PROFILE_BRACKET");
  const std::string mode = v ? v : "";
  if (mode == "none") {
    bracket_mode_ = "none";
  } else if (!mode.empty() && mode != "auto") {
    char* end = nullptr;
    const double ns = std::strtod(mode.c_str(), &end);
    if (end && !*end && ns >= 0) {
      bracket_mode_ = "fixed";
      bracket_fixed_ns_ = ns;
    }
  }
}

bool LaunchSampler::due(SampleSchedule& s, uint64_t n, uint64_t& rng, double* weight) {
  if (n < s.next) return false;
  *weight = s.weight;
  const double p = std::min(1.0, kAlwaysTimed / double(n));
  uint64_t gap = 1;
  if (p < 1.0) {
    // Geometric(p): 1 + floor(ln U / ln(1 - p)), U uniform in (0, 1].
    const double u = (double(next_random(rng) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    gap = 1 + uint64_t(std::floor(std::log(u) / std::log1p(-p)));
  }
  s.next = n + gap;
  s.weight = 1.0 / p;
  return true;
}

bool LaunchSampler::due_shared(uint64_t n, uint64_t& rng, double* weight) {
  const double p = std::min(1.0, kAlwaysTimed / double(n));
  if (p < 1.0 && double(next_random(rng) >> 11) * (1.0 / 9007199254740992.0) >= p) return false;
  *weight = 1.0 / p;
  return true;
}

LaunchSampler::Context* LaunchSampler::context_for(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Context* c : contexts_)
    if (c->ctx == ctx && !c->gone) return c;
  auto* c = new Context;
  c->ctx = ctx;
  contexts_.push_back(c);
  return c;
}

namespace {

// kerncap's own empty kernel, JIT-compiled in each context the sampler times in: what a
// held pair reads around it is the calibration of every sample (docs/interposer.md).
// kc_sampler_stamp writes the GPU's global timer to its argument (a stamped pair's
// start or end); membar.sys: the host sees it no later than the kernel's completion.
const char kEmptyKernelPtx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n"
    ".visible .entry kc_sampler_empty()\n{\n\tret;\n}\n"
    ".visible .entry kc_sampler_stamp(.param .u64 slot)\n{\n\t.reg .b64 %rd<3>;\n"
    "\tld.param.u64 %rd1, [slot];\n\tmov.u64 %rd2, %globaltimer;\n"
    "\tst.volatile.global.u64 [%rd1], %rd2;\n\tmembar.sys;\n\tret;\n}\n";

// One stamp on `stream`: the global timer into the 8 bytes at `slot`.
CUresult launch_stamp(CUfunction stamp, CUstream stream, CUdeviceptr slot) {
  void* args[] = {&slot};
  return KC_CU(cuLaunchKernel)(stamp, 1, 1, 1, 1, 1, 1, 0, stream, args, nullptr);
}

double median_of(std::vector<double> v) {
  if (v.empty()) return -1.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

// One held pair on `stream` around `body` (nothing when null), read at once: ns, or -1
// when a driver call failed (its CUresult in *err, its name in *call). Stamped where the
// context stamps its samples (c.stamp), with events e0 and e1 otherwise.
double LaunchSampler::held_pair(Context& c, CUstream stream, CUfunction body, CUevent e0, CUevent e1, uint32_t w,
                                CUresult* err, const char** call) {
  c.words[w].store(0, std::memory_order_release);
  const char* mark_call = c.stamp ? "cuLaunchKernel" : "cuEventRecord";
  CUresult r = KC_CU(cuStreamWaitValue32)(stream, c.words_dev + 4 * w, 1, CU_STREAM_WAIT_VALUE_GEQ);
  *call = "cuStreamWaitValue32";
  if (r == CUDA_SUCCESS) r = mark(c, stream, w, false, e0), *call = mark_call;
  if (r == CUDA_SUCCESS && body)
    r = KC_CU(cuLaunchKernel)(body, 1, 1, 1, 1, 1, 1, 0, stream, nullptr, nullptr), *call = "cuLaunchKernel";
  if (r == CUDA_SUCCESS) r = mark(c, stream, w, true, e1), *call = mark_call;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  c.words[w].store(1, std::memory_order_release);  // released whatever failed: nothing stays held
  // Polled, with a deadline, not cuStreamSynchronize: where the driver puts kerncap's
  // stream on a hardware queue behind a stream the app holds itself, a sync would wait
  // for the app, which waits inside this launch call for kerncap.
  const uint64_t deadline = now_ns() + kCalibrationWaitNs;
  if (r == CUDA_SUCCESS) *call = c.stamp ? "waiting for the calibration's stamps" : "cuEventQuery";
  while (r == CUDA_SUCCESS) {
    const CUresult q = finished(c, w, e1);
    if (q == CUDA_SUCCESS) break;
    if (q != CUDA_ERROR_NOT_READY) r = q;
    else if (now_ns() > deadline)
      r = CUDA_ERROR_TIMEOUT,
      *call = c.stamp ? "waiting for the calibration's stamps (timed out)" : "waiting for the calibration's pair (timed out)";
  }
  *err = r;
  if (r == CUDA_SUCCESS && c.stamp) return stamped_ns(c, w);
  float ms = 0;
  if (r == CUDA_SUCCESS) r = KC_CU(cuEventElapsedTime)(&ms, e0, e1), *call = "cuEventElapsedTime";
  *err = r;
  return r == CUDA_SUCCESS ? double(ms) * 1e6 : -1.0;
}

double LaunchSampler::stamped_ns(const Context& c, uint32_t w) {
  const uint64_t t0 = c.stamps[2 * w].load(std::memory_order_acquire);
  const uint64_t t1 = c.stamps[2 * w + 1].load(std::memory_order_acquire);
  return t0 && t1 >= t0 ? double(t1 - t0) : -1.0;
}

CUresult LaunchSampler::mark(Context& c, CUstream stream, uint32_t w, bool end, CUevent e) {
  if (!c.stamp) return KC_CU(cuEventRecord)(e, stream);
  if (!end) {  // both slots unwritten before the pair's start: a finished pair is one whose end slot is set
    c.stamps[2 * w].store(0, std::memory_order_relaxed);
    c.stamps[2 * w + 1].store(0, std::memory_order_release);
  }
  return launch_stamp(c.stamp, stream, c.stamps_dev + 16 * w + (end ? 8 : 0));
}

CUresult LaunchSampler::finished(const Context& c, uint32_t w, CUevent e1) {
  if (!c.stamp) return KC_CU(cuEventQuery)(e1);
  return c.stamps[2 * w + 1].load(std::memory_order_acquire) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

void LaunchSampler::recycle_events(Context& c, Pending* p) {
  if (p->e0) c.events.push_back(p->e0);
  if (p->e1) c.events.push_back(p->e1);
  p->e0 = p->e1 = nullptr;
}

namespace {

// Runs `f` once, unheld, on `stream` and waits for it (50 ms at most): under lazy module
// loading (the driver's default) a first launch loads its code inside the launch call,
// and that load waits for work queued before it; behind a held stream the release would
// never come. `arg`: its one argument, if any.
CUresult first_launch(CUfunction f, CUstream stream, CUdeviceptr* arg, const char** call) {
  void* args[] = {arg};
  CUresult r = KC_CU(cuLaunchKernel)(f, 1, 1, 1, 1, 1, 1, 0, stream, arg ? args : nullptr, nullptr);
  *call = "cuLaunchKernel";
  const uint64_t deadline = now_ns() + kCalibrationWaitNs;
  while (r == CUDA_SUCCESS) {
    const CUresult q = KC_CU(cuStreamQuery)(stream);
    if (q == CUDA_SUCCESS) break;
    if (q != CUDA_ERROR_NOT_READY) r = q, *call = "cuStreamQuery";
    else if (now_ns() > deadline) r = CUDA_ERROR_TIMEOUT, *call = "waiting for kerncap's kernel's first launch";
  }
  return r;
}

// kerncap's empty kernel from `*module` (loaded there first if need be), launched once on
// `own`: null, with why in *no_kernel, where it cannot be had.
CUfunction load_empty_kernel(CUmodule* module, CUstream own, std::string* no_kernel) {
  const char* call = "cuModuleLoadData";
  CUfunction empty = nullptr;
  if (!*module) {
    const CUresult m = KC_CU(cuModuleLoadData)(module, kEmptyKernelPtx);
    if (m != CUDA_SUCCESS) {
      *module = nullptr;
      *no_kernel = "cuModuleLoadData: " + cu_error_string(m);
    }
  }
  if (*module) {
    const CUresult f = KC_CU(cuModuleGetFunction)(&empty, *module, "kc_sampler_empty");
    if (f != CUDA_SUCCESS || first_launch(empty, own, nullptr, &call) != CUDA_SUCCESS) {
      empty = nullptr;
      *no_kernel = std::string(f != CUDA_SUCCESS ? "cuModuleGetFunction" : call) + " failed";
    }
  }
  return empty;
}

}  // namespace

// Stamps where asked for and the stamp kernel runs in this context (c.stamp set), else
// events; c.timer says which, and why not stamps.
void LaunchSampler::choose_timer(Context& c, CUstream own, const std::string& no_kernel) const {
  std::string no_stamp = !stamps_ ? "" : !c.stamps ? "no host memory for the stamps" : !c.empty_module ? no_kernel : "";
  if (stamps_ && no_stamp.empty()) {
    CUfunction stamp = nullptr;
    CUdeviceptr scratch = c.stamps_dev;
    const char* call = "cuLaunchKernel";
    if (KC_CU(cuModuleGetFunction)(&stamp, c.empty_module, "kc_sampler_stamp") != CUDA_SUCCESS)
      no_stamp = "cuModuleGetFunction failed";
    else if (first_launch(stamp, own, &scratch, &call) != CUDA_SUCCESS)
      no_stamp = std::string(call) + " failed";
    else
      c.stamp = stamp;  // from here on this context's pairs are stamped
  }
  c.timer = c.stamp ? "stamps" : stamps_ ? "events (no stamp kernel: " + no_stamp + ")" : "events";
}

// The calibration's pairs failed: `call`, with r.
void LaunchSampler::calibration_failed(Context& c, CUresult r, const char* call) {
  if (std::strcmp(call, "cuStreamWaitValue32") == 0) {
    // Stream memory operations unavailable here: the app's launches go unheld too (begin()
    // would find the same), and an unheld pair has nothing to calibrate against.
    c.hold.store(false, std::memory_order_relaxed);
    c.calibration = "none (stream not held)";
    std::lock_guard<std::mutex> g(mu_);
    if (unheld_.empty()) unheld_ = "cuStreamWaitValue32: " + cu_error_string(r);
  } else {
    c.calibration = std::string("failed: ") + call + ": " + cu_error_string(r);
  }
}

// The bracket from the calibration's pairs: around nothing (pair) and around the empty
// kernel (kernel; `empty`: it could be launched).
void LaunchSampler::set_bracket(Context& c, const std::vector<double>& pair, const std::vector<double>& kernel,
                                bool empty, const std::string& no_kernel) const {
  c.pair_ns = median_of(pair);
  c.empty_kernel_pair_ns = median_of(kernel);
  if (empty && !kernel.empty()) {
    // At least what the pair alone reads: an empty kernel cannot make a pair shorter.
    c.bracket_ns = std::max(c.pair_ns, c.empty_kernel_pair_ns - empty_kernel_ns_);
    c.calibration = "empty kernel";
  } else {
    c.bracket_ns = std::max(0.0, c.pair_ns);
    c.calibration = "empty pair (no empty kernel: " + no_kernel + ")";
  }
}

void LaunchSampler::calibrate(Context& c, CUstream app_stream) {
  c.calibrated = true;
  // On the first timed launch's stream when it is idle (else, or with
  // KERNCAP_PROFILE_CALIBRATE=own, on a stream of kerncap's own), with the GPU idle: held
  // pairs around nothing and around an empty kernel, interleaved. A sample
  // reads the kernel plus what the pair and the kernel's launch add on the GPU (front
  // end, grid setup, the end's wait for idle), which CUPTI's start-end does not hold; the
  // empty kernel's pair reads that plus the empty kernel's own CUPTI time
  // (empty_kernel_ns_), which is given back.
  CUstream own = nullptr;
  CUresult r = KC_CU(cuStreamCreate)(&own, CU_STREAM_NON_BLOCKING);
  if (r != CUDA_SUCCESS) {
    c.calibration = "failed: cuStreamCreate: " + cu_error_string(r);
    return;
  }
  std::string no_kernel;
  const CUfunction empty = load_empty_kernel(&c.empty_module, own, &no_kernel);
  choose_timer(c, own, no_kernel);
  if (bracket_mode_ != "auto") {
    c.bracket_ns = bracket_mode_ == "fixed" ? bracket_fixed_ns_ : 0.0;
    c.calibration = bracket_mode_;
    KC_CU(cuStreamDestroy)(own);
    return;
  }
  if (!c.hold.load(std::memory_order_relaxed) || c.free_words.empty()) {
    c.calibration = "none (stream not held)";
    KC_CU(cuStreamDestroy)(own);
    return;
  }
  // Where the samples are taken (the app's stream, its hardware queue, a legacy stream's
  // implicit waits), unless work is queued there: never behind the app's work.
  c.calibrated_on_app = calibrate_on_app_ && KC_CU(cuStreamQuery)(app_stream) == CUDA_SUCCESS;
  const CUstream on = c.calibrated_on_app ? app_stream : own;
  CUevent e0 = nullptr, e1 = nullptr;  // stamped pairs take none
  r = c.stamp ? CUDA_SUCCESS : KC_CU(cuEventCreate)(&e0, CU_EVENT_DEFAULT);
  if (r == CUDA_SUCCESS && !c.stamp) r = KC_CU(cuEventCreate)(&e1, CU_EVENT_DEFAULT);
  const char* call = "cuEventCreate";
  const uint32_t w = c.free_words.back();  // nothing of this context is in flight yet
  std::vector<double> pair, kernel;
  for (int i = 0; i < kCalibrationWarmup && r == CUDA_SUCCESS; ++i) held_pair(c, on, empty, e0, e1, w, &r, &call);
  for (int i = 0; i < kCalibrationPairs && r == CUDA_SUCCESS; ++i) {
    const double p = held_pair(c, on, nullptr, e0, e1, w, &r, &call);
    if (r == CUDA_SUCCESS && p >= 0) pair.push_back(p);
    if (r == CUDA_SUCCESS && empty) {
      const double k = held_pair(c, on, empty, e0, e1, w, &r, &call);
      if (r == CUDA_SUCCESS && k >= 0) kernel.push_back(k);
    }
  }
  if (r != CUDA_SUCCESS)
    calibration_failed(c, r, call);
  else
    set_bracket(c, pair, kernel, empty != nullptr, no_kernel);
  if (e0) KC_CU(cuEventDestroy)(e0);
  if (e1) KC_CU(cuEventDestroy)(e1);
  KC_CU(cuStreamDestroy)(own);
}

// The context's hold words (and, for stamps, its stamp slots) in mapped host memory, at
// its first timed launch: false when the words cannot be had (the context disabled, counted).
bool LaunchSampler::alloc_words(Context& c) {
  void* host = nullptr;
  const CUresult r = KC_CU(cuMemHostAlloc)(&host, kWords * sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP);
  if (r != CUDA_SUCCESS || KC_CU(cuMemHostGetDevicePointer)(&c.words_dev, host, 0) != CUDA_SUCCESS) {
    c.disabled = true;
    std::lock_guard<std::mutex> g(mu_);
    ++errors_;
    if (first_error_.empty()) first_error_ = "cuMemHostAlloc / cuMemHostGetDevicePointer for the hold words: " + cu_error_string(r);
    return false;
  }
  c.words = static_cast<std::atomic<uint32_t>*>(host);
  for (uint32_t i = 0; i < kWords; ++i) c.words[i].store(1, std::memory_order_relaxed);
  for (uint32_t i = kWords; i-- > 0;) c.free_words.push_back(i);
  void* stamps = nullptr;  // without them the context's pairs are events (calibrate() says so)
  if (stamps_ && KC_CU(cuMemHostAlloc)(&stamps, 2 * kWords * sizeof(uint64_t), CU_MEMHOSTALLOC_DEVICEMAP) == CUDA_SUCCESS) {
    if (KC_CU(cuMemHostGetDevicePointer)(&c.stamps_dev, stamps, 0) == CUDA_SUCCESS)
      c.stamps = static_cast<std::atomic<uint64_t>*>(stamps);
    else
      KC_CU(cuMemFreeHost)(stamps);
  }
  return true;
}

// A free hold word and `need` events in the pool (made as needed): false when not
// (counted).
bool LaunchSampler::reserve_events(Context& c, size_t need) {
  if (c.free_words.empty() || (c.events.size() < need && c.events_made + need > 2 * size_t(kWords))) {
    std::lock_guard<std::mutex> g(mu_);
    ++no_event_;
    return false;
  }
  while (c.events.size() < need) {
    CUevent e = nullptr;
    const CUresult r = KC_CU(cuEventCreate)(&e, CU_EVENT_DEFAULT);
    if (r != CUDA_SUCCESS) {
      std::lock_guard<std::mutex> g(mu_);
      ++errors_;
      if (first_error_.empty()) first_error_ = "cuEventCreate: " + cu_error_string(r);
      return false;
    }
    c.events.push_back(e);
    ++c.events_made;
  }
  return true;
}

// A Pending (a spare one, else new) with a hold word and, if `need`, a pair of events
// from the pool reserve_events() filled.
LaunchSampler::Pending* LaunchSampler::take_pending(Context& c, size_t need) {
  Pending* p = nullptr;
  if (c.spare.empty()) {
    p = new Pending;
  } else {
    p = c.spare.back();
    c.spare.pop_back();
  }
  p->ctx = &c;
  p->e0 = p->e1 = nullptr;
  if (need) {
    p->e1 = c.events.back();
    c.events.pop_back();
    p->e0 = c.events.back();
    c.events.pop_back();
  }
  p->word = c.free_words.back();
  c.free_words.pop_back();
  return p;
}

// Tracks the streams with timed launches (64 at most) and whether a second thread
// timed one on a stream (end() drops an interleaved sample only there).
void LaunchSampler::note_stream(Context& c, CUstream stream) {
  const auto it = std::find(c.streams.begin(), c.streams.end(), stream);
  const std::thread::id me = std::this_thread::get_id();
  if (it != c.streams.end()) {
    const size_t i = size_t(it - c.streams.begin());
    if (c.stream_thread[i] != me) c.stream_shared[i] = true;
  } else if (c.streams.size() < 64) {
    c.streams.push_back(stream);
    c.stream_thread.push_back(me);
    c.stream_shared.push_back(false);
  }
}

// Holds `stream` until hold word w is set, where the context still holds its streams.
void LaunchSampler::hold_stream(Context& c, CUstream stream, uint32_t w) {
  if (!c.hold.load(std::memory_order_relaxed)) return;
  const CUresult r = KC_CU(cuStreamWaitValue32)(stream, c.words_dev + 4 * w, 1, CU_STREAM_WAIT_VALUE_GEQ);
  if (r != CUDA_SUCCESS) {
    // Stream memory operations unavailable here: time unheld pairs (they include the
    // CPU's launch latency when the stream was idle; the profile says so).
    c.hold.store(false, std::memory_order_relaxed);
    std::lock_guard<std::mutex> g(mu_);
    if (unheld_.empty()) unheld_ = "cuStreamWaitValue32: " + cu_error_string(r);
  }
}

LaunchSampler::Pending* LaunchSampler::begin(CUcontext ctx, CUstream stream, const void* key, double weight,
                                             const unsigned grid[3], const unsigned block[3]) {
  if (!ctx) return nullptr;
  Context* c = context_for(ctx);
  start_watchdog();
  Pending* p = nullptr;
  RelaxedCapture relaxed;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->disabled) return nullptr;
    if (!c->words && !alloc_words(*c)) return nullptr;
    if (!c->calibrated) calibrate(*c, stream);
    poll(*c, 4, false);  // read a few finished pairs back: the pool stays small
    // A pair of events from the pool, unless this context's pairs are stamps.
    const size_t need = c->stamp ? 0 : 2;
    if (!reserve_events(*c, need)) return nullptr;
    p = take_pending(*c, need);
    note_stream(*c, stream);
  }
  p->key = key;
  p->stream = stream;
  p->weight = weight;
  std::memcpy(p->grid, grid, sizeof p->grid);
  std::memcpy(p->block, block, sizeof p->block);
  c->overdue[p->word].store(false, std::memory_order_relaxed);
  c->words[p->word].store(0, std::memory_order_release);
  c->held_since[p->word].store(now_ns(), std::memory_order_release);
  hold_stream(*c, stream, p->word);
  const CUresult r = mark(*c, stream, p->word, false, p->e0);
  if (r == CUDA_SUCCESS) return p;
  // Nothing is left held; this context's launches are counted from now on, not timed.
  c->words[p->word].store(1, std::memory_order_release);
  c->held_since[p->word].store(0, std::memory_order_release);
  std::lock_guard<std::mutex> lock(c->mu);
  c->disabled = true;
  recycle_events(*c, p);
  c->spare.push_back(p);  // its word stays out of the pool: the GPU may not have passed the wait
  std::lock_guard<std::mutex> g(mu_);
  ++errors_;
  if (first_error_.empty())
    first_error_ = std::string(c->stamp ? "the start stamp's launch" : "cuEventRecord") + " on the launch's stream: " + cu_error_string(r);
  return nullptr;
}

void LaunchSampler::end(Pending* p, bool ok, bool interleaved) {
  Context* c = p->ctx;
  CUresult r;
  {
    RelaxedCapture relaxed;
    r = mark(*c, p->stream, p->word, true, p->e1);
  }
  c->words[p->word].store(1, std::memory_order_release);
  c->held_since[p->word].store(0, std::memory_order_release);
  p->ok = ok;
  std::lock_guard<std::mutex> lock(c->mu);
  // Only a stream other threads launch into can hold their launches inside this pair. A
  // thread's first launch of a kernel is always timed, so its begin() marked the stream
  // shared before any launch of its could land here (an untracked stream: assume so).
  const auto it = std::find(c->streams.begin(), c->streams.end(), p->stream);
  p->interleaved = interleaved && (it == c->streams.end() || c->stream_shared[size_t(it - c->streams.begin())]);
  if (r == CUDA_SUCCESS) {
    c->queue.push_back(p);
    return;
  }
  // No end event: the pair cannot be read. Its word stays out of the pool (the GPU may
  // not have passed the wait yet); the events are reusable (re-recording one is fine).
  recycle_events(*c, p);
  c->spare.push_back(p);
  std::lock_guard<std::mutex> g(mu_);
  ++errors_;
  if (first_error_.empty())
    first_error_ = std::string(c->stamp ? "the end stamp's launch" : "cuEventRecord") + " after the launch: " + cu_error_string(r);
}

void LaunchSampler::poll(Context& c, size_t max_reads, bool wait) {
  const uint64_t deadline = now_ns() + 1'000'000'000ull;
  for (size_t n = 0; n < max_reads && !c.queue.empty();) {
    Pending* p = c.queue.front();
    CUresult r = finished(c, p->word, p->e1);
    if (r == CUDA_ERROR_NOT_READY) {
      if (!wait || now_ns() > deadline) return;
      const timespec ts{0, 100 * 1000};
      nanosleep(&ts, nullptr);
      continue;
    }
    c.queue.pop_front();
    ++n;
    double ns = -1;
    if (r == CUDA_SUCCESS && c.stamp) {
      ns = stamped_ns(c, p->word);
      if (ns < 0) r = CUDA_ERROR_INVALID_VALUE;  // a start stamp missing or after the end: never seen
    } else if (r == CUDA_SUCCESS) {
      float ms = 0;
      r = KC_CU(cuEventElapsedTime)(&ms, p->e0, p->e1);
      ns = double(ms) * 1e6;
    }
    const bool overdue = c.overdue[p->word].load(std::memory_order_acquire);
    {
      std::lock_guard<std::mutex> g(mu_);
      if (r != CUDA_SUCCESS) {
        ++errors_;
        if (first_error_.empty())
          first_error_ = std::string("reading a timed launch's ") + (c.stamp ? "stamps" : "events") + ": " + cu_error_string(r);
      } else if (overdue) {
        ++overdue_;
      } else if (!p->ok) {
        ++failed_launches_;
      } else if (p->interleaved) {
        ++interleaved_;
      } else {
        SampleStats& s = stats_[p->key];
        s.add(std::max(0.0, ns - c.bracket_ns), p->weight);
        std::memcpy(s.grid, p->grid, sizeof s.grid);
        std::memcpy(s.block, p->block, sizeof s.block);
      }
    }
    recycle_events(c, p);
    c.free_words.push_back(p->word);
    c.spare.push_back(p);
  }
}

void LaunchSampler::drop_context(CUcontext ctx, bool forget) {
  Context* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (Context* x : contexts_)
      if (x->ctx == ctx && !x->gone) c = x;
  }
  if (!c) return;
  std::lock_guard<std::mutex> lock(c->mu);
  {
    CurrentContext current(ctx);
    RelaxedCapture relaxed;
    poll(*c, SIZE_MAX, true);
  }
  if (!forget) return;
  std::lock_guard<std::mutex> g(mu_);
  unfinished_ += c->queue.size();
  c->queue.clear();
  c->gone = true;  // its events and hold words go with the context
  c->disabled = true;
}

void LaunchSampler::drain(double seconds) {
  std::vector<Context*> all;
  {
    std::lock_guard<std::mutex> lock(mu_);
    all = contexts_;
  }
  const uint64_t deadline = now_ns() + uint64_t(seconds * 1e9);
  for (Context* c : all) {
    std::lock_guard<std::mutex> lock(c->mu);
    if (c->gone || c->queue.empty()) continue;
    CurrentContext current(c->ctx);
    RelaxedCapture relaxed;
    while (!c->queue.empty() && now_ns() < deadline) poll(*c, SIZE_MAX, true);
    std::lock_guard<std::mutex> g(mu_);
    unfinished_ += c->queue.size();
  }
}

void LaunchSampler::start_watchdog() {
  if (watchdog_started_.exchange(true)) return;
  try {
    std::thread(&LaunchSampler::watchdog, this).detach();
  } catch (const std::exception&) {
    // No thread: a launch blocked behind its own hold would wait for ever. Never hold.
    std::lock_guard<std::mutex> lock(mu_);
    for (Context* c : contexts_) c->disabled = true;
    ++errors_;
    if (first_error_.empty()) first_error_ = "the sampled profile's watchdog thread could not start";
  }
}

// Releases holds older than kOverdueNs. Makes no driver call: it must run even when every
// other thread waits inside the driver.
void LaunchSampler::watchdog(LaunchSampler* self) {
  std::vector<Context*> all;
  for (;;) {
    const timespec ts{0, 1'000'000};
    nanosleep(&ts, nullptr);
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (all.size() != self->contexts_.size()) all = self->contexts_;
    }
    const uint64_t now = now_ns();
    for (Context* c : all) {
      if (!c->words) continue;
      for (uint32_t i = 0; i < kWords; ++i) {
        const uint64_t since = c->held_since[i].load(std::memory_order_acquire);
        if (!since || now - since < kOverdueNs) continue;
        c->overdue[i].store(true, std::memory_order_release);
        c->words[i].store(1, std::memory_order_release);
        c->held_since[i].store(0, std::memory_order_release);
      }
    }
  }
}

std::unordered_map<const void*, SampleStats> LaunchSampler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string LaunchSampler::summary_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  JsonWriter w;
  w.begin_object().field("bracket", bracket_mode_);
  double bracket = 0, pair = -1, kernel = -1;
  std::string calibration, timer;
  bool on_app = false;
  size_t streams = 0, contexts = 0, shared = 0;
  for (const Context* c : contexts_) {
    if (!c->calibrated) continue;
    ++contexts;
    if (calibration.empty() || c->bracket_ns > bracket) {  // the context with the largest bracket speaks
      bracket = c->bracket_ns;
      pair = c->pair_ns;
      kernel = c->empty_kernel_pair_ns;
      calibration = c->calibration;
      timer = c->timer;
      on_app = c->calibrated_on_app;
    }
    streams = std::max(streams, c->streams.size());
    shared += size_t(std::count(c->stream_shared.begin(), c->stream_shared.end(), true));
  }
  w.field("bracket_ns", bracket).field("calibration", calibration).field("timer", timer).field("pair_ns", pair);
  w.field("calibrated_on", on_app ? "app" : "own");
  w.field("empty_kernel_pair_ns", kernel).field("empty_kernel_ns", empty_kernel_ns_);
  w.field("contexts", uint64_t(contexts)).field("streams", uint64_t(streams));
  w.field("errors", errors_).field("first_error", first_error_).field("no_event", no_event_);
  w.field("overdue", overdue_).field("unfinished", unfinished_).field("failed_launches", failed_launches_);
  w.field("interleaved", interleaved_).field("shared_streams", uint64_t(shared));
  w.field("unheld", unheld_);
  w.end_object();
  return w.str();
}

std::string LaunchSampler::timing_json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string calibration;
  for (const Context* c : contexts_)
    if (c->calibrated && calibration.empty()) calibration = c->calibration;
  JsonWriter w;
  w.begin_object().field("used", "sampled").field("held", unheld_.empty());
  if (!unheld_.empty()) w.field("unheld", unheld_);
  w.field("calibration", calibration).end_object();
  return w.str();
}

}  // namespace kc
