// nll_loss forward and backward for [N, C] or [C] log-probabilities (and
// spatial [N, C, H, W] through the same kernel). Targets live in device
// memory, so their bounds are checked inside the kernel. The pointwise losses
// (mse, smooth L1, Huber, log-sigmoid, binary cross-entropy's backward) are
// compositions of device ops.
#include <ATen/TensorOperators.h>
#include <ATen/core/Reduction.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mean.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/where.h>

#include <c10/util/llvmMathExtras.h>

#include <numeric>
#include <stdexcept>
#include <string>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"

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
      // CPU's arithmetic: in the dtype itself (each float16/bfloat16 step rounded), the reduction through
      // its cascade of 8 partial sums (16 terms per level for batches up to 2^32), so the result is CPU's.
      constexpr int kLevels = 8;
      const int64_t level_power = std::max<int64_t>(4, static_cast<int64_t>(c10::llvm::Log2_64_Ceil(n)) / kLevels);
      const int64_t level_mask = (int64_t(1) << level_power) - 1;
      scalar_t loss_sums[kLevels] = {}, weight_sums[kLevels] = {};
      int64_t ignored = 0;
      for (int64_t i = 0; i < n; ++i) {
        int64_t k = tp[i];
        if (k == ignore) {
          if (none) op[i] = scalar_t(0);
          ++ignored;
          continue;
        }
        if (k < 0 || k >= c) throw std::out_of_range("Target " + std::to_string(k) + " is out of bounds.");
        const scalar_t wk = wp ? wp[k] : scalar_t(1);
        const scalar_t v = -xp[i * c + k] * wk;
        if (none) {
          op[i] = v;
          continue;
        }
        loss_sums[0] -= xp[i * c + k] * wk;
        if (wp) weight_sums[0] += wk;
        for (int j = 0; j + 1 < kLevels; ++j) {
          if ((i & (level_mask << (j * level_power))) != 0) break;
          weight_sums[j + 1] += weight_sums[j];
          loss_sums[j + 1] += loss_sums[j];
          weight_sums[j] = loss_sums[j] = scalar_t(0);
        }
      }
      if (none) {
        twp[0] = scalar_t(0);
        return;
      }
      const scalar_t weight_total = wp ? std::accumulate(weight_sums, weight_sums + kLevels, scalar_t(0))
                                       : static_cast<scalar_t>(n - ignored);
      scalar_t total = std::accumulate(loss_sums, loss_sums + kLevels, scalar_t(0));
      if (reduction == at::Reduction::Mean) total /= weight_total;
      twp[0] = weight_total;
      op[0] = total;
    });
  });
  if (!out.is_same(output)) device_copy(output, out);
  if (!tw.is_same(total_weight)) device_copy(total_weight, tw);
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


namespace {

void check_spatial(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes(), ")");
}

// [N, C, H, W] as [N*H*W, C] rows.
at::Tensor as_rows(const at::Tensor& self) { return self.movedim(1, -1).reshape({-1, self.size(1)}); }

// Reduced-precision values continue in float32 and round once at the end, as CPU's kernels do
// (CPU's loss kernels round the input difference to the input dtype first).
at::Tensor widen(const at::Tensor& t) {
  return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t;
}

at::Tensor reduce_loss(const at::Tensor& loss, int64_t reduction, at::ScalarType dtype) {
  auto r = reduction == at::Reduction::Mean ? at::mean(loss) : reduction == at::Reduction::Sum ? at::sum(loss) : loss;
  return r.to(dtype);
}

// The derivative's scale: 1/N for a mean, 1 otherwise.
double loss_scale(const at::Tensor& self, int64_t reduction) {
  return reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(std::max<int64_t>(self.numel(), 1)) : 1.0;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      c10::SymInt ignore_index) {
  check_spatial(self, target);
  at::Tensor out, total;
  nll_loss_forward_output(as_rows(self), target.reshape({-1}), weight, reduction, ignore_index, out, total);
  if (reduction == at::Reduction::None) out = out.view(target.sizes());
  return {out, total};
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight) {
  check_spatial(self, target);
  auto go = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
  at::Tensor rows;
  nll_loss_backward_grad_input(go, as_rows(self), target.reshape({-1}), weight, reduction, ignore_index, total_weight,
                               rows);
  auto sizes = self.sizes().vec();
  std::rotate(sizes.begin() + 1, sizes.begin() + 2, sizes.end());  // [N, H, W, C]
  return contiguous(rows.view(sizes).movedim(-1, 1));
}

