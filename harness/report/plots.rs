//! SVG plots with plotters' SVG backend (no fonts needed): a status heatmap per table, and timing
//! bars (JIT and time to ready per version, tokens/s per backend), one bar per GPU arch, so a
//! backend that is slower on one arch shows at a glance.
//!
//! [`specs`] decides what to plot from the view model (and is snapshot-tested with it); [`draw`]
//! only draws. Heatmap cells carry the status symbol and signature, not only a color.

use super::layout::Layout;
use super::text::{self, one_line};
use super::view::{AxisValue, BarSeries, CellEntry, Chart, PlotSpec, ReportContext};
use crate::record::{Metrics, Status};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::collections::{HashMap, HashSet};

/// Reads one metric of a cell.
type Metric = fn(&Metrics) -> Option<f64>;

/// The plots the report has data for.
pub(crate) fn specs(ctx: &ReportContext) -> Vec<PlotSpec> {
    let mut specs = Vec::new();
    for (i, table) in ctx.tables.iter().enumerate() {
        if table.counts.total > 0 {
            specs.push(PlotSpec {
                file: format!("plots/heatmap-{}.svg", i + 1),
                title: format!("Status: {}", table.title),
                chart: Chart::Heatmap { table: i },
            });
        }
    }
    if let Some(nights) = ctx.nights.as_ref().filter(|n| n.nights.len() > 1) {
        for (i, series) in nights.trend.iter().enumerate() {
            specs.push(PlotSpec {
                file: if nights.trend.len() == 1 {
                    "plots/trend.svg".to_owned()
                } else {
                    format!("plots/trend-{}.svg", i + 1)
                },
                title: format!(
                    "Pass rate per night, {} (% of cells with a verdict that passed or failed as expected)",
                    series.name
                ),
                chart: Chart::Trend { series: i },
            });
        }
    }
    let scopes = scopes(ctx);
    for (n, scope) in scopes.iter().enumerate() {
        // One set of timing plots per matrix; a split report numbers its files.
        let file = |name: &str| match scope.split {
            None => format!("plots/{name}.svg"),
            Some(_) => format!("plots/{name}-{}.svg", n + 1),
        };
        let prefix = scope
            .split
            .map(|s| format!("{}: ", s.value))
            .unwrap_or_default();
        let wanted: [(&str, &str, Metric, &str, bool); 3] = [
            ("jit", "JIT compile time", |m| m.jit_s, "seconds", true),
            (
                "ready",
                "Time to ready",
                |m| m.time_to_ready_s,
                "seconds",
                true,
            ),
            (
                "tokens",
                "Throughput",
                |m| m.tokens_per_s,
                "tokens/s",
                false,
            ),
        ];
        for (name, title, metric, unit, cached) in wanted {
            if let Some(chart) = scope.bars(ctx, metric, unit, cached) {
                let by = match &chart {
                    Chart::Bars {
                        x_axis,
                        series_axis,
                        ..
                    } => format!(" per {x_axis}, by {series_axis}"),
                    Chart::Heatmap { .. } | Chart::Trend { .. } => String::new(),
                };
                specs.push(PlotSpec {
                    file: file(name),
                    title: format!("{prefix}{title}{by} ({unit}, mean)"),
                    chart,
                });
            }
        }
    }
    specs
}

fn value<'a>(cell: &'a CellEntry, axis: &str) -> &'a str {
    cell.values
        .iter()
        .find(|v| v.axis == axis)
        .map_or("", |v| v.value.as_str())
}

/// The cells one set of timing plots covers: the whole report, or one matrix of a split report.
struct Scope<'a> {
    split: Option<&'a AxisValue>,
    layout: &'a Layout,
    /// Its tables, by their place in the report.
    tables: Vec<usize>,
    cells: Vec<&'a CellEntry>,
}

fn scopes(ctx: &ReportContext) -> Vec<Scope<'_>> {
    if ctx.matrices.is_empty() {
        return vec![Scope {
            split: None,
            layout: &ctx.layout,
            tables: (0..ctx.tables.len()).collect(),
            cells: ctx.cells.iter().collect(),
        }];
    }
    ctx.matrices
        .iter()
        .map(|m| Scope {
            split: Some(&m.split),
            layout: &m.layout,
            tables: m.tables.clone(),
            cells: ctx
                .cells
                .iter()
                .filter(|c| value(c, &m.split.axis) == m.split.value)
                .collect(),
        })
        .collect()
}

