// torch.optim's fused Adam and AdamW (fused=True, the Hugging Face Trainer's default where the device has them):
// one queued op-library call per step updates every parameter and its moments in device memory, with CPU's
// kernel over views of it (kernels/library/Library.h), as CUDA's fused step is one multi-tensor launch. The
// checks CUDA makes on the host come first, so a bad call raises where it is made.
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_fused_adam_native.h>
#include <ATen/ops/_fused_adamw_native.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

namespace rbln::kernels {
namespace {

using TensorLists = std::array<at::TensorList, 6>;  // params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps

// The lists and the optional tensors as one input vector for the library call, and back.
std::vector<at::Tensor> flatten(const TensorLists& lists, const std::vector<std::optional<at::Tensor>>& extra) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  for (const auto& t : extra) flat.push_back(t.value_or(at::Tensor()));
  return flat;
}

std::vector<std::vector<at::Tensor>> unflatten(const std::vector<at::Tensor>& flat, const std::array<size_t, 6>& sizes) {
  std::vector<std::vector<at::Tensor>> lists;
  size_t at = 0;
  for (size_t n : sizes) {
    lists.emplace_back(flat.begin() + at, flat.begin() + at + n);
    at += n;
  }
  return lists;
}

std::optional<at::Tensor> optional(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// CUDA's host checks (FusedAdamKernel.cu), then the step queued on the parameters' stream; `step` is CPU's kernel
// for this overload, called with the views' lists, the learning rate (a double or a view) and the views of
// grad_scale and found_inf.
template <class Lr, class Step>
void fused_adam_on_device(const char* name, const TensorLists& lists, bool amsgrad, const Lr& lr,
                          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf,
                          Step step) {
  const auto& [params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps] = lists;
  if (params.empty()) return;
  std::vector<at::TensorList> moments{params, grads, exp_avgs, exp_avg_sqs};
  if (amsgrad) moments.push_back(max_exp_avg_sqs);
  TORCH_CHECK(at::native::check_fast_path_restrictions(moments),
              amsgrad ? "params, grads, exp_avgs, exp_avg_sqs, and max_exp_avg_sqs must have same dtype, device, and layout"
                      : "params, grads, exp_avgs, and exp_avg_sqs must have same dtype, device, and layout");
  const at::Tensor& first = params[0];
  for (const auto& t : state_steps) check_same_device({&first, &t});
  for (const auto* t : {&grad_scale, &found_inf}) {
    if (*t) check_same_device({&first, &t->value()});
  }
  if constexpr (std::is_same_v<Lr, at::Tensor>) {
    if (lr.is_cpu()) {  // a host learning rate is read now, as CUDA's fused step reads it
      return fused_adam_on_device(name, lists, amsgrad, lr.template item<double>(), grad_scale, found_inf, step);
    }
    check_same_device({&first, &lr});
  }
  std::array<size_t, 6> sizes;
  for (size_t i = 0; i < lists.size(); ++i) sizes[i] = lists[i].size();
  auto inputs = flatten(lists, {grad_scale, found_inf});
  if constexpr (std::is_same_v<Lr, at::Tensor>) inputs.push_back(lr);
  launch_library(name, inputs, {}, [sizes, lr, step](const std::vector<at::Tensor>& cpu) {
    const auto views = unflatten(cpu, sizes);
    const size_t extra = cpu.size() - (std::is_same_v<Lr, at::Tensor> ? 3 : 2);
    const auto scale = optional(cpu[extra]), inf = optional(cpu[extra + 1]);
    if constexpr (std::is_same_v<Lr, at::Tensor>) {
      step(views, cpu.back(), scale, inf);
    } else {
      step(views, lr, scale, inf);
    }
    return std::vector<at::Tensor>{};
  });
}

}  // namespace

#define RBLN_FUSED_ADAM(op, name, Lr, cpu_kernel)                                                                      \
  void op(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,        \
          at::TensorList max_exp_avg_sqs, at::TensorList state_steps, Lr lr, double beta1, double beta2,         \
          double weight_decay, double eps, bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale, \
          const std::optional<at::Tensor>& found_inf) {                                                          \
    fused_adam_on_device(name, {self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps}, amsgrad,  \
                         lr, grad_scale, found_inf, [=](const auto& v, const auto& lr_view, const auto& scale,     \
                                                        const auto& inf) {                                        \
                           at::native::cpu_kernel(v[0], v[1], v[2], v[3], v[4], v[5], lr_view, beta1, beta2,      \
                                                  weight_decay, eps, amsgrad, maximize, scale, inf);              \
                         });                                                                                      \
  }

RBLN_FUSED_ADAM(_fused_adam_, "aten::_fused_adam_", double, _fused_adam_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adamw_, "aten::_fused_adamw_", double, _fused_adamw_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adam__tensor_lr, "aten::_fused_adam_.tensor_lr", const at::Tensor&, _fused_adam_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adamw__tensor_lr, "aten::_fused_adamw_.tensor_lr", const at::Tensor&, _fused_adamw_kernel_cpu_)
#undef RBLN_FUSED_ADAM

}  // namespace rbln::kernels
