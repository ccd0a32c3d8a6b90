"""The score table: per operator and per category, for `run` and for `lint`, and the false alarms."""

from __future__ import annotations

from collections import defaultdict


def _pct(a, b):
    return f"{100 * a / b:5.1f}%" if b else "    - "


def summary(rows):
    """Per operator: mutants, run right (and its parts), lint right."""
    by = defaultdict(list)
    for r in rows:
        by[r["operator"]].append(r)
    out = {}
    for op, rs in sorted(by.items()):
        n = len(rs)
        out[op] = {
            "category": rs[0]["category"],
            "n": n,
            "third_party": sum(r["third_party"] for r in rs),
            "flagged": sum(r["run"]["flagged"] for r in rs),
            "run_category": sum(r["run"]["category"] for r in rs),
            "run_params": sum(r["run"]["category"] and r["run"]["params"] for r in rs),
            "run_line": sum(r["run"]["category"] and r["run"]["line"] for r in rs),
            "run_right": sum(r["run"]["right"] for r in rs),
            "lint_right": sum(r["lint"]["right"] for r in rs),
            "static": rs[0]["static"],
        }
    return out


def render(result, misses=3):
    rows = result["rows"]
    s = summary(rows)
    lines = []
    c = result["counts"]
    third = sum(r["third_party"] for r in rows)
    lines.append(
        f"mutation corpus: {len(rows)} valid mutants scored ({third} in third-party code) over "
        f"{result['originals']} originals from {len(result['packages'])} packages "
        f"({', '.join(result['packages'])}); {c['equivalent']} equivalent and {c['broken']} broken dropped; "
        f"{result['seconds']} s"
    )
    lines.append("")
    cols = ("flagged", "categ", "params", "line", "RUN", "LINT")
    hdr = f"{'operator':<26}{'category':<20}{'n':>4} " + " ".join(f"{c:>7}" for c in cols)
    lines.append(hdr)
    lines.append("-" * len(hdr))
    tot = defaultdict(int)
    for op, r in s.items():
        n = r["n"]
        lint = _pct(r["lint_right"], n) if r["static"] else "  (dyn)"
        lines.append(
            f"{op:<26}{r['category']:<20}{n:>4} {_pct(r['flagged'], n):>7} {_pct(r['run_category'], n):>7} "
            f"{_pct(r['run_params'], n):>7} {_pct(r['run_line'], n):>7} {_pct(r['run_right'], n):>7} {lint:>7}"
        )
        for k in ("n", "flagged", "run_category", "run_params", "run_line", "run_right"):
            tot[k] += r[k]
        if r["static"]:
            tot["static_n"] += n
            tot["lint_right"] += r["lint_right"]
    lines.append("-" * len(hdr))
    n = tot["n"]
    lines.append(
        f"{'all':<26}{'':<20}{n:>4} {_pct(tot['flagged'], n):>7} {_pct(tot['run_category'], n):>7} "
        f"{_pct(tot['run_params'], n):>7} {_pct(tot['run_line'], n):>7} {_pct(tot['run_right'], n):>7} "
        f"{_pct(tot['lint_right'], tot['static_n']):>7}"
    )
    lines.append("")
    # Per category.
    cat = defaultdict(lambda: [0, 0, 0])
    for r in rows:
        cat[r["category"]][0] += 1
        cat[r["category"]][1] += r["run"]["right"]
        cat[r["category"]][2] += r["lint"]["right"]
    lines.append("per category: " + ", ".join(f"{k} {v[1]}/{v[0]} run, {v[2]} lint" for k, v in sorted(cat.items())))
    lines.append("")
    dropped = result.get("dropped") or {}
    if dropped:
        lines.append(
            "dropped per operator: "
            + ", ".join(
                f"{op} {sum(w.values())} ({', '.join(f'{k} {v}' for k, v in sorted(w.items()))})"
                for op, w in sorted(dropped.items())
            )
        )
    for u in result.get("unparsable") or []:
        lines.append(f"  an operator wrote code that does not parse: {u}")
    lines.append("")
    lines.append(f"false alarms on the originals: {len(result['alarms'])}")
    for a in result["alarms"][:20]:
        f = a["finding"]
        loc = f.get("location") or {}
        lines.append(
            f"  {a['subject']} ({a['by']}): {f['severity']} {f['category']}: {f['message'][:140]} "
            f"[{loc.get('file', '?').rsplit('/', 1)[-1]}:{loc.get('line')}]"
        )
    if misses:
        lines.append("")
        lines.append("misses (run), per operator:")
        by = defaultdict(list)
        for r in rows:
            if not r["run"]["right"]:
                by[r["operator"]].append(r)
        for op, rs in sorted(by.items()):
            for r in rs[:misses]:
                what = [k for k in ("flagged", "category", "params", "line") if not r["run"][k]]
                lines.append(f"  {op}: {r['mutant']} (lines {r['lines']}): missing {', '.join(what)}")
    return "\n".join(lines)
