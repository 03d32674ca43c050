"""The operations a probed expression may use: a curated list, not "anything under torch".

Everything here is a pure function of its tensor arguments: no I/O (`torch.load`,
`torch.save`, `torch.hub`), no code loading or compilation (`torch.ops`, `torch.jit`,
`torch.compile`, `torch.utils`), no global state (`torch.manual_seed`, `torch.set_*`), no
in-place update of an existing tensor, no escape to Python objects (`numpy`, `tolist`,
`item`), no hooks and no autograd calls. Creation from sizes (`torch.ones(n)`, `repeat`,
`expand`, `linspace`) is allowed because every op runs inside the per-finding budget
(budget.py: sizes and work bounded before it runs, a watchdog after); random creation draws
from a generator seeded by the call's own text, never from the global generator, and
`empty*` gives zeros (uninitialized memory would make the verdict depend on garbage).
This module holds data only; it imports nothing.
"""

from __future__ import annotations

from typing import Dict, FrozenSet

# Applied element by element (with broadcasting): a probe made only of these is evaluated on
# one flat batch of points. Function names, without their module.
_ELEMENTWISE = """
abs absolute acos arccos acosh arccosh asin arcsin asinh arcsinh atan arctan atan2 arctan2
atanh arctanh add sub subtract mul multiply div divide true_divide floor_divide neg negative
reciprocal exp exp2 expm1 log log1p log2 log10 logaddexp logaddexp2 sigmoid logit tanh sinh
cosh sin cos tan sqrt rsqrt square pow float_power clamp clip clamp_min clamp_max maximum
minimum fmax fmin where sign sgn signbit floor ceil round trunc frac fmod remainder erf erfc
erfinv lgamma digamma polygamma xlogy hypot nan_to_num isnan isinf isfinite isposinf isneginf
relu lerp addcmul addcdiv copysign heaviside logical_and logical_or logical_not logical_xor
eq ne lt le gt ge greater greater_equal less less_equal not_equal zeros_like ones_like
full_like masked_fill deg2rad rad2deg nextafter ldexp sinc i0 xlog1py
""".split()

# Whole-tensor or along-a-dimension operations (reductions, normalizations, losses, shapes).
_STRUCTURAL = """
cholesky
sum mean prod nansum nanmean logsumexp softmax log_softmax softmin norm std var std_mean
var_mean amax amin max min aminmax median cumsum cumprod logcumsumexp cummax cummin dist
cdist cosine_similarity pairwise_distance matmul mm bmm dot inner outer vdot einsum trace
diagonal diag diag_embed unsqueeze squeeze flatten reshape transpose swapaxes movedim permute flip t stack cat
concat count_nonzero all any argmax argmin mv tril triu gather take_along_dim arange
histc bincount
zeros ones full empty rand randn randint linspace logspace eye empty_like rand_like randn_like
repeat_interleave tile kron cartesian_prod broadcast_to atleast_1d atleast_2d narrow select
index_select masked_select sort topk kthvalue clone
""".split()

_SPECIAL = """
expit logit log1p expm1 exp2 entr xlogy xlog1py erf erfc erfcx erfinv log_ndtr ndtr ndtri
logsumexp log_softmax softmax sinc i0 i0e i1 i1e gammaln digamma psi round
""".split()
_SPECIAL_ELEMENTWISE = set(_SPECIAL) - {"logsumexp", "log_softmax", "softmax"}

_FUNCTIONAL_ELEMENTWISE = """
softplus logsigmoid sigmoid tanh relu relu6 elu selu celu gelu silu mish leaky_relu hardtanh
hardsigmoid hardswish softsign tanhshrink softshrink hardshrink threshold
""".split()
_FUNCTIONAL_STRUCTURAL = """
softmax log_softmax softmin normalize cosine_similarity pairwise_distance layer_norm
binary_cross_entropy binary_cross_entropy_with_logits cross_entropy nll_loss mse_loss l1_loss
smooth_l1_loss huber_loss kl_div poisson_nll_loss gaussian_nll_loss soft_margin_loss
margin_ranking_loss hinge_embedding_loss glu one_hot
""".split()

_LINALG = "vector_norm norm matrix_norm vecdot cholesky det slogdet eigvalsh inv solve diagonal".split()

