// The quiescing lock (DESIGN fact 7): while one dispatch is captured, no other thread
// may enqueue GPU work between the pre- and post-snapshot. Every watched enqueueing
// call holds it shared from its API entry to its exit; the capturing thread holds it
// exclusively from the target launch's entry to its exit. Writer-preferring, so a
// stream of launches from other threads cannot starve the capture.
#pragma once
#include <pthread.h>

namespace kc {

class QuiesceLock {
 public:
  QuiesceLock() {
    pthread_rwlockattr_t attr;
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    pthread_rwlock_init(&lock_, &attr);
    pthread_rwlockattr_destroy(&attr);
  }
  QuiesceLock(const QuiesceLock&) = delete;
  QuiesceLock& operator=(const QuiesceLock&) = delete;
  void lock_shared() { pthread_rwlock_rdlock(&lock_); }
  void unlock_shared() { pthread_rwlock_unlock(&lock_); }
  void lock() { pthread_rwlock_wrlock(&lock_); }
  void unlock() { pthread_rwlock_unlock(&lock_); }

 private:
  pthread_rwlock_t lock_;
};

}  // namespace kc
