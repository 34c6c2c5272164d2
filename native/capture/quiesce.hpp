// The quiescing rule (DESIGN fact 7): while one dispatch is captured, no other thread
// may enqueue GPU work between the pre- and the post-snapshot, and work in flight is
// drained before the pre-state. Every watched enqueueing call is a "reader" from its
// API entry to its exit; the capturing thread is the "writer" from the target's entry
// to its exit.
//
// Readers never touch a shared cache line: each publishes "inside an enqueue" in its own
// ThreadSlot (thread_slots.hpp). The writer raises `pending`, then waits until every
// other slot's flag is 0; a reader that finds `pending` raised drops its flag and
// sleeps until the capture is over. The two sides form a Dekker pair —
//   reader: inside = 1; FENCE; if (pending) back off      (enter)
//   writer: pending = 1; FENCE; wait while inside != 0    (lock)
// — so at least one of them sees the other's store: either the writer waits for the
// reader, or the reader backs off before its call reaches the driver.
// A plain launch's wrapper does the reader's half itself, with the same stores and loads
// (entry_abi.hpp; `pending` is then the Gate's word), and takes the full path, which
// waits, when it finds `pending` raised.
//
// The reader's FENCE is the costly half (a locked instruction, ~20 cycles). Where the
// kernel has membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) (Linux >= 4.14) it moves to the
// writer: the syscall makes every running thread of the process execute a full barrier,
// so the reader needs only a compiler barrier (the "asymmetric fence" of liburcu and
// folly). Without it, or when registering for it fails, readers use a seq_cst store.
//
// Why it holds (docs/interposer.md, "Quiescing rule", has the longer argument):
// * Registration: a thread publishes its slot (a seq_cst CAS on the list head) before
//   its first flag store. A writer that reads the head after its fence either sees the
//   slot, or the slot's publication, flag store and pending load all come after the
//   writer's fence, and that load sees pending = 1.
// * Reuse and exit: a slot is released only by its exiting thread (inside no call, flag
//   0); a slot in the list is scanned whoever owns it.
// * Nesting: only the outermost enqueueing call of a thread touches the flag
//   (ThreadState::shared_depth).
// * The capturing thread skips its own slot (it may be inside an outer call itself).
// * One writer at a time (a set's captures on several threads queue on writer_mu_).
// * Fork: a child of a CUDA process never reaches the dispatcher (inject.cpp g_forked),
//   so the slots and flags it inherits are never read or waited on there.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "thread_slots.hpp"

namespace kc {

class Quiesce {
 public:
  // `pending`: the word readers check, where the wrappers' launch fast path reads it
  // (entry_abi.hpp Gate::pending); null: this object's own.
  explicit Quiesce(std::atomic<uint32_t>* pending = nullptr);
  Quiesce(const Quiesce&) = delete;
  Quiesce& operator=(const Quiesce&) = delete;

  // Reader: the calling thread's outermost enqueueing call begins / ends.
  void enter(ThreadSlot& mine) {
    if (asymmetric_) {
      mine.inside.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);  // the writer's membarrier is the fence
    } else {
      mine.inside.store(1, std::memory_order_seq_cst);
    }
    if (__builtin_expect(pending_->load(std::memory_order_seq_cst) != 0, 0)) wait_out(mine);
  }
  static void exit(ThreadSlot& mine) { mine.inside.store(0, std::memory_order_release); }
  // The same for threads without a slot (ThreadSlots::claim failed): one shared count.
  void enter_shared();
  void exit_shared() { shared_inside_.fetch_sub(1, std::memory_order_release); }

  // Writer: returns once no thread but `self` (may be null) is inside an enqueueing
  // call; until unlock() every other thread entering one waits. Empty on success, else
  // why the threads could not be held (nothing is held then).
  std::string lock(const ThreadSlots& slots, const ThreadSlot* self);
  void unlock();

  bool asymmetric() const { return asymmetric_; }

 private:
  void wait_out(ThreadSlot& mine);
  // First and small: a reader reads only these two, and the owner keeps them in the
  // cache line its launches read anyway (inject.cpp State). The rest is written only by
  // captures and by threads without a slot (rare: an allocation failed).
  bool asymmetric_ = false;
  std::atomic<uint32_t>* pending_;  // also the futex word waiting readers sleep on
  std::atomic<uint32_t> own_pending_{0};
  std::atomic<uint32_t> shared_inside_{0};
  std::mutex writer_mu_;
};

}  // namespace kc
