//! `compat.csv`: one row per cell of tonight's run, for spreadsheets and scripts.
//!
//! Columns: `id`, one column per axis (named `axis:NAME` where a name would clash with a fixed
//! column), then status and signature, phase, timings and the history columns. Every field is
//! made safe to open in a spreadsheet (see [`field`]); `compat.json` keeps the text as it is.

use super::text::{one_line, visible};
use super::view::ReportContext;
use std::borrow::Cow;

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

/// A field as a spreadsheet may safely open it: invisible characters shown (see [`visible`]),
/// and text that a spreadsheet would run as a formula (it starts with `=`, `+`, `-`, `@`, a tab
/// or a carriage return; OWASP's CSV-injection rule) prefixed with `'`, which makes it text.
/// A plain number (`-1.5`) is left as it is: it can hold no formula.
fn field(text: &str) -> Cow<'_, str> {
    let formula =
        text.starts_with(['=', '+', '-', '@', '\t', '\r']) && text.trim().parse::<f64>().is_err();
    match (formula, visible(text)) {
        (false, shown) => shown,
        (true, shown) => Cow::Owned(format!("'{shown}")),
    }
}

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
    writer.write_record(header.iter().map(|h| field(h).into_owned()))?;
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
        writer.write_record(row.iter().map(|f| field(f).into_owned()))?;
    }
    writer
        .into_inner()
        .map_err(|e| ::csv::Error::from(e.into_error()))
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn formulas_become_text_and_numbers_stay_numbers() {
        for (raw, safe) in [
            (
                "=HYPERLINK(\"http://x\",\"y\")",
                "'=HYPERLINK(\"http://x\",\"y\")",
            ),
            ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
            ("-2+3", "'-2+3"),
            ("@SUM(A1)", "'@SUM(A1)"),
            ("\t=1", "'\t=1"),
            ("\r=1", "'\\u{d}=1"),
            ("-1.5", "-1.5"),
            ("0.6.3", "0.6.3"),
            ("a=b", "a=b"),
            ("", ""),
        ] {
            assert_eq!(field(raw), safe, "{raw:?}");
        }
    }
}
