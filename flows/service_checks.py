"""Before any work starts: the Prefect server of PREFECT_API_URL and the MLflow tracking store answer, or one line
naming the URL and the setting to fix, within seconds (not after minutes of the clients' own retries).

Checked: PREFECT_API_URL is an http(s) URL; a tracking URI's scheme is one MLflow has a store for; an HTTP server
(Prefect's API, an MLflow server) answers GET <url>/health within solrl_core.mlflow_links.HEALTH_TIMEOUT seconds; a
sqlite or file store's folder exists, is writable and its disk is not full. MLflow's own HTTP retries are bounded
too (MLFLOW_HTTP_* defaults below, also given to flow runs on workers), so a server that dies during a run fails it
in about a minute.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

from solrl_core.errors import SolrlError
from solrl_core.mlflow_links import health_failure
from solrl_core.credentials import with_credentials
from solrl_core.userfiles import closest_existing, unwritable_reason

# MLflow's defaults retry a dead server for minutes (7 retries, backoff factor 2, 120 s per request); these give up
# after about 7 s on a refused connection, about a minute on a server that hangs (4 x 15 s + backoff). An environment
# variable of the same name wins.
MLFLOW_HTTP_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "15",
}
HTTP_SCHEMES = ("http", "https")
# what a tracking URI may be when MLflow's own registry of stores cannot be asked (`tracking_store_schemes`)
TRACKING_SCHEMES = ("", "file", "sqlite", "postgresql", "mysql", "mssql", *HTTP_SCHEMES, "databricks", "databricks-uc",
                    "uc")
TRACKING_URI_FORMS = ("a folder, file:///PATH, sqlite:///FILE, a database (postgresql://, mysql://, mssql://), "
                      "http(s)://SERVER or databricks")
MIN_FREE_BYTES = 1 << 20  # a sqlite or file store's disk with less free space than this counts as full


def check_prefect_api() -> None:
    """PREFECT_API_URL (environment or Prefect profile), when set, answers; unset means a temporary server."""
    url, key = os.environ.get("PREFECT_API_URL"), os.environ.get("PREFECT_API_KEY")
    if url is None:  # not in the environment: Prefect's profile may set it (importing prefect takes seconds)
        from prefect.settings import PREFECT_API_KEY, PREFECT_API_URL

        url, key = PREFECT_API_URL.value(), PREFECT_API_KEY.value()
    if not url:
        return
    parsed = urlparse(url)
    if parsed.scheme not in HTTP_SCHEMES or not parsed.netloc:
        raise SolrlError(f"PREFECT_API_URL={url} is not an http(s) URL; set it to a Prefect server's API (e.g. "
                         "http://127.0.0.1:4200/api), or unset it to use a temporary server")
    failure = health_failure(url.rstrip("/") + "/health", prefect_auth_headers(key))
    if failure:
        raise SolrlError(f"PREFECT_API_URL={url}: no Prefect server answers ({failure}); start it (make server), "
                         "fix PREFECT_API_URL, or unset it to use a temporary server")


def prefect_auth_headers(key: str | None) -> dict[str, str] | None:
    """What a Prefect client sends: PREFECT_API_KEY as a bearer token (Prefect Cloud), else PREFECT_API_AUTH_STRING
    (`user:password`, a self-hosted server's basic auth) as basic authentication; None without either."""
    from solrl_core.redaction import basic_header

    if key:
        return {"Authorization": f"Bearer {key}"}
    auth = os.environ.get("PREFECT_API_AUTH_STRING")
    return basic_header(auth) if auth else None


def check_tracking_store(uri: str, setting: str = "tracking.uri") -> None:
    """The MLflow store at `uri` can be used: an http(s) server answers /health; a sqlite or file store's folder
    exists, is writable and has room. Other stores (databases, Databricks) are left to MLflow; a scheme MLflow has no
    store for is refused. Bounds MLflow's HTTP retries."""
    for name, value in MLFLOW_HTTP_DEFAULTS.items():
        os.environ.setdefault(name, value)
    uri = with_credentials(uri)  # a run directory's record is redacted; the messages below are too (SolrlError)
    parsed = urlparse(uri)
    if not known_tracking_scheme(uri):
        raise SolrlError(f"{setting} = {uri}: MLflow has no tracking store for '{parsed.scheme}:' URIs; set {setting} "
                         f"to {TRACKING_URI_FORMS}")
    if parsed.scheme in HTTP_SCHEMES:
        failure = health_failure(uri.rstrip("/") + "/health")
        if failure:
            raise SolrlError(f"{setting} = {uri}: no MLflow server answers ({failure}); start it (mlflow server "
                             f"--host 127.0.0.1) or set {setting} to a server that runs")
        return
    if parsed.scheme == "sqlite":
        path = uri[len("sqlite:///"):]
        if not path or path == ":memory:":
            return
        folder = Path(path).absolute().parent
    elif parsed.scheme in ("", "file"):
        check_folder_stores_allowed(uri, setting)
        folder = closest_existing(parsed.path if parsed.scheme else uri)
    else:
        check_database_driver(uri, setting)
        return
    if not folder.is_dir():
        raise SolrlError(f"{setting} = {uri}: the folder {folder} does not exist; create it or set {setting} to "
                         "a writable place")
    database = Path(uri[len("sqlite:///"):]).absolute() if parsed.scheme == "sqlite" else None
    why = unwritable_reason(folder)
    if why is None and database is not None and database.exists() and not os.access(database, os.W_OK):
        folder, why = database, "permission denied"
    if why:
        raise SolrlError(f"{setting} = {uri}: cannot write to {folder} ({why}); set {setting} to a writable place")
    free = shutil.disk_usage(folder).free
    if free < MIN_FREE_BYTES:
        raise SolrlError(f"{setting} = {uri}: the disk of {folder} is full ({free} bytes free); free space there or "
                         f"set {setting} to a place on another disk")


# a database store's Python driver (the module SQLAlchemy imports for the URI's dialect) -> the extra that installs it
DRIVER_EXTRAS = {"psycopg2": "postgres", "pymysql": "mysql"}
DRIVER_HINTS = {"MySQLdb": "write the URI as mysql+pymysql://... and install solrl[mysql]"}


def check_database_driver(uri: str, setting: str) -> None:
    """A database tracking store (postgresql://, mysql+pymysql://, ...) whose driver is not installed: one line
    naming the driver and the extra (or package) that installs it, instead of MLflow's ModuleNotFoundError traceback
    when the run starts. Nothing for schemes that are not SQLAlchemy databases."""
    if urlparse(uri).scheme.split("+")[0] not in ("postgresql", "postgres", "mysql", "mssql", "oracle"):
        return
    try:
        from sqlalchemy.engine import make_url

        dialect = make_url(uri).get_dialect()
    except Exception:  # noqa: BLE001 - a URI SQLAlchemy cannot read is MLflow's to report
        return
    try:
        dialect.import_dbapi()
    except ModuleNotFoundError as exc:
        module = exc.name or str(exc)
        extra = DRIVER_EXTRAS.get(module)
        fix = DRIVER_HINTS.get(module) or (f"pip install 'solrl[{extra}]'" if extra else f"install {module}")
        raise SolrlError(f"{setting} = {uri}: MLflow's database store needs the Python driver {module}, which is "
                         f"not installed; {fix}") from None


def check_folder_stores_allowed(uri: str, setting: str) -> None:
    """MLflow 3.x opens a folder store (./mlruns, file:///...) only with MLFLOW_ALLOW_FILE_STORE=true: refuse one
    otherwise, naming both fixes (MLflow itself would raise a traceback when the run starts)."""
    try:
        from mlflow.environment_variables import MLFLOW_ALLOW_FILE_STORE
    except ImportError:  # an MLflow without that switch opens folder stores
        return
    if not MLFLOW_ALLOW_FILE_STORE.get():
        raise SolrlError(f"{setting} = {uri}: MLflow opens a folder store only with MLFLOW_ALLOW_FILE_STORE=true; "
                         f"set {setting} to a database, e.g. sqlite:///mlruns.db, or export MLFLOW_ALLOW_FILE_STORE=true")


def known_tracking_scheme(uri: str) -> bool:
    """Whether MLflow has a tracking store for `uri` (its registry of stores, plug-ins included: asked only for a
    scheme outside TRACKING_SCHEMES; a one-letter scheme is a Windows drive, a path)."""
    scheme = urlparse(uri).scheme
    if scheme in TRACKING_SCHEMES or len(scheme) == 1:
        return True
    try:
        from mlflow.tracking._tracking_service.utils import _tracking_store_registry
    except ImportError:  # MLflow moved its registry: the short list decides
        return scheme.split("+")[0] in TRACKING_SCHEMES
    try:
        _tracking_store_registry.get_store_builder(uri)  # finds the builder of the scheme; connects to nothing
    except Exception:  # noqa: BLE001 - MLflow's "unsupported URI" errors have no common class
        return False
    return True


def check_services(cfg, run=None, tracking: bool = True) -> None:
    """The Prefect API and (with `tracking`) the run's MLflow store answer (`check_tracking`)."""
    check_prefect_api()
    if tracking:
        check_tracking(cfg, run)


def check_tracking(cfg, run=None) -> str:
    """The MLflow store of `cfg` (the one recorded in the run directory of `run` when it has one and keeps it: a resumed
    run logs there; a run whose config is replaced drops it) answers, through the MLflow server that serves it if one does (flows/tracking.py `route`), and reaches
    where its run (or the experiment a new run joins) keeps its artifacts. Returns the URI logged to."""
    from solrl.flows.tracking import check_artifact_route, route, tracking_uri
    from solrl_core.run.rundir import read_json
    from solrl_core.run_config import config_replaced

    uri, run_id = tracking_uri(cfg), None
    setting = "tracking.uri" if cfg.tracking.uri else \
        "MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "tracking.uri (default)"
    if run is not None and run.run_json.is_file() and not config_replaced(run, cfg):
        try:
            info = read_json(run.run_json)
            uri, run_id, setting = info["tracking_uri"], info["mlflow_run_id"], f"the tracking URI of {run.run_json}"
        except (ValueError, KeyError, TypeError):  # a damaged run.json is reported where it is read
            pass
    check_tracking_store(route(uri), setting)
    check_artifact_route(uri, experiment=cfg.tracking.experiment, run_id=run_id)
    return route(uri)
