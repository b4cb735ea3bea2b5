"""Training: the step every replica runs (lookahead, forward/backward in micro-batches, generate).

Its own room so the trainer and the verifier both import it from here: the verifier replays the
trainer's code, the trainer does not import the verifier for its own step. Plain tensors; never
imports the SDK.
"""

from .step import LossFn, train_step

__all__ = ["LossFn", "train_step"]
