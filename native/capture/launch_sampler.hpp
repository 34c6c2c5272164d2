// profile mode without CUPTI (`profile --sampled`; `--exact` is CUPTI's activity records,
// profiler.hpp): every launch is counted through the entry points, and a sample of each
// kernel's launches is timed between two stamps of the GPU's global timer written by
// kerncap's one-thread kernel on the launch's own stream around it (docs/interposer.md,
// "profile mode"; KERNCAP_PROFILE_TIMER=events: a pair of CUDA events instead).
//
// A sampled launch, on the app's thread:
//   host word = 0; cuStreamWaitValue32(stream, word >= 1)   the stream is held ...
//   kc_sampler_stamp(start slot)                           (or cuEventRecord(e0))
//   <the app's launch>
//   kc_sampler_stamp(end slot); host word = 1               ... until the launch is in
// so the start stamp runs when the kernel is already queued behind it: on an idle stream
// an unheld one would run at once and the pair would time the CPU's launch latency too.
// Stamps, not events: an event pair around cub's DeviceCompactInitKernel read ~3 us more
// than CUPTI in every sample, stamps ~0.3 us (docs/facts.md §37).
// A watchdog thread (no driver calls) releases a hold left for more than 5 ms (a
// launch blocked in the driver on something that needs the GPU: never a deadlock, the
// sample is dropped). Before a kernel's first launch is held its code is loaded
// (cuFuncLoad; lazy loading would load it inside the launch, which may wait for the
// context), and a graph is uploaded before its first held launch; cooperative launches
// are never held.
//
// Each sample loses the calibration (once per context, on the first timed launch's
// stream when nothing is queued there, else on one of kerncap's own):
// the median held pair around kerncap's empty kernel less CUPTI's time of that kernel,
// at least the median held pair around nothing; what a held pair adds to any kernel
// (the front end's event and launch work, the end event's wait for idle).
//
// Samples are read back lazily: before a new sample a thread polls a few of its
// context's oldest pending pairs (a load of the end slot, or cuEventQuery; never blocking); at exit every context
// is drained. Never while any stream capture is in progress in the process (nothing is
// recorded into a capturing stream, and kerncap's calls run in relaxed capture mode).
//
// Sampling: a thread times its launches of a kernel with probability p = min(1, K/n) at
// its n-th launch (geometric gaps, so nothing periodic in the app aliases with it);
// each kernel's total is the Hajek estimate calls x (sum w t / sum w), w = 1/p, with its
// variance, so a sample skipped for any reason above does not bias it.
#pragma once
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "sample_stats.hpp"
#include "thread_slots.hpp"  // SampleSchedule

namespace kc {

class LaunchSampler {
 public:
  // One held, bracketed launch in flight (between its API entry and exit).
  struct Pending;

  // Reads KERNCAP_PROFILE_BRACKET (auto | none | a number of ns),
  // KERNCAP_PROFILE_EMPTY_KERNEL_NS, KERNCAP_PROFILE_TIMER (stamps | events) and
  // KERNCAP_PROFILE_CALIBRATE (app | own).
  LaunchSampler();
  LaunchSampler(const LaunchSampler&) = delete;
  LaunchSampler& operator=(const LaunchSampler&) = delete;

  // Should this launch be timed? `n` is this thread's launch number of the kernel (after
  // counting it); advances the schedule when it says yes. `rng` is the thread's state.
  static bool due(SampleSchedule& s, uint64_t n, uint64_t& rng, double* weight);
  // The same without per-thread state (a kernel beyond the thread's slot table): `n` is
  // the process's launch number; an independent draw with p = min(1, K/n) per launch.
  static bool due_shared(uint64_t n, uint64_t& rng, double* weight);
  static constexpr double kAlwaysTimed = 32.0;  // K: a kernel's first 32 launches on a thread are all timed
  // CUPTI's time of an empty <<<1,1>>> kernel on the H200: 594 ns in each of 3 runs
  // (bench/probes/empty_kernel_ns.py, docs/facts.md §33); another GPU: measure it there.
  static constexpr double kEmptyKernelNs = 594.0;

