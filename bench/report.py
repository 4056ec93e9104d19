"""Rendering an artifact: the Markdown table (stdout) and optional PNG plots."""

from __future__ import annotations

import importlib
import math
from pathlib import Path
from typing import Any

from bench.gcscrape import gc_line

Artifact = dict[str, Any]


def _fmt(value: float, digits: int = 2) -> str:
    return f"{value:,.{digits}f}"


def _errors_cell(entry: dict[str, Any]) -> str:
    s = entry.get("summary") or {}
    parts = []
    if s.get("failed_trials"):
        parts.append(f"{s['failed_trials']} trials failed")
    if s.get("trials_with_errors"):
        kinds = ", ".join(f"{k} {v}" for k, v in s.get("error_kinds", {}).items())
        parts.append(f"{s['trials_with_errors']}/{s['trials']} trials: {kinds}")
    if entry["status"] == "failed":
        parts.append(f"FAILED: {entry['reason']}")
    return ("⚠ " + "; ".join(parts)) if parts else "—"


def _cpu_cell(summary: dict[str, Any]) -> str:
    """Server CPU µs per request (bench.procstat); blank in artifacts from before it."""
    cpu = summary.get("cpu_us_per_req")
    return _fmt(float(cpu), 1) if cpu is not None else ""


def _reference_rps(entries: list[dict[str, Any]], reference: str) -> float:
    for e in entries:
        if e["server"] == reference and e["status"] in ("ok", "errors"):
            return float(e["summary"].get("median_rps", 0.0))
    return 0.0


