"""DisTrO: decoupled momentum, DCT top-k compression, sign-SGD on the aggregate of all peers.

Pure torch; never imports the SDK. See optimizer.py for one round of the algorithm and
wire.py for the byte format peers exchange.
"""

from .aggregate import aggregate_signs, aggregate_update, mean_coefficients
from .compress import SparseTiles, compress, densify, one_bit_reconstruction, quantize_1bit
from .config import DistroConfig
from .dct import dct_basis, decode, decode_sparse, encode
from .layout import Bucket, Layout, chunk_size, plan_layout
from .optimizer import DistroOptimizer
from .result import BatchId, DistroResult, ReceivedResult
from .schedule import ColdStart, Constant, Cosine, Linear, WarmupStableDecay
from .wire import WireCodec, WireError, commitment

__all__ = [
    "BatchId",
    "Bucket",
    "ColdStart",
    "Constant",
    "Cosine",
    "DistroConfig",
    "DistroOptimizer",
    "DistroResult",
    "Layout",
    "Linear",
    "ReceivedResult",
    "SparseTiles",
    "WarmupStableDecay",
    "WireCodec",
    "WireError",
    "aggregate_signs",
    "aggregate_update",
    "chunk_size",
    "commitment",
    "compress",
    "dct_basis",
    "decode",
    "decode_sparse",
    "densify",
    "encode",
    "mean_coefficients",
    "one_bit_reconstruction",
    "plan_layout",
    "quantize_1bit",
]
