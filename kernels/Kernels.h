// Hand-written device kernels that are not plain elementwise functors. Each
// signature is the op's dispatcher signature; ops.yaml names them in `kernel:`.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/IListRef.h>
#include <ATen/core/List.h>
#include <c10/core/Scalar.h>

#include <array>
#include <optional>
#include <tuple>

namespace rbln::kernels {

// fills and selection
at::Tensor& fill_Scalar(at::Tensor& self, const at::Scalar& value);
at::Tensor& fill_Tensor(at::Tensor& self, const at::Tensor& value);
at::Tensor& zero_(at::Tensor& self);
at::Tensor& masked_fill_Scalar(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value);
at::Tensor& masked_fill_Tensor(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value);
at::Tensor& eye_m_out(c10::SymInt n, c10::SymInt m, at::Tensor& out);
at::Tensor& eye_out(c10::SymInt n, at::Tensor& out);
at::Tensor& index_fill_int_Scalar(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value);
at::Tensor& index_fill_int_Tensor(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value);
at::Tensor where_self(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other);
at::Tensor& where_self_out(const at::Tensor& condition, const at::Tensor& self, const at::Tensor& other, at::Tensor& out);
at::Tensor& arange_start_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out);

// indexing and data movement
at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index);
at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out);
at::Tensor index_copy(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source);
at::Tensor& index_copy_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source);
at::Tensor& index_copy_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                           at::Tensor& out);
at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim);
at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out);
at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask);
at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source);
at::Tensor take(const at::Tensor& self, const at::Tensor& index);
at::Tensor& put_(at::Tensor& self, const at::Tensor& index, const at::Tensor& source, bool accumulate);
at::Tensor repeat_interleave_Tensor(const at::Tensor& repeats, std::optional<c10::SymInt> output_size);

// reductions
at::Tensor nansum(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType> dtype);
at::Tensor trace(const at::Tensor& self);
at::Tensor sum_dim_IntList(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                           std::optional<at::ScalarType> dtype);
at::Tensor& sum_IntList_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                            std::optional<at::ScalarType> dtype, at::Tensor& out);
at::Tensor mean_dim(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                    std::optional<at::ScalarType> dtype);
at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim,
                     std::optional<at::ScalarType> dtype, at::Tensor& out);
at::Tensor amax(const at::Tensor& self, at::IntArrayRef dim, bool keepdim);
at::Tensor& amax_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out);
at::Tensor amin(const at::Tensor& self, at::IntArrayRef dim, bool keepdim);
at::Tensor& amin_out(const at::Tensor& self, at::IntArrayRef dim, bool keepdim, at::Tensor& out);
at::Tensor max(const at::Tensor& self);
at::Tensor min(const at::Tensor& self);
std::tuple<at::Tensor, at::Tensor> max_dim(const at::Tensor& self, int64_t dim, bool keepdim);
std::tuple<at::Tensor&, at::Tensor&> max_dim_max(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& max,
                                                 at::Tensor& max_values);
std::tuple<at::Tensor, at::Tensor> min_dim(const at::Tensor& self, int64_t dim, bool keepdim);
std::tuple<at::Tensor&, at::Tensor&> min_dim_min(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& min,
                                                 at::Tensor& min_indices);
at::Tensor argmax(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim);
at::Tensor argmin(const at::Tensor& self, std::optional<int64_t> dim, bool keepdim);

// softmax
at::Tensor _softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor& _softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out);
at::Tensor _log_softmax(const at::Tensor& self, int64_t dim, bool half_to_float);
at::Tensor& _log_softmax_out(const at::Tensor& self, int64_t dim, bool half_to_float, at::Tensor& out);

at::Tensor _softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                  at::ScalarType input_dtype);
at::Tensor& _softmax_backward_data_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                       at::ScalarType input_dtype, at::Tensor& grad_input);
at::Tensor _log_softmax_backward_data(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                      at::ScalarType input_dtype);
at::Tensor& _log_softmax_backward_data_out(const at::Tensor& grad_output, const at::Tensor& output, int64_t dim,
                                           at::ScalarType input_dtype, at::Tensor& out);

