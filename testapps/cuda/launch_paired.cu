// launch_paired: the paired measure of what kerncap's dispatcher costs a launch
// (bench/paired.py, docs/facts.md). T threads, each on its own non-blocking stream,
// launch in B blocks of N launches: cudart <<<>>> launches of an empty kernel
// ("kernel"), or cudaGraphLaunch of a one-node graph of it ("graph"). Between blocks the
// main thread flips kerncap_bench_passthrough (libkerncap_entry.so, allowed only under
// KERNCAP_BENCH_PASSTHROUGH=1) in ABBA order: a = kerncap's dispatcher, p = the wrapper
// jumping straight to the driver. Without the switch (no kerncap, or kerncap preloaded
// but not attached) every block runs as it is, mode n. KC_PAIRED_ARMED=wrapper: a is the
// wrapper with a dispatcher that does nothing (what the wrapper's own half costs);
// KC_PAIRED_ARMED=apply (under `kerncap apply`): a substitutes the launch, p is the same
// armed path with the redirect held back (mode 3). Each block ends with its stream
// synchronized; one line per block:
//   block=<i> mode=<a|p|n> wall_ns=<block wall> cpu_ns=<CPU of all threads in the block>
//   launch_paired <kernel|graph> [threads=1] [blocks=64] [per_block=4096]
#include <dlfcn.h>
#include <pthread.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/testapp.hpp"

__global__ void kc_paired_tiny() {}

namespace {

struct Shared {
  bool graph = false;
  int threads = 1, blocks = 64, per_block = 4096;
  pthread_barrier_t start, end;
  pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
  std::vector<long long> block_cpu;
};

long long now_ns(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

void* worker(void* arg) {
  Shared& sh = *static_cast<Shared*>(arg);
  cudaStream_t stream;
  TA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraphExec_t exec = nullptr;
  if (sh.graph) {
    cudaGraph_t graph;
    TA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    kc_paired_tiny<<<1, 1, 0, stream>>>();
    TA_CHECK(cudaStreamEndCapture(stream, &graph));
    TA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    TA_CHECK(cudaGraphDestroy(graph));
  }
  // Warm-up outside the blocks: the first launches load the module and fill caches.
  for (int i = 0; i < 256; ++i) {
    if (exec) TA_CHECK(cudaGraphLaunch(exec, stream));
    else kc_paired_tiny<<<1, 1, 0, stream>>>();
  }
  TA_CHECK(cudaStreamSynchronize(stream));
  for (int b = 0; b < sh.blocks; ++b) {
    pthread_barrier_wait(&sh.start);
    const long long c0 = now_ns(CLOCK_THREAD_CPUTIME_ID);
    for (int i = 0; i < sh.per_block; ++i) {
      if (exec) {
        TA_CHECK(cudaGraphLaunch(exec, stream));
      } else {
        kc_paired_tiny<<<1, 1, 0, stream>>>();
      }
    }
    TA_CHECK(cudaGetLastError());
    TA_CHECK(cudaStreamSynchronize(stream));
    const long long c = now_ns(CLOCK_THREAD_CPUTIME_ID) - c0;
    pthread_mutex_lock(&sh.mu);
    sh.block_cpu[b] += c;
    pthread_mutex_unlock(&sh.mu);
    pthread_barrier_wait(&sh.end);
  }
  if (exec) TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaStreamDestroy(stream));
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "kernel") && std::strcmp(argv[1], "graph"))) {
    std::fprintf(stderr, "usage: launch_paired <kernel|graph> [threads] [blocks] [per_block]\n");
    return 2;
  }
  Shared sh;
  sh.graph = !std::strcmp(argv[1], "graph");
  if (argc > 2) sh.threads = std::atoi(argv[2]);
  if (argc > 3) sh.blocks = std::atoi(argv[3]);
  if (argc > 4) sh.per_block = std::atoi(argv[4]);
  if (sh.threads < 1 || sh.threads > 64 || sh.blocks < 1 || sh.per_block < 1) {
    std::fprintf(stderr, "launch_paired: threads 1..64, blocks and per_block >= 1\n");
    return 2;
  }
  TA_CHECK(cudaFree(nullptr));  // the context (and kerncap's injection) before the threads start
  auto passthrough = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "kerncap_bench_passthrough"));
  const bool paired = passthrough && passthrough(0) == 0;
  std::printf("switch=%s\n", paired ? "paired" : passthrough ? "refused" : "absent");
  const char* armed_env = std::getenv("KC_PAIRED_ARMED");
  const bool apply = armed_env && !std::strcmp(armed_env, "apply");
  const int armed = armed_env && !std::strcmp(armed_env, "wrapper") ? 2 : 0;  // kerncap_bench_passthrough's modes
  const int passive = apply ? 3 : 1;
  std::printf("armed=%s\n", armed == 2 ? "wrapper" : apply ? "apply" : "full");
  sh.block_cpu.assign(sh.blocks, 0);
  pthread_barrier_init(&sh.start, nullptr, sh.threads + 1);
  pthread_barrier_init(&sh.end, nullptr, sh.threads + 1);
  std::vector<pthread_t> threads(sh.threads);
  for (pthread_t& t : threads)
    if (pthread_create(&t, nullptr, worker, &sh) != 0) {
      std::fprintf(stderr, "launch_paired: pthread_create failed\n");
      return 1;
    }
  long long wall = 0, cpu = 0;
  for (int b = 0; b < sh.blocks; ++b) {
    char mode = 'n';
    if (paired) {
      const bool pass = b % 4 == 1 || b % 4 == 2;  // a p p a a p p a ...
      passthrough(pass ? passive : armed);
      mode = pass ? 'p' : 'a';
    }
    const long long w0 = now_ns(CLOCK_MONOTONIC);
    pthread_barrier_wait(&sh.start);
    pthread_barrier_wait(&sh.end);
    const long long w = now_ns(CLOCK_MONOTONIC) - w0;
    wall += w;
    cpu += sh.block_cpu[b];
    std::printf("block=%d mode=%c wall_ns=%lld cpu_ns=%lld\n", b, mode, w, sh.block_cpu[b]);
  }
  if (paired) passthrough(0);
  for (pthread_t& t : threads) pthread_join(t, nullptr);
  const unsigned long long launches = 1ull * sh.threads * sh.blocks * sh.per_block;
  std::printf("launch_paired: %s, %d thread(s), %llu launches, %.1f ns wall and %.1f ns CPU per launch\n", argv[1],
              sh.threads, launches, double(wall) / launches, double(cpu) / launches);
  testapp::Report report;
  report.add("launches", launches);
  report.add("loop_ns", static_cast<unsigned long long>(wall));
  report.add("cpu_ns", static_cast<unsigned long long>(cpu));
  report.write();
  testapp::mark_done();
  return 0;
}
