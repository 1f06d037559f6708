//! Rendering: a pure function of [`App`]. No I/O here, and nothing may panic on an empty
//! snapshot or a 1×1 terminal (every size below is computed with saturating arithmetic and
//! ratatui clips what does not fit).
use ratatui::{
    buffer::Buffer,
    layout::{Alignment, Constraint, Layout, Rect},
    style::{Color, Modifier, Style},
    symbols::Marker,
    text::{Line, Span},
    widgets::{
        Axis, Block, Borders, Cell, Chart, Clear, Dataset, GraphType, LegendPosition, Paragraph,
        Row, Sparkline, Table, TableState, Wrap,
    },
    Frame,
};

use ppscope::{
    report::duration_ns,
    snapshot::{Advice, Backend, Latency, PoolView, SiteView, Snapshot, Verdict},
};

use crate::{
    app::{App, Pane, SortKey, StreamState},
    fmt,
    health::{assess, per_s, Basis, Health, Metrics},
    keys::KEYS,
};

fn health_style(h: Health) -> Style {
    match h {
        Health::Starving => Style::default().fg(Color::Red).add_modifier(Modifier::BOLD),
        Health::Warn => Style::default().fg(Color::Yellow),
        Health::Ok => Style::default().fg(Color::Green),
        Health::Unknown => Style::default().fg(Color::Gray),
    }
}

fn pane_block(title: String, focused: bool) -> Block<'static> {
    let style = if focused {
        Style::default()
            .fg(Color::Cyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default().fg(Color::DarkGray)
    };
    Block::default()
        .borders(Borders::ALL)
        .border_style(style)
        .title(Span::styled(title, style))
}

pub fn render(f: &mut Frame, app: &App) {
    let area = f.area();
    if area.width < 30 || area.height < 8 {
        tiny(f, app, area);
        return;
    }
    let footer_h = if area.height >= 16 { 2 } else { 1 };
    let headline_h = if area.height >= 14 { 2 } else { 1 };
    let [title_a, head_a, main_a, foot_a] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(headline_h),
        Constraint::Min(0),
        Constraint::Length(footer_h),
    ])
    .areas(area);
    title(f, app, title_a);
    headline(f, app, head_a);
    main(f, app, main_a);
    footer(f, app, foot_a);
    if app.help {
        help(f, area);
    }
}

/// `1 pool`, `3 pools`.
fn pools(n: usize) -> String {
    if n == 1 {
        "1 pool".into()
    } else {
        format!("{n} pools")
    }
}

/// Below 30×8 there is no room for panes: one wrapped sentence with the worst pool.
fn tiny(f: &mut Frame, app: &App, area: Rect) {
    let (starving, warn) = app.counts();
    let mut text = format!(
        "ppscope top: {}, {starving} starving, {warn} warn",
        pools(app.metrics.len())
    );
    if let Some((i, m)) = worst(app) {
        text += &format!("; worst {} {}", m.label, m.health.word());
        if let Some(a) = app.snap.as_ref().and_then(|s| s.pools[i].advice.as_ref()) {
            text += &format!(" ({})", verdict_short(a));
        }
    }
    text += ". q quits";
    f.render_widget(Paragraph::new(text).wrap(Wrap { trim: true }), area);
}

/// The worst pool of the snapshot (filter or not): the one the headline is about.
fn worst(app: &App) -> Option<(usize, &Metrics)> {
    let pressure = |m: &Metrics| m.slow_s.unwrap_or(0.0) + m.full_s.unwrap_or(0.0);
    app.metrics.iter().enumerate().max_by(|(ia, a), (ib, b)| {
        a.health
            .cmp(&b.health)
            .then(pressure(a).total_cmp(&pressure(b)))
            // The first of equals wins (busiest, in the source's order).
            .then(ib.cmp(ia))
    })
}

fn verdict_short(a: &Advice) -> String {
    let n = a.recommended_size;
    match a.verdict {
        Verdict::Keep => "keep".into(),
        Verdict::Grow => format!("grow→{n}"),
        Verdict::Shrink => format!("shrink→{n}"),
    }
}

