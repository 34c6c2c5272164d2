// One launch of an executable CUDA graph as the steps of a sequence (docs/sequences.md):
// its nodes from kerncap's model of the graph (graph_model.hpp, the parameters in force),
// in the model's topological order with child graphs expanded in place. Kernel nodes go
// to `kernel_node` (the caller reads their launch and records it); 1-D copies and fills
// become steps; event, empty and graph-memory nodes order nothing the serial order does
// not already keep and are skipped (counted); host, conditional, external-semaphore and
// batch-memop nodes make the launch unreplayable (named in the refusal).
#pragma once
#include <cuda.h>

#include <functional>
#include <map>
#include <string>

#include "graph_model.hpp"
#include "sequence_capture.hpp"

namespace kc {

struct GraphWalk {
  size_t nodes = 0;                       // nodes visited, all levels
  std::map<std::string, size_t> skipped;  // node type -> count
};

// Throws std::runtime_error naming the node when the launch cannot be replayed.
GraphWalk record_graph_launch(SequenceCapture& seq, const ExecModel& m, int stream,
                              const std::function<void(CUgraphNode)>& kernel_node);

}  // namespace kc
