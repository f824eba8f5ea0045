//! Enums written by name in files and on the command line (frames, difficulties, COCO subsets).

/// The value of `all` whose `name` is `s`; an unknown name gets a message listing the valid ones,
/// so every such enum spells its names once, in its `name` method. The message is these enums'
/// `FromStr` error, which the command line prints as it is: there is one case, and nothing for a
/// caller to act on but the words.
pub fn parse_name<T: Copy>(s: &str, what: &str, all: &[T], name: fn(T) -> &'static str) -> Result<T, String> {
    all.iter().copied().find(|v| name(*v) == s).ok_or_else(|| {
        let names: Vec<&str> = all.iter().map(|v| name(*v)).collect();
        format!("unknown {what} {s:?}; expected one of {}", names.join(", "))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::Frame;

    #[test]
    fn finds_by_name_and_lists_the_names_otherwise() {
        assert_eq!(
            parse_name("qwen1000", "frame", &Frame::ALL, Frame::name),
            Ok(Frame::Qwen1000)
        );
        assert_eq!(
            parse_name("pixels", "frame", &Frame::ALL, Frame::name),
            Err("unknown frame \"pixels\"; expected one of pixel, resized, normalized, qwen1000".to_string())
        );
    }
}
