//! `gpucompat publish`: a nightly's new failures as GitHub issues (`RUN --issues`), or a gate
//! folder's verdict as the PR's sticky comment and check (`GATE --pr N`), so the job that runs
//! the cells on a GPU runner never needs a token that can write.

use crate::errors::{CliError, exit};
use crate::gate;
use crate::github::{self, issues};
use crate::report;
use clap::Args;
use std::io::Write;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Examples:
  gpucompat publish runs/nightly/2026-11-23T02-00-00Z --issues
  gpucompat publish gates/gate-1a2b3c4d --pr 123 --sha 0123abc

`--issues` opens one issue per new failure fingerprint of the run (label `gpucompat`), comments on
the existing issue when a failure recurs, and closes nothing. Spurious records (infrastructure) and
expected failures are not published.

`--pr N` posts a finished gate folder's verdict (its gate.json, as `gpucompat gate` wrote it) as
the pull request's sticky comment, and as a check run or commit status on `--sha`: what
`gate --github-pr` does, for workflows where the job that ran the cells had a read-only token
(a labelled fork PR). The result is added to gate.json's `github`.

GITHUB_API_URL, GITHUB_REPOSITORY and GITHUB_TOKEN as on Actions.

Exit codes:
  0    published (or nothing to publish)
  2    bad input (not a run folder, GitHub settings missing)
  3    GitHub could not be reached or refused (after retries)";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
#[command(group(clap::ArgGroup::new("what").required(true).args(["issues", "pr"])))]
pub(crate) struct PublishArgs {
    /// Run folder (`--issues`) or gate folder (`--pr`).
    #[arg(value_name = "DIR")]
    run: PathBuf,
    /// Open or update one issue per failure fingerprint of a run.
    #[arg(long)]
    issues: bool,
    /// Post a gate folder's verdict as this pull request's sticky comment.
    #[arg(long, value_name = "N", conflicts_with = "issues")]
    pr: Option<u64>,
    /// With `--pr`: the commit that gets the check run (or commit status) [default: GITHUB_SHA].
    #[arg(long, value_name = "SHA", requires = "pr")]
    sha: Option<String>,
    /// Link to the full report [default: this Actions run, when on Actions].
    #[arg(long, value_name = "URL")]
    report_url: Option<String>,
}

pub(crate) fn run(args: PublishArgs) -> Result<u8, CliError> {
    if let Some(pr) = args.pr {
        return gate_verdict(&args, pr);
    }
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

/// `--pr`: the gate folder's verdict posted as `gate --github-pr` would have.
fn gate_verdict(args: &PublishArgs, pr: u64) -> Result<u8, CliError> {
    let path = args.run.join(gate::summary::FILE);
    let text = std::fs::read_to_string(&path).map_err(|err| {
        CliError::input(anyhow::anyhow!(
            "{}: cannot read the gate's verdict ({err}); give the folder `gpucompat gate --out` wrote",
            path.display()
        ))
    })?;
    let mut file: gate::GateFile = serde_json::from_str(&text).map_err(|err| {
        CliError::input(anyhow::anyhow!(
            "{}: not a gate.json: {err}",
            path.display()
        ))
    })?;
    if file.state != gate::summary::State::Finished {
        return Err(CliError::input(anyhow::anyhow!(
            "{}: the gate did not finish; finish it (`gpucompat gate ... --out {} --resume`) before posting its verdict",
            path.display(),
            args.run.display()
        )));
    }
    let target = github::Target::from_env(Some(pr), args.sha.clone()).map_err(CliError::input)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(CliError::harness)?;
    let report_url = args.report_url.clone().or_else(github::actions_run_url);
    let posted = runtime.block_on(github::post_gate(&target, &file, report_url.as_deref()));
    let ok = posted.state == "posted";
    let line = match (&posted.comment_url, &posted.reason) {
        (Some(url), _) if ok => format!("posted: {url}\n"),
        _ => format!(
            "not posted: {}\n",
            posted.reason.as_deref().unwrap_or("unknown")
        ),
    };
    file.github = Some(posted);
    gate::driver::write(&args.run, &file).map_err(|err| CliError::harness(anyhow::anyhow!(err)))?;
    super::print_stdout(&line)?;
    Ok(if ok { exit::SUCCESS } else { exit::HARNESS })
}
