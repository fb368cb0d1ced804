//! Reports: compatibility tables, a static dashboard and plots from run folders.
//!
//! - [`load`](load_runs): run folders in, ordered by start time (the newest is tonight).
//! - `view`: the serializable view model every format shows (snapshot-tested); `context`
//!   builds it.
//! - `bisects`: bisect folders, matched to the cells they explain.
//! - `layout`: which axes become rows, columns and separate tables.
//! - `markdown`, `csv`, `json`, `junit`, `html`, `plots`: the formats; they only lay out.
//! - `repro`, `logs`, `text`: reproducer commands, log excerpts, escaping and naming rules.
//! - [`render()`]: everything above, into a report folder.

mod bisects;
mod context;
mod csv;
mod error;
mod hang;
mod html;
mod json;
mod junit;
mod layout;
mod load;
mod logs;
mod markdown;
mod nights;
mod plots;
mod render;
mod replayed;
mod repro;
mod text;
mod view;

pub use context::{DEFAULT_NIGHTS, ReportOptions};
pub use error::ReportError;
pub use layout::{Axis, AxisKind, Layout};
pub(crate) use load::load_run_with;
pub use logs::{Excerpt, ExcerptLine};
pub use render::{ReportSummary, build_context, render};
pub use repro::Reproducer;
pub(crate) use text::visible;
pub use view::{
    AxisValue, BarSeries, BisectKind, BisectState, BisectView, CellBadge, CellBisect, CellEntry,
    CellHistory, CellLink, ChangeRow, Changes, Chart, Counts, LogRef, MatrixView, NewFingerprint,
    NightHead, NightRow, NightState, NightsView, PivotRow, PivotTable, PlotSpec, ProbeView,
    RecentChange, ReportContext, RunView, StateChange, StateView, TrendSeries, Verdict,
};
