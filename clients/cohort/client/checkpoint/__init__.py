"""Checkpoints: Hugging Face–format directories identified by one manifest hash.

Save (atomic, in the background, sharded like Hugging Face, streamed a tensor at a time), load
(verified first, streamed into the model), fetch for joiners (seed, peers in hashed parts from
several holders with resume, hub), and repair a replica whose weights drifted from the checkpoint.
No chain code here.
"""

from ..p2p import FetchProgress, fetch_parts, log_progress
from .drift import DriftCheck, repair_drift
from .hub import HubUpload, fetch_from_hub
from .layout import CheckpointError, CheckpointInfo, CheckpointMeta, manifest_hash, verify
from .load import LoadedCheckpoint, load_checkpoint, load_weights, read_tensors
from .save import list_checkpoints, save_checkpoint, snapshot, write_checkpoint
from .sources import (
    CheckpointSource,
    CheckpointUnavailable,
    FromHub,
    FromPeers,
    FromPeersThenHub,
    FromSeed,
    fetch_checkpoint,
)
from .writer import CheckpointWriter

__all__ = [
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointMeta",
    "CheckpointSource",
    "CheckpointUnavailable",
    "CheckpointWriter",
    "DriftCheck",
    "FetchProgress",
    "FromHub",
    "FromPeers",
    "FromPeersThenHub",
    "FromSeed",
    "HubUpload",
    "LoadedCheckpoint",
    "fetch_checkpoint",
    "fetch_from_hub",
    "fetch_parts",
    "list_checkpoints",
    "load_checkpoint",
    "load_weights",
    "log_progress",
    "manifest_hash",
    "read_tensors",
    "repair_drift",
    "save_checkpoint",
    "snapshot",
    "verify",
    "write_checkpoint",
]
