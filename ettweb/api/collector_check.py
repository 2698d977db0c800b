"""``POST /api/v1/collectors/self``: a collector agent asks whether the server accepts its
credential.

Why a POST though it only asks: answering records the check's nonce (so a captured check
cannot be replayed) and, for a revoked credential, the node's rejection; a GET never writes
(``docs/architecture.md``). The body is empty; ``source`` is a query parameter.

Why over HTTP: the broker is one-way for training nodes (their broker users may only
publish), so the worker's verdict on a batch cannot travel back through it. The agent signs
this request with its collector credential, as it signs a batch (``collector.auth``: the
headers ``X-ETT-Collector``, ``X-ETT-Timestamp``, ``X-ETT-Nonce``, ``X-ETT-Signature`` over
``check_body(source)``), so it needs no dashboard login or API token; the signature is its
authentication, and the judging is ``ettweb.ingest.credentials.answer_check``.

Answers: 200 ``{"verdict": "ok", ...}``; 401 ``{"error": reason, "verdict": "rejected"}`` for
an unknown collector or a bad signature, 403 for a revoked collector; 401 with
``"verdict": "unverified"`` when the request itself cannot be judged (a header missing or
malformed, a timestamp more than five minutes off, a replayed nonce); 400 for a missing or
bad ``source`` once the headers are there (an anonymous request is a 401 whatever it asks).
Mounted on ``ettweb.api.v1.api`` (its JSON errors), with its own ``auth=None``.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from ninja import Field, Router, Schema, Status

from ettweb.ingest.credentials import CheckRefused, answer_check

router = Router(tags=["collectors"])


class CheckOut(Schema):
    verdict: str = Field(description="ok: the server stores this collector's batches")
    collector: str
    source: str


class CheckRefusedOut(Schema):
    error: str
    verdict: str = Field(description="rejected: the credential is refused; unverified: this "
                                     "request could not be judged")



@router.post("/collectors/self", auth=None,
            response={200: CheckOut, 400: CheckRefusedOut, 401: CheckRefusedOut,
                      403: CheckRefusedOut},
            summary="A collector asks whether the server accepts its credential")
def collector_self(request: HttpRequest, source: str = "") -> Any:
    """Signed by the collector's credential (headers ``X-ETT-*``), not by a login."""
    try:
        credential = answer_check(request.headers, source)
    except CheckRefused as exc:
        verdict = "rejected" if exc.rejected else "unverified"
        return Status(exc.status, {"error": str(exc), "verdict": verdict})
    return {"verdict": "ok", "collector": credential.collector_id, "source": source}
