// The driver calls the interposer watches, in one table (watched_list.hpp): each row
// names a call and what kerncap does with it. Every callback list (what to enable, what holds the
// quiesce lock, what is a launch) derives from this table, so a new launch API is one
// row here plus its decoding in launch_record.cpp.
#pragma once
#include <cupti.h>

#include <cstdint>

namespace kc {

enum CallRole : uint16_t {
  kEnqueue = 1 << 0,        // enqueues GPU work or changes allocations: holds the quiesce lock shared
  kLaunch = 1 << 1,         // a kernel launch (decode_launch knows it)
  kAlloc = 1 << 2,          // tracked allocation / free / mapping (device memory)
  kHostMemory = 1 << 3,     // tracked host allocation (pinned, registered: snapshotted when mapped)
  kModuleLoad = 1 << 4,     // loads a module/library: pairs the loaded cubins with the handle
  kModuleUnload = 1 << 5,   // function handles may be reused afterwards
  kCaptureBegin = 1 << 6,   // a stream capture begins (launches into it do not run now)
  kCaptureEnd = 1 << 7,     // a stream capture ends with a graph
  kGraphLaunch = 1 << 8,    // cuGraphLaunch: counts the graph's target nodes
  kGraphInstantiate = 1 << 9,
  kGraphUpdate = 1 << 10,   // changes an executable graph after instantiation (mirrored onto the model)
  kGraphBuild = 1 << 11,    // adds nodes to a graph (conditional bodies, graph memory)
  // Entry-point interception only: CUPTI reports these as resource events instead.
  kContextDestroy = 1 << 12,  // a context may be destroyed: its regions go
  kKernelNodeAdd = 1 << 13,   // a kernel node entered a graph through the explicit API
  kArray = 1 << 14,           // CUDA array / texture or surface object created or destroyed (array_tracker.hpp)
  kSync = 1 << 15,            // the host waits for GPU work: an ordering a sequence's replay keeps (docs/sequences.md)
  kEntryOnly = kContextDestroy | kKernelNodeAdd,
};

struct WatchedCall {
  CUpti_CallbackId id;
  uint16_t roles;
};

extern const WatchedCall kWatchedCalls[];
extern const size_t kWatchedCallCount;

// The roles of `cbid` (0 when not watched); O(1), valid after init_call_roles().
uint16_t call_roles(CUpti_CallbackId cbid);
void init_call_roles();

}  // namespace kc
