"""Each platform's batch wire protocol, sans-I/O: the requests to send and how to read the answers.

A protocol step is a generator: it yields `Req`s and receives `Resp`s (the shells in `runner.py`
send them), and returns what it learned. Status names are mapped to one vocabulary (`STATES`).
Facts and their sources: docs/batch.md. Nothing here opens a socket, a file or reads a clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Generator, List, Mapping, Tuple
from urllib.parse import urlsplit

from llmroute import errors as E
from llmroute.providers.base import bearer
from llmroute.providers.error_mapping import error_from_response

if TYPE_CHECKING:
    from llmroute.config import Deployment

__all__ = [
    "Req", "Resp", "JobStatus", "Limits", "LIMITS", "STATES", "TERMINAL_STATES", "BATCH_KINDS",
    "BatchProtocol", "protocol_for",
]

# One vocabulary for every platform's job states.
STATES = ("validating", "queued", "in_progress", "finalizing", "completed", "failed", "expired",
          "cancelling", "cancelled")
TERMINAL_STATES = frozenset({"completed", "failed", "expired", "cancelled"})


@dataclass(frozen=True)
class Limits:
    """What one platform job may hold (docs/batch.md §1)."""

    max_lines: int | None
    max_bytes: int
    max_line_bytes: int | None = None
    completion_windows: Tuple[str, ...] = ("24h",)
    endpoints: Tuple[str, ...] = ("/v1/chat/completions",)


LIMITS: Dict[str, Limits] = {
    "together": Limits(max_lines=50_000, max_bytes=100 * 1024 * 1024),
    "siliconflow": Limits(max_lines=5_000, max_bytes=1024 * 1024 * 1024,
                          completion_windows=tuple(f"{h}h" for h in range(24, 337))),
    "bailian": Limits(max_lines=50_000, max_bytes=500 * 1024 * 1024, max_line_bytes=6 * 1024 * 1024,
                      endpoints=("/v1/chat/completions", "/v1/embeddings")),
    "fireworks": Limits(max_lines=None, max_bytes=500 * 1024 * 1024),
}
BATCH_KINDS = frozenset(LIMITS)


@dataclass
class Req:
    method: str
    url: str
    headers: Dict[str, str]
    json: Any = None
    files: Dict[str, Tuple[str, bytes, str]] | None = None
    data: Dict[str, str] | None = None

    def __repr__(self) -> str:  # headers hold the key: never show them
        return f"Req({self.method} {self.url})"


@dataclass
class Resp:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8")) if self.body.strip() else {}
        except ValueError:
            return {}


@dataclass
class JobStatus:
    """A platform job as last seen, in our vocabulary, with the platform's own name beside it."""

    state: str
    raw_state: str
    total: int | None = None
    completed: int | None = None
    failed: int | None = None
    percent: float | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    deadline: str | None = None  # the platform's expiry / deadline, as it gave it
    message: str | None = None
    extra: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v not in (None, {})}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "JobStatus":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


Step = Generator[Req, Resp, Any]


def _int(value: Any) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


