"""Zoo specs, the registry, parameter checking and graph names."""

import pytest

from planner.zoo import MODELS, ZooError, build, from_spec, parse_spec
from planner.zoo.common import defaults

TINY_MLP = dict(batch=2, hidden=[4], in_features=3, classes=2)


def test_parse_spec_types():
    name, params = parse_spec("zoo:mlp?batch=32&hidden=256,128&loss=false&width=0.5&x=TRUE")
    assert name == "mlp"
    assert params == {"batch": 32, "hidden": [256, 128], "loss": False, "width": 0.5, "x": True}
    assert type(params["batch"]) is int and type(params["width"]) is float


def test_parse_spec_without_prefix_or_query():
    assert parse_spec("resnet") == ("resnet", {})
    assert parse_spec("zoo:resnet") == ("resnet", {})
    assert parse_spec("resnet?depth=101") == ("resnet", {"depth": 101})


@pytest.mark.parametrize("spec, words", [
    ("zoo:", ["names no model"]),
    ("zoo:mlp?batch", ["'batch'", "key=value"]),
    ("zoo:mlp?batch=", ["key=value"]),
    ("zoo:mlp?batch=2&batch=3", ["'batch'", "twice"]),
    ("zoo:mlp?hidden=4,x", ["'hidden'", "list of ints"]),
    ("zoo:mlp?batch=big", ["'batch'", "'big'"]),
])
def test_parse_spec_errors(spec, words):
    with pytest.raises(ZooError) as e:
        parse_spec(spec)
    assert all(w in str(e.value) for w in words)


def test_from_spec_equals_build():
    spec = "zoo:mlp?batch=2&hidden=4&in_features=3&classes=2"
    assert from_spec(spec) == build("mlp", **TINY_MLP)


def test_unknown_model_lists_known_ones():
    with pytest.raises(ZooError) as e:
        build("resnot")
    assert "'resnot'" in str(e.value)
    assert all(name in str(e.value) for name in MODELS)


def test_unknown_parameter_names_model_and_accepted_params():
    with pytest.raises(ZooError) as e:
        from_spec("zoo:resnet?dept=50")
    msg = str(e.value)
    assert "'dept'" in msg and "'resnet'" in msg
    assert all(f"{key}=" in msg for key in defaults(MODELS["resnet"]))
    assert "depth=50" in msg and "batch=32" in msg


@pytest.mark.parametrize("params, key", [
    ({"depth": 51}, "depth"),        # not a ResNet depth
    ({"depth": 50.0}, "depth"),      # float for an int
    ({"loss": 2}, "loss"),           # not a bool
    ({"width": "wide"}, "width"),
    ({"width": -1.0}, "width"),
    ({"batch": 0}, "batch"),
])
def test_bad_parameter_values(params, key):
    with pytest.raises(ZooError) as e:
        build("resnet", **params)
    assert f"'{key}'" in str(e.value) and "resnet" in str(e.value)


def test_too_small_image_is_a_zoo_error():
    for name in ("alexnet", "vgg16", "densenet", "inception_v3", "lenet"):
        with pytest.raises(ZooError, match="'image'"):
            build(name, image=3)
    with pytest.raises(ZooError, match="'image'"):
        build("dcgan", image=48)


def test_coercions():
    assert build("mlp", **{**TINY_MLP, "hidden": 4}) == build("mlp", **TINY_MLP)
    assert build("mlp", **{**TINY_MLP, "loss": 1}) == build("mlp", **TINY_MLP)
    g = build("lenet", batch=2, width=1)  # an int where a float is expected
    assert g.name == "lenet_batch2"


def test_graph_names_list_non_default_params():
    assert build("resnet").name == "resnet"
    assert build("resnet", depth=50, batch=32).name == "resnet"
    assert build("resnet", depth=101, batch=8).name == "resnet_batch8_depth101"
    assert build("mlp", **TINY_MLP).name == "mlp_batch2_in_features3_hidden4_classes2"
    assert build("lenet", width=0.5, loss=False).name == "lenet_width0p5_lossfalse"


def test_every_builder_has_keyword_only_params_with_defaults():
    import inspect

    for name, builder in MODELS.items():
        assert builder.__name__ == name
        params = inspect.signature(builder).parameters.values()
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in params), name
        keys = {p.name for p in params}
        assert {"batch", "loss"} <= keys, name
