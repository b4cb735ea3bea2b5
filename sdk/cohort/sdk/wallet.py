"""Wallets: keypair files in the `solana-keygen` format (a JSON array of the 64 secret+public key bytes), and
BIP39 seed phrases derived the way `solana-keygen new/recover` derive them: seed = PBKDF2-HMAC-SHA512(phrase,
"mnemonic" + passphrase, 2048 rounds), the keypair from the seed's first 32 bytes (no derivation path)."""

from __future__ import annotations

import json
import os
import tempfile
import unicodedata
from pathlib import Path

from solders.keypair import Keypair

from .errors import WalletError

DEFAULT_WALLET = Path("~/.config/solana/id.json")  # where the Solana CLI keeps its default keypair
LAMPORTS_PER_SOL = 1_000_000_000
WORD_COUNTS = (12, 15, 18, 21, 24)  # what BIP39 (and solana-keygen --word-count) allow


def new_seed_phrase(words: int = 12) -> str:
    """A fresh English BIP39 seed phrase of `words` words."""
    from mnemonic import Mnemonic

    if words not in WORD_COUNTS:
        raise WalletError(
            f"a seed phrase has {', '.join(map(str, WORD_COUNTS))} words, not {words}"
        )
    return Mnemonic("english").generate(strength=words * 32 // 3)


def check_seed_phrase(phrase: str) -> str:
    """The phrase normalized (lower case, single spaces), or a WalletError that says what is wrong with it."""
    from mnemonic import Mnemonic

    english = Mnemonic("english")
    words = phrase.lower().split()
    if len(words) not in WORD_COUNTS:
        raise WalletError(f"a seed phrase has {', '.join(map(str, WORD_COUNTS))} words; this one has "
                          f"{len(words)}")  # fmt: skip
    known = set(english.wordlist)
    unknown = [f"{i}:{w!r}" for i, w in enumerate(words, 1) if w not in known]
    if unknown:
        raise WalletError(f"not BIP39 English words (position:word): {', '.join(unknown)}")
    normalized = " ".join(words)
    if not english.check(normalized):
        raise WalletError(
            "the seed phrase's checksum does not match: a word is wrong or out of order"
        )
    return normalized


def keypair_from_seed_phrase(phrase: str, passphrase: str = "") -> Keypair:
    """The keypair solana-keygen recovers from this seed phrase and BIP39 passphrase (checked first)."""
    # BIP39 (and solana-keygen's bip39 crate) NFKD-normalize the passphrase; solders takes it as given
    normalized = unicodedata.normalize("NFKD", passphrase)
    return Keypair.from_seed_phrase_and_passphrase(check_seed_phrase(phrase), normalized)


def load_keypair(path: str | Path) -> Keypair:
    """Read a solana-keygen keypair file."""
    path = Path(path).expanduser()
    if not path.exists():
        raise WalletError(
            f"no wallet at {path}: create one with `cohort wallet new` (or pass --wallet)"
        )
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise WalletError(f"cannot read wallet {path}: {e}") from None
    if (
        not isinstance(raw, list)
        or len(raw) != 64
        or not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in raw)
    ):
        raise WalletError(
            f"wallet {path} is not a solana-keygen keypair (a JSON array of 64 bytes)"
        )
    try:
        keypair = Keypair.from_bytes(bytes(raw))
    except ValueError as e:
        raise WalletError(f"wallet {path} holds an invalid keypair: {e}") from None
    return keypair


def save_keypair(keypair: Keypair, path: str | Path, *, overwrite: bool = False) -> Path:
    """Write a keypair in the solana-keygen format, readable by its owner only."""
    path = Path(path).expanduser()
    if path.exists() and not overwrite:
        raise WalletError(f"{path} already exists (pass --force to overwrite it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    # a fresh file of our own (mkstemp: O_EXCL, mode 0600), never one someone else may have left or opened
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(list(bytes(keypair)), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_or_create_keypair(path: str | Path) -> Keypair:
    """The keypair at `path`, created first if there is none (program and buffer keypairs of a deploy)."""
    path = Path(path).expanduser()
    if path.exists():
        return load_keypair(path)
    keypair = Keypair()
    save_keypair(keypair, path)
    return keypair


def sol(lamports: int) -> str:
    """Lamports as SOL, the way people read them."""
    return f"{lamports / LAMPORTS_PER_SOL:.9f}".rstrip("0").rstrip(".") + " SOL"
