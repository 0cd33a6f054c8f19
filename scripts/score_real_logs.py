#!/usr/bin/env python3
"""Scores `specdeck replay --json` against a real-logs manifest.json.

    python3 scripts/score_real_logs.py target/debug/specdeck testdata/real-logs

final: over every file; phase: over files whose manifest phase is not null (`runtime` = our
`serving`); finding: over files whose manifest names a finding (that id among ours), and, for the
rest, that no error finding other than `unrecognized-failure` is given (no confident wrong fix).
"""
import json, subprocess, sys, os

bin_, d = sys.argv[1], sys.argv[2]
m = json.load(open(os.path.join(d, "manifest.json")))
ok = {"final": [0, 0], "phase": [0, 0], "finding": [0, 0], "no_wrong_fix": [0, 0]}
for name, want in sorted(m.items()):
    out = subprocess.run([bin_, "replay", "--json", os.path.join(d, name)], capture_output=True, text=True).stdout
    r = json.loads(out)
    final = r["final"]
    spans = r["phases"]
    failed = [s["phase"] for s in spans if s["state"] == "failed"]
    errs = [f for f in r["findings"] if f["severity"] == "error"]
    if final == "failed":
        phase = failed[-1] if failed else (errs[0]["phase"] if errs else None)
    else:
        phase = spans[-1]["phase"] if spans else None
    ids = [f["id"] for f in r["findings"]]
    wphase = {"runtime": "serving"}.get(want["phase"], want["phase"])
    marks = []
    ok["final"][1] += 1
    if final == want["final"]:
        ok["final"][0] += 1
    else:
        marks.append(f"final {final}!={want['final']}")
    if want["phase"] is not None:
        ok["phase"][1] += 1
        if phase == wphase:
            ok["phase"][0] += 1
        else:
            marks.append(f"phase {phase}!={wphase}")
    if want["finding"] is not None:
        ok["finding"][1] += 1
        if want["finding"] in ids:
            ok["finding"][0] += 1
        else:
            marks.append(f"finding {ids} lacks {want['finding']}")
    else:
        ok["no_wrong_fix"][1] += 1
        wrong = [f["id"] for f in errs if f["id"] != "unrecognized-failure"]
        if not wrong:
            ok["no_wrong_fix"][0] += 1
        else:
            marks.append(f"confident {wrong} where the log shows no cause")
    print(("OK  " if not marks else "BAD ") + name, "; ".join(marks), f"[{final} {phase} {ids}]")
for k, (a, b) in ok.items():
    print(f"{k}: {a}/{b}")
