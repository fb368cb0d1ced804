//! A degenerate generation at the end of a log: one short phrase, printed over and over on one
//! line ("France is France is France is ...", a reserved special token fifty times, a sentence
//! that never ends). Looked for only in the last lines the scan keeps, and only where no line of
//! the log names a failure: a fixed amount of work per log, none per line. A generation may
//! also loop over whole sentences, one or two a line ("Wait, ... / Yes, that's correct. ...",
//! again and again until the token limit): the log then ends with a few lines printed over and
//! over.

use regex::Regex;
use std::sync::LazyLock;

/// Copies of the phrase, back to back, that make a line degenerate.
const MIN_COPIES: usize = 6;
/// The repeated stretch is at least this many characters: a stutter ("hahaha") is not a loop.
const MIN_SPAN: usize = 48;
/// Longest phrase looked for, in characters (a sentence that repeats).
const MAX_UNIT: usize = 128;

/// The phrase `line` repeats at least [`MIN_COPIES`] times in a row, if any. A phrase must hold
/// two different letters and a separator (a space or punctuation): runs of one character,
/// separator rules (`=====`), progress bars, hex and base64 dumps are no generation. A fragment
/// of a word glued to itself (`ductductduct`) needs no separator, but more copies (see
/// [`is_glued_word`]).
pub(crate) fn repeated_phrase(line: &str) -> Option<String> {
    if let Some(token) = token_zero(line) {
        return Some(token.to_owned());
    }
    let line = &without_prompt(line);
    // Escaped newlines are text, never a collection's data: looked for in the whole line (a
    // response printed as JSON is often cut before its string closes).
    if let Some(newlines) = newline_run(line) {
        return Some(newlines);
    }
    // A printed collection (`[True, True, ...]`, NumPy's `[ True  True ...]`, a tuple of GPU
    // names) repeats its elements by nature: data, not a generation. A response printed as JSON
    // may still hold a looping text (`{"text_output": "import numpy py py py ..."}`): in a line
    // that opens a collection, only its quoted strings are looked at, and a last one cut before
    // it closes (a looping answer is long, and a log or a paste often ends inside it).
    if line.trim_start().starts_with(['[', '(', '{']) {
        return quoted(line, true).find_map(looping_phrase);
    }
    // A table row (`nvidia-smi topo -m`'s `SYS     SYS     SYS`, a results table) repeats its
    // cells by nature too: columns a printer aligned with runs of spaces or tabs, not prose.
    if is_table_row(line) || is_pytest_progress(line) {
        return None;
    }
    looping_phrase(line)
}

/// pytest's progress report: one outcome letter per test (`.` passed, `F` failed, `E` error, `s`
/// skipped, `x`/`X` xfail and xpass; _pytest/terminal.py), after the test file's path and before
/// a `[ 5%]` counter, wrapped at the terminal's width into lines of letters alone. A suite whose
/// tests all error prints `EEEE...`: a run of one letter that is no generation.
fn is_pytest_progress(line: &str) -> bool {
    let line = line.trim();
    let line = match line
        .strip_suffix(']')
        .and_then(|rest| rest.rsplit_once('['))
    {
        Some((before, counter)) if counter.trim().strip_suffix('%').is_some_and(is_number) => {
            before.trim_end()
        }
        _ => line,
    };
    let outcomes = match line.rsplit_once(' ') {
        Some((path, outcomes)) if path.trim_end().ends_with(".py") => outcomes,
        Some(_) => return false,
        None => line,
    };
    !outcomes.is_empty()
        && outcomes
            .chars()
            .all(|c| matches!(c, '.' | 'F' | 'E' | 's' | 'x' | 'X'))
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_digit())
}

/// Five cells or more, of one word each, apart by runs of two spaces or more (or tabs): columns,
/// not a text (a generation that loops may double its spaces, but its pieces hold words).
fn is_table_row(line: &str) -> bool {
    static GAP: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(r" {2,}|\t+").ok());
    let Some(gap) = GAP.as_ref() else {
        return false;
    };
    let cells: Vec<&str> = gap.split(line.trim()).collect();
    cells.len() >= 5 && cells.iter().all(|cell| !cell.contains(char::is_whitespace))
}

/// `line` without the quoted string of a prompt's label (`prompt: '...'` in vLLM's "Received
/// request" line, `RequestOutput(prompt='...', ...)`, `{"prompt": "..."}`): a load test's
/// prompt repeats a word on purpose (`'testtesttest...'`, `'Hello world. Hello world. ...'`),
/// and what the model answered is elsewhere in the line, or in another.
fn without_prompt(line: &str) -> std::borrow::Cow<'_, str> {
    static LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r#"(?i)\b(?:prompt|input)s?(?:_text)?["']?\s*[:=]\s*\[?\s*["']"#).ok()
    });
    let Some(label) = LABEL.as_ref().and_then(|re| re.find(line)) else {
        return line.into();
    };
    // From the opening quote, the first string `quoted` reads is the prompt.
    let open = label.end() - 1;
    match quoted(&line[open..], false).next() {
        Some(prompt) => format!("{}{}", &line[..open], &line[open + prompt.len() + 2..]).into(),
        None => line.into(),
    }
}

/// A message a request holds: the role a user or a system speaks in.
const ASKED_ROLE: &str = r#"(?i)["']role["']\s*:\s*["'](?:user|system)["']"#;

