"""Shadow Harness benchmarks, side by side with LangGraph (StateGraph + SqliteSaver).

    .venv/bin/python bench/run.py              # all measurements, medians of 5 repetitions
    .venv/bin/python bench/run.py --reps 3     # fewer repetitions
    .venv/bin/python bench/run.py --profile    # also: where the runtime spends time and bytes
    .venv/bin/python bench/run.py --json out.json
    .venv/bin/python bench/run.py --only fork,replay,diff   # some measurements only
    .venv/bin/python bench/run.py --only growth  # per-node cost as the state a node reads grows
    .venv/bin/python bench/hotspots.py         # the profile alone

Every system writes to a durable SQLite file in a fresh temp directory per
repetition. Graph building and compiling, store creation and one warm-up run
(in the same store) happen outside the timed region; the timed region is the
run call alone (``Runtime.start`` / ``graph.invoke``; for time travel the
fork, replay or diff call), timed with ``time.perf_counter``. Each case checks
its outcome (run succeeded, every node ran exactly once, expected checkpoints)
before its timing is kept.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for p in (HERE, ROOT):
    if p not in sys.path:
        sys.path.insert(0, p)

warnings.filterwarnings("ignore", category=DeprecationWarning)

import cases_harness as H  # noqa: E402
import cases_langgraph as L  # noqa: E402
from _common import LANGGRAPH_CONFIGS, fmt_mib, fmt_ms, fmt_s, fmt_us, render_table  # noqa: E402

CHAIN = 200
FAN = 200
PAR, PAR_MC = 50, 8
SIZES = (50, 200, 800)
GROWTH = (50, 200, 800)

TARGET_CHAIN_US = 300
TARGET_FAN_US = 150
TARGET_SPEEDUP = 10
TARGET_PAR_FACTOR = 1.05
TARGET_SIZE = 0.2 * 2**20
TARGET_HISTORY = 0.025
TARGET_FORK = 0.040
TARGET_FORK_FIRST = 0.010
TARGET_DIFF = 0.020
TARGET_GROWTH = 1.3     # per-node cost at the longest chain / at the shortest

SECTIONS = ("chain", "fanout", "parallel", "size", "history", "fork", "replay", "diff", "growth")


def verdict(ok: bool, detail: str = "") -> str:
    return ("PASS" if ok else "MISS") + (f" ({detail})" if detail else "")


def spread(sample, fmt) -> str:
    return f"{fmt(sample.median)} [{fmt(sample.low)}–{fmt(sample.high)}]"


def _times(ratio: float) -> str:
    """``ratio`` = their time / ours, in words: "5.0× faster" or "2.5× slower"."""
    return f"{ratio:.1f}× faster" if ratio >= 1 else f"{1 / ratio:.1f}× slower"


def _git_revision() -> str:
    """The commit measured, and whether runtime/ differs from it."""
    import subprocess

    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "runtime"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision (not a git checkout)"
    return f"commit {rev}" + (" with uncommitted changes in runtime/" if dirty else "")


def interleave(reps: int, cases: dict) -> dict:
    """Run each case once per repetition, in turn; merge each case's samples.

    A case may return a tuple of Samples (several figures from one setup, like
    ``fork_chain``'s total and time to the first node): part ``i`` of case ``key``
    is merged under ``(key, i)``.
    """
    out: dict = {}
    for _ in range(reps):
        for key, case in cases.items():
            result = case()
            parts = {(key, i): s for i, s in enumerate(result)} if isinstance(result, tuple) else {key: result}
            for k, sample in parts.items():
                _merge(out, k, sample)
    return out


def _merge(out: dict, key, sample) -> None:
    if key not in out:
        out[key] = sample
        return
    out[key].values.extend(sample.values)
    for k, v in sample.info.items():
        if isinstance(v, list):
            merged = out[key].info.setdefault(k, [])
            merged.extend(x for x in v if k == "peaks" or x not in merged)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=5, help="repetitions per measurement (median reported)")
    ap.add_argument("--profile", action="store_true", help="also profile the runtime (hot spots, bytes per table)")
    ap.add_argument("--json", metavar="PATH", help="write the raw figures to PATH")
    ap.add_argument("--only", metavar="NAMES", default=",".join(SECTIONS),
                    help=f"comma-separated measurements to run (default: all): {', '.join(SECTIONS)}")
    args = ap.parse_args()
    reps = args.reps
    only = [x.strip() for x in args.only.split(",") if x.strip()]
    unknown = sorted(set(only) - set(SECTIONS))
    if unknown:
        ap.error(f"unknown measurement(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")

    from importlib.metadata import version
    started = time.perf_counter()
    print("Shadow Harness vs LangGraph "
          f"{version('langgraph')} (langgraph-checkpoint-sqlite {version('langgraph-checkpoint-sqlite')})")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"SQLite {__import__('sqlite3').sqlite_version}, {reps} repetitions, median [min–max]")
    print(f"runtime at {_git_revision()}")
    load_before = os.getloadavg()
    raw: dict[str, object] = {"reps": reps}

    def step(label: str) -> None:
        print(f"  running {label} ...", file=sys.stderr, flush=True)

    # Repetitions interleave the systems (ours, LangGraph, ...; then again), so
    # that background load on the machine hits every system alike.
    res: dict[str, object] = {}
    if "chain" in only:
        step(f"1. chain of {CHAIN}")
        r = interleave(reps, {"h": lambda: H.chain(CHAIN, 1),
                              **{m: (lambda m=m: L.chain(CHAIN, 1, m)) for m in L.MODES}})
        res["chain"] = (r.pop("h"), r)
    fan_nodes = FAN + 2
    if "fanout" in only:
        step(f"2. fan-out 1->{FAN}->1")
        r = interleave(reps, {**{mc: (lambda mc=mc: H.fanout(FAN, 1, mc)) for mc in (8, FAN)},
                              **{m: (lambda m=m: L.fanout(FAN, 1, m)) for m in L.MODES}})
        res["fanout"] = ({mc: r[mc] for mc in (8, FAN)}, {m: r[m] for m in L.MODES})
    if "parallel" in only:
        step(f"3. {PAR} parallel sleeps, max_concurrency={PAR_MC}")
        r = interleave(reps, {"h": lambda: H.parallel(PAR, 1, PAR_MC), "l": lambda: L.parallel(PAR, 1, PAR_MC)})
        res["parallel"] = (r["h"], r["l"])
    if "size" in only:
        step("4. database size")
        res["size"] = ({n: H.size(n) for n in SIZES}, {n: L.size(n) for n in SIZES})
    if "history" in only:
        step(f"5. history of a {CHAIN}-node chain")
        r = interleave(reps, {"h": lambda: H.history(CHAIN, 1), "l": lambda: L.history(CHAIN, 1)})
        res["history"] = (r["h"], r["l"])
    if "fork" in only:
        step(f"6. fork at node {CHAIN // 2} of a {CHAIN}-node chain")
        r = interleave(reps, {"h": lambda: H.fork_chain(CHAIN, 1, with_effect=True),
                              "h-pure": lambda: H.fork_chain(CHAIN, 1, with_effect=False),
                              **{m: (lambda m=m: L.fork_chain(CHAIN, 1, m)) for m in L.MODES}})
        res["fork"] = r
    if "replay" in only:
        step(f"7. replay of a {CHAIN}-node chain")
        r = interleave(reps, {"h": lambda: H.replay_chain(CHAIN, 1),
                              **{m: (lambda m=m: L.replay_chain(CHAIN, 1, m)) for m in L.MODES}})
        res["replay"] = r
    if "diff" in only:
        step(f"8. diff of two checkpoints of a {H.DIFF_ITEMS:,}-item list")
        res["diff"] = interleave(reps, {"h": lambda: H.diff_states(1)})["h"]
    if "growth" in only:
        step(f"9. chains of {', '.join(map(str, GROWTH))} nodes, each appending a {H.MESSAGE_BYTES}-byte message")
        res["growth"] = interleave(reps, {
            **{("h", n): (lambda n=n: H.growth(n, 1, GROWTH[-1])) for n in GROWTH},
            **{(m, n): (lambda n=n, m=m: L.growth(n, 1, m, GROWTH[-1])) for n in GROWTH for m in L.MODES}})
    load_after = os.getloadavg()

    # ------------------------------------------------------------ main table
    rows: list[list[str]] = []

    def per_node_rows(no: str, title: str, ours, lg: dict, nodes: int, target_us: float) -> None:
        per = ours.median / nodes
        rows.append([no, f"{title}: per-node overhead", spread(ours, lambda s: fmt_us(s / nodes)),
                     fmt_us(lg["default"].median / nodes), fmt_us(lg["matched"].median / nodes),
                     f"≤ {target_us:.0f} µs",
                     verdict(per <= target_us / 1e6,
                             "" if per <= target_us / 1e6 else f"{per * 1e6 / target_us:.1f}× over")])
        ups = {m: lg[m].median / ours.median for m in L.MODES}
        rows.append([no, f"{title}: speed-up vs LangGraph", "—", f"{ups['default']:.2f}×",
                     f"{ups['matched']:.2f}×", f"≥ {TARGET_SPEEDUP}×",
                     verdict(min(ups.values()) >= TARGET_SPEEDUP,
                             f"default {ups['default']:.2f}×, matched {ups['matched']:.2f}×")])

    if "chain" in res:
        h_chain, l_chain = res["chain"]
        per_node_rows("1", f"chain {CHAIN}", h_chain, l_chain, CHAIN, TARGET_CHAIN_US)
    if "fanout" in res:
        h_fan, l_fan = res["fanout"]
        per_node_rows("2a", f"fan-out 1→{FAN}→1, max_concurrency=8", h_fan[8], l_fan, fan_nodes, TARGET_FAN_US)
        per_node_rows("2b", f"fan-out 1→{FAN}→1, max_concurrency={FAN}", h_fan[FAN], l_fan, fan_nodes,
                      TARGET_FAN_US)

    if "parallel" in res:
        h_par, l_par = res["parallel"]
        ideal = PAR * H.SLEEP / PAR_MC
        waves = math.ceil(PAR / PAR_MC) * H.SLEEP
        limit = TARGET_PAR_FACTOR * ideal
        rows.append(["3", f"{PAR}× sleep({H.SLEEP}), max_concurrency={PAR_MC}: wall", spread(h_par, fmt_s),
                     fmt_s(l_par.median), "—", f"≤ {limit:.4f} s (1.05 × {ideal:.4f})",
                     verdict(h_par.median <= limit, f"{h_par.median / ideal:.3f}× ideal"
                             + ("" if h_par.median <= limit else f"; under {waves:.2f} s = "
                                f"ceil({PAR}/{PAR_MC})×{H.SLEEP} is impossible"))])
        rows.append(["3", f"  same, vs wave bound ceil({PAR}/{PAR_MC})×{H.SLEEP} = {waves:.2f} s",
                     f"{h_par.median / waves:.3f}×", f"{l_par.median / waves:.3f}×", "—", "(context)", ""])
        peaks_ok = all(p == PAR_MC for p in h_par.info["peaks"])
        rows.append(["3", "  peak nodes running at once (every rep)", ",".join(map(str, h_par.info["peaks"])),
                     ",".join(map(str, l_par.info["peaks"])), "—", f"= {PAR_MC}", verdict(peaks_ok)])

    if "size" in res:
        h_size, l_size = res["size"]
        s200 = h_size[CHAIN]["bytes"]
        rows.append(["4", f"DB size after chain {CHAIN}", f"{fmt_mib(s200)} ({s200:,} B)",
                     f"{fmt_mib(l_size[CHAIN]['bytes'])}", "—", "≤ 0.200 MiB",
                     verdict(s200 <= TARGET_SIZE, "" if s200 <= TARGET_SIZE else
                             f"{s200 / TARGET_SIZE:.2f}× the target, {s200 - TARGET_SIZE:,.0f} B over")])
    if "history" in res:
        h_hist, l_hist = res["history"]
        rows.append(["5", f"history of chain {CHAIN} (fresh store)", spread(h_hist, fmt_ms),
                     fmt_ms(l_hist.median), "—", f"≤ {TARGET_HISTORY * 1e3:.0f} ms",
                     verdict(h_hist.median <= TARGET_HISTORY,
                             f"{l_hist.median / h_hist.median:.1f}× faster than LangGraph"
                             if h_hist.median <= TARGET_HISTORY else f"{h_hist.median / TARGET_HISTORY:.2f}× over")])

    headers = ["#", "measurement", "Shadow Harness", "LangGraph default", "LangGraph matched", "target", "result"]
    if rows:
        print()
        print(render_table(headers, rows))
        print("\n" + LANGGRAPH_CONFIGS + "\nPer-node overhead = run wall time / nodes "
              f"({CHAIN} for the chain, {fan_nodes} for the fan-out).")
        notes = []
        if "chain" in res:
            notes.append(f"chain {CHAIN + 1} (LangGraph {CHAIN + 2})")
        if "fanout" in res:
            cps = {mc: ",".join(map(str, res["fanout"][0][mc].info["checkpoints"])) for mc in (8, FAN)}
            notes.append(f"fan-out {cps[8]} (max_concurrency=8), {cps[FAN]} (max_concurrency={FAN}) (LangGraph 5)")
        if notes:
            print("Shadow Harness checkpoints: " + "; ".join(notes) + ".")

    # ------------------------------------------------------------ time travel table
    tt: list[list[str]] = []
    half = CHAIN // 2

    def timed_row(no: str, title: str, ours, lg: dict, target: float | None) -> None:
        context = "vs LangGraph: " + ", ".join(f"{_times(lg[m].median / ours.median)} ({m})" for m in L.MODES)
        if target is None:
            result = f"report ({context})"
        else:
            ok = ours.median <= target
            result = verdict(ok, context if ok else f"{ours.median / target:.2f}× over; {context}")
        tt.append([no, title, spread(ours, fmt_ms), fmt_ms(lg["default"].median), fmt_ms(lg["matched"].median),
                   "—" if target is None else f"≤ {target * 1e3:.0f} ms", result])

    if "fork" in res:
        r = res["fork"]
        lg_total = {m: r[(m, 0)] for m in L.MODES}
        lg_first = {m: r[(m, 1)] for m in L.MODES}
        timed_row("6", f"fork at node {half} of {CHAIN}, patch x=1000, run {CHAIN - half} nodes "
                       f"(node {H.FORK_EFFECT_AT}'s effect served mocked): total",
                  r[("h", 0)], lg_total, TARGET_FORK)
        timed_row("6", "  same: fork call → first node starts", r[("h", 1)], lg_first, TARGET_FORK_FIRST)
        timed_row("6", "  same chain without the effect (as LangGraph's): total", r[("h-pure", 0)], lg_total, None)
        timed_row("6", "  same chain without the effect: fork call → first node", r[("h-pure", 1)], lg_first, None)
    if "replay" in res:
        r = res["replay"]
        timed_row("7", f"replay from node {half} ({CHAIN - half} nodes re-run, {CHAIN - half} effects mocked), "
                       "report included", r[("h", 0)], {m: r[(m, 0)] for m in L.MODES}, None)
        timed_row("7", f"replay from the start ({CHAIN} nodes, {CHAIN} effects mocked), report included",
                  r[("h", 1)], {m: r[(m, 1)] for m in L.MODES}, None)
    if "diff" in res:
        d = res["diff"]
        ok = d.median <= TARGET_DIFF
        tt.append(["8", (f"diff of 2 checkpoints: {H.DIFF_ITEMS:,}-item list + 1 appended, 1 field changed "
                         "(fresh store, both states loaded)"), spread(d, fmt_ms), "—", "—",
                   f"≤ {TARGET_DIFF * 1e3:.0f} ms",
                   verdict(ok, "" if ok else f"{d.median / TARGET_DIFF:.2f}× over")])
    if tt:
        print("\nTime travel")
        print(render_table(headers, tt))
        print(f"\nLangGraph fork = update_state(<checkpoint with x == {half}>, {{\"x\": 1000}}) + invoke(None, ...); "
              "its first-node figure is from the update_state call.\nLangGraph replay = invoke(None, <config of an "
              "earlier checkpoint>): it re-executes the nodes (no effect journal, no report).\nShadow Harness replays "
              "check that report.same is True and that the effect function was never called.")

    # ------------------------------------------------------------ state growth table
    if "growth" in res:
        g = res["growth"]
        first, last = GROWTH[0], GROWTH[-1]
        grow_rows = []
        for key, system in (("h", "Shadow Harness"), *((m, f"LangGraph {m}") for m in L.MODES)):
            per = {n: g[(key, n)].median / n for n in GROWTH}
            ratio = per[last] / per[first]
            result = verdict(ratio <= TARGET_GROWTH, f"{ratio:.2f}×") if key == "h" else f"{ratio:.2f}× (context)"
            grow_rows.append([system, *(spread(g[(key, n)], lambda s, n=n: fmt_us(s / n)) if key == "h"
                                        else fmt_us(per[n]) for n in GROWTH),
                              f"{ratio:.2f}×", f"≤ {TARGET_GROWTH}×" if key == "h" else "—", result])
        print(f"\n9. State growth: chain of N nodes, each appending a {H.MESSAGE_BYTES}-byte message to a list "
              f"field (append / operator.add); per-node overhead = run wall time / N; {last} // N timed runs "
              "per repetition, median of all runs")
        print(render_table(["system", *(f"N = {n}" for n in GROWTH), f"N={last} / N={first}", "target", "result"],
                           grow_rows))

    # ------------------------------------------------------------ size growth table
    if "size" in res:
        h_size, l_size = res["size"]
        size_rows = []
        for system, sizes in (("Shadow Harness", h_size), ("LangGraph", l_size)):
            prev = None
            for n in SIZES:
                b = sizes[n]["bytes"]
                marginal = "—" if prev is None else f"{(b - sizes[prev]['bytes']) / (n - prev):,.0f}"
                size_rows.append([system, str(n), f"{b:,}", fmt_mib(b), f"{b / n:,.0f}", marginal,
                                  fmt_us(sizes[n]["seconds"] / n)])
                prev = n
        print("\n4. Database size after one chain run of N nodes (main file after wal_checkpoint(TRUNCATE) + WAL; "
              "one run per N)")
        print(render_table(["system", "N", "bytes", "MiB", "bytes/node", "marginal bytes/node",
                            "run µs/node (1 run, no warm-up)"], size_rows))
    print(f"\nload average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}; "
          f"total benchmark time {time.perf_counter() - started:.1f} s")

    if args.json:
        def dump(s):
            return {"median": s.median, "values": s.values, **s.info}
        if "chain" in res:
            h_chain, l_chain = res["chain"]
            raw["chain"] = {"harness": dump(h_chain), **{f"langgraph_{m}": dump(l_chain[m]) for m in L.MODES}}
        if "fanout" in res:
            h_fan, l_fan = res["fanout"]
            raw["fanout"] = {**{f"harness_mc{mc}": dump(s) for mc, s in h_fan.items()},
                             **{f"langgraph_{m}": dump(l_fan[m]) for m in L.MODES}}
        if "parallel" in res:
            raw["parallel"] = {"harness": dump(res["parallel"][0]), "langgraph": dump(res["parallel"][1])}
        if "size" in res:
            raw["size"] = {"harness": res["size"][0], "langgraph": res["size"][1]}
        if "history" in res:
            raw["history"] = {"harness": dump(res["history"][0]), "langgraph": dump(res["history"][1])}
        if "fork" in res:
            r = res["fork"]
            names = {"h": "harness", "h-pure": "harness_no_effect", **{m: f"langgraph_{m}" for m in L.MODES}}
            raw["fork"] = {name: {"total": dump(r[(k, 0)]), "to_first_node": dump(r[(k, 1)])}
                           for k, name in names.items()}
        if "replay" in res:
            r = res["replay"]
            raw["replay"] = {("harness" if k == "h" else f"langgraph_{k}"):
                             {"from_middle": dump(r[(k, 0)]), "from_origin": dump(r[(k, 1)])}
                             for k in ("h", *L.MODES)}
        if "diff" in res:
            raw["diff"] = {"harness": dump(res["diff"])}
        if "growth" in res:
            names = {"h": "harness", **{m: f"langgraph_{m}" for m in L.MODES}}
            raw["growth"] = {name: {str(n): dump(res["growth"][(k, n)]) for n in GROWTH} for k, name in names.items()}
        with open(args.json, "w") as f:
            json.dump(raw, f, indent=2)

    if args.profile:
        import hotspots
        print("\n== Where Shadow Harness spends its time and bytes ==")
        print(hotspots.report(CHAIN, FAN))
    return 0

if __name__ == "__main__":
    sys.exit(main())
