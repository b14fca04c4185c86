"""Op definitions, one module per family. Importing this package registers every op.

Families: conv, pool, norm (BatchNorm, LRN), matmul (MatMul, BiasAdd), activation,
elementwise (broadcasting binary ops, AddN, unary math), shape (Concat, Split, Slice, Reshape,
Flatten, Transpose, ...), reduce, embedding, dropout, loss.
"""

from planner.ops.base import (  # noqa: F401
    REGISTRY,
    Attr,
    GradBuilder,
    OpDef,
    OpError,
    TensorType,
    get_op,
    register,
)
from planner.ops import (  # noqa: F401, E402
    activation,
    conv,
    dropout,
    elementwise,
    embedding,
    loss,
    matmul,
    norm,
    pool,
    reduce,
    shape,
)
