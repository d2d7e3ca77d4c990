"""Static checks of ci/workflows/*.yml that the GitHub workflow schema cannot make.

* every job's ``runs-on`` resolves, for every matrix entry and every choice of a
  dispatch input, to a runner of ci/runners.toml;
* every ``kvbench ...`` command a ``run:`` script runs parses with the real CLI parser;
* no ``run:`` script contains a ``${{ }}`` expression: values reach scripts through
  ``env:`` only, so no event text (a comment body, a branch name) is ever pasted into
  shell source (what else untrusted text or code may reach: workflow_injection.py);
* a ``runner`` choice input offers only labels of ci/runners.toml (or ``all``).
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness.ci import workflow_injection
from harness.ci.runners import Registry
from harness.ci.workflow_injection import jobs, steps
from harness.core.errors import HarnessError
from mini_engine.files import failure, read_document

EXPR_RE = re.compile(r"^\$\{\{(.*)\}\}$", re.S)
TOKEN_RE = re.compile(r"\s*(?:('[^']*')|(==|!=|&&|\|\||\(|\)|!)|([A-Za-z_][A-Za-z0-9_.-]*))")
VAR_RE = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
SHELL_OPS = {"|", "||", "&&", ";", ">", ">>", "<", "2>", "&", ")", "then", "do"}


class WorkflowError(HarnessError):
    """A workflow file cannot be read as YAML."""


@dataclass
class Problem:
    file: str
    job: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: job {self.job}: {self.message}"


def load(path: Path) -> dict:
    """A workflow file as a mapping; WorkflowError ``workflow '<name>': <reason>`` when
    it cannot be read (mini_engine.files.read_document) or is not a YAML mapping."""
    text = read_document(path, "workflow", WorkflowError, shown=path.name)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        # One line: PyYAML's own message quotes the offending lines.
        mark = getattr(err, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        what = " ".join(str(getattr(err, "problem", "") or "unreadable").split())[:120]
        raise failure(WorkflowError, "workflow", path.name, f"not valid YAML{where}: {what}") from None
    except RecursionError:
        raise failure(WorkflowError, "workflow", path.name, "nested too deeply to read") from None
    if not isinstance(data, dict):
        raise failure(WorkflowError, "workflow", path.name, "a workflow is a mapping")
    if True in data:  # YAML 1.1 reads the key `on` as a boolean
        data["on"] = data.pop(True)
    return data


# A tiny evaluator for the expressions runs-on uses: literals, context paths, ==, !=,
# !, &&, || with GitHub's semantics (&& and || return an operand, not a boolean).
def _tokens(expr: str) -> list[str]:
    out, pos, expr = [], 0, expr.strip()
    while pos < len(expr):
        m = TOKEN_RE.match(expr, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read expression at {expr[pos:pos + 20]!r}")
        out.append(m.group(m.lastindex))
        pos = m.end()
    return out


def evaluate(expr: str, context: dict[str, object]) -> object:
    toks = _tokens(expr)

    def value(tok: str) -> object:
        if tok.startswith("'"):
            return tok[1:-1]
        if tok in ("true", "false"):
            return tok == "true"
        if tok not in context:
            raise ValueError(f"unknown context value {tok}")
        return context[tok]

    def primary(i: int) -> tuple[object, int]:
        if toks[i] == "!":
            v, i = primary(i + 1)
            return not v, i
        if toks[i] == "(":
            v, i = disjunction(i + 1)
            return v, i + 1
        return value(toks[i]), i + 1

    def comparison(i: int) -> tuple[object, int]:
        left, i = primary(i)
        while i < len(toks) and toks[i] in ("==", "!="):
            right, j = primary(i + 1)
            left, i = (left == right) if toks[i] == "==" else (left != right), j
        return left, i

    def conjunction(i: int) -> tuple[object, int]:
        left, i = comparison(i)
        while i < len(toks) and toks[i] == "&&":
            right, i = comparison(i + 1)
            left = left and right
        return left, i

    def disjunction(i: int) -> tuple[object, int]:
        left, i = conjunction(i)
        while i < len(toks) and toks[i] == "||":
            right, i = conjunction(i + 1)
            left = left or right
        return left, i

    result, end = disjunction(0)
    if end != len(toks):
        raise ValueError(f"trailing tokens in expression: {' '.join(toks[end:])}")
    return result


def _contexts(workflow: dict, job: dict) -> list[dict[str, object]]:
    """Every assignment of the matrix and choice inputs runs-on may see."""
    axes: dict[str, list[object]] = {}
    on = workflow.get("on") or {}
    dispatch = on.get("workflow_dispatch") if isinstance(on, dict) else None
    inputs = dispatch.get("inputs") if isinstance(dispatch, dict) else None
    for name, spec in (inputs.items() if isinstance(inputs, dict) else ()):
        if isinstance(spec, dict) and spec.get("type") == "choice":
            axes[f"inputs.{name}"] = list(spec.get("options") or [])
    matrix = ((job.get("strategy") or {}).get("matrix")) or {}
    combos: list[dict[str, object]] = [{}]
    if isinstance(matrix, dict):
        base = {k: v for k, v in matrix.items() if k not in ("include", "exclude") and isinstance(v, list)}
        keys = list(base)
        combos = [dict(zip((f"matrix.{k}" for k in keys), vals)) for vals in itertools.product(*base.values())]
        for inc in matrix.get("include") or []:
            combos.append({f"matrix.{k}": v for k, v in inc.items()})
        combos = [c for c in combos if c] or [{}]
    names = list(axes)
    return [dict(c, **dict(zip(names, vals))) for c in combos for vals in itertools.product(*axes.values())]


def check_runs_on(path: Path, workflow: dict, registry: Registry) -> list[Problem]:
    known = {r.runs_on for r in registry.runners.values()}
    problems = []
    for name, job in jobs(workflow):
        runs_on = job.get("runs-on")
        if not isinstance(runs_on, str):
            problems.append(Problem(path.name, name, f"runs-on must be one label (got {runs_on!r})"))
            continue
        m = EXPR_RE.match(runs_on.strip())
        for ctx in _contexts(workflow, job):
            try:
                label = evaluate(m.group(1), ctx) if m else runs_on
            except ValueError as err:
                problems.append(Problem(path.name, name, f"runs-on {runs_on!r}: {err}"))
                break
            if label not in known:
                problems.append(Problem(path.name, name, f"runs-on resolves to {label!r}, not a runs_on of ci/runners.toml"))
            for key in ("inputs.runner", "matrix.runner"):
                # When runs-on follows a runner label passed in, it must be that label's machine.
                if not m or key not in m.group(1):
                    continue
                if key in ctx and ctx[key] in registry.runners and label != registry.runners[ctx[key]].runs_on:
                    problems.append(Problem(path.name, name, f"{key}={ctx[key]} runs on {label!r}, "
                                            f"ci/runners.toml says {registry.runners[ctx[key]].runs_on!r}"))
                elif key in ctx and ctx[key] not in registry.runners:
                    problems.append(Problem(path.name, name, f"{key}={ctx[key]!r} is not a label of ci/runners.toml"))
            if "matrix.profile" in ctx and "matrix.runner" in ctx and ctx["matrix.runner"] in registry.runners:
                want = registry.runners[ctx["matrix.runner"]].profile
                if ctx["matrix.profile"] != want:
                    problems.append(Problem(path.name, name, f"matrix profile {ctx['matrix.profile']!r} for "
                                            f"{ctx['matrix.runner']} but ci/runners.toml says {want!r}"))
    # Contexts that differ only in values runs-on ignores repeat a problem: report it once.
    return list({str(p): p for p in problems}.values())


def scripts(workflow: dict) -> list[tuple[str, str]]:
    """(job, run script) for every step with a run: key."""
    out = []
    for name, job in jobs(workflow):
        for step in steps(job):
            if "run" in step:
                out.append((name, str(step["run"])))
    return out


def kvbench_commands(script: str) -> list[list[str]]:
    """argv of each `kvbench ...` invocation in a shell script (continuations joined)."""
    joined = re.sub(r"\\\n", " ", script)
    found = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0]
        if "kvbench" not in line:
            continue
        lexer = shlex.shlex(line.replace("$(", " ( "), posix=True, punctuation_chars=";&|<>()")
        lexer.whitespace_split = True
        try:
            words = list(lexer)
        except ValueError:
            continue
        for i, word in enumerate(words):
            if word == "kvbench":
                argv = list(itertools.takewhile(lambda w: w not in SHELL_OPS, words[i + 1:]))
                found.append(argv)
    return found


def check_scripts(path: Path, workflow: dict, parse) -> list[Problem]:
    """``parse(argv)`` raises SystemExit if the CLI rejects argv."""
    problems = []
    for job, script in scripts(workflow):
        if "${{" in script:
            problems.append(Problem(path.name, job, "a run: script contains ${{ }}; pass values through env:"))
        for argv in kvbench_commands(script):
            try:
                # Shell variables are filled at run time; "1" parses as any string or int.
                parse([VAR_RE.sub("1", word) for word in argv])
            except SystemExit:
                problems.append(Problem(path.name, job, f"`kvbench {shlex.join(argv)}` is not a valid kvbench command"))
    return problems


def check_runner_inputs(path: Path, workflow: dict, registry: Registry) -> list[Problem]:
    on = workflow.get("on") if isinstance(workflow.get("on"), dict) else {}
    inputs = ((on.get("workflow_dispatch") or {}).get("inputs") or {}) if isinstance(on, dict) else {}
    spec = inputs.get("runner") if isinstance(inputs, dict) else None
    if not isinstance(spec, dict) or spec.get("type") != "choice":
        return []
    bad = [o for o in spec.get("options") or [] if o != "all" and o not in registry.runners]
    return [Problem(path.name, "-", f"input runner offers {o!r}, not a label of ci/runners.toml") for o in bad]


def check_all(root: Path, registry: Registry, parse) -> list[Problem]:
    problems: list[Problem] = []
    folder = root / "ci" / "workflows"
    # GitHub runs both spellings; a check that read only *.yml would pass any *.yaml.
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yml", ".yaml")) if folder.is_dir() else []
    if not files:
        return [Problem("ci/workflows", "-", "no workflow files")]
    for path in files:
        try:
            workflow = load(path)
        except WorkflowError as err:
            # The file is the problem's own: its reason alone, as the lint's other lines.
            problems.append(Problem(path.name, "-", str(err).removeprefix(f"workflow {path.name!r}: ")))
            continue
        if not isinstance(workflow.get("jobs"), dict) or not all(isinstance(j, dict) for j in workflow["jobs"].values()):
            problems.append(Problem(path.name, "-", "jobs: must be a mapping of job ids to jobs"))
            continue
        problems += check_runs_on(path, workflow, registry)
        problems += check_scripts(path, workflow, parse)
        problems += [Problem(path.name, job, msg) for job, msg in workflow_injection.check(path, workflow)]
        problems += check_runner_inputs(path, workflow, registry)
    return problems
