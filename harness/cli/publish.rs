//! `gpucompat publish RUN --issues`: a nightly's new failures as GitHub issues.

use crate::errors::{CliError, exit};
use crate::github::{self, issues};
use crate::report;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Examples:
  gpucompat publish runs/nightly/2026-11-23T02-00-00Z --issues

Opens one issue per new failure fingerprint of the run (label `gpucompat`), comments on the
existing issue when a failure recurs, and closes nothing. Spurious records (infrastructure) and
expected failures are not published. GITHUB_API_URL, GITHUB_REPOSITORY and GITHUB_TOKEN as on
Actions.

Exit codes:
  0    published (or nothing to publish)
  2    bad input (not a run folder, GitHub settings missing)
  3    GitHub could not be reached or refused (after retries)";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct PublishArgs {
    /// Run folder.
    #[arg(value_name = "RUN")]
    run: PathBuf,
    /// Open or update one issue per failure fingerprint.
    #[arg(long, required = true)]
    issues: bool,
    /// Link to the run's report in the issues [default: this Actions run, when on Actions].
    #[arg(long, value_name = "URL")]
    report_url: Option<String>,
}

pub(crate) fn run(args: PublishArgs) -> Result<u8, CliError> {
    let run = report::load_run_with(&args.run, false).map_err(super::report::report_error)?;
    let target = github::Target::from_env(None, None).map_err(CliError::input)?;
    let failures = issues::failures(&run.records);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::harness)?;
    // The client's service stack spawns onto the runtime it is built in.
    let client = {
        let _inside = runtime.enter();
        target.client().map_err(CliError::harness)?
    };
    let report_url = args.report_url.clone().or_else(github::actions_run_url);
    let name = run.manifest.as_ref().map_or(run.name.clone(), |m| {
        format!("{} {}", run.name, m.started_at)
    });
    let published = runtime
        .block_on(issues::publish(
            &client,
            &name,
            report_url.as_deref(),
            &failures,
        ))
        .map_err(CliError::harness)?;
    let mut text = String::new();
    for p in &published {
        text.push_str(&format!(
            "{} #{} ({}): {}\n",
            p.action,
            p.issue,
            p.cells.join(", "),
            p.url
        ));
    }
    text.push_str(&format!(
        "{} failure fingerprint(s): {} opened, {} commented, {} already recorded\n",
        published.len(),
        published.iter().filter(|p| p.action == "opened").count(),
        published.iter().filter(|p| p.action == "commented").count(),
        published
            .iter()
            .filter(|p| p.action == "already_recorded")
            .count()
    ));
    let _ = std::io::stderr().flush();
    super::print_stdout(&text)?;
    Ok(exit::SUCCESS)
}
