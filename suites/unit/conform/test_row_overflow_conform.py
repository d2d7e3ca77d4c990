"""The row overflow of SGLang issue 33579 in kvbench conform.

DFLASH block 16 at ps 1: rows are max_context + 4 + 16 = 180 wide (allocation_sizing's
headroom at ps 1), the reservation is 2 blocks = 32. A request at committed 150 gets
SGLang's nxt = 150 + 32 = 182, past its row. Under sglang-0.5.23 kvbench plans the
same nxt (it writes past the row, memory.overflow) and reports K4: conform finds no
cut and no divergence. A profile that cuts (row_overflow off, a kvbench design) still
has its cuts counted as row overflows, not divergences; at ps 16 rows have room. A
plan that does not match SGLang (a planted off-by-one) still diverges.
"""

from __future__ import annotations

import json

from harness.cli import main

RUN = ["run", "--spec", "dflash", "--block-size", "16", "--max-context", "160", "--input-len", "60",
       "--output-len", "100", "--workload", "fixed", "--num-requests", "2"]


def _record(tmp_path, capsys, ps: str):
    path = tmp_path / f"ps{ps}.jsonl"
    main([*RUN, "--page-size", ps, "--trace", str(path)])  # exit 1: K4 is a violation, data here
    capsys.readouterr()
    return path


def test_row_overflow_plans_sglangs_nxt(sg, tmp_path, capsys):
    path = _record(tmp_path, capsys, "1")
    head, *recs = map(json.loads, path.read_text().splitlines())
    assert head["row_width"] == 180 and head["profile"]["row_overflow"] is True
    past = sorted({(r["committed"], r["nxt"]) for rec in recs if rec["op"] == "prepare" for r in rec["reqs"]
                   if r["nxt"] > 180})
    assert past and all(nxt == c + 32 for c, nxt in past)  # SGLang's nxt, uncut
    rc = main(["conform", str(path)])
    out = capsys.readouterr().out
    assert rc == 0 and "cut at the row" not in out, out
    assert main(["replay", str(path)]) == 0 and " 0 divergences" in capsys.readouterr().out


def test_a_cut_row_is_counted_not_diverged(sg, tmp_path, capsys):
    path = tmp_path / "cut.jsonl"
    main([*RUN, "--page-size", "1", "--trace", str(path), "--profile", "floor-free", "--align", "dflash"])
    capsys.readouterr()
    head, *recs = map(json.loads, path.read_text().splitlines())
    assert head["profile"]["row_overflow"] is False
    cut = [r for rec in recs if rec["op"] == "prepare" for r in rec["reqs"] if r["nxt"] == 180 < r["committed"] + 32]
    assert cut
    rc = main(["conform", str(path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"; {len(cut)} cut at the row: K4, SGLang writes past it)" in out
    assert main(["replay", str(path)]) == 0 and " 0 divergences" in capsys.readouterr().out


def test_no_row_overflow_at_page_size_16(sg, tmp_path, capsys):
    path = _record(tmp_path, capsys, "16")
    rc = main(["conform", str(path)])
    out = capsys.readouterr().out
    assert rc == 0 and "cut at the row" not in out, out


def test_a_cut_below_the_row_still_diverges(sg, tmp_path, capsys):
    path = _record(tmp_path, capsys, "1")
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec.get("op") == "prepare" and rec["reqs"][0]["nxt"] < 170:
            rec["reqs"][0]["nxt"] -= 1
            lines[i] = json.dumps(rec)
            break
    path.write_text("\n".join(lines) + "\n")
    assert main(["conform", str(path)]) == 1
    assert "diverges" in capsys.readouterr().out
