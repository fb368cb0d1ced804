//! `compat.json`: the view model itself, for scripts and other tools.
//!
//! The same data every other format lays out (see [`super::ReportContext`]); its shape is what
//! the report's snapshot tests pin down.

use super::view::ReportContext;

/// Renders `compat.json`.
pub(crate) fn render(ctx: &ReportContext) -> Result<Vec<u8>, serde_json::Error> {
    let mut bytes = serde_json::to_vec_pretty(ctx)?;
    bytes.push(b'\n');
    Ok(bytes)
}
