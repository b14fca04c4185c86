"""Op definitions, one module per family. Importing this package registers every op.

Families: cast (dtype conversion), conv, pool, norm (BatchNorm, LRN), matmul (MatMul,
BiasAdd), activation, elementwise (broadcasting binary ops, AddN, unary math), shape (Concat,
Split, Slice, Reshape, Flatten, Transpose, ...), reduce, embedding, dropout, random (RandomUniform,
RandomNormal, Bernoulli, RandomInt, RandomPerm on Dropout's generator), loss, nll_loss (NLLLoss:
weights, ignore_index, smoothing, any reduction), optim
(parameter updates, the step counter and the loss seed of training graphs), loss_scale
(fp16-mixed dynamic loss scaling: UnscaleGrads, UpdateLossScale, SkipOnOverflow), collective
(AllReduce of data-parallel training), clip_grad_norm (ClipGradNorm:
clip_grad_norm_ over a step's gradients). For the ONNX importer: unary_math (Exp, Log, Sqrt, Abs,
Softplus, Elu, Selu, Clip, ...), binary_math (Pow, Max, Min, PRelu), log_softmax, pad, resize
(Resize: nn.Upsample, F.interpolate). For transformers: layer_norm, gelu (Gelu, Erf), mask
(Where, CausalMask), scaled_softmax (Scale, CausalMask and Softmax fused: ScaledSoftmax).
group_norm: GroupNorm, InstanceNormalization. depth_to_space:
DepthToSpace, SpaceToDepth (nn.PixelShuffle, nn.PixelUnshuffle). cumsum: CumSum, CumProd,
CumProdGrad. topk: TopK, TopKGrad. pool_nd: MaxPoolND, AvgPoolND (1 to 3 spatial axes, adaptive
or windowed, with indices), PoolScatter, PoolGather (max_unpool). reductions: ReduceMax,
ReduceMin, ReduceProd, ReduceNanSum, ReduceNanMean, ReduceLogSumExp, ReduceNorm, ReduceAny,
ReduceAll and their ReduceGrad. index: IndexGather, IndexScatter (gather, scatter,
index_select, index_put, take). embedding_bag: EmbeddingBag, EmbeddingBagGrad,
EmbeddingBagWeightGrad. cummax: CumMax (cummax, cummin). lstm: LSTMCell (the element-wise
part of an LSTM step, fused) and its gradient. pointwise_table: element-wise ops as rows of
one table (log1p, trigonometric, rounding, fmod, remainder, atan2, lerp, comparisons, logic,
isnan, ...), each row's reference, gradient ops and kernels derived from its formula.
integer: BitwiseAnd/Or/Xor/Not, ShiftLeft/Right, IntDivFloor, IntDivTrunc, IntRemainder.
fft: FFT (complex-to-complex DFT of a complex tensor's planes; pocketfft on the CPU).
linalg_eig: MatrixEig (a general real matrix's eigenvalues and eigenvectors, as planes).
"""

from planner.ops import (  # noqa: F401, E402
    activation,
    binary_math,
    cast,
    clip_grad_norm,
    collective,
    conv,
    cummax,
    cumsum,
    depth_to_space,
    dropout,
    elementwise,
    embedding,
    embedding_bag,
    fft,
    gelu,
    grid_sample,
    group_norm,
    index,
    integer,
    layer_norm,
    linalg,
    linalg_eig,
    log_softmax,
    loss,
    loss_scale,
    lr_schedule,
    lstm,
    mask,
    matmul,
    nll_loss,
    norm,
    optim,
    pad,
    pointwise_table,
    pool,
    pool_nd,
    random,
    reduce,
    reductions,
    resize,
    scaled_softmax,
    shape,
    special_table,
    topk,
    unary_math,
)
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
