"""P4Runtime errors: a canonical gRPC code plus a message, and the Write batch status."""
from google.protobuf import any_pb2
from google.rpc import code_pb2, status_pb2
import grpc

from p4.v1 import p4runtime_pb2

GRPC_CODES = {code.value[0]: code for code in grpc.StatusCode}
# A status travels in gRPC metadata, which clients cap (8 KB soft, 16 KB hard by default): past
# that the client gets only "RESOURCE_EXHAUSTED: Stream removed". Messages and the Write batch
# details are kept under these sizes.
MAX_MESSAGE = 2000
MAX_DETAILS = 6000


class P4RuntimeError(Exception):
    """An error answered to the client with `code` (a google.rpc.code_pb2 value)."""

    def __init__(self, code, message):
        if len(message) > MAX_MESSAGE:
            message = message[:MAX_MESSAGE] + f"... ({len(message)} characters, cut)"
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def grpc_code(self):
        return GRPC_CODES[self.code]


def invalid(message):
    return P4RuntimeError(code_pb2.INVALID_ARGUMENT, message)


def not_found(message):
    return P4RuntimeError(code_pb2.NOT_FOUND, message)


def unimplemented(message):
    return P4RuntimeError(code_pb2.UNIMPLEMENTED, message)


def from_table_error(exc):
    """The engine's TableError.code (a code name) -> P4RuntimeError."""
    code = getattr(code_pb2, str(getattr(exc, "code", "UNKNOWN")), code_pb2.UNKNOWN)
    return P4RuntimeError(code, str(exc))


def write_batch_status(results):
    """google.rpc.Status for a Write batch: UNKNOWN with one p4.v1.Error per update, as the spec
    asks. So that it still reaches the client (MAX_DETAILS), long messages are shortened, then
    dropped; a batch with too many updates to list at all gets a summary in the message."""
    failed = [e for e in results if e is not None]
    for limit in (None, 200, 60, 0):
        status = status_pb2.Status(code=code_pb2.UNKNOWN, message="Write failure.")
        for error in results:
            detail = any_pb2.Any()
            if error is None:
                detail.Pack(p4runtime_pb2.Error(canonical_code=code_pb2.OK))
            else:
                message = error.message if limit is None else error.message[:limit]
                detail.Pack(p4runtime_pb2.Error(canonical_code=error.code, message=message))
            status.details.append(detail)
        if status.ByteSize() <= MAX_DETAILS:
            return status
    first = failed[0] if failed else None
    summary = (f"Write failure: {len(failed)} of {len(results)} updates failed (too many to list "
               f"within gRPC's metadata limit; write smaller batches to see each)")
    if first is not None:
        summary += f"; first: {code_pb2.Code.Name(first.code)}: {first.message[:300]}"
    return status_pb2.Status(code=code_pb2.UNKNOWN, message=summary)


def abort_with_status(context, status):
    """End an RPC with a rich status (details in grpc-status-details-bin, as the spec asks)."""
    context.set_trailing_metadata((("grpc-status-details-bin", status.SerializeToString()),))
    context.abort(GRPC_CODES[status.code], status.message)