// negative log likelihood (kernels/Loss.cpp)
std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    c10::SymInt ignore_index);
std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_output(const at::Tensor& self, const at::Tensor& target,
                                                             const std::optional<at::Tensor>& weight,
                                                             int64_t reduction, c10::SymInt ignore_index,
                                                             at::Tensor& output, at::Tensor& total_weight);
at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                             const at::Tensor& total_weight);
at::Tensor& nll_loss_backward_grad_input(const at::Tensor& grad_output, const at::Tensor& self,
                                         const at::Tensor& target, const std::optional<at::Tensor>& weight,
                                         int64_t reduction, c10::SymInt ignore_index, const at::Tensor& total_weight,
                                         at::Tensor& grad_input);

// row-wise: layer and group norm, cumulative sum, linspace, equal (kernels/Norm.cpp)
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm(const at::Tensor& input,
                                                                c10::SymIntArrayRef normalized_shape,
                                                                const std::optional<at::Tensor>& weight,
                                                                const std::optional<at::Tensor>& bias, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(const at::Tensor& input,
                                                                const std::optional<at::Tensor>& weight,
                                                                const std::optional<at::Tensor>& bias, c10::SymInt N,
                                                                c10::SymInt C, c10::SymInt HxW, int64_t group,
                                                                double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, c10::SymInt N, c10::SymInt C, c10::SymInt HxW, int64_t group,
    std::array<bool, 3> output_mask);
at::Tensor cumsum(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype);
at::Tensor& cumsum_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out);
at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out);
bool equal(const at::Tensor& self, const at::Tensor& other);

// matrix multiply
at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out);
at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2);
at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2, at::Tensor& out);
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha);
at::Tensor& addmm_(at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                   const at::Scalar& alpha);
at::Tensor& addmm_out(const at::Tensor& self, const at::Tensor& mat1, const at::Tensor& mat2, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out);

at::Tensor dot(const at::Tensor& self, const at::Tensor& tensor);
at::Tensor vdot(const at::Tensor& self, const at::Tensor& other);
at::Tensor addr(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                const at::Scalar& alpha);
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& out);
at::Tensor addmv(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                 const at::Scalar& alpha);
at::Tensor& addmv_(at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                   const at::Scalar& alpha);
at::Tensor& addmv_out(const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                      const at::Scalar& alpha, at::Tensor& out);

// clamp with scalar bounds (type promotion as CPU) and with tensor bounds
at::Tensor clamp(const at::Tensor& self, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max);
at::Tensor& clamp_(at::Tensor& self, const std::optional<at::Scalar>& min, const std::optional<at::Scalar>& max);
at::Tensor& clamp_out(const at::Tensor& self, const std::optional<at::Scalar>& min,
                      const std::optional<at::Scalar>& max, at::Tensor& out);
at::Tensor clamp_Tensor(const at::Tensor& self, const std::optional<at::Tensor>& min,
                        const std::optional<at::Tensor>& max);
at::Tensor& clamp__Tensor(at::Tensor& self, const std::optional<at::Tensor>& min, const std::optional<at::Tensor>& max);
at::Tensor& clamp_Tensor_out(const at::Tensor& self, const std::optional<at::Tensor>& min,
                             const std::optional<at::Tensor>& max, at::Tensor& out);
// random numbers from the device generator (kernels/Random.cpp)
at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> generator);
at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> generator);
at::Tensor& bernoulli__float(at::Tensor& self, double p, std::optional<at::Generator> generator);
at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> generator);
at::Tensor& random__from(at::Tensor& self, int64_t from, std::optional<int64_t> to,
                         std::optional<at::Generator> generator);
at::Tensor& random__to(at::Tensor& self, int64_t to, std::optional<at::Generator> generator);
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train);
at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> generator);
at::Tensor& bernoulli__Tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> generator);
at::Tensor bernoulli(const at::Tensor& self, std::optional<at::Generator> generator);
at::Tensor& normal_Tensor_Tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> generator,
                                     at::Tensor& out);
at::Tensor normal_Tensor_Tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> generator);
at::Tensor normal_Tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> generator);
at::Tensor normal_float_Tensor(double mean, const at::Tensor& std, std::optional<at::Generator> generator);
at::Tensor& randperm_generator_out(c10::SymInt n, std::optional<at::Generator> generator, at::Tensor& out);
at::Tensor& multinomial_out(const at::Tensor& self, c10::SymInt num_samples, bool replacement,
                            std::optional<at::Generator> generator, at::Tensor& out);
