// Random numbers drawn on the device from its own generator. Philox4x32-10 is
// counter-based, like CUDA's: element i of a launch uses counter offset + i, so
// results depend only on (seed, offset) and a run is reproducible after
// torch.rbln.manual_seed, whatever the threading.
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ExpandUtils.h>
#include <ATen/TensorOperators.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full_like.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/result_type.h>
#include <ATen/ops/ones_like.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>
#include <mutex>

#include "generated/RBLNNativeFunctions.h"
#include "kernels/common/Common.h"
#include "runtime/device/RBLNGenerator.h"

namespace rbln::kernels {
namespace {

struct Philox {
  uint32_t key0, key1;
  explicit Philox(uint64_t seed) : key0(static_cast<uint32_t>(seed)), key1(static_cast<uint32_t>(seed >> 32)) {}

  // Four independent 32-bit words for counter `c`.
  std::array<uint32_t, 4> operator()(uint64_t c) const {
    uint32_t x0 = static_cast<uint32_t>(c), x1 = static_cast<uint32_t>(c >> 32), x2 = 0, x3 = 0;
    uint32_t k0 = key0, k1 = key1;
    for (int round = 0; round < 10; ++round) {
      uint64_t p0 = uint64_t(0xD2511F53) * x0, p1 = uint64_t(0xCD9E8D57) * x2;
      uint32_t y0 = static_cast<uint32_t>(p1 >> 32) ^ x1 ^ k0, y2 = static_cast<uint32_t>(p0 >> 32) ^ x3 ^ k1;
      x1 = static_cast<uint32_t>(p1);
      x3 = static_cast<uint32_t>(p0);
      x0 = y0;
      x2 = y2;
      k0 += 0x9E3779B9;
      k1 += 0xBB67AE85;
    }
    return {x0, x1, x2, x3};
  }
};

inline double uniform01(uint32_t hi, uint32_t lo) {  // [0, 1) with 53 random bits
  return ((static_cast<uint64_t>(hi) << 21) ^ lo) * (1.0 / 9007199254740992.0);
}

// Box-Muller over one Philox draw, with u1 in (0, 1].
inline double standard_normal(const std::array<uint32_t, 4>& r) {
  const double u1 = 1.0 - uniform01(r[0], r[1]), u2 = uniform01(r[2], r[3]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

// An rbln generator routes even a CPU tensor's op here (generators take part
// in dispatch): refuse it with CPU's message rather than write host memory.
void check_on_device(const at::Tensor& self) {
  TORCH_CHECK(self.device().type() == c10::DeviceType::PrivateUse1, "Expected a '", self.device().type(),
              "' device type for generator but found 'rbln'");
}

// Where `count` numbers reserved from the generator start (read in the launched task: see PhiloxArgs).
PhiloxArgs reserve(const at::Tensor& self, std::optional<at::Generator> gen, uint64_t count) {
  check_on_device(self);
  auto* g = at::get_generator_or_default<RBLNGeneratorImpl>(gen, default_generator(self.device().index()));
  std::lock_guard<std::mutex> lock(g->mutex_);
  return g->reserve(count);
}

// Significand bits of a floating dtype (CPU draws no more, so results stay below the upper bound).
int digits_of(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return std::numeric_limits<double>::digits;
    case at::kHalf: return std::numeric_limits<c10::Half>::digits;
    case at::kBFloat16: return std::numeric_limits<c10::BFloat16>::digits;
    default: return std::numeric_limits<float>::digits;
  }
}

// Reserves self.numel() draws from the generator and runs `draw(philox words, i)` per element.
template <class F>
at::Tensor& generate(at::Tensor& self, std::optional<at::Generator> gen, const char* name, F draw) {
  check_on_device(self);
  if (self.numel() == 0) return self;
  const auto reserved = reserve(self, gen, self.numel());
  write_contiguous(self, [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL(self.scalar_type(), "random", [&] {
      auto* out = target.data_ptr<scalar_t>();
      int64_t n = target.numel();
      launch_on(target, name, [=] {
        const auto drawn = reserved.unpack();
        const uint64_t seed = drawn.first, offset = drawn.second;
        Philox philox(seed);
        at::parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<scalar_t>(draw(philox(offset + i), i));
        });
      });
    });
  });
  return self;
}

}  // namespace

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> generator) {
  TORCH_CHECK(from <= to, "uniform_ expects to return a [from, to) range, but found from=", from, " > to=", to);
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "uniform_ not implemented for '", self.scalar_type(), "'");
  // u = k / 2^digits of the dtype, so that from + (to - from) * u never rounds up to `to`.
  const int digits = digits_of(self.scalar_type());
  const double step = std::ldexp(1.0, -digits);
  return generate(self, generator, "aten::uniform_", [=](const std::array<uint32_t, 4>& r, int64_t) {
    const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return from + (to - from) * (static_cast<double>(bits >> (64 - digits)) * step);
  });
}