  // At the launch's API entry: holds `stream` and stamps (or records e0). Null when nothing was
  // recorded (no context, the pool exhausted, a driver call failed: counted).
  Pending* begin(CUcontext ctx, CUstream stream, const void* key, double weight, const unsigned grid[3],
                 const unsigned block[3]);
  // At its API exit: stamps the end (or records e1) and releases the stream. `ok`: the launch succeeded;
  // `interleaved`: another thread launched while the pair was open, so a launch of its
  // may sit between e0 and e1 on a stream both use (the sample is dropped, and counted).
  void end(Pending* p, bool ok, bool interleaved = false);

  // The context may be about to be destroyed: read what it has; `forget`: it is, so a
  // later context with the same handle starts afresh (its events die with this one).
  void drop_context(CUcontext ctx, bool forget);
  // At exit: read every pending pair (up to `seconds`), free nothing (the app's
  // teardown may still run).
  void drain(double seconds);

  // Per key (a FuncInfo or a graph's record): what was timed.
  std::unordered_map<const void*, SampleStats> stats() const;
  std::string summary_json() const;  // bracket, errors, dropped samples, streams seen
  // proc-<pid>.json's profile_timing: {"used": "sampled", "held": ..., "calibration": ...}
  // ("held": false, with "unheld" saying why, where a context timed unheld pairs).
  std::string timing_json() const;

 private:
  struct Context;
  Context* context_for(CUcontext ctx);
  void poll(Context& c, size_t max_reads, bool wait);
  void calibrate(Context& c, CUstream app_stream);
  // calibrate()'s steps: the timer, then what its pairs read.
  void choose_timer(Context& c, CUstream own, const std::string& no_kernel) const;
  void calibration_failed(Context& c, CUresult r, const char* call);
  void set_bracket(Context& c, const std::vector<double>& pair, const std::vector<double>& kernel, bool empty,
                   const std::string& no_kernel) const;
  // begin()'s steps, in its order.
  bool alloc_words(Context& c);
  bool reserve_events(Context& c, size_t need);
  static Pending* take_pending(Context& c, size_t need);
  static void note_stream(Context& c, CUstream stream);
  void hold_stream(Context& c, CUstream stream, uint32_t w);
  static double stamped_ns(const Context& c, uint32_t w);  // a stamped pair's ns (-1: unreadable)
  // A pair's start (end false) or end on `stream` for hold word w: kerncap's stamp kernel
  // into the word's slot where the context stamps (the start clears both slots first),
  // else event e recorded. The one place the two timers differ on the way in.
  static CUresult mark(Context& c, CUstream stream, uint32_t w, bool end, CUevent e);
  // Whether the pair of word w has ended: its end slot written, or cuEventQuery(e1).
  static CUresult finished(const Context& c, uint32_t w, CUevent e1);
  static void recycle_events(Context& c, Pending* p);  // a stamped pair holds none
  static double held_pair(Context& c, CUstream stream, CUfunction body, CUevent e0, CUevent e1, uint32_t word,
                          CUresult* err, const char** call);
  void start_watchdog();
  static void watchdog(LaunchSampler* self);

  mutable std::mutex mu_;  // contexts_, stats_ and the counters below
  std::vector<Context*> contexts_;  // never freed: the watchdog reads their hold words
  std::unordered_map<const void*, SampleStats> stats_;
  std::string bracket_mode_ = "auto";
  bool stamps_ = false;            // KERNCAP_PROFILE_TIMER=stamps: pairs of kc_sampler_stamp kernels, not events
  bool calibrate_on_app_ = false;  // KERNCAP_PROFILE_CALIBRATE=app: on the first timed launch's stream
  double bracket_fixed_ns_ = 0;
  // What CUPTI times kerncap's empty kernel at (KERNCAP_PROFILE_EMPTY_KERNEL_NS): given
  // back from the empty kernel's pair, since CUPTI's time of any kernel holds it too.
  double empty_kernel_ns_ = kEmptyKernelNs;
  uint64_t errors_ = 0, no_event_ = 0, overdue_ = 0, unfinished_ = 0, failed_launches_ = 0, interleaved_ = 0;
  std::string first_error_;
  std::string unheld_;  // why some context times unheld pairs (empty: every pair was held)
  std::atomic<bool> watchdog_started_{false};
};

}  // namespace kc