fn title(f: &mut Frame, app: &App, area: Rect) {
    let (starving, warn) = app.counts();
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut spans = vec![Span::styled(" ppscope top ", bold.fg(Color::Cyan))];
    if let Some(s) = &app.snap {
        spans.push(Span::raw(format!("kernel {} │ ", s.kernel)));
        spans.push(Span::raw(pools(s.pools.len())));
        if starving > 0 {
            spans.push(Span::styled(
                format!(", {starving} starving"),
                health_style(Health::Starving),
            ));
        }
        if warn > 0 {
            spans.push(Span::styled(
                format!(", {warn} warn"),
                health_style(Health::Warn),
            ));
        }
    }
    spans.push(Span::raw(format!(
        " │ sort {}{}",
        app.sort.name(),
        if app.reverse { " ↑" } else { " ↓" }
    )));
    if app.editing || !app.filter.is_empty() {
        spans.push(Span::styled(
            format!(
                " │ filter: {}{}",
                app.filter,
                if app.editing { "_" } else { "" }
            ),
            Style::default().fg(Color::Yellow),
        ));
        spans.push(Span::raw(format!(
            " ({} of {})",
            app.rows.len(),
            app.metrics.len()
        )));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The answer to "which pool is starving and what should I do", in one or two lines.
fn headline(f: &mut Frame, app: &App, area: Rect) {
    let line = match (&app.snap, worst(app)) {
        (None, _) => Line::from(format!(
            "Waiting for the first snapshot from {} (every {})…",
            app.source(),
            fmt::interval(app.interval)
        )),
        (Some(s), None) => Line::from(format!(
            "No page_pool activity in this interval ({}).",
            s.quiet_hint().text()
        )),
        (Some(s), Some((i, m))) => {
            let p = &s.pools[i];
            let what = match m.health {
                Health::Starving => "STARVING",
                Health::Warn => "warn",
                Health::Ok => "worst pool, healthy",
                Health::Unknown => "busiest pool, health unknown",
            };
            let advice = match &p.advice {
                Some(a) => a.summary(),
                None => format!(
                    "ring hit {}, slow {}/s, ring full {}/s (no advice: {})",
                    m.hit_text(),
                    fmt::si(m.slow_s),
                    fmt::si(m.full_s),
                    s.advice_unavailable().unwrap_or("too little measured")
                ),
            };
            Line::from(vec![
                Span::styled(format!("{} {what}: ", m.label), health_style(m.health)),
                Span::raw(advice),
            ])
        }
    };
    f.render_widget(Paragraph::new(line).wrap(Wrap { trim: true }), area);
}

fn main(f: &mut Frame, app: &App, area: Rect) {
    if app.zoom {
        match app.focus {
            Pane::System if app.has_system() => system(f, app, area),
            _ => detail(f, app, area, false),
        }
        return;
    }
    let wanted = (app.rows.len() as u16).saturating_add(3).max(5);
    if area.height < 12 {
        table(f, app, area);
        return;
    }
    let table_h = wanted.min((area.height * 45 / 100).max(6));
    let [top, bottom] =
        Layout::vertical([Constraint::Length(table_h), Constraint::Min(0)]).areas(area);
    table(f, app, top);
    if app.has_system() && bottom.width >= 110 {
        let [l, r] = Layout::horizontal([Constraint::Percentage(58), Constraint::Percentage(42)])
            .areas(bottom);
        detail(f, app, l, false);
        system(f, app, r);
    } else if app.focus == Pane::System && app.has_system() {
        system(f, app, bottom);
    } else {
        detail(f, app, bottom, app.has_system());
    }
}

/// A column of the pools table: its header, width, priority, sort key and cell, in one place.
/// Adding a column is a variant here, its place in `ALL` and its line in each `match`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Column {
    Health,
    Pool,
    SizeRing,
    Fill,
    Alloc,
    Fast,
    Hit,
    Slow,
    Full,
    P99,
    Inflight,
    Advice,
}

impl Column {
    /// Left to right.
    const ALL: [Column; 12] = [
        Column::Health,
        Column::Pool,
        Column::SizeRing,
        Column::Fill,
        Column::Alloc,
        Column::Fast,
        Column::Hit,
        Column::Slow,
        Column::Full,
        Column::P99,
        Column::Inflight,
        Column::Advice,
    ];

    fn title(self) -> &'static str {
        match self {
            Column::Health => "HEALTH",
            Column::Pool => "POOL",
            Column::SizeRing => "SIZE/RING",
            Column::Fill => "FILL",
            Column::Alloc => "ALLOC/s",
            Column::Fast => "FAST%",
            Column::Hit => "HIT%",
            Column::Slow => "SLOW/s",
            Column::Full => "FULL/s",
            Column::P99 => "SLOW p99",
            Column::Inflight => "INFLIGHT",
            Column::Advice => "ADVICE",
        }
    }

    /// Characters; `None` for the pool label, sized from the labels.
    fn width(self) -> Option<u16> {
        Some(match self {
            Column::Pool => return None,
            Column::Health | Column::Fast | Column::Hit => 6,
            Column::Fill => 5,
            Column::Alloc | Column::Slow | Column::Full => 7,
            Column::P99 | Column::Inflight => 8,
            Column::SizeRing | Column::Advice => 11,
        })
    }

    /// Columns with the lowest priority go first when the terminal is narrow.
    fn priority(self) -> u8 {
        match self {
            Column::Health | Column::Pool => 10,
            Column::Hit | Column::Slow | Column::Full => 9,
            Column::Alloc => 8,
            Column::P99 => 7,
            Column::Fast => 6,
            Column::SizeRing => 5,
            Column::Advice => 4,
            Column::Inflight => 3,
            Column::Fill => 2,
        }
    }

    /// The sort key this column's header marks, if the table sorts by it.
    fn sort(self) -> Option<SortKey> {
        match self {
            Column::Health => Some(SortKey::Health),
            Column::Pool => Some(SortKey::Pool),
            Column::Alloc => Some(SortKey::Alloc),
            Column::Fast => Some(SortKey::Fast),
            Column::Hit => Some(SortKey::Hit),
            Column::Slow => Some(SortKey::Slow),
            Column::Full => Some(SortKey::Full),
            Column::P99 => Some(SortKey::P99),
            Column::Inflight => Some(SortKey::Inflight),
            Column::SizeRing | Column::Fill | Column::Advice => None,
        }
    }

    fn cell(self, p: &PoolView, m: &Metrics) -> String {
        match self {
            Column::Health => m.health.word().to_string(),
            Column::Pool => m.label.clone(),
            Column::SizeRing => {
                let n = |v: Option<u32>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
                format!("{}/{}", n(p.pool_size), n(p.ring_size))
            }
            Column::Fill => m
                .fill
                .map_or_else(|| "?".into(), |r| format!("{:.0}%", r * 100.0)),
            Column::Alloc => fmt::si(m.alloc_s),
            Column::Fast => fmt::pct(m.fast),
            Column::Hit => m.hit_text(),
            Column::Slow => fmt::si(m.slow_s),
            Column::Full => fmt::si(m.full_s),
            Column::P99 => fmt::dur(m.p99_ns),
            Column::Inflight => fmt::bytes(m.inflight_bytes),
            Column::Advice => p.advice.as_ref().map_or_else(|| "-".into(), verdict_short),
        }
    }
}

