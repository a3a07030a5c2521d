"""Ferry's Python client: usage events metered exactly once, holds on a limit for long jobs, and
the reads and operator routes around them, sync (Client) and async (AsyncClient) on httpx.

The request and response models (``ferrymeter.models``) are generated from api/openapi.yaml; the
layer below them mints each event id once, sends one Idempotency-Key per logical call on every
retry, retries within bounds, batches in the background without losing the buffer at close,
settles every hold, and raises one exception class per problem kind.
"""

from . import models
from ._batcher import AsyncBatcher, Batcher, BatchError, BatcherClosedError, BufferFullError, FailedEvent
from ._client import MAX_BATCH_EVENTS, AsyncClient, AsyncJob, Client, Config, Job, UsageWindow
from ._errors import *  # noqa: F401,F403 — one exception class per problem kind
from ._errors import PROBLEM_KINDS, FerryError, NetworkError, ProblemError, problem_from_answer
from ._ids import new_event_id
from ._retry import Decision, RetryPolicy, backoff, decide, server_wait
from ._version import VERSION
from ._webhooks import NotificationNotUnderstood, WebhookVerificationFailed, WebhookVerifier

__version__ = VERSION