/// An answer made of exclamation marks only (`Generated text: '!!!!!!...`, `"content": "!!!!!!"`, a
/// reasoning model's `"reasoning": "!!!!!!"`, unquoted as `model output: !!!!!!`, or behind a chat
/// template's special token, `"content": "<|channel|>!!!!!!"`): a run after an output's label, not
/// a prompt (a warm-up of token 0 echoes `prompt: '!!!!...'`) nor a user's message; a short
/// generation (a smoke test's 8 or 16 tokens) quoted whole needs 8 `!` only (`Output: "!!!!!!!!"`).
/// `!` is token 0 of GPT-2's byte-level vocabulary and of those built on it (Qwen's among them),
/// and token 0 is what an argmax returns over logits that are all NaN: a model whose kernels
/// produce NaN prints `!` until the token limit. One character is no phrase for the loop check (a
/// rule of `=====` is no generation); a run of `!` after an output's label is. So is a text that
/// breaks off mid-word into a run of `!` that ends the line, cut short by the one who copied it
/// (`(Mo!!!!!!...`, 24 or more before the ellipsis) or as long as a token limit makes it (64 or
/// more): the answer collapsing as it was written. A line that cheers (`Training
/// finished!!!!!!!!!!!!!!!!!!!!!!!!!!`) has a run as long as a person types, and no ellipsis. A
/// label in a language whose words the list above cannot know ends in a colon after a character
/// outside ASCII, or in a full-width colon: a run of 16 or more there that ends the line is the
/// answer too (`推理图片，返回: !!!!!!`, "inferring an image returns:"; `循环输出感叹号：!!!!!!`). An ASCII word
/// before a colon is as often a host's or a logger's prefix (`worker-1: `, pdsh's, before the `!`
/// banner PyTorch's extension builder prints) or a note's (`NOTE:`); a tool's banner of `!` stands
/// alone. Vocabularies whose token 0 is a control character print it escaped in JSON: a run of
/// `\u0000` after an output's label is the same failure. Returns the token repeated: `!`, or `NUL`
/// for a run of `\u0000`.
pub(crate) fn token_zero(line: &str) -> Option<&'static str> {
    // The labels an answer is printed after (a reasoning model's trace has its own, for long runs).
    macro_rules! answer_label {
        () => {
            r"generated[ _]?text|content|text|outputs?|completion|response|answer"
        };
    }
    static RUN: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(concat!(
            r#"(?i)\b(?:"#,
            answer_label!(),
            r#"|reasoning(?:_content)?)["']?\s*[:=]\s*["']?(?:<\|[a-z_]{1,30}\|>)*(?:!{16,}|(?P<nul>(?:\\u0000){16,}))(?:["']|\s|$|\.\.\.)"#,
            r#"|\b(?:"#,
            answer_label!(),
            r#")["']?\s*[:=]\s*["']!{8,15}["']"#,
            r#"|\p{L}(?:!{24,}(?:\.\.\.|…)|!{64,})["']?\s*$|(?P<label>[^\x00-\x7F]\s*[:：]|：)\s*!{16,}\s*$"#
        ))
        .ok()
    });
    static ASKED: LazyLock<Option<Regex>> = LazyLock::new(|| Regex::new(ASKED_ROLE).ok());
    static PROMPT: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"(?i)\b(?:prompt|input|query|question)s?\s*[:：]\s*!+\s*$").ok()
    });
    let found = RUN.as_ref()?.captures(line)?;
    if ASKED.as_ref().is_some_and(|re| re.is_match(line)) {
        return None;
    }
    // After a bare colon, the label must not be what was asked.
    if found.name("label").is_some() && PROMPT.as_ref().is_some_and(|re| re.is_match(line)) {
        return None;
    }
    Some(if found.name("nul").is_some() {
        "NUL"
    } else {
        "!"
    })
}

/// `!` on a line of its own that makes token 0's run (a person's banner of `!` is shorter).
const MIN_BARE_RUN: usize = 64;

/// `lines[index]` is nothing but a run of `!` ([`MIN_BARE_RUN`] or more) under a line that is an
/// output's label alone (`NO.1 生成文本:`, `========= output =========`, `Response:`) or a chat
/// template's turn of the assistant (`<|im_start|>assistant`, `[/INST]`, `Assistant:`, where a
/// chat CLI prints the rendered prompt and then the answer), or a rule of `=` alone, which frames
/// the answer where a script prints no label (`mlx_lm.generate` puts ten before and after it): the
/// answer a script printed below its label, token 0 over and over, as [`token_zero`] reads it on
/// the label's own line. The label is the whole line: a sentence that merely ends in "output" or
/// "response" ("Run with --verbose for more output", "could not parse the response") is a message,
/// and a banner of `!` under it is a tool's warning box (PyTorch's extension builder puts "!!
/// WARNING !!" above its own).
pub(crate) fn token_zero_below_label(lines: &[&str], index: usize) -> bool {
    static LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"(?i)^\s*(?:no\.?\s*\d+\s*)?[=*#-]*\s*(?:(?:model|generated|final)[ _])?(?:generated[ _]?text|outputs?|response|answer|completion|生成文本|输出|回答)\s*[:：]?\s*[=*#-]*\s*$|^\s*(?:<\|im_start\|>\s*assistant|<\|assistant\|>|<\|start_header_id\|>\s*assistant\s*<\|end_header_id\|>|<start_of_turn>\s*model|<｜Assistant｜>|\[/INST\]|(?:###\s*)?assistant\s*[:：]?)\s*$|^\s*={8,}\s*$").ok()
    });
    let Some(line) = lines.get(index).map(|line| line.trim()) else {
        return false;
    };
    if line.len() < MIN_BARE_RUN || line.bytes().any(|b| b != b'!') {
        return false;
    }
    let label = lines[..index].iter().rev().find(|l| !l.trim().is_empty());
    label.is_some_and(|label| LABEL.as_ref().is_some_and(|re| re.is_match(label)))
}

/// Lines either side of a run of `!` that may hold the rest of the object it is a field of.
const OBJECT_SPAN: usize = 4;

