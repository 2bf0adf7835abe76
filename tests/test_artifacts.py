"""push_to_hub / load_masks(repo_id) against huggingface_hub's real HTTP layer, served by an in-process mock Hub.

huggingface_hub routes every request through one shared httpx client made by a swappable factory
(`huggingface_hub.set_client_factory`); the fixture installs a client whose transport is an `httpx.MockTransport`
(`httpx2` is the package huggingface_hub uses here) and restores the previous factory afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field

import pytest
import torch
from safetensors.torch import load as load_safetensors_bytes

import huggingface_hub
from huggingface_hub import constants
from huggingface_hub.utils import _http as hf_http

from hf_heuristic_core import ArtifactError, PrunableModel, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, LAYERS, logits_of, make_batch, tiny_model

try:  # huggingface_hub >= 1.x on this setup ships the httpx fork "httpx2"; older 1.x uses httpx itself
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOKEN = "hf_test_token_123"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
ARTIFACT_FILES = {"pruning_config.json", "masks.safetensors", "README.md"}


@dataclass
class MockHub:
    """A minimal Hub: repo creation, YAML validation, preupload, ndjson commits, LFS-less downloads."""

    repos: dict[str, dict[str, bytes]] = field(default_factory=dict)
    requests: list = field(default_factory=list)
    commits: list[dict] = field(default_factory=list)

    def handle(self, request):
        self.requests.append(request)
        path = request.url.path
        if path == "/api/repos/create" and request.method == "POST":
            body = json.loads(request.content)
            repo_id = f"{body['organization']}/{body['name']}" if body.get("organization") else body["name"]
            self.repos.setdefault(repo_id, {})
            return httpx.Response(200, json={"url": f"https://huggingface.co/{repo_id}", "name": repo_id})
        if path == "/api/validate-yaml":
            return httpx.Response(200, json={"errors": [], "warnings": []})
        if path.startswith("/api/models/") and "/preupload/" in path:
            body = json.loads(request.content)
            return httpx.Response(200, json={"files": [
                {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in body["files"]]})
        if path.startswith("/api/models/") and "/commit/" in path:
            repo_id, revision = path[len("/api/models/"):].split("/commit/")
            lines = [json.loads(line) for line in request.content.decode().splitlines() if line.strip()]
            commit = {"repo_id": repo_id, "revision": revision, "lines": lines, "files": {},
                      "authorization": request.headers.get("authorization")}
            for line in lines:
                if line["key"] == "file":
                    assert line["value"]["encoding"] == "base64"
                    commit["files"][line["value"]["path"]] = base64.b64decode(line["value"]["content"])
                elif line["key"] != "header":
                    raise AssertionError(f"unexpected commit operation {line['key']}")
            self.commits.append(commit)
            self.repos.setdefault(repo_id, {}).update(commit["files"])
            return httpx.Response(200, json={"commitUrl": f"https://huggingface.co/{repo_id}/commit/{COMMIT}",
                                             "commitOid": COMMIT, "pullRequestUrl": None})
        if "/resolve/" in path:
            repo_id, rest = path.lstrip("/").split("/resolve/")
            filename = rest.split("/", 1)[1]
            if repo_id not in self.repos:
                return httpx.Response(401, headers={"X-Error-Code": "RepoNotFound"},
                                      json={"error": "Repository not found"})
            files = self.repos[repo_id]
            if filename not in files:
                return httpx.Response(404, headers={"X-Error-Code": "EntryNotFound", "X-Repo-Commit": COMMIT},
                                      json={"error": "Entry not found"})
            data = files[filename]
            headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                       "Content-Length": str(len(data))}
            return httpx.Response(200, headers=headers, content=data if request.method == "GET" else b"")
        return httpx.Response(404, json={"error": f"mock hub: no route for {request.method} {path}"})

    def paths(self) -> list[str]:
        return [f"{r.method} {r.url.path}" for r in self.requests]


@pytest.fixture
def hub(monkeypatch, tmp_path):
    mock = MockHub()
    previous = hf_http._GLOBAL_CLIENT_FACTORY
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    if hasattr(constants, "AGENT_HARNESSES_PATH"):
        monkeypatch.setattr(constants, "AGENT_HARNESSES_PATH", str(tmp_path / "agent_harnesses.json"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    huggingface_hub.set_client_factory(
        lambda: httpx.Client(transport=httpx.MockTransport(mock.handle), follow_redirects=True))
    try:
        yield mock
    finally:
        huggingface_hub.set_client_factory(previous)
        assert hf_http._GLOBAL_CLIENT_FACTORY is previous and hf_http._GLOBAL_CLIENT is None


def _pruned_model(model_type="bert"):
    pm = PrunableModel(tiny_model(model_type), PruningConfig())
    pm.compute_means([make_batch(model_type)], show_progress=False)
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 2] = heads[1, 0] = 0
    pm.set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
    with torch.no_grad():
        pm.mask_logits.heads.copy_(torch.linspace(-2, 3, LAYERS * HEADS).view(LAYERS, HEADS))
    return pm.eval()


def test_push_to_hub_commits_exactly_the_artifact(hub, tmp_path):
    pm = _pruned_model()
    info = pm.push_to_hub("me/bert-masks", token=TOKEN)
    assert info.oid == COMMIT

    assert "POST /api/repos/create" in hub.paths()
    create = next(r for r in hub.requests if r.url.path == "/api/repos/create")
    assert json.loads(create.content)["name"] in ("bert-masks", "me/bert-masks")
    assert create.headers.get("authorization") == f"Bearer {TOKEN}"
    assert len(hub.commits) == 1
    commit = hub.commits[0]
    assert commit["repo_id"] == "me/bert-masks" and commit["revision"] == "main"
    assert commit["authorization"] == f"Bearer {TOKEN}"
    assert commit["lines"][0]["key"] == "header"
    assert commit["lines"][0]["value"]["summary"] == "Upload pruning masks"
    assert set(commit["files"]) == ARTIFACT_FILES

    # Contents equal a local save of the same model, file by file.
    pm.save_pretrained(tmp_path / "local")
    for name in ("pruning_config.json", "README.md"):
        assert commit["files"][name] == (tmp_path / "local" / name).read_bytes()
    pushed = load_safetensors_bytes(commit["files"]["masks.safetensors"])
    local = load_safetensors_bytes((tmp_path / "local" / "masks.safetensors").read_bytes())
    assert set(pushed) == set(local)
    for key in local:
        assert torch.equal(pushed[key], local[key])
    assert torch.equal(pushed["mask.heads"], pm.get_masks()["heads"])
    assert torch.equal(pushed["means.heads"], pm.get_means()["heads"])
    config = json.loads(commit["files"]["pruning_config.json"])
    assert (config["model_type"], config["num_layers"], config["num_heads"]) == ("bert", LAYERS, HEADS)
    assert sum(len(v) for v in commit["files"].values()) < 32 * 1024  # kilobytes, never weights


def test_push_to_hub_commit_message_and_revision(hub):
    pm = _pruned_model()
    pm.push_to_hub("me/masks", token=TOKEN, commit_message="seed 3 masks", revision="seed-3")
    commit = hub.commits[-1]
    assert commit["revision"] == "seed-3"
    assert commit["lines"][0]["value"]["summary"] == "seed 3 masks"


def test_load_masks_from_repo_id_round_trip(hub, tmp_path):
    pm = _pruned_model()
    batch = make_batch("bert", seed=4)
    expected = logits_of(pm, batch)
    pm.push_to_hub("me/bert-masks", token=TOKEN)

    fresh = PrunableModel(tiny_model("bert"))
    fresh.load_masks("me/bert-masks", cache_dir=str(tmp_path / "cache"))
    fresh.eval()
    downloads = [r.url.path for r in hub.requests if "/resolve/" in r.url.path]
    assert any(p.endswith("/pruning_config.json") for p in downloads)
    assert any(p.endswith("/masks.safetensors") for p in downloads)
    assert torch.equal(fresh.get_masks()["heads"], pm.get_masks()["heads"])
    assert torch.equal(fresh.mask_logits.heads, pm.mask_logits.heads)
    assert torch.equal(fresh.get_means()["heads"], pm.get_means()["heads"])
    assert torch.equal(logits_of(fresh, batch), expected)


def test_repo_without_pruning_config_raises(hub, tmp_path):
    hub.repos["someone/plain-model"] = {"config.json": b"{}", "README.md": b"# a model"}
    pm = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    with pytest.raises(ArtifactError, match="has no pruning_config.json"):
        pm.load_masks("someone/plain-model", cache_dir=str(tmp_path / "cache"))
    assert any(r.url.path == "/someone/plain-model/resolve/main/pruning_config.json" for r in hub.requests)
    assert pm.mask_state.fixed.get("heads") is None


def test_missing_repo_raises_artifact_error(hub, tmp_path):
    pm = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    with pytest.raises(ArtifactError, match="someone/nothing"):
        pm.load_masks("someone/nothing", cache_dir=str(tmp_path / "cache"))


def test_repo_with_masks_for_another_model_raises(hub, tmp_path):
    _pruned_model("bert").push_to_hub("me/bert-masks", token=TOKEN)
    gpt2 = PrunableModel(tiny_model("gpt2"), PruningConfig(ablation="zero"))
    with pytest.raises(ArtifactError, match="model_type"):
        gpt2.load_masks("me/bert-masks", cache_dir=str(tmp_path / "cache"))
