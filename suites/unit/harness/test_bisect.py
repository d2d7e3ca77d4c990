"""kvbench bisect: the search over recorded rows, and one real run over a throwaway git repository."""

from __future__ import annotations

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from harness.judge import bisect

REPO = Path(__file__).resolve().parents[3]
ROW = {"key": "k", "status": "ok", "violations": {},
       "metrics": {"steps": 40, "peak_pages_held": 118, "leaked_pages": 0, "wall_s": 0.5,
                   "output_tokens_per_s": 1000.0}}


def recorded(n: int, first_bad: int, skips: set[int] = frozenset(), change=None):
    """n commits c0..c{n-1} after the good one; from ``first_bad`` on, the row has moved."""
    commits = [f"{i:040x}" for i in range(1, n + 1)]
    good = "0" * 40
    rows = {good: copy.deepcopy(ROW)}
    for i, c in enumerate(commits):
        row = copy.deepcopy(ROW)
        if i >= first_bad:
            (change or (lambda r: r["metrics"].__setitem__("peak_pages_held", 119)))(row)
        rows[c] = None if i in skips else row
    calls = []

    def evaluate(commit):
        calls.append(commit)
        return rows[commit]

    return commits, good, evaluate, calls


@given(st.integers(1, 64), st.data())
def test_names_the_first_bad_commit_in_log_steps(n, data):
    k = data.draw(st.integers(0, n - 1))
    commits, good, evaluate, calls = recorded(n, k)
    result = bisect.bisect(commits, good, evaluate)
    assert result.first_bad == commits[k]
    assert len(calls) <= 2 + max(1, (n - 1).bit_length())  # good, bad, then a binary search


@given(st.integers(2, 40), st.data())
def test_skipped_commits_narrow_to_a_range_holding_the_answer(n, data):
    k = data.draw(st.integers(0, n - 1))
    skips = set(data.draw(st.lists(st.integers(0, n - 2), max_size=n)))
    commits, good, evaluate, _ = recorded(n, k, skips)
    result = bisect.bisect(commits, good, evaluate)
    if result.first_bad is not None:
        assert result.first_bad == commits[k]
    else:
        # The skipped commits before the first commit known bad, and that one.
        idx = [commits.index(c) for c in result.suspects]
        assert commits[k] in result.suspects and idx == list(range(idx[0], idx[-1] + 1))
        assert all(i in skips for i in idx[:-1]) and idx[-1] not in skips and idx[-1] >= k


