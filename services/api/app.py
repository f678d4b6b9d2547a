"""FastAPI app of the control plane: thin routes over ControlCore, auth, error mapping, /metrics, the run page.

Every route takes a typed request, calls one ControlCore method and returns a typed model; the
typed errors of the core become HTTP statuses in one table (`ERROR_STATUS`). A middleware checks
the bearer token (services.api.auth) and counts every request. This module knows nothing about
the ledger's tables or Celery.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlencode

from fastapi import APIRouter, FastAPI, Request, Response
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import FileResponse, JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from services.api import auth
from services.api.config import ApiSettings
from services.api.core import ControlCore, PayloadTooLarge, SubmitFailed, UnsupportedMediaType
from services.api.metrics import ApiMetrics
from services.api.schemas import (
    ErrorBody,
    Health,
    RunClaims,
    RunDetail,
    RunEpisodes,
    RunEvals,
    RunMetrics,
    RunMismatch,
    RunSummary,
    RunTeachers,
)
from services.common.errors import FailedPrecondition, InvalidArgument, NotFound
from services.orchestrator.cascade_config import CascadeConfigError

PAGE_DIR = Path(__file__).parent / "page"
ERROR_STATUS: list[tuple[type[Exception], int]] = [
    (CascadeConfigError, 422), (InvalidArgument, 422), (NotFound, 404), (FailedPrecondition, 409),
    (UnsupportedMediaType, 415), (PayloadTooLarge, 413), (SubmitFailed, 503),
]
NOT_FOUND = {404: {"model": ErrorBody, "description": "No such run."}}
CASCADE_BODY = {"requestBody": {"required": True, "description": "A cascade, as in configs/demo.yaml.", "content": {
    **{t: {"schema": {"type": "string", "description": "The cascade as YAML text."}}
       for t in ("application/yaml", "text/yaml")},
    "application/json": {"schema": {"type": "object", "description": "The cascade's mapping (name, model, stages)."}},
}}}


async def read_limited(request: Request, limit: int) -> bytes:
    """The request body, refused (PayloadTooLarge) as soon as it is known to exceed `limit` bytes: by its
    Content-Length before reading anything, else by counting while it streams in, so an oversized
    body is never buffered whole."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"the cascade is {int(declared)} bytes (Content-Length); the limit is {limit} "
                              "(CASCADE_API_MAX_BODY_KB)")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"the cascade is over {limit} bytes (read {size} so far); the limit is {limit} "
                                  "(CASCADE_API_MAX_BODY_KB)")
        chunks.append(chunk)
    return b"".join(chunks)


def runs_router(core: ControlCore) -> APIRouter:
    router = APIRouter(prefix="/runs", tags=["runs"])

    @router.post("", status_code=201, response_model=RunDetail, openapi_extra=CASCADE_BODY,
                 responses={413: {"model": ErrorBody}, 415: {"model": ErrorBody},
                            422: {"model": ErrorBody, "description": "Invalid cascade: every bad field in `problems`."},
                            503: {"model": ErrorBody}})
    async def submit_run(request: Request, response: Response) -> RunDetail:
        """Validate a cascade (YAML or JSON), record the run and start it."""
        body = await read_limited(request, core.max_body_bytes)
        run = await run_in_threadpool(core.submit, body, request.headers.get("content-type"))
        response.headers["Location"] = f"/runs/{run.id}"
        return run

    @router.get("", response_model=list[RunSummary])
    def list_runs() -> list[RunSummary]:
        """Every run, oldest first, with its progress."""
        return core.runs()

    @router.get("/{run_id}", response_model=RunDetail, responses=NOT_FOUND)
    def get_run(run_id: int) -> RunDetail:
        """Status, stages (status, steps done / total) and error of one run."""
        return core.run(run_id)

    @router.post("/{run_id}/cancel", response_model=RunDetail,
                 responses={**NOT_FOUND, 409: {"model": ErrorBody, "description": "The run already ended."}})
    def cancel_run(run_id: int) -> RunDetail:
        """Stop the run after the phase in flight."""
        return core.cancel(run_id)

    @router.get("/{run_id}/metrics", response_model=RunMetrics, responses=NOT_FOUND)
    def run_metrics(run_id: int) -> RunMetrics:
        """Per stage and step: phase, metrics and seconds per phase."""
        return core.metrics(run_id)

    @router.get("/{run_id}/episodes", response_model=RunEpisodes, responses=NOT_FOUND)
    def run_episodes(run_id: int) -> RunEpisodes:
        """Per stage with an environment: turns per episode, tool errors, env seconds, verdicts, per step."""
        return core.episodes(run_id)

    @router.get("/{run_id}/mismatch", response_model=RunMismatch, responses=NOT_FOUND)
    def run_mismatch(run_id: int) -> RunMismatch:
        """Per RL step: the train/inference mismatch figures the trainer measured, and the latest."""
        return core.mismatch(run_id)

    @router.get("/{run_id}/evals", response_model=RunEvals, responses=NOT_FOUND)
    def run_evals(run_id: int) -> RunEvals:
        """Per-domain validation rewards across all steps of all stages, with the stages' spans."""
        return core.evals(run_id)

    @router.get("/{run_id}/teachers", response_model=RunTeachers, responses=NOT_FOUND)
    def run_teachers(run_id: int) -> RunTeachers:
        """The teacher checkpoint chosen per domain in each MOPD stage."""
        return core.teachers(run_id)

    @router.get("/{run_id}/claims", response_model=RunClaims, responses=NOT_FOUND)
    def run_claims(run_id: int) -> RunClaims:
        """Each claim of the method, whether the evaluations so far bear it out, and its figures."""
        return core.claims(run_id)

    return router


