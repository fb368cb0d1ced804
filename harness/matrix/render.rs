//! Per-cell rendering: each cell's templates filled with its values, its pins, environment and
//! engine settings, reporting (through [`Checker`]) what renders to something unusable.

use super::expand::{Combination, Source};
use super::gpus;
use super::load::{DEFAULT_NO_PROGRESS, DEFAULT_TIMEOUT, Purpose, RUNTIME_KEYS};
use super::raw::{self, RawFile, RawMatrix, RawServer, Sp, Span};
use super::template::{Template, value_text};
use super::validate::{Checker, inner_span};
use crate::diag::Diagnostic;
use crate::engines::{ServerKind, ServerSpec};
use crate::matrix::plan::*;
use crate::record::Values;
use crate::suggest::did_you_mean;
use pep440_rs::Version;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a template may use the runner's placeholders.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scope {
    Cell,
    Server,
}

/// A template string of the file and where it may be used.
pub(super) struct FieldTemplate<'a> {
    pub(super) field: &'a Sp<String>,
    pub(super) what: &'static str,
    pub(super) scope: Scope,
    pub(super) parsed: Template,
}

/// Every templated string of the file, parsed once.
pub(super) struct Templates<'a> {
    pub(super) all: Vec<FieldTemplate<'a>>,
}

impl<'a> Templates<'a> {
    pub(super) fn collect(raw: &'a RawFile) -> Self {
        let mut all = Vec::new();
        let mut add = |field: &'a Option<Sp<String>>, what: &'static str, scope: Scope| {
            if let Some(field) = field {
                all.push(FieldTemplate {
                    field,
                    what,
                    scope,
                    parsed: Template::parse(&field.value),
                });
            }
        };
        add(&raw.gpus, "gpus", Scope::Cell);
        add(&raw.engine, "engine", Scope::Cell);
        if let Some(job) = &raw.job {
            add(&job.command, "command", Scope::Cell);
            add(&job.common.cache, "cache", Scope::Cell);
        }
        if let Some(s) = &raw.server {
            add(&s.command, "command", Scope::Server);
            add(&s.model, "model", Scope::Cell);
            add(&s.tp, "tp", Scope::Cell);
            add(&s.workers, "workers", Scope::Cell);
            add(&s.args, "args", Scope::Server);
            add(&s.health, "health", Scope::Cell);
            add(&s.endpoint, "endpoint", Scope::Cell);
            add(&s.prompt, "prompt", Scope::Cell);
            add(&s.expect, "expect", Scope::Cell);
            add(&s.check, "check", Scope::Cell);
            add(&s.ready_line, "ready-line", Scope::Cell);
            add(&s.common.cache, "cache", Scope::Cell);
        }
        if let Some(python) = &raw.python {
            add(&python.requirements, "requirements", Scope::Cell);
        }
        for entry in raw.python.iter().flat_map(|p| &p.site) {
            all.push(FieldTemplate {
                field: entry,
                what: "site",
                scope: Scope::Cell,
                parsed: Template::parse(&entry.value),
            });
        }
        let mut templates = Templates { all };
        for (_, value) in &raw.env {
            templates.all.push(FieldTemplate {
                field: value,
                what: "env",
                scope: Scope::Cell,
                parsed: Template::parse(&value.value),
            });
        }
        templates
    }

    pub(super) fn get(&self, field: &Option<Sp<String>>) -> Option<&FieldTemplate<'a>> {
        let field = field.as_ref()?;
        self.find(field)
    }

    pub(super) fn find(&self, field: &Sp<String>) -> Option<&FieldTemplate<'a>> {
        self.all.iter().find(|t| std::ptr::eq(t.field, field))
    }
}

/// What one cell is rendered from.
pub(super) struct CellContext<'c, 'm> {
    pub(super) id: &'c str,
    pub(super) combo: &'c Combination<'m>,
    pub(super) matrix: &'c RawMatrix,
}

impl CellContext<'_, '_> {
    pub(super) fn render(&self, template: &FieldTemplate<'_>) -> String {
        if let Some(text) = template.parsed.literal() {
            return text.to_owned();
        }
        let mut out = String::with_capacity(template.parsed.size_hint());
        self.render_into(template, &mut out);
        out
    }

    pub(super) fn render_into(&self, template: &FieldTemplate<'_>, out: &mut String) {
        template.parsed.render_into(out, |name| {
            let value = self.combo.get(name);
            if value.is_none() && RUNTIME_KEYS.contains(&name) {
                None
            } else {
                Some(value)
            }
        });
    }

