"""The onnx package's node conformance cases, float32 ones (node_cases.py): every case that
imports must match its expected outputs on the planner's numpy reference (but the listed
deviations), and the cases of the CNN, transformer and recurrent ops must import. Prints how
many cases import and pass (bench/bench_onnx_node.py adds the executor's count).
"""

from __future__ import annotations

import pytest

from tests.importers.node_cases import DEVIATIONS, float32_cases, outcome, summary

# Cases that must import and pass: the ops of the CNNs, transformers and RNNs of issue 12.
REQUIRED = [
    "test_conv_with_strides_padding", "test_batchnorm_example", "test_relu",
    "test_maxpool_2d_ceil", "test_averagepool_2d_pads", "test_globalaveragepool",
    "test_gemm_default_single_elem_vector_bias", "test_matmul_4d", "test_softmax_axis_1",
    "test_logsoftmax_axis_0", "test_layer_normalization_4d_axis1", "test_gelu_default_1",
    "test_gelu_tanh_1", "test_erf", "test_where_example", "test_pow", "test_sqrt",
    "test_clip_default_inbounds", "test_attention_4d_causal_expanded", "test_concat_3d_axis_1",
    "test_split_equal_parts_1d_opset18",
    "test_transpose_default", "test_lstm_defaults", "test_lstm_with_initial_bias",
    "test_gru_defaults", "test_gru_seq_length", "test_dropout_default",
    "test_batchnorm_epsilon_training_mode", "test_sce_mean", "test_hardswish",
    "test_softsign", "test_reciprocal", "test_mish", "test_celu", "test_hardsigmoid",
    "test_reduce_max_default_axes_keepdims_random", "test_reduce_min_default_axes_keepdims_example",
    "test_rms_normalization_3d_axis1_epsilon", "test_rms_normalization_4d_axis_negative_1",
]


def results(static_ints: bool = False):
    return [outcome(c, static_ints) for c in float32_cases()]


@pytest.mark.parametrize("static_ints", [False, True])
def test_every_imported_case_matches_its_expected_outputs(static_ints):
    failed = [f"{r.case}: {r.error or f'{r.worst:.3g}x the tolerance'}"
              for r in results(static_ints)
              if r.imported and not r.passed and r.case not in DEVIATIONS]
    assert failed == []


def test_the_cnn_transformer_and_rnn_cases_pass():
    by_name = {r.case: r for r in results()}
    missing = [n for n in REQUIRED if n not in by_name]
    assert missing == [], "cases the onnx package no longer has"
    failing = [n for n in REQUIRED if not (by_name[n].passed or n in DEVIATIONS)]
    assert failing == []


def test_summary(capsys):
    counts, static = summary(results()), summary(results(static_ints=True))
    with capsys.disabled():
        print(f"\nONNX node conformance (float32): {counts['cases']} cases, "
              f"{counts['imported']} import, {counts['reference']} pass on the reference; "
              f"with small integer inputs as constants {static['imported']} import, "
              f"{static['reference']} pass")
    assert counts["cases"] > 1000  # onnx 1.23 generates 1224
    assert static["imported"] >= counts["imported"]
