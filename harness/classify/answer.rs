//! An empty answer printed one key a line: a client or server that pretty-prints OpenAI's chat
//! schema spreads the assistant's message over lines (`"message": {`, `"role": "assistant",`,
//! `"content": "",`), where the one-line rule `empty-generation` cannot see the message around
//! the empty text. LM Studio's server log (`r9886`, `r10729`), vLLM-Ascend's and SGLang's
//! responses pasted from curl (`r10503`, `r6806`) print it so. Looked for in the last lines only,
//! and only where no line of the log names a failure.

/// Lines the opener and the role may be above the empty text (one key a line).
const REACH: usize = 4;
/// Lines the rest of the message may run below it (tool calls, refusal, annotations, audio).
const BELOW: usize = 40;

/// The index in `lines` (each trimmed of prefixes) of the `"content": ""` line of an assistant
/// message that holds no text, no tool call and no thinking: an answer of nothing. A streamed
/// delta opens every stream with empty content, and a request may carry an empty system or user
/// message: only an object opened as `"message": {` with the assistant's role counts.
pub(crate) fn empty_message(lines: &[&str]) -> Option<usize> {
    (0..lines.len()).find(|&i| {
        is_empty_content(lines[i]) && {
            let (before, after, end) = object_around(lines, i);
            opens_message(before.first().copied())
                && before.iter().chain(after).any(|l| is_assistant(l))
                && !after.iter().chain(before).any(|l| does_something_else(l))
                && !closes_stream(&lines[end.min(lines.len())..])
        }
    })
}

/// The keys above line `i` back to its object's opener (the opener first, at most [`REACH`]
/// lines up), the lines below it down to the object's closing brace (nested lists and objects
/// walked through, at most [`BELOW`] lines), and the index of the line after that brace.
fn object_around<'a>(lines: &'a [&'a str], i: usize) -> (&'a [&'a str], &'a [&'a str], usize) {
    let from = (i.saturating_sub(REACH)..i)
        .rev()
        .find(|&j| lines[j].trim_end().ends_with('{'))
        .unwrap_or(i);
    let end = lines.len().min(i + 1 + BELOW);
    let mut depth = 0i32;
    let mut to = end;
    for (j, line) in lines.iter().enumerate().take(end).skip(i + 1) {
        let line = line.trim();
        if depth == 0 && line.starts_with('}') {
            to = j;
            break;
        }
        depth += nesting(line);
    }
    (&lines[from..i], &lines[i + 1..to], to + 1)
}

/// How much deeper a line leaves the JSON it is part of: brackets opened less those closed,
/// outside strings.
fn nesting(line: &str) -> i32 {
    let mut depth = 0;
    let mut in_string = false;
    let mut escaped = false;
    for c in line.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            '{' | '[' if !in_string => depth += 1,
            '}' | ']' if !in_string => depth -= 1,
            _ => {}
        }
    }
    depth
}

/// Ollama ends every stream with a chunk whose message is empty and `"done": true` beside it:
/// the end of a good answer, not an empty one.
fn closes_stream(after: &[&str]) -> bool {
    after
        .iter()
        .take(3)
        .any(|l| matches!(key_value(l), Some(("done", "true"))))
}

/// `"content": ""` (or with single quotes, `'content': ''`) alone on its line.
fn is_empty_content(line: &str) -> bool {
    matches!(key_value(line), Some(("content", "\"\"" | "''")))
}

fn opens_message(line: Option<&str>) -> bool {
    line.is_some_and(|l| {
        let l = l.trim();
        matches!(
            l.strip_suffix('{').map(str::trim_end),
            Some("\"message\":" | "'message':")
        )
    })
}

fn is_assistant(line: &str) -> bool {
    matches!(
        key_value(line),
        Some(("role", "\"assistant\"" | "'assistant'"))
    )
}

/// A key that gives the message something other than text: tool calls (a list that opens with
/// an item), a function call, or a thinking or reasoning part with words.
fn does_something_else(line: &str) -> bool {
    match key_value(line) {
        Some(("tool_calls", value)) => value.starts_with('[') && value != "[]",
        Some(("function_call", value)) => value.starts_with('{'),
        Some(("thinking" | "reasoning" | "reasoning_content" | "reasoning_text", value)) => {
            value.len() > 2 && value != "null"
        }
        _ => false,
    }
}

/// The key and value of a line that holds one JSON (or Python repr) member, trailing comma
/// dropped: `"role": "assistant",` is `("role", "\"assistant\"")`.
fn key_value(line: &str) -> Option<(&str, &str)> {
    let line = line.trim();
    let line = line.strip_suffix(',').unwrap_or(line).trim_end();
    let quote = line.chars().next().filter(|c| matches!(c, '"' | '\''))?;
    let rest = &line[1..];
    let close = rest.find(quote)?;
    let key = &rest[..close];
    let value = rest[close + 1..].trim_start().strip_prefix(':')?.trim();
    (!key.is_empty() && !value.is_empty()).then_some((key, value))
}

#[cfg(test)]
mod tests {
    use super::empty_message;

    fn lines(text: &str) -> Vec<&str> {
        text.lines().map(str::trim).collect()
    }

    #[test]
    fn an_assistant_message_with_no_text_is_found() {
        let log = r#"{
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": "",
        "reasoning_content": "",
        "tool_calls": []
      },
      "finish_reason": "length"
    }
  ]
}"#;
        assert_eq!(empty_message(&lines(log)), Some(6));
        let compact =
            "\"message\":{\n\"role\":\"assistant\",\n\"content\":\"\", \n\"tool_calls\":null\n},";
        assert_eq!(empty_message(&lines(compact)), Some(2));
    }

    #[test]
    fn requests_deltas_tool_calls_and_thinking_are_no_empty_answer() {
        for log in [
            // A request's empty system message.
            "\"messages\": [\n{\n\"role\": \"system\",\n\"content\": \"\"\n},",
            // A streamed delta opens with empty content.
            "\"delta\": {\n\"role\": \"assistant\",\n\"content\": \"\"\n},",
            // A message that calls a tool has no text by design.
            "\"message\": {\n\"role\": \"assistant\",\n\"content\": \"\",\n\"tool_calls\": [\n{",
            "\"message\": {\n\"role\": \"assistant\",\n\"content\": \"\",\n\"thinking\": \"Okay, the user\"\n}",
            "\"message\": {\n\"role\": \"assistant\",\n\"content\": \"\",\n\"reasoning_content\": \"Okay\"\n}",
            // Tool calls below other keys of the message (vLLM, the OpenAI SDK).
            "\"message\": {\n\"role\": \"assistant\",\n\"content\": \"\",\n\"refusal\": null,\n\"annotations\": null,\n\"audio\": null,\n\"function_call\": null,\n\"tool_calls\": [\n{\n\"id\": \"chatcmpl-tool-1\"\n}\n]\n},",
            // Ollama's last stream chunk.
            "{\n\"model\": \"llama3\",\n\"message\": {\n\"role\": \"assistant\",\n\"content\": \"\"\n},\n\"done\": true\n}",
            // Content with text.
            "\"message\": {\n\"role\": \"assistant\",\n\"content\": \"Paris.\"\n}",
        ] {
            assert_eq!(empty_message(&lines(log)), None, "{log}");
        }
    }
}
