//! libtorch reports a CUDA allocation that fails by an error, which tch's operations turn into a
//! panic deep inside a forward or backward, with a page of C++ frames. A panic hook turns that one
//! case into a short error naming the knobs that shrink a run's memory; every other panic keeps
//! Rust's own report.

use std::panic::PanicHookInfo;

/// The words libtorch's caching allocator starts its out-of-memory message with.
const CUDA_OUT_OF_MEMORY: &str = "CUDA out of memory";

/// Installs the hook: an out-of-memory panic prints [`message`] and ends the process with exit
/// code 1 (what a run wrote before stays: checkpoints and the files a resume reads are written
/// atomically); other panics go to the hook that was there before.
pub fn install() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info: &PanicHookInfo| {
        match panic_text(info).and_then(message) {
            Some(text) => {
                eprintln!("error: {text}");
                std::process::exit(1);
            }
            None => previous(info),
        }
    }));
}

fn panic_text<'a>(info: &'a PanicHookInfo) -> Option<&'a str> {
    let payload = info.payload();
    (payload.downcast_ref::<String>().map(String::as_str)).or_else(|| payload.downcast_ref::<&str>().copied())
}

/// The error for a panic whose text reports a CUDA out-of-memory (`None` for any other panic):
/// libtorch's own sentence (what it tried to allocate, what was free) without its C++ frames, and
/// what to change.
pub fn message(panic: &str) -> Option<String> {
    let start = panic.find(CUDA_OUT_OF_MEMORY)?;
    let first_line = panic[start..].lines().next().unwrap_or_default();
    let torch = first_line
        .split(" See documentation")
        .next()
        .unwrap_or(first_line)
        .trim_end();
    Some(format!(
        "the GPU ran out of memory ({torch}). `groundrl plan CONFIG --gpu-memory SIZE` shows a \
         training config's estimate part by part and the key that shrinks its largest part; most \
         often trainer.micro_batch_size (lower), model.gradient_checkpointing (true), \
         model.max_pixels (lower) or model.lora_rank (e.g. 16)"
    ))
}

#[cfg(test)]
mod tests {
    use super::message;

    #[test]
    fn an_out_of_memory_panic_becomes_a_short_error_with_the_knobs() {
        let panic = "Internal torch error: fused kernel swiglu: CUDA out of memory. Tried to allocate \
                     234.00 MiB. GPU 0 has a total capacity of 139.80 GiB of which 105.12 MiB is free. \
                     See documentation for Memory Management  (https://docs.pytorch.org/...)\n\
                     Exception raised from malloc at /pytorch/c10/cuda/CUDACachingAllocator.cpp:1574\n\
                     frame #0: c10::Error::Error(...)";
        let text = message(panic).unwrap();
        assert!(
            text.starts_with(
                "the GPU ran out of memory (CUDA out of memory. Tried to allocate 234.00 MiB. GPU 0 \
                 has a total capacity of 139.80 GiB of which 105.12 MiB is free.). `groundrl plan"
            ),
            "{text}"
        );
        assert!(
            !text.contains("frame #0") && !text.contains("See documentation"),
            "{text}"
        );
        assert!(text.contains("trainer.micro_batch_size"), "{text}");
        assert_eq!(
            message("index out of bounds: the len is 3 but the index is 7"),
            None
        );
    }
}
