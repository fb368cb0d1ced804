//! Token soup at the end of a log: a generation whose words come from many writing systems at
//! once (`ดาร价位 presenter 久しぶ האמריק流行пут崖耕地 conseils...`), what a model prints when its
//! logits are garbage (a broken kernel, a wrong quantization scale). A translation or a list of
//! languages mixes systems too, but word by word (`Привет, 你好, 안녕하세요`); soup glues them
//! together inside its words (`流行пут崖`, `семьסכום`). So a line is soup when it mixes four
//! systems or more and at least two of its words mix two or more. Looked for only in the last
//! lines the scan keeps, and only where no line of the log names a failure. Three systems are
//! soup too where a word glues two that are not Latin (`blanksยะ你在inalg`: Thai and Han inside
//! one word): Chinese or Japanese text quoting English runs into it (`使用vllm部署`), but no prose
//! writes Thai into Chinese without a space. Two systems are soup where two words each glue Latin
//! and Cyrillic (or Greek) letters together (`progressadvраб`, `ховgenceariest`): languages of
//! one kind of alphabet put a space or a sign between a Russian word and an English one.

use unicode_script::{Script, UnicodeScript};

/// Writing systems in one line that make it soup.
const MIN_SCRIPTS: usize = 4;
/// Words (between whitespace) that each mix writing systems.
const MIN_MIXED_WORDS: usize = 2;
/// Letters a writing system needs in the line to count (one stray letter is not a word).
const MIN_LETTERS: usize = 2;
/// Writing systems other than Latin that one word glues together to be soup on its own.
const GLUED_SYSTEMS: usize = 3;

/// The writing systems `line` mixes, by name, if it is soup: at least [`MIN_SCRIPTS`] systems,
/// and at least [`MIN_MIXED_WORDS`] words that each mix two.
pub(crate) fn mixed_scripts(line: &str) -> Option<Vec<&'static str>> {
    let symbols_out = without_greek_symbols(line);
    let line = symbols_out.as_ref();
    let glued_alphabets = line
        .split_whitespace()
        .filter(|word| glues_alphabets(word))
        .count();
    let scripts: Vec<&'static str> = letter_counts(line)
        .into_iter()
        .filter(|&(_, n)| n >= MIN_LETTERS)
        .map(|(script, _)| script.full_name())
        .collect();
    if glued_alphabets >= MIN_MIXED_WORDS {
        return Some(scripts);
    }
    if scripts.len() < MIN_SCRIPTS - 1 {
        return None;
    }
    let words: Vec<&str> = line
        .split_whitespace()
        .filter(|word| letter_counts(word).len() >= 2)
        .collect();
    let enough = scripts.len() >= MIN_SCRIPTS || words.iter().any(|word| glues_non_latin(word));
    // One word that glues three systems, none of them Latin (`ويم三项ただしЂнят`: Arabic, Han
    // and Cyrillic, `r10734`), is soup on its own in a line of four: no language writes that. One
    // capitalised run (a name quoted in Chinese, `在俄语中Москва叫莫斯科`) counts, not two.
    let glued_three = scripts.len() >= MIN_SCRIPTS
        && words
            .iter()
            .any(|word| non_latin_systems(word, true) >= GLUED_SYSTEMS);
    (enough && (words.len() >= MIN_MIXED_WORDS || glued_three)).then_some(scripts)
}

/// `word` holds runs of two letters or more of two writing systems that are not Latin. Korean
/// counts as Han here: it glues its Hanja glosses to Hangul (`대한민국(大韓民國)`); a single Greek
/// letter in Chinese or Japanese text is a symbol (`α角`, `β版`), not a word. A capitalised word of
/// a cased script is a name or a quoted word (`Привет是最常用的问候语`: Chinese puts no space around
/// it); soup's fragments are cut out of words (`февра雄`).
fn glues_non_latin(word: &str) -> bool {
    non_latin_systems(word, false) >= 2
}

/// How many writing systems other than Latin `word` glues together, in runs of two letters or
/// more; a capitalised run (a name) only where `names` says so, and then one at most.
fn non_latin_systems(word: &str, names: bool) -> usize {
    let system = |c: char| {
        c.is_alphabetic().then(|| match writing_system(c) {
            Script::Hangul => Script::Han,
            other => other,
        })
    };
    let mut systems: Vec<Script> = Vec::new();
    let mut named = false;
    for run in letter_runs(word, system) {
        if run.letters >= MIN_LETTERS
            && run.script != Script::Latin
            && (!run.capitalised || (names && !named))
            && !systems.contains(&run.script)
        {
            named |= run.capitalised;
            systems.push(run.script);
        }
    }
    systems.len()
}

/// `word` holds a run of two letters or more of one cased alphabet (Latin, Cyrillic, Greek) right
/// next to a run of two or more of another, no sign between them. One letter is a look-alike
/// typed by mistake (`Cuda` with a Cyrillic `а`) or a stray byte (`ГERROR`), not a fragment.
fn glues_alphabets(word: &str) -> bool {
    let alphabet = |c: char| {
        let script = c.script();
        (c.is_alphabetic() && matches!(script, Script::Latin | Script::Cyrillic | Script::Greek))
            .then_some(script)
    };
    letter_runs(word, alphabet).windows(2).any(|pair| {
        pair[1].touches && pair[0].letters >= MIN_LETTERS && pair[1].letters >= MIN_LETTERS
    })
}

/// A stretch of letters of one writing system inside a word.
struct Run {
    script: Script,
    letters: usize,
    /// An upper-case letter, then lower-case ones only.
    capitalised: bool,
    /// The run right before it ends at its first letter: no sign between them.
    touches: bool,
}