at::Tensor multinomial(const at::Tensor& self, c10::SymInt num_samples, bool replacement,
                       std::optional<at::Generator> generator);

at::Tensor& embedding_renorm_(at::Tensor& self, const at::Tensor& indices, double max_norm, double norm_type);

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef normalized_shape, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> output_mask);

// convolution: im2col/col2im around the matrix engine (kernels/Convolution.cpp)
at::Tensor convolution_overrideable(const at::Tensor& input, const at::Tensor& weight,
                                    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
                                    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed,
                                    c10::SymIntArrayRef output_padding, c10::SymInt groups);
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation, bool transposed, c10::SymIntArrayRef output_padding,
    c10::SymInt groups, std::array<bool, 3> output_mask);

// pooling, 2-d and 3-d (kernels/Pooling.cpp)
std::tuple<at::Tensor, at::Tensor> max_pool2d_with_indices(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                                 at::IntArrayRef dilation, bool ceil_mode);
at::Tensor max_pool2d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                  at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                  const at::Tensor& indices);
at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                            at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                          std::optional<int64_t> divisor_override);
at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                     at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                     bool ceil_mode, bool count_include_pad,
                                   std::optional<int64_t> divisor_override);
at::Tensor _adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef output_size);
at::Tensor _adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self);
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool2d(const at::Tensor& self, at::IntArrayRef output_size);
at::Tensor adaptive_max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                              const at::Tensor& indices);
std::tuple<at::Tensor, at::Tensor> max_pool3d_with_indices(const at::Tensor& self, at::IntArrayRef kernel_size,
                                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                                 at::IntArrayRef dilation, bool ceil_mode);
at::Tensor max_pool3d_with_indices_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                  at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                                  at::IntArrayRef padding, at::IntArrayRef dilation, bool ceil_mode,
                                                  const at::Tensor& indices);
at::Tensor avg_pool3d(const at::Tensor& self, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                            at::IntArrayRef padding, bool ceil_mode, bool count_include_pad,
                          std::optional<int64_t> divisor_override);
at::Tensor avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                     at::IntArrayRef kernel_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                     bool ceil_mode, bool count_include_pad,
                                   std::optional<int64_t> divisor_override);
at::Tensor _adaptive_avg_pool3d(const at::Tensor& self, c10::SymIntArrayRef output_size);
at::Tensor _adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self);
std::tuple<at::Tensor, at::Tensor> adaptive_max_pool3d(const at::Tensor& self, at::IntArrayRef output_size);
at::Tensor adaptive_max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                              const at::Tensor& indices);

// batch normalization (kernels/BatchNorm.cpp)
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> _native_batch_norm_legit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, bool training, double momentum, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> _native_batch_norm_legit_no_stats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    bool training, double momentum, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> _batch_norm_with_update(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    at::Tensor& running_mean, at::Tensor& running_var, double momentum, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> output_mask);
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_var, bool update, double eps,
    std::array<bool, 3> output_mask, const at::Tensor& reserve);

// more reductions (kernels/Statistics.cpp)
at::Tensor& all_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out);
at::Tensor& all_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out);
at::Tensor& all_all_out(const at::Tensor& self, at::Tensor& out);
at::Tensor all_dim(const at::Tensor& self, int64_t dim, bool keepdim);
at::Tensor all_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim);
at::Tensor all(const at::Tensor& self);
at::Tensor& any_out(const at::Tensor& self, int64_t dim, bool keepdim, at::Tensor& out);
at::Tensor& any_dims_out(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim, at::Tensor& out);
at::Tensor& any_all_out(const at::Tensor& self, at::Tensor& out);
at::Tensor any_dim(const at::Tensor& self, int64_t dim, bool keepdim);
at::Tensor any_dims(const at::Tensor& self, at::OptionalIntArrayRef dim, bool keepdim);
at::Tensor any(const at::Tensor& self);
at::Tensor prod(const at::Tensor& self, std::optional<at::ScalarType> dtype);
at::Tensor prod_dim_int(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype);
at::Tensor& prod_int_out(const at::Tensor& self, int64_t dim, bool keepdim, std::optional<at::ScalarType> dtype,
                         at::Tensor& out);
