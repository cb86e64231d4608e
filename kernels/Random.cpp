// Random numbers drawn on the device from its own generator. Philox4x32-10 is
// counter-based, like CUDA's: element i of a launch uses counter offset + i, so
// results depend only on (seed, offset) and a run is reproducible after
// torch.rbln.manual_seed, whatever the threading.
#include <ATen/core/DistributionsHelper.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mul.h>
#include <ATen/ops/ones_like.h>

#include <cmath>
#include <mutex>

#include "kernels/Common.h"
#include "kernels/Kernels.h"
#include "runtime/RBLNGenerator.h"

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

// Reserves self.numel() draws from the generator and runs `draw(philox, i)` per element.
template <class F>
at::Tensor& generate(at::Tensor& self, std::optional<at::Generator> gen, const char* name, F draw) {
  if (self.numel() == 0) return self;
  auto* g = at::get_generator_or_default<RBLNGeneratorImpl>(gen, default_generator(self.device().index()));
  uint64_t seed, offset;
  {
    std::lock_guard<std::mutex> lock(g->mutex_);
    std::tie(seed, offset) = g->reserve(self.numel());
  }
  write_contiguous(self, [&](const at::Tensor& target) {
    RBLN_DISPATCH_ALL(self.scalar_type(), "random", [&] {
      auto* out = target.data_ptr<scalar_t>();
      int64_t n = target.numel();
      launch_on(target, name, [=] {
        Philox philox(seed);
        at::parallel_for(0, n, kGrainSize, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) out[i] = static_cast<scalar_t>(draw(philox(offset + i)));
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
  return generate(self, generator, "aten::uniform_",
                  [=](const std::array<uint32_t, 4>& r) { return from + (to - from) * uniform01(r[0], r[1]); });
}

at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator) {
  TORCH_CHECK(std >= 0.0, "normal expects std >= 0.0, but found std ", std);
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "normal_ not implemented for '", self.scalar_type(), "'");
  return generate(self, generator, "aten::normal_", [=](const std::array<uint32_t, 4>& r) {
    double u1 = 1.0 - uniform01(r[0], r[1]), u2 = uniform01(r[2], r[3]);  // Box-Muller, u1 in (0, 1]
    return mean + std * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
}

at::Tensor& bernoulli__float(at::Tensor& self, double p, std::optional<at::Generator> generator) {
  TORCH_CHECK(0 <= p && p <= 1, "bernoulli_ expects p to be in [0, 1], but got p=", p);
  return generate(self, generator, "aten::bernoulli_",
                  [=](const std::array<uint32_t, 4>& r) { return uniform01(r[0], r[1]) < p ? 1.0 : 0.0; });
}

at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> generator) {
  TORCH_CHECK(lambd > 0.0, "exponential_ expects lambda > 0.0, but found lambda=", lambd);
  return generate(self, generator, "aten::exponential_", [=](const std::array<uint32_t, 4>& r) {
    return -std::log1p(-uniform01(r[0], r[1])) / lambd;
  });
}

at::Tensor& random__from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> generator) {
  // [from, to), or [from, largest integer the dtype holds exactly] when `to` is None.
  int64_t hi = to ? *to : (at::isFloatingType(self.scalar_type())
                               ? (int64_t(1) << std::numeric_limits<double>::digits)
                               : std::numeric_limits<int64_t>::max());
  TORCH_CHECK(from < hi, "random_ expects 'from' to be less than 'to', but got from=", from, " >= to=", hi);
  auto range = static_cast<uint64_t>(hi - from);
  return generate(self, generator, "aten::random_", [=](const std::array<uint32_t, 4>& r) {
    uint64_t bits = (static_cast<uint64_t>(r[0]) << 32) | r[1];
    return static_cast<double>(static_cast<int64_t>(from + static_cast<int64_t>(bits % range)));
  });
}

at::Tensor& random__to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator) {
  return random__from(self, 0, to, generator);
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

}  // namespace rbln::kernels
