// CPU unit tests of a sequence capture's bookkeeping (sequence_window.cpp): when the
// window opens and closes (NVTX instances, runs bounded by a count or a kernel), and how
// the steps, streams and events of the window are recorded and written.
//
// Prints one JSON object of facts for tests/test_sequence_units.py; exits non-zero when a
// check failed (each failure is named on stderr).
#include <cstdio>
#include <string>

#include "sequence_window.hpp"

using namespace kc;

#include "unit_check.hpp"

int main() {
  // nvtx: instance 1 of a range; thread 7 opens it, thread 8's matches are not instances
  // while it is pending or open, and only the owner's end closes it.
  {
    SequenceTrigger t(1, 0, false);
    CHECK(!t.on_range(7, false, true) && t.state() == SeqState::Waiting);  // instance 0
    CHECK(!t.on_range(7, true, false));
    CHECK(!t.on_range(7, false, true) && t.state() == SeqState::Pending && t.owned_by(7));  // instance 1
    CHECK(!t.on_range(8, false, true) && t.instances_seen() == 2);  // not an instance while pending
    CHECK(!t.on_work(8) && t.on_work(7));
    t.opened(7);
    CHECK(!t.on_launch(false) && !t.on_launch(true) && t.launches() == 2);  // nvtx: launches never close it
    CHECK(!t.on_range(8, true, false));  // another thread's end
    CHECK(t.on_range(7, true, true) == false);  // no change
    CHECK(t.on_range(7, true, false));  // the owner's end closes it
  }
  // An instance without GPU work fails (the caller names it).
  {
    SequenceTrigger t(0, 0, false);
    t.on_range(3, false, true);
    CHECK(t.state() == SeqState::Pending);
    CHECK(!t.on_range(3, true, false) && t.state() == SeqState::Failed);
  }
  // run: --count 3 closes at the third launch; --until closes at a later matching launch, never the first.
  {
    SequenceTrigger t(0, 3, false);
    t.opened(1);
    CHECK(!t.on_launch(false) && !t.on_launch(false) && t.on_launch(false));
    SequenceTrigger u(0, 0, true);
    u.opened(1);
    CHECK(!u.on_launch(true) && !u.on_launch(false) && u.on_launch(true) && u.launches() == 3);
    SequenceTrigger both(0, 5, true);
    both.opened(1);
    CHECK(!both.on_launch(false) && both.on_launch(true));  // until first
  }
  // The log: streams numbered at first use (legacy, per-thread, user with flags), events
  // recorded inside the window, a wait on an event from before it dropped.
  SequenceLog log;
  const int legacy = log.stream(0, false, true);
  const int legacy2 = log.stream(1, false, true);  // CU_STREAM_LEGACY is the same stream
  const int pts = log.stream(0, true, true);
  const int user = log.stream(0xabc0, false, false);
  CHECK(legacy == 0 && legacy2 == 0 && pts == 1 && user == 2);
  CHECK(log.known_stream(0xabc0, false) && !log.known_stream(0xdef0, false));
  CHECK(log.streams()[2].kind == "user" && !log.streams()[2].blocking && log.streams()[0].kind == "legacy");
  log.launch(0, user, "cuLaunchKernel");
  log.wait("cuStreamWaitEvent", legacy, 0xe1);  // recorded before the window: dropped
  log.record("cuEventRecord", 0xe1, user);
  log.wait("cuStreamWaitEvent", legacy, 0xe1);
  std::vector<ChunkHash> payload(2);
  payload[1].stored = true;
  payload[1].hash = 0x1234;
  log.copy("cuMemcpyHtoDAsync_v2", "h2d", 0x7f0000001000, 0, (4u << 20) + 16, legacy, payload);
  log.copy("cuMemcpyDtoDAsync_v2", "d2d", 0x7f0000002000, 0x7f0000001000, 64, user);
  log.memset("cuMemsetD32Async", 0x7f0000003000, 0xdeadbeef, 4, 16, 1, 0, pts);
  log.sync_event("cuEventSynchronize", 0xe2);  // never recorded inside: nothing to wait for
  log.sync_stream("cuStreamSynchronize", user);
  log.sync_context("cuCtxSynchronize");
  log.launch(1, legacy, "cuLaunchKernelEx");
  CHECK(log.dropped_waits() == 1 && log.events() == 1 && log.launches() == 2);
  CHECK(log.steps().size() == 9);
  log.refuse("cuMemcpy2DAsync_v2 (step 9)");
  log.refuse("later");
  CHECK(log.refusal() == "cuMemcpy2DAsync_v2 (step 9)");
  JsonWriter w;
  w.begin_object();
  w.field("failures", failures);
  w.key("log").begin_object();
  log.write_json(w);
  w.end_object().end_object();
  std::printf("%s\n", w.str().c_str());
  return failures ? 1 : 0;
}
