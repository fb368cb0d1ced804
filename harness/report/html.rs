//! The static dashboard: `index.html` and one page per cell under `cells/`, written with maud,
//! which escapes every interpolated string, so log lines, ids and values show as text.
//!
//! No server and no network: inline CSS, no JavaScript, plots inlined as SVG, and a
//! Content-Security-Policy that forbids scripts and any fetch, so the pages work from a file
//! and from GitHub Pages alike. The only external URLs are expectations' upstream links, as plain
//! `<a href>` (http and https only).

use super::plots;
use super::text::visible;
use super::text::{self, STATUSES, seconds};
use super::view::{
    BisectKind, BisectView, CellBadge, CellEntry, Chart, NightRow, NightsView, PlotSpec,
    ReportContext, StateView,
};
use crate::compare::Comparison;
use crate::record::Status;
use maud::{DOCTYPE, Markup, PreEscaped, html};

/// Forbids scripts, plugins, frames and every fetch; allows only inline styles and images from
/// the report's own folder.
const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; \
                   base-uri 'none'; form-action 'none'";

const CSS: &str = r#"
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5rem; color: #1b1b1b; }
h1 { font-size: 1.5rem; margin: 0 0 .3rem; } h2 { font-size: 1.15rem; margin-top: 1.8rem; }
.meta { color: #555; margin: 0 0 .6rem; }
.replay { background: #fff6d6; border: 1px solid #e0c060; padding: .4rem .6rem; }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: .4rem 0 1rem; }
th, td { border: 1px solid #c9c9c9; padding: .3rem .55rem; text-align: left; vertical-align: top; }
thead th { background: #f1f3f5; }
tbody th { background: #fafafa; white-space: nowrap; }
table.pivot td { min-width: 9rem; }
caption { caption-side: top; text-align: left; padding: .2rem 0; }
td a, .badge a { color: inherit; }
.s-pass { background: #c8e6c9; } .s-fail { background: #ffcdd2; } .s-flaky { background: #fff1b8; }
.s-xfail { background: #e0e0e0; } .s-xpass { background: #bbdefb; } .s-skip { background: #f7f7f7; color: #555; }
.s-error { background: #ffe0b2; } .s-none { color: #999; }
.badge { display: inline-block; padding: .05rem .45rem; border-radius: .3rem; border: 1px solid #bbb; }
.note { display: block; font-size: .85em; color: #333; }
.xpass-note { font-weight: 600; }
.chg { display: inline-block; font-size: .8em; margin-left: .3rem; font-weight: 600; }
.chg-regressed { color: #b00020; } .chg-fixed { color: #1b5e20; }
.up { font-size: .85em; margin-left: .3rem; }
.bisect { font-style: italic; }
.v-good { background: #c8e6c9; } .v-bad { background: #ffcdd2; } .v-unknown { background: #ffe0b2; }
.legend span.badge { margin: 0 .4rem .3rem 0; }
pre { background: #f6f8fa; border: 1px solid #ddd; padding: .6rem; overflow-x: auto; font-size: 12.5px; }
pre.log .ln { color: #888; user-select: none; }
pre.log mark { background: #ffe08a; }
.warn { background: #fff4e5; border-left: 4px solid #f0a020; padding: .4rem .7rem; }
dl.kv { display: grid; grid-template-columns: max-content auto; gap: .2rem 1rem; }
dl.kv dt { font-weight: 600; } dl.kv dd { margin: 0; }
figure { margin: 1rem 0; } figure svg { max-width: 100%; height: auto; border: 1px solid #eee; }
footer { margin-top: 2rem; color: #777; font-size: .85em; }
table.nights td.n { text-align: center; padding: .1rem .25rem; min-width: 1.5rem; }
table.nights thead th.n { font-weight: 500; font-size: .8em; padding: .2rem .25rem; }
table.nights td.flake { outline: 2px dashed #a66f00; outline-offset: -3px; }
table.nights tbody th { font-weight: 500; }
"#;

fn class(status: Status) -> String {
    format!("s-{}", status.as_str())
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta http-equiv="Content-Security-Policy" content=(CSP);
            meta name="referrer" content="no-referrer";
            title { (title) }
            style { (PreEscaped(CSS)) }
        }
    }
}

fn change_mark(change: Option<Comparison>) -> Markup {
    html! {
        @match change {
            Some(Comparison::Regressed) => span.chg.chg-regressed title="regressed since the previous run" { "▼ regressed" },
            Some(Comparison::Fixed) => span.chg.chg-fixed title="fixed since the previous run" { "▲ fixed" },
            Some(Comparison::NewlyFlaky) => span.chg title="flaky since the previous run" { "newly flaky" },
            Some(Comparison::StillFailingDifferent) => span.chg title="still failing, with another root cause" { "new cause" },
            _ => {}
        }
    }
}

fn badge_cell(badges: &[CellBadge], prefix: &str) -> Markup {
    html! {
        @match badges {
            [] => td.s-none title="not in the matrix" { "—" },
            [first, ..] => td class=(class(first.status)) {
                @for b in badges {
                    div {
                        a href={ (prefix) (b.page) } title=(b.id) { (b.symbol) " " (b.label) }
                        @if let Some(link) = &b.link {
                            a.up href=(link) rel="noreferrer noopener" { "upstream ↗" }
                        }
                        (change_mark(b.change))
                        @if let Some(note) = &b.bisect {
                            span.note.bisect { a href={ (prefix) (b.page) "#bisect" } title="the bisect that explains this cell" { "↳ " (note) } }
                        }
                        @if b.status == Status::Xpass {
                            span.note.xpass-note { "workaround or exclusion can be removed" }
                        } @else if b.status == Status::Skip || b.status == Status::Error {
                            @if let Some(note) = &b.note { span.note { (note) } }
                        }
                    }
                }
            }
        }
    }
}

fn legend() -> Markup {
    html! {
        p.legend {
            @for s in STATUSES {
                span class={ "badge " (class(s)) } title=(text::meaning(s)) { (text::symbol(s)) " " (text::word(s)) }
            }
        }
        p.meta { "✓ pass · ✗ fail shows the root-cause signature · ~ flaky: passed on a retry · ⊘ xfail: known upstream failure (links the issue) · ! XPASS: an expected failure passed, so the workaround or exclusion can be removed · – skip · ⚠ error: infrastructure, never a regression. Click a cell for its log, timings and a reproducer." }
    }
}

fn state_text(state: &StateView) -> String {
    format!("{} {}", text::symbol(state.status), state.text())
}

fn plot(spec: &PlotSpec, svg: Option<&String>) -> Markup {
    html! {
        figure {
            @if let Some(svg) = svg {
                // plotters escapes the text it writes; the SVG is ours.
                div role="img" aria-label=(plots::alt(spec)) { (PreEscaped(svg)) }
            }
            figcaption {
                (spec.title) " · " a href=(spec.file) { "SVG" }
            }
            @if let Chart::Bars { x_axis, series_axis, unit, groups, series } = &spec.chart {
                details {
                    summary { "values (" (unit) ")" }
                    table {
                        thead { tr { th { (x_axis) " ↓ " (series_axis) " →" } @for s in series { th { (s.name) } } } }
                        tbody {
                            @for (g, name) in groups.iter().enumerate() {
                                tr {
                                    th { (name) }
                                    @for s in series {
                                        td { @match s.values.get(g).copied().flatten() { Some(v) => (plots::format_value(v)), None => "—" } }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// What a replayed run is, said on the dashboard's front page and in `compat.md` when the newest
/// run loaded is a replay.
pub(crate) const REPLAY_NOTE: &str = "every cell replays a recorded run (its log and exit, through real \
processes, the watchdog and the classifier on this host); the GPU results are the recording's, not \
this machine's.";

/// Renders `index.html`; `svgs[i]` is the drawn `ctx.plots[i]` (or `None` when it failed).
pub(crate) fn index(ctx: &ReportContext, svgs: &[Option<String>]) -> String {
    let tonight = ctx.runs.last();
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            (head(&ctx.title))
            body {
                header {
                    h1 { (ctx.title) }
                    @if let Some(run) = tonight {
                        p.meta {
                            "Run " strong { (run.name) }
                            @if let Some(started) = &run.started_at { ", started " (started) }
                            @if let Some(host) = &run.host { " on " (host) }
                            @if ctx.runs.len() > 1 { " · " (ctx.runs.len()) " runs loaded" }
                        }
                    }
                    @if tonight.is_some_and(|run| run.replay) {
                        p.replay { strong { "Replay: " } (REPLAY_NOTE) }
                    }
                    p { strong { (ctx.counts.summary()) } }
                    nav {
                        a href="#tables" { "Tables" }
                        @if ctx.nights.is_some() { a href="#nights" { "Nights" } }
                        @if ctx.changes.is_some() { a href="#changes" { "Changes" } }
                        @if !ctx.new_fingerprints.is_empty() { a href="#fingerprints" { "New fingerprints" } }
                        @if !ctx.bisects.is_empty() { a href="#bisects" { "Bisects" } }
                        @if ctx.runs.len() > 1 { a href="#history" { "History" } }
                        @if !ctx.plots.is_empty() { a href="#plots" { "Plots" } }
                        a href="compat.md" { "compat.md" }
                        a href="compat.csv" { "compat.csv" }
                        a href="compat.json" { "compat.json" }
                        a href="junit.xml" { "junit.xml" }
                    }
                }
                (legend())
                @if !ctx.constant.is_empty() {
                    p { "Every cell: "
                        @for (i, c) in ctx.constant.iter().enumerate() {
                            @if i > 0 { ", " }
                            code { (c.axis) " = " (c.value) }
                        }
                    }
                }
                @for w in &ctx.warnings { p.warn { (w) } }
                @if !ctx.not_run.is_empty() {
                    p.warn { (ctx.not_run.len()) " cell(s) of the plan have no result (interrupted or not run yet)." }
                }
                // Over several nights, what is broken and since when comes first.
                @if let Some(nights) = &ctx.nights { (nights_section(nights)) }
                section #tables {
                    @if ctx.tables.is_empty() { p { "No cell has a result yet." } }
                    @for table in &ctx.tables {
                        h2 { (table.title) }
                        table.pivot {
                            caption.meta { (table.counts.summary()) }
                            thead {
                                tr {
                                    th scope="col" { (table.corner) }
                                    @for c in &table.columns { th scope="col" { (c) } }
                                }
                            }
                            tbody {
                                @for row in &table.rows {
                                    tr {
                                        th scope="row" { (row.label) }
                                        @for slot in &row.cells { (badge_cell(slot, "")) }
                                    }
                                }
                            }
                        }
                    }
                }
                @if let Some(changes) = &ctx.changes {
                    section #changes {
                        h2 { "Since " (changes.base) }
                        p {
                            @for (i, (c, n)) in changes.counts.iter().enumerate() {
                                @if i > 0 { " · " }
                                (n) " " (c.as_str().replace('_', " "))
                            }
                        }
                        @if changes.cells.is_empty() {
                            p { "Every cell passes in both runs." }
                        } @else {
                            table {
                                thead { tr { th { "cell" } th { "change" } th { "before" } th { "tonight" } } }
                                tbody {
                                    @for row in &changes.cells {
                                        tr {
                                            td { @match &row.page { Some(p) => a href=(p) { (row.id) }, None => (row.id) } }
                                            td title=(row.description) { (row.comparison.as_str().replace('_', " ")) }
                                            td { @if let Some(b) = &row.base { span class={ "badge " (class(b.status)) } { (text::symbol(b.status)) " " (b) } } @else { "—" } }
                                            td { @if let Some(h) = &row.head { span class={ "badge " (class(h.status)) } { (text::symbol(h.status)) " " (h) } } @else { "—" } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if !ctx.new_fingerprints.is_empty() {
                    section #fingerprints {
                        h2 { "New failure fingerprints tonight" }
                        table {
                            thead { tr { th { "signature" } th { "fingerprint" } th { "cells" } } }
                            tbody {
                                @for fp in &ctx.new_fingerprints {
                                    tr {
                                        td { (fp.signature.map_or("unknown", |s| s.as_str())) }
                                        td { code { (fp.fingerprint) } }
                                        td { @for (i, c) in fp.cells.iter().enumerate() { @if i > 0 { ", " } a href=(c.page) { (c.id) } } }
                                    }
                                }
                            }
                        }
                    }
                }
                @if !ctx.bisects.is_empty() {
                    section #bisects {
                        h2 { "Bisects" }
                        table {
                            thead { tr { th { "bisect" } th { "answer" } th { "explains tonight" } } }
                            tbody {
                                @for b in &ctx.bisects {
                                    tr {
                                        td { code { (b.name) } br; span.meta { (b.heading) } }
                                        td { (b.answer) }
                                        td {
                                            @if b.cells.is_empty() { "no failing cell" }
                                            @for (i, c) in b.cells.iter().enumerate() { @if i > 0 { ", " } a href={ (c.page) "#bisect" } { (c.id) } }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if ctx.runs.len() > 1 {
                    section #history {
                        h2 { "History" }
                        table {
                            thead { tr { th { "run" } th { "started" } th { "host" }
                                @for s in STATUSES { th title=(text::meaning(s)) { (text::symbol(s)) " " (text::word(s)) } } } }
                            tbody {
                                @for run in ctx.runs.iter().rev() {
                                    tr {
                                        td { (run.name) }
                                        td { (run.started_at.as_deref().unwrap_or("—")) }
                                        td { (run.host.as_deref().unwrap_or("—")) }
                                        @for s in STATUSES { td { (run.counts.get(s)) } }
                                    }
                                }
                            }
                        }
                        @if ctx.recent_changes.is_empty() {
                            p { "No cell changed state across these runs." }
                        } @else {
                            details open[ctx.recent_changes.len() <= 40] {
                                summary { "Last change of state per cell (" (ctx.recent_changes.len()) ")" }
                                table {
                                    thead { tr { th { "cell" } th { "changed in" } th { "from" } th { "to" } } }
                                    tbody {
                                        @for c in &ctx.recent_changes {
                                            tr {
                                                td { a href=(c.page) { (c.id) } }
                                                td { (c.change.run) @if let Some(t) = &c.change.started_at { " (" (t) ")" } }
                                                td class=(class(c.change.from.status)) { (state_text(&c.change.from)) }
                                                td class=(class(c.change.to.status)) { (state_text(&c.change.to)) }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
                @if !ctx.plots.is_empty() {
                    section #plots {
                        h2 { "Plots" }
                        p.meta { "Heatmap cells carry the status symbol: " (plots::legend_text()) }
                        @for (i, spec) in ctx.plots.iter().enumerate() {
                            (plot(spec, svgs.get(i).and_then(Option::as_ref)))
                        }
                    }
                }
                footer { "gpucompat " (ctx.harness_version) " · static report: no scripts, no network" }
            }
        }
    };
    // Every string from a run folder went through maud's escaping; invisible characters in
    // any of them are shown, not obeyed (our own markup has none).
    visible(&page.into_string()).into_owned()
}

/// The cells x nights grid: each night's state, when the failure began, the last good night,
/// the flake rate, and the bisect beside a failing cell. Cells failing tonight or flaky in the
/// window are shown; the steady rest is folded away (no script: a `details` element).
fn nights_section(nights: &NightsView) -> Markup {
    let (attention, steady): (Vec<&NightRow>, Vec<&NightRow>) = nights
        .rows
        .iter()
        .partition(|r| r.failing_since.is_some() || r.flakes > 0);
    html! {
        section #nights {
            h2 { "Nights" }
            p.meta {
                (nights.rows.len()) " cells over the last " (nights.nights.len()) " nights"
                @if nights.left_out > 0 { " (" (nights.left_out) " older run(s) given are left out: " code { "--nights" } ")" }
                ": " (attention.iter().filter(|r| r.failing_since.is_some()).count()) " failing tonight (the newest breakage first), "
                (attention.iter().filter(|r| r.failing_since.is_none()).count()) " flaky. "
                "A dashed cell flaked that night: its status was flaky (it passed on a retry), or it flipped between pass and fail and back from the nights around it with the same pins."
            }
            @if attention.is_empty() {
                p { "No cell failed tonight or flaked in these nights." }
            } @else {
                (nights_table(nights, &attention))
            }
            @if !steady.is_empty() {
                details {
                    summary { (steady.len()) " cells steady over these nights" }
                    (nights_table(nights, &steady))
                }
            }
        }
    }
}

fn nights_table(nights: &NightsView, rows: &[&NightRow]) -> Markup {
    html! {
        table.nights {
            thead {
                tr {
                    th scope="col" { "cell" }
                    @for n in &nights.nights {
                        th.n scope="col" title={ (n.name) @if let Some(t) = &n.started_at { " · " (t) } " · " (n.counts.summary()) } { (n.label) }
                    }
                    th scope="col" { "failing since" }
                    th scope="col" { "last good" }
                    th scope="col" title="nights that flaked / nights with a verdict" { "flake rate" }
                    th scope="col" { "bisect" }
                }
            }
            tbody {
                @for row in rows {
                    tr {
                        th scope="row" { @match &row.page { Some(p) => a href=(p) { (row.id) }, None => (row.id) } }
                        @for (night, state) in nights.nights.iter().zip(&row.states) {
                            @match state {
                                Some(s) => td class={ "n " (class(s.status)) @if s.flake { " flake" } }
                                    title={ (night.name) ": " (s.status.as_str()) @if let Some(sig) = s.signature { " " (sig.as_str()) } @if s.flake { " (flaked)" } } { (s.symbol) },
                                None => td.n.s-none title={ (night.name) ": not run" } { "·" },
                            }
                        }
                        td {
                            @if let Some(since) = &row.failing_since {
                                @if row.failing_since_window_start { "≤ " }
                                (since)
                            } @else { "—" }
                        }
                        td { (row.last_good.as_deref().unwrap_or("—")) }
                        td { @if row.judged > 0 { (row.flakes) "/" (row.judged) @if row.flakes > 0 { " (" (format!("{:.0}", row.flake_rate * 100.0)) "%)" } } @else { "—" } }
                        td.bisect { @if let Some(b) = &row.bisect {
                            @match &row.page { Some(p) => a href={ (p) "#bisect" } { (b) }, None => (b) }
                        } }
                    }
                }
            }
        }
    }
}

/// A bisect on a cell page: its answer and every probe with its log.
fn bisect_section(b: &BisectView) -> Markup {
    html! {
        h2 { @match b.kind { BisectKind::Version => "Bisect", BisectKind::Attribution => "Attribution" } }
        p { strong { (b.answer) } }
        p.meta { (b.heading) " · folder " code { (b.dir) } }
        table {
            thead { tr { th { "#" } th { "probe" } th { "pins" } th { "verdict" } th { "status" } th { "signature" } th { "phase" } th { "duration" } th { "log" } th { "note" } } }
            tbody {
                @for (i, p) in b.runs.iter().enumerate() {
                    tr {
                        td { (i + 1) }
                        td { code { (p.probe) } }
                        td { @for (j, pin) in p.pins.iter().enumerate() { @if j > 0 { " " } code { (pin) } } }
                        td class={ "v-" (p.verdict.as_str()) } { (p.verdict.as_str()) }
                        td class=(class(p.status)) { (text::symbol(p.status)) " " (p.status.as_str()) }
                        td { (p.signature.map_or("—", |s| s.as_str())) }
                        td { (p.phase.map_or("—", |s| s.as_str())) }
                        td { (seconds(p.duration_s)) }
                        td {
                            @match (&p.log, &p.log_refused) {
                                (Some(log), _) => a href={ "../" (log.href) } { "log" },
                                (None, Some(why)) => span title=(why) { "refused" },
                                (None, None) => "—",
                            }
                        }
                        td {
                            @if let Some(reason) = &p.reason { (reason) }
                            @if let Some(from) = &p.reused_from { @if p.reason.is_some() { " · " } "reused from " code { (from) } }
                        }
                    }
                }
            }
        }
    }
}

fn metric_row(name: &str, value: Option<String>) -> Markup {
    html! {
        tr { th scope="row" { (name) } td { (value.unwrap_or_else(|| "—".to_owned())) } }
    }
}

/// Renders one cell's page (`cells/<id>.html`); `full_log` is the (bounded) log text.
pub(crate) fn cell_page(
    ctx: &ReportContext,
    cell: &CellEntry,
    full_log: Option<&str>,
    hang: Option<Markup>,
) -> String {
    let m = &cell.metrics;
    let secs = |v: Option<f64>| v.map(seconds);
    let page = html! {
        (DOCTYPE)
        html lang="en" {
            (head(&format!("{} · {}", cell.id, ctx.title)))
            body {
                p { a href="../index.html" { "← " (ctx.title) } }
                h1 {
                    span class={ "badge " (class(cell.status)) } { (cell.symbol) " " (cell.label) }
                    " " (cell.id)
                }
                @if let Some(note) = &cell.note {
                    p class={ "note" @if cell.status == Status::Xpass { " xpass-note" } } { (note) }
                }
                @if let Some(link) = &cell.upstream {
                    p { "Upstream: " a href=(link) rel="noreferrer noopener" { (link) } }
                } @else if let Some(link) = cell.expectation.as_ref().and_then(|e| e.link.as_ref()) {
                    p { "Upstream (not a web link): " code { (link) } }
                }
                dl.kv {
                    @for v in &cell.values { dt { (v.axis) } dd { code { (v.value) } } }
                    dt { "status" } dd { (cell.status.as_str()) @if cell.spurious { " (spurious: infrastructure)" } }
                    @if let Some(sig) = cell.signature { dt { "signature" } dd { code { (sig.as_str()) } } }
                    @if let Some(phase) = cell.phase { dt { "phase" } dd { (phase.as_str()) } }
                    @if let Some(reason) = &cell.reason { dt { "reason" } dd { (reason) } }
                    @if let Some(fp) = &cell.fingerprint {
                        dt { "fingerprint" } dd { code { (fp) } @if cell.new_fingerprint { " " strong { "(new tonight)" } } }
                    }
                    @if let Some(by) = &cell.decided_by {
                        dt { "decided by" } dd { (by.replace('_', " ")) }
                    }
                    @if !cell.evidence.is_empty() {
                        dt { "evidence" }
                        dd.evidence { @for (i, clue) in cell.evidence.iter().enumerate() { @if i > 0 { br; } (clue.to_string()) } }
                    }
                    dt { "attempts" } dd { (cell.attempts) }
                    dt { "duration" } dd {
                        (seconds(cell.duration_s))
                        @if let Some(own) = cell.replay_duration_s { " (recorded; the replay took " (seconds(own)) ")" }
                    }
                    dt { "host" } dd { (cell.runner.host) }
                    @if !cell.runner.gpus.is_empty() {
                        dt { "GPUs (in order)" }
                        dd { @for (i, g) in cell.runner.gpus.iter().enumerate() { @if i > 0 { ", " } (g.index) ": " (g.name) " (" (g.arch) ")" } }
                    }
                    @if !cell.pins.is_empty() {
                        dt { "pins" } dd { @for (i, p) in cell.pins.iter().enumerate() { @if i > 0 { " " } code { (p) } } }
                    }
                    @if let Some(change) = cell.change {
                        dt { "since the previous run" } dd { (change.describe()) }
                    }
                    @if let Some(b) = &cell.bisect {
                        dt { "bisect" } dd.bisect { a href="#bisect" { (b.note) } }
                    }
                    dt { "last change of state" }
                    dd {
                        @match &cell.history.last_change {
                            Some(c) => { (c.run) @if let Some(t) = &c.started_at { " (" (t) ")" } ": " (state_text(&c.from)) " → " (state_text(&c.to)) },
                            None => { "none in the loaded runs" },
                        }
                        " · same state for " (cell.history.same_for) " run(s)"
                    }
                }
                @let explaining: Vec<&BisectView> = ctx.bisects.iter().filter(|b| b.cells.iter().any(|c| c.id == cell.id)).collect();
                @if !explaining.is_empty() {
                    section #bisect {
                        @for b in explaining { (bisect_section(b)) }
                    }
                }
                h2 { "Timings" }
                table {
                    tbody {
                        (metric_row("time to ready", secs(m.time_to_ready_s)))
                        (metric_row("JIT compile", secs(m.jit_s)))
                        (metric_row("time to first token (TTFT)", secs(m.ttft_s)))
                        (metric_row("time per output token (TPOT)", secs(m.tpot_s)))
                        (metric_row("tokens/s", m.tokens_per_s.map(plots::format_value)))
                        (metric_row("JIT cache hit", m.jit_cache_hit.map(|h| if h { "yes".to_owned() } else { "no".to_owned() })))
                        (metric_row("provision", secs(m.provision_s)))
                    }
                }
                @if let Some(hang) = hang { (hang) }
                @if let Some(excerpt) = &cell.excerpt {
                    h2 { "Root cause" }
                    p.meta { @match excerpt.source {
                        "log" => "The log around the root-cause line (highlighted).",
                        "record" => "The classifier's excerpt.",
                        _ => "The end of the log (no root-cause line is known).",
                    } }
                    pre.log {
                        @for line in &excerpt.lines {
                            @if let Some(n) = line.number { span.ln { (format!("{n:>6}  ")) } }
                            @if line.root { mark { (line.text) } } @else { (line.text) }
                            "\n"
                        }
                    }
                }
                h2 { "Reproduce" }
                pre.repro { (cell.reproducer.script) }
                @if ctx.runs.len() > 1 {
                    h2 { "History" }
                    table {
                        thead { tr { th { "run" } th { "started" } th { "state" } } }
                        tbody {
                            @for (run, state) in ctx.runs.iter().zip(&cell.history.states).rev() {
                                tr {
                                    td { (run.name) }
                                    td { (run.started_at.as_deref().unwrap_or("—")) }
                                    @match state {
                                        Some(s) => td class=(class(s.status)) { (state_text(s)) },
                                        None => td.s-none { "not run" },
                                    }
                                }
                            }
                        }
                    }
                }
                h2 { "Full log" }
                @match &cell.log {
                    Some(log) => {
                        p { a href={ "../" (log.href) } { "the whole log as a text file" } }
                        @if let Some(text) = full_log {
                            pre.log { (text) }
                        }
                    },
                    None => @match &cell.log_refused {
                        Some(why) => p.refused { "Log not read: " (why) "." },
                        None => p { "No log was found for this cell." },
                    },
                }
                footer { "gpucompat " (ctx.harness_version) }
            }
        }
    };
    // Every string from a run folder went through maud's escaping; invisible characters in
    // any of them are shown, not obeyed (our own markup has none).
    visible(&page.into_string()).into_owned()
}