at::Tensor var_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<at::Scalar>& correction, bool keepdim);
at::Tensor& var_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out);
at::Tensor std_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                          const std::optional<at::Scalar>& correction, bool keepdim);
at::Tensor& std_correction_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                               const std::optional<at::Scalar>& correction, bool keepdim, at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> var_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<at::Scalar>& correction, bool keepdim);
std::tuple<at::Tensor, at::Tensor> std_mean_correction(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                       const std::optional<at::Scalar>& correction, bool keepdim);
at::Tensor linalg_vector_norm(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                              bool keepdim, std::optional<at::ScalarType> dtype);
at::Tensor& norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out);
at::Tensor norm_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                      at::ScalarType dtype);
at::Tensor& linalg_vector_norm_out(const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim,
                                   bool keepdim, std::optional<at::ScalarType> dtype, at::Tensor& out);

// indexing by index tensors (kernels/Gather.cpp); the out= kernels of structured entries
at::Tensor& gather_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, bool sparse_grad,
                       at::Tensor& out);
at::Tensor& scatter_src_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out);
at::Tensor& scatter_value_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value,
                              at::Tensor& out);
at::Tensor& scatter_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                               c10::string_view reduce, at::Tensor& out);
at::Tensor& scatter_value_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                     const at::Scalar& value, c10::string_view reduce, at::Tensor& out);
at::Tensor& scatter_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                            at::Tensor& out);
at::Tensor& scatter_reduce_two_out(const at::Tensor& self, int64_t dim, const at::Tensor& index,
                                   const at::Tensor& src, c10::string_view reduce, bool include_self,
                                   at::Tensor& out);
at::Tensor& index_reduce_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                             c10::string_view reduce, bool include_self, at::Tensor& out);
at::Tensor max_unpool2d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size);
at::Tensor max_unpool3d(const at::Tensor& self, const at::Tensor& indices, c10::SymIntArrayRef output_size,
                        at::IntArrayRef stride, at::IntArrayRef padding);
at::Tensor& index_add_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                          const at::Scalar& alpha, at::Tensor& out);
at::Tensor index_Tensor(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices);
at::Tensor& index_Tensor_out(const at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                             at::Tensor& out);
at::Tensor& _index_put_impl_(at::Tensor& self, const c10::List<std::optional<at::Tensor>>& indices,
                             const at::Tensor& values, bool accumulate, bool unsafe);
at::Tensor nonzero(const at::Tensor& self);
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out);
at::Tensor isin_Tensor_Tensor(const at::Tensor& elements, const at::Tensor& test_elements, bool assume_unique,
                              bool invert);
at::Tensor& isin_Tensor_Tensor_out(const at::Tensor& elements, const at::Tensor& test_elements, bool assume_unique,
                                   bool invert, at::Tensor& out);

// layout (kernels/Shape.cpp)
at::Tensor& tril_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out);
at::Tensor& triu_out(const at::Tensor& self, c10::SymInt diagonal, at::Tensor& out);
at::Tensor flip(const at::Tensor& self, at::IntArrayRef dims);
at::Tensor roll(const at::Tensor& self, c10::SymIntArrayRef shifts, at::IntArrayRef dims);
at::Tensor channel_shuffle(const at::Tensor& self, c10::SymInt groups);
at::Tensor unfold_backward(const at::Tensor& grad_in, c10::SymIntArrayRef input_sizes, int64_t dim, int64_t size,
                           int64_t step);

// sorting (kernels/Sort.cpp)
std::tuple<at::Tensor&, at::Tensor&> sort_values_stable(const at::Tensor& self, std::optional<bool> stable,
                                                        int64_t dim, bool descending, at::Tensor& values,
                                                        at::Tensor& indices);
std::tuple<at::Tensor, at::Tensor> sort_stable(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                               bool descending);
std::tuple<at::Tensor&, at::Tensor&> topk_values(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest,
                                                 bool sorted, at::Tensor& values, at::Tensor& indices);
std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, c10::SymInt k, int64_t dim, bool largest,
                                        bool sorted);