fn table(f: &mut Frame, app: &App, area: Rect) {
    let block = pane_block(
        format!(" pools {}/{} ", app.rows.len(), app.metrics.len()),
        app.focus == Pane::Pools,
    );
    let inner = block.inner(area);
    f.render_widget(block, area);
    let Some(snap) = &app.snap else {
        return;
    };
    if app.rows.is_empty() {
        let msg = if app.metrics.is_empty() {
            "no active pools"
        } else {
            "no pool matches the filter"
        };
        f.render_widget(Paragraph::new(msg), inner);
        return;
    }
    let label_w = app
        .metrics
        .iter()
        .map(|m| m.label.chars().count())
        .max()
        .unwrap_or(4)
        .clamp(6, 20) as u16;
    // Drop the least important columns until the rest fit.
    let mut shown: Vec<Column> = Column::ALL.to_vec();
    let width =
        |cols: &[Column]| -> u16 { cols.iter().map(|c| c.width().unwrap_or(label_w) + 1).sum() };
    while width(&shown) > inner.width.saturating_add(1) && shown.len() > 2 {
        let (pos, _) = shown
            .iter()
            .enumerate()
            .min_by_key(|(_, c)| c.priority())
            .expect("more than two columns");
        shown.remove(pos);
    }
    let header = Row::new(shown.iter().map(|c| {
        let mut t = c.title().to_string();
        if c.sort() == Some(app.sort) {
            t.push(if app.reverse { '↑' } else { '↓' });
        }
        Cell::from(t)
    }))
    .style(Style::default().add_modifier(Modifier::BOLD | Modifier::UNDERLINED));
    // Only the rows that fit are built: 500 pools cost 20 rows of strings per frame.
    let body_h = inner.height.saturating_sub(1).max(1) as usize;
    let offset = app.cursor.saturating_sub(body_h - 1);
    let rows = app.rows.iter().skip(offset).take(body_h).map(|&i| {
        let (p, m) = (&snap.pools[i], &app.metrics[i]);
        Row::new(shown.iter().map(|c| Cell::from(c.cell(p, m)))).style(health_style(m.health))
    });
    let widths = shown
        .iter()
        .map(|c| Constraint::Length(c.width().unwrap_or(label_w)));
    let table = Table::new(rows, widths)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("");
    let mut state = TableState::default().with_selected(Some(app.cursor - offset));
    f.render_stateful_widget(table, inner, &mut state);
}

