// What the convolution kernels share with the Python side.
#pragma once

#include <ATen/core/Tensor.h>

namespace rbln::kernels {

// The memory format of a convolution's result and gradients: CUDA's rule (cuDNN's),
// channels_last (2-d) or channels_last_3d when the input or the weight suggests it,
// contiguous for float64. torch.compile's fake convolution asks the same function
// (python/torch_rbln/_convolution_layout.py), so planned and real strides agree.
at::MemoryFormat convolution_memory_format(const at::Tensor& input, const at::Tensor& weight);

}  // namespace rbln::kernels
