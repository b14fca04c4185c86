"""The convolutions' scratch rule (planner/ops/conv_scratch.py) at every thread count: its
figures worked out once per geometry (Bookings) give what the bookings it cites give, each
thread count written out on its own."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from planner.ops import get_op
from planner.ops.base import TensorType
from planner.ops.conv_scratch import BLOCK, F32, GEMM_LIMIT, SLACK, library_scratchpad


def _round(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def bookings(x, w, y, groups, weight_gradient, threads, direct):
    # oneDNN 3.2's x86 bookings (module docstring), at one thread count.
    _, c, h, wd = x
    o, c_g, kh, kw = w
    oh, ow = y[2], y[3]
    per_thread = c_g * kh * kw * oh * ow + h * wd * c_g + oh * ow * (o // groups)
    if weight_gradient and not direct:
        per_thread += 4 * o * c_g * kh * kw
    gemm = F32 * threads * per_thread
    if gemm >= GEMM_LIMIT:
        gemm = F32 * per_thread
    jit = 0
    if weight_gradient:
        padded = groups * _round(o // groups) * _round(c_g) * kh * kw + groups * _round(
            o // groups)
        jit = F32 * min(threads, x[0] * max(oh, ow)) * padded
    taps = kh * kw * -(-c_g // BLOCK)
    images = (oh + kh) * (ow + kw) * _round(o) + (h + kh) * (wd + kw) * _round(c)
    brgemm = threads * (F32 * images + 64 * taps) + 4 * SLACK
    return max(gemm, jit, brgemm) + 3 * SLACK


geometry = st.tuples(st.integers(1, 64), st.integers(1, 600), st.integers(1, 64),
                     st.integers(1, 40), st.sampled_from([1, 3, 5]), st.sampled_from([1, 2]),
                     st.booleans(), st.booleans(), st.integers(1, 300))


@settings(max_examples=300, deadline=None)
@given(geometry)
def test_library_scratchpad_is_the_bookings_at_each_thread_count(case):
    n, c, o, hw, k, groups, grad, direct, threads = case
    c, o = c * groups, o * groups
    x, w, y = (n, c, hw + k, hw + k), (o, c // groups, k, k), (n, o, hw + 1, hw + 1)
    assert library_scratchpad(x, w, y, groups, grad, threads, direct) == bookings(
        x, w, y, groups, grad, threads, direct)


def test_a_nodes_rule_by_thread_count_is_the_rule():
    attrs = {"strides": [1, 1], "pads": [1, 1, 1, 1], "dilations": [1, 1], "groups": 1}
    x, w, y = TensorType((4, 256, 2, 2)), TensorType((256, 256, 3, 3)), TensorType((4, 256, 2, 2))
    for op, ins, outs in (("Conv2D", [x, w], [y]), ("Conv2DBackpropFilter", [x, y], [w]),
                          ("Conv2DBackpropInput", [y, w], [x])):
        rule = get_op(op).scratch
        at = rule.by_threads(ins, outs, attrs)
        assert [at(t) for t in range(0, 70)] == [rule(ins, outs, attrs, t) for t in range(0, 70)]
    # ResNet-18's last weight gradient at 2 threads (the module docstring's figure).
    assert get_op("Conv2DBackpropFilter").scratch([x, y], [w], attrs, 2) >= 18_948_352