at::Tensor cumprod(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype);
at::Tensor& cumprod_out(const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, at::Tensor& out);
at::Tensor& _logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out);

// dense linear algebra (kernels/Linalg.cpp)
at::Tensor linalg_solve_triangular(const at::Tensor& self, const at::Tensor& B, bool upper, bool left,
                                   bool unitriangular);
at::Tensor& linalg_solve_triangular_out(const at::Tensor& self, const at::Tensor& B, bool upper, bool left,
                                        bool unitriangular, at::Tensor& out);
std::tuple<at::Tensor&, at::Tensor&> triangular_solve_X(const at::Tensor& self, const at::Tensor& A, bool upper,
                                                        bool transpose, bool unitriangular, at::Tensor& X,
                                                        at::Tensor& M);
at::Tensor& linalg_lu_solve_out(const at::Tensor& LU, const at::Tensor& pivots, const at::Tensor& B, bool left,
                                bool adjoint, at::Tensor& out);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> lu_unpack_out(const at::Tensor& LU_data,
                                                                const at::Tensor& LU_pivots, bool unpack_data,
                                                                bool unpack_pivots, at::Tensor& P, at::Tensor& L,
                                                                at::Tensor& U);
at::Tensor _cholesky_solve_helper(const at::Tensor& self, const at::Tensor& A, bool upper);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_factor_ex_out(const at::Tensor& A, bool pivot,
                                                                          bool check_errors, at::Tensor& LU,
                                                                          at::Tensor& pivots, at::Tensor& info);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> linalg_lu_out(const at::Tensor& A, bool pivot, at::Tensor& P,
                                                                at::Tensor& L, at::Tensor& U);
at::Tensor cholesky(const at::Tensor& self, bool upper);
at::Tensor& cholesky_out(const at::Tensor& self, bool upper, at::Tensor& out);
std::tuple<at::Tensor&, at::Tensor&> linalg_cholesky_ex_L(const at::Tensor& self, bool upper, bool check_errors,
                                                          at::Tensor& L, at::Tensor& info);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> _linalg_solve_ex_result(
    const at::Tensor& A, const at::Tensor& B, bool left, bool check_errors, at::Tensor& result, at::Tensor& LU,
    at::Tensor& pivots, at::Tensor& info);
std::tuple<at::Tensor&, at::Tensor&> linalg_inv_ex_inverse(const at::Tensor& A, bool check_errors,
                                                           at::Tensor& inverse, at::Tensor& info);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&> _linalg_det_result(const at::Tensor& A, at::Tensor& result,
                                                                     at::Tensor& LU, at::Tensor& pivots);
std::tuple<at::Tensor&, at::Tensor&, at::Tensor&, at::Tensor&> _linalg_slogdet_sign(const at::Tensor& A,
                                                                                    at::Tensor& sign,
                                                                                    at::Tensor& logabsdet,
                                                                                    at::Tensor& LU,
                                                                                    at::Tensor& pivots);
at::Tensor ormqr(const at::Tensor& self, const at::Tensor& input2, const at::Tensor& input3, bool left,
                 bool transpose);
at::Tensor& ormqr_out(const at::Tensor& self, const at::Tensor& input2, const at::Tensor& input3, bool left,
                      bool transpose, at::Tensor& out);
at::Tensor linalg_householder_product(const at::Tensor& input, const at::Tensor& tau);
at::Tensor& linalg_householder_product_out(const at::Tensor& input, const at::Tensor& tau, at::Tensor& out);
std::tuple<at::Tensor&, at::Tensor&> linalg_qr_out(const at::Tensor& A, c10::string_view mode, at::Tensor& Q,
                                                   at::Tensor& R);
at::Tensor linalg_matrix_exp(const at::Tensor& self);

// losses (kernels/Loss.cpp)
std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      c10::SymInt ignore_index);
at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, c10::SymInt ignore_index,
                               const at::Tensor& total_weight);
at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction);
at::Tensor mse_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             int64_t reduction);
at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta);
at::Tensor smooth_l1_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                   int64_t reduction, double beta);
at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta);
at::Tensor huber_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               int64_t reduction, double delta);
std::tuple<at::Tensor, at::Tensor> log_sigmoid_forward(const at::Tensor& self);
at::Tensor log_sigmoid_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& buffer);
at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction);
at::Tensor binary_cross_entropy_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& weight, int64_t reduction);