/// The run of `!` on `lines[index]` is a field of an object printed over several lines that a
/// request holds: a message with the role `user` or `system` (indented JSON puts the role on the
/// line above, Python's `pprint` sorts it below), or SGLang's `/generate` body, whose `text` is
/// the prompt beside its `sampling_params`. The object is cut from the nearest unmatched braces
/// around the run, at most [`OBJECT_SPAN`] lines away; without a brace on either side it is the
/// run's own line, which [`token_zero`] has already read.
pub(crate) fn asked_in_object(lines: &[&str], index: usize) -> bool {
    static ASKED: LazyLock<Option<Regex>> =
        LazyLock::new(|| Regex::new(&format!(r#"{ASKED_ROLE}|["']sampling_params["']\s*:"#)).ok());
    let Some(line) = lines.get(index) else {
        return false;
    };
    let run = line.find("!!!!!!!!!!!!!!!!").unwrap_or(0);
    let from = index.saturating_sub(OBJECT_SPAN);
    let to = (index + OBJECT_SPAN + 1).min(lines.len());
    let mut before = lines[from..index].join("\n");
    before.push('\n');
    before.push_str(&line[..run]);
    let mut after = line[run..].to_owned();
    for next in &lines[index + 1..to] {
        after.push('\n');
        after.push_str(next);
    }
    let opened = unmatched_open(&before);
    let closed = unmatched_close(&after);
    let line_start = before.rfind('\n').map_or(0, |n| n + 1);
    let line_end = after.find('\n').unwrap_or(after.len());
    let (start, end) = match (opened, closed) {
        (None, None) => (line_start, line_end),
        (Some(start), None) => (start, after.len()),
        (None, Some(end)) => (0, end),
        (Some(start), Some(end)) => (start, end),
    };
    let object = format!("{}{}", &before[start..], &after[..end]);
    ASKED.as_ref().is_some_and(|re| re.is_match(&object))
}

/// Where the innermost object still open at the end of `text` opens.
fn unmatched_open(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices().rev() {
        match c {
            '}' => depth += 1,
            '{' if depth == 0 => return Some(i),
            '{' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Where the object open at the start of `text` closes (just past its brace).
fn unmatched_close(text: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return Some(i + 1),
            '}' => depth -= 1,
            _ => {}
        }
    }
    None
}

/// The phrase `text` repeats at least [`MIN_COPIES`] times in a row, if any.
fn looping_phrase(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let longest = MAX_UNIT.min(chars.len() / MIN_COPIES);
    (2..=longest)
        .find_map(|period| repeating_unit(&chars, period))
        .or_else(|| letter_run(&chars))
}

/// Escaped line breaks, back to back, that make a generation of empty lines.
const MIN_NEWLINE_RUN: usize = 24;

/// A model stuck on the newline token prints nothing else until the token limit; a JSON or repr
/// of its text shows that as `\n\n\n...` (`"completion": "    # Write your code here\n\n\n...`,
/// TensorRT-LLM's `Output [Text 0 Beam 0]: "\n\n\n...`). A text a person wrote leaves a blank
/// line or two, never two dozen in a row.
fn newline_run(text: &str) -> Option<String> {
    let run = "\\n".repeat(MIN_NEWLINE_RUN);
    text.contains(&run).then(|| "\\n".to_owned())
}

/// Copies of one letter, back to back, that make a generation stuck on one token.
const MIN_LETTER_RUN: usize = 24;

/// A model stuck on one token that is one letter prints it until the token limit (`GGGG...`,
/// a Chinese character eighty times): no word, no phrase, no separator. Runs of one character
/// are otherwise rules (`=====`, `─────`), bars (`█████`) or padding, none of them a letter.
/// Data holds runs of letters too: hex (`0xffff...`, a digest) and base64 (`AAAA...` is a run of
/// zero bytes) sit in a stretch of their alphabet with a digit; `xxxx` and `XXXX` stand for what
/// was redacted; a long vowel mark (`ー`) draws a rule in Japanese text.
fn letter_run(chars: &[char]) -> Option<String> {
    let mut start = 0;
    for end in 1..=chars.len() {
        if end < chars.len() && chars[end] == chars[start] {
            continue;
        }
        let letter = chars[start];
        if end - start >= MIN_LETTER_RUN
            && letter.is_alphabetic()
            && !matches!(letter, 'x' | 'X' | 'A' | 'ー' | 'ｰ')
            && !in_base64_blob(chars, start, end)
        {
            return Some(letter.to_string());
        }
        start = end;
    }
    None
}

/// The double- or single-quoted strings of `line`. A string ends at its quote followed by a
/// separator (`,`, `:`, a bracket) or the end of the line, so an apostrophe inside a text
/// (`'It's fine. It's fine.'`) does not end it. With `cut_too`, the string the line ends inside
/// (an opening quote that no quote closes) comes last, where it holds more than blanks.
fn quoted(line: &str, cut_too: bool) -> impl Iterator<Item = &str> {
    let mut rest = line;
    std::iter::from_fn(move || {
        let open = rest.find(['"', '\''])?;
        let quote = rest[open..].chars().next()?;
        let body = &rest[open + 1..];
        let close = body.match_indices(quote).map(|(i, _)| i).find(|&i| {
            body[i + 1..]
                .trim_start()
                .chars()
                .next()
                .is_none_or(|c| matches!(c, ',' | ':' | ']' | '}' | ')'))
        });
        let Some(close) = close else {
            rest = "";
            return (cut_too && !body.trim().is_empty()).then_some(body);
        };
        rest = &body[close + 1..];
        Some(&body[..close])
    })
}

/// The first unit of length `period` repeated into a long enough stretch.
fn repeating_unit(chars: &[char], period: usize) -> Option<String> {
    // `run` counts positions in a row whose character equals the one `period` further: a run
    // of r such positions is a stretch of r + period characters with that period.
    let mut run = 0;
    for i in 0..chars.len().saturating_sub(period) {
        if chars[i] != chars[i + period] {
            run = 0;
            continue;
        }
        run += 1;
        let span = run + period;
        let phrase = span >= period * MIN_COPIES && span >= MIN_SPAN;
        let glued = span >= period * MIN_GLUED_COPIES && span >= MIN_GLUED_SPAN;
        if phrase || glued {
            let start = i + 1 - run;
            let unit = &chars[start..start + period];
            let end = start + span;
            if (phrase && is_phrase(unit)) || (glued && is_glued_word(chars, start, end, period)) {
                return Some(unit.iter().collect());
            }
        }
    }
    None
}

/// Words, not a pattern: two different letters and a separator. Data repeats too and is no
/// generation: a list's elements (`'NVIDIA H100 80GB HBM3', `, `True, `) and an inventory of
/// codes, flags or identifiers (`sm_90a`, `gfx942`, `cuda:0`, `torch.bfloat16`,
/// `-gencode arch=compute_90a,code=sm_90a`). A looping model does say `py py py ...` or
/// `<|reserved_special_token_247|>` over and over.
fn is_phrase(unit: &[char]) -> bool {
    if !two_different_letters(unit) || unit.iter().all(|c| c.is_alphanumeric()) || is_base64(unit) {
        return false;
    }
    let text: String = unit.iter().collect();
    !is_element(&text) && !is_code(&text)
}

/// A piece of base64: its alphabet only, with `+`, `/` or the padding `=` in it (an embedding or
/// an image sent as JSON repeats when its values do: `AACAPwAAgD8AAIA/` is 1.0 as float32 again
/// and again).
fn is_base64(unit: &[char]) -> bool {
    unit.iter()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='))
        && unit.iter().any(|c| matches!(c, '+' | '/' | '='))
}

/// Copies of a word fragment glued to itself (`ductductduct`, `risrisris`) that make a run: more
/// than of a phrase, as a fragment is short and a stutter is no loop.
const MIN_GLUED_COPIES: usize = 8;
/// A glued run is at least this many characters.
const MIN_GLUED_SPAN: usize = 32;

/// A fragment of a word a model glues to itself until the token limit (`uctductductduct...`),
/// the run `chars[start..end]` of the unit `chars[start..start + period]`: three letters or more
/// and not two copies of a shorter fragment (`hahaha` is a stutter), two different ones, in lower
/// case or a script without case (a capital may open the unit: `TheTheThe`). Data repeats too:
/// upper-case runs are acronyms or base64 (`QUFBQUFB`), and so are units with capitals inside
/// (`ICAgICAg`, `IyMjIyMj` and `CQkJCQkJ` are base64 of runs of spaces, `#` and tabs); a run
/// inside a longer stretch of base64's alphabet that holds a digit, `+`, `/` or `=` is part of a
/// blob; runs of the letters a to f are hex (`deadbeefdeadbeef`), and runs of a, c, g, t (and n,
/// u) are a sequence's tandem repeat (`cagcagcag`).
fn is_glued_word(chars: &[char], start: usize, end: usize, period: usize) -> bool {
    let unit = &chars[start..start + period];
    let n = unit.len();
    let copies_of_shorter = (1..n).any(|d| n % d == 0 && (d..n).all(|i| unit[i] == unit[i - d]));
    if n < 3 || copies_of_shorter {
        return false;
    }
    let capital_inside = unit.iter().skip(1).any(|c| c.is_uppercase());
    two_different_letters(unit)
        && unit.iter().all(|c| c.is_alphabetic())
        && unit.iter().any(|c| c.is_lowercase() || !c.is_ascii())
        && !capital_inside
        && !unit.iter().all(|c| c.is_ascii_hexdigit())
        && !unit
            .iter()
            .all(|c| matches!(c.to_ascii_lowercase(), 'a' | 'c' | 'g' | 't' | 'n' | 'u'))
        && !in_base64_blob(chars, start, end)
}

/// Whether the stretch of base64's alphabet around `chars[start..end]` holds a character that is
/// no letter (a digit, `+`, `/`, or the padding `=` after it): the run is then part of a blob.
/// (An `=` before it is a setting's, `text=...`.)
fn in_base64_blob(chars: &[char], start: usize, end: usize) -> bool {
    let base64 = |c: &&char| c.is_ascii_alphanumeric() || matches!(c, '+' | '/');
    let padded = |c: &&char| base64(c) || **c == '=';
    let not_letter = |c: &char| !c.is_ascii_alphabetic();
    chars[..start]
        .iter()
        .rev()
        .take_while(base64)
        .any(not_letter)
        || chars[end.min(chars.len())..]
            .iter()
            .take_while(padded)
            .any(not_letter)
}

/// The unit holds two different letters (a run of one character is a rule or padding).
fn two_different_letters(unit: &[char]) -> bool {
    let mut letters = unit.iter().filter(|c| c.is_alphabetic());
    letters
        .next()
        .is_some_and(|first| letters.any(|c| c != first))
}

/// A list element: the unit holds the list's comma (wherever the repetition was entered), or
/// a quote that closes one element and a quote that opens the next (`' '`).
fn is_element(text: &str) -> bool {
    text.contains(',') || text.contains("' '") || text.contains("\" \"")
}

/// Every word of the unit is a code, a flag or an identifier.
fn is_code(text: &str) -> bool {
    let mut words = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .peekable();
    words.peek().is_some() && words.all(is_code_word)
}

/// A flag (`-gencode`, `--tp`), a setting (`arch=compute_90a`), or an identifier with a digit in
/// it (`sm_90a`, `gfx942`, `cuda:0`, `torch.bfloat16`).
fn is_code_word(word: &str) -> bool {
    word.starts_with('-')
        || word.contains('=')
        || (word.starts_with(|c: char| c.is_ascii_alphabetic())
            && word
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | ':'))
            && word.chars().any(|c| c.is_ascii_digit()))
}

/// Copies of a group of lines, back to back, that make the end of a log a loop.
const MIN_LINE_COPIES: usize = 6;
/// Most lines in the group that repeats. One line printed over and over is no generation: a
/// poll (`Waiting for the server ...`) says the same thing each time it looks.
const MAX_LINE_PERIOD: usize = 4;
/// Words of letters a line of the group holds at least: sentences, not a drawing or a table.
const MIN_WORDS: usize = 3;

/// Where the group of lines the log ends with, repeated at least [`MIN_LINE_COPIES`] times, starts
/// in `lines`, and the group. `None` marks a line a logger wrote (a level, a timestamp): it ends
/// any loop. Blank lines, code fences (```) and a last copy cut short are looked
/// through; the group holds two different lines at least and every one of them is prose.
pub(crate) fn repeated_lines(lines: &[Option<String>]) -> Option<(usize, Vec<String>)> {
    let kept = kept_units(lines, std::iter::once);
    (2..=MAX_LINE_PERIOD)
        .find_map(|period| line_cycle(&kept, period, true))
        .map(|(start, unit)| (kept[start].0, unit))
}

/// Like [`repeated_lines`], for a generation whose loop does not keep to its lines: the same
/// sentences, wrapped two or three to a line and in paragraphs (`We need to produce code ... We
/// need to produce code ...`). The loop is looked for over sentences, and it must put two of them
/// on one line at least: text that flows, not a program that prints one message a line (those
/// lines are the polls and retries [`repeated_lines`] leaves alone). One sentence may loop alone.
pub(crate) fn repeated_sentences(lines: &[Option<String>]) -> Option<(usize, Vec<String>)> {
    let kept = kept_units(lines, sentences);
    (1..=MAX_LINE_PERIOD).find_map(|period| {
        let (start, unit) = line_cycle(&kept, period, false)?;
        // A copy must end inside a line, the next one going on after it: a program line of two
        // sentences printed again and again ("Server is not up yet. Sleeping for 10 seconds.")
        // keeps each copy to its own line.
        let looped = &kept[start..];
        let wraps = looped
            .windows(2)
            .enumerate()
            .any(|(k, pair)| (k + 1) % period == 0 && pair[0].0 == pair[1].0);
        wraps.then_some((kept[start].0, unit))
    })
}

/// What the loop checks compare: each line's units (`split`: the line itself, or its sentences)
/// with the line they come from. Blank lines and code fences (```) are looked through; a line a
/// logger wrote stays as `None`, which ends any loop.
fn kept_units<'a, I: Iterator<Item = &'a str>>(
    lines: &'a [Option<String>],
    split: impl Fn(&'a str) -> I,
) -> Vec<(usize, Option<&'a str>)> {
    let mut kept = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        match line.as_deref().map(str::trim) {
            None => kept.push((i, None)),
            Some("" | "```") => {}
            Some(text) => kept.extend(split(text).map(|unit| (i, Some(unit)))),
        }
    }
    kept
}

/// The sentences of `text`: split after `.`, `!` or `?` where a space follows.
fn sentences(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let end = rest
            .char_indices()
            .zip(rest.chars().skip(1))
            .find(|((_, c), next)| matches!(c, '.' | '!' | '?') && next.is_whitespace())
            .map_or(rest.len(), |((i, c), _)| i + c.len_utf8());
        let (sentence, tail) = rest.split_at(end);
        rest = tail.trim_start();
        Some(sentence.trim())
    })
}