class BatchProtocol:
    """OpenAI's batch API (files + /batches), as Bailian's compatible mode speaks it."""

    kind = "bailian"
    purpose = "batch"
    status_map: Mapping[str, str] = {s: s for s in STATES}
    include_model_in_lines = True
    include_method_url = True

    def __init__(self, provider: Any, deployment_id: str) -> None:
        self.provider = provider  # config.Provider
        self.deployment_id = deployment_id
        self.base_url = provider.base_url.rstrip("/")

    # -- shared -------------------------------------------------------------------------------
    def headers(self, json_body: bool = True) -> Dict[str, Any]:
        """The request's headers; keys stay secrets until the transport writes them."""
        headers: Dict[str, Any] = {"Accept": "application/json"}
        if json_body:
            headers["Content-Type"] = "application/json"
        if self.provider.api_key:
            headers["Authorization"] = bearer(self.provider.api_key)
        headers.update(self.provider.headers)
        return headers

    def check(self, resp: Resp, what: str) -> Any:
        """The answer's JSON, or the typed error a non-2xx answer means."""
        if resp.status >= 300:
            error = error_from_response(resp.status, resp.headers, resp.body, provider=self.provider.name,
                                        deployment=self.deployment_id, kind=self.provider.kind)
            error.message = f"batch {what}: {error.message}"
            raise error
        return resp.json()

    def map_state(self, raw: Any) -> str:
        raw = str(raw or "")
        # A state we do not know is read as running: a renamed state must never end a job early.
        return self.status_map.get(raw, self.status_map.get(raw.lower(), "in_progress"))

    def line(self, custom_id: str, body: Mapping[str, Any], model: str,
             endpoint: str = "/v1/chat/completions") -> Dict[str, Any]:
        full = dict(body)
        if self.include_model_in_lines:
            full = {"model": model, **full}
        else:
            full.pop("model", None)
        line: Dict[str, Any] = {"custom_id": custom_id}
        if self.include_method_url:
            line.update(method="POST", url=endpoint)
        line["body"] = full
        return line

    # -- steps (generators) ---------------------------------------------------------------------
    def submit(self, content: bytes, *, model: str, part_id: str, completion_window: str,
               metadata: Mapping[str, str], known: Mapping[str, Any],
               endpoint: str = "/v1/chat/completions") -> Step:
        """Upload the file (unless `known` has its id) and create the job. Returns the ids learned."""
        file_id = known.get("input_file_id")
        if not file_id:
            resp = yield Req("POST", f"{self.base_url}/files", self.headers(json_body=False),
                             files={"file": (f"{part_id}.jsonl", content, "application/jsonl")},
                             data={"purpose": self.purpose})
            file_id = self.read_file_id(self.check(resp, "upload"))
        body = self.create_body(file_id, model=model, completion_window=completion_window, metadata=metadata)
        body["endpoint"] = endpoint
        resp = yield Req("POST", f"{self.base_url}/batches", self.headers(), json=body)
        job = self.unwrap_job(self.check(resp, "create"))
        return {"input_file_id": file_id, "platform_job_id": job["id"], "status": self.read_status(job)}

    def read_file_id(self, payload: Any) -> str:
        file_id = payload.get("id") if isinstance(payload, dict) else None
        if not file_id:
            raise E.ServerError(f"batch upload: no file id in the answer: {str(payload)[:200]}",
                                provider=self.provider.name, deployment=self.deployment_id)
        return str(file_id)

    def create_body(self, file_id: str, *, model: str, completion_window: str,
                    metadata: Mapping[str, str]) -> Dict[str, Any]:
        body: Dict[str, Any] = {"input_file_id": file_id, "endpoint": "/v1/chat/completions",
                                "completion_window": completion_window}
        if metadata:
            body["metadata"] = dict(metadata)
        return body

    def unwrap_job(self, payload: Any) -> Dict[str, Any]:
        if not isinstance(payload, dict) or not payload.get("id"):
            raise E.ServerError(f"batch: no job id in the answer: {str(payload)[:200]}",
                                provider=self.provider.name, deployment=self.deployment_id)
        return payload

    def poll(self, platform_job_id: str) -> Step:
        resp = yield Req("GET", f"{self.base_url}/batches/{platform_job_id}", self.headers(json_body=False))
        return self.read_status(self.unwrap_job(self.check(resp, "status")))

    def read_status(self, job: Mapping[str, Any]) -> JobStatus:
        counts = job.get("request_counts") or {}
        raw = str(job.get("status", ""))
        errors = job.get("errors")
        message = None
        if isinstance(errors, dict) and errors.get("data"):
            message = "; ".join(str(e.get("message", e)) for e in errors["data"][:3] if isinstance(e, dict))
        elif isinstance(errors, (str, list)) and errors:
            message = str(errors)[:300]
        return JobStatus(
            state=self.map_state(raw), raw_state=raw, total=_int(counts.get("total")),
            completed=_int(counts.get("completed")), failed=_int(counts.get("failed")),
            output_file_id=job.get("output_file_id") or None, error_file_id=job.get("error_file_id") or None,
            deadline=str(job["expires_at"]) if job.get("expires_at") else None, message=message,
        )

    def cancel(self, platform_job_id: str) -> Step:
        resp = yield Req("POST", f"{self.base_url}/batches/{platform_job_id}/cancel", self.headers(), json={})
        return self.read_status(self.unwrap_job(self.check(resp, "cancel")))

    def download(self, status: JobStatus, platform_job_id: str) -> Step:
        """The result and error files' bytes: `(output, errors)` (either may be b"")."""
        out = err = b""
        if status.output_file_id:
            resp = yield Req("GET", f"{self.base_url}/files/{status.output_file_id}/content",
                             self.headers(json_body=False))
            self.check_download(resp, "result file")
            out = resp.body
        if status.error_file_id:
            resp = yield Req("GET", f"{self.base_url}/files/{status.error_file_id}/content",
                             self.headers(json_body=False))
            self.check_download(resp, "error file")
            err = resp.body
        return out, err

    def check_download(self, resp: Resp, what: str) -> None:
        if resp.status >= 300:
            self.check(resp, f"download of the {what}")


