"""Loopback batch APIs of Together, SiliconFlow, Bailian (compatible mode) and Fireworks (docs/batch.md).

Each server is the platform's chat server (so the `online` failover reaches the same base URL)
plus its batch lifecycle: file upload (multipart), job creation, status with in-progress counts,
cancellation, result and error files, each in the platform's own shapes and status names:
Together's upper-case states and `{"job": ...}` wrapper, SiliconFlow's `in_queue` and wrapped
upload answer, Bailian's OpenAI-style objects and one-model-per-file rule, Fireworks' datasets,
`JOB_STATE_*` and signed download URLs.

Time is a fast clock of ticks: every status poll of a job advances it one tick (`ticks_per_state`
polls per state), so tests run a day-long lifecycle in milliseconds; `hold = True` freezes every
job in progress. Knobs: `fail_ids` (those custom_ids go to the error file; `fail_once_ids` only
the first time), `expire` (the job expires half done: the rest is in no file), `refuse_model`
(the job fails validation), `max_lines` (creating a job over it is a 400), `files_gone` (result
downloads are 404, as after expiry of the files), `overloaded_polls` (the next N polls are 503s).
A completion answers `echo: <last user text>`; usage counts words.
It must never call out to anything: everything lives in this process, on 127.0.0.1.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from tests.servers.bailian import BailianServer
from tests.servers.base import Response
from tests.servers.fireworks import FireworksServer
from tests.servers.script import RecordedRequest
from tests.servers.siliconflow import SiliconFlowServer
from tests.servers.together import TogetherServer

__all__ = ["TogetherBatchServer", "SiliconFlowBatchServer", "BailianBatchServer", "FireworksBatchServer",
           "BATCH_SERVERS", "parse_multipart"]


def parse_multipart(request: RecordedRequest) -> dict[str, bytes]:
    """Field name -> value bytes of a multipart/form-data body."""
    ctype = request.headers.get("content-type", "")
    match = re.search(r"boundary=\"?([^\";]+)\"?", ctype)
    if not match:
        return {}
    boundary = b"--" + match.group(1).encode()
    fields: dict[str, bytes] = {}
    for part in request.body.split(boundary)[1:]:
        if part.startswith(b"--"):
            break
        head, _, value = part.lstrip(b"\r\n").partition(b"\r\n\r\n")
        name = re.search(rb'name="([^"]*)"', head)
        if name:
            fields[name.group(1).decode()] = value[:-2] if value.endswith(b"\r\n") else value
    return fields


@dataclass
class FakeJob:
    id: str
    model: str
    lines: list[dict[str, Any]]
    created_at: int
    tick: int = 0
    cancelling: bool = False
    cancelled: bool = False
    state: str = "validating"  # neutral: validating, queued, in_progress, finalizing, completed, failed, expired, cancelling, cancelled
    processed: int = 0
    message: str | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    polls: int = 0


class BatchMixin:
    """The batch lifecycle, shared; subclasses render it in their platform's shapes."""

    endpoints: tuple[str, ...] = ("/v1/chat/completions",)
    files_path = "/files"
    batches_path = "/batches"
    flow = ("validating", "in_progress", "finalizing", "completed")

    def _batch_init(self) -> None:
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.batch_reset()

    def batch_reset(self) -> None:
        self.files: dict[str, bytes] = {}
        self.jobs: dict[str, FakeJob] = {}
        self.ticks_per_state = 1
        self.hold = False
        self.fail_ids: set[str] = set()
        self.fail_once_ids: set[str] = set()  # fail the first time only (a transient failure)
        self.expire = False
        self.refuse_model: str | None = None
        self.max_lines: int | None = None
        self.files_gone = False
        self.overloaded_polls = 0  # the next N status polls answer 503 (the platform sheds load)

    def reset(self) -> None:  # type: ignore[override]
        super().reset()  # type: ignore[misc]
        self.batch_reset()

    def new_id(self, prefix: str) -> str:
        return f"{prefix}-{next(self._ids):06d}"

    # -- the lifecycle ---------------------------------------------------------------------------
    def start_job(self, model: str, content: bytes, metadata: dict[str, Any] | None = None) -> FakeJob | Response:
        lines = [json.loads(raw) for raw in content.splitlines() if raw.strip()]
        if self.max_lines is not None and len(lines) > self.max_lines:
            return self.batch_error(400, f"the input file has {len(lines)} lines, more than {self.max_lines}")
        job = FakeJob(self.new_id("batch"), model, lines, created_at=1_764_000_000, metadata=metadata or {})
        if self.refuse_model and model == self.refuse_model:
            job.state, job.message = "failed", f"model {model} is not available for batch inference"
        self.jobs[job.id] = job
        return job

    def advance(self, job: FakeJob) -> None:
        """One tick of the fast clock (one status poll)."""
        job.polls += 1
        if job.state in ("completed", "failed", "expired", "cancelled"):
            return
        if job.cancelling:
            job.state = "cancelled"
            self.write_files(job)
            return
        if self.hold:
            return
        job.tick += 1
        if job.tick % self.ticks_per_state:
            if job.state == "in_progress":
                job.processed = min(len(job.lines), job.processed + max(1, len(job.lines) // 4))
            return
        if job.state == "in_progress" and self.expire:
            job.processed = len(job.lines) // 2
            job.state = "expired"
            self.write_files(job)
            return
        index = self.flow.index(job.state) if job.state in self.flow else 0
        job.state = self.flow[min(index + 1, len(self.flow) - 1)]
        if job.state == "in_progress":
            job.processed = min(len(job.lines), max(1, len(job.lines) // 2))
        if job.state in ("finalizing", "completed"):
            job.processed = len(job.lines)
        if job.state == "completed":
            self.write_files(job)

    def cancel_job(self, job: FakeJob) -> None:
        if job.state not in ("completed", "failed", "expired", "cancelled"):
            job.cancelling = True
            job.state = "cancelling"

    def write_files(self, job: FakeJob) -> None:
        ok, bad = [], []
        for line in job.lines[: job.processed]:
            cid = line["custom_id"]
            failing = cid in self.fail_ids or cid in self.fail_once_ids
            self.fail_once_ids.discard(cid)
            (bad if failing else ok).append(line)
        if ok:
            job.output_file_id = self.new_id("file-out")
            self.files[job.output_file_id] = b"".join(
                json.dumps(self.result_line(job, line)).encode() + b"\n" for line in ok)
        if bad:
            job.error_file_id = self.new_id("file-err")
            self.files[job.error_file_id] = b"".join(
                json.dumps(self.error_line(job, line)).encode() + b"\n" for line in bad)

    def completion(self, job: FakeJob, line: dict[str, Any]) -> dict[str, Any]:
        body = line.get("body", {})
        if line.get("url") == "/v1/embeddings":
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            tokens = sum(len(str(t).split()) for t in texts)
            return {"object": "list", "model": body.get("model") or job.model,
                    "data": [{"object": "embedding", "index": i, "embedding": [float(len(str(t))), 0.5, -0.5]}
                             for i, t in enumerate(texts)],
                    "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}
        messages = body.get("messages", [])
        text = str(messages[-1].get("content", "")) if messages else ""
        prompt = max(1, sum(len(str(m.get("content", "")).split()) for m in messages))
        return {"id": f"chatcmpl-{line['custom_id']}", "object": "chat.completion", "created": job.created_at,
                "model": body.get("model") or job.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": f"echo: {text}"},
                             "finish_reason": "stop"}],
                "usage": self.usage(prompt, 2)}

    def usage(self, prompt: int, completion: int) -> dict[str, Any]:
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def result_line(self, job: FakeJob, line: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"batch_req_{line['custom_id']}", "custom_id": line["custom_id"],
                "response": {"status_code": 200, "request_id": f"req-{line['custom_id']}",
                             "body": self.completion(job, line)}, "error": None}

    def error_line(self, job: FakeJob, line: dict[str, Any]) -> dict[str, Any]:
        return {"id": f"batch_req_{line['custom_id']}", "custom_id": line["custom_id"],
                "response": {"status_code": 400, "request_id": f"req-{line['custom_id']}",
                             "body": {"error": {"message": "Invalid request: scripted failure",
                                                "type": "invalid_request_error", "code": "invalid_request"}}},
                "error": None}

    # -- HTTP ------------------------------------------------------------------------------------
    def authorized(self, request: RecordedRequest) -> bool:
        key = getattr(self, "api_key", None)
        return key is None or request.bearer == key

    def batch_error(self, status: int, message: str) -> Response:
        return Response.json({"error": {"message": message, "type": "invalid_request_error", "code": None}}, status)

    async def handle(self, request: RecordedRequest) -> Response:  # type: ignore[override]
        answer = self.batch_route(request)
        if answer is None:
            return await super().handle(request)  # type: ignore[misc]
        self.script.record(request)  # type: ignore[attr-defined]
        if not self.authorized(request) and not request.path.startswith("/signed/"):
            return Response.json({"error": {"message": "Invalid API key", "type": "invalid_request_error",
                                            "code": "invalid_api_key"}}, 401)
        with self._lock:
            return answer()

    def batch_route(self, request: RecordedRequest) -> Any:
        base = self.base_path  # type: ignore[attr-defined]
        path, method = request.path, request.method
        if method == "POST" and path == base + self.files_path:
            return lambda: self.upload(request)
        m = re.fullmatch(re.escape(base + self.files_path) + r"/([^/]+)/content", path)
        if method == "GET" and m:
            return lambda: self.file_content(m.group(1))
        if method == "POST" and path == base + self.batches_path:
            return lambda: self.create(request)
        m = re.fullmatch(re.escape(base + self.batches_path) + r"/([^/]+)", path)
        if method == "GET" and m:
            return lambda: self.status(m.group(1))
        m = re.fullmatch(re.escape(base + self.batches_path) + r"/([^/]+)/cancel", path)
        if method == "POST" and m:
            return lambda: self.cancel(m.group(1))
        return None

    def upload(self, request: RecordedRequest) -> Response:
        fields = parse_multipart(request)
        if fields.get("purpose", b"").decode() != self.upload_purpose:
            return self.batch_error(400, f"purpose must be {self.upload_purpose!r}")
        content = fields.get("file")
        if content is None:
            return self.batch_error(400, "no file")
        for n, raw in enumerate(content.splitlines(), 1):
            try:
                line = json.loads(raw)
            except ValueError:
                return self.batch_error(400, f"line {n} is not JSON")
            if "custom_id" not in line or "body" not in line:
                return self.batch_error(400, f"line {n}: custom_id and body are required")
        file_id = self.new_id("file")
        self.files[file_id] = content
        return Response.json(self.upload_answer(file_id, content))

    upload_purpose = "batch"

    def upload_answer(self, file_id: str, content: bytes) -> dict[str, Any]:
        return {"id": file_id, "object": "file", "bytes": len(content), "purpose": self.upload_purpose}

    def file_content(self, file_id: str) -> Response:
        if self.files_gone or file_id not in self.files:
            return self.batch_error(404, f"file {file_id} not found")
        return Response(200, [("Content-Type", "application/octet-stream")], self.files[file_id])

    def job_model(self, body: dict[str, Any], content: bytes) -> str | Response:
        models = {json.loads(raw).get("body", {}).get("model") for raw in content.splitlines() if raw.strip()}
        if len(models) != 1 or None in models:
            return self.batch_error(400, "all requests in one file must use the same model")
        return models.pop()

    def create(self, request: RecordedRequest) -> Response:
        body = request.json or {}
        content = self.files.get(body.get("input_file_id", ""))
        if content is None:
            return self.batch_error(404, "input file not found")
        if body.get("endpoint") not in self.endpoints:
            return self.batch_error(400, f"endpoint must be one of {self.endpoints}")
        urls = {json.loads(raw).get("url", body["endpoint"]) for raw in content.splitlines() if raw.strip()}
        if urls != {body["endpoint"]}:
            return self.batch_error(400, "every line's url must be the batch's endpoint")
        model = self.job_model(body, content)
        if isinstance(model, Response):
            return model
        job = self.start_job(model, content, body.get("metadata"))
        if isinstance(job, Response):
            return job
        job.metadata["input_file_id"] = body["input_file_id"]
        return Response.json(self.create_answer(job))

    def create_answer(self, job: FakeJob) -> dict[str, Any]:
        return self.job_object(job)

    def overloaded(self) -> Response | None:
        if self.overloaded_polls > 0:
            self.overloaded_polls -= 1
            return Response.json({"error": {"message": "The server is overloaded", "type": "server_error",
                                            "code": None}}, 503)
        return None

    def status(self, job_id: str) -> Response:
        busy = self.overloaded()
        if busy is not None:
            return busy
        job = self.jobs.get(job_id)
        if job is None:
            return self.batch_error(404, f"batch {job_id} not found")
        self.advance(job)
        return Response.json(self.job_object(job))

    def cancel(self, job_id: str) -> Response:
        job = self.jobs.get(job_id)
        if job is None:
            return self.batch_error(404, f"batch {job_id} not found")
        self.cancel_job(job)
        return Response.json(self.job_object(job))

    state_names = {s: s for s in ("validating", "queued", "in_progress", "finalizing", "completed", "failed",
                                  "expired", "cancelling", "cancelled")}

    def job_object(self, job: FakeJob) -> dict[str, Any]:
        failed = sum(1 for line in job.lines[: job.processed] if line["custom_id"] in self.fail_ids)
        return {
            "id": job.id, "object": "batch", "endpoint": "/v1/chat/completions",
            "errors": {"object": "list", "data": [{"code": "model_not_supported", "message": job.message}]}
            if job.message else None,
            "input_file_id": job.metadata.get("input_file_id"), "completion_window": "24h",
            "status": self.state_names[job.state], "output_file_id": job.output_file_id,
            "error_file_id": job.error_file_id, "created_at": job.created_at,
            "expires_at": job.created_at + 86_400,
            "request_counts": {"total": len(job.lines), "completed": job.processed - failed, "failed": failed},
            "metadata": {k: v for k, v in job.metadata.items() if k != "input_file_id"},
        }


class TogetherBatchServer(BatchMixin, TogetherServer):
    """Together: `purpose=batch-api`, `{"job": ...}` on create, upper-case states, `progress` percent."""

    upload_purpose = "batch-api"
    flow = ("validating", "in_progress", "completed")
    state_names = {"validating": "VALIDATING", "queued": "VALIDATING", "in_progress": "IN_PROGRESS",
                   "finalizing": "IN_PROGRESS", "completed": "COMPLETED", "failed": "FAILED", "expired": "EXPIRED",
                   "cancelling": "IN_PROGRESS", "cancelled": "CANCELLED"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._batch_init()

    def job_model(self, body: dict[str, Any], content: bytes) -> str | Response:
        return body.get("model_id") or super().job_model(body, content)

    def usage(self, prompt: int, completion: int) -> dict[str, Any]:
        # Together reports cached tokens flat on usage for some models (docs/platforms.md §1).
        return {**super().usage(prompt, completion), "cached_tokens": 1}

    def create_answer(self, job: FakeJob) -> dict[str, Any]:
        return {"job": self.job_object(job), "warning": None}

    def job_object(self, job: FakeJob) -> dict[str, Any]:
        return {"id": job.id, "user_id": "user-test", "input_file_id": job.metadata.get("input_file_id"),
                "status": self.state_names[job.state], "endpoint": "/v1/chat/completions",
                "progress": round(100 * job.processed / max(1, len(job.lines)), 1), "model_id": job.model,
                "output_file_id": job.output_file_id, "error_file_id": job.error_file_id,
                "error": job.message, "job_deadline": "2025-11-25T00:00:00Z", "created_at": "2025-11-24T00:00:00Z"}


class SiliconFlowBatchServer(BatchMixin, SiliconFlowServer):
    """SiliconFlow: wrapped upload answer, `replace.model`, `in_queue` before `in_progress`."""

    flow = ("queued", "in_progress", "finalizing", "completed")
    state_names = {**BatchMixin.state_names, "queued": "in_queue", "validating": "in_queue"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._batch_init()

    def upload_answer(self, file_id: str, content: bytes) -> dict[str, Any]:
        return {"code": 20000, "message": "Ok", "status": True,
                "data": {"id": file_id, "object": "file", "bytes": len(content), "createdAt": 1741685396,
                         "filename": "requests.jsonl", "purpose": "batch"}}

    def job_model(self, body: dict[str, Any], content: bytes) -> str | Response:
        replace = body.get("replace") or {}
        return replace.get("model") or super().job_model(body, content)

    def start_job(self, model: str, content: bytes, metadata: dict[str, Any] | None = None) -> FakeJob | Response:
        job = super().start_job(model, content, metadata)
        if isinstance(job, FakeJob) and job.state == "validating":
            job.state = "queued"
        return job

    def job_object(self, job: FakeJob) -> dict[str, Any]:
        obj = super().job_object(job)
        if job.state == "queued":
            obj["request_counts"] = None  # SiliconFlow's create answer has request_counts: null
        return obj


class BailianBatchServer(BatchMixin, BailianServer):
    """Bailian compatible mode: OpenAI's batch objects; one model per file; 6 MB per line; embeddings too."""

    endpoints = ("/v1/chat/completions", "/v1/embeddings")

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._batch_init()

    def upload(self, request: RecordedRequest) -> Response:
        content = parse_multipart(request).get("file", b"")
        if any(len(raw) > 6 * 1024 * 1024 for raw in content.splitlines()):
            return self.batch_error(400, "a line is larger than 6 MB")
        return super().upload(request)


class FireworksBatchServer(BatchMixin, FireworksServer):
    """Fireworks: datasets, `batchInferenceJobs`, `JOB_STATE_*`, `jobProgress`, signed result URLs."""

    account = "test-account"
    flow = ("validating", "queued", "in_progress", "finalizing", "completed")
    state_names = {"validating": "JOB_STATE_VALIDATING", "queued": "JOB_STATE_PENDING",
                   "in_progress": "JOB_STATE_RUNNING", "finalizing": "JOB_STATE_WRITING_RESULTS",
                   "completed": "JOB_STATE_COMPLETED", "failed": "JOB_STATE_FAILED", "expired": "JOB_STATE_EXPIRED",
                   "cancelling": "JOB_STATE_RUNNING", "cancelled": "JOB_STATE_CANCELLED"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._batch_init()
        self.datasets: dict[str, bytes | None] = {}
        self.named_jobs: dict[str, str] = {}  # our job id -> FakeJob id

    def batch_reset(self) -> None:
        super().batch_reset()
        self.datasets = {}
        self.named_jobs = {}

    def batch_route(self, request: RecordedRequest) -> Any:
        root = f"/v1/accounts/{self.account}"
        path, method = request.path, request.method
        if path.startswith("/signed/") and method == "GET":
            return lambda: self.file_content(path.rsplit("/", 1)[-1])
        if method == "POST" and path == root + "/datasets":
            return lambda: self.create_dataset(request)
        m = re.fullmatch(re.escape(root) + r"/datasets/([^/:]+):upload", path)
        if method == "POST" and m:
            return lambda: self.upload_dataset(m.group(1), request)
        m = re.fullmatch(re.escape(root) + r"/datasets/([^/:]+):getDownloadEndpoint", path)
        if method == "GET" and m:
            return lambda: self.download_endpoint(m.group(1))
        if method == "POST" and path == root + "/batchInferenceJobs":
            return lambda: self.create_job(request)
        m = re.fullmatch(re.escape(root) + r"/batchInferenceJobs/([^/:]+):cancel", path)
        if method == "POST" and m:
            return lambda: self.cancel_named(m.group(1))
        m = re.fullmatch(re.escape(root) + r"/batchInferenceJobs/([^/:]+)", path)
        if method == "GET" and m:
            return lambda: self.status_named(m.group(1))
        return None

    def create_dataset(self, request: RecordedRequest) -> Response:
        body = request.json or {}
        dataset_id = body.get("datasetId")
        if not dataset_id:
            return self.batch_error(400, "datasetId is required")
        if dataset_id in self.datasets:
            return Response.json({"code": 6, "message": f"dataset {dataset_id} already exists"}, 409)
        self.datasets[dataset_id] = None
        return Response.json({"name": f"accounts/{self.account}/datasets/{dataset_id}", "state": "UPLOADING"})

    def upload_dataset(self, dataset_id: str, request: RecordedRequest) -> Response:
        if dataset_id not in self.datasets:
            return self.batch_error(404, f"dataset {dataset_id} not found")
        content = parse_multipart(request).get("file")
        if content is None:
            return self.batch_error(400, "no file")
        if len(content) > 500 * 1024 * 1024:
            return self.batch_error(400, "dataset must be under 500 MB")
        self.datasets[dataset_id] = content
        return Response.json({"id": dataset_id, "object": "file", "bytes": len(content), "purpose": "batch"})

    def create_job(self, request: RecordedRequest) -> Response:
        body = request.json or {}
        job_name = dict(p.split("=", 1) for p in request.query.split("&") if "=" in p).get("batchInferenceJobId")
        if job_name in self.named_jobs:
            return Response.json({"code": 6, "message": f"batch inference job {job_name} already exists"}, 409)
        dataset_id = str(body.get("inputDatasetId", "")).rsplit("/", 1)[-1]
        content = self.datasets.get(dataset_id)
        if content is None:
            return self.batch_error(400, f"input dataset {dataset_id} has no data")
        if any("model" in json.loads(raw).get("body", {}) for raw in content.splitlines() if raw.strip()):
            return self.batch_error(400, "the model is set on the job, not in the dataset lines")
        job = self.start_job(body.get("model", ""), content)
        if isinstance(job, Response):
            return job
        job.metadata["output"] = body.get("outputDatasetId") or f"accounts/{self.account}/datasets/{job.id}-out"
        job.metadata["name"] = job_name or job.id
        self.named_jobs[job.metadata["name"]] = job.id
        return Response.json(self.job_object(job))

    def status_named(self, name: str) -> Response:
        busy = self.overloaded()
        if busy is not None:
            return busy
        job = self.jobs.get(self.named_jobs.get(name, ""))
        if job is None:
            return self.batch_error(404, f"batch inference job {name} not found")
        self.advance(job)
        return Response.json(self.job_object(job))

    def cancel_named(self, name: str) -> Response:
        job = self.jobs.get(self.named_jobs.get(name, ""))
        if job is None:
            return self.batch_error(404, f"batch inference job {name} not found")
        self.cancel_job(job)
        return Response.json({})

    def download_endpoint(self, dataset_id: str) -> Response:
        job = next((j for j in self.jobs.values() if str(j.metadata.get("output", "")).endswith("/" + dataset_id)),
                   None)
        if job is None:
            return self.batch_error(404, f"dataset {dataset_id} not found")
        urls = {}
        if job.output_file_id:
            urls["results.jsonl"] = self.url(f"/signed/{job.output_file_id}")
        if job.error_file_id:
            urls["error.jsonl"] = self.url(f"/signed/{job.error_file_id}")
        return Response.json({"filenameToSignedUrls": urls})

    def result_line(self, job: FakeJob, line: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": line["custom_id"], "response": self.completion(job, line)}

    def error_line(self, job: FakeJob, line: dict[str, Any]) -> dict[str, Any]:
        return {"custom_id": line["custom_id"], "error": {"code": 400, "message": "scripted failure"}}

    def job_object(self, job: FakeJob) -> dict[str, Any]:
        failed = sum(1 for line in job.lines[: job.processed] if line["custom_id"] in self.fail_ids)
        return {
            "name": f"accounts/{self.account}/batchInferenceJobs/{job.metadata.get('name', job.id)}",
            "state": self.state_names[job.state],
            "status": {"code": "FAILED_PRECONDITION" if job.message else "OK", "message": job.message or ""},
            "model": job.model, "outputDatasetId": job.metadata.get("output"),
            "jobProgress": {"percent": round(100 * job.processed / max(1, len(job.lines))),
                            "totalInputRequests": len(job.lines), "totalProcessedRequests": job.processed,
                            "successfullyProcessedRequests": job.processed - failed, "failedRequests": failed},
            "expireTime": "2025-11-25T00:00:00Z",
        }


BATCH_SERVERS = {"together": TogetherBatchServer, "siliconflow": SiliconFlowBatchServer,
                 "bailian": BailianBatchServer, "fireworks": FireworksBatchServer}