/// The runs of `word`'s letters, each letter's writing system as `system` says; `None` (no
/// letter, or one of a system left out) ends a run, and the next run does not touch it.
fn letter_runs(word: &str, system: impl Fn(char) -> Option<Script>) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    let mut in_run = false;
    for c in word.chars() {
        let Some(script) = system(c) else {
            in_run = false;
            continue;
        };
        match runs.last_mut() {
            Some(run) if in_run && run.script == script => {
                run.letters += 1;
                run.capitalised &= c.is_lowercase();
            }
            _ => runs.push(Run {
                script,
                letters: 1,
                capitalised: c.is_uppercase(),
                touches: in_run,
            }),
        }
        in_run = true;
    }
    runs
}

/// `line` with its Greek letters taken out where none of them forms a word of three letters:
/// maths and physics write single Greek letters, or two, as symbols (`α+β`, `αβ坐标系`, `10Ω`),
/// in any language's text.
fn without_greek_symbols(line: &str) -> std::borrow::Cow<'_, str> {
    let is_greek = |c: char| c.is_alphabetic() && c.script() == Script::Greek;
    let mut run = 0;
    let greek_word = line.chars().any(|c| {
        run = if is_greek(c) { run + 1 } else { 0 };
        run >= 3
    });
    if greek_word || !line.chars().any(is_greek) {
        return std::borrow::Cow::Borrowed(line);
    }
    std::borrow::Cow::Owned(
        line.chars()
            .map(|c| if is_greek(c) { ' ' } else { c })
            .collect(),
    )
}

/// Letters per writing system in `text`, in order of first appearance.
fn letter_counts(text: &str) -> Vec<(Script, usize)> {
    let mut counts: Vec<(Script, usize)> = Vec::new();
    for script in text
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
    counts
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
    fn one_word_of_three_systems_not_latin_is_soup_in_a_line_of_four() {
        // Latin glued to Han is spaced apart before the check (Chinese quoting English), so the
        // line's only mixed word is the one of Arabic, Han (with kana) and Cyrillic.
        let soup = "Output: emerge_bundle 超越 getIntent stoolwindows Microsystems 轶细胞 udiantes ويم三项ただしЂнят Jar";
        let scripts = mixed_scripts(soup).expect("soup");
        assert_eq!(scripts.len(), 4, "{scripts:?}");
        // Two names in Chinese are no soup.
        assert_eq!(
            mixed_scripts("Answer: 在俄语中Москва叫莫斯科，希腊语Αθήνα是雅典 in English"),
            None
        );
        // Two systems glued in the one word are not enough.
        assert_eq!(
            mixed_scripts("Output: emerge 超越 Microsystems ويم三项 Ђнят Jar"),
            None
        );
    }

    #[test]
    fn three_scripts_glued_inside_a_word_are_soup() {
        let soup = "'content': 'มนุษย์\")).orthand Cumberland mult撒以及有大量的imest dpもらえ)y blanksยะ你在inalg'";
        let scripts = mixed_scripts(soup).expect("soup");
        assert_eq!(scripts.len(), 3, "{scripts:?}");
    }

    #[test]
    fn latin_and_cyrillic_glued_in_two_words_are_soup() {
        for soup in [
            "unprecedented social progressadvраб operationitelkeltc ScherobatiotviksochitelockUBtc/(ховgenceariestcwigotaetwork",
            "Output: hrteьюcardChild колоcardtreChild",
        ] {
            let scripts = mixed_scripts(soup).expect("soup");
            assert_eq!(scripts, ["Latin", "Cyrillic"], "{soup}");
        }
    }

    #[test]
    fn multilingual_text_is_not_soup() {
        for line in [
            "Translate 'hello' into Russian: привет, and Japanese: こんにちは (konnichiwa)",
            "答：北京是中国的首都。The capital of China is Beijing.",
            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s",
            "Ελληνικά, русский, English", // three systems
            "a б γ 中 ש ก",               // one letter each
            "Generated text: 'Hello in other languages: Bonjour, Привет, 你好, こんにちは, 안녕하세요, مرحبا, שלום, नमस्ते.'",
            "Prompt: 'Say hello in Russian, Greek, Chinese and Korean.', Generated text: ' Привет! Γειά σου! 你好! 안녕하세요!'",
            "Supported languages: English, Deutsch, Русский, 中文, 日本語, 한국어, العربية, हिन्दी",
            "使用vllm部署Qwen模型时报错，日志如下：CUDA error了",
            "これはGPUのテストです。vLLMで実行するとerrorになります",
            "模型输出：Привет是俄语的hello",
            "Generated text: ' 일본국(日本国), 약칭 일본(日本)은 동아시아 태평양에 있는 일본 열도의 큰 섬들로 구성된 나라이다.'",
            "{\"text\":\"解：由题意得α+β=90°，所以sin²α+sin²β=1，答案为1。\"}",
            "设α角为30°，则β角为60°，所以sinα=0.5。电阻R=10Ω，其中Ω为欧姆",
            "本ソフトはα版とβ版があります。vLLMで動作確認済み。v2.0ではβ版のみ提供。",
            "Generated text: \"두 근을 α, β라 하면 α+β=-b/a 이고 αβ값은 c/a 이다 (Vieta).\"",
            "Clarke 变换将 abc 坐标系转换到αβ坐标系，Park 变换再将αβ坐标系转换到 dq 坐标系。",
            "Generated text: '俄语的“Привет”就是英语的 hello，意思是“你好”。Привет是最常用的问候语。'",
            "Ошибка:CUDA error: out of memory; модель:Qwen2-7B, Ошибка-ERROR",
            "ГERROR ГERROR: Cudа and Cudа again", // one stray letter each
            "Перевод: hello - привет, world - мир (English/Русский)",
        ] {
            assert_eq!(mixed_scripts(line), None, "{line}");
        }
    }
}
