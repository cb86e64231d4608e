// Runs an AOTInductor package made for rbln (docs/deployment.md) from C++, with no Python:
//   run_package model.pt2 ROWS COLS
// loads the package on rbln:0 and runs it on a random ROWS x COLS float input. The program links
// libtorch_rbln.so, which registers the "rbln" device and the package runner for it when it loads.
#include <ATen/ATen.h>
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

#include <iostream>
#include <string>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << argv[0] << " model.pt2 ROWS COLS\n";
    return 2;
  }
  try {
    const at::Device device(at::kPrivateUse1, 0);
    torch::inductor::AOTIModelPackageLoader loader(argv[1], "model", false, 1, device.index());
    const at::Tensor x = at::randn({std::stoll(argv[2]), std::stoll(argv[3])}).to(device);
    for (const at::Tensor& y : loader.run({x})) std::cout << y.device() << " " << y.sizes() << "\n" << y.cpu() << "\n";
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