/// Where in `kept` the group of `period` lines it ends with starts, and the group, if it repeats
/// often enough. `distinct` asks for two different lines in the group (one line printed over and
/// over is a poll).
fn line_cycle(
    kept: &[(usize, Option<&str>)],
    period: usize,
    distinct: bool,
) -> Option<(usize, Vec<String>)> {
    // The token limit may cut the last copy inside a line: a line that begins the one it
    // repeats is looked through.
    let cut = kept.len() > period
        && matches!((kept[kept.len() - 1].1, kept[kept.len() - 1 - period].1),
            (Some(last), Some(whole)) if last.len() < whole.len() && whole.starts_with(last));
    let kept = &kept[..kept.len() - usize::from(cut)];
    let same = |i: usize| matches!((kept[i].1, kept[i - period].1), (Some(a), Some(b)) if a == b);
    let run = (period..kept.len()).rev().take_while(|&i| same(i)).count();
    if run + period < period * MIN_LINE_COPIES {
        return None;
    }
    let start = kept.len() - run - period;
    let unit: Vec<&str> = kept[start..start + period]
        .iter()
        .map(|(_, line)| line.unwrap_or_default())
        .collect();
    let varied = !distinct || unit.iter().any(|line| *line != unit[0]);
    (varied
        && unit
            .iter()
            .all(|line| is_prose(line) && !is_program_message(line)))
    .then(|| (start, unit.iter().map(|line| (*line).to_owned()).collect()))
}

