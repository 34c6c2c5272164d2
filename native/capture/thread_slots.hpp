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

namespace kc {

// Per (thread, kernel) state of the sampled profile (launch_sampler.hpp), owned by the thread.
struct SampleSchedule {
  uint64_t next = 1;    // this thread's launch number (1-based) of the kernel to time next
  double weight = 1.0;  // 1/p of the gap that ends there
};

struct alignas(64) ThreadSlot {
  // Inside an enqueueing call (outermost) while a capture may come: read by the
  // capturing thread (quiesce.hpp). In the first cache line with `launches`: every launch
  // writes both, and one line is cheaper than two (issue 31: the armed path's cost on the
  // H200 is the lines it touches). The capturing thread reads `inside` only while it
  // waits for the others, which by then launch nothing new.
  std::atomic<uint32_t> inside{0};
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
  std::atomic<uint64_t> launches{0};
  // The sampled profile's interleaving check (inject.cpp, sampled_exit): cuGraphLaunch
  // calls, and the returns of every launch whose entry was counted.
  std::atomic<uint64_t> graph_launches{0};
  std::atomic<uint64_t> exits{0};
  // The launch fast path's table is valid for this FuncCache epoch (owner only).
  uint64_t launch_epoch = 0;
  std::atomic<uint64_t> full_path_launches{0};  // with the fast path: launches it declined
  Kernel kernels[kKernels];

  // The launch fast path's table (inject.cpp launch_enter_fast): this thread's plain
  // kernels by launch handle, two to a cache line (one line per lookup), each with its
  // own count (summed with kernels[] by FuncInfo for the report). Handles are valid for
  // launch_epoch; when it changes (a module was unloaded: handles may be reused) they
  // are forgotten, and an entry keeps its count and is never reused. A kernel whose set
  // is full is counted through kernels[] (the full path).
  static constexpr int kLaunchSets = 256;
  struct alignas(32) Launch {
    std::atomic<const void*> handle{nullptr};  // the CUfunction, for the owner's lookups
    std::atomic<const void*> key{nullptr};     // its FuncInfo, for readers
    std::atomic<uint64_t> count{0};
  };
  static size_t launch_set(const void* handle) {
    return size_t((uint64_t(reinterpret_cast<uintptr_t>(handle)) * 0x9E3779B97F4A7C15ull) >> 56);
  }
  // The entry of `handle` (owner only), or null.
  Launch* launch_for(const void* handle) {
    Launch* set = launches_by_handle[launch_set(handle)];
    if (set[0].handle.load(std::memory_order_relaxed) == handle) return &set[0];
    if (set[1].handle.load(std::memory_order_relaxed) == handle) return &set[1];
    return nullptr;
  }
  // Adds `handle` (of FuncInfo `key`) if its set has room; the entry, or null.
  Launch* add_launch(const void* handle, const void* key);
  // A new epoch: forget every handle, keep the counts.
  void forget_launch_handles(uint64_t epoch);
  alignas(64) Launch launches_by_handle[kLaunchSets][2];

  static void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
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
