#include "thread_slots.hpp"

#include <cstdint>
#include <new>

namespace kc {

ThreadSlot::Kernel* ThreadSlot::counter_for(const void* key) {
  const size_t start = (reinterpret_cast<uintptr_t>(key) >> 4) % kKernels;
  for (size_t i = 0; i < size_t(kKernels); ++i) {
    Kernel& k = kernels[(start + i) % kKernels];
    const void* have = k.key.load(std::memory_order_relaxed);  // only this thread inserts
    if (have == key) return &k;
    if (!have) {
      k.key.store(key, std::memory_order_release);  // readers see the key with its count at 0 or more
      return &k;
    }
  }
  return nullptr;
}

ThreadSlot::Launch* ThreadSlot::add_launch(const void* handle, const void* key) {
  Launch* set = launches_by_handle[kc_entry::launch_set(handle)];
  for (int i = 0; i < 2; ++i) {
    if (set[i].handle.load(std::memory_order_relaxed) == handle) return &set[i];
    if (!set[i].key.load(std::memory_order_relaxed)) {  // never used (a forgotten one keeps its key)
      set[i].key.store(key, std::memory_order_release);  // readers see the key with its count at 0 or more
      set[i].handle.store(handle, std::memory_order_relaxed);
      return &set[i];
    }
  }
  return nullptr;
}

void ThreadSlot::forget_launch_handles(uint64_t epoch) {
  for (auto& set : launches_by_handle)
    for (Launch& e : set) e.handle.store(nullptr, std::memory_order_relaxed);
  launch_epoch = epoch;
}

ThreadSlots::ThreadSlots() { have_key_ = pthread_key_create(&key_, &ThreadSlots::release) == 0; }

void ThreadSlots::release(void* slot) {
  // The thread is exiting, so it is inside no call: its flag is 0 and stays 0.
  static_cast<ThreadSlot*>(slot)->owned.store(false, std::memory_order_release);
}

ThreadSlot* ThreadSlots::claim() {
  ThreadSlot* mine = nullptr;
  for (ThreadSlot* s = head(); s && !mine; s = s->next) {
    bool expected = false;
    if (!s->owned.load(std::memory_order_relaxed) &&
        s->owned.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      mine = s;
  }
  if (!mine) {
    mine = new (std::nothrow) ThreadSlot;
    if (!mine) return nullptr;
    mine->owned.store(true, std::memory_order_relaxed);
    ThreadSlot* old = head_.load(std::memory_order_relaxed);
    do {
      mine->next = old;
    } while (!head_.compare_exchange_weak(old, mine, std::memory_order_seq_cst, std::memory_order_relaxed));
  }
  // Without a key the slot is never released (a thread that exits keeps it): wasteful
  // in an app that churns threads, never wrong.
  if (have_key_) pthread_setspecific(key_, mine);
  return mine;
}

uint64_t ThreadSlots::launches() const {
  uint64_t n = 0;
  for (const ThreadSlot* s = head(); s; s = s->next) n += s->launches.load(std::memory_order_relaxed);
  return n;
}

uint64_t ThreadSlots::launches_and_graph_launches() const {
  uint64_t n = 0;
  for (const ThreadSlot* s = head(); s; s = s->next)
    n += s->launches.load(std::memory_order_relaxed) + s->graph_launches.load(std::memory_order_relaxed);
  return n;
}

uint64_t ThreadSlots::exits() const {
  uint64_t n = 0;
  for (const ThreadSlot* s = head(); s; s = s->next) n += s->exits.load(std::memory_order_relaxed);
  return n;
}

uint64_t ThreadSlots::full_path_launches() const {
  uint64_t n = 0;
  for (const ThreadSlot* s = head(); s; s = s->next) n += s->full_path_launches.load(std::memory_order_relaxed);
  return n;
}

std::unordered_map<const void*, uint64_t> ThreadSlots::kernel_counts() const {
  std::unordered_map<const void*, uint64_t> out;
  for (const ThreadSlot* s = head(); s; s = s->next) {
    for (const ThreadSlot::Kernel& k : s->kernels)
      if (const void* key = k.key.load(std::memory_order_acquire)) out[key] += k.count.load(std::memory_order_relaxed);
    for (const auto& set : s->launches_by_handle)
      for (const ThreadSlot::Launch& e : set)
        if (const void* key = e.key.load(std::memory_order_acquire)) out[key] += e.count.load(std::memory_order_relaxed);
  }
  return out;
}

}  // namespace kc
