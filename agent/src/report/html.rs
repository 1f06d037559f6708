//! The report a person attaches to a ticket (`diagnose --html`, `simulate --html`): one
//! self-contained HTML file, inline CSS and SVG, nothing fetched, no script. The verdict comes
//! first (which pool is in trouble, what to change and with which knob); then per pool the
//! timeline of its device (allocations, slow paths, ring-full returns, NAPI full-budget polls
//! and drops on one time axis: the chain "ring exhausted → slow path → NAPI behind → drops"),
//! its latency histograms and the advice curve; hook coverage and ppscope's own cost last.
//!
//! The SVG is written here, not by a plotting crate: a few polylines, bars and labels, whose
//! every element the tests can find by its class.
use std::fmt::Write;

use super::{duration_ns, simulate::SimulateResult};
use crate::{
    snapshot::{
        advice::queues_text, health, Advice, DeviceStep, Latency, MissedNote, PoolView, Snapshot,
        TimelineStep, OWN_COST_UNKNOWN,
    },
    units::{bytes, pct_or_unknown},
};

/// Width of every chart, in SVG user units (the page scales it).
const W: f64 = 760.0;
/// Left margin of the charts: room for the y labels.
const LEFT: f64 = 150.0;
const RIGHT: f64 = 60.0;

/// Text made safe for HTML element content and attribute values.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:2em auto;max-width:820px;color:#1d2329;background:#fff}
h1{font-size:1.5em;margin-bottom:.2em} h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccd}
h3{font-size:1em;margin:1.2em 0 .3em}
.sub{color:#5b6670;margin-top:0}
.verdict{border-left:6px solid #889;padding:.5em 1em;margin:.6em 0;background:#f5f6f8}
.verdict.starving{border-color:#c62828;background:#fdecea} .verdict.warn{border-color:#e0a000;background:#fff7e0}
.verdict.ok{border-color:#2e7d32;background:#edf7ee}
.word{font-weight:700;text-transform:uppercase;margin-right:.5em}
.knob{font-family:ui-monospace,monospace;background:#eef;padding:.1em .3em}
table{border-collapse:collapse;font-size:.9em} td,th{padding:.2em .6em;border-bottom:1px solid #e3e5e8;text-align:left}
svg{display:block;margin:.4em 0;max-width:100%;height:auto;font-size:11px}
svg text{fill:#333} .axis{stroke:#999;stroke-width:1} .grid{stroke:#e5e5e5;stroke-width:1}
.unknown{fill:#999;font-style:italic}
ul.evidence{font-size:.9em;color:#333} .legend{font-size:.85em;color:#555;margin-top:0}
";

/// The whole page: `title`, a subtitle, then `body`.
fn page(title: &str, subtitle: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{t}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <h1>{t}</h1>\n<p class=\"sub\">{s}</p>\n{body}</body>\n</html>\n",
        t = esc(title),
        s = esc(subtitle),
    )
}

/// One pool's verdict box: its health with how it was reached, and its advice with the knob.
fn verdict_box(p: &PoolView, a: &health::Assessment, out: &mut String) {
    let _ = write!(
        out,
        "<div class=\"verdict {}\" id=\"verdict-{}\"><span class=\"word\">{}</span><b>{}</b> \
         <span class=\"basis\">({} basis)</span><br>{}",
        a.health.name(),
        esc(&p.pool),
        esc(a.health.word()),
        esc(&p.label()),
        esc(a.basis.name()),
        esc(&a.how),
    );
    if let Some(adv) = &p.advice {
        let _ = write!(
            out,
            "<br><b>Advice:</b> {}<br><b>Knob:</b> <span class=\"knob\">{}</span>",
            esc(&adv.summary()),
            esc(&adv.knob_text)
        );
    }
    out.push_str("</div>\n");
}

/// `diagnose --html`: the snapshot of a window (live or replayed).
pub fn diagnose(snap: &Snapshot) -> String {
    let secs = snap.duration_seconds;
    let mut body = String::new();
    // Worst first: the pool in trouble is the first thing read.
    let mut pools: Vec<(&PoolView, health::Assessment)> = snap
        .pools
        .iter()
        .map(|p| (p, health::assess(p, secs)))
        .collect();
    pools.sort_by_key(|(_, a)| std::cmp::Reverse(a.health));
    body.push_str("<h2 id=\"verdict\">Verdict</h2>\n");
    if pools.is_empty() {
        let _ = writeln!(
            body,
            "<p>No page_pool activity was seen in the window ({}).</p>",
            esc(snap.quiet_hint().text())
        );
        if let Some(why) = snap.quiet_why() {
            let _ = writeln!(body, "<p>{}</p>", esc(&why));
        }
    }
    if let Some(why) = snap.advice_unavailable() {
        let _ = writeln!(body, "<p>No ring-size advice: {}.</p>", esc(why));
    }
    for (p, a) in &pools {
        verdict_box(p, a, &mut body);
    }
    for (p, _) in &pools {
        pool_section(snap, p, &mut body);
    }
    if let Some(dm) = &snap.devmem {
        body.push_str("<h2>devmem TCP</h2>\n");
        let site = |name: &str, l: Option<&Latency>, out: &mut String| {
            if let Some(l) = l {
                histogram_svg(l, name, out);
            }
        };
        site(
            "SO_DEVMEM_DONTNEED",
            dm.dontneed.as_ref().and_then(|s| s.latency.as_ref()),
            &mut body,
        );
        site(
            "devmem frag free",
            dm.free.as_ref().and_then(|s| s.latency.as_ref()),
            &mut body,
        );
        site(
            "memory-provider allocation",
            dm.provider_alloc.as_ref().and_then(|s| s.latency.as_ref()),
            &mut body,
        );
    }
    coverage(snap, &mut body);
    let detail = snap
        .detail
        .map_or(String::new(), |d| format!(", --detail {}", d.name()));
    page(
        "ppscope diagnose report",
        &format!(
            "kernel {}, {:.1} s window{detail}, {} pool(s) active",
            snap.kernel,
            secs,
            snap.pools.len()
        ),
        &body,
    )
}

/// One pool: its figures, its device's timeline, its histograms, its advice curve.
fn pool_section(snap: &Snapshot, p: &PoolView, out: &mut String) {
    let _ = writeln!(
        out,
        "<h2 class=\"pool\" id=\"pool-{}\">Pool {} <small>({})</small></h2>",
        esc(&p.pool),
        esc(&p.label()),
        esc(&p.pool)
    );
    let cell = |v: Option<u64>| v.map_or("?".to_string(), |v| v.to_string());
    let _ = writeln!(
        out,
        "<table class=\"figures\"><tr><th>pool_size / ring</th><td>{} / {}</td>\
         <th>allocations</th><td>{}</td><th>slow path</th><td>{}</td></tr>\
         <tr><th>ring hit rate</th><td>{}</td><th>recycles</th><td>{}</td><th>ring full</th><td>{}</td></tr>\
         <tr><th>pages from allocator</th><td>{}</td><th>pages released</th><td>{}</td><th>inflight</th><td>{}</td></tr></table>",
        cell(p.pool_size.map(u64::from)),
        cell(p.ring_size.map(u64::from)),
        cell(p.alloc.total),
        cell(p.alloc.slow),
        pct_or_unknown(p.ring_hit_rate),
        cell(p.recycle.total),
        cell(p.recycle.ring_full),
        cell(p.pages.allocated),
        cell(p.pages.released),
        p.inflight_bytes
            .map_or("?".to_string(), |b| bytes(b).to_string()),
    );
    match p.ifname.as_deref() {
        None => {
            out.push_str("<p class=\"unknown\">No timeline: the pool's device is not known.</p>\n")
        }
        Some(dev) if !snap.timeline.is_empty() => {
            let _ = writeln!(
                out,
                "<h3>Timeline of {} <small>(counts per step; each row's top is its largest, right)</small></h3>",
                esc(dev)
            );
            timeline_svg(&snap.timeline, dev, out);
        }
        _ => out.push_str("<p class=\"unknown\">No timeline: the source kept no steps.</p>\n"),
    }
    if let Some(l) = &p.slow_path_latency {
        histogram_svg(l, "slow-path latency", out);
    }
    if let Some(adv) = &p.advice {
        if adv.curve.len() >= 2 {
            out.push_str("<h3>Advice curve</h3>\n");
            curve_svg(adv, out);
        }
        evidence(adv, out);
    }
}

fn evidence(adv: &Advice, out: &mut String) {
    out.push_str("<ul class=\"evidence\">");
    for e in &adv.evidence {
        let _ = write!(out, "<li>{}</li>", esc(e));
    }
    let _ = writeln!(
        out,
        "<li>confidence {:?}: {}</li></ul>",
        adv.confidence.level,
        esc(&adv.confidence.reason)
    );
}

/// The rows of the timeline, in the order of the chain: name, class, colour, and the figure of
/// a step (the better one where both are known).
type Row = (
    &'static str,
    &'static str,
    &'static str,
    fn(&DeviceStep) -> Option<u64>,
);
const ROWS: &[Row] = &[
    ("allocations", "alloc", "#1565c0", |d| d.allocs),
    ("slow path (fresh pages)", "slow", "#c62828", |d| {
        d.slow.or(d.pages_in)
    }),
    ("ring-full returns", "ring_full", "#e07000", |d| {
        d.ring_full.or(d.pages_out)
    }),
    (
        "NAPI full-budget polls",
        "napi_full_budget",
        "#6a1b9a",
        |d| d.napi_full_budget,
    ),
    ("drops", "drops", "#c62828", |d| d.drops),
];

/// The device's steps as one panel per row on one time axis, each step a bar over its own
/// span: the timeline keeps only steps where something moved, so a quiet stretch is a gap,
/// not a line drawn across it.
fn timeline_svg(steps: &[TimelineStep], dev: &str, out: &mut String) {
    const PANEL: f64 = 56.0;
    const GAP: f64 = 10.0;
    let points: Vec<(f64, &DeviceStep)> = steps
        .iter()
        .filter_map(|s| {
            let d = s
                .devices
                .iter()
                .find(|d| d.ifname.as_deref() == Some(dev))?;
            Some((s.t, d))
        })
        .collect();
    if points.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"unknown\">Nothing moved on {} in any step of the timeline.</p>",
            esc(dev)
        );
        return;
    }
    // A step's length: the shortest gap between the ends of two kept steps (or from the
    // window's start to the first), since the steps between them were quiet.
    let mut step = points[0].0;
    for w in steps.windows(2) {
        let gap = w[1].t - w[0].t;
        if gap > 0.0 && gap < step {
            step = gap;
        }
    }
    let step = step.max(1e-9);
    let t_end = steps.iter().map(|s| s.t).fold(0.0, f64::max).max(step);
    let h = ROWS.len() as f64 * (PANEL + GAP) + 24.0;
    let x = |t: f64| LEFT + t.max(0.0) / t_end * (W - LEFT - RIGHT);
    let _ = writeln!(
        out,
        "<svg class=\"timeline\" viewBox=\"0 0 {W} {h}\" role=\"img\" aria-label=\"timeline of {}\">",
        esc(dev)
    );
    for (i, (name, class, color, get)) in ROWS.iter().enumerate() {
        let top = i as f64 * (PANEL + GAP);
        let bottom = top + PANEL;
        let values: Vec<(f64, Option<u64>)> = points.iter().map(|(t, d)| (*t, get(d))).collect();
        let max = values.iter().filter_map(|v| v.1).max();
        let _ = write!(
            out,
            "<text x=\"4\" y=\"{:.1}\">{}</text><line class=\"axis\" x1=\"{LEFT}\" y1=\"{bottom:.1}\" x2=\"{:.1}\" y2=\"{bottom:.1}\"/>",
            top + PANEL / 2.0,
            esc(name),
            W - RIGHT
        );
        let Some(max) = max else {
            let _ = writeln!(
                out,
                "<text class=\"unknown\" x=\"{:.1}\" y=\"{:.1}\">? (no hook counts it on this kernel)</text>",
                LEFT + 8.0,
                top + PANEL / 2.0
            );
            continue;
        };
        let _ = write!(out, "<g class=\"series {class}\" fill=\"{color}\">");
        for (t, v) in &values {
            let v = v.unwrap_or(0);
            if v == 0 {
                continue;
            }
            let bh = v as f64 / max as f64 * (PANEL - 6.0);
            let (x0, x1) = (x(t - step), x(*t));
            let _ = write!(
                out,
                "<rect x=\"{x0:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\"><title>{v} in the step ending at {t:.2} s</title></rect>",
                bottom - bh,
                (x1 - x0 - 0.5).max(1.0)
            );
        }
        let _ = writeln!(
            out,
            "</g><text x=\"{:.1}\" y=\"{:.1}\">{max}</text>",
            W - RIGHT + 4.0,
            top + 10.0
        );
    }
    let axis_y = ROWS.len() as f64 * (PANEL + GAP) + 4.0;
    for frac in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let t = t_end * frac;
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t:.1} s</text>",
            x(t),
            axis_y + 12.0
        );
    }
    out.push_str("\n</svg>\n");
}

/// A log2 latency histogram as bars, from the first counted bucket to the last.
fn histogram_svg(l: &Latency, name: &str, out: &mut String) {
    let Some(first) = l.buckets.iter().position(|&n| n > 0) else {
        return;
    };
    let last = l.buckets.iter().rposition(|&n| n > 0).unwrap_or(first);
    let n = last - first + 1;
    let max = l.buckets[first..=last]
        .iter()
        .copied()
        .max()
        .unwrap_or(1)
        .max(1);
    const H: f64 = 140.0;
    let bw = (W - LEFT - RIGHT) / n as f64;
    let _ = writeln!(
        out,
        "<h3>{} <small>({} timed, p50 &lt; {}, p99 &lt; {})</small></h3>\n\
         <svg class=\"histogram\" viewBox=\"0 0 {W} {}\" role=\"img\" aria-label=\"{}\">",
        esc(name),
        l.count,
        duration_ns(l.p50_ns),
        duration_ns(l.p99_ns),
        H + 30.0,
        esc(name)
    );
    for (i, &count) in l.buckets[first..=last].iter().enumerate() {
        let bh = count as f64 / max as f64 * (H - 10.0);
        let x = LEFT + i as f64 * bw;
        let _ = write!(
            out,
            "<rect class=\"bar\" x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{bh:.1}\" fill=\"#1565c0\"><title>{count}</title></rect>",
            x + 1.0,
            H - bh,
            (bw - 2.0).max(1.0)
        );
        if n <= 12 || i % 2 == 0 {
            let _ = write!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">&lt;{}</text>",
                x + bw / 2.0,
                H + 14.0,
                duration_ns(1u64.checked_shl((first + i + 1) as u32).unwrap_or(u64::MAX))
            );
        }
    }
    let _ = writeln!(
        out,
        "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{H}\" x2=\"{:.1}\" y2=\"{H}\"/><text x=\"4\" y=\"{:.1}\">calls per bucket</text><text x=\"4\" y=\"14\">{max}</text>\n</svg>",
        W - RIGHT,
        H / 2.0
    );
}

/// The advice curve: recycled share (left axis) and the memory the rings can hold (right
/// axis) against ring size on a log2 axis, the target, the current and advised sizes marked.
fn curve_svg(adv: &Advice, out: &mut String) {
    const H: f64 = 230.0;
    const TOP: f64 = 26.0;
    const BOTTOM: f64 = 200.0;
    let c = &adv.curve;
    let lx = |n: u32| f64::from(n.max(1)).log2();
    let (x0, x1) = (lx(c[0].ring_size), lx(c[c.len() - 1].ring_size));
    let x = |n: u32| LEFT + (lx(n) - x0) / (x1 - x0).max(1e-9) * (W - LEFT - RIGHT);
    let y = |share: f64| BOTTOM - share.clamp(0.0, 1.0) * (BOTTOM - TOP);
    let most = c.iter().map(|p| p.ring_bytes).max().unwrap_or(0);
    let _ = writeln!(
        out,
        "<svg class=\"curve\" viewBox=\"0 0 {W} {H}\" role=\"img\" aria-label=\"advice curve\">"
    );
    for share in [0.0, 0.5, 1.0] {
        let _ = write!(
            out,
            "<line class=\"grid\" x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\"/><text x=\"{2:.1}\" y=\"{3:.1}\" text-anchor=\"end\">{4:.0}%</text>",
            y(share),
            W - RIGHT,
            LEFT - 6.0,
            y(share) + 4.0,
            share * 100.0
        );
    }
    let _ = write!(
        out,
        "<text x=\"4\" y=\"{:.1}\">recycled share</text>",
        (TOP + BOTTOM) / 2.0
    );
    let recycled: Vec<String> = c
        .iter()
        .map(|p| format!("{:.1},{:.1}", x(p.ring_size), y(p.recycled_rate)))
        .collect();
    let _ = write!(
        out,
        "<line class=\"target\" x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"#777\" stroke-dasharray=\"5,4\"/>\
         <text x=\"{1:.1}\" y=\"{2:.1}\">target {3:.1}%</text>",
        y(adv.target),
        LEFT + 4.0,
        y(adv.target) - 4.0,
        adv.target * 100.0
    );
    if most > 0 {
        let memory: Vec<String> = c
            .iter()
            .map(|p| {
                format!(
                    "{:.1},{:.1}",
                    x(p.ring_size),
                    y(p.ring_bytes as f64 / most as f64)
                )
            })
            .collect();
        let _ = write!(
            out,
            "<polyline class=\"memory\" fill=\"none\" stroke=\"#8e24aa\" stroke-width=\"1.5\" stroke-dasharray=\"2,3\" points=\"{}\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"#8e24aa\" text-anchor=\"end\">memory {}</text>",
            memory.join(" "),
            W - RIGHT - 4.0,
            TOP - 10.0,
            bytes(most),
        );
    }
    let _ = write!(
        out,
        "<polyline class=\"recycled\" fill=\"none\" stroke=\"#1565c0\" stroke-width=\"2.2\" points=\"{}\"/>",
        recycled.join(" ")
    );
    for p in c {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
            x(p.ring_size),
            BOTTOM + 16.0,
            p.ring_size
        );
    }
    let mark = |n: u32, class: &str, color: &str, label: &str, out: &mut String| {
        if let Some(p) = c.iter().find(|p| p.ring_size == n) {
            // The label stays inside the chart: left of a point near the right edge, below
            // one near the top.
            let (cx, cy) = (x(n), y(p.recycled_rate));
            let anchor = if cx > W - RIGHT - 80.0 {
                "end"
            } else if cx < LEFT + 80.0 {
                "start"
            } else {
                "middle"
            };
            let ty = if cy < TOP + 20.0 { cy + 18.0 } else { cy - 9.0 };
            let _ = write!(
                out,
                "<circle class=\"{class}\" cx=\"{cx:.1}\" cy=\"{cy:.1}\" r=\"5\" fill=\"{color}\"/>\
                 <text x=\"{cx:.1}\" y=\"{ty:.1}\" text-anchor=\"{anchor}\" fill=\"{color}\">{label} {n}: {:.1}%</text>",
                p.recycled_rate * 100.0
            );
        }
    };
    mark(adv.current_size, "current", "#e07000", "now", out);
    if adv.recommended_size != adv.current_size {
        mark(
            adv.recommended_size,
            "recommended",
            "#2e7d32",
            "advised",
            out,
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">ring size (log scale)</text>\n</svg>",
        (LEFT + W - RIGHT) / 2.0,
        H - 4.0
    );
    let memory = if most > 0 {
        format!(
            "<span style=\"color:#8e24aa\">dotted: memory the rings of {} can hold, up to {} (top right)</span>",
            queues_text(adv.queues),
            bytes(most)
        )
    } else {
        "no memory added at any size (the dmabuf pins the buffers whatever the ring size)".into()
    };
    let _ = writeln!(
        out,
        "<p class=\"legend\"><span style=\"color:#1565c0\">line: predicted recycled share</span> · \
         dashed: the target · {memory} · <span style=\"color:#e07000\">●</span> current size · \
         <span style=\"color:#2e7d32\">●</span> advised size</p>"
    );
}

/// Which backend served each hook, or why none did; and what ppscope's programs cost.
fn coverage(snap: &Snapshot, out: &mut String) {
    out.push_str("<h2 id=\"coverage\">Hook coverage and ppscope's own cost</h2>\n");
    if snap.backends.is_empty() {
        out.push_str("<p>No hooks: not a live source.</p>\n");
    } else {
        out.push_str(
            "<table class=\"hooks\"><tr><th>hook</th><th>served by</th>\
             <th>events missed since it attached (the kernel's count)</th></tr>",
        );
        for (name, h) in &snap.backends {
            let by = match h.backend {
                Some(b) => format!("{b:?}").to_lowercase(),
                None => format!("none: {}", h.reasons.join("; ")),
            };
            let missed = match h.missed_note() {
                MissedNote::NotAttached => String::new(),
                MissedNote::Unknown => "?".into(),
                MissedNote::None => "none".into(),
                MissedNote::Some(what) => what,
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{}</td><td class=\"missed\">{}</td></tr>",
                esc(name),
                esc(&by),
                esc(&missed)
            );
        }
        out.push_str("</table>\n");
        if snap
            .backends
            .values()
            .any(|h| h.missed_note() == MissedNote::Unknown)
        {
            out.push_str(
                "<p class=\"legend\">?: the kernel counts none for that hook's programs here, \
                 or this is a replay (a recording does not carry the counts).</p>\n",
            );
        }
    }
    match &snap.overhead {
        Some(o) => {
            let _ = writeln!(
                out,
                "<p class=\"cost\">ppscope's programs: {} runs, {} per run, {:.3}% of one CPU.</p>",
                o.runs,
                o.ns_per_run
                    .map_or("?".to_string(), |ns| format!("{ns:.0} ns")),
                o.cpu_share * 100.0
            );
        }
        None => {
            let _ = writeln!(
                out,
                "<p class=\"cost\">ppscope's own cost: ? ({}).</p>",
                esc(OWN_COST_UNKNOWN)
            );
        }
    }
}

/// `simulate --html`: each advised profile, its advice curve first.
pub fn simulate(results: &[SimulateResult]) -> String {
    let name = |r: &SimulateResult| {
        esc(r
            .scenario
            .as_deref()
            .or(r.pool.as_deref())
            .unwrap_or_default())
    };
    let mut body = String::from("<h2 id=\"verdict\">Verdict</h2>\n");
    for r in results {
        let _ = writeln!(
            body,
            "<div class=\"verdict\"><b>{}</b>{}<br>{}<br><b>Knob:</b> <span class=\"knob\">{}</span></div>",
            name(r),
            if r.synthetic { " (built-in scenario)" } else { "" },
            esc(&r.summary),
            esc(&r.advice.knob_text)
        );
    }
    for r in results {
        let _ = writeln!(body, "<h2 class=\"pool\">{}</h2>", name(r));
        if let Some(d) = &r.description {
            let _ = writeln!(body, "<p>{}</p>", esc(d));
        }
        if r.advice.curve.len() >= 2 {
            body.push_str("<h3>Advice curve</h3>\n");
            curve_svg(&r.advice, &mut body);
        }
        evidence(&r.advice, &mut body);
    }
    page(
        "ppscope simulate report",
        &format!("{} profile(s) replayed at other ring sizes", results.len()),
        &body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advice::scenario;

    /// A starving pool (the gve devmem scenario's advice) with a timeline where the chain
    /// shows: slow path, ring-full returns, full-budget polls, drops, in that order of time.
    fn starving() -> Snapshot {
        let sc = scenario::gve_devmem_alltoall();
        let adv = crate::advice::advise(&sc.profile, &sc.context, 0.99);
        let mut p = PoolView::unprobed(3, Some(2), Some("eth1".into()));
        p.ring_size = Some(adv.current_size);
        p.alloc.ring = Some(10);
        p.alloc.slow = Some(90);
        p.ring_hit_rate = Some(0.1);
        p.slow_path_latency = Latency::from_log2(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 9, 2], 90_000);
        p.advice = Some(adv);
        let mut s = Snapshot::with_pools("7.2.0-test <lab>", 3.0, vec![p]);
        s.timeline = (1..=3u32)
            .map(|i| TimelineStep {
                t: f64::from(i),
                devices: vec![DeviceStep {
                    ifname: Some("eth1".into()),
                    allocs: Some(1000),
                    slow: Some(100 * u64::from(i)),
                    ring_full: Some(50 * u64::from(i)),
                    napi_full_budget: Some(u64::from(i)),
                    drops: Some(if i == 3 { 7 } else { 0 }),
                    ..Default::default()
                }],
            })
            .collect();
        s
    }

    #[test]
    fn the_verdict_comes_first_then_the_pool_and_its_pictures() {
        let html = diagnose(&starving());
        let at = |needle: &str| {
            html.find(needle)
                .unwrap_or_else(|| panic!("no {needle:?} in the report"))
        };
        assert!(html.starts_with("<!DOCTYPE html>"));
        // Verdict, then the pool's section, then coverage, in that order.
        assert!(at("id=\"verdict\"") < at("class=\"verdict starving\""));
        assert!(at("class=\"verdict starving\"") < at("class=\"pool\""));
        assert!(at("class=\"pool\"") < at("class=\"timeline\""));
        assert!(at("class=\"timeline\"") < at("class=\"histogram\""));
        assert!(at("class=\"histogram\"") < at("class=\"curve\""));
        assert!(at("class=\"curve\"") < at("id=\"coverage\""));
        // What to change, with the knob.
        assert!(html.contains("<b>Knob:</b>"), "{html}");
        // The chain's rows, each drawn.
        for class in ["slow", "ring_full", "napi_full_budget", "drops"] {
            assert!(
                html.contains(&format!("class=\"series {class}\"")),
                "no {class} series"
            );
        }
        // The curve with the current and recommended sizes marked, and the target.
        for class in ["recycled", "current", "recommended", "target"] {
            assert!(html.contains(&format!("class=\"{class}\"")), "no {class}");
        }
        // Text from the kernel or the user is escaped.
        assert!(html.contains("7.2.0-test &lt;lab&gt;"), "not escaped");
        assert!(!html.contains("<lab>"));
    }

    #[test]
    fn the_page_is_self_contained() {
        let html = diagnose(&starving());
        for fetch in [
            "<script", "src=", "href=", "@import", "url(", "http://", "https://",
        ] {
            assert!(
                !html.contains(fetch),
                "the report fetches or runs {fetch:?}"
            );
        }
    }

    #[test]
    fn a_row_no_hook_counts_says_so_instead_of_a_flat_zero() {
        let mut s = starving();
        for step in &mut s.timeline {
            step.devices[0].napi_full_budget = None;
        }
        let html = diagnose(&s);
        assert!(!html.contains("class=\"series napi_full_budget\""));
        assert!(html.contains("? (no hook counts it on this kernel)"));
    }

    #[test]
    fn the_hooks_table_says_what_each_hooks_programs_missed() {
        use crate::snapshot::{Backend, HookMissed, HookStatus};
        let hook = |backend, missed| HookStatus {
            reasons: vec!["no such function".into()],
            ..crate::testing::hook_status("h", backend, missed)
        };
        let mut s = starving();
        let missed = |runs, hits| {
            Some(HookMissed {
                skipped_runs: runs,
                kprobe_hits_dropped: hits,
            })
        };
        s.backends = [
            ("alloc", hook(Some(Backend::Kprobe), missed(3, Some(40)))),
            ("alloc_frag", hook(Some(Backend::Kprobe), missed(0, None))),
            ("recycle", hook(Some(Backend::Fentry), missed(0, None))),
            ("refill", hook(Some(Backend::Tracepoint), None)),
            ("slow_path", hook(None, None)),
        ]
        .into_iter()
        .map(|(n, h)| (n.to_string(), h))
        .collect();
        let html = diagnose(&s);
        let cells: Vec<&str> = html
            .split("<td class=\"missed\">")
            .skip(1)
            .map(|c| c.split("</td>").next().unwrap())
            .collect();
        assert_eq!(
            cells,
            [
                "the kernel skipped 3 runs of its programs and dropped 40 hits of its kprobes: \
                 the figures lack up to that many events",
                // On kprobes, a dropped-hit count not read is not taken for none.
                "the kernel skipped no run of its programs, but its kprobes&#39; dropped hits \
                 could not be read: the figures may lack events",
                "none",
                "?",
                "",
            ]
        );
        assert!(html.contains("<p class=\"legend\">?: the kernel counts none"));
        for h in s.backends.values_mut() {
            h.missed = h.backend.map(|_| HookMissed {
                skipped_runs: 0,
                kprobe_hits_dropped: Some(0),
            });
        }
        // Every hook counted: no "?" to explain (the curve has a legend of its own).
        assert!(!diagnose(&s).contains("?: the kernel counts none"));
    }

    #[test]
    fn simulate_draws_each_profiles_curve() {
        let results = crate::report::simulate::scenario("gve-devmem-alltoall", 0.99).unwrap();
        let html = simulate(&results);
        assert!(html.contains("class=\"curve\""));
        assert!(html.contains("gve-devmem-alltoall"));
        assert!(html.contains("class=\"recommended\""));
    }

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc("<a href=\"x\">&'"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}
