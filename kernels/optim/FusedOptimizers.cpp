// torch.optim's fused steps (fused=True: Adam and AdamW, the Hugging Face Trainer's default where the device has
// them, SGD and Adagrad): one queued op-library call per step updates every parameter and its state in device
// memory, with CPU's kernel over views of it (kernels/library/Library.h), as CUDA's fused step is one
// multi-tensor launch. The checks CUDA makes on the host come first, so a bad call raises where it is made.
#include <ATen/native/ForeachUtils.h>
#include <ATen/ops/_fused_adagrad_native.h>
#include <ATen/ops/_fused_adam_native.h>
#include <ATen/ops/_fused_adamw_native.h>
#include <ATen/ops/_fused_sgd_native.h>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "kernels/library/Library.h"

namespace rbln::kernels {
namespace {

using Lists = std::vector<at::TensorList>;
using Views = std::vector<std::vector<at::Tensor>>;

// The lists and the optional tensors as one input vector for the library call, and back.
std::vector<at::Tensor> flatten(const Lists& lists, const std::vector<std::optional<at::Tensor>>& extra) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  for (const auto& t : extra) flat.push_back(t.value_or(at::Tensor()));
  return flat;
}

Views unflatten(const std::vector<at::Tensor>& flat, const std::vector<size_t>& sizes) {
  Views lists;
  size_t at = 0;
  for (size_t n : sizes) {
    lists.emplace_back(flat.begin() + at, flat.begin() + at + n);
    at += n;
  }
  return lists;
}

std::optional<at::Tensor> optional(const at::Tensor& t) { return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt; }

// CUDA's host checks (the lists in `same_kind` share dtype, device and layout; the step counts, grad_scale,
// found_inf and a tensor learning rate are on the parameters' device), then the step queued on the parameters'
// stream. `lists` are the kernel's lists in its order, `steps` the step counts among them (or none); `step` is
// CPU's kernel for this overload, called with the views' lists, the learning rate (a double or a view) and the
// views of grad_scale and found_inf.
template <class Lr, class Step>
void fused_step_on_device(const char* name, const Lists& lists, const Lists& same_kind, const char* same_kind_error,
                          at::TensorList steps, const Lr& lr, const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf, Step step) {
  if (lists[0].empty()) return;
  TORCH_CHECK(at::native::check_fast_path_restrictions(same_kind), same_kind_error);
  const at::Tensor& first = lists[0][0];
  for (const auto& t : steps) check_same_device({&first, &t});
  for (const auto* t : {&grad_scale, &found_inf}) {
    if (*t) check_same_device({&first, &t->value()});
  }
  if constexpr (std::is_same_v<Lr, at::Tensor>) {
    if (lr.is_cpu()) {  // a host learning rate is read now, as CUDA's fused step reads it
      return fused_step_on_device(name, lists, same_kind, same_kind_error, steps, lr.template item<double>(),
                                  grad_scale, found_inf, step);
    }
    check_same_device({&first, &lr});
  }
  std::vector<size_t> sizes;
  for (const auto& list : lists) sizes.push_back(list.size());
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

#define RBLN_FUSED_ADAM(op, name, Lr, cpu_kernel)                                                                     \
  void op(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,       \
          at::TensorList max_exp_avg_sqs, at::TensorList state_steps, Lr lr, double beta1, double beta2,        \
          double weight_decay, double eps, bool amsgrad, bool maximize,                                         \
          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {            \
    Lists same_kind{self, grads, exp_avgs, exp_avg_sqs};                                                        \
    if (amsgrad) same_kind.push_back(max_exp_avg_sqs);                                                          \
    fused_step_on_device(                                                                                       \
        name, {self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps}, same_kind,                    \
        amsgrad ? "params, grads, exp_avgs, exp_avg_sqs, and max_exp_avg_sqs must have same dtype, device, and layout" \
                : "params, grads, exp_avgs, and exp_avg_sqs must have same dtype, device, and layout",          \
        state_steps, lr, grad_scale, found_inf, [=](const Views& v, const auto& lr_view, const auto& scale,     \
                                                    const auto& inf) {                                          \
          at::native::cpu_kernel(v[0], v[1], v[2], v[3], v[4], v[5], lr_view, beta1, beta2, weight_decay, eps,  \
                                 amsgrad, maximize, scale, inf);                                                \
        });                                                                                                     \
  }

RBLN_FUSED_ADAM(_fused_adam_, "aten::_fused_adam_", double, _fused_adam_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adamw_, "aten::_fused_adamw_", double, _fused_adamw_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adam__tensor_lr, "aten::_fused_adam_.tensor_lr", const at::Tensor&, _fused_adam_kernel_cpu_)
RBLN_FUSED_ADAM(_fused_adamw__tensor_lr, "aten::_fused_adamw_.tensor_lr", const at::Tensor&, _fused_adamw_kernel_cpu_)
#undef RBLN_FUSED_ADAM

// CUDA's SGD: momentum buffers exactly when momentum > 0 (FusedSgdKernel.cu).
#define RBLN_FUSED_SGD(op, name, Lr)                                                                                  \
  void op(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffer_list, double weight_decay,  \
          double momentum, Lr lr, double dampening, bool nesterov, bool maximize, bool is_first_step,           \
          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {            \
    const bool buffers = !momentum_buffer_list.empty();                                                         \
    if (buffers) {                                                                                              \
      TORCH_CHECK_GT(momentum, 0);                                                                              \
    } else {                                                                                                    \
      TORCH_CHECK_EQ(momentum, 0);                                                                              \
      if (is_first_step) {                                                                                      \
        TORCH_WARN_ONCE("`is_first_step` argument has no effect when `momentum_buffer_list` is empty");         \
      }                                                                                                         \
    }                                                                                                           \
    fused_step_on_device(                                                                                       \
        name, {self, grads, momentum_buffer_list},                                                              \
        buffers ? Lists{self, grads, momentum_buffer_list} : Lists{self, grads},                                \
        buffers ? "params, grads, and momentum_buffer_list must have same dtype, device, and layout"            \
                : "params and grads must have same dtype, device, and layout",                                  \
        {}, lr, grad_scale, found_inf, [=](const Views& v, const auto& lr_view, const auto& scale, const auto& inf) { \
          at::native::_fused_sgd_kernel_cpu_(v[0], v[1], v[2], weight_decay, momentum, lr_view, dampening,     \
                                             nesterov, maximize, is_first_step, scale, inf);                    \
        });                                                                                                     \
  }

RBLN_FUSED_SGD(_fused_sgd_, "aten::_fused_sgd_", double)
RBLN_FUSED_SGD(_fused_sgd__tensor_lr, "aten::_fused_sgd_.tensor_lr", const at::Tensor&)
#undef RBLN_FUSED_SGD

#define RBLN_FUSED_ADAGRAD(op, name, Lr)                                                                              \
  void op(at::TensorList self, at::TensorList grads, at::TensorList state_sums, at::TensorList state_steps,     \
          Lr lr, double lr_decay, double weight_decay, double eps, bool maximize,                               \
          const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {            \
    fused_step_on_device(                                                                                       \
        name, {self, grads, state_sums, state_steps}, {self, grads, state_sums},                                \
        "params, grads, and state_sums must have same dtype, device, and layout", state_steps, lr, grad_scale,  \
        found_inf, [=](const Views& v, const auto& lr_view, const auto& scale, const auto& inf) {               \
          at::native::_fused_adagrad_kernel_cpu_(v[0], v[1], v[2], v[3], lr_view, lr_decay, weight_decay, eps,  \
                                                 maximize, scale, inf);                                         \
        });                                                                                                     \
  }

RBLN_FUSED_ADAGRAD(_fused_adagrad_, "aten::_fused_adagrad_", double)
RBLN_FUSED_ADAGRAD(_fused_adagrad__tensor_lr, "aten::_fused_adagrad_.tensor_lr", const at::Tensor&)
#undef RBLN_FUSED_ADAGRAD

}  // namespace rbln::kernels
