//! Token soup at the end of a log: a generation whose words come from many writing systems at
//! once (`ดาร价位 presenter 久しぶ האמריק流行пут崖耕地 conseils...`), what a model prints when its
//! logits are garbage (a broken kernel, a wrong quantization scale). Natural text, even
//! multilingual, mixes two or three systems in a line; soup mixes four or more. Looked for only in
//! the last lines the scan keeps, and only where no line of the log names a failure.

use unicode_script::{Script, UnicodeScript};

/// Writing systems in one line that make it soup.
const MIN_SCRIPTS: usize = 4;
/// Letters a writing system needs in the line to count (one stray letter is not a word).
const MIN_LETTERS: usize = 2;

/// The writing systems `line` mixes, by name, if it mixes at least [`MIN_SCRIPTS`].
pub(crate) fn mixed_scripts(line: &str) -> Option<Vec<&'static str>> {
    let mut counts: Vec<(Script, usize)> = Vec::new();
    for script in line
        .chars()
        .filter(|c| c.is_alphabetic())
        .map(writing_system)
    {
        if matches!(script, Script::Common | Script::Inherited | Script::Unknown) {
            continue;
        }
        match counts.iter_mut().find(|(s, _)| *s == script) {
            Some((_, n)) => *n += 1,
            None => counts.push((script, 1)),
        }
    }
    let scripts: Vec<&'static str> = counts
        .into_iter()
        .filter(|&(_, n)| n >= MIN_LETTERS)
        .map(|(script, _)| script.full_name())
        .collect();
    (scripts.len() >= MIN_SCRIPTS).then_some(scripts)
}

/// The script of `c`, with Japanese counted as one system (it writes Han and kana together).
fn writing_system(c: char) -> Script {
    match c.script() {
        Script::Hiragana | Script::Katakana => Script::Han,
        script => script,
    }
}

#[cfg(test)]
mod tests {
    use super::mixed_scripts;

    #[test]
    fn a_generation_of_many_scripts_is_soup() {
        let soup = "`ดาร价位 presenter 久しぶ האמריק流行пут崖耕地 conseils.quantity interesse семьסכום keine人们";
        let scripts = mixed_scripts(soup).expect("soup");
        assert!(scripts.len() >= 4, "{scripts:?}");
        assert!(scripts.contains(&"Cyrillic") && scripts.contains(&"Hebrew"));
    }

    #[test]
    fn multilingual_text_is_not_soup() {
        for line in [
            "Translate 'hello' into Russian: привет, and Japanese: こんにちは (konnichiwa)",
            "答：北京是中国的首都。The capital of China is Beijing.",
            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s",
            "Ελληνικά, русский, English", // three systems
            "a б γ 中 ש ก",               // one letter each
        ] {
            assert_eq!(mixed_scripts(line), None, "{line}");
        }
    }
}
