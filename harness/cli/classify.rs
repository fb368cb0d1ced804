//! `gpucompat classify`: name the root cause of failure logs.

use crate::classify::{Classification, Classifier, Clue, DecidedBy, Evidence, Verdict};
use crate::errors::{CliError, exit};
use crate::record::Exit;
use anyhow::{Context, anyhow};
use clap::{Args, ValueEnum};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

#[derive(Debug, Args)]
#[command(after_help = "\
The root cause is the first fatal failure in the log, across interleaved ranks and processes;
what follows it is secondary. The exit status and the watchdog's verdict decide only when the
log names no fatal error. Where no rule names the failure, the lexical model (a reading of the
words of the log's last lines, trained on the project's corpus) may name it, and says so
(`decided by: lexical model`); `--rules-only` leaves it out. `unknown` means nothing fits: an
honest unknown beats a wrong name.
A failure found is not an error of this command: it exits 0 whenever every file was classified.

Examples:
  gpucompat classify runs/demo/2026-11-23T19-04-05Z/logs/0.6.3-sm_90.log
  gpucompat classify --exit-code 139 crash.log
  gpucompat classify --explain --exit-code 137 worker.log
  journalctl -u vllm | gpucompat classify -

Exit codes:
  0  every file was classified (whatever it names)
  2  bad input (a file that does not exist or is a folder, a bad --signal or --matrix)
  3  the harness itself failed")]
pub(crate) struct ClassifyArgs {
    /// Log files, classified in order (`-` reads standard input).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// `jsonl`: one JSON object per file, in order (`path`, `signature`, `fingerprint`, `line`,
    /// `excerpt`, `spurious`, `explanation`, `hint`, `rule`, `excerpt_start`, `decided_by`,
    /// `evidence`); `text`: a short report per file.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Text format: also say which evidence decided (the rule and line, the exception type, the
    /// CUDA/NCCL error, the exit, the watchdog's verdict). JSON always carries it.
    #[arg(long)]
    explain: bool,
    /// Also apply the `[[rules]]` of this matrix file (tried before the built-in rules).
    #[arg(long, value_name = "FILE")]
    matrix: Option<PathBuf>,
    /// Exit code of the process that wrote the logs (139 = SIGSEGV, 137 = SIGKILL).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    exit_code: Option<i32>,
    /// Signal that ended the process: a number or a name (`9`, `KILL`, `SIGSEGV`).
    #[arg(long, value_name = "SIGNAL", value_parser = parse_signal)]
    signal: Option<i32>,
    /// The harness watchdog's verdict on the run that wrote the logs.
    #[arg(long, value_enum, value_name = "VERDICT")]
    watchdog: Option<WatchdogArg>,
    /// Name failures by rules, exit and watchdog only: no lexical model.
    #[arg(long)]
    rules_only: bool,
    /// (For `scripts/train-lexical-model`.) Rules only, JSON lines that also carry the words
    /// the lexical model would read (`words`) and whether the verdict is open to it
    /// (`open_to_lexical`).
    #[arg(long, hide = true)]
    lexical_words: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    Jsonl,
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WatchdogArg {
    /// No progress for the no-progress window.
    Deadlock,
    /// Still busy at the deadline.
    Timeout,
}

/// One output line of `--format jsonl`: the contract's fields first, then the extras.
#[derive(Serialize)]
struct Entry<'a> {
    path: &'a str,
    signature: crate::signature::Signature,
    fingerprint: Option<&'a str>,
    line: Option<u64>,
    excerpt: Option<&'a str>,
    spurious: bool,
    explanation: Option<&'a str>,
    hint: Option<&'a str>,
    rule: Option<&'a str>,
    excerpt_start: Option<u64>,
    decided_by: Option<&'static str>,
    evidence: &'a [Clue],
}

/// A `--lexical-words` line: the rules' verdict and what the lexical model would read.
#[derive(Serialize)]
struct Training<'a> {
    #[serde(flatten)]
    entry: Entry<'a>,
    open_to_lexical: bool,
    words: std::collections::BTreeMap<String, u32>,
}

impl<'a> Entry<'a> {
    fn new(path: &'a str, c: &'a Classification) -> Self {
        Entry {
            path,
            signature: c.signature,
            fingerprint: c.fingerprint.as_deref(),
            line: c.line,
            excerpt: c.excerpt.as_deref(),
            spurious: c.spurious,
            explanation: c.explanation.as_deref(),
            hint: c.hint.as_deref(),
            rule: c.rule.as_deref(),
            excerpt_start: c.excerpt_start,
            decided_by: c.decided_by.map(DecidedBy::as_str),
            evidence: &c.evidence,
        }
    }
}

pub(crate) fn run(args: ClassifyArgs) -> Result<u8, CliError> {
    check_inputs(&args.files)?;
    let classifier = match &args.matrix {
        Some(file) => {
            let plan = super::matrix::load(file)?;
            Classifier::with_rules(&plan.rules).map_err(|err| {
                CliError::input(
                    anyhow::Error::new(err)
                        .context(format!("cannot use the rules of `{}`", file.display())),
                )
            })?
        }
        None => Classifier::builtin(),
    };
    let classifier = if args.rules_only || args.lexical_words {
        classifier.rules_only()
    } else {
        classifier
    };
    let evidence = Evidence {
        exit: (args.exit_code.is_some() || args.signal.is_some()).then_some(Exit {
            code: args.exit_code,
            signal: args.signal,
        }),
        watchdog: args.watchdog.map(|w| match w {
            WatchdogArg::Deadlock => Verdict::Deadlock,
            WatchdogArg::Timeout => Verdict::Timeout,
        }),
    };
    for file in &args.files {
        if args.lexical_words {
            super::print_stdout(&training_line(&classifier, file, &evidence)?)?;
            continue;
        }
        let result = if is_stdin(file) {
            classifier.classify_reader(std::io::stdin().lock(), &evidence)
        } else {
            classifier.classify_file(file, &evidence)
        };
        let classification = result
            .with_context(|| format!("classifying `{}`", file.display()))
            .map_err(CliError::harness)?;
        let path = file.display().to_string();
        let text = match args.format {
            Format::Jsonl => {
                let mut line = serde_json::to_string(&Entry::new(&path, &classification))
                    .map_err(CliError::harness)?;
                line.push('\n');
                line
            }
            Format::Text => render_text(&path, &classification, args.explain),
        };
        super::print_stdout(&text)?;
    }
    Ok(exit::SUCCESS)
}

