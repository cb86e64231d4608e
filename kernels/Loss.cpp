// nll_loss forward and backward for [N, C] or [C] log-probabilities. Targets
// live in device memory, so their bounds are checked inside the kernel.
#include <ATen/core/Reduction.h>
#include <ATen/ops/empty.h>

#include <stdexcept>
#include <string>

#include "kernels/Common.h"
#include "kernels/Kernels.h"

namespace rbln::kernels {
namespace {

struct Shape {
  int64_t n, c;
};

Shape check(const at::Tensor& self, const at::Tensor& target, const std::optional<at::Tensor>& weight) {
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "input tensor should be 1D or 2D");
  TORCH_CHECK(target.dim() <= 1, "0D or 1D target tensor expected, multi-target not supported");
  int64_t n = self.dim() == 1 ? 1 : self.size(0), c = self.size(-1);
  TORCH_CHECK(self.dim() == 1 || target.size(0) == n, "Expected input batch_size (", n,
              ") to match target batch_size (", target.size(0), ").");
  TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
  TORCH_CHECK(!weight || !weight->defined() || weight->numel() == c,
              "weight tensor should be defined either for all ", c, " classes or no classes but got weight tensor of shape: ",
              weight->sizes());
  check_same_device({&self, &target});
  return {n, c};
}

}  // namespace

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_output(const at::Tensor& self, const at::Tensor& target,
                                                             const std::optional<at::Tensor>& weight,
                                                             int64_t reduction, c10::SymInt ignore_index,
                                                             at::Tensor& output, at::Tensor& total_weight) {
  auto [n, c] = check(self, target, weight);
  bool none = reduction == at::Reduction::None && self.dim() == 2;
  prepare_out(output, none ? std::vector<int64_t>{n} : std::vector<int64_t>{}, self.scalar_type(), self, "nll_loss");
  prepare_out(total_weight, {}, self.scalar_type(), self, "nll_loss");
  auto x = contiguous(self), t = contiguous(target);
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  auto out = contiguous(output), tw = contiguous(total_weight);
  int64_t ignore = ignore_index.expect_int();
  RBLN_DISPATCH_FLOATING(self.scalar_type(), "nll_loss", [&] {
    const auto* xp = x.const_data_ptr<scalar_t>();
    const auto* tp = t.const_data_ptr<int64_t>();
    const auto* wp = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
    auto* op = out.data_ptr<scalar_t>();
    auto* twp = tw.data_ptr<scalar_t>();
    launch_on(self, "aten::nll_loss_forward", [=] {
      double total = 0, weight_sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = tp[i];
        double v = 0;
        if (k != ignore) {
          if (k < 0 || k >= c) throw std::out_of_range("Target " + std::to_string(k) + " is out of bounds.");
          double wk = wp ? static_cast<double>(wp[k]) : 1.0;
          v = -wk * static_cast<double>(xp[i * c + k]);
          weight_sum += wk;
        }
        if (none) op[i] = static_cast<scalar_t>(v);
        total += v;
      }
      twp[0] = static_cast<scalar_t>(weight_sum);
      if (!none) op[0] = static_cast<scalar_t>(reduction == at::Reduction::Mean ? total / weight_sum : total);
    });
  });
  if (!out.is_same(output)) device_copy(output, out);
  if (!tw.is_same(total_weight)) device_copy(total_weight, tw);
  return {output, total_weight};
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    c10::SymInt ignore_index) {
  auto output = at::empty({0}, self.options()), total_weight = at::empty({0}, self.options());
  nll_loss_forward_output(self, target, weight, reduction, ignore_index, output, total_weight);
  return {output, total_weight};
}

at::Tensor& nll_loss_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                         int64_t reduction, c10::SymInt ignore_index, const at::Tensor& total_weight,
                                         at::Tensor& grad_input) {
  auto [n, c] = check(self, target, weight);
  check_same_device({&grad_output, &self, &total_weight, &grad_input});
  prepare_out(grad_input, self.sizes(), self.scalar_type(), self, "nll_loss_backward");
  bool none = reduction == at::Reduction::None && self.dim() == 2;
  auto g = contiguous(grad_output), t = contiguous(target), tw = contiguous(total_weight);
  auto w = weight && weight->defined() ? contiguous(*weight) : at::Tensor();
  int64_t ignore = ignore_index.expect_int();
  write_contiguous(grad_input, [&](const at::Tensor& target_tensor) {
    RBLN_DISPATCH_FLOATING(self.scalar_type(), "nll_loss_backward", [&] {
      const auto* gp = g.const_data_ptr<scalar_t>();
      const auto* tp = t.const_data_ptr<int64_t>();
      const auto* wp = w.defined() ? w.const_data_ptr<scalar_t>() : nullptr;
      const auto* twp = tw.const_data_ptr<scalar_t>();
      auto* gi = target_tensor.data_ptr<scalar_t>();
      launch_on(target_tensor, "aten::nll_loss_backward", [=] {
        std::fill(gi, gi + n * c, scalar_t(0));
        for (int64_t i = 0; i < n; ++i) {
          int64_t k = tp[i];
          if (k == ignore) continue;
          if (k < 0 || k >= c) throw std::out_of_range("Target " + std::to_string(k) + " is out of bounds.");
          double wk = wp ? static_cast<double>(wp[k]) : 1.0;
          double grad = none ? static_cast<double>(gp[i]) : static_cast<double>(gp[0]);
          if (reduction == at::Reduction::Mean) grad /= static_cast<double>(twp[0]);
          gi[i * c + k] = static_cast<scalar_t>(-wk * grad);
        }
      });
    });
  });
  return grad_input;
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight) {
  auto grad_input = at::empty({0}, self.options());
  return nll_loss_backward_grad_input(grad_output, self, target, weight, reduction, ignore_index, total_weight,
                                      grad_input);
}

}  // namespace rbln::kernels