/// How bars are grouped along the x axis, or split into series: by an axis's values, by table,
/// by the JIT cache's state, or not at all.
enum By<'a> {
    Axis(&'a str),
    /// One group per table of the scope (`moe · 1`): kernel sets and worker counts, whose
    /// timings differ by design, are never averaged together.
    Tables(HashMap<&'a str, usize>),
    /// Cold (the cache was empty) or warm: a cold JIT compiles, a warm one loads.
    Cache,
    All,
}

impl By<'_> {
    fn name(&self, layout: &Layout) -> String {
        match self {
            By::Axis(a) => (*a).to_owned(),
            By::Tables(_) => layout.groups.join(" · "),
            By::Cache => "JIT cache".to_owned(),
            By::All => "all cells".to_owned(),
        }
    }

    fn names(&self, ctx: &ReportContext, tables: &[usize]) -> Vec<String> {
        match self {
            By::Axis(a) => match ctx.axes.iter().find(|x| x.name == *a) {
                Some(axis) => axis.values.clone(),
                None => vec![String::new()],
            },
            By::Tables(_) => tables
                .iter()
                .map(|t| {
                    ctx.tables[*t]
                        .group
                        .iter()
                        .filter(|g| Some(&g.axis) != ctx.layout.split.as_ref())
                        .map(|g| g.value.as_str())
                        .collect::<Vec<_>>()
                        .join(" · ")
                })
                .collect(),
            By::Cache => vec!["cold cache".to_owned(), "warm cache".to_owned()],
            By::All => vec!["all".to_owned()],
        }
    }

    /// The place of `cell` among [`By::names`].
    fn place(&self, cell: &CellEntry, names: &[String]) -> Option<usize> {
        match self {
            By::Axis(a) => names.iter().position(|x| x == value(cell, a)),
            By::Tables(of) => of.get(cell.id.as_str()).copied(),
            By::Cache => cell.metrics.jit_cache_hit.map(usize::from),
            By::All => Some(0),
        }
    }
}

impl Scope<'_> {
    /// Grouped bars of `metric` over the scope's cells. Compile-bound timings (`cached`) of
    /// cells some of which found their JIT cache warm and some cold are compared like with
    /// like: one series per cache state, one group per table (kernel set, workers) when there
    /// are several, else per row. Otherwise one group per row (or backend, for throughput) and
    /// one series per column (one bar per GPU arch).
    fn bars(&self, ctx: &ReportContext, metric: Metric, unit: &str, cached: bool) -> Option<Chart> {
        let rows = self.layout.rows.as_deref();
        let states: HashSet<bool> = self
            .cells
            .iter()
            .filter(|c| metric(&c.metrics).is_some())
            .filter_map(|c| c.metrics.jit_cache_hit)
            .collect();
        if cached && states.len() > 1 {
            let x = if self.tables.len() > 1 {
                let mut of = HashMap::new();
                for (place, t) in self.tables.iter().enumerate() {
                    for badge in ctx.tables[*t]
                        .rows
                        .iter()
                        .flat_map(|r| r.cells.iter().flatten())
                    {
                        of.insert(badge.id.as_str(), place);
                    }
                }
                By::Tables(of)
            } else {
                rows.map_or(By::All, By::Axis)
            };
            return bars(ctx, self, &x, &By::Cache, metric, unit);
        }
        let x = if cached {
            rows
        } else {
            backend(ctx, self.layout)
        };
        let series = match self.layout.cols.as_deref() {
            Some(c) if Some(c) != x => By::Axis(c),
            _ => By::All,
        };
        bars(
            ctx,
            self,
            &x.map_or(By::All, By::Axis),
            &series,
            metric,
            unit,
        )
    }
}

