// One slot per thread that calls the driver through kerncap: the quiesce flag
// (quiesce.hpp) and the thread's launch counters, each written only by its thread.
//
// Why per thread: a flag or counter shared by every launching thread is a cache line
// that bounces between cores on every launch (two threads launching at once cost
// +255 ns per launch with a shared reader-writer lock and shared counters, docs/facts.md
// §25). A slot lives in its own cache lines; its thread updates it with plain loads and
// stores; the rare readers (a capture, the exit report) sum over every slot.
//
// Slots are never freed (a capturing thread or a report may be reading one while its
// thread exits) and are reused: a thread's slot is released at its exit (a pthread key
// destructor) and claimed by the next new thread. Counters carry over on reuse, which
// is what a process-wide sum wants.
#pragma once
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <unordered_map>

#include "entry_abi.hpp"

namespace kc {

// Per (thread, kernel) state of the sampled profile (launch_sampler.hpp), owned by the thread.
struct SampleSchedule {
  uint64_t next = 1;    // this thread's launch number (1-based) of the kernel to time next
  double weight = 1.0;  // 1/p of the gap that ends there
};

// The first line (kc_entry::SlotHot: the quiesce flag `inside`, `launches`, the table's
// epoch) is what the wrappers' launch fast path writes (entry_abi.hpp), one line for the
// hot counters (on a CPU each line a launch touches costs a miss, docs/facts.md §34; on
// the H200 the fast path's lines measured ~0 ns, §36). The capturing thread reads
// `inside` only while it waits for the others, which by then launch nothing new.
struct alignas(64) ThreadSlot : kc_entry::SlotHot {
  std::atomic<bool> owned{false};
  ThreadSlot* next = nullptr;  // the registry's list; set before the slot is published

  // Launch counters: written by the owner only, so a relaxed load + store (no locked
  // instruction); readers sum them. Per-kernel ones are keyed by an address that stays
  // valid for the process's life (FuncInfo entries are retired, never freed).
  // Enough for the distinct kernels one thread of a large model launches; beyond, a
  // kernel is counted on its shared counter (and sampled from there).
  static constexpr int kKernels = 512;
  struct Kernel {
    std::atomic<const void*> key{nullptr};
    std::atomic<uint64_t> count{0};
    SampleSchedule schedule;  // owner only
  };
  // The sampled profile's interleaving check (inject.cpp, sampled_exit): cuGraphLaunch
  // calls, and the returns of every launch whose entry was counted.
  std::atomic<uint64_t> graph_launches{0};
  std::atomic<uint64_t> exits{0};
  std::atomic<uint64_t> full_path_launches{0};  // with the fast path: launches it declined
  Kernel kernels[kKernels];

  // The launch fast path's table (entry_abi.hpp): this thread's plain kernels by launch
  // handle, each with its own count (summed with kernels[] by FuncInfo for the report).
  // Handles are valid for launch_epoch; when it changes (a module was unloaded: handles
  // may be reused) they are forgotten, and an entry keeps its count and is never reused.
  // A kernel whose set is full is counted through kernels[] (the full path).
  using Launch = kc_entry::FastLaunch;
  // Adds `handle` (of FuncInfo `key`) if its set has room; the entry, or null.
  Launch* add_launch(const void* handle, const void* key);
  // A new epoch: forget every handle, keep the counts.
  void forget_launch_handles(uint64_t epoch);
  alignas(64) kc_entry::LaunchTable launches_by_handle;

  static void bump(std::atomic<uint64_t>& c, uint64_t n = 1) { kc_entry::bump(c, n); }
  // This thread's entry for `key` (inserted on first use); null when the table is full.
  Kernel* counter_for(const void* key);
};

class ThreadSlots {
 public:
  ThreadSlots();
  ThreadSlots(const ThreadSlots&) = delete;
  ThreadSlots& operator=(const ThreadSlots&) = delete;

  // The calling thread's slot: a free one is reused, else a new one is published.
  // Null only when memory is exhausted (callers fall back to shared counters). Call
  // once per thread and keep the pointer (ThreadState): this is the slow path.
  ThreadSlot* claim();

  // The first slot of the list; each slot's `next` leads to the older ones. A slot
  // published after this load is not in the list: quiesce.hpp says why that is safe.
  ThreadSlot* head() const { return head_.load(std::memory_order_seq_cst); }

  // Sums over every slot: launches, and per-kernel counts by key.
  uint64_t launches() const;
  uint64_t launches_and_graph_launches() const;
  uint64_t exits() const;
  uint64_t full_path_launches() const;
  std::unordered_map<const void*, uint64_t> kernel_counts() const;

 private:
  static void release(void* slot);
  std::atomic<ThreadSlot*> head_{nullptr};
  pthread_key_t key_{};
  bool have_key_ = false;
};

}  // namespace kc