/// What a program says over and over, not a model: a labelled line (`User:`, `Prompt:`,
/// `curl: (7)`, `srv  log_server_r:`), an address, or the words of a retry loop, a poll or a
/// warning (transformers' padding warnings repeat on every `generate()` call; a CI script waiting
/// for its server says the same two lines until it gives up).
fn is_program_message(line: &str) -> bool {
    static MESSAGE: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(concat!(
            r"^[A-Za-z][\w .\-\[\]()]{0,30}:(?:\s|$)",
            r"|https?://|\blocalhost\b|\b\d{1,3}(?:\.\d{1,3}){3}\b",
            r"|(?i)\b(?:retry|retrying|retries|waiting|not ready|failed|failure|could not|couldn't",
            r"|unable to|error|exception|warning|deprecated|please|timed? ?out|connection|connect",
            r"|reconnect\w*|request|listening)\b",
        ))
        .ok()
    });
    MESSAGE.as_ref().is_none_or(|re| re.is_match(line))
}

/// A sentence rather than a drawing, a table row, code or a record: [`MIN_WORDS`] words of
/// letters at least, and letters for half of what is not blank.
fn is_prose(line: &str) -> bool {
    let words = line
        .split_whitespace()
        .filter(|word| {
            let word = word.trim_end_matches([',', '.', ';', ':', '!', '?']);
            word.chars().filter(|c| c.is_alphabetic()).count() >= 2
                && word.chars().all(|c| c.is_alphabetic() || c == '\'')
        })
        .count();
    let visible = line.chars().filter(|c| !c.is_whitespace()).count();
    let letters = line.chars().filter(|c| c.is_alphabetic()).count();
    words >= MIN_WORDS && letters * 2 >= visible
}

#[cfg(test)]
mod tests {
    use super::{repeated_lines, repeated_phrase, repeated_sentences, token_zero_below_label};

    #[test]
    fn a_table_row_is_no_looping_generation() {
        let topo = "GPU0     X      NV12    NV12    NV12    NV12    NV12    NV12    NV12    PXB     PXB     SYS     SYS     SYS     SYS     SYS     SYS     SYS     SYS     SYS     SYS     48-63,176-191   3               N/A";
        assert_eq!(repeated_phrase(topo), None);
        assert_eq!(
            repeated_phrase("GPU0\tX\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS\tSYS"),
            None
        );
        // A generation that loops with single spaces is still one.
        assert!(
            repeated_phrase("Answer: SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS SYS")
                .is_some()
        );
    }

