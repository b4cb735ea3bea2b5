"""A Hugging Face Hub stand-in on 127.0.0.1: the endpoints `huggingface_hub` calls to create a repo, upload a
folder (preupload, LFS batch with the "basic" transfer, commit) and download a snapshot or a file (repo info,
tree, resolve), for model and dataset repos. Every commit keeps its whole tree, so any revision can be
asked for. Enough for the client's upload and joiner paths; no auth beyond requiring a bearer token on
writes, no pull requests, no xet.

    with HubStandIn() as hub:   # hub.url is the HF_ENDPOINT
        ...
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_FROM = 1024  # files this size or larger go through LFS (as the Hub sends weights)
# the URLs in answers name the public Hub: huggingface_hub parses them against its own default endpoint, and
# callers reach the stand-in by passing endpoint= (the client does, from HF_ENDPOINT)
PUBLIC = "https://huggingface.co"


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit oid -> tree
    main: str | None = None

    def tree(self, revision: str) -> tuple[str, dict[str, bytes]] | None:
        oid = self.main if revision in ("main", "HEAD") else revision
        if oid is None or oid not in self.commits:
            return None
        return oid, self.commits[oid]


class HubStandIn:
    def __init__(self) -> None:
        self.repos: dict[tuple[str, str], Repo] = {}  # (type, id) -> repo
        self.lfs: dict[str, bytes] = {}  # sha256 -> content
        self.lock = threading.Lock()
        self.requests: list[str] = []
        standin = self

        class Handler(_Handler):
            hub = standin

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> HubStandIn:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)

    def put(self, repo_type: str, repo_id: str, files: dict[str, bytes]) -> str:
        """Commit `files` directly (test setup); the commit oid."""
        with self.lock:
            repo = self.repos.setdefault((repo_type, repo_id), Repo())
            return self._commit(repo, files)

    def _commit(self, repo: Repo, files: dict[str, bytes]) -> str:
        tree = dict(repo.commits[repo.main]) if repo.main else {}
        tree.update(files)
        oid = hashlib.sha1(repr((repo.main, sorted((k, hashlib.sha256(v).hexdigest()) for k, v in tree.items())))
                           .encode()).hexdigest()  # fmt: skip
        repo.commits[oid] = tree
        repo.main = oid
        return oid


_TYPED = re.compile(
    r"^/api/(models|datasets)/([^/]+/[^/]+)/(preupload|commit|revision|tree)/([^/?]+)(/.*)?$"
)
_RESOLVE = re.compile(r"^/(?:(datasets)/)?([^/]+/[^/]+)/resolve/([^/]+)/(.+)$")
_BATCH = re.compile(r"^/(?:(datasets)/)?([^/]+/[^/]+)\.git/info/lfs/objects/batch$")


class _Handler(BaseHTTPRequestHandler):
    hub: HubStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: object) -> None:  # quiet
        pass

    # -- plumbing ------------------------------------------------------------------------------------
    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              head: bool = False) -> None:  # fmt: skip
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.wfile.write(body)

    def _json(self, value: object, status: int = 200) -> None:
        self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json"})

    def _error(self, status: int, message: str) -> None:
        self._send(status, json.dumps({"error": message}).encode(),
                   {"Content-Type": "application/json", "X-Error-Message": message})  # fmt: skip

    def _repo(self, kind: str | None, repo_id: str) -> Repo | None:
        return self.hub.repos.get(
            ("dataset" if kind in ("datasets", "dataset") else "model", repo_id)
        )

    # -- verbs ---------------------------------------------------------------------------------------
    def do_POST(self) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append(f"POST {path}")
        body = self._body()
        if not self.headers.get("Authorization", "").startswith("Bearer "):
            return self._error(401, "a write needs a token")
        with self.hub.lock:
            if path == "/api/repos/create":
                args = json.loads(body)
                name = (
                    args["name"]
                    if "/" in args["name"]
                    else f"{args.get('organization')}/{args['name']}"
                )
                kind = args.get("type") or "model"
                self.hub.repos.setdefault((kind, name), Repo())
                return self._json({"url": f"{PUBLIC}/{name}"})
            if m := _BATCH.match(path):
                objects = []
                for o in json.loads(body)["objects"]:
                    entry = {"oid": o["oid"], "size": o["size"]}
                    if o["oid"] not in self.hub.lfs:
                        entry["actions"] = {
                            "upload": {"href": f"{self.hub.url}/lfs-upload/{o['oid']}"}
                        }
                    objects.append(entry)
                return self._json({"transfer": "basic", "objects": objects})
            m = _TYPED.match(path)
            if m is None:
                return self._error(404, f"no route {path}")
            kind, repo_id, what, _revision = m.group(1), m.group(2), m.group(3), m.group(4)
            repo = self._repo(kind, repo_id)
            if repo is None:
                return self._error(404, f"Repository not found: {repo_id}")
            if what == "preupload":
                files = json.loads(body)["files"]
                return self._json({"files": [{"path": f["path"], "uploadMode": "lfs" if f["size"] >= LFS_FROM
                                              else "regular", "shouldIgnore": False} for f in files]})  # fmt: skip
            if what == "commit":
                files: dict[str, bytes] = {}
                for line in body.decode().splitlines():
                    item = json.loads(line)
                    value = item.get("value", {})
                    if item["key"] == "file":
                        files[value["path"]] = base64.b64decode(value["content"])
                    elif item["key"] == "lfsFile":
                        if value["oid"] not in self.hub.lfs:
                            return self._error(400, f"lfs object {value['oid']} was not uploaded")
                        files[value["path"]] = self.hub.lfs[value["oid"]]
                oid = self.hub._commit(repo, files)
                return self._json({"commitOid": oid, "commitUrl": f"{PUBLIC}/{repo_id}/commit/{oid}",
                                   "pullRequestUrl": None})  # fmt: skip
        self._error(404, f"no route {path}")

    def do_PUT(self) -> None:
        path = urlsplit(self.path).path
        body = self._body()
        if path.startswith("/lfs-upload/"):
            oid = path.rsplit("/", 1)[1]
            if hashlib.sha256(body).hexdigest() != oid:
                return self._error(400, "content does not match its oid")
            with self.hub.lock:
                self.hub.lfs[oid] = body
            return self._send(200)
        self._error(404, f"no route {path}")

    def do_HEAD(self) -> None:
        self._get(head=True)

    def do_GET(self) -> None:
        self._get(head=False)

    def _get(self, head: bool) -> None:
        path = unquote(urlsplit(self.path).path)
        self.hub.requests.append(f"{'HEAD' if head else 'GET'} {path}")
        with self.hub.lock:
            if m := _RESOLVE.match(path):
                repo = self._repo(m.group(1), m.group(2))
                found = repo.tree(m.group(3)) if repo else None
                if found is None:
                    return self._error(404, "Revision not found")
                oid, tree = found
                name = m.group(4)
                if name not in tree:
                    return self._error(404, "Entry not found")
                content = tree[name]
                etag = f'"{hashlib.sha256(content).hexdigest()}"'
                headers = {
                    "X-Repo-Commit": oid,
                    "ETag": etag,
                    "Content-Type": "application/octet-stream",
                }
                if len(content) >= LFS_FROM:
                    headers |= {"X-Linked-Etag": etag, "X-Linked-Size": str(len(content))}
                return self._send(200, content, headers, head=head)
            m = _TYPED.match(path)
            if m is None or m.group(3) not in ("revision", "tree"):
                return self._error(404, f"no route {path}")
            repo = self._repo(m.group(1), m.group(2))
            found = repo.tree(m.group(4)) if repo else None
            if found is None:
                return self._error(404, "Repository or revision not found")
            oid, tree = found
            if m.group(3) == "revision":
                siblings = [
                    {"rfilename": name, "size": len(data)} for name, data in sorted(tree.items())
                ]
                return self._json(
                    {"id": m.group(2), "sha": oid, "siblings": siblings, "private": False}
                )
            prefix = (m.group(5) or "").strip("/")
            entries = [{"type": "file", "path": name, "size": len(data), "oid": hashlib.sha1(data).hexdigest()}
                       for name, data in sorted(tree.items())
                       if not prefix or name.startswith(prefix + "/")]  # fmt: skip
            return self._json(entries)
