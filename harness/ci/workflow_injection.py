"""What untrusted text or code a workflow lets reach a script, a token or a secret.

``kvbench ci lint`` flags, beside the ``${{ }}`` in ``run:`` that workflows.py finds:

* an ``actions/github-script`` script holding an expression of text someone outside
  writes (a comment, a title, a branch or commit author name, ...), directly or through
  an ``env.X`` whose value is such text: it would be pasted into JavaScript;
* such text written into ``$GITHUB_ENV`` or ``$GITHUB_OUTPUT`` by a script (through
  ``env:``): a newline in it sets any variable (``LD_PRELOAD``, ``NODE_OPTIONS``) or output
  of the steps after;
* a ``pull_request_target`` workflow that fetches the pull request's code: ``checkout``
  of its head or merge commit, ``gh pr checkout``, ``git fetch ... pull/N/head``. That
  job holds the base repository's secrets and a write token;
* a ``workflow_run`` workflow with a write token that downloads an artifact (which the
  triggering run, maybe a pull request's, wrote) and executes a file from it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator

# Event fields whose text comes from whoever opened the issue, pull request, comment or commit.
UNTRUSTED_RE = re.compile(
    r"github\.(?:head_ref|event\.(?:comment\.body|issue\.(?:title|body)|pull_request\.(?:title|body|head\.(?:ref|label)"
    r"|head\.repo\.(?:description|homepage|name|full_name|default_branch))|review\.body|review_comment\.body"
    r"|discussion\.(?:title|body)|discussion_comment\.body|head_commit\.(?:message|author\.\w+|committer\.\w+)"
    r"|commits|pages|workflow_run\.(?:head_branch|display_title|head_commit\.|head_repository\.)|inputs))")
EXPRESSION_RE = re.compile(r"\$\{\{(.*?)\}\}", re.S)
PR_CODE_RE = re.compile(r"github\.(?:event\.pull_request\.(?:head\.(?:sha|ref)|merge_commit_sha)|head_ref)"
                        r"|refs/pull/|pull_request\.head\.repo")
# Scripts that fetch a pull request's code: `gh pr checkout`, `git fetch origin pull/7/head`.
FETCH_PR_RE = re.compile(r"\bgh\s+pr\s+checkout\b|\bpull/[^\s/]+/(?:head|merge)\b")
GITHUB_FILES_RE = re.compile(r"\$\{?GITHUB_(?:ENV|OUTPUT)\b")
RUNNERS_RE = re.compile(r"^(?:bash|sh|zsh|python3?|node|perl|ruby|source|\.|exec|sudo)$")


def jobs(workflow: dict) -> Iterator[tuple[str, dict]]:
    """(id, job) of every job that is a mapping (workflows.check_all reports other shapes)."""
    table = workflow.get("jobs")
    for name, job in (table.items() if isinstance(table, dict) else ()):
        if isinstance(job, dict):
            yield str(name), job


def steps(job: dict) -> list[dict]:
    return [s for s in job.get("steps") or [] if isinstance(s, dict)] if isinstance(job.get("steps"), list) else []


def _env(*holders: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for holder in holders:
        env = holder.get("env") if isinstance(holder, dict) else None
        if isinstance(env, dict):
            out.update({str(k): str(v) for k, v in env.items()})
    return out


def _tainted(env: dict[str, str]) -> set[str]:
    """Names of the variables whose value holds outsider-written text."""
    return {k for k, v in env.items() if any(UNTRUSTED_RE.search(e) for e in EXPRESSION_RE.findall(v))}


def _writes(script: str, names: set[str]) -> str | None:
    """The first variable of ``names`` a line of ``script`` writes into $GITHUB_ENV / $GITHUB_OUTPUT."""
    for line in script.splitlines():
        if GITHUB_FILES_RE.search(line):
            for name in sorted(names):
                if re.search(rf"\$\{{?{re.escape(name)}\b", line):
                    return name
    return None


def _triggers(workflow: dict) -> set[str]:
    on = workflow.get("on")
    return {str(t) for t in on} if isinstance(on, (dict, list)) else {str(on)}


def _writes_token(*holders: Any) -> bool:
    """Whether the job's token may write: `write-all`, any `write` scope, or no
    `permissions:` at all (then the repository's default, which may be write)."""
    for holder in reversed(holders):  # the job's own permissions override the workflow's
        perms = holder.get("permissions", None) if isinstance(holder, dict) else None
        if perms is None:
            continue
        if isinstance(perms, str):
            return perms == "write-all"
        return isinstance(perms, dict) and any(str(v) == "write" for v in perms.values())
    return True


def _runs_from(script: str, dirs: list[str]) -> str | None:
    """The first command of ``script`` that executes a file under one of ``dirs``."""
    for line in script.splitlines():
        words = line.replace(";", " ; ").replace("&&", " ; ").split()
        for i, word in enumerate(words):
            command_position = i == 0 or words[i - 1] == ";" or RUNNERS_RE.match(words[i - 1])
            path = word.strip("'\"")
            # "." is the workspace itself (download-artifact's default): any ./file there.
            inside = any(path.removeprefix("./").startswith(d + "/") for d in dirs if d != ".") or (
                "." in dirs and path.startswith("./"))
            if command_position and inside:
                return line.strip()
    return None


def check(path: Path, workflow: dict) -> list[tuple[str, str]]:
    """(job, message) for each way untrusted text or code reaches a script, token or secret."""
    problems = []
    triggers = _triggers(workflow)
    for name, job in jobs(workflow):
        downloads: list[str] = []
        for step in steps(job):
            uses = str(step.get("uses", ""))
            with_ = step.get("with") if isinstance(step.get("with"), dict) else {}
            env = _env(workflow, job, step)
            tainted = _tainted(env)
            if uses.startswith("actions/github-script@"):
                for expr in EXPRESSION_RE.findall(str(with_.get("script", ""))):
                    via = [t for t in tainted if re.search(rf"\benv\.{re.escape(t)}\b", expr)]
                    if UNTRUSTED_RE.search(expr) or via:
                        problems.append((name, f"github-script pastes ${{{{{expr.strip()[:80]}}}}} into its script"
                                         + (f" (env {via[0]} is outsider-written text)" if via else "")
                                         + "; pass it through env: and read process.env"))
            script = str(step.get("run", "")) if "run" in step else ""
            var = _writes(script, tainted) if script else None
            if var:
                problems.append((name, f"a run: script writes ${var} (outsider-written text) into $GITHUB_ENV or "
                                       "$GITHUB_OUTPUT: a newline in it sets any variable or output after"))
            if "pull_request_target" in triggers:
                ref = f"{with_.get('ref', '')} {with_.get('repository', '')}" if uses.startswith("actions/checkout@") else ""
                if PR_CODE_RE.search(ref) or FETCH_PR_RE.search(script):
                    what = str(with_.get("ref", "")) if ref.strip() else FETCH_PR_RE.search(script).group(0)
                    problems.append((name, f"pull_request_target checks out the pull request's code ({what[:80]}): "
                                           "it would run with the base repository's secrets and token"))
            if "workflow_run" in triggers and _writes_token(workflow, job):
                if uses.startswith(("actions/download-artifact@", "dawidd6/action-download-artifact@")):
                    # Without a path, download-artifact unpacks into the workspace itself.
                    downloads.append(str(with_.get("path") or ".").removeprefix("./").rstrip("/") or ".")
                elif re.search(r"\bgh\s+run\s+download\b", script):
                    downloads += re.findall(r"(?:--dir|-D)\s+[\"']?([^\s\"']+)", script) or ["."]
                elif script and downloads and (hit := _runs_from(script, downloads)):
                    problems.append((name, f"workflow_run with a write token runs a downloaded artifact "
                                           f"({hit[:80]}): the triggering run, maybe a pull request's, wrote it"))
    return problems