namespace {
// CPU's and CUDA's normal kernels dispatch on the written tensor's dtype, floating only.
void check_normal_dtype(const at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(out.scalar_type()), "\"normal_kernel_rbln\" not implemented for '",
                              out.scalar_type(), "'");
}
}  // namespace

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  check_normal_dtype(self);
  return generate(self, generator, "aten::normal_", [=](const std::array<uint32_t, 4>& r, int64_t) {
    return mean + std * standard_normal(r);
  });
}

at::Tensor& bernoulli__float(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  return generate(self, generator, "aten::bernoulli_",
                  [=](const std::array<uint32_t, 4>& r, int64_t) { return uniform01(r[0], r[1]) < p ? 1.0 : 0.0; });
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> generator) {
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return generate(self, generator, "aten::exponential_", [=](const std::array<uint32_t, 4>& r, int64_t) {
    return -std::log1p(-uniform01(r[0], r[1])) / lambd;
  });
}

at::Tensor& random__from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> generator) {
  // [from, to), or [from, 2^digits] for floating dtypes and [from, max] for integers when `to` is None.
  int64_t hi = 0;
  if (to) {
    hi = *to;
  } else if (at::isFloatingType(self.scalar_type())) {
    hi = (int64_t(1) << digits_of(self.scalar_type())) + 1;
  } else {
    AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, self.scalar_type(), "random_", [&] {
      hi = std::is_same_v<scalar_t, int64_t> ? std::numeric_limits<int64_t>::max()
                                             : static_cast<int64_t>(std::numeric_limits<scalar_t>::max()) + 1;
    });
  }
  TORCH_CHECK(from < hi, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", hi);
  auto range = static_cast<uint64_t>(hi - from);
  return generate(self, generator, "aten::random_", [=](const std::array<uint32_t, 4>& r, int64_t) {
    uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return static_cast<double>(static_cast<int64_t>(from + static_cast<int64_t>(bits % range)));
  });
}

at::Tensor& random__to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return random__from(self, 0, to, generator);
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> generator) {
  return random__from(self, 0, std::nullopt, generator);
}

// Per-element probabilities / means and standard deviations, read on the device.
at::Tensor& bernoulli__Tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator) {
  check_same_device({&self, &p});
  auto probs = at::empty(self.sizes(), self.options().dtype(at::kDouble));
  device_copy(probs, p.expand(self.sizes()));  // raises CPU's broadcast error
  const double* pp = probs.const_data_ptr<double>();
  return generate(self, generator, "aten::bernoulli_", [=](const std::array<uint32_t, 4>& r, int64_t i) {
    const double p_in = pp[i];  // checked on the device, as CUDA asserts it
    TORCH_CHECK(p_in >= 0 && p_in <= 1);
    return uniform01(r[0], r[1]) < p_in ? 1.0 : 0.0;
  });
}

at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> generator) {
  auto out = at::empty(self.sizes(), self.options());
  return bernoulli__Tensor(out, self, generator);
}

at::Tensor& normal_Tensor_Tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> generator,
                                     at::Tensor& out) {
  check_same_device({&mean, &std, &out});
  auto shape = at::infer_size(mean.sizes(), std.sizes());
  // A fresh result takes the mean's dtype; an out= keeps its own, as CPU's and CUDA's.
  prepare_out(out, shape, mean.scalar_type(), mean, "normal", /*castable=*/true);
  check_normal_dtype(out);
  auto m = at::empty(shape, mean.options().dtype(at::kDouble)), s = at::empty(shape, std.options().dtype(at::kDouble));
  device_copy(m, mean.expand(shape));
  device_copy(s, std.expand(shape));
  const double* mp = m.const_data_ptr<double>();
  const double* sp = s.const_data_ptr<double>();
  return generate(out, generator, "aten::normal", [=](const std::array<uint32_t, 4>& r, int64_t i) {
    TORCH_CHECK(sp[i] >= 0.0, "normal expects all elements of std >= 0.0");
    return mp[i] + sp[i] * standard_normal(r);
  });
}
at::Tensor normal_Tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> generator) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  at::Tensor out;
  return normal_Tensor_Tensor_out(mean, at::full_like(mean, std), generator, out);
}
at::Tensor normal_float_Tensor(double mean, const at::Tensor& std, std::optional<at::Generator> generator) {
  at::Tensor out;
  return normal_Tensor_Tensor_out(at::full_like(std, mean), std, generator, out);
}