/// bcc-style log2 histogram lines, bars scaled to `width`.
fn histogram_lines(l: &Latency, unit: &str, width: u16) -> Vec<Line<'static>> {
    let mut out = vec![Line::from(format!(
        "{unit:>21} : {:<7} distribution",
        "count"
    ))];
    let bar_w = (width as usize).saturating_sub(34).clamp(4, 40);
    let max = l.buckets.iter().copied().max().unwrap_or(0).max(1);
    let first = l.buckets.iter().position(|n| *n > 0).unwrap_or(0);
    for (i, n) in l.buckets.iter().enumerate().skip(first) {
        let lo = if i == 0 { 0 } else { 1u64 << i };
        let hi = (1u64 << (i + 1)) - 1;
        let stars = ((*n as u128 * bar_w as u128) / max as u128) as usize;
        out.push(Line::from(format!(
            "{lo:>9} -> {hi:<9}: {n:<7} |{:<bar_w$}|",
            "*".repeat(stars)
        )));
    }
    out
}

fn share(part: Option<u64>, total: Option<u64>) -> String {
    match (part, total) {
        (Some(p), Some(t)) if t > 0 => format!("{:.1}%", p as f64 * 100.0 / t as f64),
        _ => "?".into(),
    }
}

fn detail_text(
    p: &PoolView,
    m: &Metrics,
    snap: &Snapshot,
    with_hist: bool,
    width: u16,
) -> Vec<Line<'static>> {
    let secs = snap.duration_seconds;
    let mut lines = Vec::new();
    let dim = Style::default().fg(Color::Gray);
    let mut ident = vec![p.label()];
    if let Some(d) = &p.driver {
        ident.push(format!("driver {d}"));
    }
    if let Some(q) = p.gve_queue {
        ident.push(format!("gve rx queue {q}"));
    }
    if let Some(id) = p.netlink_id {
        ident.push(format!("netlink id {id}"));
    }
    if p.memory_provider == Some(true) {
        ident.push("memory provider".into());
    }
    ident.push(p.pool.clone());
    ident.extend(p.address.clone());
    lines.push(Line::styled(ident.join("  "), health_style(m.health)));
    // What to do comes right after which pool it is: the rest is the evidence.
    match &p.advice {
        Some(adv) => {
            let style = match adv.verdict {
                Verdict::Grow => health_style(Health::Starving),
                Verdict::Shrink => Style::default().fg(Color::Cyan),
                Verdict::Keep => health_style(Health::Ok),
            };
            lines.push(Line::from(vec![
                Span::styled("advice ", style.add_modifier(Modifier::BOLD)),
                Span::styled(adv.summary(), style),
            ]));
        }
        None => lines.push(Line::styled(
            match snap.advice_unavailable() {
                Some(why) => format!("advice: none ({why})"),
                None => "advice: none (too little measured for a burst profile)".to_string(),
            },
            dim,
        )),
    }
    let n = |v: Option<u32>| v.map_or_else(|| "?".to_string(), |v| v.to_string());
    let mut size = format!(
        "pool_size {}  ring {}  fill {}",
        n(p.pool_size),
        n(p.ring_size),
        n(p.ring_fill)
    );
    if let Some(pages) = p.inflight_pages {
        size += &format!(
            "  inflight {pages} pages ({})",
            fmt::bytes(m.inflight_bytes)
        );
    } else if m.inflight_bytes.is_some() {
        size += &format!("  inflight {}", fmt::bytes(m.inflight_bytes));
    }
    lines.push(Line::from(size));
    if let Some(t) = &p.teardown {
        lines.push(Line::from(format!(
            "destroyed: {} release attempt(s), {} pages still out",
            t.attempts, t.inflight_pages
        )));
    }
    let a = &p.alloc;
    lines.push(Line::from(format!(
        "alloc {}/s  cache {}  ring {}  slow {}   ring hit {}  fast path {}",
        fmt::si(m.alloc_s),
        share(a.cache, a.total),
        share(a.ring, a.total),
        share(a.slow, a.total),
        m.hit_text(),
        fmt::pct(m.fast)
    )));
    let r = &p.recycle;
    lines.push(Line::from(format!(
        "recycle {}/s  cached {}  ring {}  ring full {} ({}/s)",
        fmt::si(per_s(r.total, secs)),
        share(r.cached, r.total),
        share(r.ring, r.total),
        share(r.ring_full, r.total),
        fmt::si(m.full_s)
    )));
    lines.push(Line::from(format!(
        "pages from allocator {}/s  released {}/s",
        fmt::si(per_s(p.pages.allocated, secs)),
        fmt::si(per_s(p.pages.released, secs))
    )));
    // A verdict read from packets or pages cycled (a kernel that does not split allocations):
    // its basis and key figure, since the lines above are `?` (`diagnose` gives the sentence
    // with its uncertainty). A verdict from the split is the lines above.
    let verdict = assess(p, secs);
    if matches!(verdict.basis, Basis::Packets | Basis::Churn) {
        lines.push(Line::styled(
            format!(
                "health {} ({}): {}",
                verdict.health.word(),
                verdict.basis.name(),
                verdict.figure
            ),
            health_style(verdict.health),
        ));
    }
    if p.alloc_source.is_some() || p.recycle_source.is_some() {
        lines.push(Line::styled(
            "(split from the kernel's own page_pool stats: no probe measured it here)",
            dim,
        ));
    }
    if let Some(adv) = &p.advice {
        for e in &adv.evidence {
            lines.push(Line::styled(format!("  - {e}"), dim));
        }
        lines.push(Line::styled(
            format!("  confidence: {}", adv.confidence.reason),
            dim,
        ));
    }
    match &p.slow_path_latency {
        Some(l) => {
            lines.push(Line::from(format!(
                "slow path {} calls  p50 < {}  p99 < {}  max < {}",
                l.count,
                duration_ns(l.p50_ns),
                duration_ns(l.p99_ns),
                duration_ns(l.max_ns)
            )));
            if with_hist {
                lines.extend(histogram_lines(l, "slow path nsecs", width));
            }
        }
        None => lines.push(Line::styled("slow path latency ?", dim)),
    }
    lines
}