ELEMENTWISE_FUNCTIONS: FrozenSet[str] = frozenset(
    [f"torch.{n}" for n in _ELEMENTWISE]
    + [f"torch.special.{n}" for n in _SPECIAL_ELEMENTWISE]
    + [f"torch.nn.functional.{n}" for n in _FUNCTIONAL_ELEMENTWISE]
)
STRUCTURAL_FUNCTIONS: FrozenSet[str] = frozenset(
    [f"torch.{n}" for n in _STRUCTURAL]
    + [f"torch.special.{n}" for n in set(_SPECIAL) - _SPECIAL_ELEMENTWISE]
    + [f"torch.nn.functional.{n}" for n in _FUNCTIONAL_STRUCTURAL]
    + [f"torch.linalg.{n}" for n in _LINALG]
)
# Pure functions of Python numbers (a tensor argument of one element also works).
MATH_FUNCTIONS: FrozenSet[str] = frozenset(
    f"math.{n}"
    for n in "exp expm1 log log1p log2 log10 sqrt pow fabs tanh sin cos tan atan atan2 erf erfc".split()
)
# torch.finfo(dtype) -> an object whose numeric attributes (below) may be read.
FINFO_FUNCTION = "torch.finfo"
FINFO_ATTRIBUTES: FrozenSet[str] = frozenset(
    "eps tiny max min smallest_normal resolution bits".split()
)

# Names of constants: dtypes and numbers.
DTYPE_CONSTANTS: Dict[str, str] = {
    "torch.float16": "float16",
    "torch.half": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float32": "float32",
    "torch.float": "float32",
    "torch.float64": "float64",
    "torch.double": "float64",
    "torch.int64": "int64",
    "torch.long": "int64",
    "torch.int32": "int32",
    "torch.int": "int32",
    "torch.bool": "bool",
}
NUMBER_CONSTANTS: Dict[str, float] = {
    "torch.inf": float("inf"),
    "torch.nan": float("nan"),
    "torch.pi": 3.141592653589793,
    "torch.e": 2.718281828459045,
    "math.inf": float("inf"),
    "math.nan": float("nan"),
    "math.pi": 3.141592653589793,
    "math.e": 2.718281828459045,
    "math.tau": 6.283185307179586,
}

# Tensor methods. Out-of-place only: a name ending in `_` is never accepted.
_METHODS_ELEMENTWISE = set(_ELEMENTWISE) - {"zeros_like", "ones_like", "full_like", "where"} | {
    "float", "half", "bfloat16", "double", "type_as", "detach", "clone", "contiguous",
    "where",
}
_CREATION_ONLY = {"zeros", "ones", "full", "empty", "rand", "randn", "randint", "linspace", "logspace",
                  "eye", "empty_like", "rand_like", "randn_like", "cartesian_prod", "kron", "broadcast_to",
                  "atleast_1d", "atleast_2d"}
_METHODS_STRUCTURAL = set(_STRUCTURAL) - {"stack", "cat", "concat", "einsum", "cdist", "arange"} - _CREATION_ONLY | {
    "view", "view_as", "reshape_as", "expand_as", "size", "dim", "numel", "to",
    "repeat", "expand", "long", "int", "bool", "new_zeros", "new_ones", "new_full", "new_empty",
}
TENSOR_METHODS_ELEMENTWISE: FrozenSet[str] = frozenset(_METHODS_ELEMENTWISE)
TENSOR_METHODS_STRUCTURAL: FrozenSet[str] = frozenset(_METHODS_STRUCTURAL)
TENSOR_METHODS: FrozenSet[str] = TENSOR_METHODS_ELEMENTWISE | TENSOR_METHODS_STRUCTURAL

# Attributes of a tensor (or of what a whitelisted call returns) that may be read.
TENSOR_ATTRIBUTES: FrozenSet[str] = frozenset("dtype shape ndim values indices mT T device".split())

# Functions that draw random numbers: evaluated with a generator seeded by the call's text
# (the same text gives the same tensor, as a variable inlined twice would).
RANDOM_FUNCTIONS: FrozenSet[str] = frozenset(
    f"torch.{n}" for n in "rand randn randint rand_like randn_like".split()
)
# Creation functions whose result is a fresh tensor: the only receivers an in-place filler
# (`torch.empty_like(x).uniform_(a, b)`) may be called on; it is evaluated out of place.
FRESH_FUNCTIONS: FrozenSet[str] = frozenset(
    f"torch.{n}" for n in "zeros ones full empty rand randn empty_like zeros_like ones_like full_like "
    "rand_like randn_like".split()
)
# Creation functions that take only sizes (no tensor to copy a device from).
FROM_SIZES_FUNCTIONS: FrozenSet[str] = frozenset(
    f"torch.{n}" for n in "zeros ones full empty rand randn randint arange linspace logspace eye".split()
)
FILLERS: FrozenSet[str] = frozenset("uniform_ normal_ fill_ zero_".split())