// mse_loss and smooth_l1_loss are TensorIterator ops on CUDA (`device_check: NoCheck`): a CPU 0-dim
// operand is a scalar there, any other tensor on another device is an error. Their backwards check every tensor.
namespace {
void check_devices_allowing_cpu_scalars(const at::Tensor& self, const at::Tensor& target) {
  auto scalar = [](const at::Tensor& t) { return t.is_cpu() && t.dim() == 0; };
  if (!scalar(self) && !scalar(target)) check_same_device({&self, &target});
}
}  // namespace

at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  check_devices_allowing_cpu_scalars(self, target);
  auto d = self - target;
  return reduce_loss(d * d, reduction, at::result_type(self, target));
}
at::Tensor mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction) {
  check_same_device({&grad_output, &self, &target});
  // CPU's order of roundings; the gradient takes the input's dtype
  return ((self - target) * (2.0 * loss_scale(self, reduction)) * grad_output).to(self.scalar_type());
}

at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  check_devices_allowing_cpu_scalars(self, target);
  const auto dtype = at::result_type(self, target);
  auto z = at::abs(widen(self - target));
  if (beta == 0) return reduce_loss(z, reduction, dtype);
  return reduce_loss(at::where(z < beta, z * z * (0.5 / beta), z - 0.5 * beta), reduction, dtype);
}
at::Tensor smooth_l1_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta) {
  check_same_device({&grad_output, &self, &target});
  auto x = widen(self - target);
  auto slope = beta == 0 ? x.sign() : at::where(x.abs() < beta, x / beta, x.sign());
  return (slope * widen(grad_output) * loss_scale(self, reduction)).to(self.scalar_type());
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  check_same_device({&self, &target});
  // CPU's arithmetic, measured: float16 computes in float32 with delta unrounded, rounding each loss once;
  // the other dtypes compute in the dtype itself (bfloat16 rounds every step), delta rounded to it.
  const bool half = self.scalar_type() == at::kHalf;
  const double d = half ? delta
                        : RBLN_DISPATCH_FLOATING(self.scalar_type(), "huber_loss",
                                                 [&] { return static_cast<double>(static_cast<scalar_t>(delta)); });
  auto z = half ? at::abs(widen(self) - widen(target)) : at::abs(self - target);
  auto loss = at::where(z < d, z * 0.5 * z, (z - 0.5 * d) * d).to(self.scalar_type());
  return reduce_loss(loss, reduction, self.scalar_type());
}
at::Tensor huber_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta) {
  check_same_device({&grad_output, &self, &target});
  auto x = widen(self - target);
  auto slope = at::where(x.abs() < delta, x, x.sign() * delta);
  return (slope * widen(grad_output) * loss_scale(self, reduction)).to(self.scalar_type());
}

// CPU's clamped form: (t - 1) * max(log1p(-x), -100) - t * max(log(x), -100).
// The input range is read back (one bool) so an input outside [0, 1] raises
// as on CPU instead of producing NaN.
at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_same_device({&self, &target});
  TORCH_CHECK(self.sizes() == target.sizes(), "Using a target size (", target.sizes(), ") that is different to the ",
              "input size (", self.sizes(), ") is deprecated. Please ensure they have the same size.");
  // CPU's kernel takes one dtype (no promotion), raising its TensorIterator error otherwise.
  TORCH_CHECK(target.scalar_type() == self.scalar_type(), "Found dtype ", target.scalar_type(), " but expected ",
              self.scalar_type());
  // As CPU's kernel checks: NaN is not in [0, 1] either.
  TORCH_CHECK(((self >= 0) & (self <= 1)).all().item<bool>(), "all elements of input should be between 0 and 1");
  auto loss = (target - 1) * self.neg().log1p().clamp_min(-100) - target * self.log().clamp_min(-100);
  if (weight && weight->defined()) loss = loss * *weight;
  return reduce_loss(loss, reduction, self.scalar_type());
}

// grad * (x - t) / max((1 - x) * x, 1e-12), CPU's guard against division by zero.
at::Tensor binary_cross_entropy_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_same_device({&grad_output, &self, &target});
  auto grad = grad_output * (self - target) / ((1 - self) * self).clamp_min(1e-12);
  if (weight && weight->defined()) grad = grad * *weight;
  return reduction == at::Reduction::Mean ? grad / static_cast<double>(self.numel()) : grad;
}

std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self) {
  // min(x, 0) - log1p(exp(-|x|)), CPU's stable form; the backward needs no buffer.
  auto x = widen(self);
  auto out = (x.clamp_max(0) - (-x.abs()).exp().log1p()).to(self.scalar_type());
  return {out, at::empty({0}, self.options())};
}
at::Tensor log_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& /*buffer*/) {
  check_same_device({&grad_output, &self});
  return (widen(grad_output) * (-widen(self)).sigmoid()).to(self.scalar_type());
}

}  // namespace rbln::kernels