def _wrk_table(entries: list[dict[str, Any]], reference: str) -> list[str]:
    ref = _reference_rps(entries, reference)
    rows = [
        "| server | RPS (median) | CPU µs/req | mean ms | p50 ms | p99 ms | MiB/s | MAD % "
        f"| peak RSS MiB | errors | x {reference} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for e in entries:
        s = e.get("summary") or {}
        if e["status"] == "skipped" or not s:
            rows.append(f"| {e['server']} | {e['status']}: {e['reason']} | | | | | | | | | |")
            continue
        rps = float(s["median_rps"])
        ratio = f"{rps / ref:.2f}" if ref and rps else "—"
        # Artifacts from before the mean and MiB/s were summarised leave them blank.
        mean = _fmt(s["mean_ms"]) if "mean_ms" in s else ""
        mib = _fmt(s["mib_per_s"], 1) if "mib_per_s" in s else ""
        rows.append(
            f"| {e['server']} | {_fmt(rps, 0)} | {_cpu_cell(s)} | {mean} | {_fmt(s['p50_ms'])} | "
            f"{_fmt(s['p99_ms'])} | {mib} | {_fmt(s['mad_pct'], 1)} | "
            f"{_fmt(s['peak_rss_mib'], 1)} | {_errors_cell(e)} | {ratio} |"
        )
    return rows


def _proxy_table(entries: list[dict[str, Any]], reference: str) -> list[str]:
    """The proxy workloads: the figures their targets (issue 30) name, and
    the upstream's CPU in the same windows (it must not be the bottleneck)."""
    ref = _reference_rps(entries, reference)
    rows = [
        "| server | RPS (median) | CPU µs/req | upstream CPU µs/req | mean ms | p99 ms "
        f"| p99 / mean | MiB/s | MAD % | RSS growth MiB | peak RSS MiB | errors | x {reference} |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for e in entries:
        s = e.get("summary") or {}
        if e["status"] == "skipped" or not s:
            rows.append(f"| {e['server']} | {e['status']}: {e['reason']} |" + " |" * 11)
            continue
        rps = float(s["median_rps"])
        ratio = f"{rps / ref:.2f}" if ref and rps else "—"
        up = s.get("upstream_cpu_us_per_req")
        tail = f"{s['p99_ms'] / s['mean_ms']:.2f}" if s.get("mean_ms") else ""
        growth = s.get("rss_growth_mib")
        rows.append(
            f"| {e['server']} | {_fmt(rps, 0)} | {_cpu_cell(s)} "
            f"| {_fmt(float(up), 1) if up is not None else ''} | {_fmt(s['mean_ms'])} "
            f"| {_fmt(s['p99_ms'])} | {tail} | {_fmt(s['mib_per_s'], 1)} "
            f"| {_fmt(s['mad_pct'], 1)} | {_fmt(growth, 1) if growth is not None else ''} "
            f"| {_fmt(s['peak_rss_mib'], 1)} | {_errors_cell(e)} | {ratio} |"
        )
    return rows


def _h2load_table(entries: list[dict[str, Any]], reference: str) -> list[str]:
    """The wrk table's columns plus h2load's mean request time, MiB/s and the protocol."""
    ref = _reference_rps(entries, reference)
    rows = [
        "| server | proto | RPS (median) | CPU µs/req | MiB/s | mean ms | p50 ms | p99 ms "
        f"| MAD % | peak RSS MiB | errors | x {reference} |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for e in entries:
        s = e.get("summary") or {}
        if e["status"] == "skipped" or not s:
            rows.append(f"| {e['server']} | | {e['status']}: {e['reason']} | | | | | | | | | |")
            continue
        rps = float(s["median_rps"])
        ratio = f"{rps / ref:.2f}" if ref and rps else "—"
        rows.append(
            f"| {e['server']} | {s.get('protocol', '')} | {_fmt(rps, 0)} | {_cpu_cell(s)} "
            f"| {_fmt(s['mib_per_s'], 1)} | {_fmt(s['mean_ms'])} | {_fmt(s['p50_ms'])} "
            f"| {_fmt(s['p99_ms'])} | {_fmt(s['mad_pct'], 1)} | {_fmt(s['peak_rss_mib'], 1)} "
            f"| {_errors_cell(e)} | {ratio} |"
        )
    return rows


def _idle_table(entries: list[dict[str, Any]]) -> list[str]:
    rows = [
        "| server | open / requested | RSS before MiB | RSS after MiB | KiB per conn | MAD % "
        "| answers after | errors |",
        "|---|---:|---:|---:|---:|---:|---|---|",
    ]
    for e in entries:
        s = e.get("summary") or {}
        if e["status"] == "skipped" or not s:
            rows.append(f"| {e['server']} | {e['status']}: {e['reason']} | | | | | | |")
            continue
        errors = "—"
        if s["failures"] or e["status"] == "failed":
            errors = f"⚠ {s['failures']} failed opens; {s['first_error'] or e['reason']}"
        rows.append(
            f"| {e['server']} | {s['still_open']:,} / {s['requested']:,} "
            f"| {_fmt(s['rss_before_mib'], 1)} | {_fmt(s['rss_after_mib'], 1)} "
            f"| {_fmt(s['kib_per_connection'], 1)} | {_fmt(s['mad_pct'], 1)} | "
            f"{'yes' if s['responsive_after'] else '⚠ no'} | {errors} |"
        )
    return rows


def _pool_vs_inline(by_workload: dict[str, list[dict[str, Any]]]) -> str | None:
    entries = {e["server"]: e for e in by_workload.get("1k", []) if e["status"] in ("ok", "errors")}
    inline, pool = entries.get("serverio-inline"), entries.get("serverio-pool")
    if not inline or not pool:
        return None
    a, b = inline["summary"], pool["summary"]
    if not a["median_rps"] or not a["p99_ms"]:
        return None
    d_rps = 100.0 * (b["median_rps"] / a["median_rps"] - 1.0)
    d_p99 = 100.0 * (b["p99_ms"] / a["p99_ms"] - 1.0)
    return (
        "serverio-pool vs serverio-inline on warm 1 KiB (workload `1k`): "
        f"{d_rps:+.1f}% RPS, {d_p99:+.1f}% p99."
    )


def group(artifact: Artifact) -> dict[str, list[dict[str, Any]]]:
    by_workload: dict[str, list[dict[str, Any]]] = {}
    for e in artifact["results"]:
        by_workload.setdefault(e["workload"], []).append(e)
    return by_workload


def _gc_lines(entries: list[dict[str, Any]]) -> list[str]:
    """Under a table: each serverio's collector figures over the run
    (bench/gcscrape.py), when the workload scraped them."""
    out = []
    for e in entries:
        line = gc_line(e.get("summary", {}).get("gc", {}))
        if line:
            out.append(f"- collector, {e['server']}: {line}")
    return ["", *out] if out else []


def render_markdown(artifact: Artifact, reference: str | None = None) -> str:
    settings = artifact["settings"]
    machine = artifact["machine"]
    reference = reference or settings["reference"]
    pkgs = machine.get("packages", {})
    peers = machine.get("peers", {})
    lines = [
        f"## serverio bench `{artifact['run_id']}`",
        "",
        f"- date: {artifact['started_utc']} UTC ({artifact['mode']}), "
        f"{artifact.get('elapsed_s', '?')} s",
        f"- trials: {settings['rounds']} rotated rounds x {settings['duration_s']} s after a "
        f"{settings['warmup_s']} s warm-up; {settings['placement']}; idle: "
        f"{settings['idle_conns']:,} connections x {settings['idle_rounds']} fresh-server rounds",
        f"- machine: {machine['cpu_model']} x {machine['cpu_count']}, Linux {machine['kernel']}, "
        f"Python {machine['python']}",
        "- versions: "
        + ", ".join(f"{k} {v}" for k, v in pkgs.items() if v)
        + f" (git {machine.get('serverio_git', '?')})"
        + (", peers: " + ", ".join(f"{k} {v}" for k, v in peers.items() if v) if peers else "")
        + (f", {machine['nginx']}" if machine.get("nginx") else "")
        + (f", {machine['wrk']}" if machine.get("wrk") else "")
        + (f", {machine['h2load']}" if machine.get("h2load") else "")
        + (f", caddy {machine['caddy']}" if machine.get("caddy") else ""),
    ]
    if "loadavg_start" in artifact:
        start, end = artifact["loadavg_start"], artifact.get("loadavg_end", [])
        lines.append(
            "- load average (1, 5, 15 min): "
            + f"start {', '.join(f'{v:.2f}' for v in start)}"
            + (f"; end {', '.join(f'{v:.2f}' for v in end)}" if end else "")
        )
    for name, reason in artifact.get("unavailable", {}).items():
        lines.append(f"- not run: {name}: {reason}")
    by_workload = group(artifact)
    for name, entries in by_workload.items():
        info = artifact["workloads"].get(name, {})
        lines += ["", f"### `{name}`: {info.get('description', '')}", ""]
        if info.get("cores", 1) > 1:
            lines += [f"(not pinned: {info['cores']} cores for the servers and wrk)", ""]
        if info.get("kind") == "idle":
            lines += _idle_table(entries)
        elif info.get("kind") == "proxy":
            lines += _proxy_table(entries, reference)
        elif info.get("kind") == "h2load":
            lines += _h2load_table(entries, reference)
        else:
            lines += _wrk_table(entries, reference)
        lines += _gc_lines(entries)
    if note := _pool_vs_inline(by_workload):
        lines += ["", note]
    return "\n".join(lines)


# --- plots ------------------------------------------------------------------------


def _thousands(value: float, _pos: int) -> str:
    return f"{value / 1000:g}k" if value else "0"


def write_plots(artifact: Artifact, out_dir: Path) -> list[Path] | str:
    """PNG bar charts (RPS, p99, idle KiB/conn) when matplotlib is importable; else the reason."""
    try:
        matplotlib: Any = importlib.import_module("matplotlib")
    except ImportError:
        return "matplotlib not installed: no plots (pip install matplotlib)"
    matplotlib.use("Agg")
    plt: Any = importlib.import_module("matplotlib.pyplot")
    ticker: Any = importlib.import_module("matplotlib.ticker")
    out_dir.mkdir(parents=True, exist_ok=True)
    by_workload = group(artifact)
    kinds = {n: artifact["workloads"].get(n, {}).get("kind") for n in by_workload}
    wrk_names = [n for n in by_workload if kinds[n] != "idle"]
    idle_names = [n for n in by_workload if kinds[n] == "idle"]
    written: list[Path] = []
    charts = [
        ("rps", "median requests/s (higher is better)", wrk_names, "median_rps"),
        ("p99", "median p99 latency, ms (lower is better)", wrk_names, "p99_ms"),
        ("idle", "server RSS per idle connection, KiB", idle_names, "kib_per_connection"),
    ]
    for stem, title, names, key in charts:
        panels = []
        for n in names:
            bars = [
                (e["server"], float(e["summary"][key]))
                for e in by_workload[n]
                if e.get("summary") and e["status"] != "skipped"
            ]
            if bars:
                panels.append((n, bars))
        if not panels:
            continue
        cols = min(3, len(panels))
        rows = math.ceil(len(panels) / cols)
        fig, axes = plt.subplots(
            rows, cols, figsize=(5.5 * cols, 0.5 + 0.45 * rows * 9), squeeze=False
        )
        for ax in axes.flat[len(panels) :]:
            ax.set_visible(False)
        for ax, (n, bars) in zip(axes.flat, panels, strict=False):
            labels = [b[0] for b in bars]
            values = [b[1] for b in bars]
            ax.barh(labels, values, color="tab:blue")
            ax.invert_yaxis()
            ax.set_title(n)
            ax.tick_params(axis="x", labelsize=8)
            if key == "median_rps":
                ax.xaxis.set_major_formatter(ticker.FuncFormatter(_thousands))
            for i, v in enumerate(values):
                ax.text(
                    v,
                    i,
                    f" {v:,.0f}" if key == "median_rps" else f" {v:,.2f}",
                    va="center",
                    fontsize=8,
                )
        fig.suptitle(f"{title} — {artifact['run_id']}")
        fig.tight_layout()
        path = out_dir / f"{stem}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written


def plots_message(result: list[Path] | str) -> str:
    if isinstance(result, str):
        return result
    return "plots: " + (", ".join(str(p) for p in result) if result else "nothing to plot")