    /// Where the cell's value for `key` was written in the file.
    pub(super) fn value_span(&self, key: &str) -> Option<Span> {
        source_span(self.matrix, self.combo.source(key)?)
    }
}

pub(super) fn source_span(matrix: &RawMatrix, source: Source) -> Option<Span> {
    match source {
        Source::Axis { axis, value } => Some(matrix.axes.get(axis)?.1.get(value)?.span.clone()),
        Source::Include { entry, key } => {
            Some(matrix.include.get(entry)?.value.get(key)?.1.span.clone())
        }
    }
}

/// Work done once per distinct value instead of once per cell.
#[derive(Default)]
pub(super) struct Memo {
    /// `[packages]` pins: the version a value pins, or `None` when it is not one.
    pub(super) versions: HashMap<Source, Option<String>>,
    /// `[resources] gpus` as rendered, parsed.
    pub(super) gpus: HashMap<String, Result<Vec<String>, gpus::GpuSpecError>>,
    /// `(rule, condition, value)`: whether a version range of a rule matches a value.
    pub(super) verdicts: HashMap<(usize, usize, Option<Source>), bool>,
    /// Scratch space for rendering.
    pub(super) buffer: String,
}

/// The cell's values as an owned map, keys in order. (Built afresh per cell: a cache of key
/// shapes by pointer made no measurable difference on the 96,000-cell benchmark.)
fn cell_values(combo: &Combination<'_>) -> Values {
    combo
        .values
        .iter()
        .map(|(key, value, _)| ((*key).to_owned(), (*value).clone()))
        .collect()
}

impl Checker<'_, '_> {
    /// Builds one cell, reporting what is wrong with it.
    pub(super) fn cell(
        &mut self,
        raw: &RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
        memo: &mut Memo,
    ) -> Option<Cell> {
        let mut ok = true;
        let gpus = match templates.get(&raw.gpus) {
            None => Vec::new(),
            Some(t) => {
                let mut spec = std::mem::take(&mut memo.buffer);
                spec.clear();
                cx.render_into(t, &mut spec);
                if !memo.gpus.contains_key(spec.as_str()) {
                    memo.gpus.insert(spec.clone(), gpus::parse(&spec));
                }
                let parsed = &memo.gpus[spec.as_str()];
                memo.buffer = spec;
                match parsed {
                    Ok(gpus) => gpus.clone(),
                    Err(err) => {
                        ok = false;
                        let err = err.to_string();
                        self.bad_gpu_spec(t, cx, err);
                        Vec::new()
                    }
                }
            }
        };

        let mut pins = Vec::with_capacity(raw.packages.iter().map(|(_, names)| names.len()).sum());
        for (key, names) in &raw.packages {
            let Some(value) = cx.combo.get(&key.value) else {
                continue;
            };
            let version = match cx.combo.source(&key.value) {
                Some(source) => match memo.versions.get(&source) {
                    Some(version) => version.clone(),
                    None => {
                        let version = self.pin_version(key, value, cx);
                        memo.versions.insert(source, version.clone());
                        version
                    }
                },
                None => self.pin_version(key, value, cx),
            };
            match version {
                Some(version) if version.is_empty() => {}
                Some(version) => {
                    for name in names {
                        pins.push(Pin {
                            name: name.value.clone(),
                            version: version.clone(),
                        });
                    }
                }
                None => ok = false,
            }
        }
        pins.sort();

        let mut env = Vec::with_capacity(raw.env.len());
        for (name, value) in &raw.env {
            let rendered = templates
                .find(value)
                .map_or_else(|| value.value.clone(), |t| cx.render(t));
            if !rendered.is_empty() {
                env.push((name.value.clone(), rendered));
            }
        }

        let (engine, common) = self.engine(raw, templates, cx)?;
        let timeout = common
            .and_then(|c| c.timeout.as_ref())
            .map_or(DEFAULT_TIMEOUT, |t| t.value);
        let no_progress = common
            .and_then(|c| c.no_progress.as_ref())
            .map_or(DEFAULT_NO_PROGRESS, |t| t.value);
        if let Some(np) = common.and_then(|c| c.no_progress.as_ref()) {
            if np.value >= timeout {
                self.push_once(
                    Diagnostic::warning(
                        "`no-progress` is not shorter than `timeout`",
                        Some(np.span.clone()),
                    )
                    .label("a hang will be called a timeout, never a deadlock"),
                );
            }
        }
        let cache = match common
            .and_then(|c| c.cache.as_ref())
            .and_then(|f| templates.find(f))
        {
            None => CacheMode::Warm,
            Some(t) => match cx.render(t).as_str() {
                "" | "warm" => CacheMode::Warm,
                "cold" => CacheMode::Cold,
                other => {
                    ok = false;
                    self.push_once(
                        Diagnostic::error(
                            format!("`cache` must be \"warm\" or \"cold\", found \"{other}\""),
                            Some(t.field.span.clone()),
                        )
                        .label(format!("unknown cache mode (cell `{}`)", cx.id)),
                    );
                    CacheMode::Warm
                }
            },
        };
        let requirements = raw
            .python
            .as_ref()
            .and_then(|p| templates.get(&p.requirements))
            .map(|t| PathBuf::from(cx.render(t)))
            .filter(|p| !p.as_os_str().is_empty());
        // `[python] site`, rendered: an entry that renders empty is left out.
        let site = raw
            .python
            .iter()
            .flat_map(|p| &p.site)
            .filter_map(|entry| templates.find(entry))
            .map(|t| PathBuf::from(cx.render(t)))
            .filter(|p| !p.as_os_str().is_empty())
            .collect();
        ok.then(|| Cell {
            // The caller moves the id in.
            id: CellId(String::new()),
            values: cell_values(cx.combo),
            gpus,
            pins,
            env,
            engine,
            timeout,
            no_progress,
            cache,
            requirements,
            site,
            expectation: None,
        })
    }