    #[test]
    fn a_phrase_said_over_and_over_is_found() {
        // The phrase is found from where the loop starts: here " France is", a rotation.
        let line = format!("# {}...", "France is ".repeat(9));
        assert_eq!(repeated_phrase(&line).as_deref(), Some(" France is"));
        let token = "<|reserved_special_token_247|>".repeat(10);
        assert_eq!(
            repeated_phrase(&token).as_deref(),
            Some("<|reserved_special_token_247|>")
        );
        let sentence = format!(
            "Generated text: ' David and I am a student. {}",
            "I am looking for someone who is not afraid to be themselves. ".repeat(7)
        );
        assert!(repeated_phrase(&sentence).is_some_and(|unit| unit.contains("looking for")));
        let cjk = format!("答案是：{}", "北京，上海，".repeat(10));
        assert_eq!(repeated_phrase(&cjk).as_deref(), Some("北京，上海，"));
        let apostrophe = format!("['{}']", "It's fine. ".repeat(8));
        assert!(repeated_phrase(&apostrophe).is_some());
        let short = format!("{{\"text_output\": \"import numpy {}\"}}", "py ".repeat(20));
        assert!(repeated_phrase(&short).is_some_and(|unit| unit.trim() == "py"));
        // A JSON answer cut inside its string is still read.
        let cut = format!(
            "{{\"model_name\":\"ensemble\",\"text_output\":\" 你会做什么? {}",
            "I will do it. ".repeat(10)
        );
        assert!(repeated_phrase(&cut).is_some_and(|unit| unit.trim() == "I will do it."));
        // The end-of-text tag runs where a batch is padded with it: no loop by itself.
        let padded = format!(
            "['<s> The capital of France is Paris.{}']",
            "</s>".repeat(24)
        );
        assert_eq!(repeated_phrase(&padded), None);
        // An embedding sent as base64 repeats with its values.
        let embedding = format!("{{\"embedding\": \"{}", "AACAPwAAgD8AAIA/".repeat(8));
        assert_eq!(repeated_phrase(&embedding), None);
        // A line that ends inside a string of plain data is no loop either.
        assert_eq!(
            repeated_phrase(
                "{\"id\": \"0xffffffffffffffffffffffffffffffffffffffffffffffffffffffff"
            ),
            None
        );
    }

    #[test]
    fn a_run_of_token_zero_below_an_outputs_label_is_a_generation() {
        let run = "!".repeat(128);
        for label in [
            "========= output =========",
            "NO.1 生成文本:",
            "Response:",
            "<|im_start|>assistant",
            "[/INST]",
            "ASSISTANT:",
            "==========",
        ] {
            let lines = [label, "", run.as_str()];
            assert!(token_zero_below_label(&lines, 2), "{label}");
        }
        // A banner of `!` a person types, a run under a prompt or a log line, or one that is not
        // alone on its line, is no answer.
        let banner = "!".repeat(40);
        assert!(!token_zero_below_label(&["Output:", banner.as_str()], 1));
        assert!(!token_zero_below_label(&["Prompt:", run.as_str()], 1));
        assert!(!token_zero_below_label(
            &["!! WARNING !!", "", run.as_str()],
            2
        ));
        assert!(!token_zero_below_label(&["== x ==", run.as_str()], 1));
        assert!(!token_zero_below_label(
            &["<|im_start|>user", run.as_str()],
            1
        ));
        assert!(!token_zero_below_label(
            &[
                "INFO 05-28 14:44:28 [loggers.py:116] Engine 000",
                run.as_str()
            ],
            1
        ));
        for message in [
            "Run with --verbose for more output",
            "ERROR: could not parse the response",
            "No output",
        ] {
            assert!(
                !token_zero_below_label(&[message, run.as_str()], 1),
                "{message}"
            );
        }
        assert!(token_zero_below_label(&["Model output:", run.as_str()], 1));
        let worded = format!("Done {run}");
        assert!(!token_zero_below_label(&["Output:", worded.as_str()], 1));
    }

    #[test]
    fn a_quoted_run_of_token_zero_is_a_generation() {
        let bang = "!".repeat(40);
        for line in [
            format!("Generated text: '{bang}"),
            format!("        \"content\": \"{bang}\""),
            format!("{{\"text\": \"{bang}\"}}"),
            format!("model output: {bang}  (in the thinking phase)"),
            format!("推理图片，返回: {bang}"),
            format!("循环输出感叹号：{bang}"),
            format!("  \"content\": \"<|channel|>{bang}...\","),
            format!("To understand how a modern Mixture-of-Experts (Mo{bang}..."),
            format!(
                "To understand how a modern Mixture-of-Experts (Mo{}",
                "!".repeat(200)
            ),
            "Output: \"!!!!!!!!\"".to_owned(),
        ] {
            assert_eq!(repeated_phrase(&line).as_deref(), Some("!"), "{line}");
        }
        let nul = "\\u0000".repeat(20);
        let line = format!("{{\"message\":{{\"role\":\"assistant\",\"content\":\"{nul}\"}}}}");
        assert_eq!(repeated_phrase(&line).as_deref(), Some("NUL"), "{line}");
        for line in [
            format!("{bang} WARNING: the cache is cold {bang}"),
            format!("'{}' is not a valid mode", "!".repeat(8)),
            format!("print('{bang} done')"),
            format!("Received request cmpl-1: prompt: '{bang}', params: SamplingParams(n=1)"),
            format!("{{\"prompt\": \"{bang}\"}}"),
            format!("+ echo '{bang}'"),
            format!("output: {bang}WARNING"),
            format!("Wow{bang} that was fast"),
            format!("Training finished{}", "!".repeat(30)),
            "Output: \"Done!!!!!!!!\"".to_owned(),
            "text: \"!!!!!!!\"".to_owned(),
            format!("训练完成{}", "!".repeat(30)),
            format!("ALL TESTS PASSED{}", "!".repeat(40)),
            format!("data: {}", "\\u0000".repeat(20)),
            format!("{{\"role\": \"user\", \"content\": \"{bang}\"}}"),
            format!("prompt: {bang}"),
            format!("WARNING: {bang} cache is cold"),
            format!("worker-1: {}", "!".repeat(114)),
            format!("NOTE: {bang}"),
            format!("10.0.0.4: {bang}"),
        ] {
            assert_eq!(repeated_phrase(&line), None, "{line}");
        }
    }