/// The axis throughput is compared along: a backend, else the engine, else the rows.
fn backend<'a>(ctx: &'a ReportContext, layout: &'a Layout) -> Option<&'a str> {
    ctx.axes
        .iter()
        .find(|a| a.name.to_ascii_lowercase().contains("backend"))
        .or_else(|| {
            ctx.axes
                .iter()
                .find(|a| a.name.eq_ignore_ascii_case("engine"))
        })
        .map(|a| a.name.as_str())
        .or(layout.rows.as_deref())
}

fn bars(
    ctx: &ReportContext,
    scope: &Scope,
    x: &By,
    series_by: &By,
    metric: Metric,
    unit: &str,
) -> Option<Chart> {
    let groups = x.names(ctx, &scope.tables);
    let series_names = series_by.names(ctx, &scope.tables);
    let mut sums = vec![vec![(0.0f64, 0usize); groups.len()]; series_names.len()];
    for cell in &scope.cells {
        let Some(v) = metric(&cell.metrics).filter(|v| v.is_finite()) else {
            continue;
        };
        if let (Some(g), Some(s)) = (x.place(cell, &groups), series_by.place(cell, &series_names)) {
            sums[s][g].0 += v;
            sums[s][g].1 += 1;
        }
    }
    let keep_groups: Vec<usize> = (0..groups.len())
        .filter(|g| sums.iter().any(|s| s[*g].1 > 0))
        .collect();
    if keep_groups.is_empty() {
        return None;
    }
    let series: Vec<BarSeries> = sums
        .iter()
        .zip(&series_names)
        .filter(|(s, _)| s.iter().any(|(_, n)| *n > 0))
        .map(|(s, name)| BarSeries {
            name: name.clone(),
            values: keep_groups
                .iter()
                .map(|g| {
                    let (sum, n) = s[*g];
                    (n > 0).then(|| (sum / n as f64 * 1000.0).round() / 1000.0)
                })
                .collect(),
        })
        .collect();
    Some(Chart::Bars {
        x_axis: x.name(scope.layout),
        series_axis: series_by.name(scope.layout),
        unit: unit.to_owned(),
        groups: keep_groups.iter().map(|g| groups[*g].clone()).collect(),
        series,
    })
}

/// Background of a status in a heatmap (the symbol and label say the same in text).
pub(crate) fn status_color(status: Status) -> RGBColor {
    match status {
        Status::Pass => RGBColor(0xc8, 0xe6, 0xc9),
        Status::Fail => RGBColor(0xff, 0xcd, 0xd2),
        Status::Flaky => RGBColor(0xff, 0xf1, 0xb8),
        Status::Xfail => RGBColor(0xe0, 0xe0, 0xe0),
        Status::Xpass => RGBColor(0xbb, 0xde, 0xfb),
        Status::Skip => RGBColor(0xf7, 0xf7, 0xf7),
        Status::Error => RGBColor(0xff, 0xe0, 0xb2),
    }
}

const SERIES_COLORS: [RGBColor; 8] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
    RGBColor(0xe3, 0x77, 0xc2),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Approximate width of `text` at `size` px in a sans-serif font.
fn width(text: &str, size: u32) -> u32 {
    (text.chars().count() as u32 * size * 6).div_ceil(10)
}

fn cut(text: &str, max_chars: usize) -> String {
    let text = one_line(text);
    if text.chars().count() <= max_chars {
        text
    } else {
        let mut short: String = text.chars().take(max_chars.saturating_sub(1)).collect();
        short.push('…');
        short
    }
}

/// `text` on one line, at most `max_chars`, keeping its end: `…ls-h100/0.6.3-native-core-4`.
fn cut_front(text: &str, max_chars: usize) -> String {
    let text = one_line(text);
    let count = text.chars().count();
    if count <= max_chars {
        text
    } else {
        let tail: String = text.chars().skip(count + 1 - max_chars).collect();
        format!("…{tail}")
    }
}

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// Draws one plot as SVG text.
pub(crate) fn draw(spec: &PlotSpec, ctx: &ReportContext) -> Result<String, String> {
    match &spec.chart {
        Chart::Heatmap { table } => heatmap(&spec.title, ctx, *table),
        Chart::Bars {
            x_axis,
            unit,
            groups,
            series,
            ..
        } => bar_chart(&spec.title, x_axis, unit, groups, series),
        Chart::Trend { series } => {
            let nights = ctx.nights.as_ref().ok_or("no nights")?;
            let line = nights.trend.get(*series).ok_or("no such series")?;
            let labels: Vec<String> = nights.nights.iter().map(|n| n.label.clone()).collect();
            trend_chart(&spec.title, &labels, &line.values)
        }
    }
}

