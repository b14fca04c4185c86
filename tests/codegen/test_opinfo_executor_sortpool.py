"""The OpInfos that the search, histogram, median, mode, pool, transposed-convolution and norm
statistics rules and the per-sample weights' gradient made pass
(planner/importers/torch/rules_search.py, rules_sort.py, rules_pool.py, rules_conv.py,
norm_stats.py, planner/ops/embedding_bag.py), their passing samples through the generated CPU
executor as tests/codegen/test_opinfo_executor.py runs the fast subset's: one build, each output and
gradient held to torch's float64 value."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("expecttest")

from tests.helpers.opinfo_executor import check_on_cpu  # noqa: E402

NAMES = ("nanmedian", "masked.median", "native_layer_norm", "native_group_norm",
         "nn.functional.avg_pool2d", "nn.functional.avg_pool3d",
         "nn.functional.adaptive_avg_pool1d", "nn.functional.adaptive_avg_pool3d",
         "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d", "searchsorted",
         "bucketize", "isin", "histc", "histogram", "max_pool2d_with_indices_backward",
         "logcumsumexp", "mode", "nn.functional.embedding_bag", "histogramdd")


@pytest.mark.slow  # half a minute of compiling one merged graph
def test_their_passing_samples_on_the_cpu_executor(tmp_path):
    check_on_cpu(NAMES, tmp_path, 30)