/// Three sparklines (ring hit %, fast path %, slow/s) over the pool's kept history.
fn sparklines(f: &mut Frame, app: &App, key: &str, m: &Metrics, area: Rect) {
    let Some(h) = app.history.get(key) else {
        return;
    };
    let rows = Layout::vertical([Constraint::Length(1); 3]).split(area);
    let series = [
        ("ring hit", &h.hit, Some(1000), fmt::pct(m.hit)),
        ("fast path", &h.fast, Some(1000), fmt::pct(m.fast)),
        ("slow/s", &h.slow, None, fmt::si(m.slow_s)),
    ];
    for ((name, q, max, now), row) in series.into_iter().zip(rows.iter()) {
        let [l, s, v] = Layout::horizontal([
            Constraint::Length(10),
            Constraint::Min(1),
            Constraint::Length(7),
        ])
        .areas(*row);
        f.render_widget(Paragraph::new(name), l);
        f.render_widget(Paragraph::new(now).alignment(Alignment::Right), v);
        // The newest points that fit, oldest on the left.
        let skip = q.len().saturating_sub(s.width as usize);
        let data: Vec<Option<u64>> = q.iter().skip(skip).copied().collect();
        let mut spark = Sparkline::default()
            .data(&data)
            .style(Style::default().fg(Color::Cyan))
            .absent_value_symbol("?");
        if let Some(max) = max {
            spark = spark.max(max);
        }
        f.render_widget(spark, s);
    }
}

