"""A feed or parameter in another byte order than the host's is named as such, with the
conversion that makes it readable (templates/common/bindings.h, not_an_array), not called
"not an array"."""

from __future__ import annotations

import numpy as np
import pytest

from planner.graph.interpret import init_params, random_feeds


def test_a_big_endian_feed_is_named_with_its_byte_order(mlp_module, mlp_graph):
    ex = mlp_module.Executor()
    ex.load_params(init_params(mlp_graph, seed=0))
    feeds = random_feeds(mlp_graph, seed=1)
    name = next(k for k, v in feeds.items() if v.dtype == np.float32)
    swapped = {**feeds, name: feeds[name].astype(">f4")}
    with pytest.raises(ValueError) as info:
        ex.step(swapped)
    assert str(info.value) == (f"feed '{name}' is big-endian (dtype >f4); convert it to the "
                               f"host's byte order first: a.astype(a.dtype.newbyteorder('='))")
    fixed = swapped[name].astype(swapped[name].dtype.newbyteorder("="))
    assert float(ex.step({**feeds, name: fixed})["loss"]) > 0


def test_a_big_endian_parameter_is_named_with_its_byte_order(mlp_module, mlp_graph):
    ex = mlp_module.Executor()
    params = init_params(mlp_graph, seed=0)
    with pytest.raises(ValueError, match="parameter 'fc1/weight' is big-endian"):
        ex.load_params({**params, "fc1/weight": params["fc1/weight"].astype(">f4")})
    with pytest.raises(ValueError, match="feed '.*' is not an array"):
        ex.step({k: [1, 2] for k in random_feeds(mlp_graph, seed=1)})
