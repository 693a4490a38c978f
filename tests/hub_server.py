"""A small Hugging Face Hub for the tests: the Hub HTTP API on 127.0.0.1, standard library only.

It speaks enough of the API for the real clients (checked with huggingface_hub 2.4, transformers 5.23,
datasets 5.2): `create_repo`, `upload_folder`/`create_commit` (regular files inline, LFS files through the
LFS batch API and a PUT), `snapshot_download`, `hf_hub_download`, `list_repo_files`, `ModelCard.push_to_hub`
(which first calls `/api/validate-yaml`), `model.push_to_hub`, `from_pretrained("<user>/<repo>")` and
`Trainer.push_to_hub`. Storage lives in a temporary folder; every request is recorded (method, path, query,
headers, body) so that a test can check what a client sent.

Pointing the clients at it
--------------------------
huggingface_hub reads `HF_ENDPOINT`, `HF_HUB_OFFLINE` and `HF_HUB_DISABLE_XET` once, at import, into
`huggingface_hub.constants`, and the module-level `HfApi` objects (`huggingface_hub.hf_api.api`, transformers'
`transformers.utils.hub._hf_api`) keep the endpoint they were built with; `datasets.config` copies the endpoint
and the offline flag at its own import. Setting the environment variables inside a running test therefore
does nothing. Two ways work with huggingface_hub 2.4:

* in the test process: `hub.client_patches(monkeypatch)` (done by the `local_hub` fixture) patches those
  constants and objects and resets them when the test ends;
* in a subprocess (a run script): pass `hub.client_env()` as its environment; the variables are read at
  import there.

`HF_HUB_DISABLE_XET=1` is required: with `hf_xet` installed, uploads otherwise take the Xet protocol, which
this server does not speak.

Faults for robustness tests: `stall()` accepts requests and never answers, `fail(500)` answers an error status,
`accept_only(...)` refuses other tokens with 401 (each optionally only for paths containing a string).

Errors follow the real Hub: a missing repository answers 404 with `X-Error-Code: RepoNotFound` (the code
huggingface_hub maps to `RepositoryNotFoundError`), a missing file 404 with `X-Error-Code: EntryNotFound`
(transformers relies on it for optional files), a missing revision 404 with `RevisionNotFound`, and a
rejected token 401 with `X-Error-Message: Invalid credentials in Authorization header`
(see `LocalHub.accept_only`).
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import os
import re
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

DEFAULT_USER = "hf-aux-tester"
# Paths stored as LFS objects, as in the .gitattributes the Hub writes into a new repository.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".npy", ".npz",
                ".pkl", ".pickle", ".arrow", ".parquet", ".zip", ".gz", ".tar", ".png", ".jpg")
LFS_MIN_SIZE = 10 * 1024 * 1024
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES)
REPO_TYPES = {"models": "model", "datasets": "dataset", "spaces": "space"}
URL_PREFIXES = {"model": "", "dataset": "datasets/", "space": "spaces/"}
NAME = r"[A-Za-z0-9][\w.\-]*"
REPO = rf"(?P<repo>{NAME}/{NAME})"


class HubError(Exception):
    """An HTTP error answer: status, Hub error code (`X-Error-Code`) and message."""

    def __init__(self, status: int, code: str | None, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict
    headers: dict
    body: bytes

    @property
    def token(self) -> str | None:
        auth = self.headers.get("authorization", "")
        return auth[len("Bearer "):] if auth.startswith("Bearer ") else None


@dataclass
class StoredFile:
    sha256: str
    size: int
    git_oid: str
    lfs: bool


@dataclass
class Commit:
    oid: str
    title: str
    message: str
    date: str
    tree: dict  # path -> StoredFile


@dataclass
class Repo:
    repo_type: str
    repo_id: str
    private: bool
    commits: list = field(default_factory=list)  # oldest first
    branches: dict = field(default_factory=dict)  # branch name -> commit oid

    def commit(self, revision: str) -> Commit:
        revision = urllib.parse.unquote(revision)
        oid = self.branches.get(revision, revision)
        for commit in self.commits:
            if commit.oid == oid:
                return commit
        raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")


def _git_oid(content: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat().replace("+00:00", "Z")


def _front_matter(text: str) -> str | None:
    """The YAML block of a card between its leading `---` lines, or None if the card has none."""
    match = re.match(r"^\s*---\s*\n(.*?)\n---\s*(\n|$)", text, re.DOTALL)
    return match.group(1) if match else None


class LocalHub:
    """The Hub API on 127.0.0.1 at a free port, storing into `root`. Use as a context manager or `start`/`stop`."""

    def __init__(self, root: str | os.PathLike, user: str = DEFAULT_USER):
        self.root = Path(root)
        self.blob_dir = self.root / "blobs"
        self.blob_dir.mkdir(parents=True, exist_ok=True)
        self.user = user
        self.repos: dict[tuple[str, str], Repo] = {}
        self.requests: list[RecordedRequest] = []
        self.accepted_tokens: set[str] | None = None  # None: any token (or none) is accepted
        self.fault: tuple[str, int | None, str] | None = None  # set by stall() / fail()
        self._released = threading.Event()  # ends stalled requests
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- life cycle -------------------------------------------------------------------------------------------
    def start(self) -> "LocalHub":
        handler = type("Handler", (_Handler,), {"hub": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # port 0: the OS picks a free port
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="local-hub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self) -> "LocalHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    # ---- configuration and inspection used by tests -----------------------------------------------------------
    def accept_only(self, *tokens: str) -> None:
        """From now on answer 401 to any request carrying another token, and to writes carrying none."""
        self.accepted_tokens = set(tokens)

    def stall(self, path_contains: str = "") -> None:
        """From now on accept requests whose path contains `path_contains` and never answer them (until stop())."""
        self.fault = ("stall", None, path_contains)

    def fail(self, status: int = 500, path_contains: str = "") -> None:
        """From now on answer `status` (e.g. 500, 503) to requests whose path contains `path_contains`."""
        self.fault = ("fail", status, path_contains)

    def heal(self) -> None:
        self.fault = None

    def client_env(self, cache_dir: str | os.PathLike | None = None) -> dict:
        """Environment for a subprocess whose Hub clients should use this server (and nothing else)."""
        env = dict(os.environ)
        env.update(HF_ENDPOINT=self.url, HF_HUB_OFFLINE="0", HF_DATASETS_OFFLINE="0", TRANSFORMERS_OFFLINE="0",
                   HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
                   HF_HOME=str(cache_dir or self.root / "client_home"))
        env.pop("HF_TOKEN", None)
        return env

    def client_patches(self, monkeypatch: pytest.MonkeyPatch, cache_dir: str | os.PathLike | None = None) -> None:
        """Point the already imported huggingface_hub, transformers and datasets at this server (see the module doc)."""
        import datasets.config
        import huggingface_hub.hf_api
        import transformers.utils.hub
        from huggingface_hub import constants

        home = Path(cache_dir or self.root / "client_home")
        for name, value in dict(
            ENDPOINT=self.url, HUGGINGFACE_CO_URL_TEMPLATE=self.url + "/{repo_id}/resolve/{revision}/{filename}",
            HF_HUB_OFFLINE=False, HF_HUB_DISABLE_XET=True, HF_HUB_DISABLE_TELEMETRY=True,
            HF_HUB_CACHE=str(home / "hub"), HUGGINGFACE_HUB_CACHE=str(home / "hub"),
            HF_TOKEN_PATH=str(home / "token"), HF_STORED_TOKENS_PATH=str(home / "stored_tokens"),
        ).items():
            monkeypatch.setattr(constants, name, value, raising=False)
        monkeypatch.setattr(huggingface_hub.hf_api.api, "endpoint", self.url)
        monkeypatch.setattr(transformers.utils.hub, "_hf_api", None)  # rebuilt lazily with the patched endpoint
        for name, value in dict(
            HF_ENDPOINT=self.url, HUB_DATASETS_URL=self.url + "/datasets/{repo_id}/resolve/{revision}/{path}",
            HF_HUB_OFFLINE=False, HF_DATASETS_OFFLINE=False, HF_DATASETS_CACHE=home / "datasets",
        ).items():
            monkeypatch.setattr(datasets.config, name, value)
        for name, value in self.client_env(home).items():
            if os.environ.get(name) != value:
                monkeypatch.setenv(name, value)
        monkeypatch.delenv("HF_TOKEN", raising=False)

    def files(self, repo_id: str, repo_type: str = "model", revision: str = "main") -> dict[str, bytes]:
        """Every file of a repository at `revision`, path -> content."""
        with self._lock:
            commit = self._repo(repo_type, repo_id).commit(revision)
            return {path: self._blob(stored.sha256) for path, stored in commit.tree.items()}

    def seed(self, repo_id: str, folder: str | os.PathLike, repo_type: str = "model") -> str:
        """Create `repo_id` holding every file of `folder`, as if someone had pushed it; returns the commit oid."""
        folder = Path(folder)
        files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
        with self._lock:
            repo = self._create_repo(repo_type, repo_id, private=False)
            tree = dict(repo.commit("main").tree)
            for path, content in files.items():
                tree[path] = self._store(content, lfs=self._is_lfs(path, content))
            return self._add_commit(repo, "main", tree, f"Seed {repo_id}", "").oid

    # ---- storage ----------------------------------------------------------------------------------------------
    def _blob(self, sha256: str) -> bytes:
        return (self.blob_dir / sha256).read_bytes()

    def _store(self, content: bytes, lfs: bool) -> StoredFile:
        sha256 = hashlib.sha256(content).hexdigest()
        path = self.blob_dir / sha256
        if not path.exists():
            path.write_bytes(content)
        return StoredFile(sha256=sha256, size=len(content), git_oid=_git_oid(content), lfs=lfs)

    @staticmethod
    def _is_lfs(path: str, content_or_sample: bytes, size: int | None = None) -> bool:
        size = len(content_or_sample) if size is None else size
        return path.endswith(LFS_SUFFIXES) or size >= LFS_MIN_SIZE or b"\0" in content_or_sample[:512]

    def _repo(self, repo_type: str, repo_id: str) -> Repo:
        repo = self.repos.get((repo_type, repo_id))
        if repo is None:
            raise HubError(404, "RepoNotFound", "Repository not found")
        return repo

    def _create_repo(self, repo_type: str, repo_id: str, private: bool) -> Repo:
        repo = Repo(repo_type=repo_type, repo_id=repo_id, private=private)
        self.repos[(repo_type, repo_id)] = repo
        self._add_commit(repo, "main", {".gitattributes": self._store(GITATTRIBUTES.encode(), lfs=False)},
                         "initial commit", "")
        return repo

    def _add_commit(self, repo: Repo, branch: str, tree: dict, title: str, message: str) -> Commit:
        seed = f"{repo.repo_type}/{repo.repo_id}/{len(repo.commits)}/{title}/{sorted(tree)}/{_now()}"
        commit = Commit(oid=hashlib.sha1(seed.encode()).hexdigest(), title=title, message=message, date=_now(),
                        tree=tree)
        repo.commits.append(commit)
        repo.branches[branch] = commit.oid
        return commit

    def repo_url(self, repo: Repo) -> str:
        return f"{self.url}/{URL_PREFIXES[repo.repo_type]}{repo.repo_id}"

    # ---- JSON shapes ------------------------------------------------------------------------------------------
    @staticmethod
    def _tree_entry(path: str, stored: StoredFile) -> dict:
        entry = {"type": "file", "oid": stored.git_oid, "size": stored.size, "path": path}
        if stored.lfs:
            entry["lfs"] = {"oid": stored.sha256, "size": stored.size, "pointerSize": 134}
        return entry

    @staticmethod
    def _folders(tree: dict, prefix: str, recursive: bool) -> list[str]:
        """Folder paths below `prefix` ("" for the root): direct children only unless `recursive`."""
        found = set()
        for path in tree:
            if prefix and not path.startswith(prefix + "/"):
                continue
            folders = path[len(prefix) + 1 if prefix else 0:].split("/")[:-1]
            for depth in range(1, (len(folders) if recursive else min(len(folders), 1)) + 1):
                found.add("/".join(([prefix] if prefix else []) + folders[:depth]))
        return sorted(found)

    def _listing(self, tree: dict, prefix: str, recursive: bool) -> list[dict]:
        entries = [{"type": "directory", "oid": hashlib.sha1(folder.encode()).hexdigest(), "size": 0,
                    "path": folder} for folder in self._folders(tree, prefix, recursive)]
        for path, stored in sorted(tree.items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1 if prefix else 0:]
            if recursive or "/" not in rest:
                entries.append(self._tree_entry(path, stored))
        return entries

    def _info(self, repo: Repo, commit: Commit) -> dict:
        info = {"id": repo.repo_id, "author": repo.repo_id.split("/")[0], "sha": commit.oid,
                "private": repo.private, "lastModified": commit.date, "createdAt": repo.commits[0].date,
                "tags": [], "siblings": [{"rfilename": path} for path in sorted(commit.tree)]}
        card = commit.tree.get("README.md")
        if card is not None:
            import yaml  # a dependency of hf_aux; only used to mirror the Hub's parsed `cardData`

            block = _front_matter(self._blob(card.sha256).decode("utf-8", errors="replace"))
            data = yaml.safe_load(block) if block else None
            if isinstance(data, dict):
                info["cardData"] = data
                info["tags"] = list(data.get("tags") or [])
        return info


class _Handler(BaseHTTPRequestHandler):
    hub: LocalHub
    protocol_version = "HTTP/1.1"  # keep-alive, as the clients expect; every answer carries Content-Length

    def log_message(self, format, *args):  # noqa: A002 - silence the per-request stderr lines
        pass

    # ---- plumbing ---------------------------------------------------------------------------------------------
    def _read_body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _send(self, status: int, body: bytes = b"", content_type: str = "application/json",
              headers: dict | None = None, head: bool = False, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if not head and body:
            self.wfile.write(body)

    def _json(self, status: int, data, headers: dict | None = None) -> None:
        self._send(status, json.dumps(data).encode(), headers=headers)

    def _handle(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(url.path)
        query = urllib.parse.parse_qs(url.query)
        body = self._read_body() if method in ("POST", "PUT", "DELETE") else b""
        request = RecordedRequest(method, path, query, {k.lower(): v for k, v in self.headers.items()}, body)
        hub = self.hub
        with hub._lock:
            hub.requests.append(request)
        fault = hub.fault
        if fault is not None and fault[2] in path:
            if fault[0] == "stall":
                hub._released.wait(120)  # a bound, so a forgotten stop() cannot hang the test run
                self.close_connection = True
                return
            self._send(fault[1], json.dumps({"error": "injected failure"}).encode(), head=method == "HEAD")
            return
        try:
            self._check_token(request)
            self._route(method, path, query, body, request)
        except HubError as error:
            headers = {"X-Error-Message": error.message}
            if error.code:
                headers["X-Error-Code"] = error.code
            self._send(error.status, json.dumps({"error": error.message}).encode(), headers=headers,
                       head=method == "HEAD")

    def _check_token(self, request: RecordedRequest) -> None:
        accepted = self.hub.accepted_tokens
        if accepted is None:
            return
        # The LFS upload URL stands for a presigned storage URL: clients send no token there.
        if request.path.startswith("/lfs-upload/"):
            return
        is_write = request.method in ("POST", "PUT", "DELETE") and request.path != "/api/validate-yaml"
        if (request.token is None and is_write) or (request.token is not None and request.token not in accepted):
            raise HubError(401, None, "Invalid credentials in Authorization header")

    do_GET = lambda self: self._handle("GET")  # noqa: E731
    do_HEAD = lambda self: self._handle("HEAD")  # noqa: E731
    do_POST = lambda self: self._handle("POST")  # noqa: E731
    do_PUT = lambda self: self._handle("PUT")  # noqa: E731
    do_DELETE = lambda self: self._handle("DELETE")  # noqa: E731

    # ---- routes -----------------------------------------------------------------------------------------------
    def _route(self, method: str, path: str, query: dict, body: bytes, request: RecordedRequest) -> None:
        hub = self.hub
        if method == "GET" and path == "/api/whoami-v2":
            return self._json(200, {"type": "user", "name": hub.user, "fullname": hub.user, "orgs": [],
                                    "auth": {"type": "access_token",
                                             "accessToken": {"displayName": "tests", "role": "write"}}})
        if method == "POST" and path == "/api/validate-yaml":
            return self._validate_yaml(json.loads(body or b"{}"))
        if method == "POST" and path == "/api/repos/create":
            return self._create(json.loads(body or b"{}"))
        if method == "DELETE" and path == "/api/repos/delete":
            data = json.loads(body or b"{}")
            repo_id = f"{data.get('organization') or hub.user}/{data['name']}"
            with hub._lock:
                hub._repo(data.get("type") or "model", repo_id)
                del hub.repos[(data.get("type") or "model", repo_id)]
            return self._send(200)
        if method == "PUT" and (match := re.fullmatch(r"/lfs-upload/(?P<oid>[0-9a-f]{64})", path)):
            if hashlib.sha256(body).hexdigest() != match["oid"]:
                raise HubError(400, None, "LFS upload does not match its sha256")
            with hub._lock:
                hub._store(body, lfs=True)
            return self._send(200)
        if match := re.fullmatch(rf"/api/(?P<kind>models|datasets|spaces)/{REPO}(?P<rest>/.*)?", path):
            return self._api(method, REPO_TYPES[match["kind"]], match["repo"], match["rest"] or "", query, body)
        if match := re.fullmatch(rf"/(?:(?P<kind>datasets|spaces)/)?{REPO}\.git/info/lfs/objects/batch", path):
            return self._lfs_batch(REPO_TYPES.get(match["kind"], "model") if match["kind"] else "model",
                                   match["repo"], json.loads(body))
        if method in ("GET", "HEAD") and (
                match := re.fullmatch(rf"/(?:(?P<kind>datasets|spaces)/)?{REPO}/resolve/(?P<rev>[^/]+)/(?P<file>.+)",
                                      path)):
            kind = REPO_TYPES[match["kind"]] if match["kind"] else "model"
            return self._resolve(method, kind, match["repo"], match["rev"], match["file"])
        raise HubError(404, None, f"No route for {method} {path}")

    def _validate_yaml(self, data: dict) -> None:
        import yaml  # a dependency of hf_aux; the real Hub rejects cards whose metadata does not parse

        block = _front_matter(data.get("content", ""))
        try:
            metadata = yaml.safe_load(block) if block else {}
        except yaml.YAMLError as error:
            return self._send(400, f"Invalid YAML metadata: {error}".encode(), "text/plain")
        if metadata is not None and not isinstance(metadata, dict):
            return self._send(400, b"Card metadata must be a YAML mapping", "text/plain")
        self._json(200, {"errors": [], "warnings": []})

    def _create(self, data: dict) -> None:
        hub = self.hub
        repo_type = data.get("type") or "model"
        repo_id = f"{data.get('organization') or hub.user}/{data['name']}"
        with hub._lock:
            existing = hub.repos.get((repo_type, repo_id))
            if existing is not None:
                return self._json(409, {"error": "You already created this repo", "url": hub.repo_url(existing)},
                                  headers={"X-Error-Message": "You already created this repo"})
            repo = hub._create_repo(repo_type, repo_id, private=data.get("visibility") == "private")
        self._json(200, {"url": hub.repo_url(repo), "name": repo_id, "id": repo_id})

    def _api(self, method: str, repo_type: str, repo_id: str, rest: str, query: dict, body: bytes) -> None:
        hub = self.hub
        with hub._lock:
            repo = hub._repo(repo_type, repo_id)
            if method == "GET" and (rest == "" or rest.startswith("/revision/")):
                revision = rest[len("/revision/"):] if rest else "main"
                return self._json(200, hub._info(repo, repo.commit(revision)))
            if method == "GET" and (match := re.fullmatch(r"/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", rest)):
                commit = repo.commit(match["rev"])
                prefix = (match["path"] or "").strip("/")
                if prefix and prefix in commit.tree:
                    raise HubError(404, "EntryNotFound", f"{prefix} is a file, not a folder")
                if prefix and not any(p.startswith(prefix + "/") for p in commit.tree):
                    raise HubError(404, "EntryNotFound", f"{prefix} does not exist on {match['rev']}")
                recursive = query.get("recursive", ["False"])[0].lower() in ("1", "true")
                return self._json(200, hub._listing(commit.tree, prefix, recursive))
            if method == "POST" and (match := re.fullmatch(r"/paths-info/(?P<rev>[^/]+)", rest)):
                commit = repo.commit(match["rev"])
                paths = urllib.parse.parse_qs(body.decode()).get("paths", [])
                answer = []
                for path in paths:
                    path = path.strip("/")
                    if path in commit.tree:
                        answer.append(hub._tree_entry(path, commit.tree[path]))
                    elif any(p.startswith(path + "/") for p in commit.tree):
                        answer.append({"type": "directory", "oid": hashlib.sha1(path.encode()).hexdigest(),
                                       "size": 0, "path": path})
                return self._json(200, answer)
            if method == "POST" and (match := re.fullmatch(r"/preupload/(?P<rev>[^/]+)", rest)):
                commit = repo.commit(match["rev"])
                files = []
                for item in json.loads(body)["files"]:
                    sample = base64.b64decode(item.get("sample", ""))
                    existing = commit.tree.get(item["path"])
                    files.append({"path": item["path"], "shouldIgnore": False,
                                  "uploadMode": "lfs" if hub._is_lfs(item["path"], sample, item["size"]) else "regular",
                                  "oid": existing.git_oid if existing else None})
                return self._json(200, {"files": files, "commitOid": commit.oid})
            if method == "POST" and (match := re.fullmatch(r"/commit/(?P<rev>[^/]+)", rest)):
                return self._commit(repo, urllib.parse.unquote(match["rev"]), body, query)
            if method == "GET" and rest == "/refs":
                return self._json(200, {"branches": [{"name": name, "ref": f"refs/heads/{name}", "targetCommit": oid}
                                                     for name, oid in repo.branches.items()],
                                        "converts": [], "tags": [], "pullRequests": []})
            if method == "GET" and (match := re.fullmatch(r"/commits/(?P<rev>[^/]+)", rest)):
                head = repo.commit(match["rev"])
                history = repo.commits[: repo.commits.index(head) + 1][::-1]
                return self._json(200, [{"id": c.oid, "title": c.title, "message": c.message, "date": c.date,
                                         "authors": [{"user": hub.user}]} for c in history])
        raise HubError(404, None, f"No route for {method} /api/{repo_type}s/{repo_id}{rest}")

    def _commit(self, repo: Repo, branch: str, body: bytes, query: dict) -> None:
        hub = self.hub
        if query.get("create_pr"):
            raise HubError(400, None, "Pull requests are not supported by the local test Hub")
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        if not lines or lines[0].get("key") != "header":
            raise HubError(400, None, "A commit starts with a header line")
        header = lines[0]["value"]
        head = repo.commit(branch)
        if header.get("parentCommit") and header["parentCommit"] != head.oid:
            raise HubError(412, None, "The parent commit is not the head of the branch")
        tree = dict(head.tree)
        for line in lines[1:]:
            key, value = line["key"], line["value"]
            if key == "file":
                content = base64.b64decode(value["content"]) if value.get("encoding") == "base64" \
                    else value["content"].encode()
                tree[value["path"]] = hub._store(content, lfs=False)
            elif key == "lfsFile":
                blob = hub.blob_dir / value["oid"]
                if not blob.exists():
                    raise HubError(400, None, f"LFS object {value['oid']} of {value['path']} was never uploaded")
                tree[value["path"]] = StoredFile(value["oid"], value["size"], _git_oid(blob.read_bytes()), True)
            elif key == "deletedFile":
                if tree.pop(value["path"], None) is None:
                    raise HubError(404, "EntryNotFound", f"{value['path']} does not exist")
            elif key == "deletedFolder":
                prefix = value["path"].strip("/") + "/"
                for path in [p for p in tree if p.startswith(prefix)]:
                    del tree[path]
            else:
                raise HubError(400, None, f"Unsupported commit operation {key!r}")
        commit = hub._add_commit(repo, branch, tree, header.get("summary", ""), header.get("description", ""))
        self._json(200, {"success": True, "commitOid": commit.oid,
                         "commitUrl": f"{hub.repo_url(repo)}/commit/{commit.oid}"})

    def _lfs_batch(self, repo_type: str, repo_id: str, data: dict) -> None:
        hub = self.hub
        with hub._lock:
            hub._repo(repo_type, repo_id)
        objects = []
        for item in data.get("objects", []):
            answer = {"oid": item["oid"], "size": item["size"], "authenticated": True}
            if not (hub.blob_dir / item["oid"]).exists():
                answer["actions"] = {"upload": {"href": f"{hub.url}/lfs-upload/{item['oid']}", "header": {}}}
            objects.append(answer)
        self._send(200, json.dumps({"transfer": "basic", "objects": objects}).encode(),
                   "application/vnd.git-lfs+json")

    def _resolve(self, method: str, repo_type: str, repo_id: str, revision: str, path: str) -> None:
        hub = self.hub
        with hub._lock:
            commit = hub._repo(repo_type, repo_id).commit(revision)
            stored = commit.tree.get(path)
            if stored is None:
                raise HubError(404, "EntryNotFound", f"{path} does not exist on {revision}")
            content = hub._blob(stored.sha256)
        etag = stored.sha256 if stored.lfs else stored.git_oid
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{etag}"', "Accept-Ranges": "bytes"}
        if stored.lfs:
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(stored.size)})
        status, body = 200, content
        if match := re.fullmatch(r"bytes=(\d*)-(\d*)", self.headers.get("Range", "")):
            start = int(match[1]) if match[1] else max(0, len(content) - int(match[2]))
            end = int(match[2]) if match[1] and match[2] else len(content) - 1
            if start >= len(content) and len(content) > 0:
                raise HubError(416, None, "Requested range not satisfiable")
            status, body = 206, content[start:end + 1]
            headers["Content-Range"] = f"bytes {start}-{start + len(body) - 1}/{len(content)}"
        self._send(status, body, "application/octet-stream", headers=headers, head=method == "HEAD")


@pytest.fixture
def local_hub(tmp_path, monkeypatch):
    """A running `LocalHub` with the in-process Hub clients pointed at it; stopped when the test ends."""
    with LocalHub(tmp_path / "hub_storage") as hub:
        hub.client_patches(monkeypatch, cache_dir=tmp_path / "client_home")
        yield hub

