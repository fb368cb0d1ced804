//! `compat.csv`: one row per cell of tonight's run, for spreadsheets and scripts.
//!
//! Columns: `id`, one column per axis (named `axis:NAME` where a name would clash with a fixed
//! column), then status and signature, phase, timings and the history columns.

use super::text::one_line;
use super::view::ReportContext;

const FIXED: [&str; 20] = [
    "status",
    "signature",
    "phase",
    "spurious",
    "attempts",
    "duration_s",
    "time_to_ready_s",
    "jit_s",
    "ttft_s",
    "tpot_s",
    "tokens_per_s",
    "fingerprint",
    "new_fingerprint",
    "expectation_link",
    "reason",
    "change",
    "last_change_run",
    "last_change_from",
    "log",
    "page",
];

fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

/// Renders `compat.csv`.
pub(crate) fn render(ctx: &ReportContext) -> Result<Vec<u8>, ::csv::Error> {
    let mut writer = ::csv::Writer::from_writer(Vec::new());
    let mut header = vec!["id".to_owned()];
    for axis in &ctx.axes {
        let clash = axis.name == "id" || FIXED.contains(&axis.name.as_str());
        header.push(if clash {
            format!("axis:{}", axis.name)
        } else {
            axis.name.clone()
        });
    }
    header.extend(FIXED.iter().map(|s| (*s).to_owned()));
    writer.write_record(&header)?;
    for cell in &ctx.cells {
        let mut row = vec![cell.id.clone()];
        for axis in &ctx.axes {
            row.push(
                cell.values
                    .iter()
                    .find(|v| v.axis == axis.name)
                    .map(|v| v.value.clone())
                    .unwrap_or_default(),
            );
        }
        let m = &cell.metrics;
        row.extend([
            cell.status.as_str().to_owned(),
            cell.signature
                .map(|s| s.as_str().to_owned())
                .unwrap_or_default(),
            cell.phase
                .map(|p| p.as_str().to_owned())
                .unwrap_or_default(),
            cell.spurious.to_string(),
            cell.attempts.to_string(),
            cell.duration_s.to_string(),
            num(m.time_to_ready_s),
            num(m.jit_s),
            num(m.ttft_s),
            num(m.tpot_s),
            num(m.tokens_per_s),
            cell.fingerprint
                .as_deref()
                .map(one_line)
                .unwrap_or_default(),
            cell.new_fingerprint.to_string(),
            cell.expectation
                .as_ref()
                .and_then(|e| e.link.clone())
                .unwrap_or_default(),
            cell.reason.as_deref().map(one_line).unwrap_or_default(),
            cell.change
                .map(|c| c.as_str().to_owned())
                .unwrap_or_default(),
            cell.history
                .last_change
                .as_ref()
                .map(|c| c.run.clone())
                .unwrap_or_default(),
            cell.history
                .last_change
                .as_ref()
                .map(|c| c.from.text())
                .unwrap_or_default(),
            cell.log
                .as_ref()
                .map(|l| l.href.clone())
                .unwrap_or_default(),
            cell.page.clone(),
        ]);
        writer.write_record(&row)?;
    }
    writer
        .into_inner()
        .map_err(|e| ::csv::Error::from(e.into_error()))
}