    /// The version a `[packages]` key's value pins (`Some("")` for no pin), or `None` after
    /// reporting why it is not a version.
    pub(super) fn pin_version(
        &mut self,
        key: &Sp<String>,
        value: &Value,
        cx: &CellContext<'_, '_>,
    ) -> Option<String> {
        let version = match value {
            Value::String(s) if s.is_empty() => return Some(String::new()),
            Value::String(_) | Value::Number(_) => value_text(value),
            _ => {
                self.push_once(
                    Diagnostic::error(
                        format!(
                            "`{}` is a package version, so its values must be strings",
                            key.value
                        ),
                        cx.value_span(&key.value),
                    )
                    .label("not a version")
                    .secondary(key.span.clone(), "pinned by `[packages]` here"),
                );
                return None;
            }
        };
        if Version::from_str(&version).is_err() {
            self.push_once(
                Diagnostic::error(
                    format!("`{version}` is not a PEP 440 version"),
                    cx.value_span(&key.value),
                )
                .label("not a version")
                .secondary(key.span.clone(), "pinned by `[packages]` here")
                .help("write a version such as \"0.6.8.post1\""),
            );
            return None;
        }
        Some(version)
    }

    /// `[resources] gpus` rendered to something that is not a GPU spec. When the template is one
    /// placeholder, the culprit is the value it came from: point there.
    pub(super) fn bad_gpu_spec(
        &mut self,
        t: &FieldTemplate<'_>,
        cx: &CellContext<'_, '_>,
        err: String,
    ) {
        let template_span = inner_span(self.text, t.field, 0..t.field.value.len());
        let mut placeholders = t.parsed.placeholders();
        let single = match (placeholders.next(), placeholders.next()) {
            (Some(p), None) if p.at == (0..t.field.value.len()) && p.path.is_empty() => {
                Some(p.name)
            }
            _ => None,
        };
        let diag = match single.and_then(|key| cx.value_span(key)) {
            Some(value_span) => Diagnostic::error("malformed GPU spec", Some(value_span))
                .label(err)
                .secondary(template_span, "used as `[resources] gpus` here")
                .help("a GPU spec is an arch (`sm_90`), a count of one (`2xsm_90`), or several joined by `+` (`sm_86+sm_89`)"),
            None => Diagnostic::error(
                format!("`[resources] gpus` renders to a malformed GPU spec: {err}"),
                Some(template_span),
            )
            .label(format!("in cell `{}`", cx.id))
            .help("a GPU spec is an arch (`sm_90`), a count of one (`2xsm_90`), or several joined by `+` (`sm_86+sm_89`)"),
        };
        self.push_once(diag);
    }