class TogetherBatch(BatchProtocol):
    kind = "together"
    purpose = "batch-api"
    status_map = {"VALIDATING": "validating", "IN_PROGRESS": "in_progress", "COMPLETED": "completed",
                  "FAILED": "failed", "EXPIRED": "expired", "CANCELLED": "cancelled", "CANCELLING": "cancelling",
                  "QUEUED": "queued"}
    include_method_url = False

    def create_body(self, file_id: str, *, model: str, completion_window: str,
                    metadata: Mapping[str, str]) -> Dict[str, Any]:
        # Together's window "defaults to 24h and cannot be changed" (docs/batch.md): not sent.
        return {"input_file_id": file_id, "endpoint": "/v1/chat/completions", "model_id": model}

    def unwrap_job(self, payload: Any) -> Dict[str, Any]:
        # create() answers {"job": {...}, "warning": ...}; retrieve() answers the job itself.
        if isinstance(payload, dict) and isinstance(payload.get("job"), dict):
            payload = payload["job"]
        return super().unwrap_job(payload)

    def read_status(self, job: Mapping[str, Any]) -> JobStatus:
        status = super().read_status(job)
        progress = job.get("progress")
        if isinstance(progress, (int, float)):
            status.percent = float(progress)
        if job.get("job_deadline"):
            status.deadline = str(job["job_deadline"])
        if job.get("error"):
            status.message = str(job["error"])[:300]
        return status


class SiliconFlowBatch(BatchProtocol):
    kind = "siliconflow"
    status_map = {**{s: s for s in STATES}, "in_queue": "queued"}

    def read_file_id(self, payload: Any) -> str:
        # SiliconFlow wraps the file: {"code": 20000, "message": "Ok", "status": true, "data": {"id": ...}}.
        if isinstance(payload, dict) and isinstance(payload.get("data"), dict):
            payload = payload["data"]
        return super().read_file_id(payload)

    def create_body(self, file_id: str, *, model: str, completion_window: str,
                    metadata: Mapping[str, str]) -> Dict[str, Any]:
        body = super().create_body(file_id, model=model, completion_window=completion_window, metadata=metadata)
        body["replace"] = {"model": model}  # the platform's recommended way to name the model
        return body


