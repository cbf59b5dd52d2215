"""The torch executor's implementations of the prims and torch-level ops added for OpInfo
conformance (csrc/ops/torch_math.cc, torch_layout.cc, torch_nnext.cc); merged into
``thunder.executors.torchex``'s tables."""
import torch

F = "torch.nn.functional."

#: prims: name -> torch implementation (semantics in csrc/ops/torch_layout.cc).
PRIMS = {
    "clone": lambda a: a.clone(),
    "gather": lambda a, dim, index: torch.gather(a, dim, index),
    "scatter": lambda a, dim, index, src, reduce=None: torch.scatter(a, dim, index, src),
    "scatter_add": lambda a, dim, index, src: torch.scatter_add(a, dim, index, src),
    "scatter_reduce": lambda a, dim, index, src, reduce, include_self: torch.scatter_reduce(
        a, dim, index, src, reduce, include_self=include_self),
    "index_add": lambda a, dim, index, source, alpha: torch.index_add(a, dim, index, source, alpha=alpha),
    "index_copy": lambda a, dim, index, source: torch.index_copy(a, dim, index, source),
    "index_fill": lambda a, dim, index, value: torch.index_fill(a, dim, index, value),
    "index_put": lambda a, indices, values, accumulate: torch.index_put(a, tuple(indices), values, accumulate),
}

#: torch-level ops whose torch callable is not torch.<name> with the same signature.
LTORCH_OVERRIDES = {
    "ndtr": "torch.special.ndtr", "entr": "torch.special.entr", "xlog1py": "torch.special.xlog1py",
    "log_sigmoid": F + "logsigmoid", "max_dim": "torch.max", "min_dim": "torch.min",
    "vector_norm": "torch.linalg.vector_norm", "repeat": "torch.Tensor.repeat", "type_as": "torch.Tensor.type_as",
    "view_as": "torch.Tensor.view_as", "reshape_as": "torch.Tensor.reshape_as", "expand_as": "torch.Tensor.expand_as",
    "new_zeros": "torch.Tensor.new_zeros", "new_ones": "torch.Tensor.new_ones", "new_empty": "torch.Tensor.new_empty",
    "new_full": "torch.Tensor.new_full", "broadcast_tensors": "torch._C._VariableFunctions.broadcast_tensors",
    "batch_norm": F + "batch_norm", "group_norm": F + "group_norm", "normalize": F + "normalize", "pad": F + "pad",
    "softmin": F + "softmin", "one_hot": F + "one_hot",
    **{n: F + n for n in ("hardtanh", "relu6", "hardsigmoid", "hardswish", "elu", "celu", "selu", "leaky_relu",
                          "softplus", "mish", "softsign", "tanhshrink", "hardshrink", "softshrink", "threshold", "glu",
                          "prelu", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss",
                          "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "nll_loss",
                          "margin_ranking_loss", "hinge_embedding_loss", "poisson_nll_loss", "pixel_shuffle",
                          "pixel_unshuffle")},
    **{f"{kind}{n}d": F + f"{kind}{n}d" for n in (1, 2, 3)
       for kind in ("conv", "conv_transpose", "max_pool", "avg_pool", "adaptive_avg_pool", "adaptive_max_pool")},
}
