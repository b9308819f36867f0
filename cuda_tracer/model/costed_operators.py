"""The operators whose cost (FLOPs, bytes moved) an analysis counts from their recorded shapes.

A trace recorded with ``record_shapes`` gives every operator its inputs' shapes, and most of them
(views, ``aten::empty``, autograd nodes, composites such as ``aten::linear`` whose children do the
work) cost nothing to count. The reader keeps the shapes of the operators named here only, which
keeps a shaped trace's read time within a few per cent of an unshaped one's. They are exactly the
operators ``otel_profiler.analysis.flops.formulas`` has a formula for (a test holds the two equal).
"""

from __future__ import annotations

import numpy as np

COSTED_OPERATORS: frozenset[str] = frozenset({
    "aten::_convolution", "aten::_efficient_attention_backward", "aten::_efficient_attention_forward",
    "aten::_flash_attention_backward", "aten::_flash_attention_forward", "aten::_fused_rms_norm",
    "aten::_fused_rms_norm_backward", "aten::_grouped_mm", "aten::_log_softmax",
    "aten::_log_softmax_backward_data", "aten::_native_batch_norm_legit", "aten::_native_batch_norm_legit_no_training",
    "aten::_scaled_dot_product_cudnn_attention", "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward", "aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_flash_attention_backward",
    "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_flash_attention_for_cpu_backward", "aten::_scaled_dot_product_fused_attention_overrideable",
    "aten::_scaled_dot_product_fused_attention_overrideable_backward", "aten::_scaled_grouped_mm", "aten::_scaled_mm",
    "aten::_slow_conv2d_forward", "aten::_softmax", "aten::_softmax_backward_data",
    "aten::abs", "aten::abs_", "aten::add",
    "aten::add_", "aten::addbmm", "aten::addbmm_",
    "aten::addcdiv", "aten::addcdiv_", "aten::addcmul",
    "aten::addcmul_", "aten::addmm", "aten::addmm_",
    "aten::amax", "aten::amin", "aten::baddbmm",
    "aten::baddbmm_", "aten::bmm", "aten::clamp",
    "aten::clamp_", "aten::clamp_max", "aten::clamp_max_",
    "aten::clamp_min", "aten::clamp_min_", "aten::convolution",
    "aten::convolution_backward", "aten::convolution_overrideable", "aten::copy",
    "aten::copy_", "aten::cos", "aten::cos_",
    "aten::cudnn_batch_norm", "aten::cudnn_batch_norm_backward", "aten::cudnn_convolution",
    "aten::cudnn_convolution_backward", "aten::cudnn_convolution_transpose", "aten::div",
    "aten::div_", "aten::dropout", "aten::dropout_",
    "aten::elu", "aten::elu_", "aten::erf",
    "aten::erf_", "aten::exp", "aten::exp_",
    "aten::fill", "aten::fill_", "aten::gelu",
    "aten::gelu_", "aten::gelu_backward", "aten::gelu_backward_",
    "aten::hardswish", "aten::hardswish_", "aten::hardtanh",
    "aten::hardtanh_", "aten::leaky_relu", "aten::leaky_relu_",
    "aten::lerp", "aten::lerp_", "aten::linalg_vector_norm",
    "aten::log", "aten::log_", "aten::masked_fill",
    "aten::masked_fill_", "aten::max", "aten::maximum",
    "aten::maximum_", "aten::mean", "aten::min",
    "aten::minimum", "aten::minimum_", "aten::miopen_batch_norm",
    "aten::miopen_batch_norm_backward", "aten::miopen_convolution", "aten::miopen_convolution_transpose",
    "aten::miopen_depthwise_convolution", "aten::mish", "aten::mish_",
    "aten::mkldnn_convolution", "aten::mm", "aten::mul",
    "aten::mul_", "aten::nan_to_num", "aten::nan_to_num_",
    "aten::native_batch_norm", "aten::native_batch_norm_backward", "aten::native_dropout",
    "aten::native_dropout_backward", "aten::native_dropout_backward_", "aten::native_group_norm",
    "aten::native_group_norm_backward", "aten::native_layer_norm", "aten::native_layer_norm_backward",
    "aten::neg", "aten::neg_", "aten::norm",
    "aten::pow", "aten::pow_", "aten::prod",
    "aten::reciprocal", "aten::reciprocal_", "aten::relu",
    "aten::relu_", "aten::rsqrt", "aten::rsqrt_",
    "aten::sigmoid", "aten::sigmoid_", "aten::sigmoid_backward",
    "aten::sigmoid_backward_", "aten::silu", "aten::silu_",
    "aten::silu_backward", "aten::silu_backward_", "aten::sin",
    "aten::sin_", "aten::slow_conv3d_forward", "aten::slow_conv_dilated2d",
    "aten::slow_conv_dilated3d", "aten::slow_conv_transpose2d", "aten::slow_conv_transpose3d",
    "aten::softplus", "aten::softplus_", "aten::sqrt",
    "aten::sqrt_", "aten::std", "aten::sub",
    "aten::sub_", "aten::sum", "aten::tanh",
    "aten::tanh_", "aten::tanh_backward", "aten::tanh_backward_",
    "aten::threshold", "aten::threshold_", "aten::threshold_backward",
    "aten::threshold_backward_", "aten::var", "aten::where",
    "aten::where_", "aten::zero", "aten::zero_",
})


def costed_operators(strings: list[str]) -> np.ndarray:
    """Per string id of ``strings``: whether it names a costed operator."""
    return np.fromiter((s in COSTED_OPERATORS for s in strings), bool, len(strings))
