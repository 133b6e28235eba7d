"""Schemathesis hooks of `.ci/fuzz`: the contract's error body (contract
section 2), checked on every error response, and a guard that keeps the
fuzzer from locking itself out.

Every response with a status of 400 or more must be
`{"error": {"code", "message", "request_id", "details": [{"field", "issue"}]}}`
with a code of the contract's table that belongs to that status, a
`request_id` equal to the `Request-Id` header (a replay keeps the one of
the request that decided it), and nothing else at the top level. Every
response, error or not, carries a `Request-Id` (`req_…`).
"""

import json
import os
import re

import schemathesis

# The contract's codes and the HTTP status each is answered with.
STATUS_OF_CODE = {
    "authentication_failed": {401},
    "forbidden": {403},
    "not_found": {404},
    "validation_failed": {400, 413},
    "idempotency_key_required": {400},
    "idempotency_mismatch": {422},
    "semantic_error": {422},
    "precondition_required": {428},
    "precondition_failed": {412},
    "version_conflict": {409},
    "dependency_unavailable": {503},
    "rate_limited": {429},
    "internal_error": {500},
}

# A request log reference (contract section 7).
REQUEST_ID = re.compile(r"^req_[A-Za-z0-9]{12}$")


# The fuzzer's own credential and principal (the sandbox admin's), from
# `.ci/fuzz`. Rotating that credential twice retires the secret the fuzzer
# sends, and revoking the principal's grants takes its permissions away:
# every later request would be a 401 or 403 and test nothing. Such
# requests are sent to a well-formed reference that names nothing instead
# (a 404, after every check of headers and body). Suspending or retiring
# itself, revoking the credential in use and revoking its last
# `grants:manage_grant` are refused by the service and stay as generated.
OWN_CREDENTIAL = os.environ.get("FUZZ_OWN_CREDENTIAL_REF")
OWN_PRINCIPAL = os.environ.get("FUZZ_OWN_PRINCIPAL_REF")
DECOYS = {"credential_ref": "cred_FuzzDecoy000", "principal_ref": "sa_FuzzDecoy000"}
GUARDED = {
    "rotateServiceAccountCredential": ("credential_ref", OWN_CREDENTIAL),
    "revokeServiceAccountPermission": ("principal_ref", OWN_PRINCIPAL),
}


@schemathesis.hook
def before_call(context, case, kwargs):
    guard = GUARDED.get(case.operation.definition.raw.get("operationId"))
    if guard is None or not case.path_parameters:
        return
    name, own = guard
    if own is not None and case.path_parameters.get(name) == own:
        case.path_parameters[name] = DECOYS[name]


def _request_id(response):
    values = response.headers.get("request-id") or []
    return values[0] if values else None


@schemathesis.check
def request_id_header(ctx, response, case):
    """Every response carries `Request-Id: req_…` (contract section 1)."""
    rid = _request_id(response)
    if rid is None or not REQUEST_ID.match(rid):
        raise AssertionError(f"Request-Id header missing or malformed: {rid!r}")
    return None


@schemathesis.check
def error_envelope(ctx, response, case):
    """An error answers the contract's error body (contract section 2)."""
    status = response.status_code
    if status < 400:
        return None
    try:
        body = json.loads(response.content)
    except ValueError as exc:
        raise AssertionError(f"{status} error body is not JSON: {exc}") from None
    if not isinstance(body, dict) or set(body) != {"error"}:
        raise AssertionError(f"{status} error body must be an object with one key, `error`")
    error = body["error"]
    if not isinstance(error, dict):
        raise AssertionError("`error` must be an object")
    missing = [k for k in ("code", "message", "request_id", "details") if k not in error]
    if missing:
        raise AssertionError(f"`error` lacks {', '.join(missing)}")
    code = error["code"]
    if not isinstance(code, str) or code not in STATUS_OF_CODE:
        raise AssertionError(f"`error.code` {code!r} is not a code of the contract")
    if status not in STATUS_OF_CODE[code]:
        raise AssertionError(f"`error.code` {code!r} is not answered with HTTP {status}")
    if not isinstance(error["message"], str) or not error["message"]:
        raise AssertionError("`error.message` must be a non-empty string")
    # A replay answers the stored body as it was (contract section 4), so
    # its `request_id` names the request that decided it.
    replayed = (response.headers.get("idempotent-replayed") or [""])[0] == "true"
    if not isinstance(error["request_id"], str) or not REQUEST_ID.match(error["request_id"]):
        raise AssertionError(f"`error.request_id` {error['request_id']!r} is not a req_ reference")
    if not replayed and error["request_id"] != _request_id(response):
        raise AssertionError(
            f"`error.request_id` {error['request_id']!r} differs from the Request-Id header "
            f"{_request_id(response)!r}"
        )
    details = error["details"]
    if not isinstance(details, list):
        raise AssertionError("`error.details` must be an array")
    for i, d in enumerate(details):
        if (
            not isinstance(d, dict)
            or not isinstance(d.get("field"), str)
            or not isinstance(d.get("issue"), str)
        ):
            raise AssertionError(f"`error.details.{i}` must be {{field, issue}} strings")
    return None