/// A `--lexical-words` line for one file: the rules' verdict and the words, from one read.
fn training_line(
    classifier: &Classifier,
    file: &Path,
    evidence: &Evidence,
) -> Result<String, CliError> {
    let read = if is_stdin(file) {
        classifier.classify_with_words(std::io::stdin().lock(), evidence)
    } else {
        std::fs::File::open(file).and_then(|f| classifier.classify_with_words(f, evidence))
    };
    let (classification, words) = read
        .with_context(|| format!("classifying `{}`", file.display()))
        .map_err(CliError::harness)?;
    let path = file.display().to_string();
    let entry = Training {
        entry: Entry::new(&path, &classification),
        open_to_lexical: classifier.open_to_lexical(&classification),
        words,
    };
    let mut line = serde_json::to_string(&entry).map_err(CliError::harness)?;
    line.push('\n');
    Ok(line)
}

fn is_stdin(path: &Path) -> bool {
    path.as_os_str() == "-"
}

/// Every file must exist and be a file before anything is printed: a typo is bad input (exit 2),
/// reported for all paths at once.
fn check_inputs(files: &[PathBuf]) -> Result<(), CliError> {
    let mut problems = Vec::new();
    for file in files.iter().filter(|f| !is_stdin(f)) {
        match std::fs::metadata(file) {
            Ok(meta) if meta.is_dir() => {
                problems.push(format!(
                    "`{}` is a directory, not a log file",
                    file.display()
                ));
            }
            Ok(_) => {}
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                problems.push(format!("no such file: `{}`", file.display()));
            }
            Err(err) => problems.push(format!("cannot read `{}`: {err}", file.display())),
        }
    }
    if files.iter().filter(|f| is_stdin(f)).count() > 1 {
        problems.push("`-` (standard input) can be given only once".to_owned());
    }
    match problems.len() {
        0 => Ok(()),
        1 => Err(CliError::input(anyhow!("{}", problems[0]))),
        n => Err(CliError::input(anyhow!(
            "{n} inputs cannot be classified:\n  {}",
            problems.join("\n  ")
        ))),
    }
}

fn render_text(path: &str, c: &Classification, explain: bool) -> String {
    let mut out = String::new();
    let _ = write!(out, "{path}: {}", c.signature);
    match (&c.line, &c.rule) {
        (Some(line), Some(rule)) => {
            let _ = write!(out, " (line {line}, rule {rule})");
        }
        (Some(line), None) => {
            let _ = write!(out, " (line {line})");
        }
        (None, _) if c.signature == crate::signature::Signature::Unknown && c.excerpt.is_none() => {
            out.push_str(" (no failure found)");
        }
        (None, _) if c.decided_by == Some(DecidedBy::LexicalModel) => {
            out.push_str(" (from the words of the log's last lines)");
        }
        (None, _) => out.push_str(" (from the exit status or watchdog)"),
    }
    if c.spurious {
        out.push_str(" [spurious: infrastructure]");
    }
    out.push('\n');
    if let Some(fp) = &c.fingerprint {
        let _ = writeln!(out, "  fingerprint: {fp}");
    }
    if let Some(why) = &c.explanation {
        let _ = writeln!(out, "  why: {why}");
    }
    if let Some(hint) = &c.hint {
        let _ = writeln!(out, "  hint: {hint}");
    }
    if explain {
        let decided = c
            .decided_by
            .map_or("nothing (no evidence names a failure)", DecidedBy::as_str);
        let _ = writeln!(out, "  decided by: {}", decided.replace('_', " "));
        for clue in &c.evidence {
            let _ = writeln!(out, "  evidence: {clue}");
        }
    }
    if let Some(excerpt) = &c.excerpt {
        let start = c.excerpt_start.unwrap_or(1);
        let last = start + excerpt.lines().count().saturating_sub(1) as u64;
        let width = last.to_string().len();
        for (i, text) in excerpt.lines().enumerate() {
            let n = start + i as u64;
            let mark = if Some(n) == c.line { '>' } else { ' ' };
            let _ = writeln!(out, "  {mark} {n:>width$} | {text}");
        }
    }
    out
}

/// `9`, `KILL`, `SIGKILL`, `sigsegv`.
fn parse_signal(text: &str) -> Result<i32, String> {
    if let Ok(n) = text.parse::<i32>() {
        return if (1..=64).contains(&n) {
            Ok(n)
        } else {
            Err(format!("signal numbers are 1 to 64, not {n}"))
        };
    }
    let upper = text.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<nix::sys::signal::Signal>()
        .map(|s| s as i32)
        .map_err(|_| {
            format!("unknown signal `{text}` (expected a number or a name like KILL, SEGV)")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_parse_by_number_and_name() {
        assert_eq!(parse_signal("9"), Ok(9));
        assert_eq!(parse_signal("KILL"), Ok(9));
        assert_eq!(parse_signal("sigsegv"), Ok(11));
        assert!(parse_signal("0").is_err());
        assert!(parse_signal("NOPE").is_err());
    }
}
