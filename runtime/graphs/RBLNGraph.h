// Graph capture and replay for PyTorch: at::GraphImplInterface over the
// driver's stream capture (torch.accelerator.Graph, torch.rbln.RBLNGraph),
// with the caching allocator's private pools for the memory a capture uses.
#pragma once

#include <c10/core/Allocator.h>

namespace rbln {

// torch.cuda.is_current_stream_capturing for the current rbln stream.
bool is_current_stream_capturing();
// torch.cuda.graph_pool_handle: a new pool id that graphs may share.
c10::MempoolId_t graph_pool_handle();

}  // namespace rbln
