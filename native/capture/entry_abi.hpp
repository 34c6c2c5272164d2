// The launch fast path between libkerncap_entry.so and libkerncap_inject.so (issue 31,
// docs/interposer.md "The launch fast path").
//
// Between two launches the real driver runs ~4 us of code over a lot of memory, so
// whatever kerncap touches per launch is cold every time: each distinct cache line,
// code line, indirect call and TLS lookup costs a miss (docs/facts.md §34). Most of an
// app's launches are not the target's and need only counting and the quiescing flag, so
// the wrapper of a kernel launch first offers it to the injection library's LaunchEnter:
// one call, no CUpti_CallbackData, no __tls_get_addr (the injection library is dlopened,
// its own thread_local is dynamic TLS; its per-thread state lives in the block below,
// in libkerncap_entry.so's initial-exec TLS, and is passed by pointer). Anything that
// needs more (a handle not cached yet, the target, sequences, profile mode) is refused
// and takes the full path, CUpti_CallbackData and both callbacks, as before.
#pragma once
#include <cuda.h>
#include <cupti.h>

#include <cstddef>

namespace kc_entry {

// Both libraries are built from one tree; a mismatch (an old libkerncap_entry.so found
// first) just means no fast path and the injection library's own TLS.
constexpr int kAbi = 1;

// Bytes of per-thread storage libkerncap_entry.so keeps for the injection library
// (inject.cpp ThreadState, zero at thread start), 64-aligned.
constexpr size_t kThreadBlock = 1024;

// What LaunchEnter did with a launch.
enum LaunchVerdict : int {
  kFull = 0,  // nothing: take the full path (entry and exit callbacks)
  kDone = 1,  // handled; nothing to do when the launch returns
  kExit = 2,  // handled; call LaunchExit(thread) when the launch returns
};

// `ctx`: what the injection library attached with (its state: no load of a global);
// `thread`: the calling thread's block; `f`: the launch's function (its params' f).
using LaunchEnter = int (*)(void* ctx, void* thread, CUpti_CallbackId cbid, CUfunction f);
using LaunchExit = void (*)(void* ctx, void* thread);

}  // namespace kc_entry
