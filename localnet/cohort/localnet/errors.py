"""JSON-RPC errors with the codes and messages Solana validators use, and readable transaction errors."""

from __future__ import annotations

import re
from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
BLOCK_CLEANED_UP = -32001
SEND_TRANSACTION_PREFLIGHT_FAILURE = -32002
TRANSACTION_SIGNATURE_VERIFICATION_FAILURE = -32003
BLOCK_NOT_AVAILABLE = -32004
SLOT_SKIPPED = -32007
TRANSACTION_HISTORY_NOT_AVAILABLE = -32011
TRANSACTION_VERSION_UNSUPPORTED = -32015
MIN_CONTEXT_SLOT_NOT_REACHED = -32016


class RpcError(Exception):
    """An error answered as the JSON-RPC `error` object (always with HTTP 200, like Solana validators)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def to_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def invalid_params(message: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"Invalid params: {message}")


# The Display text of solana_sdk's TransactionError / InstructionError, for the errors seen in practice.
_TRANSACTION_ERROR_TEXT = {
    "AccountInUse": "Account in use",
    "AccountLoadedTwice": "Account loaded twice",
    "AccountNotFound": "Attempt to debit an account but found no record of a prior credit.",
    "ProgramAccountNotFound": "Attempt to load a program that does not exist",
    "InsufficientFundsForFee": "Insufficient funds for fee",
    "InvalidAccountForFee": "This account may not be used to pay transaction fees",
    "AlreadyProcessed": "This transaction has already been processed",
    "BlockhashNotFound": "Blockhash not found",
    "CallChainTooDeep": "Loader call chain is too deep",
    "MissingSignatureForFee": "Transaction requires a fee but has no signature present",
    "InvalidAccountIndex": "Transaction contains an invalid account reference",
    "SignatureFailure": "Transaction did not pass signature verification",
    "InvalidProgramForExecution": "This program may not be used for executing instructions",
    "SanitizeFailure": "Transaction failed to sanitize accounts offsets correctly",
    "InvalidWritableAccount": "Transaction loads a writable account that cannot be written",
    "AddressLookupTableNotFound": "Transaction loads an address table account that doesn't exist",
    "InvalidAddressLookupTableIndex": "Transaction address table lookup uses an invalid index",
}
_INSTRUCTION_ERROR_TEXT = {
    "GenericError": "generic instruction error",
    "InvalidArgument": "invalid program argument",
    "InvalidInstructionData": "invalid instruction data",
    "InvalidAccountData": "invalid account data for instruction",
    "AccountDataTooSmall": "account data too small for instruction",
    "InsufficientFunds": "insufficient funds for instruction",
    "IncorrectProgramId": "incorrect program id for instruction",
    "MissingRequiredSignature": "missing required signature for instruction",
    "AccountAlreadyInitialized": "instruction requires an uninitialized account",
    "UninitializedAccount": "instruction requires an initialized account",
    "AccountNotExecutable": "instruction expected an executable account",
    "ProgramFailedToComplete": "Program failed to complete",
    "ProgramFailedToCompile": "Program failed to compile",
    "ComputationalBudgetExceeded": "Computational budget exceeded",
    "Immutable": "Account is immutable",
    "IncorrectAuthority": "Incorrect authority provided",
    "InvalidAccountOwner": "Invalid account owner",
    "ArithmeticOverflow": "Program arithmetic overflowed",
    "UnsupportedProgramId": "Unsupported program id",
    "InvalidSeeds": "Provided seeds do not result in a valid address",
    "InvalidRealloc": "Failed to reallocate account data",
    "AccountBorrowFailed": "instruction tries to borrow reference for an account which is already borrowed",
    "PrivilegeEscalation": "Cross-program invocation with unauthorized signer or writable account",
}


def _words(name: str) -> str:
    """`InvalidAccountData` -> `invalid account data`, for variants without a known text."""
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def describe_instruction_error(error: Any) -> str:
    if isinstance(error, dict) and "Custom" in error:
        return f"custom program error: {int(error['Custom']):#x}"
    if isinstance(error, dict) and "BorshIoError" in error:
        return f"Failed to serialize or deserialize account data: {error['BorshIoError']}"
    if isinstance(error, str):
        return _INSTRUCTION_ERROR_TEXT.get(error, _words(error))
    return str(error)


def describe_transaction_error(error: Any) -> str:
    """The validator's text for a TransactionError in its RPC JSON form."""
    if isinstance(error, str):
        return _TRANSACTION_ERROR_TEXT.get(error, _words(error))
    if isinstance(error, dict) and "InstructionError" in error:
        index, inner = error["InstructionError"]
        return f"Error processing Instruction {index}: {describe_instruction_error(inner)}"
    if isinstance(error, dict) and len(error) == 1:
        ((name, value),) = error.items()
        return f"{_words(name)}: {value}"
    return str(error)
