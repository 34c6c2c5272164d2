#include "quiesce.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define KC_PAUSE() _mm_pause()
#else
#define KC_PAUSE() std::atomic_signal_fence(std::memory_order_seq_cst)
#endif

namespace kc {
namespace {

// <linux/membarrier.h> values, spelled out so an old header does not matter.
constexpr int kMembarrierPrivateExpedited = 1 << 3;
constexpr int kMembarrierRegisterPrivateExpedited = 1 << 4;

long membarrier(int cmd) {
#ifdef SYS_membarrier
  return syscall(SYS_membarrier, cmd, 0, 0);
#else
  (void)cmd;
  errno = ENOSYS;
  return -1;
#endif
}

void futex_wait(std::atomic<uint32_t>* word, uint32_t value) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, value, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// A reader inside an enqueueing call leaves within microseconds, but may block in the
// driver (a synchronous copy waiting for the GPU): spin briefly, then yield, then sleep.
void backoff(unsigned& round) {
  if (round < 64) {
    KC_PAUSE();
  } else if (round < 256) {
    sched_yield();
  } else {
    const timespec ts{0, 50 * 1000};
    nanosleep(&ts, nullptr);
  }
  ++round;
}

}  // namespace

Quiesce::Quiesce(std::atomic<uint32_t>* pending) : pending_(pending ? pending : &own_pending_) {
  // Registered once, before any reader can rely on it (the dispatcher is armed after the
  // State that holds this is constructed); it never changes afterwards.
  asymmetric_ = membarrier(kMembarrierRegisterPrivateExpedited) == 0;
}

void Quiesce::wait_out(ThreadSlot& mine) {
  for (;;) {
    mine.inside.store(0, std::memory_order_release);  // the writer must not wait for us
    while (pending_->load(std::memory_order_acquire) != 0) futex_wait(pending_, 1);
    if (asymmetric_) {
      mine.inside.store(1, std::memory_order_relaxed);
      std::atomic_signal_fence(std::memory_order_seq_cst);
    } else {
      mine.inside.store(1, std::memory_order_seq_cst);
    }
    if (pending_->load(std::memory_order_seq_cst) == 0) return;  // else another capture began: wait again
  }
}

void Quiesce::enter_shared() {
  for (;;) {
    shared_inside_.fetch_add(1, std::memory_order_seq_cst);
    if (pending_->load(std::memory_order_seq_cst) == 0) return;
    shared_inside_.fetch_sub(1, std::memory_order_release);
    while (pending_->load(std::memory_order_acquire) != 0) futex_wait(pending_, 1);
  }
}

std::string Quiesce::lock(const ThreadSlots& slots, const ThreadSlot* self) {
  writer_mu_.lock();
  pending_->store(1, std::memory_order_seq_cst);
  if (asymmetric_ && membarrier(kMembarrierPrivateExpedited) != 0) {
    // Registered at start-up, so this does not happen; if it does, readers that passed
    // their check without a fence may be inside: hold nothing rather than guess.
    const int err = errno;
    unlock();
    return std::string("membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed: ") + std::strerror(err) +
           "; kerncap could not hold the app's other threads at their driver calls";
  }
  for (const ThreadSlot* s = slots.head(); s; s = s->next) {
    if (s == self) continue;
    unsigned round = 0;
    while (s->inside.load(std::memory_order_seq_cst) != 0) backoff(round);
  }
  // Threads without a slot (after an allocation failure). A slotless capturing thread
  // is counted here only if its target launch is nested in an outer enqueueing call.
  unsigned round = 0;
  while (shared_inside_.load(std::memory_order_seq_cst) != 0) backoff(round);
  return std::string();
}

void Quiesce::unlock() {
  pending_->store(0, std::memory_order_release);
  futex_wake_all(pending_);
  writer_mu_.unlock();
}

}  // namespace kc