/// `system_hidden`: devmem/gve exist but have no room beside it (Tab shows them).
fn detail(f: &mut Frame, app: &App, area: Rect, system_hidden: bool) {
    let sel = app
        .selected()
        .and_then(|i| app.snap.as_ref().map(|s| (&s.pools[i], &app.metrics[i], s)));
    let hint = if system_hidden {
        " (Tab: devmem/gve)"
    } else {
        ""
    };
    let title = match sel {
        Some((_, m, _)) => format!(" {} detail{hint} ", m.label),
        None => " detail ".into(),
    };
    let block = pane_block(title, app.focus == Pane::Detail);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let Some((p, m, snap)) = sel else {
        return;
    };
    let wide = inner.width >= 100;
    let (text_a, graph_a) = if wide {
        let [l, r] = Layout::horizontal([Constraint::Percentage(58), Constraint::Min(0)])
            .spacing(1)
            .areas(inner);
        (l, r)
    } else if inner.height >= 8 {
        let [g, t] = Layout::vertical([Constraint::Length(4), Constraint::Min(0)]).areas(inner);
        (t, g)
    } else {
        (inner, Rect::default())
    };
    let lines = detail_text(p, m, snap, !wide, text_a.width);
    let scroll = app
        .detail_scroll
        .min((lines.len() as u16).saturating_sub(text_a.height.min(lines.len() as u16)));
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        text_a,
    );
    if graph_a.height >= 3 {
        let [spark_a, rest] =
            Layout::vertical([Constraint::Length(4), Constraint::Min(0)]).areas(graph_a);
        sparklines(f, app, &p.pool, m, spark_a);
        if !wide {
            return;
        }
        // Below the sparklines: the slow-path histogram and the advice curve, halves of the
        // room when the pool has both.
        let curve = p.advice.as_ref().filter(|a| a.curve.len() >= 2);
        let (hist_a, curve_a) = match (&p.slow_path_latency, curve) {
            (Some(_), Some(_)) => {
                let [h, c] =
                    Layout::vertical([Constraint::Percentage(45), Constraint::Min(0)]).areas(rest);
                (h, c)
            }
            (None, Some(_)) => (Rect::default(), rest),
            _ => (rest, Rect::default()),
        };
        if let Some(l) = &p.slow_path_latency {
            f.render_widget(
                Paragraph::new(histogram_lines(l, "slow path nsecs", hist_a.width)),
                hist_a,
            );
        }
        if let Some(adv) = curve {
            advice_chart(f, adv, curve_a);
        }
    }
}

/// The advice curve: the predicted recycled share against ring size (log2 axis), with the
/// memory the rings can hold (scaled to the largest size's) and the target, the current and
/// recommended sizes marked: what the verdict weighed, at a glance.
fn advice_chart(f: &mut Frame, adv: &Advice, area: Rect) {
    if area.height < 7 || area.width < 30 {
        return;
    }
    let x = |n: u32| f64::from(n.max(1)).log2();
    let (first, last) = (
        adv.curve[0].ring_size,
        adv.curve[adv.curve.len() - 1].ring_size,
    );
    let recycled: Vec<(f64, f64)> = adv
        .curve
        .iter()
        .map(|c| (x(c.ring_size), c.recycled_rate * 100.0))
        .collect();
    let most = adv.curve.iter().map(|c| c.ring_bytes).max().unwrap_or(0);
    let memory: Vec<(f64, f64)> = if most > 0 {
        adv.curve
            .iter()
            .map(|c| (x(c.ring_size), c.ring_bytes as f64 / most as f64 * 100.0))
            .collect()
    } else {
        Vec::new()
    };
    let target = [
        (x(first), adv.target * 100.0),
        (x(last), adv.target * 100.0),
    ];
    let at = |n: u32| {
        adv.curve
            .iter()
            .find(|c| c.ring_size == n)
            .map(|c| (x(n), c.recycled_rate * 100.0))
    };
    let now: Vec<(f64, f64)> = at(adv.current_size).into_iter().collect();
    let advised: Vec<(f64, f64)> = at(adv.recommended_size)
        .filter(|_| adv.recommended_size != adv.current_size)
        .into_iter()
        .collect();
    let target = Vec::from(target);
    let mut sets = vec![
        dataset("recycled %".into(), Color::Cyan, GraphType::Line, &recycled),
        dataset(
            format!("target {:.0}%", adv.target * 100.0),
            Color::DarkGray,
            GraphType::Line,
            &target,
        ),
    ];
    if !memory.is_empty() {
        sets.push(dataset(
            format!("memory (100% = {})", fmt::bytes(Some(most))),
            Color::Magenta,
            GraphType::Line,
            &memory,
        ));
    }
    if !now.is_empty() {
        sets.push(dataset(
            format!("now {}", adv.current_size),
            Color::Yellow,
            GraphType::Scatter,
            &now,
        ));
    }
    if !advised.is_empty() {
        sets.push(dataset(
            format!("advised {}", adv.recommended_size),
            Color::Green,
            GraphType::Scatter,
            &advised,
        ));
    }
    let chart = Chart::new(sets)
        .block(Block::default().title("advice curve: recycled % by ring size"))
        .x_axis(
            Axis::default()
                .bounds([x(first), x(last)])
                .labels([first.to_string(), last.to_string()]),
        )
        .y_axis(
            Axis::default()
                .bounds([0.0, 100.0])
                .labels(["0", "50", "100"]),
        )
        .legend_position(Some(LegendPosition::Left))
        .hidden_legend_constraints((Constraint::Percentage(60), Constraint::Percentage(70)));
    f.render_widget(chart, area);
}

