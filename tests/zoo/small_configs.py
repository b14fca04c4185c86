"""Small configurations of every zoo model (planner.zoo.build keyword arguments): tests that run,
plan or differentiate whole models use them to stay fast while keeping every layer kind."""

# Small configurations for the reference forward: tiny batch, image and width. Batch 2 where the
# model has BatchNorm in training mode (it needs more than one value per channel).
SMALL = {
    "mlp": dict(batch=2, hidden=[4], in_features=3, classes=2),
    "lenet": dict(batch=2, image=8, width=0.5),
    "alexnet": dict(batch=1, image=63, width=0.0625, classes=5),
    "vgg16": dict(batch=1, image=32, width=0.0625, classes=5),
    "resnet": dict(batch=2, image=32, width=0.125, depth=18, classes=5),
    "inception_v3": dict(batch=1, image=16, width=0.0625, classes=5),
    "densenet": dict(batch=2, image=32, width=0.125, classes=5),
    "wide_deep": dict(batch=4, tables=5, vocab=[7, 3, 5, 2, 9], dim=3, hidden=[8, 4]),
    "dcgan": dict(batch=2, image=8, width=0.0625, nz=4),
    "lstm": dict(batch=2, seq=3, hidden=4, vocab=11),
    "gpt": dict(batch=2, seq=4, dim=8, heads=2, layers=1, vocab=11),
    "bert": dict(batch=2, seq=4, dim=8, heads=2, layers=1, vocab=11),
}

# Small configurations for training steps (autodiff's finite differences, loss scaling): every
# layer kind kept, channels and images shrunk. Batch 4 where the last BatchNorms see 1x1 maps:
# over two values their variance can come near epsilon, where the loss curves too sharply for
# finite differences.
SMALL_TRAINING = {
    "mlp": dict(batch=3, in_features=5, hidden=[4, 3], classes=3),
    "lenet": dict(batch=2, image=8, width=0.5),
    "alexnet": dict(batch=2, image=63, width=0.0625, classes=5),
    "vgg16": dict(batch=2, image=32, width=0.0625, depth=11, classes=5),
    "resnet": dict(batch=2, image=32, width=0.0625, depth=18, classes=5),
    "inception_v3": dict(batch=4, image=75, width=0.0625, classes=5),
    "densenet": dict(batch=4, image=32, width=0.125, classes=5),
    "wide_deep": dict(batch=4, tables=3, vocab=[10], dim=2, dense=3, hidden=[4]),
    "dcgan": dict(batch=2, image=8, nz=4, width=0.0625),
    "lstm": dict(batch=2, seq=3, hidden=4, vocab=7, layers=2, dropout=0.3),
    "gpt": dict(batch=2, seq=4, dim=8, heads=2, layers=2, vocab=7),
    "bert": dict(batch=2, seq=4, dim=8, heads=2, layers=2, vocab=7),
}
