//! `gpucompat gate`: the matrix's cells with the base pins and with the head pins, paired; exit 1
//! only for confirmed regressions. With `--github-pr`/`--sha`, the verdict is posted; a GitHub
//! outage never changes the verdict or the exit code.

use crate::bisect::probes::InputError;
use crate::compare::PairBy;
use crate::errors::{CliError, exit};
use crate::exec::logsink::LogLimits;
use crate::gate::{self, GateError, GateFile, pins};
use crate::github;
use crate::inventory;
use crate::run::RunOptions;
use clap::{Args, ValueEnum};
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Examples:
  gpucompat gate matrices/nightly.toml --base base.txt --head head.txt
  gpucompat gate matrices/nightly.toml --base-ref origin/main --head-ref HEAD
  gpucompat gate FILE --base b.txt --head h.txt --baseline-run runs/nightly/2026-11-23T02-00-00Z
  gpucompat gate FILE --base base.txt --head head.txt --github-pr 1234 --sha \"$GITHUB_SHA\"

Pins:  --base PINS --head PINS        requirement files, or `name==version,...` lists
       --base-ref REV --head-ref REV  the pins of requirements.txt / pyproject.toml at two git
                                      revisions (`--pins-file` names other files)

Every cell runs with both pin sets (gate folder: base/, head/, gate.json). A regression (passed
on base, fails on head) is confirmed by one retry before it blocks; cells failing on both sides,
flaky cells and infrastructure faults never block. With several moved packages, attribution
names the culprit of each confirmed regression.

GitHub (`--github-pr N`, `--sha SHA`): GITHUB_API_URL, GITHUB_REPOSITORY, GITHUB_TOKEN and
GITHUB_SHA as on Actions. One sticky comment per PR and matrix, edited on every run; a check run
(or a commit status where the token cannot create check runs). If GitHub cannot be reached, the
verdict is still printed, written to gate.json, and the exit code is the gate's.

Exit codes:
  0    no confirmed regression
  1    confirmed regressions (the verdict line names them)
  2    bad input (matrix file, pins, arguments)
  3    the harness itself failed
  130  interrupted; `--resume` continues";

#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub(crate) struct GateArgs {
    /// Matrix file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The pins before the bump: a requirement file, or `name==version,...`.
    #[arg(
        long,
        value_name = "PINS",
        required_unless_present = "base_ref",
        conflicts_with = "base_ref"
    )]
    base: Option<String>,
    /// The pins after the bump.
    #[arg(
        long,
        value_name = "PINS",
        required_unless_present = "head_ref",
        conflicts_with = "head_ref"
    )]
    head: Option<String>,
    /// The git revision whose pin files hold the base pins (e.g. the PR's base branch).
    #[arg(long, value_name = "REV")]
    base_ref: Option<String>,
    /// The git revision whose pin files hold the head pins (e.g. `HEAD`).
    #[arg(long, value_name = "REV")]
    head_ref: Option<String>,
    /// Files read at `--base-ref`/`--head-ref`, relative to the working folder; repeatable
    /// [default: requirements.txt, pyproject.toml].
    #[arg(long, value_name = "PATH")]
    pins_file: Vec<String>,
    /// Only this cell; repeatable.
    #[arg(long, value_name = "ID")]
    cell: Vec<String>,
    /// A recent run folder (a nightly) whose records stand for the base side where the harness
    /// version, values and pins match.
    #[arg(long, value_name = "DIR")]
    baseline_run: Option<PathBuf>,
    /// How cells are paired: `auto`, `id`, or the keys that identify a cell.
    #[arg(long, value_name = "auto|id|KEY,...", default_value = "auto")]
    pair_by: PairBy,
    /// Skip attribution of confirmed regressions.
    #[arg(long)]
    no_attribution: bool,
    /// The gate folder [default: gates/<hash of the two pin sets>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Continue the gate in `--out`, reusing every record it has.
    #[arg(long)]
    resume: bool,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Post the verdict as one sticky comment on this pull request.
    #[arg(long, value_name = "N")]
    github_pr: Option<u64>,
    /// Report a check run (or commit status) on this commit [default: $GITHUB_SHA with --github-pr].
    #[arg(long, value_name = "SHA")]
    sha: Option<String>,
    /// Link to the full report in the comment [default: this Actions run, when on Actions].
    #[arg(long, value_name = "URL")]
    report_url: Option<String>,
    /// Cells at a time [default: one per GPU, or per CPU].
    #[arg(long, value_name = "N")]
    jobs: Option<usize>,
    /// GPUs of this host as a TOML file of `[[gpu]]` tables [default: detected with nvidia-smi].
    #[arg(long, value_name = "FILE")]
    inventory: Option<PathBuf>,
    /// Where environments and JIT caches live [default: $GPUCOMPAT_CACHE_DIR, else ~/.cache/gpucompat].
    #[arg(long, value_name = "DIR")]
    cache_dir: Option<PathBuf>,
    /// Time between SIGTERM and SIGKILL when a cell is torn down.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = humantime::parse_duration)]
    grace: Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    Text,
    Json,
}