/// A named series of the advice curve: a line, or points drawn as blocks.
fn dataset(name: String, color: Color, kind: GraphType, data: &[(f64, f64)]) -> Dataset<'_> {
    let (marker, style) = match kind {
        GraphType::Scatter => (
            Marker::Block,
            Style::default().fg(color).add_modifier(Modifier::BOLD),
        ),
        _ => (Marker::Braille, Style::default().fg(color)),
    };
    Dataset::default()
        .name(name)
        .marker(marker)
        .graph_type(kind)
        .style(style)
        .data(data)
}

fn site_line(name: &str, v: Option<&SiteView>, secs: f64, value: Option<&str>) -> Line<'static> {
    let Some(v) = v else {
        return Line::styled(
            format!("  {name:<18} not attached"),
            Style::default().fg(Color::Gray),
        );
    };
    let mut s = format!("  {name:<18} {}/s", fmt::si(per_s(Some(v.calls), secs)));
    if let Some(l) = &v.latency {
        s += &format!(
            "  p50 < {}  p99 < {}",
            duration_ns(l.p50_ns),
            duration_ns(l.p99_ns)
        );
    }
    if let Some(what) = value {
        if let Some(per) = v.value_per_call {
            s += &format!("  {per:.1} {what}/call");
        }
        if let Some(ns) = v.ns_per_value {
            s += &format!(
                "  {} per {}",
                duration_ns(ns as u64),
                what.trim_end_matches('s')
            );
        }
    }
    if v.errors > 0 {
        s += &format!("  errors {}", v.errors);
    }
    Line::from(s)
}

fn system_lines(s: &Snapshot, width: u16) -> Vec<Line<'static>> {
    let secs = s.duration_seconds;
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines = Vec::new();
    if let Some(d) = &s.devmem {
        lines.push(Line::styled("devmem TCP", bold));
        lines.push(site_line(
            "SO_DEVMEM_DONTNEED",
            d.dontneed.as_ref(),
            secs,
            Some("frags"),
        ));
        lines.push(site_line("dmabuf free", d.free.as_ref(), secs, None));
        lines.push(site_line(
            "provider alloc",
            d.provider_alloc.as_ref(),
            secs,
            None,
        ));
    }
    if let Some(g) = &s.gve {
        lines.push(Line::styled("gve", bold));
        lines.push(site_line("gve_alloc_buffer", g.alloc.as_ref(), secs, None));
        if g.queues.is_empty() {
            lines.push(Line::from("  no rx NAPI poll seen"));
        }
        for q in &g.queues {
            let p99 = q.poll.latency.as_ref().map(|l| l.p99_ns);
            lines.push(Line::from(format!(
                "  rx q{:<3} poll {}/s  p99 < {}  {} pkts/poll",
                q.queue,
                fmt::si(per_s(Some(q.poll.calls), secs)),
                p99.map_or_else(|| "?".into(), duration_ns),
                q.poll
                    .value_per_call
                    .map_or_else(|| "?".into(), |w| format!("{w:.1}"))
            )));
        }
    }
    if let Some(l) = s
        .devmem
        .as_ref()
        .and_then(|d| d.dontneed.as_ref()?.latency.as_ref())
    {
        lines.push(Line::from(""));
        lines.extend(histogram_lines(l, "dontneed nsecs", width));
    }
    if let Some(l) = s
        .gve
        .as_ref()
        .and_then(|g| g.alloc.as_ref()?.latency.as_ref())
    {
        lines.push(Line::from(""));
        lines.extend(histogram_lines(l, "gve alloc nsecs", width));
    }
    lines
}

fn system(f: &mut Frame, app: &App, area: Rect) {
    let block = pane_block(" devmem / gve ".into(), app.focus == Pane::System);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let Some(s) = &app.snap else { return };
    let lines = system_lines(s, inner.width);
    let scroll = app
        .system_scroll
        .min((lines.len() as u16).saturating_sub(inner.height.min(lines.len() as u16)));
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .scroll((scroll, 0)),
        inner,
    );
}

