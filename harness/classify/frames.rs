//! A hang shown by Python frames alone, in py-spy's form: `wait (threading.py:320)`, one frame a
//! line, as `py-spy dump` prints them under each thread's title (`Thread 123 (idle): "MainThread"`,
//! which the `py-spy-dump` rule reads). Issue threads often paste the frames without the title.
//! No failing program prints that form (a Python traceback says `File "x.py", line 3, in f`), and
//! someone ran py-spy because the process had stopped moving. Looked for, like the loop and soup
//! checks, only in the last lines the scan keeps and only where no line of the log names a
//! failure: a fixed amount of work per log, none per line (the frames hold no word the
//! prefilter could look for that `[worker.py:12]` in every engine log line does not hold too).

use regex::Regex;
use std::sync::LazyLock;

/// Frames that make a stack: one or two could be a program's own wording.
const MIN_FRAMES: usize = 4;

/// The index of the first of `lines` (prefixes stripped) that is a frame in py-spy's form, if at
/// least [`MIN_FRAMES`] of them are.
pub(crate) fn py_spy_frames<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<usize> {
    static FRAME: LazyLock<Option<Regex>> = LazyLock::new(|| {
        Regex::new(r"^\s*(?:<\w+>|[A-Za-z_][\w.]*) \([^()\s]+\.py:\d+\)\s*$").ok()
    });
    let frame = FRAME.as_ref()?;
    let frames: Vec<usize> = lines
        .into_iter()
        .enumerate()
        .filter(|(_, line)| frame.is_match(line))
        .map(|(i, _)| i)
        .collect();
    (frames.len() >= MIN_FRAMES).then(|| frames[0])
}

#[cfg(test)]
mod tests {
    use super::py_spy_frames;

    #[test]
    fn frames_in_py_spys_form_make_a_stack() {
        let dump = [
            "the processes hang here:",
            "__to_tensor (pytorch_lightning/core/module.py:619)",
            "apply_to_collection (lightning_utilities/core/apply_func.py:51)",
            "log (pytorch_lightning/core/module.py:447)",
            "training_step (nemo/collections/nlp/models/language_modeling/megatron_gpt_model.py:653)",
            "<module> (train.py:12)",
        ];
        assert_eq!(py_spy_frames(dump), Some(1));
    }

    #[test]
    fn tracebacks_log_locations_and_a_few_frames_are_no_stack() {
        let traceback = [
            "Traceback (most recent call last):",
            "  File \"train.py\", line 12, in <module>",
            "    main()",
            "  File \"train.py\", line 8, in main",
            "RuntimeError: boom",
        ];
        assert_eq!(py_spy_frames(traceback), None);
        let engine = [
            "INFO 05-28 14:44:28 [loggers.py:116] Engine 000: Avg prompt throughput: 0.0 tokens/s",
            "Loading weights (model_loader.py:301) took 3.2 s",
            "wait (threading.py:320)",
            "get (queue.py:171)",
            "run (worker.py:90)",
        ];
        assert_eq!(py_spy_frames(engine), None);
    }
}