/// A pass-rate line over the nights (0 to 100 %), each night's value on its point.
fn trend_chart(title: &str, nights: &[String], values: &[Option<f64>]) -> Result<String, String> {
    let n = nights.len().max(1);
    let w = (120 + 48 * n as u32).clamp(480, 1400);
    const LABEL: u32 = 12;
    let slot = (w - 64 - 24) / n as u32;
    let widest = nights.iter().map(|l| width(l, LABEL)).max().unwrap_or(0);
    let upright = widest + 8 > slot;
    let label_area = if upright { widest * 5 / 6 + 20 } else { 40 };
    let h = 300 + label_area;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(cut(title, 110), ("sans-serif", 13))
            .margin(12)
            .x_label_area_size(label_area)
            .y_label_area_size(48)
            .build_cartesian_2d(0f64..n as f64, 0f64..108f64)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .y_desc("% pass")
            .draw()
            .map_err(err)?;
        let color = SERIES_COLORS[0];
        let points: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| Some((i as f64 + 0.5, (*v)?)))
            .collect();
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(err)?;
        chart
            .draw_series(points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(err)?;
        chart
            .draw_series(points.iter().map(|(x, y)| {
                Text::new(
                    format!("{y:.0}"),
                    (*x, *y + 2.0),
                    TextStyle::from(("sans-serif", 10).into_font())
                        .pos(Pos::new(HPos::Center, VPos::Bottom)),
                )
            }))
            .map_err(err)?;
        for (i, name) in nights.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(i as f64 + 0.5, 0.0));
            let label = if upright {
                Text::new(
                    cut(name, 20),
                    (x, y + 6),
                    TextStyle::from(
                        ("sans-serif", LABEL)
                            .into_font()
                            .transform(FontTransform::Rotate270),
                    )
                    .pos(Pos::new(HPos::Right, VPos::Center)),
                )
            } else {
                Text::new(
                    cut(name, 20),
                    (x, y + 8),
                    TextStyle::from(("sans-serif", LABEL).into_font())
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )
            };
            root.draw(&label).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn heatmap(title: &str, ctx: &ReportContext, index: usize) -> Result<String, String> {
    let table = ctx.tables.get(index).ok_or("no such table")?;
    const FONT: u32 = 12;
    const ROW: u32 = 24;
    let cols: Vec<String> = table.columns.iter().map(|c| cut(c, 24)).collect();
    // Row labels are kept whole up to a long cell id (`RUN/CELL` of a replay): the label column
    // grows to fit them, since a cut label names no cell.
    let rows: Vec<String> = table.rows.iter().map(|r| cut(&r.label, 64)).collect();
    let label_w = rows
        .iter()
        .map(|r| width(r, FONT))
        .max()
        .unwrap_or(0)
        .max(width(&table.corner, FONT).min(200))
        + 16;
    let cell_w = cols
        .iter()
        .map(|c| width(c, FONT))
        .max()
        .unwrap_or(0)
        .max(200)
        + 12;
    let top = 56;
    let w = (label_w + cell_w * cols.len() as u32 + 16).max(320);
    let h = top + ROW * rows.len() as u32 + 16;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let font = |size: u32| ("sans-serif", size).into_font();
        let left = TextStyle::from(font(FONT)).pos(Pos::new(HPos::Left, VPos::Center));
        let center = TextStyle::from(font(FONT)).pos(Pos::new(HPos::Center, VPos::Center));
        root.draw(&Text::new(
            cut(title, 90),
            (8, 14),
            TextStyle::from(font(15)).pos(Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(err)?;
        root.draw(&Text::new(
            cut(&table.corner, 30),
            (8, top as i32 - 12),
            left.clone(),
        ))
        .map_err(err)?;
        for (c, name) in cols.iter().enumerate() {
            let x = (label_w + cell_w * c as u32 + cell_w / 2) as i32;
            root.draw(&Text::new(
                name.clone(),
                (x, top as i32 - 12),
                center.clone(),
            ))
            .map_err(err)?;
        }
        for (r, row) in table.rows.iter().enumerate() {
            let y0 = (top + ROW * r as u32) as i32;
            root.draw(&Text::new(
                rows[r].clone(),
                (8, y0 + ROW as i32 / 2),
                left.clone(),
            ))
            .map_err(err)?;
            for (c, badges) in row.cells.iter().enumerate() {
                let x0 = (label_w + cell_w * c as u32) as i32;
                let rect = [
                    (x0 + 1, y0 + 1),
                    (x0 + cell_w as i32 - 1, y0 + ROW as i32 - 1),
                ];
                let (fill, label) = match badges.as_slice() {
                    [] => (RGBColor(0xff, 0xff, 0xff), "—".to_owned()),
                    [one] => (
                        status_color(one.status),
                        format!("{} {}", one.symbol, one.label),
                    ),
                    [first, ..] => (
                        status_color(first.status),
                        badges
                            .iter()
                            .map(|b| b.symbol)
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                };
                root.draw(&Rectangle::new(rect, fill.filled()))
                    .map_err(err)?;
                root.draw(&Rectangle::new(
                    rect,
                    RGBColor(0xbb, 0xbb, 0xbb).stroke_width(1),
                ))
                .map_err(err)?;
                let max = ((cell_w - 8) * 100 / (FONT * 55)) as usize;
                root.draw(&Text::new(
                    cut(&label, max),
                    (x0 + cell_w as i32 / 2, y0 + ROW as i32 / 2),
                    center.clone(),
                ))
                .map_err(err)?;
            }
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

fn bar_chart(
    title: &str,
    x_axis: &str,
    unit: &str,
    groups: &[String],
    series: &[BarSeries],
) -> Result<String, String> {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    // Headroom above the tallest bar for the value labels and the legend box.
    let headroom = 1.25 + 0.07 * series.len() as f64;
    let top = if max > 0.0 { max * headroom } else { 1.0 };
    let n = groups.len().max(1);
    let w = (160 + n as u32 * (40 + 28 * series.len() as u32)).clamp(480, 1600);
    // Group labels that do not fit side by side stand upright, under their bars, in a label
    // area as tall as the longest one; a long one keeps its end, where ids differ.
    const LABEL: u32 = 12;
    let slot = (w - 64 - 24) / n as u32;
    let side_by_side = groups
        .iter()
        .map(|g| width(&cut(g, 28), LABEL))
        .max()
        .unwrap_or(0);
    let upright = side_by_side + 8 > slot;
    let longest = groups
        .iter()
        .map(|g| width(&cut_front(g, 40), LABEL))
        .max()
        .unwrap_or(0);
    // `width` errs wide (it must never let side-by-side labels touch); upright, a closer guess.
    let label_area = if upright { longest * 5 / 6 + 20 } else { 48 };
    let h = 332 + label_area;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (w, h)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(cut(title, 100), ("sans-serif", 15))
            .margin(12)
            .x_label_area_size(label_area)
            .y_label_area_size(64)
            .build_cartesian_2d(0f64..n as f64, 0f64..top)
            .map_err(err)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(0)
            .x_desc(one_line(x_axis))
            .y_desc(unit)
            .draw()
            .map_err(err)?;
        let slots = series.len().max(1) as f64;
        let bar = 0.8 / slots;
        for (si, s) in series.iter().enumerate() {
            let color = SERIES_COLORS[si % SERIES_COLORS.len()];
            chart
                .draw_series(s.values.iter().enumerate().filter_map(|(g, v)| {
                    let v = (*v)?;
                    let x0 = g as f64 + 0.1 + bar * si as f64;
                    Some(Rectangle::new(
                        [(x0, 0.0), (x0 + bar * 0.92, v)],
                        color.filled(),
                    ))
                }))
                .map_err(err)?
                .label(cut(&s.name, 24))
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled())
                });
            // The value on top of each bar: readable without telling colors apart.
            chart
                .draw_series(s.values.iter().enumerate().filter_map(|(g, v)| {
                    let v = (*v)?;
                    let x = g as f64 + 0.1 + bar * (si as f64 + 0.46);
                    Some(Text::new(
                        format_value(v),
                        (x, v),
                        TextStyle::from(("sans-serif", 10).into_font())
                            .pos(Pos::new(HPos::Center, VPos::Bottom)),
                    ))
                }))
                .map_err(err)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
        for (g, name) in groups.iter().enumerate() {
            let (x, y) = chart.backend_coord(&(g as f64 + 0.5, 0.0));
            let label = if upright {
                Text::new(
                    cut_front(name, 40),
                    (x, y + 6),
                    TextStyle::from(
                        ("sans-serif", LABEL)
                            .into_font()
                            .transform(FontTransform::Rotate270),
                    )
                    .pos(Pos::new(HPos::Right, VPos::Center)),
                )
            } else {
                Text::new(
                    cut(name, 28),
                    (x, y + 8),
                    TextStyle::from(("sans-serif", LABEL).into_font())
                        .pos(Pos::new(HPos::Center, VPos::Top)),
                )
            };
            root.draw(&label).map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// A bar's value as its label: `12.3`, `172`, `0.045`.
pub(crate) fn format_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

/// Words for a plot's alt text.
pub(crate) fn alt(spec: &PlotSpec) -> String {
    match &spec.chart {
        Chart::Heatmap { .. } => format!("{} (the table above, as colors and symbols)", spec.title),
        Chart::Bars { .. } => format!("{} (values in the table below)", spec.title),
        Chart::Trend { .. } => format!("{} (the nights grid above, as a line)", spec.title),
    }
}

/// Used in HTML: a status word for legends next to plots.
pub(crate) fn legend_text() -> String {
    text::STATUSES
        .iter()
        .map(|s| format!("{} {}", text::symbol(*s), text::word(*s)))
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts of an SVG's `<text>` elements, with whether each is rotated.
    fn texts(svg: &str) -> Vec<(String, bool)> {
        svg.split("<text")
            .skip(1)
            .filter_map(|t| {
                let (attrs, rest) = t.split_once('>')?;
                let body = rest.split("</text>").next()?;
                Some((body.trim().to_owned(), attrs.contains("rotate")))
            })
            .collect()
    }

    #[test]
    fn crowded_bar_labels_stand_upright_and_keep_the_end_that_differs() {
        let groups: Vec<String> = (0..58)
            .map(|i| format!("flashinfer-kernels-h100/0.6.11.post1-native-core-{i}"))
            .collect();
        let series = [BarSeries {
            name: "all".to_owned(),
            values: (0..58).map(|i| Some(f64::from(i))).collect(),
        }];
        let svg = bar_chart("JIT", "recorded", "seconds", &groups, &series).expect("draw");
        let labels: Vec<(String, bool)> = texts(&svg)
            .into_iter()
            .filter(|(t, _)| t.contains("native-core-"))
            .collect();
        assert_eq!(labels.len(), 58);
        assert!(
            labels.iter().all(|(_, rotated)| *rotated),
            "upright when crowded"
        );
        for (i, (label, _)) in labels.iter().enumerate() {
            assert!(label.ends_with(&format!("native-core-{i}")), "{label}");
        }
        // A few short labels still sit side by side, level.
        let few = ["0.6.3".to_owned(), "0.6.11".to_owned()];
        let series = [BarSeries {
            name: "all".to_owned(),
            values: vec![Some(1.0), Some(2.0)],
        }];
        let svg = bar_chart("JIT", "flashinfer", "seconds", &few, &series).expect("draw");
        assert!(
            texts(&svg)
                .iter()
                .filter(|(t, _)| t.starts_with("0.6."))
                .all(|(_, rotated)| !rotated)
        );
    }

    #[test]
    fn cut_front_keeps_the_end() {
        assert_eq!(cut_front("abcdef", 4), "…def");
        assert_eq!(cut_front("abc", 4), "abc");
    }
}
