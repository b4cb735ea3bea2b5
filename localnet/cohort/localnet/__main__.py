"""`python -m cohort.localnet start ...`"""

from .cli import localnet

localnet(prog_name="python -m cohort.localnet")
