"""Rescore the saved responses with an old and the new judge, and list the rows whose score changed (issue 59,
"Done when": rescoring the saved demo outputs changes only the rows the new rules are for).

    python tests/tools/rescore_saved.py --old eed0543 [--new WORKTREE]

The saved responses: the real SmolLM2 outputs (``tests/data/smollm2_short_text_outputs.jsonl``, short_text;
``tests/data/smollm2_nq_swap_outputs.jsonl``, open_answer) and the judge's adversarial tables
(``tests/data/short_text_*.jsonl``). The old judge is the ``eval_hooks`` and ``selectrust`` of git revision
``--old``, extracted to a temporary folder; each judge scores every row in its own process
(``get_family("mist").score_row``). Prints one line per changed row: table, id, response, old and new
``(parsed, correct, answer_status)``; exit 0."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
TABLES = ("smollm2_short_text_outputs.jsonl", "smollm2_nq_swap_outputs.jsonl", "short_text_adversarial.jsonl",
          "short_text_adversarial_v2.jsonl", "short_text_claims.jsonl")

SCORER = r'''
import json, sys
from eval_hooks.families import get_family
mist = get_family("mist")
for line in sys.stdin:
    job = json.loads(line)
    out = mist.score_row(job["row"], job["response"])
    print(json.dumps([job["key"], out["parsed"], bool(out["correct"]), out["answer_status"],
                      bool(out.get("fuzzy_match"))]))
'''


def _row(table: str, r: dict) -> dict:
    if "nq_swap" in table:
        return {**r, "item_id": r["row_id"], "answer_type": "open_answer"}
    row = {"row_id": r["id"], "item_id": r["id"], "condition": r.get("condition", "clean"),
           "answer_type": "short_text", "gold": r["gold"], "wrong_value": r["wrong_value"]}
    for k in ("gold_aliases", "relation", "subject", "question"):
        if r.get(k) is not None:
            row[k] = r[k]
    return row


def jobs() -> list[dict]:
    out = []
    for table in TABLES:
        for r in (json.loads(x) for x in (DATA / table).read_text(encoding="utf-8").splitlines() if x.strip()):
            key = [table, r.get("id") or r.get("row_id")]
            out.append({"key": key, "row": _row(table, r), "response": r["response"]})
    return out


def score(pythonpath: Path, work: list[dict]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(pythonpath)}
    p = subprocess.run([sys.executable, "-c", SCORER], input="".join(json.dumps(j) + "\n" for j in work),
                       capture_output=True, text=True, env=env, cwd=pythonpath, check=True)
    return {tuple(v[0]): v[1:] for v in map(json.loads, p.stdout.splitlines())}


def extract(rev: str, into: Path) -> Path:
    blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "eval_hooks", "selectrust"], capture_output=True,
                          check=True).stdout
    with tarfile.open(fileobj=BytesIO(blob)) as t:
        t.extractall(into)
    return into


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="git revision of the old judge")
    ap.add_argument("--new", type=Path, default=ROOT, help="the tree of the new judge (default: this one)")
    args = ap.parse_args(argv)
    work = jobs()
    with tempfile.TemporaryDirectory() as tmp:
        old = score(extract(args.old, Path(tmp)), work)
    new = score(args.new, work)
    changed = [(k, j["response"], old[k], new[k]) for j in work for k in [tuple(j["key"])] if old[k][:3] != new[k][:3]]
    print(f"{len(work)} saved rows rescored; {len(changed)} changed (old judge {args.old}, new judge {args.new})")
    for (table, rid), response, o, n in changed:
        print(f"- {table} {rid}: {response!r}: old {tuple(o[:3])} -> new {tuple(n[:3])}"
              + (" fuzzy_match" if n[3] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