    /// Chooses the cell's engine and renders its settings.
    pub(super) fn engine<'r>(
        &mut self,
        raw: &'r RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
    ) -> Option<(Engine, Option<&'r raw::RawCommon>)> {
        let name = match self.engine_name(raw, templates, cx)? {
            Chosen::Named(name) => name,
            Chosen::Nothing => {
                let command = String::new();
                return Some((Engine::Job { command }, None));
            }
        };
        if name == "job" {
            return self.job_engine(raw, templates, cx);
        }
        let kind = self.server_kind(raw, &name, cx)?;
        let server = raw.server.as_ref();
        let spec = self.server_spec(raw, templates, cx, kind)?;
        self.check_server_regexes(server, &spec)?;
        self.check_launchable(raw, cx, &spec)?;
        Some((Engine::Server(Box::new(spec)), server.map(|s| &s.common)))
    }

    /// The engine `engine` names for this cell, or the one implied by `[job]` or `[server]`.
    fn engine_name(
        &mut self,
        raw: &RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
    ) -> Option<Chosen> {
        let name = match templates.get(&raw.engine) {
            Some(t) => cx.render(t),
            None => match (&raw.job, &raw.server) {
                (Some(_), None) => "job".to_owned(),
                (None, Some(_)) => "server".to_owned(),
                (Some(_), Some(_)) => {
                    self.push_once(
                        Diagnostic::error("both `[job]` and `[server]` are set, but no `engine` says which to use", None)
                            .help("add `engine = \"job\"` or `engine = \"server\"` (or `engine = \"{engine}\"` with an axis)"),
                    );
                    return None;
                }
                (None, None) => {
                    let message = "nothing to run: the file has no `[job]`, `[server]` or `engine`";
                    let help = "add `[job]` with `command = \"...\"` (exit 0 = pass)";
                    if self.purpose == Purpose::Inspect {
                        self.push_once(Diagnostic::warning(message, None).help(help));
                        return Some(Chosen::Nothing);
                    }
                    self.push_once(Diagnostic::error(message, None).help(help));
                    return None;
                }
            },
        };
        Some(Chosen::Named(name))
    }

    /// A `[job]` cell: its command, rendered.
    fn job_engine<'r>(
        &mut self,
        raw: &'r RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
    ) -> Option<(Engine, Option<&'r raw::RawCommon>)> {
        let Some(job) = &raw.job else {
            self.push_once(
                Diagnostic::error(
                    "engine `job` needs a `[job]` table",
                    raw.engine.as_ref().map(|e| e.span.clone()),
                )
                .label(format!("cell `{}` uses engine `job`", cx.id))
                .help("add `[job]` with `command = \"...\"` (exit 0 = pass)"),
            );
            return None;
        };
        let Some(command) = templates.get(&job.command) else {
            if job.command_written {
                // Wrong type or misspelled: reported where it is written.
                return None;
            }
            self.push_once(
                Diagnostic::error("`[job]` needs `command`", Some(job.span.clone()))
                    .label("no command")
                    .help("add `command = \"sh smoke.sh {flashinfer}\"` (run with `sh -c`; exit 0 = pass)"),
            );
            return None;
        };
        let rendered = cx.render(command);
        if rendered.trim().is_empty() && self.purpose != Purpose::Inspect {
            // An empty command would exit 0: a typo in an `include` must not turn a cell green.
            self.push_once(
                Diagnostic::error(
                    format!("the command of cell `{}` is empty", cx.id),
                    Some(command.field.span.clone()),
                )
                .label("renders to nothing for this cell")
                .help("every cell needs a command to run; check the keys this template uses (`gpucompat matrix expand` shows each cell's values)"),
            );
            return None;
        }
        Some((Engine::Job { command: rendered }, Some(&job.common)))
    }

    /// The server engine an engine name stands for.
    fn server_kind(
        &mut self,
        raw: &RawFile,
        name: &str,
        cx: &CellContext<'_, '_>,
    ) -> Option<ServerKind> {
        let Some(kind) = ServerKind::NAMES
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, k)| *k)
        else {
            let mut names: Vec<&str> = ServerKind::NAMES.iter().map(|(n, _)| *n).collect();
            names.insert(0, "job");
            let mut diag = Diagnostic::error(
                format!("unknown engine `{name}`"),
                raw.engine.as_ref().map(|e| e.span.clone()),
            )
            .label(format!("engines: {} (cell `{}`)", names.join(", "), cx.id));
            if let Some(near) = did_you_mean(name, &names) {
                diag = diag.help(format!("did you mean `{near}`?"));
            }
            self.push_once(diag);
            return None;
        };
        Some(kind)
    }

    /// `[server]` rendered for this cell.
    fn server_spec(
        &mut self,
        raw: &RawFile,
        templates: &Templates<'_>,
        cx: &CellContext<'_, '_>,
        kind: ServerKind,
    ) -> Option<ServerSpec> {
        let server = raw.server.as_ref();
        let render = |field: Option<&Option<Sp<String>>>| -> Option<String> {
            let t = templates.get(field?)?;
            Some(cx.render(t)).filter(|s| !s.is_empty())
        };
        if kind == ServerKind::Generic && server.and_then(|s| s.command.as_ref()).is_none() {
            if server.is_some_and(|s| s.command_written) {
                return None;
            }
            self.push_once(
                Diagnostic::error("engine `server` needs `[server] command`", server.map(|s| s.span.clone()))
                    .label("no command")
                    .help("add `command = \"python3 serve.py --port {port}\"`, or name a built-in engine (sglang, vllm, ktransformers, flashinfer-probe)"),
            );
            return None;
        }
        let mut number = |field: Option<&Option<Sp<String>>>, what: &str| -> Option<u32> {
            let text = render(field)?;
            match text.trim().parse::<u32>() {
                Ok(n) if n > 0 => Some(n),
                _ => {
                    let span = field.and_then(|f| f.as_ref()).map(|f| f.span.clone());
                    self.push_once(
                        Diagnostic::error(
                            format!("`{what}` must be a positive whole number, found \"{text}\""),
                            span,
                        )
                        .label(format!("not a number (cell `{}`)", cx.id)),
                    );
                    None
                }
            }
        };
        let tp = number(server.map(|s| &s.tp), "tp");
        let workers = number(server.map(|s| &s.workers), "workers");
        let spec = ServerSpec {
            kind,
            command: render(server.map(|s| &s.command)),
            model: render(server.map(|s| &s.model)),
            tp,
            args: render(server.map(|s| &s.args)),
            health: render(server.map(|s| &s.health)),
            ready_line: render(server.map(|s| &s.ready_line)),
            ready_timeout: server
                .and_then(|s| s.ready_timeout.as_ref())
                .map(|d| d.value),
            endpoint: render(server.map(|s| &s.endpoint)),
            prompt: render(server.map(|s| &s.prompt)),
            max_tokens: server.and_then(|s| s.max_tokens.as_ref()).map(|n| n.value),
            expect: render(server.map(|s| &s.expect)),
            check: render(server.map(|s| &s.check)),
            workers,
        };
        Some(spec)
    }

    /// `ready-line` and `expect` must be regexes once rendered.
    fn check_server_regexes(
        &mut self,
        server: Option<&RawServer>,
        spec: &ServerSpec,
    ) -> Option<()> {
        for (field, text) in [
            (server.and_then(|s| s.ready_line.as_ref()), &spec.ready_line),
            (server.and_then(|s| s.expect.as_ref()), &spec.expect),
        ] {
            if let (Some(field), Some(text)) = (field, text) {
                if let Err(err) = regex::Regex::new(text) {
                    self.push_once(
                        Diagnostic::error("invalid regex", Some(field.span.clone()))
                            .label(raw::last_line(&err.to_string())),
                    );
                    return None;
                }
            }
        }
        Some(())
    }

    /// What the runner would do with these settings must work for every cell: an engine that
    /// cannot be launched is bad input now, not an infrastructure error at run time.
    fn check_launchable(
        &mut self,
        raw: &RawFile,
        cx: &CellContext<'_, '_>,
        spec: &ServerSpec,
    ) -> Option<()> {
        let server = raw.server.as_ref();
        if let Err(err) = crate::engines::resolve(spec) {
            let inspect = self.purpose == Purpose::Inspect;
            let new = if inspect {
                Diagnostic::warning
            } else {
                Diagnostic::error
            };
            self.push_once(
                new(
                    format!("cell `{}` cannot be launched: {err}", cx.id),
                    server
                        .map(|s| s.span.clone())
                        .or_else(|| raw.engine.as_ref().map(|e| e.span.clone())),
                )
                .label("engine settings")
                .help("built-in engines need `[server] model`; any other server needs `[server] command`"),
            );
            if !inspect {
                return None;
            }
        }
        Some(())
    }
}

/// What a cell's engine is, before its settings are rendered.
enum Chosen {
    Named(String),
    /// No `[job]`, `[server]` or `engine` in a file loaded for inspection: a job that runs nothing.
    Nothing,
}
