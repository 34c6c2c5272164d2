// graph_explicit: CUDA graphs built and changed every way an app can (issue 12).
//
// One step is: memset(acc) -> gx_prep (in += 1, acc = in/2) -> gx_target (out = acc*a +
// in) -> gx_after (late += 1). The step runs as a graph launched four times (L0..L3);
// before L1 and L2 the target's scalar `a` and its output pointer change (L0: a=2 out1,
// L1: a=3 out2, L2 and L3: a=5 out3), so dispatch 2 of gx_target is L2 with a=5 into
// out3, after L2's gx_prep (in = 3, acc = 1.5) and before L2's gx_after (late = 2).
//
//   graph_explicit [MODE] [N]
//   setparams      explicit graph API, cudaGraphExecKernelNodeSetParams between launches (default)
//   capture        the step recorded by stream capture, then the same SetParams updates
//   child          gx_prep and gx_target inside a child graph node
//   update         cudaGraphExecUpdate from a new graph with the new parameters
//   reinstantiate  the executable graph destroyed and instantiated again for each change
//   eager          the same launches without graphs (the bench's baseline)
//   loop N         N launches of a small graph of 4 tiny kernels (interception bench)
//   conditional    gx_target only inside an if-node's body (kerncap must refuse)
//   never          the graph is instantiated and never launched
//   twostreams     the executable graph replayed on two streams at once
//   destroyed      one launch, then the executable graph is destroyed
// With KC_TESTAPP_REPORT the buffers' addresses go there; the app checks its results.
#include <chrono>
#include <cstring>
#include <vector>

#include "common/testapp.hpp"

// The kernels have external linkage: kernels in an anonymous namespace carry a per-TU
// hash in their mangled name (_GLOBAL__N__<hash>), which a recompile elsewhere changes.
constexpr int kN = 1 << 14;
constexpr int kBlock = 256;
constexpr int kGrid = (kN + kBlock - 1) / kBlock;

__global__ void gx_prep(float* in, float* acc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    in[i] += 1.0f;
    acc[i] = in[i] * 0.5f;
  }
}

__global__ void gx_target(float* out, const float* acc, const float* in, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = acc[i] * a + in[i];
}

__global__ void gx_after(float* late, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) late[i] += 1.0f;
}

namespace {

// Keeps a stream busy for `ns` nanoseconds, so a graph launched behind it is still
// pending when the same graph is launched on another stream.
__global__ void gx_spin(long long ns) {
  const long long start = clock64();
  while (clock64() - start < ns) {
  }
}

struct Buffers {
  float *in, *acc, *out[3], *late;
};

struct TargetArgs {
  float* out;
  const float* acc;
  const float* in;
  float a;
  int n;
  void* args[5];
  void fill() { args[0] = &out, args[1] = &acc, args[2] = &in, args[3] = &a, args[4] = &n; }
};

cudaKernelNodeParams kernel_params(void* fn, void** args) {
  cudaKernelNodeParams p{};
  p.func = fn;
  p.gridDim = dim3(kGrid);
  p.blockDim = dim3(kBlock);
  p.kernelParams = args;
  return p;
}

// Builds the step into `g` with the explicit API; returns the target node.
cudaGraphNode_t build_step(cudaGraph_t g, Buffers& b, TargetArgs& t, bool child) {
  static float* in_arg;
  static float* acc_arg;
  static int n_arg = kN;
  static float* late_arg;
  static void* prep_args[3];
  static void* after_args[2];
  in_arg = b.in, acc_arg = b.acc, late_arg = b.late;
  prep_args[0] = &in_arg, prep_args[1] = &acc_arg, prep_args[2] = &n_arg;
  after_args[0] = &late_arg, after_args[1] = &n_arg;
  t.fill();

  cudaMemsetParams ms{};
  ms.dst = b.acc;
  ms.value = 0;
  ms.elementSize = 4;
  ms.width = kN;
  ms.height = 1;
  cudaGraphNode_t mset, prep, target, after;
  cudaGraph_t inner = g;
  if (child) TA_CHECK(cudaGraphCreate(&inner, 0));
  TA_CHECK(cudaGraphAddMemsetNode(&mset, inner, nullptr, 0, &ms));
  cudaKernelNodeParams pp = kernel_params(reinterpret_cast<void*>(gx_prep), prep_args);
  TA_CHECK(cudaGraphAddKernelNode(&prep, inner, &mset, 1, &pp));
  cudaKernelNodeParams tp = kernel_params(reinterpret_cast<void*>(gx_target), t.args);
  TA_CHECK(cudaGraphAddKernelNode(&target, inner, &prep, 1, &tp));
  cudaGraphNode_t last = target;
  if (child) {
    cudaGraphNode_t cnode;
    TA_CHECK(cudaGraphAddChildGraphNode(&cnode, g, nullptr, 0, inner));
    TA_CHECK(cudaGraphDestroy(inner));  // the node holds its own copy
    last = cnode;
  }
  cudaKernelNodeParams ap = kernel_params(reinterpret_cast<void*>(gx_after), after_args);
  TA_CHECK(cudaGraphAddKernelNode(&after, g, &last, 1, &ap));
  return target;
}

cudaGraphNode_t find_kernel_node(cudaGraph_t g, void* fn) {
  size_t n = 0;
  TA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  TA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType type;
    TA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    TA_CHECK(cudaGraphKernelNodeGetParams(node, &p));
    if (p.func == fn) return node;
  }
  std::fprintf(stderr, "graph_explicit: kernel node not found\n");
  std::exit(1);
}