def test_counters_decide_exactly_and_timings_by_significance():
    def slower(samples):
        def change(row):
            row["metrics"]["wall_s"] = sorted(samples)[len(samples) // 2]
            row["samples"] = {"wall_s": samples}
        return change

    # One sample each side: a timing change alone is never called bad (the rule needs samples).
    commits, good, evaluate, _ = recorded(6, 3, change=slower([5.0]))
    with pytest.raises(bisect.BisectError, match="is good against --good"):
        bisect.bisect(commits, good, evaluate)
    # Repeated samples 30% slower against repeated samples of the good commit: bad from commit 3.
    commits, good, evaluate, _ = recorded(6, 3, change=slower([0.65, 0.66, 0.67, 0.68, 0.69]))

    def with_samples(commit):
        row = evaluate(commit)
        if row is not None and "samples" not in row:
            row["samples"] = {"wall_s": [0.50, 0.501, 0.502, 0.503, 0.504]}
        return row

    result = bisect.bisect(commits, good, with_samples)
    assert result.first_bad == commits[3]
    assert "wall_s" in result.steps[0].reason
    # --metric: a counter move elsewhere does not count when only wall_s is judged.
    commits, good, evaluate, _ = recorded(6, 2)
    with pytest.raises(bisect.BisectError, match="nothing to bisect"):
        bisect.bisect(commits, good, evaluate, metrics=["wall_s"])


def test_a_good_commit_that_cannot_run_is_an_error():
    commits, good, evaluate, _ = recorded(4, 1)
    with pytest.raises(bisect.BisectError, match="does not run at --good"):
        bisect.bisect(commits, good, lambda c: None if c == good else evaluate(c))


def test_to_toml_round_trips():
    import tomllib

    cfg = {"spec": "dflash", "page_size": 16, "window": None, "pd_fraction": 1.0, "chunked": True,
           "layer_pattern": "3:1"}
    assert tomllib.loads(bisect.to_toml(cfg)) == {k: v for k, v in cfg.items() if v is not None}


def test_merge_repeats_gives_samples_to_timings_only():
    rows = [copy.deepcopy(ROW) for _ in range(3)]
    for i, r in enumerate(rows):
        r["metrics"]["wall_s"] = 0.5 + i
    from harness.judge.repeats import merge_repeats  # bisect merges its repeats as the sweep does

    merged = merge_repeats(rows)
    assert merged["samples"]["wall_s"] == [0.5, 1.5, 2.5] and merged["metrics"]["wall_s"] == 1.5
    assert "steps" not in merged["samples"] and merged["metrics"]["steps"] == 40


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def throwaway(tmp_path_factory):
    """A git repository of this project's tree and four commits after it; the third
    plants a bug (DFLASH reserves three draft blocks instead of two)."""
    repo = tmp_path_factory.mktemp("bisect") / "repo"
    repo.mkdir()
    tar = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(repo)], input=tar, check=True)
    for name in ("harness", "mini_engine"):  # this checkout's code, committed or not
        shutil.rmtree(repo / name)
        shutil.copytree(REPO / name, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
    _git(repo, "init", "-q")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    commits = []

    def commit(msg):
        _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-am", msg)
        commits.append(_git(repo, "rev-parse", "HEAD"))

    commit("base")
    (repo / "NOTES").write_text("one\n")
    _git(repo, "add", "NOTES")
    commit("docs: notes")
    sizing = repo / "mini_engine" / "memory" / "sizing.py"
    text = sizing.read_text()
    assert "return 2 * check_positive(\"block_size\"" in text
    sizing.write_text(text.replace("return 2 * check_positive(\"block_size\"", "return 3 * check_positive(\"block_size\""))
    commit("sizing: three draft blocks")
    (repo / "NOTES").write_text("two\n")
    commit("docs: more notes")
    return repo, commits


@pytest.mark.slow
def test_bisect_a_real_repository(throwaway, tmp_path, cli, capsys):
    repo, commits = throwaway
    cfg = tmp_path / "one.toml"
    cfg.write_text(bisect.to_toml({"spec": "dflash", "block_size": 16, "page_size": 16, "num_requests": 4,
                                   "input_len": 64, "output_len": 24, "pool_tokens": 4096}))
    summary = tmp_path / "summary.md"
    assert cli("bisect", "--repo", repo, "--good", commits[0], "--bad", commits[-1], "--config", cfg,
               "--summary", summary) == 0
    out = capsys.readouterr().out
    assert f"first bad commit: {commits[2]} sizing: three draft blocks" in out
    assert "peak_reserved_slots" in out
    assert f"`{commits[2][:12]}` | bad |" in summary.read_text()
    assert _git(repo, "worktree", "list").count("\n") == 0  # every temporary worktree is gone


def test_bad_input_is_one_line(throwaway, cli, capsys):
    repo, commits = throwaway
    cases = [
        (["--good=--upload-pack=x", "--bad", commits[-1], "--config", "x"], "--good must be a commit id"),
        (["--good", "nope", "--bad", commits[-1], "--config", "x"], "--good 'nope' is not a commit"),
        (["--good", commits[-1], "--bad", commits[0], "--config", "spec:dflash-bs:16-profile:sglang-0.5.23-ps:1-window:none"],
         "is not an ancestor of --bad"),
        (["--good", commits[0], "--bad", commits[-1], "--config", "no-such-id"], "is not a test id of any suite"),
        (["--good", commits[0], "--bad", commits[-1], "--config", "x", "--repeat", "0"], "--repeat must be"),
    ]
    for argv, message in cases:
        assert cli("bisect", "--repo", repo, *argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
    with pytest.raises(bisect.BisectError, match="same commit"):
        bisect.candidates(repo, commits[0], commits[0])