# Arguments that are sizes (integers): an input passed there is a small integer, not a tensor.
SIZE_ARGUMENT_FUNCTIONS: FrozenSet[str] = frozenset(
    "zeros ones full empty rand randn randint eye view reshape repeat expand tile new_zeros new_ones "
    "new_full new_empty narrow".split()
)
# Functions whose first argument must be symmetric positive definite: the inputs inside it
# are generated as such matrices (the operation raises on anything else).
SPD_ARGUMENT_FUNCTIONS: FrozenSet[str] = frozenset(
    {"torch.linalg.cholesky", "torch.cholesky", "torch.linalg.eigvalsh"}
)
# Keyword arguments that take a string; an input passed there gets this value.
STRING_KEYWORDS: Dict[str, str] = {"reduction": "mean", "mode": "constant"}

# Builtins that may be called (never shadowed: a probe input named `float` is refused).
BUILTIN_FUNCTIONS: FrozenSet[str] = frozenset("float int abs min max len".split())

# Functions that allocate from a size argument: allowed only up to this many elements
# (checked when they run; the sizes come from the generated inputs' shapes).
SIZED_FUNCTIONS: Dict[str, str] = {
    "torch.arange": "end",
    "torch.nn.functional.one_hot": "num_classes",
    "torch.histc": "bins",
    "torch.bincount": "minlength",
}
MAX_SIZE = 4096

# Roots of dotted function names.
MODULE_ROOTS: FrozenSet[str] = frozenset({"torch", "math"})

# Where the dimension argument sits (0-based, function form; the method form is one less),
# for choosing the rank of the generated inputs. `dim=` / `axis=` keywords are read too.
DIM_POSITION: Dict[str, int] = {
    **{n: 1 for n in (
        "sum mean prod nansum nanmean logsumexp softmax log_softmax softmin amax amin max min "
        "std var std_mean var_mean median cumsum cumprod logcumsumexp cummax cummin unsqueeze "
        "squeeze count_nonzero all any argmax argmin glu gather take_along_dim"
    ).split()},
    "transpose": 1,
    "swapaxes": 1,
    "movedim": 1,
    "norm": 2,
    "vector_norm": 2,
    "normalize": 2,
    "cosine_similarity": 2,
}

# A second dimension argument (`transpose(x, -2, -1)`).
DIM_POSITION_2: Dict[str, int] = {"transpose": 2, "swapaxes": 2, "movedim": 2}

# Arguments whose values must lie in [0, 1] (probabilities and their targets): an input
# passed there directly gets that domain unless the probe gives one.
UNIT_INTERVAL_ARGUMENTS: Dict[str, tuple] = {
    "torch.nn.functional.binary_cross_entropy": (0, 1, "input", "target"),
    "torch.nn.functional.binary_cross_entropy_with_logits": (1, "target"),
}

# Targets of these losses are class indices, not floats.
INDEX_TARGET_FUNCTIONS: FrozenSet[str] = frozenset(
    {"torch.nn.functional.cross_entropy", "torch.nn.functional.nll_loss"}
)
# Where an index tensor goes: operation -> position in the function form (receiver first).
INDEX_ARGUMENTS: Dict[str, int] = {"gather": 2, "take_along_dim": 1, "one_hot": 0, "bincount": 0}

# Explanations for names people might try, refused by the list above anyway.
REFUSED_HINTS: Dict[str, str] = {
    "torch.load": "reads files",
    "torch.save": "writes files",
    "torch.hub": "downloads and runs code",
    "torch.ops": "calls arbitrary registered operators",
    "torch.utils": "not a numerical operation",
    "torch.compile": "compiles code",
    "torch.jit": "compiles code",
    "torch.cuda": "changes device state",
    "torch.backends": "changes global state",
    "torch.distributed": "communicates",
    "torch.autograd": "drives autograd",
    "torch.manual_seed": "changes global state",
}


def all_functions() -> FrozenSet[str]:
    return ELEMENTWISE_FUNCTIONS | STRUCTURAL_FUNCTIONS | MATH_FUNCTIONS | {FINFO_FUNCTION}