    #[test]
    fn a_generation_stuck_on_one_letter_is_a_loop() {
        let line = format!("`*{}追给给迫你。`", "给".repeat(70));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("给"), "{line}");
        let line = format!("Answer: {}", "G".repeat(60));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("G"), "{line}");
        let line = format!("{{\"text\": \"back.P{}\"}}", "e".repeat(40));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("e"), "{line}");
        // A stutter is no run.
        assert_eq!(repeated_phrase(&format!("Ah{}!", "h".repeat(10))), None);
    }

    #[test]
    fn pytest_progress_is_no_loop() {
        let errors = "E".repeat(80);
        let line = format!("test/test_attention.py ..F{errors} [  5%]");
        assert_eq!(repeated_phrase(&line), None, "{line}");
        assert_eq!(repeated_phrase(&errors), None, "a wrapped progress line");
        assert_eq!(repeated_phrase(&format!("{errors} [ 12%]")), None);
        // Not pytest's: a generation stuck on one letter, behind a label.
        let answer = format!("Answer: {errors}");
        assert_eq!(repeated_phrase(&answer).as_deref(), Some("E"), "{answer}");
    }

    #[test]
    fn a_generation_of_escaped_newlines_is_a_loop() {
        let nl = "\\n".repeat(40);
        for line in [
            format!(
                r#"{{"task_id": "HumanEval/94", "completion": "    # Write your code here{nl}"#
            ),
            format!(r#"Output [Text 0 Beam 0]: "{nl}""#),
        ] {
            assert_eq!(repeated_phrase(&line).as_deref(), Some("\\n"), "{line}");
        }
        let few = "\\n".repeat(3);
        let line = format!(r#"{{"text": "def f():{few}    return 1{few}"}}"#);
        assert_eq!(repeated_phrase(&line), None);
    }

    #[test]
    fn a_word_fragment_glued_to_itself_is_a_loop() {
        let line = format!("u{}...", "ctdu".repeat(13));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("uctd"), "{line}");
        let line = format!("thro{}coefficientJJJJJJ", "ris".repeat(15));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("ris"), "{line}");
        let line = format!("Answer: {}", "The".repeat(12));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("The"), "{line}");
        let line = format!(
            "{{\"id\":\"cmpl-7\",\"text\":\"u{}\",\"n\":1}}",
            "ctdu".repeat(13)
        );
        assert_eq!(repeated_phrase(&line).as_deref(), Some("uctd"), "{line}");
        let line = format!("text=u{}", "ctdu".repeat(13));
        assert_eq!(repeated_phrase(&line).as_deref(), Some("uctd"), "{line}");
    }

    /// Data that repeats a short run of letters: base64 of a run of one byte (spaces, tabs,
    /// `#`, `*`: indented JSON or code, comment banners), and a DNA tandem repeat, soft-masked in
    /// lower case as genome files write repeats.
    /// A prompt repeats what a load test tells it to; the answer beside it still counts.
    #[test]
    fn a_repeated_prompt_is_no_loop() {
        let glued = "test".repeat(12);
        let phrase = "Hello world. ".repeat(12);
        for line in [
            format!("Received request cmpl-1: prompt: '{glued}', params: SamplingParams(n=1)"),
            format!(
                "Received request cmpl-2: prompt: '{phrase}', params: SamplingParams(n=1), prompt_token_ids: [1, 2]"
            ),
            format!("{{\"prompt\": \"{phrase}\", \"max_tokens\": 16}}"),
            format!(
                "RequestOutput(request_id=0, prompt='{glued}', outputs=[CompletionOutput(index=0, text=' Paris.')])"
            ),
        ] {
            assert_eq!(repeated_phrase(&line), None, "{line}");
        }
        let line = format!(
            "RequestOutput(request_id=0, prompt='Hi', outputs=[CompletionOutput(index=0, text='{phrase}')])"
        );
        assert_eq!(
            repeated_phrase(&line).as_deref(),
            Some("Hello world. "),
            "{line}"
        );
    }

    #[test]
    fn base64_and_sequences_are_no_glued_words() {
        for line in [
            // 48 spaces, 60 tabs, 60 `#`.
            "ICAg".repeat(16),
            "CQkJ".repeat(20),
            "IyMj".repeat(20),
            // Indented JSON, a C comment banner, a file's contents in a JSON response.
            format!("ew{}ImtleSI6ICJ2YWx1ZSIKfQ==", "ogICAgICAg".repeat(4)),
            format!("data: Ly{}i8=", "oqKioqKioq".repeat(6)),
            format!(
                "{{\"name\": \"config.json\", \"content\": \"ewog{}ImEiOiAxCn0=\"}}",
                "ICAg".repeat(13)
            ),
            "chr4:3074681 ttcagcagcagcagcagcagcagcagcagcagcagcagcagcaacagccgccaccg".to_owned(),
            format!("GGCGACCCTGGAAAAGCTGATGAAGGCCTTC{}", "cag".repeat(14)),
        ] {
            assert_eq!(repeated_phrase(&line), None, "{line}");
        }
    }

    #[test]
    fn logs_that_only_look_regular_are_not_loops() {
        for line in [
            format!("token: hf_{}", "x".repeat(30)),
            format!("mask 0x{}", "f".repeat(32)),
            format!("sha256:9a{}", "f".repeat(30)),
            format!("data:image/png;base64,iVBORw0KGgo{}ASUVORK5CYII=", "A".repeat(40)),
            "ー".repeat(40),
            "─".repeat(40),
            format!("[{}]", "True, ".repeat(20)),
            format!("({})", "'NVIDIA H100 80GB HBM3', ".repeat(8)),
            "=".repeat(120),
            "█".repeat(80),
            "ha".repeat(30),
            "0x0 ".repeat(20),
            "QUFB".repeat(30),
            "deadbeef".repeat(8),
            "abc".repeat(7),
            format!("ACGT{}", "ACGT".repeat(12)),
            "ab ".repeat(5),
            format!("archs: {}", "sm_90 ".repeat(8)),
            format!("{{'gpu': 'H100', 'archs': '{}'}}", "sm_90a ".repeat(10)),
            format!("devices: {}", "cuda:0, ".repeat(8)),
            format!("[{}]", " True ".repeat(20)),
            format!("[{}]", "-inf ".repeat(20)),
            format!("[{}]", "nan ".repeat(20)),
            format!("GPUs: [{}]", "'NVIDIA H100 80GB HBM3', ".repeat(8)),
            format!("close: tensor([{}], device='cuda:0')", "True, ".repeat(12)),
            format!("dtypes: {}", "torch.bfloat16 ".repeat(10)),
            format!("nvcc {}", "-gencode arch=compute_90a,code=sm_90a ".repeat(6)),
            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 0 reqs".to_owned(),
            "  File \"/usr/lib/python3.10/threading.py\", line 953 in run".to_owned(),
        ] {
            assert_eq!(repeated_phrase(&line), None, "{line}");
        }
    }

    fn lines(text: &str) -> Vec<Option<String>> {
        text.lines().map(|line| Some(line.to_owned())).collect()
    }

    #[test]
    fn a_generation_looping_over_sentences_is_found() {
        let pair = "Yes, that's correct. The answer is $\\boxed{5}$.\n\nWait, but in the code, the answer is 5.0. So the final answer should be $\\boxed{5}$.\n\n";
        let text = format!(
            "Let me check the sum.\n\n{}Yes, that's correct.\n",
            pair.repeat(7)
        );
        let (start, unit) = repeated_lines(&lines(&text)).expect("a loop");
        assert_eq!(start, 2);
        assert_eq!(unit.len(), 2);
        assert!(unit[0].starts_with("Yes, that's correct."));
        let fenced = format!(
            "```text\n{}```",
            "    Wait, I'll output `json{\"Answer\": B}`.\n    Okay, I'll output `json{\"Answer\": \"B\"}`.\n".repeat(8)
        );
        assert!(repeated_lines(&lines(&fenced)).is_some());
    }

    #[test]
    fn a_generation_looping_over_wrapped_sentences_is_found() {
        let sentence = "We need to produce code that is a complete sketch that reacts to clicks.";
        let text = format!(
            "fails with multiple repetitions:\n{}",
            format!("{sentence} {sentence}\n\n").repeat(3)
        );
        let (start, unit) = repeated_sentences(&lines(&text)).expect("a loop");
        assert_eq!((start, unit), (1, vec![sentence.to_owned()]));
        // Two sentences, one and a half to a line.
        let pair = "The answer is five. Let me check that again.";
        let text = format!("{pair} {pair} {pair}\n{pair} {pair} {pair}\n");
        let (_, unit) = repeated_sentences(&lines(&text)).expect("a loop");
        assert_eq!(unit.len(), 2);
    }

    #[test]
    fn one_message_a_line_is_no_sentence_loop() {
        // The same sentence once a line is a program saying it again, not a generation.
        let status = "Still loading the model weights from the shared disk.\n".repeat(12);
        assert_eq!(repeated_sentences(&lines(&status)), None);
        let polls = "Waiting for the server. Waiting for the server.\n".repeat(6);
        assert_eq!(repeated_sentences(&lines(&polls)), None);
        let pairs = "Server is not up yet. Sleeping for ten seconds.\n".repeat(10);
        assert_eq!(repeated_sentences(&lines(&pairs)), None);
        let batch = "The capital of France is Paris. It is known for the Eiffel Tower.\n".repeat(8);
        assert_eq!(repeated_sentences(&lines(&batch)), None);
        let few = "It is fine. It is fine. It is fine.\n";
        assert_eq!(repeated_sentences(&lines(few)), None);
    }

    #[test]
    fn logs_that_only_repeat_lines_are_not_loops() {
        let poll = "Waiting for the server to come up, retrying in five seconds\n".repeat(20);
        let records = "INFO: 127.0.0.1:50122 - \"GET /health HTTP/1.1\" 200 OK\nINFO: 127.0.0.1:50122 - \"GET /metrics HTTP/1.1\" 200 OK\n".repeat(10);
        let drawing = "      |                 |\n      |-----------------|\n".repeat(10);
        let frames =
            "  File \"model.py\", line 10, in forward\n    return self.layer(x)\n".repeat(10);
        let short = "Wait, but the answer is five.\nYes, that is correct.\n".repeat(5);
        let ended = format!(
            "{}The answer is 5.\n",
            "Wait, let me check that again.\nYes, that is right.\n".repeat(8)
        );
        // Found by a review against healthy logs: a chat smoke test, a determinism check that
        // prints the same answer run after run, a CI script waiting for its server, a retry
        // loop, llama-server's health probes, transformers' padding warnings on every call.
        let chat =
            "User: What is the capital of France?\nAssistant: The capital of France is Paris.\n"
                .repeat(8);
        let determinism = "Prompt: 'The capital of France is'\nGenerated text: ' Paris. It is also the largest city in the country.'\n".repeat(8);
        let curl = "curl: (7) Failed to connect to localhost port 8000 after 0 ms: Couldn't connect to server\nWaiting for the vLLM server to come up...\n".repeat(10);
        let retry = "Could not reach the inference server at http://localhost:30000, retrying in 10 seconds\nServer is not ready yet, the model may still be loading\n".repeat(10);
        let probes = "srv  log_server_r: request: GET /health 10.0.0.3 200\nsrv  log_server_r: request: GET /metrics 10.0.0.4 200\n".repeat(10);
        let warnings = "Setting `pad_token_id` to `eos_token_id`:151643 for open-end generation.\nA decoder-only architecture is being used, but right-padding was detected! For correct generation results, please set `padding_side='left'` when initializing the tokenizer.\n".repeat(8);
        for text in [
            poll,
            records,
            drawing,
            frames,
            short,
            ended,
            chat,
            determinism,
            curl,
            retry,
            probes,
            warnings,
        ] {
            assert_eq!(repeated_lines(&lines(&text)), None, "{text}");
        }
        // A record a logger wrote breaks the loop even where its words repeat.
        let mut logged = lines(&"Wait, let me check that again.\nYes, that is right.\n".repeat(8));
        logged[11] = None;
        assert_eq!(repeated_lines(&logged), None);
    }
}