fn side(
    flag: &str,
    given: Option<&str>,
    rev: Option<&str>,
    files: &[String],
) -> Result<pins::SidePins, InputError> {
    match (given, rev) {
        (Some(text), _) => pins::given(flag, text),
        (None, Some(rev)) => pins::at_ref(flag, rev, files, std::path::Path::new(".")),
        (None, None) => Err(InputError::Usage(format!(
            "say the {} pins: `{flag} PINS` or `{flag}-ref REV`",
            &flag[2..]
        ))),
    }
}

pub(crate) fn run(args: GateArgs) -> Result<u8, CliError> {
    let files: Vec<String> = if args.pins_file.is_empty() {
        pins::DEFAULT_PIN_FILES
            .iter()
            .map(|s| (*s).to_owned())
            .collect()
    } else {
        args.pins_file.clone()
    };
    let base = side(
        "--base",
        args.base.as_deref(),
        args.base_ref.as_deref(),
        &files,
    )
    .map_err(input_error)?;
    let head = side(
        "--head",
        args.head.as_deref(),
        args.head_ref.as_deref(),
        &files,
    )
    .map_err(input_error)?;
    // GitHub settings are checked before any cell runs: a typo costs seconds, not hours.
    let target = match (args.github_pr, args.sha.clone()) {
        (None, None) => None,
        (pr, sha) => Some(github::Target::from_env(pr, sha).map_err(CliError::input)?),
    };
    let inventory = match &args.inventory {
        Some(path) => inventory::load(path).map_err(CliError::input)?,
        None => inventory::detect(),
    };
    let absolute = |path: PathBuf| std::path::absolute(&path).unwrap_or(path);
    let out = args.out.clone().unwrap_or_else(|| {
        let text = format!("{}\n{}", base.source, head.source);
        PathBuf::from("gates").join(format!(
            "gate-{}",
            crate::digest::sha256_hex(text.as_bytes(), 4)
        ))
    });
    let request = gate::Request {
        matrix: args.file.clone(),
        base,
        head,
        cells: args.cell.clone(),
        baseline_run: args.baseline_run.clone(),
        pair_by: args.pair_by.clone(),
        out: out.clone(),
        resume: args.resume,
        attribute: !args.no_attribution,
        run: RunOptions {
            out: PathBuf::new(),
            jobs: args.jobs,
            inventory,
            resume: false,
            cells: Vec::new(),
            cache_root: absolute(
                args.cache_dir
                    .clone()
                    .unwrap_or_else(super::run::default_cache_dir),
            ),
            limits: LogLimits::from_total(64 << 20),
            grace: args.grace,
            reaper_exe: std::env::current_exe().ok(),
            interactive: false,
            // A resumed gate runs again the cells whose last try was an infrastructure fault.
            retry_errors: true,
            quiet: false,
            slow_after: Some(Duration::from_secs(60)),
        },
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(CliError::harness)?;
    let mut say = |line: &str| {
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    };
    let result = runtime.block_on(gate::gate(request, &mut say));
    let mut file = match result {
        Ok(file) => file,
        Err(GateError::Interrupted(folder)) => {
            say(&format!(
                "interrupted: records kept in {folder}; continue with the same command and `--out {folder} --resume`"
            ));
            return Ok(exit::INTERRUPTED);
        }
        Err(err) => return Err(gate_error(err)),
    };
    // The verdict first: printed and on disk before GitHub is asked anything.
    let code = if file.blocks() {
        exit::FAILURES
    } else {
        exit::SUCCESS
    };
    if let Some(target) = target {
        let report_url = args.report_url.clone().or_else(github::actions_run_url);
        let posted = runtime.block_on(github::post_gate(&target, &file, report_url.as_deref()));
        if posted.state != "posted" {
            say(&format!(
                "github: the verdict was not posted ({}); it stands, and is in {}",
                posted.reason.as_deref().unwrap_or("unknown"),
                out.join(gate::summary::FILE).display()
            ));
        }
        file.github = Some(posted);
        // A folder that cannot take the note is no reason to lose the exit code.
        if let Err(err) = gate::driver::write(&out, &file) {
            say(&format!("cannot record the GitHub result: {err}"));
        }
    }
    runtime.shutdown_timeout(Duration::from_secs(1));
    let text = match args.format {
        Format::Json => {
            let mut text = serde_json::to_string_pretty(&file).map_err(CliError::harness)?;
            text.push('\n');
            say(&file.verdict_line());
            text
        }
        Format::Text => summary_text(&file, &out),
    };
    super::print_stdout(&text)?;
    Ok(code)
}

fn input_error(err: InputError) -> CliError {
    match err {
        InputError::Matrix(rendered) => CliError::rendered(exit::BAD_INPUT, rendered),
        err => CliError::input(err),
    }
}

fn gate_error(err: GateError) -> CliError {
    match err {
        GateError::Input(err) => input_error(err),
        err if err.is_input() => CliError::input(err),
        err => CliError::harness(err),
    }
}

fn summary_text(file: &GateFile, out: &std::path::Path) -> String {
    let plain = |s: &str| crate::report::visible(s).into_owned();
    let mut text = String::new();
    let lists = [
        ("regressed", &file.regressions),
        ("fixed", &file.fixed),
        ("still failing", &file.still_failing),
        ("flaky", &file.flaky),
        ("spurious", &file.spurious),
        ("expected", &file.expected),
    ];
    let rows: Vec<Vec<String>> = lists
        .iter()
        .flat_map(|(what, cells)| {
            cells.iter().map(move |c| {
                vec![
                    plain(&c.id),
                    (*what).to_owned(),
                    c.base.as_ref().map_or("—".into(), ToString::to_string),
                    c.head.as_ref().map_or("—".into(), ToString::to_string),
                    c.culprits.as_ref().map_or(String::new(), |c| c.join("+")),
                ]
            })
        })
        .collect();
    if !rows.is_empty() {
        text.push_str(&super::table::render(
            &["cell", "verdict", "base", "head", "culprit"],
            &rows,
        ));
        text.push('\n');
    }
    for c in &file.regressions {
        text.push_str(&format!("reproduce {}: {}\n", plain(&c.id), c.reproducer));
    }
    if let Some(moved) = file.pairing.describe() {
        text.push_str(&format!("{}\n", plain(&moved)));
    }
    for note in &file.notes {
        text.push_str(&format!("note: {}\n", plain(note)));
    }
    text.push_str(&format!(
        "gate folder: {} ({})\n",
        out.display(),
        gate::summary::FILE
    ));
    text.push_str(&file.verdict_line());
    text.push('\n');
    text
}