/// Hooks per backend: what serves the numbers on screen.
fn backends(s: &Snapshot) -> String {
    let (mut fentry, mut kprobe, mut tp, mut none, mut absent, mut off) = (0, 0, 0, 0, 0, 0);
    for h in s.backends.values() {
        match h.backend {
            Some(Backend::Fentry) => fentry += 1,
            Some(Backend::Kprobe) => kprobe += 1,
            Some(Backend::Tracepoint) => tp += 1,
            None if h.module_absent() => absent += 1,
            None if h.left_off() => off += 1,
            None => none += 1,
        }
    }
    if fentry + kprobe + tp + none + absent + off == 0 {
        return "hooks: none (not a live source)".into();
    }
    let mut out = match s.detail {
        Some(d) => format!("detail {} · hooks:", d.name()),
        None => String::from("hooks:"),
    };
    for (n, name) in [
        (fentry, "fentry"),
        (kprobe, "kprobe"),
        (tp, "tracepoint"),
        (none, "missing"),
        (absent, "module absent"),
        (off, "left off"),
    ] {
        if n > 0 {
            out += &format!(" {name} {n}");
        }
    }
    out
}

fn footer(f: &mut Frame, app: &App, area: Rect) {
    let mut status = vec![Span::raw(format!("{} · ", app.source()))];
    let state = if app.paused {
        Span::styled("paused", Style::default().fg(Color::Yellow))
    } else {
        match app.state {
            StreamState::Waiting => Span::raw("waiting"),
            StreamState::Running => Span::raw("running"),
            StreamState::Ended => Span::styled("ended", Style::default().fg(Color::Yellow)),
        }
    };
    status.push(state);
    status.push(Span::raw(format!(
        " · every {}",
        fmt::interval(app.interval)
    )));
    if let Some(s) = &app.snap {
        status.push(Span::raw(format!(" │ {}", backends(s))));
        let own = match &s.overhead {
            Some(o) => format!(
                " │ self {:.3}% CPU, {}/run",
                o.cpu_share * 100.0,
                o.ns_per_run
                    .map_or_else(|| "?".into(), |n| duration_ns(n as u64))
            ),
            None => " │ self ?".into(),
        };
        status.push(Span::raw(own));
    }
    if let Some(e) = &app.error {
        status.push(Span::styled(
            format!(" │ error: {e}"),
            Style::default().fg(Color::Red),
        ));
    }
    let keys: Line = if app.editing {
        Line::from("filter: type text · Enter keep · Esc clear · Backspace delete")
    } else {
        let mut spans = Vec::new();
        for b in KEYS.iter().filter(|b| !b.short.is_empty()) {
            spans.push(Span::styled(
                b.shown.split(' ').next().unwrap_or(b.shown),
                Style::default()
                    .fg(Color::Cyan)
                    .add_modifier(Modifier::BOLD),
            ));
            spans.push(Span::raw(format!(" {}  ", b.short)));
        }
        Line::from(spans)
    };
    let lines = if area.height >= 2 {
        vec![Line::from(status), keys]
    } else {
        vec![Line::from(status)]
    };
    f.render_widget(
        Paragraph::new(lines).style(Style::default().bg(Color::Black)),
        area,
    );
}

/// The help overlay, printed from the same table the input handler uses.
fn help(f: &mut Frame, area: Rect) {
    let mut lines: Vec<Line> = KEYS
        .iter()
        .map(|b| {
            Line::from(vec![
                Span::styled(
                    format!("{:<10}", b.shown),
                    Style::default()
                        .fg(Color::Cyan)
                        .add_modifier(Modifier::BOLD),
                ),
                Span::raw(b.help),
            ])
        })
        .collect();
    lines.push(Line::from(
        "Rows: STARV = advice says grow, ring hit < 50% or ring full ≥ 10% of recycles; \
         warn = ring hit < 90% or ring full ≥ 1%. ? = not measured.",
    ));
    let w = area.width.saturating_sub(4).min(76);
    let h = (lines.len() as u16 + 4).min(area.height.saturating_sub(2));
    let r = Rect {
        x: area.x + (area.width.saturating_sub(w)) / 2,
        y: area.y + (area.height.saturating_sub(h)) / 2,
        width: w,
        height: h,
    };
    f.render_widget(Clear, r);
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" keys (? or Esc closes) ")
        .border_style(Style::default().fg(Color::Cyan));
    f.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(block),
        r,
    );
}

/// A rendered frame as plain text lines (trailing blanks trimmed), as a person reads it.
pub fn buffer_text(buf: &Buffer) -> String {
    let area = buf.area;
    let mut out = String::with_capacity((area.width as usize + 1) * area.height as usize);
    for y in 0..area.height {
        let start = out.len();
        for x in 0..area.width {
            out.push_str(buf[(area.x + x, area.y + y)].symbol());
        }
        let trimmed = out[start..].trim_end().len();
        out.truncate(start + trimmed);
        out.push('\n');
    }
    out
}
