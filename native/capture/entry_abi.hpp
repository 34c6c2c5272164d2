// The launch fast path between libkerncap_entry.so and libkerncap_inject.so (issue 31,
// docs/interposer.md "The launch fast path").
//
// Between two launches the real driver runs ~4 us of code over a lot of memory, so
// whatever kerncap touches per launch is cold every time: each distinct cache line,
// code line, indirect call and TLS lookup costs a miss (docs/facts.md §34, on a CPU; on
// the H200 this path's reads and counts cost ~0 ns and its driver call around the flag
// the rest, §36). Most of an app's launches are not the target's and need only
// counting and the quiescing flag, so the wrapper of a kernel launch does that itself,
// inline, with data the injection library laid out for it:
//   * Gate, in the wrapper's own cache line (libkerncap_entry.so's hooks): on or off,
//     the function cache's epoch, armed, and the quiesce's pending word;
//   * ThreadHot, the first bytes of the calling thread's block (its initial-exec TLS,
//     which the injection library uses for its ThreadState): the thread's slot and table;
//   * SlotHot and FastLaunch, the first line of the thread's slot (thread_slots.hpp) and
//     its table of plain kernels by launch handle, each with its count.
// No call, no CUpti_CallbackData, no __tls_get_addr. Anything it cannot settle (a handle
// not in the table, the target, a capture pending, the fast path off: sequences, profile
// mode, a fork child, the bench's decomposition) takes the full path, CUpti_CallbackData
// and both callbacks, which also fills the table.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kc_entry {

// Both libraries are built from one tree; a mismatch (an old libkerncap_entry.so found
// first) just means no fast path and the injection library's own TLS.
constexpr int kAbi = 2;

// Bytes of per-thread storage libkerncap_entry.so keeps for the injection library
// (inject.cpp ThreadState, zero at thread start), 64-aligned.
constexpr size_t kThreadBlock = 1024;

// Set by the injection library, read by every launch wrapper (entry_hooks.cpp Hooks).
struct Gate {
  // The function cache's epoch (inject.cpp: this is the cache's own word, so an unload
  // that may free launch handles bumps it before any launch can find a stale one).
  std::atomic<uint64_t> epoch{1};
  // The quiesce's pending word and futex (quiesce.hpp): read right after the flag store.
  std::atomic<uint32_t> pending{0};
  std::atomic<bool> on{false};    // plain launches take the fast path
  std::atomic<bool> armed{false}; // a capture may come: raise the slot's flag around a launch
  std::atomic<bool> fence{true};  // the flag store needs a full fence (no membarrier)
};

// A plain kernel this thread launched (ThreadSlot's table), two to a cache line.
// `handle` is for the owner's lookups, `key` (its FuncInfo) for readers that sum counts.
struct alignas(32) FastLaunch {
  std::atomic<const void*> handle{nullptr};
  std::atomic<const void*> key{nullptr};
  std::atomic<uint64_t> count{0};
};
constexpr int kLaunchSets = 256;
using LaunchTable = FastLaunch[kLaunchSets][2];

inline size_t launch_set(const void* handle) {
  return size_t((uint64_t(reinterpret_cast<uintptr_t>(handle)) * 0x9E3779B97F4A7C15ull) >> 56);
}
// The entry of `handle` (owner only), or null: one cache line.
inline FastLaunch* launch_for(LaunchTable& table, const void* handle) {
  FastLaunch* set = table[launch_set(handle)];
  if (set[0].handle.load(std::memory_order_relaxed) == handle) return &set[0];
  if (set[1].handle.load(std::memory_order_relaxed) == handle) return &set[1];
  return nullptr;
}

// A counter written by its owner only: a relaxed load and store, no locked instruction.
inline void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
  c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}

// The first line of a ThreadSlot: what a plain launch writes.
struct SlotHot {
  std::atomic<uint32_t> inside{0};     // the quiesce flag (quiesce.hpp)
  std::atomic<uint64_t> launches{0};   // every launch of the thread
  uint64_t launch_epoch = 0;           // the table is valid for this Gate::epoch (owner only)
};

// The first bytes of the thread block (inject.cpp ThreadState derives from it).
struct ThreadHot {
  bool guard;         // kerncap itself is calling the driver: not the app's calls
  int shared_depth;   // nesting of enqueueing calls while armed (the outermost sets the flag)
  SlotHot* fast_slot;        // the thread's slot, once claimed (null before)
  LaunchTable* fast_table;   // its table
};

}  // namespace kc_entry