// Fisher-Yates over n draws from the device generator.
at::Tensor& randperm_generator_out(c10::SymInt size, std::optional<at::Generator> generator, at::Tensor& out) {
  const int64_t n = size.expect_int();
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::resize_output(out, {n});
  if (n == 0) return out;
  const auto reserved = reserve(out, generator, n);
  write_contiguous(out, [&](const at::Tensor& target) {
    RBLN_DISPATCH_NUMERIC(out.scalar_type(), "randperm", [&] {
      TORCH_CHECK(at::isFloatingType(out.scalar_type()) || n - 1 <= static_cast<int64_t>(std::numeric_limits<scalar_t>::max()),
                  "randperm: n is too large for result tensor type: '", out.scalar_type(), "'");
      scalar_t* p = target.data_ptr<scalar_t>();
      launch_on(target, "aten::randperm", [=] {
        const auto drawn = reserved.unpack();
        const uint64_t seed = drawn.first, offset = drawn.second;
        Philox philox(seed);
        std::vector<int64_t> perm(n);
        std::iota(perm.begin(), perm.end(), 0);
        for (int64_t i = n - 1; i > 0; --i) {
          const auto r = philox(offset + i);
          const uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
          std::swap(perm[i], perm[bits % static_cast<uint64_t>(i + 1)]);
        }
        for (int64_t i = 0; i < n; ++i) p[i] = static_cast<scalar_t>(perm[i]);
      });
    });
  });
  return out;
}

// Inverse-CDF sampling per row; without replacement, each draw removes its category.
at::Tensor& multinomial_out(const at::Tensor& self, c10::SymInt samples, bool replacement,
                            std::optional<at::Generator> generator, at::Tensor& out) {
  const int64_t num_samples = samples.expect_int();
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(num_samples > 0, "cannot sample n_sample <= 0 samples");
  const int64_t categories = self.size(-1), rows = self.dim() == 1 ? 1 : self.size(0);
  TORCH_CHECK(replacement || num_samples <= categories, "cannot sample n_sample > prob_dist.size(-1) samples without ",
              "replacement");
  if (!out.defined()) out = at::empty({0}, self.options().dtype(at::kLong));  // the functional overload's result
  TORCH_CHECK(out.scalar_type() == at::kLong, "multinomial: out must be int64, got ", out.scalar_type());
  check_same_device({&self, &out});
  // CPU's multinomial resizes out= without resize_output's warning.
  out.resize_(self.dim() == 1 ? std::vector<int64_t>{num_samples} : std::vector<int64_t>{rows, num_samples});
  auto probs = at::empty(self.sizes(), self.options().dtype(at::kDouble));
  device_copy(probs, self);
  const auto reserved = reserve(self, generator, rows * num_samples);
  write_contiguous(out, [&](const at::Tensor& target) {
    const double* pp = probs.const_data_ptr<double>();
    int64_t* o = target.data_ptr<int64_t>();
    launch_on(target, "aten::multinomial", [=] {
      const auto drawn = reserved.unpack();
      const uint64_t seed = drawn.first, offset = drawn.second;
      Philox philox(seed);
      std::vector<double> w(categories);
      for (int64_t r = 0; r < rows; ++r) {
        double total = 0;
        for (int64_t c = 0; c < categories; ++c) {
          w[c] = pp[r * categories + c];
          TORCH_CHECK(std::isfinite(w[c]) && w[c] >= 0, "probability tensor contains either `inf`, `nan` or element < 0");
          total += w[c];
        }
        TORCH_CHECK(total > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
        for (int64_t s = 0; s < num_samples; ++s) {
          const auto words = philox(offset + r * num_samples + s);
          const double target_mass = uniform01(words[0], words[1]) * total;
          int64_t pick = categories - 1;
          double acc = 0;
          for (int64_t c = 0; c < categories; ++c) {
            acc += w[c];
            if (w[c] > 0 && target_mass < acc) {
              pick = c;
              break;
            }
          }
          while (w[pick] == 0 && pick > 0) --pick;  // rounding at the top end
          o[r * num_samples + s] = pick;
          if (!replacement) {
            total -= w[pick];
            w[pick] = 0;
            if (s + 1 < num_samples)
              TORCH_CHECK(total > 0, "invalid multinomial distribution (with replacement=False, not enough non-negative "
                          "category to sample)");
          }
        }
      }
    });
  });
  return out;
}


std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if (!train.value_or(true) || p == 0) {
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  }
  auto keep = at::empty(input.sizes(), input.options().dtype(at::kBool));
  bernoulli__float(keep, 1 - p, std::nullopt);
  auto scale = p == 1 ? 0.0 : 1.0 / (1 - p);
  return {at::mul(input, keep).mul_(scale), keep};
}

// CPU's two products: an integer or bool grad times the double scale gives
// the default float dtype, as on CPU.
at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  check_same_device({&grad_output, &mask});
  return grad_output * mask * scale;
}

}  // namespace rbln::kernels