def ops_router(core: ControlCore, metrics: ApiMetrics) -> APIRouter:
    router = APIRouter(tags=["operations"])

    @router.get("/healthz", response_model=Health, responses={503: {"model": Health}}, openapi_extra={"security": []})
    def healthz() -> JSONResponse:
        """`ok` when the ledger answers (no token needed)."""
        ok = core.healthy()
        return JSONResponse(Health(status="ok" if ok else "ledger unreachable").model_dump(), 200 if ok else 503)

    @router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
    def prometheus() -> Response:
        """Prometheus text format: API requests, run / stage / step progress, latest reward per domain."""
        return Response(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @router.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(PAGE_DIR / "index.html", headers={"Cache-Control": "no-cache"})

    return router


def _error(status: int, detail: str, problems: list[str] | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(ErrorBody(detail=detail, problems=problems or []).model_dump(), status, headers=headers)


def install_errors(app: FastAPI) -> None:
    """Typed core errors -> status codes with an ErrorBody; request validation -> 422 naming each field."""
    for kind, status in ERROR_STATUS:
        def handler(_request, exc, status=status):
            if isinstance(exc, CascadeConfigError):
                return _error(status, f"invalid cascade: {len(exc.problems)} problem(s)", exc.problems)
            return _error(status, str(exc), [str(exc)] if isinstance(exc, InvalidArgument) else None)
        app.add_exception_handler(kind, handler)

    def invalid_request(_request, exc: RequestValidationError):
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']} (got {e.get('input')!r})"
                    for e in jsonable_encoder(exc.errors())]
        return _error(422, "invalid request: " + "; ".join(problems), problems)

    app.add_exception_handler(RequestValidationError, invalid_request)


def install_middleware(app: FastAPI, token: str | None, metrics: ApiMetrics) -> None:
    @app.middleware("http")
    async def auth_and_count(request: Request, call_next):
        start = time.perf_counter()
        response = _gate(request, token)
        route = "unauthenticated" if response is not None else "unmatched"
        if response is None:
            response = await call_next(request)
            matched = request.scope.get("route")
            route = getattr(matched, "path", route)
        metrics.observe(request.method, route, response.status_code, time.perf_counter() - start)
        return response


def _gate(request: Request, token: str | None) -> Response | None:
    """None when the request may proceed; else the response that ends it (401, or the page's cookie redirect)."""
    if token is None:
        return None
    path = request.url.path
    if path == "/" and "token" in request.query_params:
        if not auth.same_token(request.query_params["token"], token):
            return _error(401, "wrong token in ?token=", headers=auth.CHALLENGE)
        rest = urlencode([(k, v) for k, v in request.query_params.multi_items() if k != "token"])
        redirect = RedirectResponse("/" + (f"?{rest}" if rest else ""), status_code=303)
        redirect.set_cookie(auth.COOKIE, token, httponly=True, samesite="strict", secure=request.url.scheme == "https")
        return redirect
    if auth.allowed(token, path, request.method, request.headers.get("authorization"),
                    request.cookies.get(auth.COOKIE)):
        return None
    return _error(401, "missing or wrong bearer token: send `Authorization: Bearer <CASCADE_API_TOKEN>` "
                       "(the run page: open /?token=<CASCADE_API_TOKEN> once)", headers=auth.CHALLENGE)


def build_app(settings: ApiSettings, core: ControlCore) -> FastAPI:
    """The whole control API over `core`; `settings.token` switches authentication on."""
    app = FastAPI(title="Cascade control API", version="1",
                  description="Submit, watch and cancel cascade runs; per-stage metrics, per-domain evals, "
                              "MOPD teachers. The run page is at `/`.")
    metrics = ApiMetrics(core, settings.metrics_runs)
    install_middleware(app, settings.token, metrics)
    install_errors(app)
    app.include_router(runs_router(core))
    app.include_router(ops_router(core, metrics))
    app.mount("/page", StaticFiles(directory=PAGE_DIR), name="page")

    def openapi() -> dict:
        if app.openapi_schema is None:
            schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
            schema.setdefault("components", {})["securitySchemes"] = {"bearer": {
                "type": "http", "scheme": "bearer",
                "description": "CASCADE_API_TOKEN; required on every route but /healthz when the API has a token."}}
            schema["security"] = [{"bearer": []}]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi
    return app
