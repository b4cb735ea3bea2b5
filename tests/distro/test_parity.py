"""CI-sized loss parity: 4 DisTrO replicas vs single-process AdamW on the same tokens.

Seeded and deterministic on CPU; sized to run in about two minutes on 2 cores.
"""

import pytest

from cohort.client.distro.parity import ParitySetup, run_parity

CI = ParitySetup()  # tiny Llama, KJV bytes, seq 64, 4 replicas x 8 sequences, 200 steps, 1-bit


@pytest.mark.slow
def test_distro_matches_adamw_on_real_text():
    report = run_parity(CI, ("adamw", "distro"))
    adamw, distro = report.curves["adamw"], report.curves["distro"]
    print(
        f"\nheld-out loss: AdamW {adamw.final:.4f}, DisTrO {distro.final:.4f} "
        f"({distro.final / adamw.final:.3f}x), unigram {report.unigram:.4f}, "
        f"DisTrO upload {distro.bytes_per_step} B/step"
    )
    assert distro.replica_digests == 1, "replicas ended with different weights"
    assert distro.final <= 1.15 * adamw.final
    assert distro.final < 0.85 * report.unigram  # clearly below the unigram baseline