// The step recorded by stream capture.
cudaGraph_t capture_step(cudaStream_t s, Buffers& b, TargetArgs& t) {
  cudaGraph_t g;
  TA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  TA_CHECK(cudaMemsetAsync(b.acc, 0, kN * sizeof(float), s));
  gx_prep<<<kGrid, kBlock, 0, s>>>(b.in, b.acc, kN);
  gx_target<<<kGrid, kBlock, 0, s>>>(t.out, t.acc, t.in, t.a, t.n);
  gx_after<<<kGrid, kBlock, 0, s>>>(b.late, kN);
  TA_CHECK(cudaStreamEndCapture(s, &g));
  return g;
}

float read1(const float* p) {
  float v = 0;
  TA_CHECK(cudaMemcpy(&v, p, sizeof v, cudaMemcpyDeviceToHost));
  return v;
}

void expect(const char* what, float got, float want) {
  if (got != want) {
    std::fprintf(stderr, "graph_explicit: %s = %.9g, expected %.9g\n", what, got, want);
    std::exit(1);
  }
}

__global__ void tiny(float* p) {
  if (threadIdx.x == 0) p[blockIdx.x] += 1.0f;
}

int run_loop(int launches) {
  float* p;
  TA_CHECK(cudaMalloc(&p, 4 * sizeof(float)));
  TA_CHECK(cudaMemset(p, 0, 4 * sizeof(float)));
  cudaStream_t s;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  TA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int k = 0; k < 4; ++k) tiny<<<4, 32, 0, s>>>(p);
  TA_CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  TA_CHECK(cudaGraphLaunch(exec, s));  // first launch uploads the graph: outside the timed loop
  TA_CHECK(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i < launches; ++i) TA_CHECK(cudaGraphLaunch(exec, s));
  TA_CHECK(cudaStreamSynchronize(s));
  const auto loop_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0);
  expect("loop counter", read1(p), float(4 * launches));
  testapp::Report report;
  report.add("loop_ns", static_cast<unsigned long long>(loop_ns.count()));
  report.add("launches", static_cast<unsigned long long>(launches));
  report.write();
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(g));
  TA_CHECK(cudaFree(p));
  testapp::mark_done();
  return 0;
}

