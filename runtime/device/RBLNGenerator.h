// Counter-based (Philox-style) generator per device: a seed and an offset,
// like CUDA's, so a kernel can draw from any position without shared state.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace rbln {

struct RBLNGeneratorImpl final : c10::GeneratorImpl {
  explicit RBLNGeneratorImpl(c10::DeviceIndex device);

  void set_current_seed(uint64_t seed) override;
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override;
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  void set_state(const c10::TensorImpl& state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // Reserves `count` numbers and returns (seed, first offset) for a kernel.
  std::pair<uint64_t, uint64_t> reserve(uint64_t count);

 private:
  RBLNGeneratorImpl* clone_impl() const override;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

const at::Generator& default_generator(c10::DeviceIndex device);

}  // namespace rbln