class FireworksBatch(BatchProtocol):
    """Datasets plus a batch inference job, on the account's control plane (not the chat base URL)."""

    kind = "fireworks"
    include_model_in_lines = False
    include_method_url = False
    status_map = {
        "JOB_STATE_UNSPECIFIED": "queued", "JOB_STATE_CREATING": "validating",
        "JOB_STATE_CREATING_INPUT_DATASET": "validating", "JOB_STATE_VALIDATING": "validating",
        "JOB_STATE_PENDING": "queued", "JOB_STATE_RE_QUEUEING": "queued", "JOB_STATE_RUNNING": "in_progress",
        "JOB_STATE_WRITING_RESULTS": "finalizing", "JOB_STATE_COMPLETED": "completed",
        "JOB_STATE_FAILED": "failed", "JOB_STATE_EXPIRED": "expired", "JOB_STATE_CANCELLED": "cancelled",
        "JOB_STATE_DELETING": "cancelling", "JOB_STATE_DELETING_CLEANING_UP": "cancelling",
    }

    def __init__(self, provider: Any, deployment_id: str, *, account_id: str | None = None,
                 control_url: str | None = None) -> None:
        super().__init__(provider, deployment_id)
        if not account_id:
            raise E.ConfigError(
                f"Fireworks batch jobs need the account id: set [batch.accounts] {provider.name} = \"<account id>\"",
                key=f"batch.accounts.{provider.name}")
        root = control_url
        if not root:
            parts = urlsplit(self.base_url)
            path = parts.path
            if path.endswith("/inference/v1"):
                path = path[: -len("/inference/v1")]
            root = f"{parts.scheme}://{parts.netloc}{path}"
        self.account_root = f"{root.rstrip('/')}/v1/accounts/{account_id}"
        self.account_id = account_id

    def _ids(self, part_id: str) -> Tuple[str, str, str]:
        base = "".join(c if c.isalnum() else "-" for c in part_id.lower()).strip("-")[:50]
        return f"{base}-in", f"{base}-out", f"{base}-job"

    def submit(self, content: bytes, *, model: str, part_id: str, completion_window: str,
               metadata: Mapping[str, str], known: Mapping[str, Any],
               endpoint: str = "/v1/chat/completions") -> Step:
        in_id, out_id, job_id = self._ids(part_id)
        if not known.get("input_file_id"):
            lines = content.count(b"\n")
            resp = yield Req("POST", f"{self.account_root}/datasets", self.headers(),
                             json={"datasetId": in_id, "dataset": {"userUploaded": {}, "exampleCount": str(lines)}})
            if resp.status != 409:  # already made by an attempt that died before recording it
                self.check(resp, "dataset create")
            resp = yield Req("POST", f"{self.account_root}/datasets/{in_id}:upload", self.headers(json_body=False),
                             files={"file": (f"{part_id}.jsonl", content, "application/jsonl")})
            self.check(resp, "dataset upload")
        body = {"model": model, "inputDatasetId": f"accounts/{self.account_id}/datasets/{in_id}",
                "outputDatasetId": f"accounts/{self.account_id}/datasets/{out_id}", "displayName": part_id[:60]}
        resp = yield Req("POST", f"{self.account_root}/batchInferenceJobs?batchInferenceJobId={job_id}",
                         self.headers(), json=body)
        if resp.status == 409:
            # The job id is ours, so a create that died unrecorded is found again, never made twice.
            status = yield from self.poll(job_id)
        else:
            status = self.read_status(self.check(resp, "create"))
        return {"input_file_id": in_id, "platform_job_id": job_id, "status": status}

    def poll(self, platform_job_id: str) -> Step:
        resp = yield Req("GET", f"{self.account_root}/batchInferenceJobs/{platform_job_id}",
                         self.headers(json_body=False))
        return self.read_status(self.check(resp, "status"))

    def read_status(self, job: Mapping[str, Any]) -> JobStatus:
        raw = str(job.get("state", ""))
        progress = job.get("jobProgress") or {}
        status_obj = job.get("status") or {}
        message = status_obj.get("message") if isinstance(status_obj, dict) else None
        out = job.get("outputDatasetId") or ""
        return JobStatus(
            state=self.map_state(raw), raw_state=raw, total=_int(progress.get("totalInputRequests")),
            completed=_int(progress.get("successfullyProcessedRequests")), failed=_int(progress.get("failedRequests")),
            percent=float(progress["percent"]) if isinstance(progress.get("percent"), (int, float)) else None,
            output_file_id=out.rsplit("/", 1)[-1] or None, deadline=job.get("expireTime"), message=message or None,
        )

    def cancel(self, platform_job_id: str) -> Step:
        resp = yield Req("POST", f"{self.account_root}/batchInferenceJobs/{platform_job_id}:cancel",
                         self.headers(), json={})
        self.check(resp, "cancel")
        return (yield from self.poll(platform_job_id))

    def download(self, status: JobStatus, platform_job_id: str) -> Step:
        out_id = status.output_file_id or self._ids(platform_job_id)[1]
        resp = yield Req("GET", f"{self.account_root}/datasets/{out_id}:getDownloadEndpoint",
                         self.headers(json_body=False))
        payload = self.check(resp, "download endpoint")
        urls = payload.get("filenameToSignedUrls") or {}
        out = err = b""
        for name, url in sorted(urls.items()):
            # Signed URLs carry their own authorization: the API key is not sent with them.
            resp = yield Req("GET", url, {"Accept": "*/*"})
            self.check_download(resp, name)
            if "error" in name.lower():
                err += resp.body if resp.body.endswith(b"\n") or not resp.body else resp.body + b"\n"
            else:
                out += resp.body if resp.body.endswith(b"\n") or not resp.body else resp.body + b"\n"
        return out, err


_PROTOCOLS = {"together": TogetherBatch, "siliconflow": SiliconFlowBatch, "bailian": BatchProtocol,
              "fireworks": FireworksBatch}


def protocol_for(deployment: Deployment, *, accounts: Mapping[str, str] = {},
                 control_urls: Mapping[str, str] = {}) -> BatchProtocol:
    """The batch protocol of a deployment's platform; `ConfigError` for a kind without a batch API."""
    provider = deployment.provider
    cls = _PROTOCOLS.get(provider.kind)
    if cls is None:
        raise E.ConfigError(
            f"deployment {deployment.id!r}: provider kind {provider.kind!r} has no batch API "
            f"(batch jobs run on: {', '.join(sorted(_PROTOCOLS))})", key="model")
    if cls is FireworksBatch:
        return FireworksBatch(provider, deployment.id, account_id=accounts.get(provider.name),
                              control_url=control_urls.get(provider.name))
    return cls(provider, deployment.id)


def lines_of(content: bytes) -> List[Dict[str, Any]]:
    """The JSON objects of a JSONL body; blank and unparsable lines are skipped."""
    out = []
    for raw in content.split(b"\n"):  # JSONL ends lines at \n only (`jsonl.split_lines`)
        raw = raw.strip()
        if not raw:
            continue
        try:
            obj = json.loads(raw)
        except ValueError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out