int run_conditional(Buffers& b, cudaStream_t s) {
  cudaGraph_t g;
  TA_CHECK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle handle;
  TA_CHECK(cudaGraphConditionalHandleCreate(&handle, g, 1, cudaGraphCondAssignDefault));
  cudaGraphNodeParams cp{};
  cp.type = cudaGraphNodeTypeConditional;
  cp.conditional.handle = handle;
  cp.conditional.type = cudaGraphCondTypeIf;
  cp.conditional.size = 1;
  cudaGraphNode_t cnode;
  TA_CHECK(cudaGraphAddNode(&cnode, g, nullptr, nullptr, 0, &cp));
  cudaGraph_t body = cp.conditional.phGraph_out[0];
  TargetArgs t{b.out[0], b.acc, b.in, 2.0f, kN};
  t.fill();
  cudaKernelNodeParams tp = kernel_params(reinterpret_cast<void*>(gx_target), t.args);
  cudaGraphNode_t target;
  TA_CHECK(cudaGraphAddKernelNode(&target, body, nullptr, 0, &tp));
  cudaGraphExec_t exec;
  TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < 3; ++i) TA_CHECK(cudaGraphLaunch(exec, s));
  TA_CHECK(cudaStreamSynchronize(s));
  TA_CHECK(cudaGraphExecDestroy(exec));
  TA_CHECK(cudaGraphDestroy(g));
  testapp::mark_done();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "setparams";
  if (mode == "loop") return run_loop(argc > 2 ? std::atoi(argv[2]) : 20000);

  Buffers b{};
  TA_CHECK(cudaMalloc(&b.in, kN * sizeof(float)));
  TA_CHECK(cudaMalloc(&b.acc, kN * sizeof(float)));
  for (auto& o : b.out) TA_CHECK(cudaMalloc(&o, kN * sizeof(float)));
  TA_CHECK(cudaMalloc(&b.late, kN * sizeof(float)));
  TA_CHECK(cudaMemset(b.in, 0, kN * sizeof(float)));
  TA_CHECK(cudaMemset(b.late, 0, kN * sizeof(float)));
  for (auto& o : b.out) TA_CHECK(cudaMemset(o, 0, kN * sizeof(float)));
  cudaStream_t s, s2;
  TA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  TA_CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  TA_CHECK(cudaDeviceSynchronize());

  testapp::Report report;
  report.add("in", b.in);
  report.add("acc", b.acc);
  report.add("out1", b.out[0]);
  report.add("out2", b.out[1]);
  report.add("out3", b.out[2]);
  report.add("late", b.late);
  report.write();

  if (mode == "conditional") return run_conditional(b, s);

  // (a, out) in force at each launch L0..L3.
  const float as[4] = {2.0f, 3.0f, 5.0f, 5.0f};
  float* outs[4] = {b.out[0], b.out[1], b.out[2], b.out[2]};

  if (mode == "eager") {
    for (int l = 0; l < 4; ++l) {
      TA_CHECK(cudaMemsetAsync(b.acc, 0, kN * sizeof(float), s));
      gx_prep<<<kGrid, kBlock, 0, s>>>(b.in, b.acc, kN);
      gx_target<<<kGrid, kBlock, 0, s>>>(outs[l], b.acc, b.in, as[l], kN);
      gx_after<<<kGrid, kBlock, 0, s>>>(b.late, kN);
    }
  } else {
    TargetArgs t{b.out[0], b.acc, b.in, as[0], kN};
    t.fill();
    cudaGraph_t g;
    cudaGraphNode_t target = nullptr;
    if (mode == "capture") {
      g = capture_step(s, b, t);
      target = find_kernel_node(g, reinterpret_cast<void*>(gx_target));
    } else {
      TA_CHECK(cudaGraphCreate(&g, 0));
      target = build_step(g, b, t, mode == "child");
    }
    cudaGraphExec_t exec;
    TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    if (mode == "never") {
      TA_CHECK(cudaGraphExecDestroy(exec));
      TA_CHECK(cudaGraphDestroy(g));
      testapp::mark_done();
      return 0;
    }
    const int launches = mode == "destroyed" ? 1 : 4;
    for (int l = 0; l < launches; ++l) {
      if (l > 0 && (as[l] != as[l - 1] || outs[l] != outs[l - 1])) {
        t.a = as[l];
        t.out = outs[l];
        cudaKernelNodeParams tp = kernel_params(reinterpret_cast<void*>(gx_target), t.args);
        if (mode == "setparams" || mode == "capture") {
          TA_CHECK(cudaGraphExecKernelNodeSetParams(exec, target, &tp));
        } else if (mode == "child") {
          // A node inside a child graph: change it through an update from a whole graph.
          cudaGraph_t g2;
          TA_CHECK(cudaGraphCreate(&g2, 0));
          build_step(g2, b, t, true);
          cudaGraphExecUpdateResultInfo info;
          TA_CHECK(cudaGraphExecUpdate(exec, g2, &info));
          TA_CHECK(cudaGraphDestroy(g2));
        } else if (mode == "update") {
          cudaGraph_t g2;
          TA_CHECK(cudaGraphCreate(&g2, 0));
          build_step(g2, b, t, false);
          cudaGraphExecUpdateResultInfo info;
          TA_CHECK(cudaGraphExecUpdate(exec, g2, &info));
          TA_CHECK(cudaGraphDestroy(g2));
        } else if (mode == "reinstantiate") {
          TA_CHECK(cudaGraphExecDestroy(exec));
          TA_CHECK(cudaGraphDestroy(g));
          TA_CHECK(cudaGraphCreate(&g, 0));
          target = build_step(g, b, t, false);
          TA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        }
      }
      if (mode == "twostreams") gx_spin<<<1, 1, 0, s>>>(4000000);  // ~2 ms at 2 GHz
      TA_CHECK(cudaGraphLaunch(exec, s));
      if (mode == "twostreams") TA_CHECK(cudaGraphLaunch(exec, s2));  // while s still holds the first
    }
    TA_CHECK(cudaStreamSynchronize(s));
    TA_CHECK(cudaStreamSynchronize(s2));
    if (mode == "destroyed" || mode == "twostreams") {
      TA_CHECK(cudaGraphExecDestroy(exec));
      TA_CHECK(cudaGraphDestroy(g));
      testapp::mark_done();
      return 0;
    }
    TA_CHECK(cudaGraphExecDestroy(exec));
    TA_CHECK(cudaGraphDestroy(g));
  }
  TA_CHECK(cudaDeviceSynchronize());
  // 4 steps: in = 4, late = 4; out1 = 0.5*2+1 (L0), out2 = 1*3+2 (L1), out3 = 2*5+4 (L3
  // rewrote L2's 1.5*5+3).
  expect("in[0]", read1(b.in), 4.0f);
  expect("late[0]", read1(b.late), 4.0f);
  expect("out1[0]", read1(b.out[0]), 2.0f);
  expect("out2[0]", read1(b.out[1]), 5.0f);
  expect("out3[0]", read1(b.out[2]), 14.0f);
  testapp::mark_done();
  return 0;
}
