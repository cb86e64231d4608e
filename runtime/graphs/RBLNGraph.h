// Graph capture and replay for PyTorch: at::GraphImplInterface over the
// driver's stream capture (torch.accelerator.Graph, torch.rbln.RBLNGraph),
// with the caching allocator's private pools for the memory a capture uses.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/Allocator.h>

#include <vector>

namespace rbln {

// torch.cuda.is_current_stream_capturing for the current rbln stream.
bool is_current_stream_capturing();
// torch.cuda.graph_pool_handle: a new pool id that graphs may share.
c10::MempoolId_t graph_pool_handle();
// torch.cuda.CUDAGraph.register_generator_state: generators besides the device's default whose draws the next
// capture begun on this thread records per replay (RBLNGraph.capture_begin passes the ones registered with it;
// at::GraphImplInterface has no such call).
void set_next_capture_generators(std::vector<at::Generator> generators);

}  // namespace rbln