// pointwise ops with several operands or results (kernels/Pointwise.cpp)
at::Tensor glu(const at::Tensor& self, int64_t dim);
at::Tensor glu_backward(const at::Tensor& grad_output, const at::Tensor& self, int64_t dim);
at::Tensor _prelu_kernel(const at::Tensor& self, const at::Tensor& weight);
std::tuple<at::Tensor, at::Tensor> _prelu_kernel_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                                          const at::Tensor& weight);
at::Tensor& linalg_cross_out(const at::Tensor& self, const at::Tensor& other, int64_t dim, at::Tensor& out);
at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale);

// resampling: nearest, linear and cubic upsampling, padding (kernels/Resample.cpp)
at::Tensor upsample_nearest1d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales);
at::Tensor upsample_nearest1d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, std::optional<double> scales);
at::Tensor upsample_nearest2d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor upsample_nearest2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor upsample_nearest3d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor upsample_nearest3d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor _upsample_nearest_exact1d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales);
at::Tensor _upsample_nearest_exact1d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, std::optional<double> scales);
at::Tensor _upsample_nearest_exact2d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor _upsample_nearest_exact2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor _upsample_nearest_exact3d(const at::Tensor& self, c10::SymIntArrayRef output_size,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor _upsample_nearest_exact3d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w);
at::Tensor& upsample_linear1d_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
    std::optional<double> scales, at::Tensor& out);
at::Tensor& upsample_linear1d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, bool align_corners,
    std::optional<double> scales, at::Tensor& grad_input);
at::Tensor& upsample_bilinear2d_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
    std::optional<double> scales_h, std::optional<double> scales_w, at::Tensor& out);
at::Tensor& upsample_bilinear2d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, bool align_corners,
    std::optional<double> scales_h, std::optional<double> scales_w, at::Tensor& grad_input);
at::Tensor& upsample_trilinear3d_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w, at::Tensor& out);
at::Tensor& upsample_trilinear3d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, bool align_corners,
    std::optional<double> scales_d, std::optional<double> scales_h, std::optional<double> scales_w,
    at::Tensor& grad_input);
at::Tensor& upsample_bicubic2d_out(const at::Tensor& self, c10::SymIntArrayRef output_size, bool align_corners,
    std::optional<double> scales_h, std::optional<double> scales_w, at::Tensor& out);
at::Tensor& upsample_bicubic2d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef output_size,
    c10::SymIntArrayRef input_size, bool align_corners,
    std::optional<double> scales_h, std::optional<double> scales_w, at::Tensor& grad_input);
at::Tensor reflection_pad1d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor reflection_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor reflection_pad2d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor reflection_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor reflection_pad3d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor reflection_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad1d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad1d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad2d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad3d(const at::Tensor& self, c10::SymIntArrayRef padding);
at::Tensor replication_pad3d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding);

// fused recurrent cells (kernels/Recurrent.cpp)
std::tuple<at::Tensor, at::Tensor, at::Tensor> _thnn_fused_lstm_cell(const at::Tensor& input_gates,
                                                                     const at::Tensor& hidden_gates,
                                                                     const at::Tensor& cx,
                                                                     const std::optional<at::Tensor>& input_bias,
                                                                     const std::optional<at::Tensor>& hidden_bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor> _thnn_fused_lstm_cell_backward_impl(
    const std::optional<at::Tensor>& grad_hy, const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias);
std::tuple<at::Tensor, at::Tensor> _thnn_fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                        const at::Tensor& hx,
                                                        const std::optional<at::Tensor>& input_bias,
                                                        const std::optional<at::Tensor>& hidden_bias);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> _thnn_fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias);

// GradScaler (kernels/Amp.cpp)
void _amp_foreach_non_finite_check_and_unscale_(at::TensorList self, at::Tensor& found_inf,
                                                const at::Tensor& inv_scale);
at::Tensor& _amp_update_scale_(at::Tensor& self, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                               double scale_growth_factor, double scale_backoff_factor, int64_t growth_interval);

}  // namespace rbln::kernels
